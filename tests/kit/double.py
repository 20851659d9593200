"""A small, correct storage for the kit's own tests, built on CheckpointStore's primitives.

Mutants (deliberately broken storages) subclass :class:`DoubleBackend` and override one primitive
each, the way an independent backend author would get it wrong; they never reach into the
built-in backends. The double keeps every record in a :class:`DoubleState` that its handles share
through a :class:`Backing`: process memory (``MemoryBacking``), or a file rewritten after every
write (``FileBacking``, durable and visible to other processes). Every primitive call counts as
one backend round trip, which the ``scale`` clauses read through :func:`round_trips`.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import os
import pickle
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, ClassVar, Self

from conformance import StorageTarget
from storages.backend import (
    Backend,
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    latest_record,
    nested_id_conflict,
    pruned_records,
    rivals_of,
)
from storages.codec import CheckpointCodec
from storages.codec.vocabulary import EncodedCheckpoint
from storages.contract import AncestryWalk, Capability, CheckpointID, CheckpointInfo
from storages.engine import CheckpointStore
from storages.errors import (
    CheckpointNotFoundError,
    GraphSignatureMismatchError,
    NestedCheckpointDeletionError,
)

_CODEC = CheckpointCodec()

OPERATIONS = frozenset(
    {
        Capability.SIGNATURE_FILTER,
        Capability.ANCESTRY,
        Capability.NESTED,
        Capability.PRUNE,
        Capability.LIST_WORKFLOWS,
        Capability.RAW_ACCESS,
        Capability.INSPECT,
    }
)
"""Every operation capability but ``ttl``."""


@dataclass
class Row:
    record: CheckpointRecord
    sequence: int
    saved_at: float = field(default_factory=time.monotonic)


@dataclass
class DoubleState:
    rows: dict[CheckpointID, Row] = field(default_factory=dict)
    """id -> row, in commit order (dicts keep insertion order)."""
    sequences: dict[str, int] = field(default_factory=dict)
    """Workflow name -> the last sequence number it handed out."""
    tombstones: dict[CheckpointID, str] = field(default_factory=dict)
    """Pruned id -> the workflow it was pruned from."""
    unindexed: dict[CheckpointID, bytes] = field(default_factory=dict)
    """Bodies written without their index entry (a crash between the two, for fault mutants):
    readable by id, never listed, and not blocking a save of the same id."""

    def children(self, checkpoint_id: CheckpointID) -> list[Row]:
        return sorted(
            (row for row in self.rows.values() if row.record.container_id == checkpoint_id),
            key=lambda row: row.record.position,
        )

    def family(self, row: Row) -> list[Row]:
        """A row and every row nested in it, at any depth."""
        found, pending = [row], [row]
        while pending:
            below = self.children(pending.pop().record.checkpoint_id)
            found += below
            pending += below
        return found

    def top_level(self, workflow_name: str) -> list[Row]:
        rows = self.rows.values()
        return [r for r in rows if r.record.workflow_name == workflow_name and not r.record.nested]


class Backing:
    """Where the handles of one double store keep their state."""

    round_trips = 0

    def read(self) -> DoubleState:
        raise NotImplementedError

    def write(self, state: DoubleState) -> None:
        raise NotImplementedError


class MemoryBacking(Backing):
    def __init__(self) -> None:
        self._state = DoubleState()

    def read(self) -> DoubleState:
        return self._state

    def write(self, state: DoubleState) -> None:
        self._state = state


_LOCKS_HELD: dict[Path, IO[bytes]] = {}
"""The lock files this process holds, by store path: one process never waits for itself."""


class FileBacking(Backing):
    """A pickle file replaced atomically after every write: durable, shared between processes.
    A primitive reads and writes it in one synchronous stretch (no await between), under an
    ``flock`` of a lock file beside it, taken by the read and released by the event loop once the
    stretch is over, so processes saving at the same time take turns."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lock(self) -> None:
        if self.path in _LOCKS_HELD:
            return  # this process holds it: its handles never run at the same time as each other
        held = open(self.path.with_suffix(".lock"), "ab")  # noqa: SIM115 - closed by release()
        fcntl.flock(held, fcntl.LOCK_EX)
        _LOCKS_HELD[self.path] = held
        asyncio.get_running_loop().call_soon(self.release)

    def release(self) -> None:
        held = _LOCKS_HELD.pop(self.path, None)
        if held is not None:
            fcntl.flock(held, fcntl.LOCK_UN)
            held.close()

    def read(self) -> DoubleState:
        self.lock()
        try:
            state: DoubleState = pickle.loads(self.path.read_bytes())
        except FileNotFoundError:
            return DoubleState()
        return state

    def write(self, state: DoubleState) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_bytes(pickle.dumps(state))
        os.replace(temporary, self.path)


