"""The old name of :mod:`storages.runners.langgraph`: imports keep working, with a warning."""

from __future__ import annotations

from .moved import warn_moved
from .runners.langgraph import *  # noqa: F403
from .runners.langgraph import __all__ as __all__

warn_moved("storages.langgraph", "storages.runners.langgraph")
