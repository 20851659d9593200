"""A fourteenth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/registry.md, docs/integrity.md, docs/maf.md, docs/conformance.md's prose,
examples/ and the public author API could ship. Four styles:

* ``ThreadBackend``: a synchronous store (batch nine's ``Tables``: plain dicts) guarded by a
  threading lock, every primitive run through ``asyncio.to_thread``, as an author wrapping a
  blocking client would;
* ``GroupBackend``: a group commit: writes are queued and a flusher task commits each batch in
  one step under the lock, every caller awaiting its own future; reads go to the tables;
* ``WrappedRedisBackend``: an author's wrapper around the built-in Redis backend (through
  ``RedisCheckpointStorage.backend_class``) counting calls (metrics) and retrying reads the
  connection dropped, on the machine's Redis under a key prefix of its own;
* ``RowStorage``: a MAF user's own storage with MAF's six methods only, keeping one row per
  checkpoint (its encoded body, its commit number, its lineage fields).

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_fourteen.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

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
    resume_point,
    rivals_of,
)
from storages.codec import CheckpointCodec
from storages.contract import CheckpointID, CheckpointInfo, validate_identifier
from storages.errors import CheckpointConflictError, CheckpointNotFoundError
from storages.redis import RedisCheckpointStorage
from storages.redis.backend import RedisBackend

from .blind_batch_nine import TABLE_CAPABILITIES, Tables, TableStorage

Entry = tuple[str, Callable[[], StorageTarget], str]
T = TypeVar("T")


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


# ====================================================================== a thread pool


class ThreadBackend(Backend):
    """A synchronous store guarded by a threading lock; every primitive runs on a worker thread
    through ``asyncio.to_thread``, holding the lock for the whole primitive."""

    capabilities = TABLE_CAPABILITIES

    def __init__(self, tables: Tables | None = None) -> None:
        self.tables = tables if tables is not None else Tables()
        self.closing = False

    def describe(self) -> str:
        return "threads://"

    def new_handle(self) -> ThreadBackend:
        return type(self)(self.tables)

    def locked(self, step: Callable[..., T], *args: Any) -> T:
        with self.tables.lock:
            return step(*args)

    async def run(self, step: Callable[..., T], *args: Any) -> T:
        """One primitive: the blocking call on a worker thread."""
        return await asyncio.to_thread(self.locked, step, *args)

    # ------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.run(self.tables.insert, list(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.run(self.tables.insert_fenced, list(records), expected_latest_id)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.run(self.tables.remove, checkpoint_id)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.run(self.tables.prune, workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.run(self.tables.delete_workflow, workflow_name)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.run(self.tables.overwrite_body, checkpoint_id, body, digest)

    # ------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.run(self.tables.load, checkpoint_id)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.run(self.tables.latest, workflow_name, graph_signature_hash)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.run(self.tables.list_bodies, workflow_name, graph_signature_hash, include_nested)

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self.run(self.tables.list_ids, workflow_name, graph_signature_hash, include_nested)

    async def nested_bodies(self, checkpoint_ids: Any) -> dict[CheckpointID, bytes]:
        return await self.run(self.tables.nested_bodies, list(checkpoint_ids))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.run(self.tables.nested_ids, checkpoint_id)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.run(self.tables.walk, checkpoint_id, max_depth, with_bodies)

    async def workflow_names(self) -> list[str]:
        return await self.run(self.tables.workflow_names)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.run(self.tables.info, checkpoint_id)

    async def records(self, workflow_name: str | None) -> list[CheckpointInfo]:
        return await self.run(self.tables.records_of, workflow_name)

    async def tombstones(self, workflow_name: str | None) -> list[CheckpointID]:
        return await self.run(self.tables.tombstones_of, workflow_name)


class ThreadFenceCheckThenWrite(ThreadBackend):
    """A fenced save reads the head in one thread call and inserts in the next: another writer's
    save between the two is not seen, and both win."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        latest = await self.run(self.tables.head_id, record.workflow_name)
        stored = await self.run(lambda: record.checkpoint_id in self.tables.records)
        if latest != expected_latest_id and not stored:
            return FenceCheck(latest, None)
        return FenceCheck.after_insert(latest, await self.insert(records))