class DoubleBackend(Backend):
    """A correct backend with every operation capability but ``ttl``; in memory unless given a
    :class:`FileBacking` (then also durable)."""

    capabilities = OPERATIONS | {Capability.SHARED}

    def __init__(self, backing: Backing | None = None) -> None:
        self.backing = backing if backing is not None else MemoryBacking()
        if isinstance(self.backing, FileBacking):
            self.capabilities = type(self).capabilities | {Capability.DURABLE}

    def new_handle(self) -> Self:
        return type(self)(self.backing)  # every handle shares the backing

    async def decode(self, stored: StoredBody) -> Any:
        """The checkpoint a body holds, decoded as an author's backend would (for mutants that
        order or filter by what is inside a body)."""
        nested = await self.nested_bodies([stored.checkpoint_id])
        return _CODEC.decode_checkpoint(
            stored.body, checkpoint_id=stored.checkpoint_id, nested=nested or None
        )

    # One state read (and at most one write) per primitive: each is one round trip.

    def _read(self) -> DoubleState:
        self.backing.round_trips += 1
        return self.backing.read()

    def _commit(self, state: DoubleState) -> None:
        self.backing.write(state)

    def _key(self, checkpoint_id: CheckpointID) -> str:
        """The key a record is stored under."""
        return checkpoint_id

    def _next_sequence(self, state: DoubleState, workflow_name: str) -> int:
        state.sequences[workflow_name] = state.sequences.get(workflow_name, 0) + 1
        return state.sequences[workflow_name]

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        state = self._read()
        existing = state.rows.get(self._key(records[0].checkpoint_id))
        if existing is not None:
            return InsertResult.of_stored_digest(existing.record.digest, records[0])
        self._write_family(state, records)
        return InsertResult.INSERTED

    def _write_family(self, state: DoubleState, records: Sequence[CheckpointRecord]) -> None:
        """Insert a family whose top id is absent; a taken nested id writes nothing."""
        for record in records[1:]:
            if self._key(record.checkpoint_id) in state.rows:
                raise nested_id_conflict(records, record.checkpoint_id)
        for record in records:
            row = Row(record, self._next_sequence(state, record.workflow_name))
            state.rows[self._key(record.checkpoint_id)] = row
        self._commit(state)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        # Implemented for FencingDouble; the double itself does not declare ``fencing``.
        state = self._read()
        latest = self.latest_id(state, records[0].workflow_name)
        existing = self.stored_digest(state, records[0].checkpoint_id)
        if existing is not None:
            return FenceCheck(latest, InsertResult.of_stored_digest(existing, records[0]))
        if latest != expected_latest_id:
            return FenceCheck(latest, None)
        self._write_family(state, records)
        return None

    # Readings of the state for mutants, so none needs to know how rows are keyed.

    def latest_id(self, state: DoubleState, workflow_name: str) -> CheckpointID | None:
        latest = latest_record([row.record for row in state.top_level(workflow_name)])
        return None if latest is None else latest.checkpoint_id

    def stored_digest(self, state: DoubleState, checkpoint_id: CheckpointID) -> str | None:
        row = state.rows.get(self._key(checkpoint_id))
        return None if row is None else row.record.digest

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        # With the index entry, as a backend reading body and index in one round trip returns it.
        state = self._read()
        row = state.rows.get(self._key(checkpoint_id))
        if row is None:
            body = state.unindexed.get(self._key(checkpoint_id))
            return None if body is None else StoredBody(checkpoint_id, body)
        return _stored(row)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = {row.record: row for row in self._read().top_level(workflow_name)}
        head = latest_record(list(rows), graph_signature_hash)
        if head is None:
            return None
        rivals = rivals_of(list(rows), head)
        return replace(_stored(rows[head]), rivals=[_stored(rows[rival]) for rival in rivals])

    def _rows(self, workflow_name: str, signature: str | None, include_nested: bool) -> list[Row]:
        rows = self._read().rows.values()
        return sorted(
            (
                row
                for row in rows
                if row.record.workflow_name == workflow_name
                and (include_nested or not row.record.nested)
                and signature in (None, row.record.graph_signature_hash)
            ),
            key=lambda row: row.sequence,
        )

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [_stored(r) for r in self._rows(workflow_name, graph_signature_hash, include_nested)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        rows = self._rows(workflow_name, graph_signature_hash, include_nested)
        return [row.record.checkpoint_id for row in rows]

    def _drop(self, state: DoubleState, row: Row) -> list[CheckpointID]:
        dropped = [member.record.checkpoint_id for member in state.family(row)]
        for checkpoint_id in dropped:
            del state.rows[self._key(checkpoint_id)]
        return dropped

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        state = self._read()
        row = state.rows.get(self._key(checkpoint_id))
        if row is None:
            return False
        if row.record.container_id is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, row.record.container_id)
        self._drop(state, row)
        self._commit(state)
        return True

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        state = self._read()
        return {
            member.record.checkpoint_id: member.record.body
            for container_id in checkpoint_ids
            if (row := state.rows.get(self._key(container_id))) is not None
            for member in state.family(row)[1:]
        }

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        state = self._read()
        row = state.rows.get(self._key(checkpoint_id))
        if row is None:
            return False
        old = row.record
        row.record = CheckpointRecord(
            old.checkpoint_id,
            old.workflow_name,
            old.previous_checkpoint_id,
            old.graph_signature_hash,
            body,
            old.digest,
            old.container_id,
            old.root_id,
            old.position,
        )
        self._commit(state)
        return True

    async def workflow_names(self) -> list[str]:
        return sorted({r.record.workflow_name for r in self._read().rows.values() if not r.record.nested})

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        state = self._read()
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            row = state.rows.get(self._key(current))
            if row is None:
                if current in state.tombstones:
                    tombstones.add(current)
                break
            links[current] = row.record.previous_checkpoint_id
            if with_bodies:
                bodies.update((m.record.checkpoint_id, m.record.body) for m in state.family(row))
            current = row.record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        state = self._read()
        if self._key(checkpoint_id) not in state.rows:
            return None
        return [row.record.checkpoint_id for row in state.children(checkpoint_id)]

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        state = self._read()
        rows = {row.record: row for row in state.top_level(workflow_name)}
        doomed = [rows[record] for record in pruned_records(list(rows), keep_last)]
        for row in doomed:
            for dropped in self._drop(state, row):
                state.tombstones[dropped] = workflow_name
        self._commit(state)
        return len(doomed)

    async def delete_workflow(self, workflow_name: str) -> int:
        state = self._read()
        rows = state.top_level(workflow_name)
        for row in rows:
            self._drop(state, row)
        for pruned in [i for i, name in state.tombstones.items() if name == workflow_name]:
            del state.tombstones[pruned]
        self._commit(state)
        return len(rows)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        row = self._read().rows.get(self._key(checkpoint_id))
        return None if row is None else row.record.info(row.sequence)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return [
            row.record.info(row.sequence)
            for row in self._read().rows.values()
            if workflow_name in (None, row.record.workflow_name)
        ]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return [i for i, name in self._read().tombstones.items() if workflow_name in (None, name)]


