"""This package's installed version, for reports and ``--version``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version() -> str:
    """This package's installed version, or "unknown" in a source tree never installed."""
    try:
        return version("checkpoint-storages")
    except PackageNotFoundError:
        return "unknown"
