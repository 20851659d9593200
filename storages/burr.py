"""The old name of :mod:`storages.runners.burr`: imports keep working, with a warning."""

from __future__ import annotations

from .moved import warn_moved
from .runners.burr import *  # noqa: F403
from .runners.burr import __all__ as __all__

warn_moved("storages.burr", "storages.runners.burr")
