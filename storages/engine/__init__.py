"""The engine every backend is built on: it owns the contract, a backend supplies primitives.

Modules: ``records`` (what engine and backend exchange, index checks), ``primitives`` (the
primitives, the capability table, driver-error translation), ``storage`` (the template:
save/load/list/latest), ``extensions`` (capability-gated operations), ``walk`` (ancestry
assembly), ``writes`` (the pending-writes log), ``sealing`` (integrity glue), ``receipts`` (signed prune
receipts), ``handles``
(new_handle from recorded settings), ``validation`` (checks before encoding).
docs/backends.md is the guide.
"""

from __future__ import annotations

from .primitives import (
    CAPABILITY_PRIMITIVES,
    CORE_PRIMITIVES,
    OPTIONAL_HOOKS,
    MissingPrimitiveError,
    implemented_capabilities,
)
from .records import (
    CheckpointRecord,
    FenceCheck,
    IndexEntry,
    StoredBody,
    WalkRecords,
    body_digest,
    info_from_index,
    nested_id_conflict,
)
from .storage import BaseCheckpointStorage
from .walk import DEFAULT_MAX_DEPTH
from .writes import is_writes_log_name, writes_log_name

__all__ = [
    "CAPABILITY_PRIMITIVES",
    "CORE_PRIMITIVES",
    "DEFAULT_MAX_DEPTH",
    "OPTIONAL_HOOKS",
    "BaseCheckpointStorage",
    "CheckpointRecord",
    "FenceCheck",
    "IndexEntry",
    "MissingPrimitiveError",
    "StoredBody",
    "WalkRecords",
    "body_digest",
    "implemented_capabilities",
    "info_from_index",
    "is_writes_log_name",
    "nested_id_conflict",
    "writes_log_name",
]
