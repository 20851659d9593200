"""The old name of :mod:`storages.tools.copying.maf_import`: imports keep working, with a warning."""

from __future__ import annotations

from .moved import warn_moved
from .tools.copying.maf_import import *  # noqa: F403
from .tools.copying.maf_import import __all__ as __all__

warn_moved("storages.maf_import", "storages.tools.copying.maf_import")
