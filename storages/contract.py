"""The checkpoint storage contract: the checkpoint type, the storage protocol, capabilities.

This module is the specification every backend implements and the conformance kit checks.
The six methods MAF's runner calls keep MAF's exact signatures, so any storage here is a drop-in
``checkpoint_storage`` for ``agent_framework.WorkflowBuilder``; the rest are extensions, each
gated by a declared :class:`Capability`.

Semantics (the kit checks each one; ``docs/contract.md`` explains them):

* Reads return caller-owned objects; ``save`` snapshots the checkpoint at call time by encoding it.
* "Latest" is commit order: every save gets the next per-workflow sequence number from the
  backend. Timestamps are data, never order.
* Checkpoints are immutable: saving an id again with equal content is a no-op that returns the id;
  with different content it raises :class:`~storages.errors.CheckpointConflictError`.
* Ids and workflow names are non-empty strings of at most 256 characters without control
  characters; anything else raises :class:`~storages.errors.InvalidCheckpointIdError`.
* A stored body that cannot be decoded raises :class:`~storages.errors.CheckpointCorruptedError`
  naming its id, from every read that decodes it; nothing is skipped silently.
* Nested checkpoints (``nested`` capability): a checkpoint embedded anywhere in another one's
  values is stored once, as a record of its own that records its container. It loads and walks by
  its own id, is listed only with ``include_nested=True``, is saved and deleted atomically with
  its container, and cannot be deleted on its own.
* Ancestry (``ancestry``): a walk follows previous ids through every record, nested ones too,
  and says why it stopped: a root, a pruned ancestor (tombstone), a dangling link, a cycle, or
  the depth limit. It never loops.
* Writer fencing (``fencing``): ``save(checkpoint, expected_latest_id=X)`` stores only if the
  workflow's latest is ``X`` (None: it has none), checked atomically with the write; otherwise it
  raises :class:`~storages.errors.StaleWriterError` and stores nothing. A retry of a fenced save
  that succeeded returns its id: the retry finds its own checkpoint as the latest.
"""

from __future__ import annotations

import enum
import unicodedata
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, Self, TypeGuard, TypeVar, runtime_checkable

from .errors import InvalidCheckpointIdError

CheckpointID = str

MAX_ID_LENGTH = 256
"""Longest accepted checkpoint id or workflow name, in characters."""


CHECKPOINT_VERSION = "1.0"
"""The ``version`` a WorkflowCheckpoint states unless told otherwise (MAF's)."""


@dataclass(slots=True)
class WorkflowCheckpoint:
    """A workflow's state at a superstep boundary: MAF's 11 fields, names, order and defaults."""

    workflow_name: str
    graph_signature_hash: str
    checkpoint_id: CheckpointID = field(default_factory=lambda: str(uuid.uuid4()))
    previous_checkpoint_id: CheckpointID | None = None
    timestamp: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    messages: dict[str, list[Any]] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    pending_request_info_events: dict[str, Any] = field(default_factory=dict)
    iteration_count: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    version: str = CHECKPOINT_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Shallow field mapping, as MAF's ``to_dict``."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkflowCheckpoint:
        return cls(**data)


class Unfenced(enum.Enum):
    """The type of :data:`UNFENCED`: ``save()`` was given no ``expected_latest_id``."""

    UNFENCED = "unfenced"


UNFENCED = Unfenced.UNFENCED
"""Default of ``save(expected_latest_id=...)``: store without checking the latest (MAF's save).
None cannot serve, since ``expected_latest_id=None`` means "the workflow has no checkpoint yet"."""


CHECKPOINT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(WorkflowCheckpoint))
"""Field names in declaration order; the codec stores them in this order."""


class CheckpointLike(Protocol):
    """Anything with the 11 checkpoint fields: ours, MAF's, or a registered look-alike.

    Storages read these by attribute and give back an object of the class they were given.
    """

    workflow_name: str
    graph_signature_hash: str
    checkpoint_id: str
    previous_checkpoint_id: str | None
    timestamp: str
    messages: dict[str, list[Any]]
    state: dict[str, Any]
    pending_request_info_events: dict[str, Any]
    iteration_count: int
    metadata: dict[str, Any]
    version: str


