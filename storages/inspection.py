"""The old name of :mod:`storages.tools.inspection`: imports keep working, with a warning."""

from __future__ import annotations

from .moved import warn_moved
from .tools.inspection import *  # noqa: F403
from .tools.inspection import __all__ as __all__

warn_moved("storages.inspection", "storages.tools.inspection")
