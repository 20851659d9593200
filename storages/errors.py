"""One error hierarchy for every storage.

Every error here derives from :class:`CheckpointStorageError`. When Microsoft Agent Framework is
importable, that base also derives from MAF's ``WorkflowCheckpointException``, so MAF's runner
handles our errors exactly as it handles its own storages' errors.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from .redaction import redact_text


def _runner_exception_base() -> type[Exception]:
    # Resolved once at import: MAF's package imports lazily, so this costs one module load.
    if importlib.util.find_spec("agent_framework") is None:
        return Exception
    try:
        from agent_framework.exceptions import WorkflowCheckpointException
    except ImportError:  # pragma: no cover - a broken MAF install
        return Exception
    return WorkflowCheckpointException


_RunnerException: Any = _runner_exception_base()


class CheckpointStorageError(_RunnerException):  # type: ignore[misc]
    """Base of every error raised by a checkpoint storage or its codec."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses take their own constructor arguments, so the default (call the class with
        # self.args) fails; rebuild from state so errors cross process boundaries intact.
        return (_rebuild_error, (type(self), self.args), self.__dict__)


def _rebuild_error(cls: type[CheckpointStorageError], args: tuple[Any, ...]) -> CheckpointStorageError:
    error = cls.__new__(cls)
    error.args = args
    return error


class CheckpointNotFoundError(CheckpointStorageError, LookupError):
    """No checkpoint with this id exists."""

    def __init__(self, checkpoint_id: str) -> None:
        # MAF's exact wording (no quotes): code and tests written against MAF match on it.
        super().__init__(f"No checkpoint found with ID {checkpoint_id}")
        self.checkpoint_id = checkpoint_id


class CheckpointCorruptedError(CheckpointStorageError):
    """A stored body could not be decoded or failed its integrity check."""

    def __init__(self, checkpoint_id: str, reason: str) -> None:
        super().__init__(f"Checkpoint {checkpoint_id!r} is corrupted: {reason}")
        self.checkpoint_id = checkpoint_id
        self.reason = reason


class CheckpointTamperedError(CheckpointCorruptedError):
    """A keyed storage read a record that is not what was signed, or a store older than an anchor.

    ``kind`` is one of :class:`storages.integrity.TamperKind`'s values; ``checkpoint_id`` names
    the record whose check failed. Nothing is skipped or repaired: the read raises.
    """

    def __init__(self, checkpoint_id: str, kind: str, reason: str) -> None:
        super().__init__(checkpoint_id, reason)
        self.message = f"Checkpoint {checkpoint_id!r} failed its integrity check ({kind}): {reason}"
        self.args = (self.message,)
        self.kind = str(kind)


class CheckpointTypeNotAllowedError(CheckpointStorageError):
    """A stored body names a type this storage's codec may not construct; the data is intact.

    Not a corruption: allowing the type (or reading where it is importable) loads the checkpoint.
    The message starts with MAF's own phrase for the same refusal.
    """

    def __init__(
        self,
        type_key: str,
        checkpoint_id: str | None = None,
        path: str | None = None,
        reason: str | None = None,
    ) -> None:
        where = "".join(
            (
                f" in checkpoint {checkpoint_id!r}" if checkpoint_id is not None else "",
                f" at {path}" if path is not None else "",
            )
        )
        because = f" ({reason})" if reason else ""
        super().__init__(
            f"Checkpoint deserialization blocked for type {type_key!r}{where}{because}. The stored data is "
            f"intact; allow the type with allowed_checkpoint_types=[{type_key!r}] (or allowed_modules=[...]) "
            f"on the storage, or the URL option allowed_checkpoint_types={type_key}"
        )
        self.type_key = type_key
        self.checkpoint_id = checkpoint_id
        self.path = path
        self.reason = reason


class InvalidCheckpointError(CheckpointStorageError, ValueError):
    """A checkpoint given to the storage is malformed; nothing was stored."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidCheckpointIdError(InvalidCheckpointError):
    """An id or workflow name is not a non-empty string of at most 256 characters without control
    characters."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"Invalid {field} {shown}: {reason}", field=field)
        self.value = value
        self.reason = reason


