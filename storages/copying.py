"""The old name of :mod:`storages.tools.copying`: imports keep working, with a warning."""

from __future__ import annotations

from .moved import warn_moved
from .tools.copying import *  # noqa: F403
from .tools.copying import __all__ as __all__

warn_moved("storages.copying", "storages.tools.copying")