class ThreadSequenceReadThenWrite(ThreadBackend):
    """A save reads the workflow's next sequence in one thread call and writes its records with
    it in another: two concurrent saves of one workflow take the same number."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        tables = self.tables
        names = {r.workflow_name for r in records}
        counters = await self.run(lambda: {n: tables.sequences.get(n, 0) for n in names})

        def write() -> InsertResult:
            found = tables.records.get(records[0].checkpoint_id)
            if found is not None:
                return InsertResult.of_stored_digest(found[1].digest, records[0])
            for record in records[1:]:
                if record.checkpoint_id in tables.records:
                    raise nested_id_conflict(records, record.checkpoint_id)
            for record in records:
                counters[record.workflow_name] += 1
                tables.sequences[record.workflow_name] = counters[record.workflow_name]
                tables.records[record.checkpoint_id] = (counters[record.workflow_name], record)
                if record.container_id is not None:
                    tables.children.setdefault(record.container_id, []).append(record.checkpoint_id)
            return InsertResult.INSERTED

        return await self.run(write)


class ThreadExistsCheckThenWrite(ThreadBackend):
    """A save looks its ids up in one thread call and stores them in another: two concurrent saves
    of one id with different contents both answer inserted, the later replacing the other."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        tables = self.tables
        found = await self.run(tables.records.get, records[0].checkpoint_id)
        if found is not None:
            return InsertResult.of_stored_digest(found[1].digest, records[0])
        taken = await self.run(
            lambda: [r.checkpoint_id for r in records[1:] if r.checkpoint_id in tables.records]
        )
        if taken:
            raise nested_id_conflict(records, taken[0])

        def write() -> InsertResult:
            for record in records:
                tables.store(record)
            return InsertResult.INSERTED

        return await self.run(write)


class ThreadBodiesReadPerId(ThreadBackend):
    """``list_bodies`` reads the ids in one thread call, then each body in a call of its own (a
    blocking client's GET per id): a checkpoint deleted between them fails the listing."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        ids = await self.list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        bodies = []
        for each in ids:
            found = await self.run(self.tables.records.__getitem__, each)
            bodies.append(StoredBody(each, found[1].body, entry=found[1].index_entry()))
        return bodies


class ThreadCancelUndoesInsert(ThreadBackend):
    """A save cancelled while its thread runs deletes its id afterwards, to leave nothing behind:
    a cancelled retry of a checkpoint already stored deletes it."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        try:
            return await super().insert(records)
        except asyncio.CancelledError:
            top = records[0].checkpoint_id
            undo = asyncio.ensure_future(self.run(lambda: self.tables.drop(top)))
            undo.add_done_callback(lambda _: None)
            raise


class ThreadCancelAwaitsThread(ThreadBackend):
    """A primitive cancelled while its thread runs waits for the thread and returns its answer (the
    write happened, so the caller should know): the cancellation is swallowed."""

    async def run(self, step: Callable[..., T], *args: Any) -> T:
        work = asyncio.ensure_future(asyncio.to_thread(self.locked, step, *args))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            return await work


class ThreadOwnPool(ThreadBackend):
    """Each handle runs its calls on a pool of its own (two workers, so one handle cannot take the
    whole default pool), which closing the handle never shuts down."""

    def __init__(self, tables: Tables | None = None) -> None:
        super().__init__(tables)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="b14-store")

    async def run(self, step: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: self.locked(step, *args))


class ThreadCloseSkipsInFlight(ThreadBackend):
    """Closing a handle sets a flag that its threads check before writing ("shutting down"): a save
    whose thread starts after the close answers inserted and writes nothing."""

    async def close(self) -> None:
        self.closing = True

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        def write() -> InsertResult:
            if self.closing:
                return InsertResult.INSERTED
            return self.tables.insert(records)

        return await self.run(write)


