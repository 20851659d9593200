"""The one warning every old import path gives (the shim modules left where a module moved)."""

from __future__ import annotations

import warnings


def warn_moved(old: str, new: str) -> None:
    """Warn, at the line that imported ``old``, that it is now ``new``.

    Level 3 is that line: this function, then the shim's module body; the import machinery's own
    frames in between are skipped by :mod:`warnings`.
    """
    warnings.warn(
        f"{old} has moved to {new}: import it from there ({old} will be removed)",
        DeprecationWarning,
        stacklevel=3,
    )
