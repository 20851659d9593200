"""The engine: the contract implemented once, over the backend a storage holds.

Modules: ``store`` (:class:`CheckpointStore`: MAF's six methods, lifecycle, integrity API),
``lifecycle`` (open, follow a new loop, close), ``encoding`` (the records a save writes),
``reading`` (decoding what a read returned), ``sealing`` (seals and anchors, on a keyed handle),
``extensions`` (the operations beyond MAF's six), ``walk`` (ancestry assembly), ``writes`` (the
pending-writes log), ``receipts`` (signed prune receipts), ``validation`` (checks before
encoding), ``parts`` (what the collaborators share). The author API is storages/backend.py;
docs/backends.md is the guide.
"""

from __future__ import annotations

from .store import CheckpointStore
from .walk import DEFAULT_MAX_DEPTH
from .writes import is_writes_log_name, writes_log_name

__all__ = ["DEFAULT_MAX_DEPTH", "CheckpointStore", "is_writes_log_name", "writes_log_name"]
