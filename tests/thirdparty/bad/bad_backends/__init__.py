"""Entry points the registry refuses, each without breaking another scheme (tests only)."""

from __future__ import annotations

from storages.registry import BackendSpec

NOT_A_SPEC = {"name": "notaspec"}

CLASH = BackendSpec(name="clash", schemes=("clash", "s3"), factory="bad_backends:Unused")
"""Claims the built-in s3 scheme: refused whole, s3:// stays the built-in backend."""

NEEDY = BackendSpec(
    name="needy",
    schemes=("needy",),
    factory="bad_backends.needy:Unused",
    extra="fast",
    requires=("no_such_driver_for_needy",),
)
"""Registered, but its driver is not installed: opening it names the distribution's extra."""
