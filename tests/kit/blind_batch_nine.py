"""A ninth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/registry.md, docs/integrity.md, docs/conformance.md's prose, examples/ and
the public author API could ship. Four styles:

* ``ActorBackend``: every primitive is a message sent over an ``asyncio.Queue`` to one task per
  handle (started on the loop the handle is used from), which owns nothing but the store's
  tables (``Tables``: every primitive as a plain function, shared by the store's handles) and
  applies what it finds queued as one batch (a group commit), answering each caller's future;
* ``EventBackend``: an event-sourced store. The store is an append-only log of the writes that
  changed something (saved, removed, pruned, workflow deleted, body overwritten); each handle
  holds a projection (``Tables``) it brings up to date from the log before every primitive, and
  every ``SNAPSHOT_EVERY`` events the log keeps a snapshot of the projection and drops the
  events before it, so a new or lagging handle starts from the snapshot;
* ``TtlBackend``: a time to live over the built-in in-memory backend. Each top-level record's
  deadline (saved at + ``ttl``) is kept beside the store; every primitive first sweeps what is
  past its deadline (removing the record, and with it its nested records) and then delegates.
  The usual store lives an hour; the target's ``expiry_factory`` gives a store of a second;
* ``AuthorRedisBackend``: an author's own key layout over redis-py's asyncio client on fakeredis
  (a hash per record, a sorted set per workflow scored by an ``INCR`` counter, a set of names,
  under a prefix per store): saves in one Lua script, ``latest`` and fenced saves in ``WATCH``ed
  transactions.

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_nine.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self, TypeVar

import fakeredis
import redis

from conformance import StorageTarget
from storages import CheckpointConflictError, NestedCheckpointDeletionError, StorageUnavailableError
from storages.backend import (
    Backend,
    CheckpointRecord,
    FenceCheck,
    IndexEntry,
    InsertResult,
    StoredBody,
    WalkRecords,
    latest_record,
    nested_id_conflict,
    pruned_records,
    rivals_of,
)
from storages.codec import CheckpointCodec
from storages.contract import Capability, CheckpointID, CheckpointInfo
from storages.engine import CheckpointStore
from storages.memory.backend import MemoryBackend

Entry = tuple[str, Callable[[], StorageTarget], str]
T = TypeVar("T")

TABLE_CAPABILITIES = frozenset(
    {
        Capability.SIGNATURE_FILTER,
        Capability.ANCESTRY,
        Capability.NESTED,
        Capability.PRUNE,
        Capability.LIST_WORKFLOWS,
        Capability.RAW_ACCESS,
        Capability.INSPECT,
        Capability.PENDING_WRITES,
        Capability.SHARED,
        Capability.FENCING,
    }
)

# ====================================================================== the tables


@dataclass
class Tables:
    """Every primitive as a plain function over dicts: what one atomic step of a store does. The
    caller makes each call atomic (the actor's batch, the event log's lock)."""

    records: MutableMapping[CheckpointID, tuple[int, CheckpointRecord]] = field(default_factory=dict)
    """id -> (sequence, record), nested records included."""
    sequences: dict[str, int] = field(default_factory=dict)
    """workflow name -> last sequence handed out (kept after deletes)."""
    children: dict[CheckpointID, list[CheckpointID]] = field(default_factory=dict)
    """container id -> the ids embedded directly in it."""
    tombstones: dict[str, dict[CheckpointID, None]] = field(default_factory=dict)
    """workflow name -> ids its prunes deleted."""
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)

    def copy(self) -> Self:
        return type(self)(
            dict(self.records),
            dict(self.sequences),
            {k: list(v) for k, v in self.children.items()},
            {k: dict(v) for k, v in self.tombstones.items()},
        )

    # ------------------------------------------------------------ writes

    def store(self, record: CheckpointRecord) -> None:
        sequence = self.sequences.get(record.workflow_name, 0) + 1
        self.sequences[record.workflow_name] = sequence
        self.records[record.checkpoint_id] = (sequence, record)
        if record.container_id is not None:
            self.children.setdefault(record.container_id, []).append(record.checkpoint_id)

    def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        found = self.records.get(top.checkpoint_id)
        if found is not None:
            return InsertResult.of_stored_digest(found[1].digest, top)
        for record in records[1:]:
            if record.checkpoint_id in self.records:
                raise nested_id_conflict(records, record.checkpoint_id)
        for record in records:
            self.store(record)
        return InsertResult.INSERTED

    def head_id(self, workflow_name: str) -> CheckpointID | None:
        head = latest_record(self.top_rows(workflow_name, None))
        return None if head is None else head.checkpoint_id

    def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        latest = self.head_id(record.workflow_name)
        if latest != expected_latest_id and record.checkpoint_id not in self.records:
            return FenceCheck(latest, None)
        return FenceCheck.after_insert(latest, self.insert(records))

    def family(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        """The id and every id nested in it, at any depth."""
        found = [checkpoint_id]
        for child in self.children.get(checkpoint_id, []):
            found += self.family(child)
        return found

    def drop(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        gone = self.family(checkpoint_id)
        for each in gone:
            self.records.pop(each, None)
            self.children.pop(each, None)
        return gone

    def remove(self, checkpoint_id: CheckpointID) -> bool:
        found = self.records.get(checkpoint_id)
        if found is None:
            return False
        if found[1].container_id is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, found[1].container_id)
        self.drop(checkpoint_id)
        return True

    def prune(self, workflow_name: str, keep_last: int) -> int:
        doomed = pruned_records(self.top_rows(workflow_name, None), keep_last)
        marks = self.tombstones.setdefault(workflow_name, {})
        for record in doomed:
            for gone in self.drop(record.checkpoint_id):
                marks[gone] = None
        return len(doomed)

    def delete_workflow(self, workflow_name: str) -> int:
        doomed = self.top_rows(workflow_name, None)
        for record in doomed:
            self.drop(record.checkpoint_id)
        self.tombstones.pop(workflow_name, None)
        return len(doomed)

    def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        found = self.records.get(checkpoint_id)
        if found is None:
            return False
        sequence, old = found
        self.records[checkpoint_id] = (sequence, old.replaced(body=body, digest=old.digest))
        return True

    # ------------------------------------------------------------ reads

    def rows(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        found = [
            (sequence, record)
            for sequence, record in self.records.values()
            if record.workflow_name == workflow_name
            and (include_nested or record.container_id is None)
            and graph_signature_hash in (None, record.graph_signature_hash)
        ]
        found.sort(key=lambda row: row[0])
        return [record for _, record in found]

    def top_rows(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointRecord]:
        return self.rows(workflow_name, graph_signature_hash, False)

    def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = self.records.get(checkpoint_id)
        return None if found is None else stored(found[1])

    def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self.top_rows(workflow_name, None)
        head = latest_record(rows, graph_signature_hash)
        if head is None:
            return None
        return replace(stored(head), rivals=[stored(rival) for rival in rivals_of(rows, head)])

    def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[StoredBody]:
        return [stored(r) for r in self.rows(workflow_name, graph_signature_hash, include_nested)]

    def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointID]:
        return [r.checkpoint_id for r in self.rows(workflow_name, graph_signature_hash, include_nested)]

    def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> dict[CheckpointID, bytes]:
        bodies: dict[CheckpointID, bytes] = {}
        for checkpoint_id in checkpoint_ids:
            for each in self.family(checkpoint_id)[1:]:
                found = self.records.get(each)
                if found is not None:
                    bodies[each] = found[1].body
        return bodies

    def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        if checkpoint_id not in self.records:
            return None
        children = [c for c in self.children.get(checkpoint_id, []) if c in self.records]
        return sorted(children, key=lambda c: self.records[c][1].position)

    def is_tombstone(self, checkpoint_id: CheckpointID) -> bool:
        return any(checkpoint_id in marks for marks in self.tombstones.values())

    def walk(self, checkpoint_id: CheckpointID, max_depth: int, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            found = self.records.get(current)
            if found is None:
                if current != checkpoint_id and self.is_tombstone(current):
                    tombstones.add(current)
                break
            record = found[1]
            links[current] = record.previous_checkpoint_id
            if with_bodies:
                bodies[current] = record.body
                bodies.update(self.nested_bodies([current]))
            current = record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))

    def workflow_names(self) -> list[str]:
        return sorted({r.workflow_name for _, r in self.records.values() if r.container_id is None})

    def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        found = self.records.get(checkpoint_id)
        return None if found is None else found[1].info(found[0])

    def records_of(self, workflow_name: str | None) -> list[CheckpointInfo]:
        return [
            record.info(sequence)
            for sequence, record in self.records.values()
            if workflow_name in (None, record.workflow_name)
        ]

    def tombstones_of(self, workflow_name: str | None) -> list[CheckpointID]:
        if workflow_name is not None:
            return list(self.tombstones.get(workflow_name, {}))
        return [each for marks in self.tombstones.values() for each in marks]


def stored(record: CheckpointRecord) -> StoredBody:
    return StoredBody(record.checkpoint_id, record.body, entry=record.index_entry())


class TableStorage(CheckpointStore[Backend]):
    def __init__(self, backend: Backend, **options: Any) -> None:
        # The bytes never leave this process, as with the in-memory storage.
        super().__init__(backend, codec=CheckpointCodec(trust_saved_types=True), **options)


# ====================================================================== an actor


Message = tuple[str, tuple[Any, ...], "asyncio.Future[Any]"]

WRITES = frozenset({"insert", "insert_fenced", "remove", "prune", "delete_workflow", "overwrite_body"})


class ActorBackend(Backend):
    """Every primitive is a message to one task per handle that applies what it finds queued as
    one batch; each message's answer (or error) goes back on its own future. Inserts are applied
    in the order they were queued, so ``orders_inserts`` holds."""

    capabilities = TABLE_CAPABILITIES
    orders_inserts = True

    def __init__(self, tables: Tables | None = None) -> None:
        self.tables = tables if tables is not None else Tables()
        self.queue: asyncio.Queue[Message | None] | None = None
        self.task: asyncio.Task[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def describe(self) -> str:
        return "actor://"

    def new_handle(self) -> Self:
        return type(self)(self.tables)

    def mailbox(self) -> asyncio.Queue[Message | None]:
        loop = asyncio.get_running_loop()
        if self.queue is None or self.task is None or self.task.done() or self.loop is not loop:
            self.loop = loop
            self.queue = asyncio.Queue()
            self.task = loop.create_task(self.run(self.queue))
        return self.queue

    async def call(self, name: str, *args: Any) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.mailbox().put_nowait((name, args, future))
        return await future

    async def run(self, queue: asyncio.Queue[Message | None]) -> None:
        while True:
            message = await queue.get()
            if message is None:
                return
            batch = [message]
            stop = False
            while not queue.empty():
                more = queue.get_nowait()
                if more is None:
                    stop = True
                    break
                batch.append(more)
            self.apply(batch)
            if stop:
                return

    def apply(self, batch: list[Message]) -> None:
        with self.tables.lock:  # one group commit: other handles' actors wait for it
            for name, args, future in batch:
                self.answer(name, args, future)

    def answer(self, name: str, args: tuple[Any, ...], future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return  # the caller gave up before its turn: nothing of it is applied
        try:
            result = getattr(self.tables, name)(*args)
        except Exception as exc:  # the caller's error, raised where it awaits
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(result)

    async def close(self) -> None:
        task, queue, loop = self.task, self.queue, self.loop
        self.task = self.queue = self.loop = None
        if task is None or queue is None or task.done():
            return
        if loop is asyncio.get_running_loop():
            queue.put_nowait(None)  # after what is queued: every caller gets its answer
            await task
        else:
            task.cancel()

    async def follow_loop(self) -> None:
        await self.close()

    # ------------------------------------------------------------ primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result: InsertResult = await self.call("insert", list(records))
        return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        result: FenceCheck | None = await self.call("insert_fenced", list(records), expected_latest_id)
        return result

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        result: StoredBody | None = await self.call("load", checkpoint_id)
        return result

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        result: StoredBody | None = await self.call("latest", workflow_name, graph_signature_hash)
        return result

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        result: list[StoredBody] = await self.call(
            "list_bodies", workflow_name, graph_signature_hash, include_nested
        )
        return result

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        result: list[CheckpointID] = await self.call(
            "list_ids", workflow_name, graph_signature_hash, include_nested
        )
        return result

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        result: bool = await self.call("remove", checkpoint_id)
        return result

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        result: dict[CheckpointID, bytes] = await self.call("nested_bodies", list(checkpoint_ids))
        return result

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        result: list[CheckpointID] | None = await self.call("nested_ids", checkpoint_id)
        return result

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        result: WalkRecords = await self.call("walk", checkpoint_id, max_depth, with_bodies)
        return result

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        result: int = await self.call("prune", workflow_name, keep_last)
        return result

    async def delete_workflow(self, workflow_name: str) -> int:
        result: int = await self.call("delete_workflow", workflow_name)
        return result

    async def workflow_names(self) -> list[str]:
        result: list[str] = await self.call("workflow_names")
        return result

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        result: bool = await self.call("overwrite_body", checkpoint_id, body, digest)
        return result

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        result: CheckpointInfo | None = await self.call("info", checkpoint_id)
        return result

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        result: list[CheckpointInfo] = await self.call("records_of", workflow_name)
        return result

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        result: list[CheckpointID] = await self.call("tombstones_of", workflow_name)
        return result


class ActorBatchCoalescesById(ActorBackend):
    """The group commit keeps one insert per checkpoint id in a batch (the last queued, as a
    key-value write-behind would): the earlier caller is answered with the later one's result,
    so two saves of one id with different bodies made together both report stored."""

    def apply(self, batch: list[Message]) -> None:
        last: dict[CheckpointID, int] = {}
        for i, (name, args, _) in enumerate(batch):
            if name == "insert":
                last[args[0][0].checkpoint_id] = i
        with self.tables.lock:
            answered: dict[int, Any] = {}
            for i, (name, args, future) in enumerate(batch):
                if name == "insert" and last[args[0][0].checkpoint_id] != i:
                    continue
                self.answer(name, args, future)
                if future.done() and not future.cancelled() and future.exception() is None:
                    answered[i] = future.result()
            for name, args, future in batch:
                if name == "insert" and not future.done():
                    result = answered.get(last[args[0][0].checkpoint_id], InsertResult.INSERTED)
                    future.set_result(result)


class ActorBatchSortedById(ActorBackend):
    """The group commit applies a batch's writes in checkpoint-id order (deterministic batches,
    as a key-ordered bulk write), then its reads: saves a handle starts together no longer
    commit in the order they were called, though ``orders_inserts`` says they do."""

    def apply(self, batch: list[Message]) -> None:
        writes = [m for m in batch if m[0] in WRITES]
        reads = [m for m in batch if m[0] not in WRITES]
        writes.sort(key=lambda m: str(m[1][0][0].checkpoint_id) if m[0] == "insert" else "")
        with self.tables.lock:
            for name, args, future in writes + reads:
                self.answer(name, args, future)


class ActorBatchErrorFailsAll(ActorBackend):
    """A batch is one transaction to its author: a message that raises fails every message of
    the batch with that error, though the others were applied."""

    def apply(self, batch: list[Message]) -> None:
        failure: Exception | None = None
        results: list[Any] = []
        with self.tables.lock:
            for name, args, _ in batch:
                try:
                    results.append(getattr(self.tables, name)(*args))
                except Exception as exc:
                    failure = failure or exc
                    results.append(None)
        for (_, _, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if failure is not None:
                future.set_exception(failure)
            else:
                future.set_result(result)


class ActorAcksOnEnqueue(ActorBackend):
    """A save is answered as stored once it is queued (the actor applies it on its next turn):
    the save returns before the write, and a re-save with another body is never refused."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.mailbox().put_nowait(("insert", (list(records),), future))
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        return InsertResult.INSERTED


