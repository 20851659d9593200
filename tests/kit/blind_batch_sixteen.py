"""A sixteenth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only the author docs and the
public author API could ship. Four styles, each reusing batch nine's ``Tables`` (the primitives
as plain functions) over the style's own representation:

* ``SplitBackend``: an index in the author's own SQLite database (stdlib ``sqlite3``, a
  connection per worker thread, each handle one single-thread executor, a temporary directory
  per store) holding the records' index fields and the sequence counters, the bodies as files of
  a blob directory named by a digest of the id (written to a temporary file, then
  ``os.replace``). A write puts the blob first, then the index rows, in one SQLite transaction
  under the store's lock; a cleanup pass on remove deletes blobs no index row names;
* ``WriteBackBackend``: a write-back cache in front of a durable "remote" (batch nine's
  ``Tables``): writes are decided against the merged view and acknowledged once in the store's
  dirty buffer; every call first lets the flusher send the oldest buffered writes to the
  remote while more than ``DIRTY_LIMIT`` (3) are buffered, and ``aclose()`` flushes what is
  left; reads merge the buffer over the remote (the remote's tables with the buffered writes
  replayed);
* ``ColumnBackend``: a columnar store: per workflow one Python list per field, rows addressed
  by position, deletions a set of dead positions, an id -> (workflow, position) index and a
  compaction every ``COMPACT_EVERY`` deletes that rewrites the columns and remaps positions;
  listings scan the columns;
* ``RetryBackend``: an author's retry wrapper over a flaky store (``Tables`` that, by a
  deterministic call counter shared by the store's handles, fail a call before applying it or
  apply it and lose its answer with a ``ConnectionError``; a retried call goes through); the
  wrapper retries transient errors and, where a lost answer is ambiguous, reads back before
  deciding.

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_sixteen.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import os
import shutil
import sqlite3
import tempfile
import threading
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from conformance import StorageTarget
from storages import CheckpointCorruptedError, StorageUnavailableError
from storages.backend import (
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    nested_id_conflict,
    pruned_records,
)
from storages.contract import CheckpointID, CheckpointInfo

from .blind_batch_nine import Tables, TableStorage
from .blind_batch_thirteen import TablesBackend

Entry = tuple[str, Callable[[], StorageTarget], str]
T = TypeVar("T")
Value = tuple[int, CheckpointRecord]


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


def tables_target(backend_class: type[TablesBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== SQLite index, blob files

CLEANUP_EVERY = 4
"""Removes between two cleanup passes of a store whose remove leaves blobs behind."""

COLUMNS = "id, workflow, previous, signature, container, root, position, digest, seq"


class SplitFiles:
    """One store's files: the SQLite index and the blob directory, removed with the store."""

    seq_type = "INTEGER"
    id_collation = ""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="b16split-")
        self.path = os.path.join(self.directory, "index.db")
        self.blobs = os.path.join(self.directory, "blobs")
        os.mkdir(self.blobs)
        self.local = threading.local()
        self.removes = 0
        connection = sqlite3.connect(self.path)
        connection.executescript(
            f"""
            CREATE TABLE idx (id TEXT PRIMARY KEY{self.id_collation}, workflow TEXT NOT NULL, previous TEXT,
                signature TEXT NOT NULL, container TEXT, root TEXT, position INTEGER NOT NULL,
                digest TEXT NOT NULL, seq {self.seq_type} NOT NULL);
            CREATE INDEX idx_workflow ON idx (workflow, seq);
            CREATE TABLE counters (workflow TEXT PRIMARY KEY, seq INTEGER NOT NULL);
            """
        )
        connection.close()
        weakref.finalize(self, shutil.rmtree, self.directory, True)

    @property
    def db(self) -> sqlite3.Connection:
        """This thread's connection (each handle's worker thread opens its own)."""
        connection: sqlite3.Connection | None = getattr(self.local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(self.path, isolation_level=None)
            self.local.connection = connection
        return connection

    def close_thread(self) -> None:
        connection = getattr(self.local, "connection", None)
        if connection is not None:
            connection.close()
            self.local.connection = None

    def blob_path(self, checkpoint_id: CheckpointID) -> str:
        return os.path.join(self.blobs, hashlib.sha256(checkpoint_id.encode()).hexdigest())

    def write_blob(self, checkpoint_id: CheckpointID, body: bytes) -> None:
        path = self.blob_path(checkpoint_id)
        temporary = f"{path}.{threading.get_ident()}.tmp"
        with open(temporary, "wb") as handle:
            handle.write(body)
        os.replace(temporary, path)

    def read_blob(self, checkpoint_id: CheckpointID) -> bytes:
        try:
            with open(self.blob_path(checkpoint_id), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            raise CheckpointCorruptedError(checkpoint_id, "its body blob is missing") from None

    def unlink_blob(self, checkpoint_id: CheckpointID) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.blob_path(checkpoint_id))

    def cleanup(self) -> None:
        """Removes every blob no index row names (temporary files of writes are left alone)."""
        named = {os.path.basename(self.blob_path(row[0])) for row in self.db.execute("SELECT id FROM idx")}
        for name in os.listdir(self.blobs):
            if not name.endswith(".tmp") and name not in named:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.blobs, name))


class SplitRecords(MutableMapping[CheckpointID, Value]):
    """Records as index rows plus blob files."""

    lookup = "SELECT " + COLUMNS + " FROM idx WHERE id = ?"
    insert_row = "INSERT INTO idx (" + COLUMNS + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    skip_existing_blob = False

    def __init__(self, files: SplitFiles) -> None:
        self.files = files

    def record_of(self, row: Sequence[Any]) -> Value:
        body = self.files.read_blob(row[0])
        record = CheckpointRecord(row[0], row[1], row[2], row[3], body, row[7], row[4], row[5], int(row[6]))
        return int(row[8]), record

    def __getitem__(self, checkpoint_id: CheckpointID) -> Value:
        row = self.files.db.execute(self.lookup, (checkpoint_id,)).fetchone()
        if row is None:
            raise KeyError(checkpoint_id)
        return self.record_of(row)

    def __contains__(self, checkpoint_id: object) -> bool:
        return (
            isinstance(checkpoint_id, str)
            and self.files.db.execute("SELECT 1 FROM idx WHERE id = ?", (checkpoint_id,)).fetchone()
            is not None
        )

    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        sequence, record = value
        db = self.files.db
        if db.execute("SELECT 1 FROM idx WHERE id = ?", (checkpoint_id,)).fetchone() is not None:
            # A raw write: the blob only, the index row (its digest and sequence) kept.
            self.files.write_blob(checkpoint_id, record.body)
            return
        if not (self.skip_existing_blob and os.path.exists(self.files.blob_path(checkpoint_id))):
            self.files.write_blob(checkpoint_id, record.body)
        self.put_row(record, sequence)

    def put_row(self, record: CheckpointRecord, sequence: int) -> None:
        self.files.db.execute(
            self.insert_row,
            (
                record.checkpoint_id,
                record.workflow_name,
                record.previous_checkpoint_id,
                record.graph_signature_hash,
                record.container_id,
                record.root_id,
                record.position,
                record.digest,
                sequence,
            ),
        )

    def __delitem__(self, checkpoint_id: CheckpointID) -> None:
        self.files.db.execute("DELETE FROM idx WHERE id = ?", (checkpoint_id,))
        self.drop_blob(checkpoint_id)

    def drop_blob(self, checkpoint_id: CheckpointID) -> None:
        self.files.unlink_blob(checkpoint_id)

    def __iter__(self) -> Iterator[CheckpointID]:
        return iter([row[0] for row in self.files.db.execute("SELECT id FROM idx")])

    def __len__(self) -> int:
        return int(self.files.db.execute("SELECT count(*) FROM idx").fetchone()[0])


