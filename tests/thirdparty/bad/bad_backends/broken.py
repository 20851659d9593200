"""Fails on import, as a backend module with a missing or broken dependency does."""

from __future__ import annotations

import no_such_module_for_broken  # noqa: F401

BACKEND = None