class ActorCloseDropsQueued(ActorBackend):
    """``close`` cancels the actor at once: messages still queued are dropped, and their callers
    wait for an answer that never comes."""

    async def close(self) -> None:
        task = self.task
        self.task = self.queue = self.loop = None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                if task.get_loop() is asyncio.get_running_loop():
                    await task


class ActorSharedByHandles(ActorBackend):
    """``new_handle`` shares the actor (one task per store, a single writer): closing one handle
    stops the actor every other handle sends to."""

    def __init__(self, tables: Tables | None = None, box: dict[str, Any] | None = None) -> None:
        super().__init__(tables)
        self.box: dict[str, Any] = box if box is not None else {}

    def new_handle(self) -> Self:
        return type(self)(self.tables, self.box)

    def mailbox(self) -> asyncio.Queue[Message | None]:
        loop = asyncio.get_running_loop()
        box = self.box
        if box.get("loop") is not loop:
            box["loop"] = loop
            box["queue"] = asyncio.Queue()
            box["task"] = loop.create_task(self.run(box["queue"]))
        self.task, self.queue, self.loop = box["task"], box["queue"], loop
        queue: asyncio.Queue[Message | None] = box["queue"]
        return queue


class ActorDiesOnRefusal(ActorBackend):
    """The actor hands back only the conflicts it expects (``CheckpointConflictError``); any
    other error a primitive raises (a nested record's delete refused) ends the actor's task, and
    the caller, and every caller after it, waits for ever."""

    def answer(self, name: str, args: tuple[Any, ...], future: asyncio.Future[Any]) -> None:
        try:
            result = getattr(self.tables, name)(*args)
        except CheckpointConflictError as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(result)