class SplitCounters(MutableMapping[str, int]):
    """The per-workflow sequence counters as rows of ``counters``."""

    def __init__(self, files: SplitFiles) -> None:
        self.files = files

    def __getitem__(self, workflow_name: str) -> int:
        row = self.files.db.execute(
            "SELECT seq FROM counters WHERE workflow = ?", (workflow_name,)
        ).fetchone()
        if row is None:
            raise KeyError(workflow_name)
        return int(row[0])

    def __setitem__(self, workflow_name: str, sequence: int) -> None:
        self.files.db.execute(
            "INSERT INTO counters (workflow, seq) VALUES (?, ?) ON CONFLICT (workflow) DO UPDATE SET seq = ?",
            (workflow_name, sequence, sequence),
        )

    def __delitem__(self, workflow_name: str) -> None:
        self.files.db.execute("DELETE FROM counters WHERE workflow = ?", (workflow_name,))

    def __iter__(self) -> Iterator[str]:
        return iter([row[0] for row in self.files.db.execute("SELECT workflow FROM counters")])

    def __len__(self) -> int:
        return int(self.files.db.execute("SELECT count(*) FROM counters").fetchone()[0])


class SplitTables(Tables):
    """Tables whose records and counters live in the SQLite index and the blob directory (the
    children and the tombstones stay in the store's memory, shared by its handles)."""

    files: SplitFiles
    files_class: type[SplitFiles] = SplitFiles
    records_class: type[SplitRecords] = SplitRecords
    workflow_match = "workflow = ?"
    signature_match = "signature = ?"
    order = "ORDER BY seq"

    @classmethod
    def new(cls) -> Self:
        files = cls.files_class()
        tables = cls(records=cls.records_class(files), sequences=SplitCounters(files))  # type: ignore[arg-type]
        tables.files = files
        return tables

    @property
    def split_records(self) -> SplitRecords:
        assert isinstance(self.records, SplitRecords)
        return self.records

    def rows(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        query = f"SELECT {COLUMNS} FROM idx WHERE {self.workflow_match}"
        arguments: list[Any] = [workflow_name]
        if not include_nested:
            query += " AND container IS NULL"
        if graph_signature_hash is not None:
            query += " AND " + self.signature_match
            arguments.append(graph_signature_hash)
        found = self.files.db.execute(f"{query} {self.order}", arguments).fetchall()
        return [self.split_records.record_of(row)[1] for row in found]

    def workflow_names(self) -> list[str]:
        found = self.files.db.execute("SELECT DISTINCT workflow FROM idx WHERE container IS NULL")
        return sorted(row[0] for row in found)

    def remove(self, checkpoint_id: CheckpointID) -> bool:
        removed = super().remove(checkpoint_id)
        self.files.removes += 1
        self.after_remove()
        return removed

    def after_remove(self) -> None:
        self.files.cleanup()

    def transaction(self, call: Callable[[Tables], T]) -> T:
        """One SQLite transaction around the call (the blob writes happen inside it, before
        the rows)."""
        db = self.files.db
        db.execute("BEGIN IMMEDIATE")
        try:
            result = call(self)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return result


class SplitBackend(TablesBackend):
    """An index in the author's own SQLite database and the bodies as blob files named by a
    digest of the id: a write puts the blob (temporary file, then os.replace) first, then the
    index rows in one transaction under the store's lock, on the handle's own worker thread; a
    cleanup pass on every remove deletes blobs no index row names."""

    tables_class: type[SplitTables] = SplitTables

    def __init__(self, tables: Tables | None = None) -> None:
        super().__init__(tables)
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None

    def new_tables(self) -> Tables:
        return self.tables_class.new()

    def describe(self) -> str:
        return "split://"

    @property
    def split(self) -> SplitTables:
        assert isinstance(self.tables, SplitTables)
        return self.tables

    def worker(self) -> concurrent.futures.ThreadPoolExecutor:
        if self.executor is None:
            self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="b16split")
        return self.executor

    async def on_worker(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.worker(), call)

    async def step(self, call: Callable[[Tables], T]) -> T:
        tables = self.split

        def locked() -> T:
            with tables.lock:
                return tables.transaction(call)

        return await self.on_worker(locked)

    async def close(self) -> None:
        executor, self.executor = self.executor, None
        if executor is not None:
            files = self.split.files
            await asyncio.get_running_loop().run_in_executor(executor, files.close_thread)
            executor.shutdown(wait=True)


def split_target(backend_class: type[SplitBackend]) -> Callable[[], StorageTarget]:
    return tables_target(backend_class)


class IndexFirstRecords(SplitRecords):
    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        sequence, record = value
        if checkpoint_id in self:
            self.files.write_blob(checkpoint_id, record.body)
            return
        self.put_row(record, sequence)


class IndexFirstTables(SplitTables):
    records_class = IndexFirstRecords


class SplitIndexBeforeBlob(SplitBackend):
    """A save commits the index rows in one transaction and writes the blobs in a second step
    after it: between the two, a read of the new checkpoint finds its row without a body."""

    tables_class = IndexFirstTables

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await self.step(lambda t: t.insert(records))
        if result is InsertResult.INSERTED:
            await self.write_blobs(records)
        return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        check = await self.step(lambda t: t.insert_fenced(records, expected_latest_id))
        if check is None:
            await self.write_blobs(records)
        return check

    async def write_blobs(self, records: Sequence[CheckpointRecord]) -> None:
        files = self.split.files

        def write() -> None:
            for record in records:
                files.write_blob(record.checkpoint_id, record.body)

        await asyncio.sleep(0)
        await self.on_worker(write)


class BlobApartTables(SplitTables):
    records_class = IndexFirstRecords