def _stored(row: Row) -> StoredBody:
    return StoredBody(row.record.checkpoint_id, row.record.body, entry=row.record.index_entry())


class DoubleStorage(CheckpointStore[DoubleBackend]):
    """The double behind the engine. Mutants of the public API (a storage overriding ``load``,
    ``walk_ancestry``, ...) subclass this; mutants of a primitive subclass :class:`DoubleBackend`."""

    backend_class: ClassVar[type[DoubleBackend]] = DoubleBackend

    def __init__(self, backing: Backing | None = None) -> None:
        super().__init__(self.backend_class(backing))


def storage_of(backend: Backend) -> CheckpointStore[Any]:
    """The storage an author builds over a backend: the engine holding it."""
    return CheckpointStore(backend)


def round_trips(storage: Any) -> int:
    """The kit's ``round_trips`` hook for a double: primitive calls so far on its store."""
    backing: Backing = storage.backend.backing
    return backing.round_trips


def double_target(
    subject: type[DoubleBackend] | type[DoubleStorage] = DoubleBackend, **target: Any
) -> StorageTarget:
    """A target whose handles share one in-memory double store, with the round-trip counter:
    ``subject`` is a backend class (put behind the engine) or a DoubleStorage class."""
    root = subject() if issubclass(subject, DoubleStorage) else storage_of(subject())
    target.setdefault("round_trips", round_trips)
    return StorageTarget(name=subject.__name__, factory=root.new_handle, **target)


