"""The old name of :mod:`storages.runners.maf`: imports keep working, with a warning."""

from __future__ import annotations

from .moved import warn_moved
from .runners.maf import *  # noqa: F403
from .runners.maf import __all__ as __all__

warn_moved("storages.maf", "storages.runners.maf")