class UnserializableValueError(InvalidCheckpointError, TypeError):
    """A value in the checkpoint has a type the codec is not allowed to store."""

    def __init__(self, type_key: str, path: str, hint: str) -> None:
        super().__init__(f"Cannot store a value of type {type_key!r} at {path}: {hint}", field=path)
        self.type_key = type_key
        self.path = path


class CheckpointConflictError(CheckpointStorageError):
    """A checkpoint id was saved again with different content; checkpoints are immutable."""

    def __init__(self, checkpoint_id: str, detail: str | None = None) -> None:
        super().__init__(
            f"Checkpoint {checkpoint_id!r} already exists with different content; "
            "checkpoints are immutable, save the new state under a new id"
            if detail is None
            else f"Checkpoint {checkpoint_id!r}: {detail}"
        )
        self.checkpoint_id = checkpoint_id


class StaleWriterError(CheckpointConflictError):
    """A fenced save (``save(..., expected_latest_id=...)``) found the workflow's latest elsewhere
    than the writer expected: another writer moved it on. Nothing was stored."""

    def __init__(
        self,
        workflow_name: str,
        checkpoint_id: str,
        expected_latest_id: str | None,
        actual_latest_id: str | None,
        *,
        already_stored: bool = False,
    ) -> None:
        if already_stored:
            reason = (
                "it is already stored but is not the latest, and a save cannot make an older "
                "checkpoint the latest again"
            )
        else:
            reason = "another writer moved the workflow on; this writer is stale"
        super().__init__(
            checkpoint_id,
            f"refused: workflow {workflow_name!r} was expected at latest {expected_latest_id!r} but its "
            f"latest is {actual_latest_id!r}; {reason}. Nothing was stored",
        )
        self.workflow_name = workflow_name
        self.expected_latest_id = expected_latest_id
        self.actual_latest_id = actual_latest_id
        self.already_stored = already_stored
        """True when the checkpoint is stored already, with this content, but is not the latest."""


class GraphSignatureMismatchError(CheckpointStorageError):
    """A checkpoint's graph signature is not the one the caller can restore."""

    def __init__(self, checkpoint_id: str, expected: str, actual: str) -> None:
        super().__init__(
            f"Checkpoint {checkpoint_id!r} has graph signature {actual!r}, expected {expected!r}; "
            "the workflow graph has changed since the checkpoint was created"
        )
        self.checkpoint_id = checkpoint_id
        self.expected = expected
        self.actual = actual


class NestedCheckpointDeletionError(CheckpointStorageError):
    """A nested checkpoint belongs to the checkpoint it is embedded in; delete that one instead."""

    def __init__(self, checkpoint_id: str, container_id: str) -> None:
        super().__init__(
            f"Checkpoint {checkpoint_id!r} is embedded in checkpoint {container_id!r} and is deleted "
            "with it; it cannot be deleted on its own"
        )
        self.checkpoint_id = checkpoint_id
        self.container_id = container_id


class UnsupportedOperationError(CheckpointStorageError, NotImplementedError):
    """The storage does not declare the capability this operation needs."""

    def __init__(self, storage: str, operation: str, capability: str) -> None:
        super().__init__(
            f"{storage} does not support {operation}() (capability {capability!r} is not declared)"
        )
        self.storage = storage
        self.operation = operation
        self.capability = capability


class StorageUnavailableError(CheckpointStorageError):
    """The backend could not be reached or failed past its retry budget."""

    def __init__(self, operation: str, detail: str) -> None:
        # The detail usually quotes a driver's message, which may embed a URL with its password.
        detail = redact_text(detail)
        super().__init__(f"{operation} failed: {detail}")
        self.operation = operation
        self.detail = detail


class StorageClosedError(CheckpointStorageError):
    """The storage was used after aclose()."""

    def __init__(self, storage: str, operation: str) -> None:
        super().__init__(f"{storage} is closed; cannot {operation}()")
        self.storage = storage
        self.operation = operation


class StorageConfigurationError(CheckpointStorageError, ValueError):
    """A storage URL or option is invalid."""

    def __init__(self, message: str) -> None:
        # Messages quote the URL or option they reject; its credentials stay out of them.
        super().__init__(redact_text(message))


class StoreNotFoundError(StorageConfigurationError, LookupError):
    """A handle that only reads was asked to open a store that does not exist (a SQLite file, a
    PostgreSQL schema or its tables, an S3 bucket): it creates none, so the URL names nothing."""

    def __init__(self, storage: str, missing: str) -> None:
        super().__init__(f"{storage}: {missing}; a read-only handle creates nothing, so check the URL")
        self.storage = storage
        self.missing = missing


