"""Checkpoint storage backends for workflow runners, with one contract.

Drop-in for Microsoft Agent Framework: ``WorkflowBuilder(checkpoint_storage=open_storage(url))``.
Backends import lazily, so ``import storages`` needs none of the optional dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import maf as _maf  # noqa: F401  (registers MAF's codec plug-in before any codec is made)
from .base import BaseCheckpointStorage, CheckpointRecord, StoredBody
from .codec import CheckpointCodec
from .contract import (
    MAX_ID_LENGTH,
    AncestryEnd,
    AncestryWalk,
    Capability,
    CheckpointID,
    CheckpointInfo,
    CheckpointLike,
    CheckpointStorage,
    MafCheckpointStorage,
    WorkflowCheckpoint,
    validate_identifier,
)
from .errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    CheckpointTamperedError,
    CheckpointTypeNotAllowedError,
    EvictionPolicyError,
    GraphSignatureMismatchError,
    InvalidCheckpointError,
    InvalidCheckpointIdError,
    MissingDependencyError,
    NestedCheckpointDeletionError,
    StaleWriterError,
    StorageClosedError,
    StorageConfigurationError,
    StorageUnavailableError,
    UnserializableValueError,
    UnsupportedOperationError,
)
from .fencing import FencedStorage
from .integrity import IntegrityKeyProvider, IntegrityKeys
from .memory import InMemoryCheckpointStorage
from .urls import open_storage, supported_schemes

if TYPE_CHECKING:
    from .redis import RedisCheckpointStorage
    from .s3 import S3CheckpointStorage
    from .sqlite import SQLiteCheckpointStorage

_LAZY = {
    "SQLiteCheckpointStorage": "storages.sqlite",
    "RedisCheckpointStorage": "storages.redis",
    "S3CheckpointStorage": "storages.s3",
}


def installed_version() -> str:
    """This package's installed version, or "unknown" in a source tree never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("checkpoint-storages")
    except PackageNotFoundError:
        return "unknown"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'storages' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "MAX_ID_LENGTH",
    "AncestryEnd",
    "AncestryWalk",
    "BaseCheckpointStorage",
    "Capability",
    "CheckpointCodec",
    "CheckpointConflictError",
    "CheckpointCorruptedError",
    "CheckpointID",
    "CheckpointInfo",
    "CheckpointLike",
    "CheckpointNotFoundError",
    "CheckpointRecord",
    "CheckpointStorage",
    "CheckpointTamperedError",
    "CheckpointTypeNotAllowedError",
    "CheckpointStorageError",
    "EvictionPolicyError",
    "FencedStorage",
    "GraphSignatureMismatchError",
    "InMemoryCheckpointStorage",
    "IntegrityKeyProvider",
    "IntegrityKeys",
    "InvalidCheckpointError",
    "InvalidCheckpointIdError",
    "MafCheckpointStorage",
    "MissingDependencyError",
    "NestedCheckpointDeletionError",
    "RedisCheckpointStorage",
    "S3CheckpointStorage",
    "SQLiteCheckpointStorage",
    "StaleWriterError",
    "StorageClosedError",
    "StorageConfigurationError",
    "StorageUnavailableError",
    "StoredBody",
    "UnserializableValueError",
    "UnsupportedOperationError",
    "WorkflowCheckpoint",
    "installed_version",
    "open_storage",
    "supported_schemes",
    "validate_identifier",
]