def thread_target(backend_class: type[ThreadBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== a group commit

WRITE_STEPS = ("insert", "insert_fenced", "remove", "prune", "delete_workflow", "overwrite_body")

Queued = tuple[Callable[[], Any], "asyncio.Future[Any]"]


class GroupBackend(Backend):
    """Writes are queued and a flusher task commits every write queued by then as one batch under
    the lock (one transaction with a savepoint per write: a write that fails fails alone), then
    answers each caller's future. A write joins the queue before its first await, so one handle's
    writes commit in call order (``orders_inserts``). Reads go to the tables under the lock."""

    capabilities = TABLE_CAPABILITIES
    orders_inserts = True

    def __init__(self, tables: Tables | None = None) -> None:
        self.tables = tables if tables is not None else Tables()
        self.queue: list[Queued] = []
        self.flusher: asyncio.Task[None] | None = None
        self.published: Tables | None = None

    def describe(self) -> str:
        return "group://"

    def new_handle(self) -> GroupBackend:
        return type(self)(self.tables)

    async def follow_loop(self) -> None:
        # Writes queued on a finished loop had callers that are gone.
        self.queue = []
        self.flusher = None

    async def close(self) -> None:
        if self.flusher is not None and not self.flusher.done():
            await self.flusher

    # ------------------------------------------------------------ the queue

    def enqueue(self, step: Callable[[], T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()
        self.queue.append((step, answer))
        if self.flusher is None or self.flusher.done():
            self.flusher = loop.create_task(self.flush())
        return answer

    async def write(self, step: Callable[[], T]) -> T:
        return await self.enqueue(step)

    async def flush(self) -> None:
        while self.queue:
            await asyncio.sleep(0)  # let the writes started meanwhile join the batch
            batch, self.queue = self.queue, []
            self.commit(batch)

    def commit(self, batch: list[Queued]) -> None:
        with self.tables.lock:
            self.publish()
            answers = [self.apply(step) for step, _ in self.ordered(batch)]
        for (_, answer), (value, error) in zip(self.ordered(batch), answers, strict=True):
            self.answer(answer, value, error)

    def publish(self) -> None:
        """The view readers use is the tables themselves (lock held)."""

    def ordered(self, batch: list[Queued]) -> list[Queued]:
        return batch

    def apply(self, step: Callable[[], Any]) -> tuple[Any, BaseException | None]:
        try:
            return step(), None
        except Exception as error:
            return None, error

    def answer(self, answer: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
        if answer.done():
            return  # its caller was cancelled: the write is committed, no one listens
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(value)

    def view(self) -> Tables:
        return self.tables

    async def read(self, step: Callable[[Tables], T]) -> T:
        await asyncio.sleep(0)  # a round trip
        tables = self.view()
        with self.tables.lock:
            return step(tables)

    # ------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.write(lambda: self.tables.insert(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.write(lambda: self.tables.insert_fenced(records, expected_latest_id))

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.write(lambda: self.tables.remove(checkpoint_id))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.write(lambda: self.tables.prune(workflow_name, keep_last))

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.write(lambda: self.tables.delete_workflow(workflow_name))

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.write(lambda: self.tables.overwrite_body(checkpoint_id, body, digest))

    # ------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.read(lambda t: t.load(checkpoint_id))

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.read(lambda t: t.latest(workflow_name, graph_signature_hash))

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.read(lambda t: t.list_bodies(workflow_name, graph_signature_hash, include_nested))

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self.read(lambda t: t.list_ids(workflow_name, graph_signature_hash, include_nested))

    async def nested_bodies(self, checkpoint_ids: Any) -> dict[CheckpointID, bytes]:
        wanted = list(checkpoint_ids)
        return await self.read(lambda t: t.nested_bodies(wanted))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.read(lambda t: t.nested_ids(checkpoint_id))

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.read(lambda t: t.walk(checkpoint_id, max_depth, with_bodies))

    async def workflow_names(self) -> list[str]:
        return await self.read(lambda t: t.workflow_names())

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.read(lambda t: t.info(checkpoint_id))

    async def records(self, workflow_name: str | None) -> list[CheckpointInfo]:
        return await self.read(lambda t: t.records_of(workflow_name))

    async def tombstones(self, workflow_name: str | None) -> list[CheckpointID]:
        return await self.read(lambda t: t.tombstones_of(workflow_name))


class GroupBatchNewestFirst(GroupBackend):
    """The flusher commits a batch from its end (it pops the queue like a stack): one handle's
    concurrent saves commit in the reverse of their call order."""

    def ordered(self, batch: list[Queued]) -> list[Queued]:
        return list(reversed(batch))


class GroupFailureFailsBatch(GroupBackend):
    """A write that fails fails every caller of its batch, though the writes applied before it stay
    committed (the batch has no savepoints, and the author reports the batch's first error)."""

    def commit(self, batch: list[Queued]) -> None:
        with self.tables.lock:
            answers = [self.apply(step) for step, _ in batch]
        first = next((error for _, error in answers if error is not None), None)
        for (_, answer), (value, error) in zip(batch, answers, strict=True):
            self.answer(answer, value, first if first is not None else error)


class GroupSnapshotBeforeBatch(GroupBackend):
    """Readers read the snapshot the flusher publishes, so they never wait for the lock; the
    flusher publishes it as it begins a batch, before applying it."""

    def publish(self) -> None:
        self.published = self.tables.copy()

    def view(self) -> Tables:
        return self.published if self.published is not None else self.tables


class GroupFenceAtEnqueue(GroupBackend):
    """A fenced save checks the fence when it is queued (against what is committed) and queues a
    plain insert: two fenced saves queued against one head both commit."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        with self.tables.lock:
            latest = self.tables.head_id(record.workflow_name)
            stored = record.checkpoint_id in self.tables.records
        if latest != expected_latest_id and not stored:
            return FenceCheck(latest, None)
        return FenceCheck.after_insert(latest, await self.insert(records))


class GroupCloseCancelsFlusher(GroupBackend):
    """Closing a handle cancels its flusher: the callers of the writes it had queued are never
    answered."""

    async def close(self) -> None:
        if self.flusher is not None:
            self.flusher.cancel()


class GroupAnswersCancelledCallers(GroupBackend):
    """The flusher answers every caller of a batch without checking whether it was cancelled: a
    cancelled caller's future raises InvalidStateError in the flusher, and the callers after it
    in the batch are never answered."""

    def answer(self, answer: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(value)


class GroupSequenceAtEnqueue(GroupBackend):
    """A save takes its sequence numbers when it is queued (the workflow's counter plus the saves
    this handle has queued for it), so the commit has nothing to compute: two handles' saves take
    the same numbers."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        tables = self.tables
        with tables.lock:
            counters = {r.workflow_name: tables.sequences.get(r.workflow_name, 0) for r in records}
        pending = Counter(name for _, name in getattr(self, "pending", []))
        numbers = []
        for record in records:
            pending[record.workflow_name] += 1
            numbers.append(counters[record.workflow_name] + pending[record.workflow_name])
        mine = [(record.checkpoint_id, record.workflow_name) for record in records]
        self.pending: list[tuple[CheckpointID, str]] = [*getattr(self, "pending", []), *mine]

        def write() -> InsertResult:
            found = tables.records.get(records[0].checkpoint_id)
            if found is not None:
                return InsertResult.of_stored_digest(found[1].digest, records[0])
            for record in records[1:]:
                if record.checkpoint_id in tables.records:
                    raise nested_id_conflict(records, record.checkpoint_id)
            for record, number in zip(records, numbers, strict=True):
                tables.records[record.checkpoint_id] = (number, record)
                name = record.workflow_name
                tables.sequences[name] = max(tables.sequences.get(name, 0), number)
                if record.container_id is not None:
                    tables.children.setdefault(record.container_id, []).append(record.checkpoint_id)
            return InsertResult.INSERTED

        try:
            return await self.write(write)
        finally:
            self.pending = [each for each in self.pending if each not in mine]


class GroupBatchSharesNumber(GroupBackend):
    """Every record a batch commits for a workflow takes one number, the batch's (a commit number,
    as a database's transaction id); records with one number are listed by id."""

    def commit(self, batch: list[Queued]) -> None:
        tables = self.tables
        with tables.lock:
            before = dict(tables.sequences)
            answers = [self.apply(step) for step, _ in batch]
            for checkpoint_id, (sequence, record) in list(tables.records.items()):
                first = before.get(record.workflow_name, 0) + 1
                if sequence >= first:
                    tables.records[checkpoint_id] = (first, record)
            for name, last in list(tables.sequences.items()):
                if last > before.get(name, 0):
                    tables.sequences[name] = before.get(name, 0) + 1
        for (_, answer), (value, error) in zip(batch, answers, strict=True):
            self.answer(answer, value, error)

    def view(self) -> Tables:
        return ById(self.tables)


class ById(Tables):
    """The tables listed by (number, id)."""

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables.records, tables.sequences, tables.children, tables.tombstones)

    def rows(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        found = [
            (sequence, record.checkpoint_id, record)
            for sequence, record in self.records.values()
            if record.workflow_name == workflow_name
            and (include_nested or record.container_id is None)
            and graph_signature_hash in (None, record.graph_signature_hash)
        ]
        found.sort(key=lambda row: (row[0], row[1]))
        return [record for _, _, record in found]


def group_target(backend_class: type[GroupBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== a wrapper around Redis

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


class WrappedRedisBackend(RedisBackend):
    """The built-in Redis backend behind an author's wrapper: every call is counted (metrics), and
    a read whose connection dropped is tried once more (reads change nothing)."""

    @property
    def metrics(self) -> Counter[str]:
        found = self.__dict__.get("metrics_counter")
        if found is None:
            found = self.__dict__["metrics_counter"] = Counter()
        return found

    async def counted(self, name: str, call: Callable[[], Awaitable[T]], *, read: bool = False) -> T:
        self.metrics[name] += 1
        try:
            return await call()
        except ConnectionError:
            if not read:
                raise
            self.metrics[f"{name}.retried"] += 1
            return await call()

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.counted("insert", lambda: super(WrappedRedisBackend, self).insert(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        parent = super()
        return await self.counted("insert_fenced", lambda: parent.insert_fenced(records, expected_latest_id))

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.counted("remove", lambda: super(WrappedRedisBackend, self).remove(checkpoint_id))

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        parent = super()
        return await self.counted("load", lambda: parent.load(checkpoint_id), read=True)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        parent = super()
        return await self.counted(
            "latest", lambda: parent.latest(workflow_name, graph_signature_hash), read=True
        )

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        parent = super()
        return await self.counted(
            "list_ids",
            lambda: parent.list_ids(workflow_name, graph_signature_hash, include_nested=include_nested),
            read=True,
        )


class RedisLoadCache(WrappedRedisBackend):
    """Checkpoints are immutable, so each handle caches the bodies it loaded (dropped by its own
    deletes): a checkpoint another handle deleted still loads here."""

    @property
    def cache(self) -> dict[CheckpointID, StoredBody]:
        return self.__dict__.setdefault("body_cache", {})

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = self.cache.get(checkpoint_id)
        if found is None:
            found = await super().load(checkpoint_id)
            if found is not None:
                self.cache[checkpoint_id] = found
        return found

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        self.cache.clear()
        return await super().remove(checkpoint_id)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        self.cache.clear()
        return await super().prune(workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        self.cache.clear()
        return await super().delete_workflow(workflow_name)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        self.cache.clear()
        return await super().overwrite_body(checkpoint_id, body, digest)


class RedisRetryPastCancellation(WrappedRedisBackend):
    """A read interrupted by anything (``except BaseException``, to catch a reset connection
    whatever it raises) is tried once more: a cancelled read runs again and returns."""

    async def counted(self, name: str, call: Callable[[], Awaitable[T]], *, read: bool = False) -> T:
        self.metrics[name] += 1
        try:
            return await call()
        except BaseException:
            if not read:
                raise
            return await call()


class RedisMetricsBlockingPush(WrappedRedisBackend):
    """Every call pushes its count to Redis with the synchronous client (one INCR, the metrics
    library's): a blocking request on the loop's thread."""

    async def counted(self, name: str, call: Callable[[], Awaitable[T]], *, read: bool = False) -> T:
        import redis

        client = self.__dict__.get("sync_client")
        if client is None:
            client = self.__dict__["sync_client"] = redis.Redis.from_url(REDIS_URL)
        client.incr(f"{self.prefix}-metrics:{name}")
        return await super().counted(name, call, read=read)

    async def close(self) -> None:
        client = self.__dict__.pop("sync_client", None)
        if client is not None:
            client.close()
        await super().close()


class RedisMetricsRebuildsLatest(WrappedRedisBackend):
    """The metrics wrapper measures the size of what ``latest`` read and hands back a record rebuilt
    from its id, body and index entry: the head's rivals are left behind."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        found = await super().latest(workflow_name, graph_signature_hash)
        if found is None:
            return None
        self.metrics["latest.bytes"] += len(found.body)
        return StoredBody(found.checkpoint_id, found.body, entry=found.entry, nested=found.nested)


class RedisWriteBehind(WrappedRedisBackend):
    """Saves go to a write-behind buffer that a task writes to Redis; a save answers once
    buffered, and this handle's reads write the buffer out first: other handles miss a save
    until the buffer is written."""

    @property
    def buffer(self) -> list[Sequence[CheckpointRecord]]:
        return self.__dict__.setdefault("write_buffer", [])

    async def drain(self) -> None:
        while self.buffer:
            records = self.buffer.pop(0)
            await super().insert(records)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        if any(records[0].checkpoint_id == r[0].checkpoint_id for r in self.buffer):
            return InsertResult.of_stored_digest(records[0].digest, records[0])
        self.buffer.append(list(records))
        writer = asyncio.get_running_loop().create_task(self.drain())
        writer.add_done_callback(lambda done: done.cancelled() or done.exception())
        return InsertResult.INSERTED

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        await self.drain()
        return await super().load(checkpoint_id)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        await self.drain()
        return await super().latest(workflow_name, graph_signature_hash)

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        await self.drain()
        return await super().list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        await self.drain()
        return await super().list_bodies(workflow_name, graph_signature_hash, include_nested=include_nested)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        await self.drain()
        return await super().insert_fenced(records, expected_latest_id)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        await self.drain()
        return await super().remove(checkpoint_id)

    async def close(self) -> None:
        await self.drain()
        await super().close()


class RedisCloseDeletesKeys(WrappedRedisBackend):
    """Closing a handle deletes the keys under its prefix (the store's own keys, nobody else's): the
    store is gone as soon as any handle closes."""

    async def close(self) -> None:
        await wipe(self.prefix)
        await super().close()


class RedisIdsThroughSet(WrappedRedisBackend):
    """The wrapper de-duplicates listed ids through a set (a read retried after a dropped
    connection must not list an id twice) and sorts them for stable metrics: commit order is
    lost."""

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        ids = await super().list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        return sorted(set(ids))


class RedisPrefixPerHandle(WrappedRedisBackend):
    """Each handle takes a key prefix of its own with random bits, so what it writes can be told
    apart and deleted: handles from ``new_handle()`` share nothing."""

    def new_handle(self, *, read_only: bool | None = None) -> RedisPrefixPerHandle:
        return type(self)(url=REDIS_URL, prefix=f"{self.prefix.split('-h')[0]}-h{uuid.uuid4().hex[:8]}")


async def wipe(prefix: str) -> None:
    """Delete every key of this prefix, and only those."""
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL)
    try:
        doomed = [key async for key in client.scan_iter(match=f"{prefix}*", count=1000)]
        for start in range(0, len(doomed), 500):
            await client.delete(*doomed[start : start + 500])
    finally:
        await client.aclose()


def redis_target(backend_class: type[WrappedRedisBackend]) -> Callable[[], StorageTarget]:
    storage_class = type(
        f"{backend_class.__name__}Storage", (RedisCheckpointStorage,), {"backend_class": backend_class}
    )

    def target() -> StorageTarget:
        prefix = f"ckpt-b14-{uuid.uuid4().hex[:12]}"
        root = storage_class(url=REDIS_URL, prefix=prefix)

        async def cleanup() -> None:
            await root.aclose()
            await wipe(prefix)

        return StorageTarget(
            backend_class.__name__,
            root.new_handle,
            cleanup=cleanup,
            reopen=lambda: storage_class(url=REDIS_URL, prefix=prefix),
        )

    return target


# ====================================================================== a MAF user's six methods


@dataclass(frozen=True)
class Row:
    """One stored checkpoint: its encoded body and what the latest rule reads."""

    sequence: int
    checkpoint_id: CheckpointID
    workflow_name: str
    previous_checkpoint_id: CheckpointID | None
    graph_signature_hash: str
    timestamp: str
    body: bytes


class RowStorage:
    """A MAF user's storage with MAF's six methods and nothing else: one row per checkpoint (the
    body encoded at save, decoded afresh on each read), a per-workflow commit counter, and
    ``get_latest`` by the documented rule (the newest commit followed through its lineage, then
    the newest timestamp among its rivals)."""

    def __init__(self) -> None:
        self.codec = CheckpointCodec(trust_saved_types=True)
        self.rows: dict[CheckpointID, Row] = {}
        self.counters: dict[str, int] = {}

    # ------------------------------------------------------------ helpers

    def encode(self, checkpoint: Any) -> bytes:
        return self.codec.encode_checkpoint(checkpoint)

    def decode(self, row: Row) -> Any:
        return self.codec.decode_checkpoint(row.body, checkpoint_id=row.checkpoint_id)

    def checked(self, checkpoint: Any) -> CheckpointID:
        """The checkpoint's id, once its ids and workflow name pass the identifier rules."""
        validate_identifier(checkpoint.workflow_name, "workflow_name")
        if checkpoint.previous_checkpoint_id is not None:
            validate_identifier(checkpoint.previous_checkpoint_id, "previous_checkpoint_id")
        return validate_identifier(checkpoint.checkpoint_id, "checkpoint_id")

    def same(self, row: Row, body: bytes, checkpoint: Any) -> bool:
        """A re-save stores nothing new when it is the stored checkpoint, byte for byte or as the
        codec compares values (a dict built in another order encodes differently)."""
        return row.body == body or self.codec.same_value(self.decode(row), checkpoint)

    def next_sequence(self, workflow_name: str) -> int:
        number = self.counters.get(workflow_name, 0) + 1
        self.counters[workflow_name] = number
        return number

    def of(self, workflow_name: str) -> list[Row]:
        return sorted(
            (r for r in self.rows.values() if r.workflow_name == workflow_name), key=lambda r: r.sequence
        )

    def listed(self, workflow_name: str) -> list[Row]:
        return self.of(workflow_name)

    def latest_row(self, rows: list[Row]) -> Row | None:
        head = latest_record(rows)
        if head is None:
            return None
        return resume_point([*rivals_of(rows, head), head])

    # ------------------------------------------------------------ MAF's six methods

    async def save(self, checkpoint: Any) -> CheckpointID:
        checkpoint_id = self.checked(checkpoint)
        body = self.encode(checkpoint)
        # No await from the encode to the write: the check and the write are one step.
        found = self.rows.get(checkpoint_id)
        if found is not None:
            if not self.same(found, body, checkpoint):
                raise CheckpointConflictError(checkpoint_id)
            return checkpoint_id
        self.store(checkpoint, body)
        return checkpoint_id

    def store(self, checkpoint: Any, body: bytes) -> None:
        self.rows[checkpoint.checkpoint_id] = Row(
            self.next_sequence(checkpoint.workflow_name),
            checkpoint.checkpoint_id,
            checkpoint.workflow_name,
            checkpoint.previous_checkpoint_id,
            checkpoint.graph_signature_hash,
            checkpoint.timestamp,
            body,
        )

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        row = self.rows.get(validate_identifier(checkpoint_id, "checkpoint_id"))
        if row is None:
            raise CheckpointNotFoundError(checkpoint_id)
        return self.decode(row)

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        validate_identifier(workflow_name, "workflow_name")
        return [self.decode(row) for row in self.listed(workflow_name)]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        validate_identifier(workflow_name, "workflow_name")
        return [row.checkpoint_id for row in self.listed(workflow_name)]

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return self.rows.pop(validate_identifier(checkpoint_id, "checkpoint_id"), None) is not None

    async def get_latest(self, *, workflow_name: str) -> Any | None:
        validate_identifier(workflow_name, "workflow_name")
        row = self.latest_row(self.of(workflow_name))
        return None if row is None else self.decode(row)


class RowLatestByTimestamp(RowStorage):
    """``get_latest`` is the row with the newest timestamp (as MAF 1.23's storages chose)."""

    def latest_row(self, rows: list[Row]) -> Row | None:
        return max(rows, key=lambda r: r.timestamp, default=None)


class RowLatestByInsertion(RowStorage):
    """``get_latest`` is the row saved last: the lineage and the rivals are not read."""

    def latest_row(self, rows: list[Row]) -> Row | None:
        return rows[-1] if rows else None


class RowLatestAsMaf126(RowStorage):
    """``get_latest`` is MAF 1.26's ``_select_latest_checkpoint``: the newest timestamp; among equal
    timestamps, one another of them names as previous is superseded; then the greatest id."""

    def latest_row(self, rows: list[Row]) -> Row | None:
        if not rows:
            return None
        newest = max(r.timestamp for r in rows)
        tied = [r for r in rows if r.timestamp == newest]
        named = {r.previous_checkpoint_id for r in tied}
        tips = [r for r in tied if r.checkpoint_id not in named] or tied
        return max(tips, key=lambda r: r.checkpoint_id)


class RowLatestWithoutRivals(RowStorage):
    """``get_latest`` follows the newest commit through its lineage and stops there: the rivals of
    parallel steps are never compared by timestamp."""

    def latest_row(self, rows: list[Row]) -> Row | None:
        return latest_record(rows)


class RowNamesFolded(RowStorage):
    """Workflow names are compared case-folded (``Review`` and ``review`` are one workflow to a
    user typing them), in the listings and ``get_latest``."""

    def of(self, workflow_name: str) -> list[Row]:
        folded = workflow_name.casefold()
        return sorted(
            (r for r in self.rows.values() if r.workflow_name.casefold() == folded), key=lambda r: r.sequence
        )


class RowListedByTimestamp(RowStorage):
    """The listings are sorted by timestamp (the checkpoint's own clock), not by commit."""

    def listed(self, workflow_name: str) -> list[Row]:
        return sorted(self.of(workflow_name), key=lambda r: r.timestamp)


class RowCounterReadBeforeWrite(RowStorage):
    """A save takes its commit number, then writes its row after an await (the row store's write),
    without the lock: parallel steps' saves take the same number."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        checkpoint_id = self.checked(checkpoint)
        body = self.encode(checkpoint)
        found = self.rows.get(checkpoint_id)
        if found is not None:
            if not self.same(found, body, checkpoint):
                raise CheckpointConflictError(checkpoint_id)
            return checkpoint_id
        number = self.counters.get(checkpoint.workflow_name, 0) + 1
        await asyncio.sleep(0)
        self.counters[checkpoint.workflow_name] = number
        self.rows[checkpoint_id] = Row(
            number,
            checkpoint_id,
            checkpoint.workflow_name,
            checkpoint.previous_checkpoint_id,
            checkpoint.graph_signature_hash,
            checkpoint.timestamp,
            body,
        )
        return checkpoint_id


class RowLoadKeepsDecoded(RowStorage):
    """Each row keeps the checkpoint decoded on its first read, and every read returns that object
    (decoding is the cost of a read)."""

    def decode(self, row: Row) -> Any:
        cache: dict[CheckpointID, Any] = self.__dict__.setdefault("decoded", {})
        if row.checkpoint_id not in cache:
            cache[row.checkpoint_id] = super().decode(row)
        return cache[row.checkpoint_id]


class RowEncodesAfterAwait(RowStorage):
    """A save takes the lock, then encodes: the checkpoint is read after the save's first await, so
    a caller that changed it meanwhile stores the change."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        checkpoint_id = self.checked(checkpoint)
        await asyncio.sleep(0)  # the row store's write is a round trip; encode just before it
        body = self.encode(checkpoint)
        found = self.rows.get(checkpoint_id)
        if found is not None:
            if not self.same(found, body, checkpoint):
                raise CheckpointConflictError(checkpoint_id)
            return checkpoint_id
        self.store(checkpoint, body)
        return checkpoint_id


class RowDeleteAlwaysTrue(RowStorage):
    """``delete`` answers True for any id it was asked about once it is gone (a delete is
    idempotent): deleting an id that was never stored says it existed."""

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self.rows.pop(validate_identifier(checkpoint_id, "checkpoint_id"), None)
        return True


def row_target(storage_class: type[RowStorage]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(storage_class.__name__, storage_class)

    return target


# ====================================================================== the batch

BROKEN_THREAD: list[type[ThreadBackend]] = [
    ThreadFenceCheckThenWrite,
    ThreadSequenceReadThenWrite,
    ThreadExistsCheckThenWrite,
    ThreadBodiesReadPerId,
    ThreadCancelUndoesInsert,
    ThreadCancelAwaitsThread,
    ThreadOwnPool,
    ThreadCloseSkipsInFlight,
]

BROKEN_GROUP: list[type[GroupBackend]] = [
    GroupBatchNewestFirst,
    GroupFailureFailsBatch,
    GroupSnapshotBeforeBatch,
    GroupFenceAtEnqueue,
    GroupCloseCancelsFlusher,
    GroupAnswersCancelledCallers,
    GroupSequenceAtEnqueue,
    GroupBatchSharesNumber,
]

BROKEN_REDIS: list[type[WrappedRedisBackend]] = [
    RedisLoadCache,
    RedisRetryPastCancellation,
    RedisMetricsBlockingPush,
    RedisMetricsRebuildsLatest,
    RedisWriteBehind,
    RedisCloseDeletesKeys,
    RedisIdsThroughSet,
    RedisPrefixPerHandle,
]

BROKEN_ROW: list[type[RowStorage]] = [
    RowLatestByTimestamp,
    RowLatestByInsertion,
    RowLatestAsMaf126,
    RowLatestWithoutRivals,
    RowNamesFolded,
    RowListedByTimestamp,
    RowCounterReadBeforeWrite,
    RowLoadKeepsDecoded,
    RowEncodesAfterAwait,
    RowDeleteAlwaysTrue,
]

REDIS_NAMES = frozenset(c.__name__ for c in [WrappedRedisBackend, *BROKEN_REDIS])
"""The storages on the machine's Redis (the redis lane)."""


def _entries() -> list[Entry]:
    entries: list[Entry] = []
    entries += [(c.__name__, thread_target(c), _doc(c)) for c in BROKEN_THREAD]
    entries += [(c.__name__, group_target(c), _doc(c)) for c in BROKEN_GROUP]
    entries += [(c.__name__, redis_target(c), _doc(c)) for c in BROKEN_REDIS]
    entries += [(c.__name__, row_target(c), _doc(c)) for c in BROKEN_ROW]
    return entries


ENTRIES: list[Entry] = _entries()
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = []
"""Written as broken, judged not to break the contract as built (tests/kit/blind_batch_fourteen.md
says why); each must pass the whole kit."""

HONEST: list[Entry] = [
    ("ThreadBackend", thread_target(ThreadBackend), _doc(ThreadBackend)),
    ("GroupBackend", group_target(GroupBackend), _doc(GroupBackend)),
    ("WrappedRedisBackend", redis_target(WrappedRedisBackend), _doc(WrappedRedisBackend)),
    ("RowStorage", row_target(RowStorage), _doc(RowStorage)),
]
"""Honest storages: one per style; each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