class FencingDouble(DoubleBackend):
    """The double declaring ``fencing`` too: the base of the fencing family's mutants."""

    capabilities = DoubleBackend.capabilities | {Capability.FENCING}


class FencingStorage(DoubleStorage):
    """The fencing double behind the engine: the base of the fencing family's public-API mutants."""

    backend_class = FencingDouble


class WriteBehindBacking(FileBacking):
    """Keeps writes in memory and writes the file only when a handle closes: a crash loses them."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._pending: DoubleState | None = None

    def read(self) -> DoubleState:
        return self._pending if self._pending is not None else super().read()

    def write(self, state: DoubleState) -> None:
        self._pending = state

    def flush(self) -> None:
        if self._pending is not None:
            super().write(self._pending)


class WriteBehindStorage(DoubleBackend):
    """Declares durable and survives aclose(), but persists only at aclose()."""

    async def close(self) -> None:
        if isinstance(self.backing, WriteBehindBacking):
            self.backing.flush()


class ProcessMemoryStorage(DoubleBackend):
    """Declares durable, and its handles share one store, but the store lives in process memory."""

    capabilities = DoubleBackend.capabilities | {Capability.DURABLE}


PATH_VARIABLE = "KIT_DOUBLE_PATH"
"""Where the process openers below find the double's file (child processes inherit it)."""


def open_file_double() -> CheckpointStore[Any]:
    return storage_of(DoubleBackend(FileBacking(Path(os.environ[PATH_VARIABLE]))))


def open_write_behind() -> CheckpointStore[Any]:
    return storage_of(WriteBehindStorage(WriteBehindBacking(Path(os.environ[PATH_VARIABLE]))))


def open_process_memory() -> CheckpointStore[Any]:
    return storage_of(ProcessMemoryStorage())


class ExpiringStorage(DoubleBackend):
    """Declares ``ttl``: a record is gone from every read once its time to live has passed."""

    capabilities = DoubleBackend.capabilities | {Capability.TTL}
    ttl: float = 0.6

    def _expired(self, row: Row, now: float) -> bool:
        return now >= row.saved_at + self.ttl

    def _read(self) -> DoubleState:
        state = super()._read()
        now = time.monotonic()
        for key in [key for key, row in state.rows.items() if self._expired(row, now)]:
            del state.rows[key]
        return state


_PROCESS_SEQUENCE = itertools.count(1)
"""One counter for the whole process, kept nowhere else."""


class ProcessSequenceStorage(DoubleBackend):
    """Persists records, but numbers them from a counter in process memory: every handle of this
    process agrees, and another process starts again from 1."""

    def _next_sequence(self, state: DoubleState, workflow_name: str) -> int:
        return next(_PROCESS_SEQUENCE)


def open_process_sequence() -> CheckpointStore[Any]:
    return storage_of(ProcessSequenceStorage(FileBacking(Path(os.environ[PATH_VARIABLE]))))


_DELETED_IN_THIS_PROCESS: set[CheckpointID] = set()


class ProcessLocalDeletes(DoubleBackend):
    """Persists saves, but remembers deletes in process memory: this process's handles agree."""

    def _read(self) -> DoubleState:
        state = super()._read()
        for checkpoint_id in _DELETED_IN_THIS_PROCESS & set(state.rows):
            del state.rows[checkpoint_id]
        return state

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        if checkpoint_id not in self._read().rows:
            return False
        _DELETED_IN_THIS_PROCESS.add(checkpoint_id)
        return True


def open_process_local_deletes() -> CheckpointStore[Any]:
    return storage_of(ProcessLocalDeletes(FileBacking(Path(os.environ[PATH_VARIABLE]))))


