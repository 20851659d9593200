"""The old name of :mod:`storages.runners.crewai`: imports keep working, with a warning."""

from __future__ import annotations

from .moved import warn_moved
from .runners.crewai import *  # noqa: F403
from .runners.crewai import __all__ as __all__

warn_moved("storages.crewai", "storages.runners.crewai")