class ActorLatestCountsNested(ActorBackend):
    """``latest`` chooses the head among every record of the workflow, nested ones included (a
    sub-workflow saved under its parent's name is the newest record of it)."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows: list[CheckpointRecord] = await self.call("rows", workflow_name, None, True)
        head = latest_record(rows, graph_signature_hash)
        if head is None:
            return None
        return replace(stored(head), rivals=[stored(r) for r in rivals_of(rows, head)])


class ActorOverwriteRenumbers(ActorBackend):
    """``overwrite_body`` stores the record again under the next sequence of its workflow (the
    actor treats every write as a commit): a raw write makes an old checkpoint the newest."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        found: StoredBody | None = await self.call("load", checkpoint_id)
        if found is None:
            return False
        tables = self.tables
        with tables.lock:
            entry = tables.records.get(checkpoint_id)
            if entry is None:
                return False
            record = entry[1]
            tables.records.pop(checkpoint_id)
            sequence = tables.sequences.get(record.workflow_name, 0) + 1
            tables.sequences[record.workflow_name] = sequence
            tables.records[checkpoint_id] = (sequence, record.replaced(body=body, digest=record.digest))
        return True


class ActorAppliesAbandonedCalls(ActorBackend):
    """A message is applied on its turn whatever became of its caller: a save whose caller was
    cancelled (a timeout) while it waited in the queue is stored after the cancellation."""

    def answer(self, name: str, args: tuple[Any, ...], future: asyncio.Future[Any]) -> None:
        try:
            result = getattr(self.tables, name)(*args)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(result)


class ActorFenceCheckedInOwnMessage(ActorBackend):
    """A fenced save is two messages: the head is read, the fence checked on the caller's side,
    then the insert is queued (each message is atomic, so each step is): another save can land
    between the check and the write."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        latest: CheckpointID | None = await self.call("head_id", record.workflow_name)
        stored_already: StoredBody | None = await self.call("load", record.checkpoint_id)
        if latest != expected_latest_id and stored_already is None:
            return FenceCheck(latest, None)
        result: InsertResult = await self.call("insert", list(records))
        return FenceCheck.after_insert(latest, result)


def actor_target(backend_class: type[ActorBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== an event log


SNAPSHOT_EVERY = 32

Event = tuple[str, tuple[Any, ...]]


@dataclass
class EventLog:
    """The store: events after ``base`` (the position of ``events[0]``) and the projection as it
    was at ``base``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    events: list[Event] = field(default_factory=list)
    base: int = 0
    snapshot: Tables = field(default_factory=Tables)


