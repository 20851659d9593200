"""Checkpoint storage backends for workflow runners, with one contract.

Drop-in for Microsoft Agent Framework: ``WorkflowBuilder(checkpoint_storage=open_storage(url))``.
Backends import lazily, so ``import storages`` needs none of the optional dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .contract import (
    AncestryEnd,
    AncestryWalk,
    Capability,
    CheckpointInfo,
    CheckpointStorage,
    WorkflowCheckpoint,
)
from .engine import CheckpointStore
from .errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    CheckpointTamperedError,
    CheckpointTypeNotAllowedError,
    GraphSignatureMismatchError,
    InvalidCheckpointError,
    InvalidCheckpointIdError,
    MissingDependencyError,
    NestedCheckpointDeletionError,
    StaleWriterError,
    StorageClosedError,
    StorageConfigurationError,
    StorageUnavailableError,
    StoreNotFoundError,
    UnserializableValueError,
    UnsupportedOperationError,
)
from .fencing import FencedStorage
from .integrity import IntegrityKeys
from .memory import InMemoryCheckpointStorage
from .registry import lazy_exports
from .runners import maf as _maf  # noqa: F401  (registers MAF's codec plug-in before any codec is made)
from .urls import open_storage, supported_schemes

if TYPE_CHECKING:  # precise types for the lazy exports below (at run time they come from the registry)
    from .redis import RedisCheckpointStorage
    from .s3 import S3CheckpointStorage
    from .sqlite import SQLiteCheckpointStorage

_LAZY = lazy_exports()
"""Each built-in backend's storage class, imported on first access (storages.registry)."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'storages' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AncestryEnd",
    "AncestryWalk",
    "CheckpointStore",
    "Capability",
    "CheckpointConflictError",
    "CheckpointCorruptedError",
    "CheckpointInfo",
    "CheckpointNotFoundError",
    "CheckpointStorage",
    "CheckpointTamperedError",
    "CheckpointTypeNotAllowedError",
    "CheckpointStorageError",
    "FencedStorage",
    "GraphSignatureMismatchError",
    "InMemoryCheckpointStorage",
    "IntegrityKeys",
    "InvalidCheckpointError",
    "InvalidCheckpointIdError",
    "MissingDependencyError",
    "NestedCheckpointDeletionError",
    "RedisCheckpointStorage",
    "S3CheckpointStorage",
    "SQLiteCheckpointStorage",
    "StaleWriterError",
    "StorageClosedError",
    "StorageConfigurationError",
    "StorageUnavailableError",
    "StoreNotFoundError",
    "UnserializableValueError",
    "UnsupportedOperationError",
    "WorkflowCheckpoint",
    "open_storage",
    "supported_schemes",
]
__all__ += sorted(set(_LAZY) - set(__all__))  # a built-in backend added to the registry is exported
