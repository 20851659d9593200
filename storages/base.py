"""The shared engine every backend subclasses; it now lives in :mod:`storages.engine`.

This module keeps every name it has always exported, so ``from storages.base import ...`` works
for backends inside and outside this project.
"""

from __future__ import annotations

from .engine import *  # noqa: F403 - this module is the engine's public names, by design
from .engine import __all__ as __all__