class ReadsThrough(DoubleStorage):
    """A storage whose reads hand each checkpoint through :meth:`returned` (unchanged here): the
    base of mutants that return something other than what the engine decoded."""

    def returned(self, checkpoint: Any) -> Any:
        return checkpoint

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        return self.returned(await super().load(checkpoint_id, **options))

    async def get_latest(self, **options: Any) -> Any:
        checkpoint = await super().get_latest(**options)
        return None if checkpoint is None else self.returned(checkpoint)

    async def list_checkpoints(self, **options: Any) -> list[Any]:
        return [self.returned(checkpoint) for checkpoint in await super().list_checkpoints(**options)]

    async def walk_ancestry(self, checkpoint_id: CheckpointID, **options: Any) -> AncestryWalk[Any]:
        walk = await super().walk_ancestry(checkpoint_id, **options)
        return AncestryWalk(tuple(self.returned(item) for item in walk.items), walk.end, walk.end_id)


class DecodesItself(DoubleStorage):
    """A storage that decodes what its backend returns by itself (a seal verified where it has a
    key), checking only what :meth:`check` checks (nothing here): the base of mutants whose reads
    believe bodies the engine would refuse."""

    def check(
        self, stored: StoredBody, checkpoint: Any, workflow_name: str | None, signature: str | None
    ) -> None:
        """Raise CheckpointCorruptedError for a body this storage refuses."""

    async def _decoded(
        self, stored: StoredBody, workflow_name: str | None = None, signature: str | None = None
    ) -> Any:
        nested = stored.nested
        if nested is None:
            nested = await self.backend.nested_bodies([stored.checkpoint_id])
        body, sealed = stored.body, self.integrity_enabled
        if sealed:
            body = self.open_sealed(stored.checkpoint_id, body)[1]
            nested = {key: self.open_sealed(key, raw)[1] for key, raw in nested.items()}
        checkpoint = (
            self.codec.decode_checkpoint(
                body, checkpoint_id=stored.checkpoint_id, nested=nested or None, sealed=True
            )
            if sealed
            else self.codec.decode_checkpoint(body, checkpoint_id=stored.checkpoint_id, nested=nested or None)
        )
        self.check(stored, checkpoint, workflow_name, signature)
        return checkpoint

    async def load(
        self, checkpoint_id: CheckpointID, *, expected_graph_signature_hash: str | None = None, **options: Any
    ) -> Any:
        if options.get("anchor") is not None:  # anchored reads are the engine's
            return await super().load(
                checkpoint_id, expected_graph_signature_hash=expected_graph_signature_hash, **options
            )
        stored = await self.backend.load(checkpoint_id)
        if stored is None:
            raise CheckpointNotFoundError(checkpoint_id)
        checkpoint = await self._decoded(stored)
        if expected_graph_signature_hash not in (None, checkpoint.graph_signature_hash):
            raise GraphSignatureMismatchError(
                checkpoint_id, expected_graph_signature_hash, checkpoint.graph_signature_hash
            )
        return checkpoint

    async def get_latest(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, **options: Any
    ) -> Any:
        if options.get("anchor") is not None:  # anchored reads are the engine's
            return await super().get_latest(
                workflow_name=workflow_name, graph_signature_hash=graph_signature_hash, **options
            )
        stored = await self.backend.latest(workflow_name, graph_signature_hash)
        return None if stored is None else await self._decoded(stored, workflow_name, graph_signature_hash)

    async def list_checkpoints(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, include_nested: bool = False
    ) -> list[Any]:
        listed = await self.backend.list_bodies(
            workflow_name, graph_signature_hash, include_nested=include_nested
        )
        return [await self._decoded(stored, workflow_name, graph_signature_hash) for stored in listed]


class InlineCodec(CheckpointCodec):
    """Encodes a checkpoint's tree as one body, embedded checkpoints inline (as if the backend had
    forgotten to write the nested records)."""

    def encode_checkpoint_tree(self, checkpoint: Any, *, sealed: bool = False) -> list[EncodedCheckpoint]:
        return [EncodedCheckpoint(checkpoint, self.encode_checkpoint(checkpoint, sealed=sealed), None)]


class InlineStorage(DoubleStorage):
    """Declares ``nested`` but keeps embedded checkpoints inline in their container's body."""

    def __init__(self, backing: Backing | None = None) -> None:
        CheckpointStore.__init__(self, self.backend_class(backing), codec=InlineCodec())