class Capability(str, enum.Enum):
    """What a storage declares it supports. The kit checks declarations both ways: a declared
    capability works; an undeclared operation raises UnsupportedOperationError."""

    # Operations beyond MAF's six methods.
    SIGNATURE_FILTER = "signature_filter"
    """get_latest / list_* accept graph_signature_hash and return only matching checkpoints."""
    ANCESTRY = "ancestry"
    """walk_ancestry / walk_ancestry_ids follow previous ids to the root in one round trip."""
    NESTED = "nested"
    """Embedded checkpoints are stored once, addressable by id, listed by list_nested."""
    PRUNE = "prune"
    """prune(keep_last=N) and delete_workflow(), leaving tombstones for pruned ancestors."""
    TTL = "ttl"
    """Checkpoints expire after a configured time to live."""
    LIST_WORKFLOWS = "list_workflows"
    """list_workflows() names every workflow with a stored checkpoint."""
    RAW_ACCESS = "raw_access"
    """read_raw_body / write_raw_body expose stored bytes (for verify tooling and the kit)."""
    INSPECT = "inspect"
    """checkpoint_info / list_records / list_tombstones describe stored records without decoding."""
    FENCING = "fencing"
    """save(checkpoint, expected_latest_id=X) stores only while X is the workflow's latest (None: no
    checkpoint yet), atomically with the check, else raises StaleWriterError (writer fencing)."""
    PENDING_WRITES = "pending_writes"
    """put_writes / list_writes / delete_writes keep the writes a runner's tasks made against a
    checkpoint (LangGraph's pending writes): atomic per call, idempotent per (task_id, index)."""

    # Properties of the backend rather than operations.
    DURABLE = "durable"
    """Checkpoints survive closing every handle and opening a new one."""
    SHARED = "shared"
    """Handles from new_handle() (and other processes, where the backend allows) share one store."""

    def __str__(self) -> str:
        return self.value


OPERATION_CAPABILITIES: frozenset[Capability] = frozenset(
    {
        Capability.SIGNATURE_FILTER,
        Capability.ANCESTRY,
        Capability.NESTED,
        Capability.PRUNE,
        Capability.TTL,
        Capability.LIST_WORKFLOWS,
        Capability.RAW_ACCESS,
        Capability.INSPECT,
        Capability.FENCING,
        Capability.PENDING_WRITES,
    }
)


class AncestryEnd(str, enum.Enum):
    """Why an ancestry walk stopped."""

    ROOT = "root"
    """Reached a checkpoint whose previous id is None."""
    PRUNED = "pruned"
    """The next ancestor was pruned on purpose; a tombstone marks it."""
    MISSING = "missing"
    """The next ancestor id resolves to nothing: a dangling link."""
    CYCLE = "cycle"
    """The next ancestor was already visited."""
    DEPTH_LIMIT = "depth_limit"
    """The walk reached max_depth before a root."""

    def __str__(self) -> str:
        return self.value


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AncestryWalk(Generic[T]):
    """A walk from a checkpoint towards its root, newest first.

    ``end_id`` is the id the walk could not step to (PRUNED, MISSING, CYCLE), or the last
    visited id (ROOT, DEPTH_LIMIT).
    """

    items: tuple[T, ...]
    end: AncestryEnd
    end_id: CheckpointID | None

    @property
    def intact(self) -> bool:
        """True when the walk reached a root or a deliberate prune."""
        return self.end in (AncestryEnd.ROOT, AncestryEnd.PRUNED)


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What a storage's index knows about one stored record, read without decoding its body."""

    checkpoint_id: CheckpointID
    workflow_name: str
    previous_checkpoint_id: CheckpointID | None
    graph_signature_hash: str
    container_id: CheckpointID | None
    """The checkpoint this one is embedded in, or None for a checkpoint saved on its own."""
    sequence: int
    """Commit position within ``workflow_name`` (nested records are numbered too)."""
    size: int
    """Stored body size in bytes."""

    @property
    def nested(self) -> bool:
        return self.container_id is not None


@dataclass(frozen=True, slots=True, init=False)
class PendingWrite:
    """One write a task made against a checkpoint before the next one was saved.

    ``index`` is the write's place in its task's output; a negative index marks a special channel
    (LangGraph's ERROR, INTERRUPT, SCHEDULED, RESUME) whose latest write replaces the earlier one,
    where a write at a non-negative index is kept as first stored. ``value`` goes through the
    storage's codec like a checkpoint's values.
    """

    task_id: str
    index: int
    channel: str
    value: Any
    task_path: str = ""

    def __init__(self, task_id: str, index: int, channel: str, value: Any, task_path: str = "") -> None:
        # Through the slots' own setters: a frozen dataclass's generated __init__ goes through
        # object.__setattr__ per field, at 40% more, and a LangGraph run builds one per write
        # (the class stays frozen: assigning a field still raises).
        set_task_id, set_index, set_channel, set_value, set_task_path = _WRITE_SETTERS
        set_task_id(self, task_id)
        set_index(self, index)
        set_channel(self, channel)
        set_value(self, value)
        set_task_path(self, task_path)

    @property
    def replaces_earlier(self) -> bool:
        """True for a special-channel write: the latest stored for its (task_id, index) wins."""
        return self.index < 0


_WRITE_SETTERS: tuple[Callable[[PendingWrite, Any], None], ...] = tuple(
    vars(PendingWrite)[item.name].__set__ for item in fields(PendingWrite)
)
"""The slot setters of PendingWrite's fields, in field order (what its __init__ sets)."""