class EventBackend(Backend):
    """Each write is decided on this handle's projection, brought up to date first, and appended
    to the log when it changed something; every read brings the projection up to date first.
    The log lock makes each primitive one step."""

    capabilities = TABLE_CAPABILITIES
    orders_inserts = True  # each primitive runs whole under the lock before its first await

    def __init__(self, log: EventLog | None = None) -> None:
        self.log = log if log is not None else EventLog()
        self.view = self.log.snapshot.copy()
        self.position = self.log.base

    def describe(self) -> str:
        return "events://"

    def new_handle(self) -> Self:
        return type(self)(self.log)

    # ------------------------------------------------------------ the log

    def catch_up(self) -> None:
        """Lock held: apply every event this projection has not seen."""
        log = self.log
        if self.position < log.base:
            self.view = log.snapshot.copy()
            self.position = log.base
        for event in log.events[self.position - log.base :]:
            self.replay(event)
        self.position = log.base + len(log.events)

    def replay(self, event: Event) -> None:
        """Apply another handle's event to this projection."""
        kind, args = event
        getattr(self.view, kind)(*args)

    def append(self, event: Event) -> None:
        """Lock held, projection up to date and the event applied to it already."""
        log = self.log
        log.events.append(event)
        self.position += 1
        if len(log.events) >= SNAPSHOT_EVERY:
            self.compact()

    def compact(self) -> None:
        log = self.log
        log.snapshot = self.view.copy()
        log.base = self.position
        log.events = []

    def read(self, name: str, *args: Any) -> Any:
        with self.log.lock:
            self.catch_up()
            return getattr(self.view, name)(*args)

    def write(self, name: str, *args: Any, changed: Callable[[Any], bool]) -> Any:
        with self.log.lock:
            self.catch_up()
            result = getattr(self.view, name)(*args)
            if changed(result):
                self.append((name, args))
            return result

    # ------------------------------------------------------------ primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result: InsertResult = self.write(
            "insert", list(records), changed=lambda r: r is InsertResult.INSERTED
        )
        return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        with self.log.lock:
            self.catch_up()
            return self.fenced_insert(list(records), expected_latest_id)

    def fenced_insert(
        self, records: list[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        result = self.view.insert_fenced(records, expected_latest_id)
        if result is None:
            self.append(("insert", (records,)))
        return result

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        result: StoredBody | None = self.read("load", checkpoint_id)
        return result

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        result: StoredBody | None = self.read("latest", workflow_name, graph_signature_hash)
        return result

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        result: list[StoredBody] = self.read(
            "list_bodies", workflow_name, graph_signature_hash, include_nested
        )
        return result

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        result: list[CheckpointID] = self.read(
            "list_ids", workflow_name, graph_signature_hash, include_nested
        )
        return result

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        result: bool = self.write("remove", checkpoint_id, changed=bool)
        return result

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        result: dict[CheckpointID, bytes] = self.read("nested_bodies", list(checkpoint_ids))
        return result

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        result: list[CheckpointID] | None = self.read("nested_ids", checkpoint_id)
        return result

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        result: WalkRecords = self.read("walk", checkpoint_id, max_depth, with_bodies)
        return result

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        result: int = self.write("prune", workflow_name, keep_last, changed=bool)
        return result

    async def delete_workflow(self, workflow_name: str) -> int:
        # A workflow with only tombstones left changes too: always logged.
        result: int = self.write("delete_workflow", workflow_name, changed=lambda _: True)
        return result

    async def workflow_names(self) -> list[str]:
        result: list[str] = self.read("workflow_names")
        return result

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        result: bool = self.write("overwrite_body", checkpoint_id, body, digest, changed=bool)
        return result

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        result: CheckpointInfo | None = self.read("info", checkpoint_id)
        return result

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        result: list[CheckpointInfo] = self.read("records_of", workflow_name)
        return result

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        result: list[CheckpointID] = self.read("tombstones_of", workflow_name)
        return result


class EventOverwriteNotReplayed(EventBackend):
    """The replay applies the events a store's history is made of (saved, removed, pruned,
    workflow deleted) and skips the rest: a body overwritten through one handle stays as it was
    in every other handle's projection."""

    def replay(self, event: Event) -> None:
        if event[0] != "overwrite_body":
            super().replay(event)


class EventReadsFromProjection(EventBackend):
    """Reads answer from the handle's projection as it stands (catching up is a write's job,
    before it decides): another handle's saves show here only after this handle writes."""

    def read(self, name: str, *args: Any) -> Any:
        with self.log.lock:
            return getattr(self.view, name)(*args)


class EventSnapshotWithoutTombstones(EventBackend):
    """A snapshot keeps the records and counters; tombstones are left out, as history rather
    than state: a handle starting from a snapshot reports pruned ancestors as missing."""

    def compact(self) -> None:
        super().compact()
        self.log.snapshot.tombstones = {}


class EventFenceWithoutCatchUp(EventBackend):
    """The fenced save checks the fence on the projection as it stands and catches up only
    before its write (as the plain save does): a writer that missed another handle's save
    passes a fence it should fail."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        with self.log.lock:
            latest = self.view.head_id(record.workflow_name)
            if latest != expected_latest_id and record.checkpoint_id not in self.view.records:
                return FenceCheck(latest, None)
            self.catch_up()
            result = self.view.insert(list(records))
            if result is InsertResult.INSERTED:
                self.append(("insert", (list(records),)))
            return FenceCheck.after_insert(latest, result)


class EventReplayedRemoveKeepsNested(EventBackend):
    """Replaying another handle's "removed" event deletes the record itself; the records nested
    in it stay in this projection (the deciding handle dropped them itself)."""

    def replay(self, event: Event) -> None:
        if event[0] == "remove":
            (checkpoint_id,) = event[1]
            self.view.records.pop(checkpoint_id, None)
            return
        super().replay(event)


class EventReplayedDeleteKeepsTombstones(EventBackend):
    """Replaying another handle's "workflow deleted" event drops its records; the tombstones the
    workflow's prunes left stay in this projection."""

    def replay(self, event: Event) -> None:
        if event[0] == "delete_workflow":
            (workflow_name,) = event[1]
            for record in self.view.top_rows(workflow_name, None):
                self.view.drop(record.checkpoint_id)
            return
        super().replay(event)


class EventLaggingHandleSkipsToBase(EventBackend):
    """A handle behind the log's base (the events it missed were compacted into a snapshot)
    moves its position to the base and goes on from there, without the snapshot: it misses
    every event compacted away."""

    def catch_up(self) -> None:
        log = self.log
        if self.position < log.base:
            self.position = log.base
        for event in log.events[self.position - log.base :]:
            self.replay(event)
        self.position = log.base + len(log.events)


class EventSnapshotSharesTables(EventBackend):
    """The snapshot is the compacting handle's projection itself, not a copy: handles that start
    from it share one projection with that handle, and each applies the other's events to it
    again (a prune replayed on a projection that holds it already prunes again)."""

    def __init__(self, log: EventLog | None = None) -> None:
        self.log = log if log is not None else EventLog()
        self.view = self.log.snapshot
        self.position = self.log.base

    def compact(self) -> None:
        log = self.log
        log.snapshot = self.view
        log.base = self.position
        log.events = []

    def catch_up(self) -> None:
        log = self.log
        if self.position < log.base:
            self.view = log.snapshot
            self.position = log.base
        for event in log.events[self.position - log.base :]:
            self.replay(event)
        self.position = log.base + len(log.events)


class EventDecidesBeforeCatchUp(EventBackend):
    """A save is decided on the projection as it stands and the handle catches up only before
    appending (to keep the log in order): a save of an id another handle stored meanwhile is
    answered as stored, though the log keeps the other handle's body."""

    def write(self, name: str, *args: Any, changed: Callable[[Any], bool]) -> Any:
        with self.log.lock:
            if name != "insert":
                self.catch_up()
            result = getattr(self.view, name)(*args)
            if changed(result):
                missed = self.log.events[self.position - self.log.base :]
                for event in missed:
                    self.replay(event)
                self.position += len(missed)
                self.append((name, args))
            return result


class EventSnapshotMissesLastEvent(EventBackend):
    """Compaction snapshots the projection as it was before the event that triggered it (the
    snapshot is taken when the event is appended, the event applied after): a handle starting
    from that snapshot misses one event."""

    def write(self, name: str, *args: Any, changed: Callable[[Any], bool]) -> Any:
        with self.log.lock:
            self.catch_up()
            before = self.view.copy()
            result = getattr(self.view, name)(*args)
            if changed(result):
                log = self.log
                log.events.append((name, args))
                self.position += 1
                if len(log.events) >= SNAPSHOT_EVERY:
                    log.snapshot = before
                    log.base = self.position
                    log.events = []
            return result


def event_target(backend_class: type[EventBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== a time to live


class TtlBackend(Backend):
    """The built-in in-memory backend with a time to live: each top-level record's deadline is
    kept beside the store (every handle shares it); every primitive sweeps what is past its
    deadline first (removing a record removes its nested records), then delegates."""

    def __init__(
        self,
        ttl: float | None = None,
        inner: MemoryBackend | None = None,
        deadlines: dict[CheckpointID, float] | None = None,
    ) -> None:
        self.ttl = ttl
        self.inner = inner if inner is not None else MemoryBackend()
        self.deadlines: dict[CheckpointID, float] = deadlines if deadlines is not None else {}
        expiring = {Capability.TTL} if ttl is not None else set()
        self.capabilities = frozenset(self.inner.capabilities) | expiring

    def describe(self) -> str:
        return f"ttl+{self.inner.describe()}"

    def new_handle(self) -> Self:
        return type(self)(self.ttl, self.inner.new_handle(), self.deadlines)

    def deadline(self) -> float:
        return math.inf if self.ttl is None else time.time() + self.ttl

    async def sweep(self) -> None:
        now = time.time()
        for checkpoint_id, deadline in list(self.deadlines.items()):
            if deadline <= now and self.deadlines.get(checkpoint_id) == deadline:
                del self.deadlines[checkpoint_id]
                await self.inner.remove(checkpoint_id)

    def saved(self, records: Sequence[CheckpointRecord]) -> None:
        self.deadlines[records[0].checkpoint_id] = self.deadline()

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await self.sweep()
        result = await self.inner.insert(records)
        if result is InsertResult.INSERTED:
            self.saved(records)
        return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        await self.sweep()
        result = await self.inner.insert_fenced(records, expected_latest_id)
        if result is None:
            self.saved(records)
        return result

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        await self.sweep()
        return await self.inner.load(checkpoint_id)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        await self.sweep()
        return await self.inner.latest(workflow_name, graph_signature_hash)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        await self.sweep()
        return await self.inner.list_bodies(
            workflow_name, graph_signature_hash, include_nested=include_nested
        )

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        await self.sweep()
        return list(
            await self.inner.list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        )

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        await self.sweep()
        return await self.inner.remove(checkpoint_id)

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        await self.sweep()
        return await self.inner.nested_bodies(checkpoint_ids)

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        await self.sweep()
        return await self.inner.nested_ids(checkpoint_id)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        await self.sweep()
        return await self.inner.walk(checkpoint_id, max_depth, with_bodies=with_bodies)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        await self.sweep()
        return await self.inner.prune(workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        await self.sweep()
        return await self.inner.delete_workflow(workflow_name)

    async def workflow_names(self) -> list[str]:
        await self.sweep()
        return list(await self.inner.workflow_names())

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        await self.sweep()
        return await self.inner.overwrite_body(checkpoint_id, body, digest)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        await self.sweep()
        return await self.inner.info(checkpoint_id)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        await self.sweep()
        return list(await self.inner.records(workflow_name))

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        await self.sweep()
        return list(await self.inner.tombstones(workflow_name))


class TtlDeadlineRoundedDown(TtlBackend):
    """Deadlines are whole seconds (an expiry index keyed by the second, as a TTL column of
    integer epoch seconds): the save's time is truncated, so a record can go up to a second
    early."""

    def deadline(self) -> float:
        return math.inf if self.ttl is None else math.floor(time.time()) + self.ttl


class TtlResaveExtends(TtlBackend):
    """A re-save of a stored id with the same body renews the id's deadline (a touch, as Redis's
    ``EXPIRE`` on every ``SET``): a checkpoint saved again lives past its time."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await self.sweep()
        result = await self.inner.insert(records)
        if result is not InsertResult.DIFFERENT_BODY:
            self.saved(records)
        return result


class TtlLoadChecksOwnDeadline(TtlBackend):
    """``load`` skips the sweep (a read should not write) and answers None for an id past its
    own deadline; nested records have no deadline of their own, so one stays loadable after its
    parent expired."""

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        deadline = self.deadlines.get(checkpoint_id)
        if deadline is not None and deadline <= time.time():
            return None
        return await self.inner.load(checkpoint_id)


class TtlListingsShowExpired(TtlBackend):
    """Listings skip the sweep (a listing of a large workflow should not delete as it reads):
    expired checkpoints stay listed until some other call sweeps."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.inner.list_bodies(
            workflow_name, graph_signature_hash, include_nested=include_nested
        )

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return list(
            await self.inner.list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        )


class TtlLatestSkipsSweep(TtlBackend):
    """``latest`` skips the sweep (it must stay one round trip): the latest can be a checkpoint
    whose time to live is over."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.inner.latest(workflow_name, graph_signature_hash)


class TtlWorkflowNamesSkipSweep(TtlBackend):
    """``workflow_names`` skips the sweep: a workflow whose every checkpoint expired is still
    listed."""

    async def workflow_names(self) -> list[str]:
        return list(await self.inner.workflow_names())


class TtlLostOnNewHandle(TtlBackend):
    """``new_handle`` builds the layer over the shared store and its deadlines but leaves the
    ``ttl`` setting out: a new handle has no time to live, and what it saves never expires."""

    def new_handle(self) -> Self:
        return type(self)(inner=self.inner.new_handle(), deadlines=self.deadlines)


class TtlWalkSkipsSweep(TtlBackend):
    """``walk`` skips the sweep (one round trip): an ancestry walk still reaches expired
    ancestors."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.inner.walk(checkpoint_id, max_depth, with_bodies=with_bodies)


class TtlDeadlinePerWorkflow(TtlBackend):
    """The deadline is kept per workflow, set by its first save (one expiry per key, as a hash
    per workflow with one ``EXPIRE``): a workflow's later checkpoints expire with its first."""

    def saved(self, records: Sequence[CheckpointRecord]) -> None:
        key = "\x00workflow\x00" + records[0].workflow_name
        first = self.deadlines.setdefault(key, self.deadline())
        self.deadlines[records[0].checkpoint_id] = first

    async def sweep(self) -> None:
        now = time.time()
        for key, deadline in list(self.deadlines.items()):
            if key.startswith("\x00workflow\x00"):
                continue
            if deadline <= now and self.deadlines.get(key) == deadline:
                del self.deadlines[key]
                await self.inner.remove(key)


class TtlInspectShowsExpired(TtlBackend):
    """The inspect primitives (``info``, ``records``) skip the sweep, as tooling reads should
    not write: expired checkpoints keep their index entries."""

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.inner.info(checkpoint_id)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return list(await self.inner.records(workflow_name))


class TtlFencedSavesNeverExpire(TtlBackend):
    """The fenced save path stores through the inner backend and returns, without the deadline
    the plain save path records: checkpoints saved behind a fence (``FencedStorage``, MAF's
    runner) never expire."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        await self.sweep()
        return await self.inner.insert_fenced(records, expected_latest_id)


LONG_TTL = 3600.0
SHORT_TTL = 1.0


def ttl_target(backend_class: type[TtlBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(
            backend_class.__name__,
            lambda: TableStorage(backend_class(LONG_TTL)),
            expiry_factory=lambda: TableStorage(backend_class(SHORT_TTL)),
        )

    return target


# ====================================================================== an author's Redis layout


INSERT_SCRIPT = """
local d = redis.call('HGET', KEYS[1], 'dg')
if d then return d end
local s = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'w', ARGV[1], 'hp', ARGV[2], 'pv', ARGV[3], 'sg', ARGV[4],
           'dg', ARGV[5], 'sq', s, 'b', ARGV[6])
redis.call('ZADD', KEYS[3], s, ARGV[7])
redis.call('SADD', KEYS[4], ARGV[1])
return false
"""

ROWS_SCRIPT = """
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local out = {}
for _, id in ipairs(ids) do
  local h = redis.call('HMGET', ARGV[1] .. id, 'hp', 'pv', 'sg', 'b')
  if h[1] then
    out[#out + 1] = id
    out[#out + 1] = h[1]
    out[#out + 1] = h[2]
    out[#out + 1] = h[3]
    if ARGV[2] == '1' then out[#out + 1] = h[4] else out[#out + 1] = '' end
  end
end
return out
"""

REMOVE_SCRIPT = """
local w = redis.call('HGET', KEYS[1], 'w')
if not w then return 0 end
redis.call('DEL', KEYS[1])
local wf = ARGV[1] .. w
redis.call('ZREM', wf, ARGV[2])
if redis.call('ZCARD', wf) == 0 then redis.call('SREM', KEYS[2], w) end
return 1
"""

WALK_SCRIPT = """
local out = {}
local seen = {}
local cur = ARGV[2]
local n = 0
local limit = tonumber(ARGV[3])
while cur and not seen[cur] and n < limit do
  local h = redis.call('HMGET', ARGV[1] .. cur, 'hp', 'pv', 'b')
  if not h[1] then break end
  seen[cur] = true
  n = n + 1
  out[#out + 1] = cur
  out[#out + 1] = h[1]
  out[#out + 1] = h[2]
  if ARGV[4] == '1' then out[#out + 1] = h[3] else out[#out + 1] = '' end
  if h[1] == '1' then cur = h[2] else cur = nil end
end
return out
"""


@dataclass(frozen=True)
class Row:
    """A workflow's record as its sorted set and hash give it back, in commit order."""

    checkpoint_id: CheckpointID
    previous_checkpoint_id: CheckpointID | None
    graph_signature_hash: str
    body: bytes


def cancel_requests() -> int:
    counted = getattr(asyncio.current_task(), "cancelling", None)
    return 0 if counted is None else int(counted())


def text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


SERVER = fakeredis.FakeServer()
"""One Redis for every store of this module, as one server serves many applications: each
store has a key prefix of its own."""


class AuthorRedisBackend(Backend):
    """A backend over redis-py's asyncio client (on fakeredis): a hash per record, a sorted set
    per workflow (ids scored by a per-workflow ``INCR`` counter), a set of workflow names, all
    under the store's key prefix. A save is one Lua script; reads of a workflow are one script
    or a ``WATCH``ed transaction; a fenced save ``WATCH``es the workflow's sorted set and the
    record, checks the head, and inserts in ``MULTI``, retrying when a watched key changed."""

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,
            Capability.ANCESTRY,
            Capability.LIST_WORKFLOWS,
            Capability.PENDING_WRITES,
            Capability.SHARED,
            Capability.FENCING,
        }
    )

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix if prefix is not None else f"blind9:{uuid.uuid4().hex}"
        self.client: fakeredis.FakeAsyncRedis | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def describe(self) -> str:
        return f"authorredis://{self.prefix}"

    def new_handle(self) -> Self:
        return type(self)(self.prefix)

    async def ask(self, request: Awaitable[T]) -> T:
        """A request's answer; CancelledError when the calling task was cancelled while it ran
        (the client can finish a request whose cancellation arrived and return its answer). The
        task counts cancellation requests from Python 3.11; 3.10 has no count to read."""
        before = cancel_requests()
        answer = await request
        if cancel_requests() > before:
            raise asyncio.CancelledError
        return answer

    def redis(self) -> fakeredis.FakeAsyncRedis:
        loop = asyncio.get_running_loop()
        if self.client is None or self.loop is not loop:
            self.client = fakeredis.FakeAsyncRedis(server=SERVER)
            self.loop = loop
        return self.client

    async def close(self) -> None:
        client, loop = self.client, self.loop
        self.client = self.loop = None
        if client is not None and loop is asyncio.get_running_loop():
            await client.aclose()

    # ------------------------------------------------------------ keys

    def rec(self, checkpoint_id: CheckpointID) -> str:
        return f"{self.prefix}:rec:{checkpoint_id}"

    def wf(self, workflow_name: str) -> str:
        return f"{self.prefix}:wf:{workflow_name}"

    def seq(self, workflow_name: str) -> str:
        return f"{self.prefix}:seq:{workflow_name}"

    def names(self) -> str:
        return f"{self.prefix}:names"

    def previous_fields(self, previous: CheckpointID | None) -> tuple[str, str]:
        return ("0", "") if previous is None else ("1", previous)

    def previous_of(self, has_previous: Any, previous: Any) -> CheckpointID | None:
        return text(previous) if text(has_previous) == "1" else None

    # ------------------------------------------------------------ scripts

    def insert_call(self, record: CheckpointRecord) -> tuple[Any, ...]:
        has_previous, previous = self.previous_fields(record.previous_checkpoint_id)
        return (
            INSERT_SCRIPT,
            4,
            self.rec(record.checkpoint_id),
            self.seq(record.workflow_name),
            self.wf(record.workflow_name),
            self.names(),
            record.workflow_name,
            has_previous,
            previous,
            record.graph_signature_hash,
            record.digest,
            record.body,
            record.checkpoint_id,
        )

    def rows_of(self, flat: Sequence[Any]) -> list[Row]:
        return [
            Row(
                text(flat[i]),
                self.previous_of(flat[i + 1], flat[i + 2]),
                text(flat[i + 3]),
                bytes(flat[i + 4]),
            )
            for i in range(0, len(flat), 5)
        ]

    async def rows(self, workflow_name: str, with_bodies: bool) -> list[Row]:
        flat = await self.ask(
            self.redis().eval(
                ROWS_SCRIPT, 1, self.wf(workflow_name), f"{self.prefix}:rec:", "1" if with_bodies else "0"
            )
        )
        return self.rows_of(flat)

    def stored(self, workflow_name: str, row: Row) -> StoredBody:
        entry = IndexEntry(workflow_name, row.previous_checkpoint_id, row.graph_signature_hash)
        return StoredBody(row.checkpoint_id, row.body, entry=entry)

    # ------------------------------------------------------------ primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        stored_digest = await self.ask(self.redis().eval(*self.insert_call(record)))
        return InsertResult.of_stored_digest(None if stored_digest is None else text(stored_digest), record)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        async with self.redis().pipeline(transaction=True) as pipe:
            while True:
                try:
                    await self.watch(pipe, record)
                    flat = await self.ask(
                        pipe.eval(ROWS_SCRIPT, 1, self.wf(record.workflow_name), f"{self.prefix}:rec:", "0")
                    )
                    head = latest_record(self.rows_of(flat))
                    latest = None if head is None else head.checkpoint_id
                    stored_already = await self.ask(pipe.exists(self.rec(record.checkpoint_id)))
                    if latest != expected_latest_id and not stored_already:
                        await self.ask(pipe.unwatch())
                        return FenceCheck(latest, None)
                    pipe.multi()
                    pipe.eval(*self.insert_call(record))
                    (stored_digest,) = await self.ask(pipe.execute())
                except redis.WatchError:
                    await self.watch_failed(pipe)
                    continue
                digest = None if stored_digest is None else text(stored_digest)
                return FenceCheck.after_insert(latest, InsertResult.of_stored_digest(digest, record))

    async def watch(self, pipe: Any, record: CheckpointRecord) -> None:
        await self.ask(pipe.watch(self.wf(record.workflow_name), self.rec(record.checkpoint_id)))

    async def watch_failed(self, pipe: Any) -> None:
        await self.ask(pipe.reset())

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = await self.ask(self.redis().hmget(self.rec(checkpoint_id), ["w", "hp", "pv", "sg", "b"]))
        if found[0] is None:
            return None
        workflow, has_previous, previous, signature, body = found
        entry = IndexEntry(text(workflow), self.previous_of(has_previous, previous), text(signature))
        return StoredBody(checkpoint_id, bytes(body), entry=entry)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        async with self.redis().pipeline(transaction=True) as pipe:
            while True:
                try:
                    await self.ask(pipe.watch(self.wf(workflow_name)))
                    rows = await self.latest_rows(pipe, workflow_name)
                    head = latest_record(rows, graph_signature_hash)
                    if head is None:
                        await self.ask(pipe.unwatch())
                        return None
                    chosen = [head, *rivals_of(rows, head)]
                    pipe.multi()
                    for row in chosen:
                        pipe.hget(self.rec(row.checkpoint_id), "b")
                    bodies = await self.ask(pipe.execute())
                except redis.WatchError:
                    continue
                return self.latest_answer(workflow_name, chosen, bodies)

    async def latest_rows(self, pipe: Any, workflow_name: str) -> list[Row]:
        flat = await self.ask(pipe.eval(ROWS_SCRIPT, 1, self.wf(workflow_name), f"{self.prefix}:rec:", "0"))
        return self.rows_of(flat)

    def latest_answer(self, workflow_name: str, chosen: list[Row], bodies: list[Any]) -> StoredBody | None:
        found = [
            self.stored(workflow_name, replace(row, body=bytes(body)))
            for row, body in zip(chosen, bodies, strict=True)
        ]
        return replace(found[0], rivals=found[1:])

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        rows = await self.rows(workflow_name, True)
        return [
            self.stored(workflow_name, row)
            for row in rows
            if graph_signature_hash in (None, row.graph_signature_hash)
        ]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        rows = await self.rows(workflow_name, False)
        return [row.checkpoint_id for row in rows if graph_signature_hash in (None, row.graph_signature_hash)]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        removed = await self.ask(
            self.redis().eval(
                REMOVE_SCRIPT, 2, self.rec(checkpoint_id), self.names(), f"{self.prefix}:wf:", checkpoint_id
            )
        )
        return bool(removed)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        flat = await self.ask(
            self.redis().eval(
                WALK_SCRIPT,
                0,
                f"{self.prefix}:rec:",
                checkpoint_id,
                str(max_depth),
                "1" if with_bodies else "0",
            )
        )
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        for i in range(0, len(flat), 4):
            current = text(flat[i])
            links[current] = self.previous_of(flat[i + 1], flat[i + 2])
            if with_bodies:
                bodies[current] = bytes(flat[i + 3])
        return WalkRecords(links, bodies, frozenset())

    async def workflow_names(self) -> list[str]:
        return [text(name) for name in await self.ask(self.redis().smembers(self.names()))]


class RedisFenceRaceUnavailable(AuthorRedisBackend):
    """A fenced save whose watched keys changed before ``EXEC`` is reported as the store being
    unavailable (the transaction failed), not checked again: of two writers racing on one head,
    the loser gets ``StorageUnavailableError`` instead of ``StaleWriterError``."""

    async def watch_failed(self, pipe: Any) -> None:
        await self.ask(pipe.reset())
        raise StorageUnavailableError("save", "the workflow changed during the fenced save")


class RedisFenceWatchesRecordOnly(AuthorRedisBackend):
    """The fenced save ``WATCH``es only the record's key (what it writes), not the workflow's
    sorted set: another writer's save between the head check and ``EXEC`` does not abort it."""

    async def watch(self, pipe: Any, record: CheckpointRecord) -> None:
        await self.ask(pipe.watch(self.rec(record.checkpoint_id)))


class RedisPreviousStoredAsText(AuthorRedisBackend):
    """The previous id is one hash field holding ``str(previous)``: a checkpoint without one
    stores ``"None"``, read back as None, so a checkpoint whose previous id is the string
    ``"None"`` reads back as a root."""

    def previous_fields(self, previous: CheckpointID | None) -> tuple[str, str]:
        return ("1", str(previous))

    def previous_of(self, has_previous: Any, previous: Any) -> CheckpointID | None:
        value = text(previous)
        return None if value == "None" else value


class RedisLatestReadsTwice(AuthorRedisBackend):
    """``latest`` reads the workflow's rows, then the chosen bodies in a second round trip
    without a ``WATCH``: a delete of the head between the two leaves a body missing, and the
    workflow answers as having no latest."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = await self.rows(workflow_name, False)
        head = latest_record(rows, graph_signature_hash)
        if head is None:
            return None
        chosen = [head, *rivals_of(rows, head)]
        bodies = [await self.ask(self.redis().hget(self.rec(row.checkpoint_id), "b")) for row in chosen]
        if bodies[0] is None:
            return None
        kept = [(row, body) for row, body in zip(chosen, bodies, strict=True) if body is not None]
        return self.latest_answer(workflow_name, [r for r, _ in kept], [b for _, b in kept])


class RedisNamesSetUnprefixed(AuthorRedisBackend):
    """The set of workflow names is one key of the server (``checkpoint:workflows``), not under
    the store's prefix: every store on the server lists every store's workflows."""

    def names(self) -> str:
        return "checkpoint:workflows"


def redis_target(backend_class: type[AuthorRedisBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== the lists


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


def _entries() -> list[Entry]:
    broken_actors: list[type[ActorBackend]] = [
        ActorBatchCoalescesById,
        ActorBatchSortedById,
        ActorBatchErrorFailsAll,
        ActorAcksOnEnqueue,
        ActorCloseDropsQueued,
        ActorSharedByHandles,
        ActorDiesOnRefusal,
        ActorLatestCountsNested,
        ActorOverwriteRenumbers,
        ActorFenceCheckedInOwnMessage,
    ]
    broken_events: list[type[EventBackend]] = [
        EventOverwriteNotReplayed,
        EventReadsFromProjection,
        EventSnapshotWithoutTombstones,
        EventFenceWithoutCatchUp,
        EventReplayedRemoveKeepsNested,
        EventReplayedDeleteKeepsTombstones,
        EventLaggingHandleSkipsToBase,
        EventSnapshotSharesTables,
        EventDecidesBeforeCatchUp,
        EventSnapshotMissesLastEvent,
    ]
    broken_ttl: list[type[TtlBackend]] = [
        TtlDeadlineRoundedDown,
        TtlResaveExtends,
        TtlLoadChecksOwnDeadline,
        TtlListingsShowExpired,
        TtlLatestSkipsSweep,
        TtlWorkflowNamesSkipSweep,
        TtlLostOnNewHandle,
        TtlWalkSkipsSweep,
        TtlDeadlinePerWorkflow,
        TtlInspectShowsExpired,
        TtlFencedSavesNeverExpire,
    ]
    broken_redis: list[type[AuthorRedisBackend]] = [
        RedisFenceRaceUnavailable,
        RedisFenceWatchesRecordOnly,
        RedisPreviousStoredAsText,
        RedisLatestReadsTwice,
        RedisNamesSetUnprefixed,
    ]
    entries: list[Entry] = []
    entries += [(c.__name__, actor_target(c), _doc(c)) for c in broken_actors]
    entries += [(c.__name__, event_target(c), _doc(c)) for c in broken_events]
    entries += [(c.__name__, ttl_target(c), _doc(c)) for c in broken_ttl]
    entries += [(c.__name__, redis_target(c), _doc(c)) for c in broken_redis]
    return entries


ENTRIES: list[Entry] = _entries()
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = [
    # docs/contract.md: "A cancelled save whose request had already left may still land; the
    # caller learns which by reading." A message queued to the actor is a request that has left,
    # and a read on the same handle is queued after it, so it learns.
    (
        "ActorAppliesAbandonedCalls",
        actor_target(ActorAppliesAbandonedCalls),
        _doc(ActorAppliesAbandonedCalls),
    ),
]
"""Written as broken, judged not to break the contract as built (tests/kit/blind_batch_nine.md
says why); each must pass the whole kit."""

HONEST: list[Entry] = [
    ("ActorBackend", actor_target(ActorBackend), _doc(ActorBackend)),
    ("EventBackend", event_target(EventBackend), _doc(EventBackend)),
    ("TtlBackend", ttl_target(TtlBackend), _doc(TtlBackend)),
    ("AuthorRedisBackend", redis_target(AuthorRedisBackend), _doc(AuthorRedisBackend)),
]
"""Honest storages: one per style; each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