class SplitCleanupRacesWrite(SplitBackend):
    """A save writes its blobs in a step of their own before the transaction of its index rows
    (blob writes take no lock: their names are unique), so a remove's cleanup pass running
    between the two deletes the new blobs and the save commits rows without bodies."""

    tables_class = BlobApartTables

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await self.write_blobs(records)
        return await self.step(lambda t: t.insert(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        await self.write_blobs(records)
        return await self.step(lambda t: t.insert_fenced(records, expected_latest_id))

    async def write_blobs(self, records: Sequence[CheckpointRecord]) -> None:
        tables = self.split

        def write() -> None:
            for record in records:
                if record.checkpoint_id not in tables.records:
                    tables.files.write_blob(record.checkpoint_id, record.body)

        await self.on_worker(write)
        await asyncio.sleep(0)


class KeepBlobRecords(SplitRecords):
    skip_existing_blob = True

    def drop_blob(self, checkpoint_id: CheckpointID) -> None:
        pass  # the cleanup pass removes blobs without a row


class KeepBlobTables(SplitTables):
    records_class = KeepBlobRecords

    def after_remove(self) -> None:
        if self.files.removes % CLEANUP_EVERY == 0:
            self.files.cleanup()


class SplitReSaveReadsOldBlob(SplitBackend):
    """A delete leaves blobs to a cleanup pass every few removes, and a save skips writing a
    blob that already exists (taking it for a retry's): a checkpoint deleted and saved again
    under its id with other content is read back with the deleted body."""

    tables_class = KeepBlobTables


class SplitSequenceReadApart(SplitBackend):
    """A save reads its workflow's next sequence in one transaction and writes the rows with it
    in a second: two handles saving to one workflow at once get the same sequence."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        workflow = records[0].workflow_name
        start = await self.step(lambda t: t.sequences.get(workflow, 0))
        await asyncio.sleep(0)
        return await self.step(lambda t: insert_numbered(t, records, start))


def insert_numbered(tables: Tables, records: Sequence[CheckpointRecord], start: int) -> InsertResult:
    top = records[0]
    found = tables.records.get(top.checkpoint_id)
    if found is not None:
        return InsertResult.of_stored_digest(found[1].digest, top)
    for record in records[1:]:
        if record.checkpoint_id in tables.records:
            raise nested_id_conflict(records, record.checkpoint_id)
    counters: dict[str, int] = {}
    for record in records:
        if record.workflow_name == top.workflow_name:
            sequence = counters.get(record.workflow_name, start) + 1
        else:
            sequence = counters.get(record.workflow_name, tables.sequences.get(record.workflow_name, 0)) + 1
        counters[record.workflow_name] = sequence
        tables.sequences[record.workflow_name] = max(sequence, tables.sequences.get(record.workflow_name, 0))
        tables.records[record.checkpoint_id] = (sequence, record)
        if record.container_id is not None:
            tables.children.setdefault(record.container_id, []).append(record.checkpoint_id)
    return InsertResult.INSERTED


class LikeTables(SplitTables):
    workflow_match = "workflow LIKE ?"


class SplitListsByLike(SplitBackend):
    """Listings select the workflow's rows with ``workflow LIKE ?``: a name holding ``%`` or
    ``_`` (or differing in ASCII case) lists other workflows' checkpoints too."""

    tables_class = LikeTables


class GlobRecords(SplitRecords):
    lookup = "SELECT " + COLUMNS + " FROM idx WHERE id GLOB ?"


class GlobTables(SplitTables):
    records_class = GlobRecords


class SplitLoadsByGlob(SplitBackend):
    """A record is looked up with ``id GLOB ?``: an id holding ``*``, ``?`` or ``[`` finds
    another record, or misses itself."""

    tables_class = GlobTables


class TextSeqFiles(SplitFiles):
    seq_type = "TEXT"


class TextSeqTables(SplitTables):
    files_class = TextSeqFiles


class SplitSequenceAsText(SplitBackend):
    """The index's sequence column is declared TEXT, so listings ``ORDER BY seq`` sort
    sequences as strings: the tenth checkpoint lists before the second."""

    tables_class = TextSeqTables


class ReplaceRecords(SplitRecords):
    insert_row = "INSERT OR REPLACE INTO idx (" + COLUMNS + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


class ReplaceTables(SplitTables):
    records_class = ReplaceRecords

    def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        found = self.records.get(top.checkpoint_id)
        if found is not None:
            return InsertResult.of_stored_digest(found[1].digest, top)
        # Nested ids are left to the primary key, whose conflict clause replaces the row.
        for record in records:
            sequence = self.sequences.get(record.workflow_name, 0) + 1
            self.sequences[record.workflow_name] = sequence
            self.files.write_blob(record.checkpoint_id, record.body)
            self.split_records.put_row(record, sequence)
            if record.container_id is not None:
                self.children.setdefault(record.container_id, []).append(record.checkpoint_id)
        return InsertResult.INSERTED


class SplitInsertOrReplace(SplitBackend):
    """A save leaves nested ids to the index's primary key but writes rows with ``INSERT OR
    REPLACE``: a nested id already stored replaces that record (row and blob) instead of
    refusing the save."""

    tables_class = ReplaceTables


class LikeSignatureTables(SplitTables):
    signature_match = "signature LIKE ?"


class SplitSignatureByLike(SplitBackend):
    """The signature filter of the listings is ``signature LIKE ?``: a graph signature holding
    ``%`` or ``_`` (or differing in ASCII case) also lists checkpoints of other signatures."""

    tables_class = LikeSignatureTables


class NocaseFiles(SplitFiles):
    id_collation = " COLLATE NOCASE"


class NocaseTables(SplitTables):
    files_class = NocaseFiles


class SplitIdsIgnoreCase(SplitBackend):
    """The index's id column is declared ``COLLATE NOCASE``: ids differing only in ASCII case
    are one row, so saving one finds the other stored and a load of one returns the other."""

    tables_class = NocaseTables


class CounterDroppingTables(SplitTables):
    def delete_workflow(self, workflow_name: str) -> int:
        count = super().delete_workflow(workflow_name)
        # The workflow's counter row goes with its records.
        del self.sequences[workflow_name]
        return count


class SplitDeleteWorkflowDropsCounter(SplitBackend):
    """``delete_workflow`` deletes the workflow's counter row with its records: the workflow's
    next save is numbered from 1 again, numbers handed out before are handed out twice."""

    tables_class = CounterDroppingTables


BROKEN_SPLIT: list[type[TablesBackend]] = [
    SplitSignatureByLike,
    SplitIdsIgnoreCase,
    SplitDeleteWorkflowDropsCounter,
    SplitIndexBeforeBlob,
    SplitCleanupRacesWrite,
    SplitReSaveReadsOldBlob,
    SplitSequenceReadApart,
    SplitListsByLike,
    SplitLoadsByGlob,
    SplitSequenceAsText,
    SplitInsertOrReplace,
]


# ====================================================================== a write-back cache

Op = tuple[str, tuple[Any, ...]]

DIRTY_LIMIT = 3
"""Writes the dirty buffer holds before the flusher sends the oldest to the remote."""


@dataclass
class WriteBack:
    """The store: the remote and the dirty buffer of acknowledged writes not yet flushed to it,
    oldest first, shared by the store's handles."""

    remote: Tables = field(default_factory=Tables)
    buffer: list[Op] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def replay(tables: Tables, op: Op) -> Any:
    name, args = op
    return getattr(tables, name)(*args)


class WriteBackBackend(TablesBackend):
    """A write-back cache in front of a durable remote: writes are decided against the merged
    view (the remote with the buffered writes replayed) and acknowledged once buffered; every
    call first flushes the oldest buffered writes to the remote while more than three are
    buffered, ``aclose()`` flushes the rest;
    reads answer from the merged view."""

    def __init__(self, tables: Tables | None = None, cache: WriteBack | None = None) -> None:
        self.cache = cache if cache is not None else WriteBack()
        super().__init__(self.cache.remote)

    def new_handle(self) -> Self:
        return type(self)(self.tables, self.cache)

    def describe(self) -> str:
        return "writeback://"

    @property
    def remote(self) -> Tables:
        return self.cache.remote

    def buffer(self) -> list[Op]:
        return self.cache.buffer

    def flush_one(self) -> None:
        """The background flusher's turn: it sends the oldest write once the buffer holds more
        than ``DIRTY_LIMIT`` (a write-back cache batches its writes to the remote)."""
        buffer = self.buffer()
        while len(buffer) > DIRTY_LIMIT:
            replay(self.remote, self.next_to_flush(buffer))

    def flush_all(self) -> None:
        buffer = self.buffer()
        while buffer:
            replay(self.remote, self.next_to_flush(buffer))

    def next_to_flush(self, buffer: list[Op]) -> Op:
        return buffer.pop(0)

    def merged(self) -> Tables:
        buffer = self.buffer()
        if not buffer:
            return self.remote
        view = self.remote.copy()
        for op in buffer:
            replay(view, op)
        return view

    def written(self) -> Tables:
        """A merged view a write may change (never the remote itself)."""
        view = self.merged()
        return view.copy() if view is self.remote else view

    async def step(self, call: Callable[[Tables], T]) -> T:
        await asyncio.sleep(0)
        with self.cache.lock:
            self.flush_one()
            return call(self.merged())

    async def remote_step(self, call: Callable[[Tables], T]) -> T:
        await asyncio.sleep(0)
        with self.cache.lock:
            self.flush_one()
            return call(self.remote)

    async def write(self, name: str, *args: Any, acknowledged: Callable[[Any], bool]) -> Any:
        await asyncio.sleep(0)
        with self.cache.lock:
            self.flush_one()
            result = replay(self.written(), (name, args))
            if acknowledged(result):
                self.buffer().append((name, args))
            return result

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.write("insert", list(records), acknowledged=lambda r: r is InsertResult.INSERTED)  # type: ignore[no-any-return]

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        # Buffered as the plain insert it turned into: the fence was checked here, on the view.
        await asyncio.sleep(0)
        with self.cache.lock:
            self.flush_one()
            check = self.written().insert_fenced(list(records), expected_latest_id)
            if check is None:
                self.buffer().append(("insert", (list(records),)))
            return check

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.write("remove", checkpoint_id, acknowledged=bool)  # type: ignore[no-any-return]

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.write("prune", workflow_name, keep_last, acknowledged=lambda _: True)  # type: ignore[no-any-return]

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.write("delete_workflow", workflow_name, acknowledged=lambda _: True)  # type: ignore[no-any-return]

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.write("overwrite_body", checkpoint_id, body, digest, acknowledged=bool)  # type: ignore[no-any-return]

    async def close(self) -> None:
        with self.cache.lock:
            self.flush_all()


class WriteBackListsRemote(WriteBackBackend):
    """The listings (ids and bodies) read the remote only: a checkpoint acknowledged but not
    yet flushed is missing from them, and one deleted but not flushed is still listed."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.remote_step(
            lambda t: t.list_bodies(workflow_name, graph_signature_hash, include_nested)
        )

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self.remote_step(
            lambda t: t.list_ids(workflow_name, graph_signature_hash, include_nested)
        )


class WriteBackLatestRemote(WriteBackBackend):
    """``latest`` reads the remote only: right after a save, the latest is the checkpoint
    before it (or None)."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.remote_step(lambda t: t.latest(workflow_name, graph_signature_hash))


class WriteBackWalkRemote(WriteBackBackend):
    """A walk of the ancestry reads the remote only: it starts from nothing (or ends early) at
    checkpoints still in the buffer."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.remote_step(lambda t: t.walk(checkpoint_id, max_depth, with_bodies))


class WriteBackNamesRemote(WriteBackBackend):
    """Workflow names read the remote only: a workflow whose first save is still buffered is
    not listed, one whose deletion is buffered still is."""

    async def workflow_names(self) -> list[str]:
        return await self.remote_step(lambda t: t.workflow_names())


class WriteBackRemoveChecksRemote(WriteBackBackend):
    """A delete asks the remote whether the checkpoint exists: deleting one still in the buffer
    answers False and leaves it stored."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        await asyncio.sleep(0)
        with self.cache.lock:
            self.flush_one()
            if checkpoint_id not in self.remote.records:
                return False
            result = self.written().remove(checkpoint_id)
            if result:
                self.buffer().append(("remove", (checkpoint_id,)))
            return result


class WriteBackFenceOnRemote(WriteBackBackend):
    """A fenced save compares its expected id with the remote's head: right after a save the
    remote's head is the one before it, so a writer fencing on its own last save is refused and
    one fencing on the older head passes."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        await asyncio.sleep(0)
        with self.cache.lock:
            self.flush_one()
            latest = self.remote.head_id(records[0].workflow_name)
            view = self.written()
            if latest != expected_latest_id and records[0].checkpoint_id not in view.records:
                return FenceCheck(latest, None)
            result = view.insert(list(records))
            if result is InsertResult.INSERTED:
                self.buffer().append(("insert", (list(records),)))
            return FenceCheck.after_insert(latest, result)


class WriteBackDuplicateOnRemote(WriteBackBackend):
    """A save checks for a stored id on the remote only: a second save of an id still in the
    buffer, with other content, is acknowledged as inserted (and then dropped by the replay)."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await asyncio.sleep(0)
        with self.cache.lock:
            self.flush_one()
            found = self.remote.records.get(records[0].checkpoint_id)
            if found is not None:
                return InsertResult.of_stored_digest(found[1].digest, records[0])
            self.written().insert(list(records))
            self.buffer().append(("insert", (list(records),)))
            return InsertResult.INSERTED


class WriteBackCloseDropsBuffer(WriteBackBackend):
    """``aclose()`` stops the flusher and discards what it has not flushed: checkpoints
    acknowledged just before a handle closes are gone for every handle."""

    async def close(self) -> None:
        with self.cache.lock:
            self.buffer().clear()


class WriteBackFlushesPutsFirst(WriteBackBackend):
    """The flusher sends buffered saves ahead of buffered deletes and prunes (a put batch, then
    a delete batch): a prune followed by a save is applied to the remote after the save."""

    def next_to_flush(self, buffer: list[Op]) -> Op:
        for index, op in enumerate(buffer):
            if op[0] == "insert":
                return buffer.pop(index)
        return buffer.pop(0)


class WriteBackBufferPerHandle(WriteBackBackend):
    """Each handle keeps its own dirty buffer over the shared remote: another handle sees a
    save only once the flusher has sent it, and decides its own saves without it."""

    def new_handle(self) -> Self:
        return type(self)(self.tables, WriteBack(self.cache.remote, [], self.cache.lock))


class WriteBackDeletesWriteThrough(WriteBackBackend):
    """Prunes and workflow deletes skip the buffer and go straight to the remote (write-through
    for bulk deletes): saves of the workflow still buffered survive them, and are not counted."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.remote_step(lambda t: t.prune(workflow_name, keep_last))

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.remote_step(lambda t: t.delete_workflow(workflow_name))


class WriteBackTombstonesRemote(WriteBackBackend):
    """The tombstone listing reads the remote only: ids a prune still in the buffer deleted are
    not listed as pruned."""

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self.remote_step(lambda t: t.tombstones_of(workflow_name))


class WriteBackPrunePlannedOnRemote(WriteBackBackend):
    """A prune chooses what to delete from the remote's rows and buffers the delete of those
    ids: saves still in the buffer are not counted among the kept, so the prune keeps more
    than ``keep_last`` (and may delete the remote's head while a buffered save continues it)."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        await asyncio.sleep(0)
        with self.cache.lock:
            self.flush_one()
            doomed = [
                r.checkpoint_id for r in pruned_records(self.remote.top_rows(workflow_name, None), keep_last)
            ]
            view = self.written()
            doomed = [each for each in doomed if each in view.records]
            op: Op = ("prune_ids", (workflow_name, doomed))
            replay(view, op)
            self.buffer().append(op)
            return len(doomed)


def prune_ids(tables: Tables, workflow_name: str, doomed: list[CheckpointID]) -> int:
    marks = tables.tombstones.setdefault(workflow_name, {})
    for checkpoint_id in doomed:
        if checkpoint_id in tables.records:
            for gone in tables.drop(checkpoint_id):
                marks[gone] = None
    return len(doomed)


Tables.prune_ids = prune_ids  # type: ignore[attr-defined]


BROKEN_WRITEBACK: list[type[TablesBackend]] = [
    WriteBackPrunePlannedOnRemote,
    WriteBackDeletesWriteThrough,
    WriteBackTombstonesRemote,
    WriteBackListsRemote,
    WriteBackLatestRemote,
    WriteBackWalkRemote,
    WriteBackNamesRemote,
    WriteBackRemoveChecksRemote,
    WriteBackFenceOnRemote,
    WriteBackDuplicateOnRemote,
    WriteBackCloseDropsBuffer,
    WriteBackFlushesPutsFirst,
    WriteBackBufferPerHandle,
]


# ====================================================================== a columnar store

COMPACT_EVERY = 3
"""Deletes between two compactions of a store."""

FIELDS = (
    "ids",
    "parents",
    "signatures",
    "containers",
    "roots",
    "positions",
    "digests",
    "bodies",
    "sequences",
)


class Columns:
    """One workflow's rows: a list per field, rows addressed by position."""

    def __init__(self) -> None:
        self.ids: list[CheckpointID] = []
        self.parents: list[CheckpointID | None] = []
        self.signatures: list[str] = []
        self.containers: list[CheckpointID | None] = []
        self.roots: list[CheckpointID | None] = []
        self.positions: list[int] = []
        self.digests: list[str] = []
        self.bodies: list[bytes] = []
        self.sequences: list[int] = []
        self.dead: set[int] = set()

    def __len__(self) -> int:
        return len(self.ids)

    def record(self, workflow_name: str, at: int) -> Value:
        record = CheckpointRecord(
            self.ids[at],
            workflow_name,
            self.parents[at],
            self.signatures[at],
            self.bodies[at],
            self.digests[at],
            self.containers[at],
            self.roots[at],
            self.positions[at],
        )
        return self.sequences[at], record


class ColumnRecords(MutableMapping[CheckpointID, Value]):
    """Records as rows of their workflow's columns; the index maps an id to (workflow,
    position); a delete marks the position dead; every ``COMPACT_EVERY`` deletes the columns
    are rewritten without their dead rows and the index remapped."""

    compacted_fields: tuple[str, ...] = FIELDS

    def __init__(self) -> None:
        self.columns: dict[str, Columns] = {}
        self.index: dict[CheckpointID, tuple[str, int]] = {}
        self.deletes = 0

    def __getitem__(self, checkpoint_id: CheckpointID) -> Value:
        workflow_name, at = self.index[checkpoint_id]
        columns = self.columns[workflow_name]
        if at in columns.dead:
            raise KeyError(checkpoint_id)
        return columns.record(workflow_name, at)

    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        sequence, record = value
        found = self.index.get(checkpoint_id)
        if found is not None:
            self.update(found, record)
            return
        columns = self.columns.setdefault(record.workflow_name, Columns())
        self.index[checkpoint_id] = (record.workflow_name, self.append(columns, sequence, record))

    def update(self, found: tuple[str, int], record: CheckpointRecord) -> None:
        """A raw write: the body column only."""
        self.columns[found[0]].bodies[found[1]] = record.body

    def append(self, columns: Columns, sequence: int, record: CheckpointRecord) -> int:
        columns.ids.append(record.checkpoint_id)
        columns.parents.append(record.previous_checkpoint_id)
        columns.signatures.append(record.graph_signature_hash)
        columns.containers.append(record.container_id)
        columns.roots.append(record.root_id)
        columns.positions.append(record.position)
        columns.digests.append(record.digest)
        columns.bodies.append(record.body)
        columns.sequences.append(sequence)
        return len(columns) - 1

    def __delitem__(self, checkpoint_id: CheckpointID) -> None:
        workflow_name, at = self.index.pop(checkpoint_id)
        self.mark_dead(workflow_name, at)
        self.deletes += 1
        if self.deletes % COMPACT_EVERY == 0:
            for name in list(self.columns):
                self.compact(name)

    def mark_dead(self, workflow_name: str, at: int) -> None:
        self.columns[workflow_name].dead.add(at)

    def compact(self, workflow_name: str) -> None:
        columns = self.columns[workflow_name]
        live = [at for at in range(len(columns)) if at not in columns.dead]
        for name in self.compacted_fields:
            column = getattr(columns, name)
            setattr(columns, name, [column[at] for at in live])
        columns.dead = set()
        self.remap(workflow_name, {old: new for new, old in enumerate(live)})
        if not columns.ids:
            del self.columns[workflow_name]

    def remap(self, workflow_name: str, moved: dict[int, int]) -> None:
        for checkpoint_id, (name, at) in list(self.index.items()):
            if name == workflow_name:
                self.index[checkpoint_id] = (name, moved[at])

    def __iter__(self) -> Iterator[CheckpointID]:
        return iter(list(self.index))

    def __len__(self) -> int:
        return len(self.index)

    def scan(self, workflow_name: str) -> Iterator[Value]:
        """The workflow's live rows, in column order (commit order)."""
        columns = self.columns.get(workflow_name)
        if columns is None:
            return
        for at in range(len(columns)):
            if self.live(columns, at):
                yield columns.record(workflow_name, at)

    def live(self, columns: Columns, at: int) -> bool:
        return at not in columns.dead


class ColumnTables(Tables):
    """Tables over the columns: listings scan the workflow's columns."""

    records_class: type[ColumnRecords] = ColumnRecords

    @classmethod
    def new(cls) -> Self:
        return cls(records=cls.records_class())

    @property
    def column_records(self) -> ColumnRecords:
        assert isinstance(self.records, ColumnRecords)
        return self.records

    def store(self, record: CheckpointRecord) -> None:
        sequence = self.next_sequence(record.workflow_name)
        self.records[record.checkpoint_id] = (sequence, record)
        if record.container_id is not None:
            self.children.setdefault(record.container_id, []).append(record.checkpoint_id)

    def next_sequence(self, workflow_name: str) -> int:
        sequence = self.sequences.get(workflow_name, 0) + 1
        self.sequences[workflow_name] = sequence
        return sequence

    def rows(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        found = [
            (sequence, record)
            for sequence, record in self.column_records.scan(workflow_name)
            if (include_nested or record.container_id is None)
            and graph_signature_hash in (None, record.graph_signature_hash)
        ]
        found.sort(key=lambda row: row[0])
        return [record for _, record in found]

    def workflow_names(self) -> list[str]:
        names = []
        for name, columns in self.column_records.columns.items():
            if any(
                columns.containers[at] is None and self.column_records.live(columns, at)
                for at in range(len(columns))
            ):
                names.append(name)
        return sorted(names)


class ColumnBackend(TablesBackend):
    """A columnar store: per workflow one list per field, rows by position, deletions a set of
    dead positions, an id -> (workflow, position) index and a compaction every few deletes that
    rewrites the columns and remaps the index; listings scan the columns."""

    tables_class: type[ColumnTables] = ColumnTables

    def new_tables(self) -> Tables:
        return self.tables_class.new()

    def describe(self) -> str:
        return "columns://"


class StaleIndexRecords(ColumnRecords):
    def remap(self, workflow_name: str, moved: dict[int, int]) -> None:
        pass


class StaleIndexTables(ColumnTables):
    records_class = StaleIndexRecords


class ColumnIndexNotRemapped(ColumnBackend):
    """Compaction rewrites the columns but leaves the id index as it was: after it, an id points
    at the position its row had before, which now holds another row (or none)."""

    tables_class = StaleIndexTables


class ScanDeadRecords(ColumnRecords):
    def live(self, columns: Columns, at: int) -> bool:
        return True


class ScanDeadTables(ColumnTables):
    records_class = ScanDeadRecords


class ColumnScanIgnoresDead(ColumnBackend):
    """A scan of the columns (listings, latest, workflow names, prune) does not skip dead
    positions: a deleted checkpoint is listed until the next compaction."""

    tables_class = ScanDeadTables


class MissingColumnRecords(ColumnRecords):
    compacted_fields = tuple(name for name in FIELDS if name != "signatures")


class MissingColumnTables(ColumnTables):
    records_class = MissingColumnRecords


class ColumnCompactionSkipsSignatures(ColumnBackend):
    """Compaction rewrites every column but the signatures: after it, rows read the graph
    signature of another row (the columns are misaligned)."""

    tables_class = MissingColumnTables


class ReusedRecords(ColumnRecords):
    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        sequence, record = value
        found = self.index.get(checkpoint_id)
        if found is not None:
            self.update(found, record)
            return
        columns = self.columns.setdefault(record.workflow_name, Columns())
        if columns.dead:
            # A dead position is reused in place, but stays in the dead set.
            at = min(columns.dead)
            for name, item in zip(
                FIELDS,
                (
                    record.checkpoint_id,
                    record.previous_checkpoint_id,
                    record.graph_signature_hash,
                    record.container_id,
                    record.root_id,
                    record.position,
                    record.digest,
                    record.body,
                    sequence,
                ),
                strict=True,
            ):
                getattr(columns, name)[at] = item
            self.index[checkpoint_id] = (record.workflow_name, at)
            return
        self.index[checkpoint_id] = (record.workflow_name, self.append(columns, sequence, record))


class ReusedTables(ColumnTables):
    records_class = ReusedRecords


class ColumnReusesDeadPositions(ColumnBackend):
    """A save reuses a dead position for its row but leaves the position in the dead set: the
    new checkpoint is stored and invisible until the next compaction."""

    tables_class = ReusedTables


class DeadBitOnlyRecords(ColumnRecords):
    def __getitem__(self, checkpoint_id: CheckpointID) -> Value:
        workflow_name, at = self.index[checkpoint_id]
        return self.columns[workflow_name].record(workflow_name, at)

    def __delitem__(self, checkpoint_id: CheckpointID) -> None:
        # The index entry goes only when compaction remaps the index.
        workflow_name, at = self.index[checkpoint_id]
        self.mark_dead(workflow_name, at)
        self.deletes += 1
        if self.deletes % COMPACT_EVERY == 0:
            for name in list(self.columns):
                self.compact(name)

    def remap(self, workflow_name: str, moved: dict[int, int]) -> None:
        for checkpoint_id, (name, at) in list(self.index.items()):
            if name == workflow_name:
                if at in moved:
                    self.index[checkpoint_id] = (name, moved[at])
                else:
                    del self.index[checkpoint_id]


class DeadBitOnlyTables(ColumnTables):
    records_class = DeadBitOnlyRecords


class ColumnLoadIgnoresDead(ColumnBackend):
    """A delete sets the dead bit and leaves the index entry to compaction, and a lookup by id
    does not check the bit: a deleted checkpoint still loads until the next compaction."""

    tables_class = DeadBitOnlyTables


class PositionSequenceTables(ColumnTables):
    def next_sequence(self, workflow_name: str) -> int:
        columns = self.column_records.columns.get(workflow_name)
        return 1 if columns is None else len(columns) + 1


class ColumnSequenceIsPosition(ColumnBackend):
    """A record's sequence is its row's place in the columns (position + 1): after a compaction
    removes rows, new saves get numbers already handed out, and a workflow emptied starts at 1."""

    tables_class = PositionSequenceTables


class AppendOverwriteRecords(ColumnRecords):
    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        sequence, record = value
        found = self.index.get(checkpoint_id)
        if found is not None:
            # Columns are append-only: the new version is a new row, the old one dead.
            columns = self.columns[found[0]]
            columns.dead.add(found[1])
            self.index[checkpoint_id] = (found[0], self.append(columns, max(columns.sequences) + 1, record))
            return
        columns = self.columns.setdefault(record.workflow_name, Columns())
        self.index[checkpoint_id] = (record.workflow_name, self.append(columns, sequence, record))


class AppendOverwriteTables(ColumnTables):
    records_class = AppendOverwriteRecords


class ColumnOverwriteAppends(ColumnBackend):
    """A raw body write appends a new row (the columns are append-only) numbered after the
    workflow's last row and marks the old one dead: the overwritten checkpoint moves to the end
    of the commit order and becomes the latest."""

    tables_class = AppendOverwriteTables


class NestedNamesTables(ColumnTables):
    def workflow_names(self) -> list[str]:
        # Any live row names its workflow.
        return sorted(
            name
            for name, columns in self.column_records.columns.items()
            if any(self.column_records.live(columns, at) for at in range(len(columns)))
        )


class ColumnNamesCountNestedRows(ColumnBackend):
    """Workflow names count every live row of a workflow's columns, nested ones included: a
    workflow name that only nested records carry is listed."""

    tables_class = NestedNamesTables


class StopAtDeadRecords(ColumnRecords):
    def scan(self, workflow_name: str) -> Iterator[Value]:
        columns = self.columns.get(workflow_name)
        if columns is None:
            return
        for at in range(len(columns)):
            if not self.live(columns, at):
                return  # the first dead row taken for the end of the live rows
            yield columns.record(workflow_name, at)


class StopAtDeadTables(ColumnTables):
    records_class = StopAtDeadRecords


class ColumnScanStopsAtDead(ColumnBackend):
    """A scan of the columns stops at the first dead position: until the next compaction, the
    checkpoints committed after a deleted one are missing from listings and latest."""

    tables_class = StopAtDeadTables


BROKEN_COLUMN: list[type[TablesBackend]] = [
    ColumnNamesCountNestedRows,
    ColumnScanStopsAtDead,
    ColumnIndexNotRemapped,
    ColumnScanIgnoresDead,
    ColumnCompactionSkipsSignatures,
    ColumnReusesDeadPositions,
    ColumnLoadIgnoresDead,
    ColumnSequenceIsPosition,
    ColumnOverwriteAppends,
]


# ====================================================================== a retry wrapper

ATTEMPTS = 4
"""Attempts of one call before a transient error becomes StorageUnavailableError."""

FAULT_EVERY = 5
"""Of every five calls the flaky store answers, one fails before applying (the second) and one
loses its answer (the fourth: a write is applied, then the connection drops)."""


class TransientError(ConnectionError):
    """The flaky store's connection dropped: the call may or may not have been applied."""


@dataclass
class Flaky:
    """The flaky store's fault counter, shared by the store's handles."""

    calls: int = 0

    def call(self, tables: Tables, name: str, args: tuple[Any, ...], write: bool, retry: bool) -> Any:
        self.calls += 1
        # A retry goes through: the store's faults are one-offs, so a wrapper retrying once
        # always gets an answer, whatever other tasks meanwhile make fail.
        fault = 0 if retry else self.calls % FAULT_EVERY
        if fault == 1 or (fault == 3 and not write):
            raise TransientError(f"{name}: connection reset before the request was sent")
        result = getattr(tables, name)(*args)
        if fault == 3:
            raise TransientError(f"{name}: connection reset before the answer arrived")
        return result


def stored_record(tables: Tables, checkpoint_id: CheckpointID) -> CheckpointRecord | None:
    found = tables.records.get(checkpoint_id)
    return None if found is None else found[1]


def top_ids(tables: Tables, workflow_name: str) -> list[CheckpointID]:
    return tables.list_ids(workflow_name, None, False)


Tables.stored_record = stored_record  # type: ignore[attr-defined]
Tables.top_ids = top_ids  # type: ignore[attr-defined]


class RetryBackend(TablesBackend):
    """An author's retry wrapper over a flaky store that fails one call in five before applying
    it and loses the answer of another (applied): transient errors are retried up to four
    times; a save whose answer was lost reads the record back (there with the same body: it was
    stored), a fenced save likewise, a remove, prune or workflow delete compares what it read
    before with what is left; errors that remain become StorageUnavailableError."""

    def __init__(self, tables: Tables | None = None, flaky: Flaky | None = None) -> None:
        super().__init__(tables)
        self.flaky = flaky if flaky is not None else Flaky()

    def new_handle(self) -> Self:
        return type(self)(self.tables, self.flaky)

    def describe(self) -> str:
        return "retry://"

    async def attempt(self, name: str, *args: Any, write: bool = False, retry: bool = False) -> Any:
        await asyncio.sleep(0)
        with self.tables.lock:
            return self.flaky.call(self.tables, name, args, write, retry)

    async def read(self, name: str, *args: Any) -> Any:
        last: TransientError | None = None
        for attempt in range(ATTEMPTS):
            try:
                return await self.attempt(name, *args, retry=attempt > 0)
            except TransientError as error:
                last = error
        raise StorageUnavailableError(name, str(last))

    async def retried_write(self, name: str, *args: Any) -> Any:
        """An idempotent write, retried as it is."""
        last: TransientError | None = None
        for attempt in range(ATTEMPTS):
            try:
                return await self.attempt(name, *args, write=True, retry=attempt > 0)
            except TransientError as error:
                last = error
        raise StorageUnavailableError(name, str(last))

    async def step(self, call: Callable[[Tables], T]) -> T:
        raise AssertionError("every primitive names its call")

    # ------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        last: TransientError | None = None
        for attempt in range(ATTEMPTS):
            try:
                return await self.attempt("insert", list(records), write=True, retry=attempt > 0)  # type: ignore[no-any-return]
            except TransientError as error:
                last = error
            found = await self.read("stored_record", top.checkpoint_id)
            if found is not None:
                return self.lost_insert(found, top)
        raise StorageUnavailableError("insert", str(last))

    def lost_insert(self, found: CheckpointRecord, top: CheckpointRecord) -> InsertResult:
        if found.body == top.body:
            return InsertResult.INSERTED
        return InsertResult.of_stored_digest(found.digest, top)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        top = records[0]
        # Whether the id was stored before tells a lost answer of a save applied by this call
        # from one the store would have refused as a re-save of a stored id.
        existed = await self.read("stored_record", top.checkpoint_id) is not None
        last: TransientError | None = None
        for attempt in range(ATTEMPTS):
            try:
                return await self.attempt(
                    "insert_fenced", list(records), expected_latest_id, write=True, retry=attempt > 0
                )  # type: ignore[no-any-return]
            except TransientError as error:
                last = error
            answer = await self.lost_fenced(top, expected_latest_id, existed)
            if answer is not RETRY:
                return answer  # type: ignore[return-value]
        raise StorageUnavailableError("insert_fenced", str(last))

    async def lost_fenced(
        self, top: CheckpointRecord, expected_latest_id: CheckpointID | None, existed: bool
    ) -> object:
        found = await self.read("stored_record", top.checkpoint_id)
        if found is None:
            return RETRY
        if not existed and found.body == top.body:
            return None
        latest = await self.read("head_id", top.workflow_name)
        return FenceCheck(latest, InsertResult.of_stored_digest(found.digest, top))

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        existed = await self.read("stored_record", checkpoint_id) is not None
        last: TransientError | None = None
        for attempt in range(ATTEMPTS):
            try:
                return await self.attempt("remove", checkpoint_id, write=True, retry=attempt > 0)  # type: ignore[no-any-return]
            except TransientError as error:
                last = error
            if await self.read("stored_record", checkpoint_id) is None:
                return existed
        raise StorageUnavailableError("remove", str(last))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.counted_delete("prune", workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.counted_delete("delete_workflow", workflow_name)

    async def counted_delete(self, name: str, workflow_name: str, *args: Any) -> int:
        before = set(await self.read("top_ids", workflow_name))
        last: TransientError | None = None
        for attempt in range(ATTEMPTS):
            try:
                return await self.attempt(name, workflow_name, *args, write=True, retry=attempt > 0)  # type: ignore[no-any-return]
            except TransientError as error:
                last = error
            after = set(await self.read("top_ids", workflow_name))
            if after != before:
                return len(before - after)
        raise StorageUnavailableError(name, str(last))

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.retried_write("overwrite_body", checkpoint_id, body, digest)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.read("load", checkpoint_id)  # type: ignore[no-any-return]

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.read("latest", workflow_name, graph_signature_hash)  # type: ignore[no-any-return]

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.read("list_bodies", workflow_name, graph_signature_hash, include_nested)  # type: ignore[no-any-return]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self.read("list_ids", workflow_name, graph_signature_hash, include_nested)  # type: ignore[no-any-return]

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.read("nested_bodies", checkpoint_ids)  # type: ignore[no-any-return]

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.read("nested_ids", checkpoint_id)  # type: ignore[no-any-return]

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.read("walk", checkpoint_id, max_depth, with_bodies)  # type: ignore[no-any-return]

    async def workflow_names(self) -> list[str]:
        return await self.read("workflow_names")  # type: ignore[no-any-return]

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.read("info", checkpoint_id)  # type: ignore[no-any-return]

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self.read("records_of", workflow_name)  # type: ignore[no-any-return]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self.read("tombstones_of", workflow_name)  # type: ignore[no-any-return]


RETRY = object()
"""What a read-back answers when the lost call was not applied: try again."""


class RetryRemoveBlindly(RetryBackend):
    """A remove whose answer was lost is retried as it is: when the lost attempt had deleted
    the checkpoint, the retry answers False for a checkpoint that existed."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.retried_write("remove", checkpoint_id)  # type: ignore[no-any-return]


class RetryPruneBlindly(RetryBackend):
    """A prune whose answer was lost is retried as it is: when the lost attempt had pruned, the
    retry prunes nothing and answers 0."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.retried_write("prune", workflow_name, keep_last)  # type: ignore[no-any-return]


class RetryDeleteWorkflowBlindly(RetryBackend):
    """A workflow delete whose answer was lost is retried as it is: when the lost attempt had
    deleted the workflow, the retry answers 0."""

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.retried_write("delete_workflow", workflow_name)  # type: ignore[no-any-return]


class RetryLostLoadIsNotFound(RetryBackend):
    """A load whose connection dropped answers None (the wrapper maps every error of a lookup
    to "not found"): a stored checkpoint sometimes loads as missing."""

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        try:
            return await self.attempt("load", checkpoint_id)  # type: ignore[no-any-return]
        except TransientError:
            return None


class RetryLostLatestIsNone(RetryBackend):
    """``latest`` whose connection dropped answers None (an empty workflow) instead of
    retrying."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        try:
            return await self.attempt("latest", workflow_name, graph_signature_hash)  # type: ignore[no-any-return]
        except TransientError:
            return None


class RetryLostWalkIsEmpty(RetryBackend):
    """A walk whose connection dropped answers an empty walk (start not stored) instead of
    retrying."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        try:
            return await self.attempt("walk", checkpoint_id, max_depth, with_bodies)  # type: ignore[no-any-return]
        except TransientError:
            return WalkRecords({}, {}, frozenset())


class RetryFenceReadBackOnHead(RetryBackend):
    """A fenced save whose answer was lost reads the head back and retries only if it is still
    the expected id, else reports the fence refused: a fenced save that was applied (it is now
    the head) is reported stale."""

    async def lost_fenced(
        self, top: CheckpointRecord, expected_latest_id: CheckpointID | None, existed: bool
    ) -> object:
        latest = await self.read("head_id", top.workflow_name)
        if latest == expected_latest_id:
            return RETRY
        return FenceCheck(latest, None)


class RetryFamilyOneAtATime(RetryBackend):
    """A save writes a family one record at a time (each its own retried call, so a lost answer
    is retried for one record only): a nested id already stored is found after the checkpoint
    and the records before it are stored, and the nested ones are stored as top-level saves."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await super().insert(records[:1])
        if result is not InsertResult.INSERTED:
            return result
        for record in records[1:]:
            if await self.read("stored_record", record.checkpoint_id) is not None:
                raise nested_id_conflict(records, record.checkpoint_id)
            await super().insert([record])
        return result


class RetryLostOverwriteIsAbsent(RetryBackend):
    """A raw body write whose connection dropped answers False (nothing stored under the id)
    instead of retrying."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        try:
            return await self.attempt("overwrite_body", checkpoint_id, body, digest, write=True)  # type: ignore[no-any-return]
        except TransientError:
            return False


class RetryLostSaveFoundById(RetryBackend):
    """A save whose answer was lost reads back whether the id is stored and, if it is, reports
    the save inserted, without comparing the content: a conflicting re-save whose answer is lost
    passes for a stored save."""

    def lost_insert(self, found: CheckpointRecord, top: CheckpointRecord) -> InsertResult:
        return InsertResult.INSERTED


class RetryFencedLostIsInserted(RetryBackend):
    """A fenced save whose answer was lost and finds its record stored with the same body
    reports it inserted, without asking whether it was stored before: a stale re-save of a
    stored id that is no longer the head passes when its answer is lost."""

    async def lost_fenced(
        self, top: CheckpointRecord, expected_latest_id: CheckpointID | None, existed: bool
    ) -> object:
        return await super().lost_fenced(top, expected_latest_id, False)


class RetryRetriesCancellation(RetryBackend):
    """The wrapper retries a read cancelled while it waits (it takes ``CancelledError`` for a
    dropped connection): a cancelled load, listing or latest returns as if no one had
    cancelled it."""

    async def read(self, name: str, *args: Any) -> Any:
        last: BaseException | None = None
        for attempt in range(ATTEMPTS):
            try:
                return await self.attempt(name, *args, retry=attempt > 0)
            except (TransientError, asyncio.CancelledError) as error:
                last = error
        raise StorageUnavailableError(name, str(last))


class RetryLostRemoveGoneIsTrue(RetryBackend):
    """A remove whose answer was lost answers True when the checkpoint is gone on read-back,
    without having read whether it existed before: a remove of an absent id whose request
    failed before it was sent answers True."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        last: TransientError | None = None
        for attempt in range(ATTEMPTS):
            try:
                return await self.attempt("remove", checkpoint_id, write=True, retry=attempt > 0)  # type: ignore[no-any-return]
            except TransientError as error:
                last = error
            if await self.read("stored_record", checkpoint_id) is None:
                return True
        raise StorageUnavailableError("remove", str(last))


BROKEN_RETRY: list[type[TablesBackend]] = [
    RetryLostRemoveGoneIsTrue,
    RetryLostSaveFoundById,
    RetryFencedLostIsInserted,
    RetryRetriesCancellation,
    RetryRemoveBlindly,
    RetryPruneBlindly,
    RetryDeleteWorkflowBlindly,
    RetryLostLoadIsNotFound,
    RetryLostLatestIsNone,
    RetryLostWalkIsEmpty,
    RetryFenceReadBackOnHead,
    RetryFamilyOneAtATime,
    RetryLostOverwriteIsAbsent,
]

# ====================================================================== the batch

ENTRIES: list[Entry] = [
    (c.__name__, tables_target(c), _doc(c))
    for c in BROKEN_SPLIT + BROKEN_WRITEBACK + BROKEN_COLUMN + BROKEN_RETRY
]
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = []
"""Broken-looking storages judged not to break the contract (each must pass, as an honest one)."""

HONEST: list[Entry] = [
    ("SplitBackend", tables_target(SplitBackend), _doc(SplitBackend)),
    ("WriteBackBackend", tables_target(WriteBackBackend), _doc(WriteBackBackend)),
    ("ColumnBackend", tables_target(ColumnBackend), _doc(ColumnBackend)),
    ("RetryBackend", tables_target(RetryBackend), _doc(RetryBackend)),
]
"""Honest storages: one per style; each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
