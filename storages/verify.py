"""The old name of :mod:`storages.tools.verify`: imports keep working, with a warning."""

from __future__ import annotations

from .moved import warn_moved
from .tools.verify import *  # noqa: F403
from .tools.verify import __all__ as __all__

warn_moved("storages.verify", "storages.tools.verify")