@runtime_checkable
class MafCheckpointStorage(Protocol):
    """MAF's ``CheckpointStorage`` protocol, method for method."""

    async def save(self, checkpoint: Any) -> CheckpointID: ...

    async def load(self, checkpoint_id: CheckpointID) -> Any: ...

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]: ...

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]: ...

    async def delete(self, checkpoint_id: CheckpointID) -> bool: ...

    async def get_latest(self, *, workflow_name: str) -> Any | None: ...


class CheckpointStorage(Protocol):
    """The full contract: MAF's six methods (with optional extension keywords), lifecycle,
    declared capabilities, and the capability-gated extensions."""

    @property
    def capabilities(self) -> frozenset[Capability]: ...

    # MAF's protocol. Keyword extensions default to MAF's behaviour.
    async def save(
        self, checkpoint: Any, *, expected_latest_id: CheckpointID | Unfenced | None = ...
    ) -> CheckpointID: ...

    async def load(
        self, checkpoint_id: CheckpointID, *, expected_graph_signature_hash: str | None = None
    ) -> Any: ...

    async def list_checkpoints(
        self,
        *,
        workflow_name: str,
        graph_signature_hash: str | None = None,
        include_nested: bool = False,
    ) -> list[Any]: ...

    async def list_checkpoint_ids(
        self,
        *,
        workflow_name: str,
        graph_signature_hash: str | None = None,
        include_nested: bool = False,
    ) -> list[CheckpointID]: ...

    async def delete(self, checkpoint_id: CheckpointID) -> bool: ...

    async def get_latest(
        self, *, workflow_name: str, graph_signature_hash: str | None = None
    ) -> Any | None: ...

    # Extensions, each gated by a capability.
    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = ...
    ) -> AncestryWalk[Any]: ...

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, *, max_depth: int = ...
    ) -> AncestryWalk[CheckpointID]: ...

    async def list_nested(self, checkpoint_id: CheckpointID) -> list[CheckpointID]: ...

    async def prune(self, *, workflow_name: str, keep_last: int) -> int: ...

    async def delete_workflow(self, *, workflow_name: str) -> int: ...

    async def list_workflows(self) -> list[str]: ...

    async def checkpoint_info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None: ...

    async def list_records(self, *, workflow_name: str | None = None) -> list[CheckpointInfo]: ...

    async def list_tombstones(self, *, workflow_name: str | None = None) -> list[CheckpointID]: ...

    async def read_raw_body(self, checkpoint_id: CheckpointID) -> bytes | None: ...

    async def write_raw_body(self, checkpoint_id: CheckpointID, body: bytes) -> None: ...

    async def put_writes(
        self, checkpoint_id: CheckpointID, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None: ...

    async def list_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> list[PendingWrite]: ...

    async def delete_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> int: ...

    # Lifecycle.
    def new_handle(self) -> Self: ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...


def is_plain_identifier(value: object) -> TypeGuard[str]:
    """An exact, non-empty, printable str within the limit: valid without a closer look (what
    fails this test, :func:`validate_identifier` decides and names)."""
    return type(value) is str and 0 < len(value) <= MAX_ID_LENGTH and value.isprintable()


def validate_identifier(value: object, field_name: str) -> str:
    """Return ``value`` if it is an acceptable id or workflow name, else raise
    InvalidCheckpointIdError naming the field."""
    if is_plain_identifier(value):  # every save checks three ids: the common case first
        return value
    if not isinstance(value, str):
        raise InvalidCheckpointIdError(field_name, value, f"must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidCheckpointIdError(field_name, value, "must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidCheckpointIdError(
            field_name, value, f"is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
        )
    if not value.isprintable():
        # isprintable() is False for spaces other than ' ' too; only refuse true control,
        # surrogate and unassigned-format characters, which break keys, paths and encodings.
        for position, char in enumerate(value):
            category = unicodedata.category(char)
            if category in ("Cc", "Cs"):
                kind = "control" if category == "Cc" else "surrogate"
                raise InvalidCheckpointIdError(
                    field_name, value, f"contains a {kind} character {char!r} at position {position}"
                )
    return value


__all__ = [
    "CHECKPOINT_FIELDS",
    "CHECKPOINT_VERSION",
    "MAX_ID_LENGTH",
    "AncestryEnd",
    "AncestryWalk",
    "Capability",
    "CheckpointID",
    "CheckpointInfo",
    "CheckpointLike",
    "CheckpointStorage",
    "MafCheckpointStorage",
    "OPERATION_CAPABILITIES",
    "UNFENCED",
    "Unfenced",
    "PendingWrite",
    "WorkflowCheckpoint",
    "is_plain_identifier",
    "validate_identifier",
]
