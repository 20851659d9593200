"""The shared engine every backend subclasses; it now lives in :mod:`storages.engine`.

This module keeps every name it has always exported, so ``from storages.base import ...`` works
for backends inside and outside this project.
"""

from __future__ import annotations

from .engine import (
    CAPABILITY_PRIMITIVES,
    CORE_PRIMITIVES,
    DEFAULT_MAX_DEPTH,
    OPTIONAL_HOOKS,
    BaseCheckpointStorage,
    CheckpointRecord,
    FenceCheck,
    IndexEntry,
    MissingPrimitiveError,
    StoredBody,
    WalkRecords,
    body_digest,
    implemented_capabilities,
    info_from_index,
    is_writes_log_name,
    nested_id_conflict,
    writes_log_name,
)

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