class EvictionPolicyError(StorageConfigurationError):
    """The server may evict the storage's keys under memory pressure (a Redis ``allkeys-*``
    ``maxmemory-policy``, or ``volatile-lru``/``-lfu``/``-random`` for a storage whose keys all
    have a TTL): acknowledged checkpoints would vanish without an error."""

    def __init__(self, storage: str, policy: str, node: str | None, evicts: str, opt_out: str) -> None:
        where = "the Redis server" if node is None else f"Redis node {node}"
        super().__init__(
            f"{storage}: {where} has maxmemory-policy {policy!r}, which lets it evict {evicts} when "
            "memory runs short, without telling the writer: saved checkpoints would silently "
            "become not found, and an evicted counter would reorder them. Set maxmemory-policy to "
            f"noeviction (see docs/redis.md), or pass {opt_out} to accept the risk"
        )
        self.storage = storage
        self.policy = policy
        self.node = node


class ConditionalWritesNotEnforcedError(StorageConfigurationError):
    """An S3-compatible store accepted a conditional write it should have refused (``If-None-Match:
    *`` on an existing object, or ``If-Match`` with a wrong ETag): it, or a proxy in front of it,
    ignores the conditions, so concurrent saves would overwrite each other without an error."""

    def __init__(self, storage: str, ignored: str, opt_out: str) -> None:
        super().__init__(
            f"{storage}: the store does not enforce conditional writes: {ignored}. On such a store "
            "(older MinIO, some gateways, a proxy that drops the headers) a save can overwrite "
            "another checkpoint and two writers can both win, without an error. Use a store that "
            f"enforces If-None-Match and If-Match (see docs/s3.md), or pass {opt_out} if exactly "
            "one writer ever uses this prefix (fencing is then unavailable)"
        )
        self.storage = storage
        self.ignored = ignored


class MissingDependencyError(CheckpointStorageError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(
        self, feature: str, extra: str | None, module: str, *, distribution: str = "checkpoint-storages"
    ) -> None:
        requirement = distribution if extra is None else f"{distribution}[{extra}]"
        if extra is None and module in sys.stdlib_module_names:
            # sqlite3: no pip install brings it back, only a Python built with it.
            message = f"{feature} needs the standard library's {module!r} module, which this Python lacks"
        else:
            message = f"{feature} needs the {module!r} package: pip install '{requirement}'"
        super().__init__(message)
        self.feature = feature
        self.extra = extra
        self.module = module
        self.distribution = distribution


class BackendRegistrationError(StorageConfigurationError):
    """A storage backend cannot be registered or built: a third-party backend claims a name or
    URL scheme another backend has, or its factory cannot be imported (storages.registry)."""

    def __init__(self, message: str, *, backend: str = "") -> None:
        super().__init__(message)
        self.backend = backend
        """The backend (or entry point) the error is about."""


class BackendEntryPointError(BackendRegistrationError):
    """An entry point of the ``checkpoint_storages.backends`` group does not give a usable
    BackendSpec; the message names the entry point and its distribution."""

    def __init__(self, entry_point: str, distribution: str, reason: str) -> None:
        super().__init__(
            f"storage backend entry point {entry_point!r} of {distribution} is not registered: {reason}",
            backend=f"entry point {entry_point}",
        )
        self.entry_point = entry_point
        self.distribution = distribution
        self.reason = reason


__all__ = [
    "BackendEntryPointError",
    "BackendRegistrationError",
    "CheckpointConflictError",
    "CheckpointCorruptedError",
    "CheckpointNotFoundError",
    "CheckpointStorageError",
    "CheckpointTamperedError",
    "CheckpointTypeNotAllowedError",
    "ConditionalWritesNotEnforcedError",
    "EvictionPolicyError",
    "GraphSignatureMismatchError",
    "InvalidCheckpointError",
    "InvalidCheckpointIdError",
    "MissingDependencyError",
    "NestedCheckpointDeletionError",
    "StorageClosedError",
    "StorageConfigurationError",
    "StaleWriterError",
    "StoreNotFoundError",
    "StorageUnavailableError",
    "UnserializableValueError",
    "UnsupportedOperationError",
]
