"""Checkpoint storage backends for workflow runners, with one contract.

Drop-in for Microsoft Agent Framework: ``WorkflowBuilder(checkpoint_storage=open_storage(url))``.
Backends import lazily, so ``import storages`` needs none of the optional dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import maf as _maf  # noqa: F401  (registers MAF's codec plug-in before any codec is made)
from .codec import CheckpointCodec
from .engine import CheckpointStore
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
    BackendEntryPointError,
    BackendRegistrationError,
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    CheckpointTamperedError,
    CheckpointTypeNotAllowedError,
    ConditionalWritesNotEnforcedError,
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
from .registry import BackendSpec, lazy_exports
from .urls import open_storage, supported_schemes

if TYPE_CHECKING:  # precise types for the lazy exports below (at run time they come from the registry)
    from .redis import RedisCheckpointStorage
    from .s3 import S3CheckpointStorage
    from .sqlite import SQLiteCheckpointStorage

_LAZY = lazy_exports()
"""Each built-in backend's storage class, imported on first access (storages.registry)."""


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
    "BackendEntryPointError",
    "BackendRegistrationError",
    "BackendSpec",
    "CheckpointStore",
    "Capability",
    "CheckpointCodec",
    "CheckpointConflictError",
    "CheckpointCorruptedError",
    "CheckpointID",
    "CheckpointInfo",
    "CheckpointLike",
    "CheckpointNotFoundError",
    "CheckpointStorage",
    "CheckpointTamperedError",
    "CheckpointTypeNotAllowedError",
    "CheckpointStorageError",
    "ConditionalWritesNotEnforcedError",
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
    "UnserializableValueError",
    "UnsupportedOperationError",
    "WorkflowCheckpoint",
    "installed_version",
    "open_storage",
    "supported_schemes",
    "validate_identifier",
]
__all__ += sorted(set(_LAZY) - set(__all__))  # a built-in backend added to the registry is exported
