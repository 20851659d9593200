"""The author API: what a backend implements, and what it is handed.

A storage is :class:`~storages.engine.CheckpointStore` (the contract, implemented once) over a
:class:`Backend` it holds. A backend implements the primitives below: public names, typed records
in and out (storages/records.py), each primitive atomic on its store (one round trip where the
store allows; the engine adds no locking). :data:`CAPABILITY_PRIMITIVES` says which primitives a
declared capability needs; :func:`check_backend` enforces it when a storage is built, naming what
is missing. docs/backends.md is the guide, examples/dict_storage.py a worked example.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import ClassVar, Protocol, Self, TypeVar

from .contract import Capability, CheckpointID, CheckpointInfo
from .records import (
    CheckpointRecord,
    FenceCheck,
    IndexEntry,
    InsertResult,
    Leftover,
    LeftoverKind,
    StoredBody,
    WalkRecords,
    body_digest,
    filed_under,
    info_from_index,
    is_engine_log_name,
    nested_id_conflict,
)

CORE_PRIMITIVES: tuple[str, ...] = ("insert", "load", "latest", "list_bodies", "list_ids", "remove")
"""Every backend implements these."""

CAPABILITY_PRIMITIVES: Mapping[Capability, tuple[str, ...]] = MappingProxyType(
    {
        Capability.SIGNATURE_FILTER: (),  # the core reads honour their graph_signature_hash argument
        Capability.ANCESTRY: ("walk",),
        Capability.NESTED: ("nested_bodies", "nested_ids"),  # and insert takes whole families
        Capability.PRUNE: ("prune", "delete_workflow"),
        Capability.TTL: (),  # a property of the backend's records; the kit reads ``ttl``
        Capability.LIST_WORKFLOWS: ("workflow_names",),
        Capability.RAW_ACCESS: ("overwrite_body",),  # reads go through the core ``load``
        Capability.INSPECT: ("info", "records", "tombstones"),
        Capability.FENCING: ("insert_fenced",),
        Capability.PENDING_WRITES: (),  # the engine keeps the log with the core primitives
        Capability.DURABLE: (),
        Capability.SHARED: (),
    }
)
"""Capability -> the primitives (beyond the core ones) a backend declaring it must implement."""


class MissingPrimitiveError(NotImplementedError):
    """A primitive was called that the backend does not implement."""

    def __init__(self, backend_class: type[object], primitive: str) -> None:
        needing = [c for c, names in CAPABILITY_PRIMITIVES.items() if primitive in names]
        if needing:
            why = "capability " + " and ".join(repr(c.value) for c in needing) + " needs it"
        else:
            why = "every backend needs it"
        super().__init__(
            f"{backend_class.__qualname__}.{primitive} is not implemented: {why} "
            "(docs/backends.md lists each primitive's duties)"
        )
        self.backend_class = backend_class
        self.primitive = primitive
        self.capabilities = needing


class Backend(abc.ABC):
    """A store's primitives, as the engine calls them.

    Subclasses set :attr:`capabilities` (a class attribute, or an instance attribute set in
    ``__init__`` when it depends on settings) and implement the core primitives plus those of each
    capability they declare.
    """

    capabilities: frozenset[Capability] = frozenset()
    """What this backend supports; see :class:`~storages.contract.Capability`."""

    orders_inserts: ClassVar[bool] = False
    """True when the inserts one handle starts commit in the order they were started (memory:
    each runs whole under a lock before its first await; SQLite: one queue of group commits).
    Otherwise (a pool of connections, concurrent requests) the engine starts one workflow's
    saves one after another, so that they commit in the order ``save`` was called
    (docs/contract.md, "Latest")."""

    ttl: float | None = None
    """Seconds a checkpoint lives after its save, on a backend declaring ``ttl``; else None. A
    plain attribute: a backend whose time to live is a setting assigns it in ``__init__``, as it
    does its capabilities."""

    def describe(self) -> str:
        """A short human name for messages and reports, e.g. ``sqlite:///path.db`` (no secrets)."""
        return type(self).__name__

    def new_handle(self) -> Self:
        """An independent backend on the same store with the same settings (its own connections).

        Works on a closed backend too: it reuses settings, not connections."""
        raise MissingPrimitiveError(type(self), "new_handle")

    # ------------------------------------------------------------------ lifecycle

    async def open(self, operation: str) -> None:  # noqa: B027 - optional hook
        """Connect and prepare the store; called lazily before the first operation, and again by
        the next operation if it raised. ``operation`` is the public operation that needs the
        store, for messages (a failed connect names it)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`open` acquired."""

    async def follow_loop(self) -> None:  # noqa: B027 - optional hook
        """The storage is used from an event loop other than the one it was opened on: replace
        what is bound to the old loop (connections, asyncio locks) without awaiting on it, since
        the old loop is usually closed. Backends holding nothing loop-bound need nothing here."""

    # ------------------------------------------------------------------ core

    @abc.abstractmethod
    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        """Insert a checkpoint (``records[0]``) and, with ``nested``, the records embedded in it
        (``records[1:]``), all or nothing, each with the next sequence number of its own workflow.

        If the checkpoint's id is stored, write nothing and say whether its body is the same
        (compare bytes, or ``record.digest`` with a stored digest). If a nested record's id is
        stored, write nothing and raise ``nested_id_conflict(records, id)``.
        """

    @abc.abstractmethod
    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        """The body stored under ``checkpoint_id`` (nested records too), or None. A backend that
        reads the nested records' bodies in the same round trip returns them in ``nested``, and
        one that reads the index entry returns it in ``entry`` (the engine checks the body
        against it)."""

    @abc.abstractmethod
    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        """The body of the workflow's head (optionally of one signature) and of its rivals, in
        one atomic read. The head is the top-level record with the highest sequence, then, while
        top-level records of the workflow with its signature name the current one as previous
        id, the one of them with the highest sequence, never one already visited
        (:func:`latest_record`). Its rivals (:func:`rivals_of`) go in ``StoredBody.rivals``; a
        backend that leaves them out resumes from the head alone. docs/contract.md, "Latest",
        says why."""

    @abc.abstractmethod
    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        """Bodies of the workflow in ascending sequence (top-level records unless include_nested)."""

    @abc.abstractmethod
    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        """Ids of the workflow in ascending sequence (top-level records unless include_nested).

        The engine checks every id against the identifier rules (the index is read from outside)
        unless the list is a :class:`CheckedIds`: ids only this process's checked saves wrote."""

    @abc.abstractmethod
    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one record and every record nested in it, atomically; True if it existed.

        A nested record is not deleted: raise NestedCheckpointDeletionError naming its container.
        """

    # ------------------------------------------------------------------ per capability

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        """:meth:`insert` behind a fence, in one atomic step: if the checkpoint's id is stored,
        write nothing and return the latest and whether the body is the same; else if the
        workflow's latest top-level record (as :meth:`latest` chooses it, any signature) is not
        ``expected_latest_id``, write nothing and return the latest; else insert and return
        None. Needed by ``fencing``.

        Make the same write as :meth:`insert` (one private function both call in their atomic
        step), so what a save stores is written once: check the fence, then write, and return
        ``FenceCheck.after_insert(latest, result)`` (docs/backends.md, "One write for a save")."""
        raise MissingPrimitiveError(type(self), "insert_fenced")

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        """Bodies of every record nested, at any depth, in the given records (more is harmless)."""
        raise MissingPrimitiveError(type(self), "nested_bodies")

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        """Direct children of a record by position, or None if the record does not exist."""
        raise MissingPrimitiveError(type(self), "nested_ids")

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        """The records an ancestry walk from ``checkpoint_id`` reaches, in one round trip.

        ``links`` is empty if ``checkpoint_id`` is not stored. See :class:`WalkRecords`.
        """
        raise MissingPrimitiveError(type(self), "walk")

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        """Delete the workflow's top-level records but the head, its rivals and the
        ``keep_last - 1`` others with the highest sequences (all of them with ``keep_last=0``:
        :func:`pruned_records`), with their nested records, and tombstone every deleted id,
        atomically; return the top-level count."""
        raise MissingPrimitiveError(type(self), "prune")

    async def delete_workflow(self, workflow_name: str) -> int:
        """Delete the workflow's top-level records, their nested records and the workflow's
        tombstones; return the top-level count."""
        raise MissingPrimitiveError(type(self), "delete_workflow")

    async def workflow_names(self) -> list[str]:
        """Every workflow name with at least one stored top-level record, in any order."""
        raise MissingPrimitiveError(type(self), "workflow_names")

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        """Replace a stored body (keep the stored digest: it records what was saved); False if
        the id is absent, and then write nothing."""
        raise MissingPrimitiveError(type(self), "overwrite_body")

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        """The index entry of one record (nested ones too), or None; ``info_from_index`` builds it."""
        raise MissingPrimitiveError(type(self), "info")

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        """Index entries of every record (or one workflow's), nested ones included, any order."""
        raise MissingPrimitiveError(type(self), "records")

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        """Ids pruned from the store (or from one workflow), any order."""
        raise MissingPrimitiveError(type(self), "tombstones")

    async def records_after(self, after: CheckpointID | None, limit: int) -> Sequence[CheckpointInfo]:
        """Optional: a page of the index for a streaming read. Up to ``limit`` entries of every
        record (nested ones included) whose id sorts after ``after`` (from the first with None),
        in the store's id order; fewer than ``limit`` only on the last page. Without it, a
        streaming read is one ``records`` call."""
        raise MissingPrimitiveError(type(self), "records_after")

    # ------------------------------------------------------------------ after faults (optional)

    async def leftovers(self, workflow_name: str | None) -> Sequence[Leftover]:
        """Optional: what faults left in the store (or in one workflow) that no operation clears
        by itself (:class:`~storages.records.LeftoverKind`): index entries without their record,
        records without their index entry, stage keys past their life. Read only. ``verify``
        reports each one. A backend whose every write is one transaction leaves none: the
        default finds none."""
        return ()

    async def repair_leftover(self, leftover: Leftover) -> str | None:
        """Optional: remove one leftover :meth:`leftovers` found with ``repairable`` set, after
        checking that it is still one; return what was done, or None if it is gone since (or the
        backend repairs nothing). ``verify --repair`` calls it."""
        return None


class LineageEntry(Protocol):
    """What the latest rule reads of a record: a CheckpointRecord or an index entry
    (CheckpointInfo)."""

    @property
    def checkpoint_id(self) -> CheckpointID: ...
    @property
    def previous_checkpoint_id(self) -> CheckpointID | None: ...
    @property
    def graph_signature_hash(self) -> str: ...


EntryT = TypeVar("EntryT", bound=LineageEntry)


def latest_record(records: Sequence[EntryT], graph_signature_hash: str | None = None) -> EntryT | None:
    """The head :meth:`Backend.latest` returns, given every top-level record of one workflow in
    ascending sequence (all signatures): the last of those with the signature (any, if None);
    then, while records with its signature name the current one as previous id, the last of
    them not yet visited. For a backend that reads a workflow's index whole; an indexed
    backend follows the same rule with a lookup by previous id."""
    candidates = [r for r in records if graph_signature_hash in (None, r.graph_signature_hash)]
    if not candidates:
        return None
    current = candidates[-1]
    visited = {current.checkpoint_id}
    while True:
        following = [
            r
            for r in records
            if r.previous_checkpoint_id == current.checkpoint_id
            and r.graph_signature_hash == current.graph_signature_hash
            and r.checkpoint_id not in visited
        ]
        if not following:
            return current
        current = following[-1]
        visited.add(current.checkpoint_id)


RIVALS_LIMIT = 64
"""At most this many rivals are read with a head: the ones committed last. Parallel steps wider
than this can resume from a checkpoint with less progress (docs/contract.md, "Latest")."""


def rivals_of(records: Sequence[EntryT], head: EntryT) -> list[EntryT]:
    """The head's rivals in ascending sequence, at most the :data:`RIVALS_LIMIT` committed last,
    given every top-level record of its workflow in ascending sequence. Each is a leaf: no record
    with its signature names it as previous id. Parallel steps build such leaves, and only their
    timestamps say which holds the most progress.

    * A head with a previous id: the other leaves with its previous id and signature (siblings).
    * A root head (no previous id; it is then the newest record of its signature): the leaf roots
      with its signature committed right before it, back to the first record (any signature) that
      is not one. Parallel steps that run before a run's first checkpoint build such roots, one
      after another at the end of the order; a root that some checkpoint continues, or any other
      record, ends the run, so separate runs that saved more than once never rival.
    """
    continued = {(r.previous_checkpoint_id, r.graph_signature_hash) for r in records}

    def is_leaf(record: EntryT) -> bool:
        return (record.checkpoint_id, record.graph_signature_hash) not in continued

    if head.previous_checkpoint_id is None:
        position = next(i for i, r in enumerate(records) if r.checkpoint_id == head.checkpoint_id)
        roots: list[EntryT] = []
        for record in reversed(records[:position]):
            if (
                record.previous_checkpoint_id is not None
                or record.graph_signature_hash != head.graph_signature_hash
                or not is_leaf(record)
                or len(roots) == RIVALS_LIMIT
            ):
                break
            roots.append(record)
        return roots[::-1]
    rivals = [
        r
        for r in records
        if r.previous_checkpoint_id == head.previous_checkpoint_id
        and r.graph_signature_hash == head.graph_signature_hash
        and r.checkpoint_id != head.checkpoint_id
        and is_leaf(r)
    ]
    return rivals[-RIVALS_LIMIT:]


class Stamped(Protocol):
    """What the resume choice reads of a decoded checkpoint."""

    @property
    def timestamp(self) -> str: ...


StampedT = TypeVar("StampedT", bound=Stamped)


def resume_point(candidates: Sequence[StampedT]) -> StampedT:
    """Of a head's rivals and the head, in ascending sequence (the head last), the one a run
    resumes from: the newest timestamp (ISO 8601; one without an offset is UTC, as MAF reads
    it); among equal timestamps the one with the highest sequence. A timestamp that does not
    parse ranks below every one that does."""
    best, best_moment = candidates[-1], _moment(candidates[-1].timestamp)
    for candidate in reversed(candidates[:-1]):
        moment = _moment(candidate.timestamp)
        if moment is not None and (best_moment is None or moment > best_moment):
            best, best_moment = candidate, moment
    return best


def _moment(timestamp: object) -> datetime | None:
    if not isinstance(timestamp, str):
        return None
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def pruned_records(records: Sequence[CheckpointRecord], keep_last: int) -> list[CheckpointRecord]:
    """What :meth:`Backend.prune` deletes, given every top-level record of the workflow in
    ascending sequence: everything with ``keep_last=0``; else all but the head
    (:func:`latest_record`), its rivals (:func:`rivals_of`) and the ``keep_last - 1`` others
    with the highest sequences."""
    if keep_last <= 0:
        return list(records)
    head = latest_record(records)
    if head is None:
        return []
    protected = {id(head), *(id(r) for r in rivals_of(records, head))}
    others = [r for r in records if id(r) not in protected]
    return others[: max(0, len(others) - (keep_last - 1))]


class CheckedIds(list[CheckpointID]):
    """A listing whose every id a save of this process checked (an in-process store's index):
    :meth:`Backend.list_ids` returns one to spare the engine a second check of each id
    (docs/benchmarks.md, "Memory list_checkpoint_ids": 147 µs -> 10.6 µs at 1,000)."""

    __slots__ = ()


def implements(backend_class: type[Backend], primitive: str) -> bool:
    """True when ``backend_class`` overrides the default of ``primitive``."""
    return getattr(backend_class, primitive, None) is not getattr(Backend, primitive, None)


def implemented_capabilities(backend_class: type[Backend]) -> frozenset[Capability]:
    """The capabilities whose primitives ``backend_class`` implements (the kit's table shows it)."""
    return frozenset(
        capability
        for capability, names in CAPABILITY_PRIMITIVES.items()
        if names and all(implements(backend_class, name) for name in names)
    )


def check_backend(backend: Backend) -> None:
    """Raise TypeError, naming every gap, if ``backend`` declares a capability whose primitives
    it does not implement (or declares something that is not a Capability)."""
    if not isinstance(backend, Backend):
        raise TypeError(f"{type(backend).__qualname__} is not a storages.backend.Backend")
    declared = backend.capabilities
    strays = [c for c in declared if not isinstance(c, Capability)]
    if strays:
        raise TypeError(
            f"{type(backend).__qualname__} declares capabilities that are not Capability: {strays!r}"
        )
    missing = {
        capability: lacking
        for capability in declared
        if (lacking := [n for n in CAPABILITY_PRIMITIVES[capability] if not implements(type(backend), n)])
    }
    if missing:
        rows = "; ".join(f"{c.value!r} needs {', '.join(names)}" for c, names in missing.items())
        raise TypeError(
            f"{type(backend).__qualname__} declares capabilities whose primitives it does not "
            f"implement: {rows} (implement them or leave the capability out; docs/backends.md)"
        )


__all__ = [
    "CAPABILITY_PRIMITIVES",
    "CORE_PRIMITIVES",
    "Backend",
    "CheckedIds",
    "CheckpointRecord",
    "FenceCheck",
    "IndexEntry",
    "InsertResult",
    "Leftover",
    "LeftoverKind",
    "RIVALS_LIMIT",
    "MissingPrimitiveError",
    "StoredBody",
    "WalkRecords",
    "body_digest",
    "check_backend",
    "filed_under",
    "implemented_capabilities",
    "implements",
    "info_from_index",
    "is_engine_log_name",
    "latest_record",
    "nested_id_conflict",
    "pruned_records",
    "resume_point",
    "rivals_of",
]
