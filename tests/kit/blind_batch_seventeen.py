"""A seventeenth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/registry.md, docs/integrity.md, docs/conformance.md's prose, examples/ and
the public author API could ship. Four styles:

* ``BitcaskBackend``: a Bitcask-like durable store. One append-only data file per store
  directory of length-prefixed, checksummed entries (put a record, delete an id, tombstone an id,
  clear a workflow's tombstones, a counter); every handle keeps a keydir (batch nine's
  ``Tables``) rebuilt by scanning the file when it opens and brought up to date from its last
  offset before every primitive, under an exclusive ``flock`` of the store's lock file (on a
  thread), so handles in several processes share the store. Every write is flushed, never
  fsynced; a torn last entry (a writer killed mid-append) is cut off. When the file holds many
  more entries than live ones, a merge rewrites the live entries (counters and tombstones
  included) into a new file and swaps it in with ``os.replace``; a handle that finds another file
  under the path rebuilds;
* ``SidecarBackend``: the store lives in a child process (``multiprocessing``'s 'forkserver'
  context), one per store, started on first use and serving batch nine's ``Tables`` over a Unix
  socket (``multiprocessing.connection``), a thread per connection and every request under the
  tables' lock. Each handle has a connection of its own; it sends a pickled request and waits for
  the reply with ``loop.add_reader``, one outstanding request per handle under an
  ``asyncio.Lock``, and a cancelled call still reads its reply before the lock is released. The
  child stops when the store is discarded, or when the parent process dies (it watches a pipe).
* ``AioSqliteBackend``: the author's own schema (records, counters, tombstones, children by
  their container column) over ``aiosqlite`` in a temporary WAL file, a connection per handle,
  every primitive one transaction (``BEGIN IMMEDIATE`` for writes) under the handle's lock;
* ``SaverSqliteAdapter``: records as LangGraph checkpoints through ``AsyncSqliteSaver``'s public
  API, a thread per workflow, the record's body and index fields in the channel values.

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_seventeen.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import multiprocessing
import os
import pickle
import shutil
import sqlite3
import struct
import tempfile
import threading
import weakref
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from multiprocessing.connection import Client, Connection, Listener
from typing import Any, Self

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
from storages.contract import Capability, CheckpointID, CheckpointInfo
from storages.errors import NestedCheckpointDeletionError
from tests.kit.blind_batch_nine import TABLE_CAPABILITIES, Tables, TableStorage, stored

Entry = tuple[str, Callable[[], StorageTarget], str]


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


# ====================================================================== primitives as calls


class CallBackend(Backend):
    """Every primitive is ``call(name, *args)``: one of ``Tables``' functions, run atomically
    wherever the store keeps its tables."""

    capabilities = TABLE_CAPABILITIES

    async def call(self, name: str, *args: Any) -> Any:
        raise NotImplementedError

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.call("insert", list(records))  # type: ignore[no-any-return]

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.call("insert_fenced", list(records), expected_latest_id)  # type: ignore[no-any-return]

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.call("load", checkpoint_id)  # type: ignore[no-any-return]

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.call("latest", workflow_name, graph_signature_hash)  # type: ignore[no-any-return]

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.call("list_bodies", workflow_name, graph_signature_hash, include_nested)  # type: ignore[no-any-return]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self.call("list_ids", workflow_name, graph_signature_hash, include_nested)  # type: ignore[no-any-return]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.call("remove", checkpoint_id)  # type: ignore[no-any-return]

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.call("nested_bodies", list(checkpoint_ids))  # type: ignore[no-any-return]

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.call("nested_ids", checkpoint_id)  # type: ignore[no-any-return]

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.call("walk", checkpoint_id, max_depth, with_bodies)  # type: ignore[no-any-return]

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.call("prune", workflow_name, keep_last)  # type: ignore[no-any-return]

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.call("delete_workflow", workflow_name)  # type: ignore[no-any-return]

    async def workflow_names(self) -> list[str]:
        return await self.call("workflow_names")  # type: ignore[no-any-return]

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.call("overwrite_body", checkpoint_id, body, digest)  # type: ignore[no-any-return]

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.call("info", checkpoint_id)  # type: ignore[no-any-return]

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self.call("records_of", workflow_name)  # type: ignore[no-any-return]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self.call("tombstones_of", workflow_name)  # type: ignore[no-any-return]


# ====================================================================== a Bitcask-like store

HEADER = struct.Struct(">II")
"""Each entry: payload length, crc32 of the payload, then the pickled payload."""
MERGE_AT = 8
"""A merge runs once the file holds this many entries more than twice the live records."""

Fields = tuple[Any, ...]


def fields_of(record: CheckpointRecord) -> Fields:
    return (
        record.checkpoint_id,
        record.workflow_name,
        record.previous_checkpoint_id,
        record.graph_signature_hash,
        bytes(record.body),
        record.digest,
        record.container_id,
        record.root_id,
        record.position,
    )


def record_of(fields: Fields) -> CheckpointRecord:
    return CheckpointRecord(*fields)


class LoggedTables(Tables):
    """``Tables`` that note each change they make as a data-file entry in ``pending``."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[tuple[Any, ...]] = []

    def store(self, record: CheckpointRecord) -> None:
        super().store(record)
        sequence = self.records[record.checkpoint_id][0]
        self.pending.append(("put", sequence, fields_of(record)))

    def drop(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        gone = super().drop(checkpoint_id)
        self.pending.extend(("delete", each) for each in gone)
        return gone

    def prune(self, workflow_name: str, keep_last: int) -> int:
        before = set(self.tombstones.get(workflow_name, {}))
        count = super().prune(workflow_name, keep_last)
        for each in self.tombstones.get(workflow_name, {}):
            if each not in before:
                self.pending.append(("tombstone", workflow_name, each))
        return count

    def delete_workflow(self, workflow_name: str) -> int:
        count = super().delete_workflow(workflow_name)
        self.pending.append(("clear_tombstones", workflow_name))
        return count

    def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        done = super().overwrite_body(checkpoint_id, body, digest)
        if done:
            sequence, record = self.records[checkpoint_id]
            self.pending.append(("put", sequence, fields_of(record)))
        return done


def replay(tables: Tables, entry: tuple[Any, ...]) -> None:
    """Apply one data-file entry to a keydir."""
    kind = entry[0]
    if kind == "put":
        sequence, record = entry[1], record_of(entry[2])
        tables.records[record.checkpoint_id] = (sequence, record)
        name = record.workflow_name
        tables.sequences[name] = max(tables.sequences.get(name, 0), sequence)
        if record.container_id is not None:
            children = tables.children.setdefault(record.container_id, [])
            if record.checkpoint_id not in children:
                children.append(record.checkpoint_id)
    elif kind == "delete":
        tables.records.pop(entry[1], None)
        tables.children.pop(entry[1], None)
    elif kind == "tombstone":
        tables.tombstones.setdefault(entry[1], {})[entry[2]] = None
    elif kind == "clear_tombstones":
        tables.tombstones.pop(entry[1], None)
    elif kind == "counter":
        tables.sequences[entry[1]] = max(tables.sequences.get(entry[1], 0), entry[2])


def encode_entry(entry: tuple[Any, ...]) -> bytes:
    payload = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_entries(data: bytes) -> tuple[list[tuple[Any, ...]], int]:
    """The whole entries at the start of ``data``, and how many bytes they take: what follows
    is a torn entry (a writer killed mid-append)."""
    entries: list[tuple[Any, ...]] = []
    at = 0
    while at + HEADER.size <= len(data):
        length, crc = HEADER.unpack_from(data, at)
        end = at + HEADER.size + length
        if end > len(data):
            break
        payload = data[at + HEADER.size : end]
        if zlib.crc32(payload) != crc:
            break
        entries.append(pickle.loads(payload))
        at = end
    return entries, at


BITCASK_DIRS: list[str] = []
ENVIRONMENT = "BLIND17_BITCASK_DIR"


def _remove_bitcask_dirs() -> None:
    while BITCASK_DIRS:
        shutil.rmtree(BITCASK_DIRS.pop(), ignore_errors=True)


atexit.register(_remove_bitcask_dirs)


class BitcaskBackend(CallBackend):
    """One append-only data file of flushed, length-prefixed entries; a keydir per handle rebuilt
    by a scan when it opens and caught up from its offset under the store's file lock; a merge
    rewrites the live entries, counters and tombstones into a new file swapped in with
    ``os.replace``."""

    capabilities = TABLE_CAPABILITIES | {Capability.DURABLE}

    def __init__(self, directory: str | None = None) -> None:
        if directory is None:
            directory = tempfile.mkdtemp(prefix="blind17-bitcask-")
            BITCASK_DIRS.append(directory)
        self.directory = directory
        self.data_path = os.path.join(directory, "data.bitcask")
        self.lock_path = os.path.join(directory, "lock")
        self.keydir: LoggedTables | None = None
        self.offset = 0
        self.inode: int | None = None
        self.entries = 0
        self.mutex = threading.Lock()

    def describe(self) -> str:
        return f"bitcask://{self.directory}"

    def new_handle(self) -> Self:
        return type(self)(self.directory)

    async def call(self, name: str, *args: Any) -> Any:
        return await asyncio.to_thread(self.locked, name, args)

    def locked(self, name: str, args: tuple[Any, ...]) -> Any:
        with self.mutex, open(self.lock_path, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                keydir = self.catch_up()
                keydir.pending.clear()
                result = getattr(keydir, name)(*args)
                if keydir.pending:
                    try:
                        self.append(keydir.pending)
                    except BaseException:
                        self.keydir = None  # rebuilt from the file: the write did not land
                        raise
                    keydir.pending.clear()
                    if self.entries > 2 * len(keydir.records) + MERGE_AT:
                        self.merge(keydir)
                return result
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    # ------------------------------------------------------------ the file

    def new_keydir(self) -> LoggedTables:
        return LoggedTables()

    def rebuild(self, keydir: LoggedTables, entries: list[tuple[Any, ...]]) -> None:
        for entry in entries:
            replay(keydir, entry)

    def catch_up(self) -> LoggedTables:
        """The keydir as the file says now (called under the file lock)."""
        try:
            stat = os.stat(self.data_path)
        except FileNotFoundError:
            self.keydir, self.offset, self.inode, self.entries = self.new_keydir(), 0, None, 0
            return self.keydir
        if self.keydir is None or stat.st_ino != self.inode or stat.st_size < self.offset:
            self.keydir, self.offset, self.inode, self.entries = self.new_keydir(), 0, stat.st_ino, 0
            fresh = True
        else:
            fresh = False
        if stat.st_size > self.offset:
            with open(self.data_path, "rb") as data:
                data.seek(self.offset)
                chunk = data.read()
            entries, used = decode_entries(chunk)
            if fresh:
                self.rebuild(self.keydir, entries)
            else:
                for entry in entries:
                    replay(self.keydir, entry)
            self.offset += used
            self.entries += len(entries)
            if used < len(chunk):
                self.cut_torn_tail()
        return self.keydir

    def cut_torn_tail(self) -> None:
        with open(self.data_path, "r+b") as data:
            data.truncate(self.offset)

    def append(self, entries: list[tuple[Any, ...]]) -> None:
        with open(self.data_path, "ab") as data:
            data.write(b"".join(encode_entry(e) for e in entries))
            data.flush()
            self.offset = data.tell()
        self.inode = os.stat(self.data_path).st_ino
        self.entries += len(entries)

    def live_entries(self, keydir: Tables) -> list[tuple[Any, ...]]:
        entries: list[tuple[Any, ...]] = [("counter", name, last) for name, last in keydir.sequences.items()]
        rows = sorted(keydir.records.values(), key=lambda row: (row[1].workflow_name, row[0]))
        entries += [("put", sequence, fields_of(record)) for sequence, record in rows]
        for name, marks in keydir.tombstones.items():
            entries += [("tombstone", name, each) for each in marks]
        return entries

    def merge(self, keydir: LoggedTables) -> None:
        entries = self.live_entries(keydir)
        staging = self.data_path + ".merge"
        with open(staging, "wb") as data:
            data.write(b"".join(encode_entry(e) for e in entries))
            data.flush()
            size = data.tell()
        os.replace(staging, self.data_path)
        self.offset, self.inode, self.entries = size, os.stat(self.data_path).st_ino, len(entries)


def open_bitcask_from_environment() -> TableStorage:
    """What another process calls to open the store the last target made."""
    return TableStorage(BitcaskBackend(os.environ[ENVIRONMENT]))


# ---------------------------------------------------------------- broken Bitcask stores


class BitcaskFirstEntryWins(BitcaskBackend):
    """The rebuild on open keeps the first put of an id it meets and skips later ones (a keydir
    filled with ``setdefault``): a body overwritten by a raw write reads as saved before after a
    reopen."""

    def rebuild(self, keydir: LoggedTables, entries: list[tuple[Any, ...]]) -> None:
        for entry in entries:
            if entry[0] == "put" and entry[2][0] in keydir.records:
                continue
            replay(keydir, entry)


class BitcaskDeletesNotReplayed(BitcaskBackend):
    """The rebuild on open replays puts, tombstones and counters but not delete entries: a
    deleted checkpoint comes back after a reopen."""

    def rebuild(self, keydir: LoggedTables, entries: list[tuple[Any, ...]]) -> None:
        for entry in entries:
            if entry[0] != "delete":
                replay(keydir, entry)


class BitcaskCounterFromLiveRecords(BitcaskBackend):
    """The rebuild on open recomputes each workflow's counter from the records still live
    (counter entries ignored): after a reopen, a workflow whose newest records were deleted hands
    their sequence numbers out again."""

    def rebuild(self, keydir: LoggedTables, entries: list[tuple[Any, ...]]) -> None:
        for entry in entries:
            if entry[0] != "counter":
                replay(keydir, entry)
        keydir.sequences.clear()
        for sequence, record in keydir.records.values():
            name = record.workflow_name
            keydir.sequences[name] = max(keydir.sequences.get(name, 0), sequence)


class BitcaskTornTailRefusesFile(BitcaskBackend):
    """A torn last entry (a writer killed mid-append) makes the scan on open drop the whole
    file as damaged instead of cutting the tail off: every acknowledged save is lost."""

    def cut_torn_tail(self) -> None:
        with open(self.data_path, "r+b") as data:
            data.truncate(0)
        self.keydir, self.offset, self.entries = self.new_keydir(), 0, 0


class BitcaskMergeDropsTombstones(BitcaskBackend):
    """The merge rewrites live records and counters but not tombstones (they are not live
    records): after a merge, pruned ids no longer read as pruned."""

    def live_entries(self, keydir: Tables) -> list[tuple[Any, ...]]:
        return [e for e in super().live_entries(keydir) if e[0] != "tombstone"]


class BitcaskMergeDropsCounters(BitcaskBackend):
    """The merge rewrites live records and tombstones but not counter entries: after a merge, a
    handle that rebuilds takes each counter from the records left, and a workflow emptied by
    deletes starts its sequence again."""

    def live_entries(self, keydir: Tables) -> list[tuple[Any, ...]]:
        return [e for e in super().live_entries(keydir) if e[0] != "counter"]


class BitcaskMergeOutsideLock(BitcaskBackend):
    """The merge writes the live entries it read under the lock, but swaps the file in after
    releasing it (a merge need not block writers): an entry another handle appended in between
    is lost with the old file."""

    def locked(self, name: str, args: tuple[Any, ...]) -> Any:
        self.merge_later: list[tuple[Any, ...]] | None = None
        result = super().locked(name, args)
        if self.merge_later is not None:
            entries, self.merge_later = self.merge_later, None
            staging = f"{self.data_path}.merge.{os.getpid()}.{threading.get_ident()}"
            with open(staging, "wb") as data:
                data.write(b"".join(encode_entry(e) for e in entries))
            os.replace(staging, self.data_path)
        return result

    def merge(self, keydir: LoggedTables) -> None:
        self.merge_later = self.live_entries(keydir)
        self.keydir = None  # rebuilt from the merged file on the next call


class BitcaskKeydirOnlyAtOpen(BitcaskBackend):
    """A handle scans the file when it opens and then trusts its own keydir (Bitcask's keydir is
    the index): appends another handle makes after that are never read by it."""

    def catch_up(self) -> LoggedTables:
        if self.keydir is not None:
            return self.keydir
        return super().catch_up()


# ====================================================================== a sidecar process

SIDECAR_CONTEXT = "forkserver"


def _serve_connection(conn: Connection, tables: Tables) -> None:
    while True:
        try:
            name, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            with tables.lock:
                answer: tuple[str, Any] = ("ok", getattr(tables, name)(*args))
        except Exception as error:
            answer = ("error", error)
        try:
            conn.send(answer)
        except (OSError, pickle.PicklingError):
            return


def serve_sidecar(address: str, control: Connection, tables_class: type[Tables]) -> None:
    """The child: accept connections (a thread each) until the parent goes away."""
    tables = tables_class()
    listener = Listener(address, family="AF_UNIX")

    def accept() -> None:
        while True:
            try:
                conn = listener.accept()
            except OSError:
                return
            threading.Thread(target=_serve_connection, args=(conn, tables), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    control.send("ready")
    with contextlib.suppress(EOFError, OSError):
        control.recv()
    os._exit(0)


def _stop_child(process: Any, control: Connection, directory: str) -> None:
    with contextlib.suppress(OSError):
        control.close()
    process.join(2)
    if process.is_alive():
        process.kill()
        process.join(2)
    shutil.rmtree(directory, ignore_errors=True)


class Sidecar:
    """One child process per store, started on first use, shared by the store's handles."""

    tables_class: type[Tables] = Tables

    def __init__(self) -> None:
        self.address = ""
        self.started = threading.Lock()
        self.process: Any = None

    def start(self) -> str:
        with self.started:
            if self.process is None:
                # made with the child, so a store never used leaves no directory behind
                self.directory = tempfile.mkdtemp(prefix="blind17-sidecar-")
                self.address = os.path.join(self.directory, "socket")
                context = multiprocessing.get_context(SIDECAR_CONTEXT)
                context.set_forkserver_preload([__name__])
                ours, theirs = context.Pipe()
                process = context.Process(
                    target=serve_sidecar, args=(self.address, theirs, self.tables_class), daemon=True
                )
                process.start()
                theirs.close()
                ours.recv()
                self.process = process
                weakref.finalize(self, _stop_child, process, ours, self.directory)
            return self.address


class SidecarBackend(CallBackend):
    """Each primitive is a pickled request to the store's child process over the handle's own
    connection, the reply awaited with ``add_reader``, one request at a time per handle under an
    ``asyncio.Lock``; a cancelled call reads its reply before giving the lock back."""

    def __init__(self, sidecar: Sidecar | None = None) -> None:
        self.sidecar = sidecar if sidecar is not None else Sidecar()
        self.conn: Connection | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock: asyncio.Lock | None = None

    def describe(self) -> str:
        return "sidecar://"

    def new_handle(self) -> Self:
        return type(self)(self.sidecar)

    def drop_connection(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    async def close(self) -> None:
        self.drop_connection()

    async def connection(self) -> Connection:
        loop = asyncio.get_running_loop()
        if self.loop is not loop:
            # a reply a call on a finished loop never read must not reach this loop's calls
            self.drop_connection()
            self.loop, self.lock = loop, asyncio.Lock()
        if self.conn is None:
            address = await asyncio.to_thread(self.sidecar.start)
            self.conn = await asyncio.to_thread(Client, address, "AF_UNIX")
        return self.conn

    async def readable(self, conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        if conn.poll():
            return
        ready = loop.create_future()
        loop.add_reader(conn.fileno(), lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(conn.fileno())

    async def exchange(self, conn: Connection, request: tuple[str, tuple[Any, ...]]) -> Any:
        await asyncio.to_thread(conn.send, request)
        await self.readable(conn)
        return conn.recv()

    async def call(self, name: str, *args: Any) -> Any:
        conn = await self.connection()
        assert self.lock is not None
        async with self.lock:
            step = asyncio.ensure_future(self.exchange(conn, (name, args)))
            try:
                kind, value = await asyncio.shield(step)
            except asyncio.CancelledError:
                with_reply = await asyncio.gather(step, return_exceptions=True)
                del with_reply
                raise
        return self.answer(kind, value)

    def answer(self, kind: str, value: Any) -> Any:
        if kind == "error":
            raise value
        return value


# ---------------------------------------------------------------- broken sidecars


class SidecarCancelLeavesReply(SidecarBackend):
    """A cancelled call gives the lock back at once, its reply left on the connection: the
    handle's next call reads the cancelled call's answer as its own."""

    async def call(self, name: str, *args: Any) -> Any:
        conn = await self.connection()
        assert self.lock is not None
        async with self.lock:
            kind, value = await self.exchange(conn, (name, args))
        return self.answer(kind, value)


class SidecarLockBeforeReply(SidecarBackend):
    """The lock covers sending the request only (the child answers in order, so replies are
    thought to pair up): two calls of one handle wait on the connection together and each takes
    whichever reply comes first."""

    async def call(self, name: str, *args: Any) -> Any:
        conn = await self.connection()
        assert self.lock is not None
        async with self.lock:
            await asyncio.to_thread(conn.send, (name, args))
        await self.readable(conn)
        kind, value = conn.recv()
        return self.answer(kind, value)


class SidecarErrorsAsNone(SidecarBackend):
    """An exception raised in the child is answered as None (the reply carries no error kind):
    a refused delete of a nested id or a nested-id conflict reads as a plain 'nothing'."""

    def answer(self, kind: str, value: Any) -> Any:
        return None if kind == "error" else value


class SidecarOwnChild(SidecarBackend):
    """``new_handle`` starts a child of its own for the new handle: handles of one storage do
    not share a store, though it declares ``shared``."""

    def new_handle(self) -> Self:
        return type(self)()


class BytearrayTables(Tables):
    def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return super().overwrite_body(checkpoint_id, bytearray(body), digest)  # type: ignore[arg-type]


class BytearraySidecar(Sidecar):
    tables_class = BytearrayTables


class SidecarRawBodyBytearray(SidecarBackend):
    """The child keeps a raw body in the ``bytearray`` the request unpickled to (it received a
    buffer) rather than ``bytes``: ``read_raw_body`` gives back a bytearray, not the bytes
    written."""

    def __init__(self, sidecar: Sidecar | None = None) -> None:
        super().__init__(sidecar if sidecar is not None else BytearraySidecar())


class TupleTables(Tables):
    def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        found = super().nested_ids(checkpoint_id)
        return None if found is None else tuple(found)  # type: ignore[return-value]

    def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointID]:
        return tuple(super().list_ids(workflow_name, graph_signature_hash, include_nested))  # type: ignore[return-value]


class TupleSidecar(Sidecar):
    tables_class = TupleTables


class SidecarIdsAsTuples(SidecarBackend):
    """The child answers id listings as tuples (a compact reply) where the primitive returns a
    list: ``list_checkpoint_ids`` hands the caller a tuple."""

    def __init__(self, sidecar: Sidecar | None = None) -> None:
        super().__init__(sidecar if sidecar is not None else TupleSidecar())


# ====================================================================== the author's schema over aiosqlite

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    workflow TEXT NOT NULL,
    previous TEXT,
    signature TEXT NOT NULL,
    container TEXT REFERENCES records(id) ON DELETE CASCADE,
    root TEXT,
    position INTEGER NOT NULL,
    digest TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_workflow ON records (workflow, sequence);
CREATE INDEX IF NOT EXISTS records_by_container ON records (container, position);
CREATE TABLE IF NOT EXISTS counters (workflow TEXT PRIMARY KEY, last INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tombstones (workflow TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (workflow, id));
"""
COLUMNS = "id, workflow, previous, signature, body, digest, container, root, position, sequence"
SQLITE_FILES: list[str] = []
SQLITE_ENVIRONMENT = "BLIND17_AIOSQLITE_PATH"
SCHEMA_LOCK = threading.Lock()
SCHEMA_DONE: set[str] = set()


def _remove_sqlite_files() -> None:
    while SQLITE_FILES:
        shutil.rmtree(SQLITE_FILES.pop(), ignore_errors=True)


atexit.register(_remove_sqlite_files)

Row = tuple[Any, ...]


def row_record(row: Row) -> tuple[CheckpointRecord, int]:
    return CheckpointRecord(*row[:4], bytes(row[4]), *row[5:9]), int(row[9])


def row_stored(row: Row) -> StoredBody:
    record, _ = row_record(row)
    return StoredBody(record.checkpoint_id, record.body, entry=record.index_entry())


class AioSqliteBackend(Backend):
    """The author's own schema (records, counters, tombstones, children by their container
    column) over ``aiosqlite`` in a temporary file, a connection per handle; every primitive is
    one transaction (``BEGIN IMMEDIATE`` for writes), run to its end even when its caller is
    cancelled."""

    capabilities = TABLE_CAPABILITIES | {Capability.DURABLE}

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            directory = tempfile.mkdtemp(prefix="blind17-aiosqlite-")
            SQLITE_FILES.append(directory)
            path = os.path.join(directory, "store.db")
        self.path = path
        self.conn: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = asyncio.Lock()

    def describe(self) -> str:
        return f"aiosqlite:///{self.path}"

    def new_handle(self) -> Self:
        return type(self)(self.path)

    def create_schema(self) -> None:
        """Once per file, before any aiosqlite connection: WAL and the tables (on a thread)."""
        with SCHEMA_LOCK:
            if self.path in SCHEMA_DONE:
                return
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(SCHEMA)
            finally:
                conn.close()
            SCHEMA_DONE.add(self.path)

    async def connection(self) -> Any:
        import aiosqlite

        loop = asyncio.get_running_loop()
        if self.conn is not None and self.loop is not loop:
            old, self.conn = self.conn, None
            with contextlib.suppress(Exception):
                await old.close()
        if self.conn is None:
            await asyncio.to_thread(self.create_schema)
            conn = await aiosqlite.connect(self.path, timeout=60, isolation_level=None)
            self.conn, self.loop, self.lock = conn, loop, asyncio.Lock()
        return self.conn

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            await conn.close()

    async def follow_loop(self) -> None:
        self.conn = None

    async def run(self, work: Callable[[Any], Any], begin: str = "BEGIN IMMEDIATE") -> Any:
        conn = await self.connection()

        async def transaction() -> Any:
            async with self.lock:  # one transaction at a time on the handle's connection
                await conn.execute(begin)
                try:
                    result = await work(conn)
                except BaseException:
                    await conn.execute("ROLLBACK")
                    raise
                await conn.execute("COMMIT")
                return result

        step = asyncio.ensure_future(transaction())
        try:
            return await asyncio.shield(step)
        except asyncio.CancelledError:
            await asyncio.gather(step, return_exceptions=True)
            raise

    async def read(self, work: Callable[[Any], Any]) -> Any:
        return await self.run(work, "BEGIN")

    # ------------------------------------------------------------ helpers (inside a transaction)

    @staticmethod
    async def rows(conn: Any, sql: str, *args: Any) -> list[Row]:
        return list(await conn.execute_fetchall(sql, args))

    async def top_records(self, conn: Any, workflow_name: str) -> list[CheckpointRecord]:
        rows = await self.rows(
            conn,
            f"SELECT {COLUMNS} FROM records WHERE workflow = ? AND container IS NULL ORDER BY sequence",
            workflow_name,
        )
        return [row_record(row)[0] for row in rows]

    async def family(self, conn: Any, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        rows = await self.rows(
            conn,
            "WITH RECURSIVE f(id) AS (SELECT ? UNION SELECT r.id FROM records r JOIN f ON r.container = f.id)"
            " SELECT id FROM f",
            checkpoint_id,
        )
        return [row[0] for row in rows]

    async def drop_family(self, conn: Any, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        gone = await self.family(conn, checkpoint_id)
        await conn.executemany("DELETE FROM records WHERE id = ?", [(each,) for each in gone])
        return gone

    async def next_sequence(self, conn: Any, record: CheckpointRecord) -> int:
        await conn.execute(
            "INSERT INTO counters (workflow, last) VALUES (?, 1) "
            "ON CONFLICT (workflow) DO UPDATE SET last = last + 1",
            (record.workflow_name,),
        )
        (row,) = await self.rows(conn, "SELECT last FROM counters WHERE workflow = ?", record.workflow_name)
        return int(row[0])

    async def put(self, conn: Any, record: CheckpointRecord) -> None:
        sequence = await self.next_sequence(conn, record)
        await conn.execute(
            f"INSERT INTO records ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*fields_of(record)[:4], record.body, *fields_of(record)[5:], sequence),
        )

    async def write_family(self, conn: Any, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        found = await self.rows(conn, "SELECT digest FROM records WHERE id = ?", top.checkpoint_id)
        if found:
            return InsertResult.of_stored_digest(found[0][0], top)
        for record in records[1:]:
            if await self.rows(conn, "SELECT 1 FROM records WHERE id = ?", record.checkpoint_id):
                raise nested_id_conflict(records, record.checkpoint_id)
        for record in records:
            await self.put(conn, record)
        return InsertResult.INSERTED

    async def head_id(self, conn: Any, workflow_name: str) -> CheckpointID | None:
        head = latest_record(await self.top_records(conn, workflow_name))
        return None if head is None else head.checkpoint_id

    # ------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.run(lambda conn: self.write_family(conn, records))  # type: ignore[no-any-return]

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        async def work(conn: Any) -> FenceCheck | None:
            latest = await self.head_id(conn, records[0].workflow_name)
            return await self.fenced_write(conn, records, expected_latest_id, latest)

        return await self.run(work)  # type: ignore[no-any-return]

    async def fenced_write(
        self,
        conn: Any,
        records: Sequence[CheckpointRecord],
        expected_latest_id: CheckpointID | None,
        latest: CheckpointID | None,
    ) -> FenceCheck | None:
        stored_already = await self.rows(conn, "SELECT 1 FROM records WHERE id = ?", records[0].checkpoint_id)
        if latest != expected_latest_id and not stored_already:
            return FenceCheck(latest, None)
        return FenceCheck.after_insert(latest, await self.write_family(conn, records))

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        async def work(conn: Any) -> bool:
            found = await self.rows(conn, "SELECT container FROM records WHERE id = ?", checkpoint_id)
            if not found:
                return False
            if found[0][0] is not None:
                raise NestedCheckpointDeletionError(checkpoint_id, found[0][0])
            await self.drop_family(conn, checkpoint_id)
            return True

        return await self.run(work)  # type: ignore[no-any-return]

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        async def work(conn: Any) -> int:
            doomed = pruned_records(await self.top_records(conn, workflow_name), keep_last)
            gone: list[CheckpointID] = []
            for record in doomed:
                gone += await self.drop_family(conn, record.checkpoint_id)
            await conn.executemany(
                "INSERT OR IGNORE INTO tombstones (workflow, id) VALUES (?, ?)",
                [(workflow_name, each) for each in gone],
            )
            return len(doomed)

        return await self.run(work)  # type: ignore[no-any-return]

    async def delete_workflow(self, workflow_name: str) -> int:
        async def work(conn: Any) -> int:
            doomed = await self.top_records(conn, workflow_name)
            for record in doomed:
                await self.drop_family(conn, record.checkpoint_id)
            await conn.execute("DELETE FROM tombstones WHERE workflow = ?", (workflow_name,))
            return len(doomed)

        return await self.run(work)  # type: ignore[no-any-return]

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        async def work(conn: Any) -> bool:
            cursor = await conn.execute("UPDATE records SET body = ? WHERE id = ?", (body, checkpoint_id))
            return bool(cursor.rowcount)

        return await self.run(work)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        async def work(conn: Any) -> StoredBody | None:
            rows = await self.rows(conn, f"SELECT {COLUMNS} FROM records WHERE id = ?", checkpoint_id)
            return row_stored(rows[0]) if rows else None

        return await self.read(work)  # type: ignore[no-any-return]

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        async def work(conn: Any) -> StoredBody | None:
            rows = await self.top_records(conn, workflow_name)
            head = latest_record(rows, graph_signature_hash)
            if head is None:
                return None
            rivals = [stored(rival) for rival in rivals_of(rows, head)]
            return replace(stored(head), rivals=rivals)

        return await self.read(work)  # type: ignore[no-any-return]

    async def listed(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[StoredBody]:
        async def work(conn: Any) -> list[StoredBody]:
            sql = f"SELECT {COLUMNS} FROM records WHERE workflow = ?"
            args: list[Any] = [workflow_name]
            if not include_nested:
                sql += " AND container IS NULL"
            if graph_signature_hash is not None:
                sql += " AND signature = ?"
                args.append(graph_signature_hash)
            return [row_stored(row) for row in await self.rows(conn, sql + " ORDER BY sequence", *args)]

        return await self.read(work)  # type: ignore[no-any-return]

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.listed(workflow_name, graph_signature_hash, include_nested)

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return [
            b.checkpoint_id for b in await self.listed(workflow_name, graph_signature_hash, include_nested)
        ]

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        async def work(conn: Any) -> dict[CheckpointID, bytes]:
            bodies: dict[CheckpointID, bytes] = {}
            for checkpoint_id in checkpoint_ids:
                for each in (await self.family(conn, checkpoint_id))[1:]:
                    rows = await self.rows(conn, "SELECT body FROM records WHERE id = ?", each)
                    if rows:
                        bodies[each] = bytes(rows[0][0])
            return bodies

        return await self.read(work)  # type: ignore[no-any-return]

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        async def work(conn: Any) -> list[CheckpointID] | None:
            if not await self.rows(conn, "SELECT 1 FROM records WHERE id = ?", checkpoint_id):
                return None
            rows = await self.rows(
                conn, "SELECT id FROM records WHERE container = ? ORDER BY position", checkpoint_id
            )
            return [row[0] for row in rows]

        return await self.read(work)  # type: ignore[no-any-return]

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        async def work(conn: Any) -> WalkRecords:
            links: dict[CheckpointID, CheckpointID | None] = {}
            bodies: dict[CheckpointID, bytes] = {}
            tombstones: set[CheckpointID] = set()
            current: CheckpointID | None = checkpoint_id
            while current is not None and current not in links and len(links) < max_depth:
                rows = await self.rows(conn, "SELECT previous, body FROM records WHERE id = ?", current)
                if not rows:
                    if current != checkpoint_id and await self.rows(
                        conn, "SELECT 1 FROM tombstones WHERE id = ?", current
                    ):
                        tombstones.add(current)
                    break
                links[current] = rows[0][0]
                if with_bodies:
                    bodies[current] = bytes(rows[0][1])
                    for each in (await self.family(conn, current))[1:]:
                        found = await self.rows(conn, "SELECT body FROM records WHERE id = ?", each)
                        if found:
                            bodies[each] = bytes(found[0][0])
                current = rows[0][0]
            return WalkRecords(links, bodies, frozenset(tombstones))

        return await self.read(work)  # type: ignore[no-any-return]

    async def workflow_names(self) -> list[str]:
        async def work(conn: Any) -> list[str]:
            rows = await self.rows(conn, "SELECT DISTINCT workflow FROM records WHERE container IS NULL")
            return [row[0] for row in rows]

        return await self.read(work)  # type: ignore[no-any-return]

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        async def work(conn: Any) -> CheckpointInfo | None:
            rows = await self.rows(conn, f"SELECT {COLUMNS} FROM records WHERE id = ?", checkpoint_id)
            if not rows:
                return None
            record, sequence = row_record(rows[0])
            return record.info(sequence)

        return await self.read(work)  # type: ignore[no-any-return]

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        async def work(conn: Any) -> list[CheckpointInfo]:
            if workflow_name is None:
                rows = await self.rows(conn, f"SELECT {COLUMNS} FROM records")
            else:
                rows = await self.rows(
                    conn, f"SELECT {COLUMNS} FROM records WHERE workflow = ?", workflow_name
                )
            return [record.info(sequence) for record, sequence in map(row_record, rows)]

        return await self.read(work)  # type: ignore[no-any-return]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        async def work(conn: Any) -> list[CheckpointID]:
            if workflow_name is None:
                rows = await self.rows(conn, "SELECT id FROM tombstones")
            else:
                rows = await self.rows(conn, "SELECT id FROM tombstones WHERE workflow = ?", workflow_name)
            return [row[0] for row in rows]

        return await self.read(work)  # type: ignore[no-any-return]


# ---------------------------------------------------------------- broken aiosqlite stores


class AioSqliteDeferredWrites(AioSqliteBackend):
    """Writes open a plain (DEFERRED) transaction: a save reads (the duplicate check, the
    counter) before it writes, so two handles saving at once both hold a read snapshot and the
    one that writes second fails with 'database is locked' instead of waiting."""

    async def run(self, work: Callable[[Any], Any], begin: str = "BEGIN") -> Any:
        return await super().run(work, "BEGIN")


class AioSqliteFenceReadApart(AioSqliteBackend):
    """A fenced save reads the workflow's head in a read transaction of its own, then writes in
    the ``BEGIN IMMEDIATE`` one: a writer that commits in between is not seen by the fence."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        latest = await self.read(lambda conn: self.head_id(conn, records[0].workflow_name))
        return await self.run(  # type: ignore[no-any-return]
            lambda conn: self.fenced_write(conn, records, expected_latest_id, latest)
        )


class AioSqliteFamilyAutocommit(AioSqliteBackend):
    """A save writes its family with one ``executemany`` outside any transaction and lets the
    primary key refuse a nested id already stored: the rows before the conflicting one stay."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        conn = await self.connection()
        async with self.lock:
            top = records[0]
            found = await self.rows(conn, "SELECT digest FROM records WHERE id = ?", top.checkpoint_id)
            if found:
                return InsertResult.of_stored_digest(found[0][0], top)
            rows = []
            last: dict[str, int] = {}
            for record in records:
                name = record.workflow_name
                if name not in last:
                    found = await self.rows(conn, "SELECT last FROM counters WHERE workflow = ?", name)
                    last[name] = int(found[0][0]) if found else 0
                last[name] += 1
                rows.append((*fields_of(record)[:4], record.body, *fields_of(record)[5:], last[name]))
            try:
                await conn.executemany(
                    f"INSERT INTO records ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
                )
            except sqlite3.IntegrityError:
                for record in records[1:]:
                    found = await self.rows(
                        conn, "SELECT sequence FROM records WHERE id = ?", record.checkpoint_id
                    )
                    if found and not any(r[0] == record.checkpoint_id and r[9] == found[0][0] for r in rows):
                        raise nested_id_conflict(records, record.checkpoint_id) from None
                raise
            await conn.executemany(
                "INSERT INTO counters (workflow, last) VALUES (?, ?)"
                " ON CONFLICT (workflow) DO UPDATE SET last = excluded.last",
                list(last.items()),
            )
            return InsertResult.INSERTED


class AioSqliteSequenceFromRowid(AioSqliteBackend):
    """A record's sequence is the ``lastrowid`` of its insert (the table's rowid, which rises):
    deleting the newest record lets SQLite hand its rowid out again."""

    async def put(self, conn: Any, record: CheckpointRecord) -> None:
        cursor = await conn.execute(
            f"INSERT INTO records ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
            (*fields_of(record)[:4], record.body, *fields_of(record)[5:]),
        )
        await conn.execute("UPDATE records SET sequence = rowid WHERE rowid = ?", (cursor.lastrowid,))


class AioSqliteSequenceFromCount(AioSqliteBackend):
    """A record's sequence is ``COUNT(*) + 1`` of its workflow's records (no counter table
    read): once a record is deleted, the next save takes a number already held."""

    async def next_sequence(self, conn: Any, record: CheckpointRecord) -> int:
        (row,) = await self.rows(
            conn, "SELECT COUNT(*) FROM records WHERE workflow = ?", record.workflow_name
        )
        return int(row[0]) + 1


class AioSqliteCascadeAssumed(AioSqliteBackend):
    """``remove`` deletes the top record alone and counts on the schema's ``ON DELETE
    CASCADE`` for its nested records, but ``PRAGMA foreign_keys`` is off (SQLite's default):
    the nested records stay."""

    async def drop_family(self, conn: Any, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        gone = await self.family(conn, checkpoint_id)
        await conn.execute("DELETE FROM records WHERE id = ?", (checkpoint_id,))
        return gone


class AioSqlitePruneCountsRows(AioSqliteBackend):
    """``prune`` deletes the doomed families in one statement and returns its ``rowcount``
    (SQLite's ``changes()``): the count includes the nested records deleted with them."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        async def work(conn: Any) -> int:
            doomed = pruned_records(await self.top_records(conn, workflow_name), keep_last)
            gone: list[CheckpointID] = []
            for record in doomed:
                gone += await self.family(conn, record.checkpoint_id)
            cursor = (
                await conn.execute(f"DELETE FROM records WHERE id IN ({', '.join('?' * len(gone))})", gone)
                if gone
                else None
            )
            await conn.executemany(
                "INSERT OR IGNORE INTO tombstones (workflow, id) VALUES (?, ?)",
                [(workflow_name, each) for each in gone],
            )
            return 0 if cursor is None else int(cursor.rowcount)

        return await self.run(work)  # type: ignore[no-any-return]


# ============================================================ an adapter over LangGraph's AsyncSqliteSaver

RECORDS_NS = ""
COUNTER_NS = "counter"
TOMBSTONES_NS = "tombstones"
INDEX_THREAD = "\x00index"
"""A thread no workflow can be named (a control character): checkpoint id -> its workflow."""
SAVER_FILES: list[str] = []


def _remove_saver_files() -> None:
    while SAVER_FILES:
        shutil.rmtree(SAVER_FILES.pop(), ignore_errors=True)


atexit.register(_remove_saver_files)


def saver_config(thread: str, namespace: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": namespace}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def saver_checkpoint(checkpoint_id: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "v": 1,
        "id": checkpoint_id,
        "ts": "",
        "channel_values": values,
        "channel_versions": {},
        "versions_seen": {},
        "pending_sends": [],
    }


def values_of(record: CheckpointRecord, sequence: int) -> dict[str, Any]:
    return {
        "body": bytes(record.body),
        "workflow": record.workflow_name,
        "previous": record.previous_checkpoint_id,
        "signature": record.graph_signature_hash,
        "digest": record.digest,
        "container": record.container_id,
        "root": record.root_id,
        "position": record.position,
        "sequence": sequence,
        "deleted": False,
    }


def record_of_values(checkpoint_id: str, values: Mapping[str, Any]) -> tuple[CheckpointRecord, int]:
    record = CheckpointRecord(
        checkpoint_id,
        values["workflow"],
        values["previous"],
        values["signature"],
        bytes(values["body"]),
        values["digest"],
        values["container"],
        values["root"],
        values["position"],
    )
    return record, int(values["sequence"])


class SaverStore:
    """What a store's handles share: the file, and the lock that makes each primitive one step
    (the saver commits each call on its own), taken on a thread so loops in other threads wait
    too."""

    def __init__(self) -> None:
        directory = tempfile.mkdtemp(prefix="blind17-saver-")
        SAVER_FILES.append(directory)
        self.path = os.path.join(directory, "saver.db")
        self.mutex = threading.Lock()

    @contextlib.asynccontextmanager
    async def lock(self) -> Any:
        if not self.mutex.acquire(blocking=False):
            await asyncio.to_thread(self.mutex.acquire)
        try:
            yield
        finally:
            self.mutex.release()


class SaverSqliteAdapter(Backend):
    """Records as LangGraph checkpoints through ``AsyncSqliteSaver``'s public API (``aput``,
    ``aget_tuple``, ``alist``): a thread per workflow, each record's body and index fields in
    its channel values (its own sequence among them), a counter and tombstones in namespaces of
    the thread, an index thread from id to workflow; a delete rewrites the record as a deleted
    marker. Each handle has its own saver and connection; every primitive runs under the store's
    lock, to its end even when its caller is cancelled."""

    capabilities = TABLE_CAPABILITIES

    def __init__(self, store: SaverStore | None = None) -> None:
        self.store = store if store is not None else SaverStore()
        self.saver: Any = None
        self.conn: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def describe(self) -> str:
        return "langgraph-saver://"

    def new_handle(self) -> Self:
        return type(self)(self.store)

    async def open_saver(self) -> Any:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        loop = asyncio.get_running_loop()
        if self.saver is not None and self.loop is not loop:
            old, self.conn, self.saver = self.conn, None, None
            with contextlib.suppress(Exception):
                await old.close()
        if self.saver is None:
            conn = await aiosqlite.connect(self.store.path, timeout=60)
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            self.conn, self.saver, self.loop = conn, saver, loop
        return self.saver

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn, self.saver = self.conn, None, None
            await conn.close()

    async def follow_loop(self) -> None:
        self.conn, self.saver = None, None

    async def step(self, work: Callable[[Any], Any]) -> Any:
        async def locked() -> Any:
            async with self.store.lock():
                return await work(await self.open_saver())

        task = asyncio.ensure_future(locked())
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.gather(task, return_exceptions=True)
            raise

    # ------------------------------------------------------------ the mapping

    async def put_values(
        self, saver: Any, thread: str, namespace: str, checkpoint_id: str, values: Any
    ) -> None:
        parent = values.get("previous") if namespace == RECORDS_NS else None
        await saver.aput(
            saver_config(thread, namespace, parent), saver_checkpoint(checkpoint_id, values), {}, {}
        )

    async def get_values(self, saver: Any, thread: str, namespace: str, checkpoint_id: str) -> Any:
        found = await saver.aget_tuple(saver_config(thread, namespace, checkpoint_id))
        return None if found is None else found.checkpoint["channel_values"]

    async def find(self, saver: Any, checkpoint_id: str) -> tuple[CheckpointRecord, int] | None:
        where = await self.get_values(saver, INDEX_THREAD, RECORDS_NS, checkpoint_id)
        if where is None or where.get("deleted"):
            return None
        values = await self.get_values(saver, where["workflow"], RECORDS_NS, checkpoint_id)
        if values is None or values.get("deleted"):
            return None
        return record_of_values(checkpoint_id, values)

    async def thread_rows(self, saver: Any, workflow_name: str) -> list[tuple[CheckpointRecord, int]]:
        rows = []
        async for item in saver.alist(saver_config(workflow_name, RECORDS_NS)):
            values = item.checkpoint["channel_values"]
            if not values.get("deleted"):
                rows.append(record_of_values(item.checkpoint["id"], values))
        rows.sort(key=lambda row: row[1])
        return rows

    async def top_records(self, saver: Any, workflow_name: str) -> list[CheckpointRecord]:
        return [r for r, _ in await self.thread_rows(saver, workflow_name) if r.container_id is None]

    async def next_sequence(self, saver: Any, workflow_name: str) -> int:
        found = await self.get_values(saver, workflow_name, COUNTER_NS, "counter")
        last = 0 if found is None else int(found["last"])
        await self.put_values(saver, workflow_name, COUNTER_NS, "counter", {"last": last + 1})
        return last + 1

    async def put_record(self, saver: Any, record: CheckpointRecord) -> None:
        sequence = await self.next_sequence(saver, record.workflow_name)
        await self.put_values(
            saver, record.workflow_name, RECORDS_NS, record.checkpoint_id, values_of(record, sequence)
        )
        await self.put_values(
            saver,
            INDEX_THREAD,
            RECORDS_NS,
            record.checkpoint_id,
            {"workflow": record.workflow_name, "deleted": False},
        )

    async def stored_digest(self, saver: Any, checkpoint_id: str) -> str | None:
        found = await self.find(saver, checkpoint_id)
        return None if found is None else found[0].digest

    async def write_family(self, saver: Any, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        digest = await self.stored_digest(saver, top.checkpoint_id)
        if digest is not None:
            return InsertResult.of_stored_digest(digest, top)
        for record in records[1:]:
            if await self.stored_digest(saver, record.checkpoint_id) is not None:
                raise nested_id_conflict(records, record.checkpoint_id)
        for record in records:
            await self.put_record(saver, record)
        return InsertResult.INSERTED

    async def children(self, saver: Any, checkpoint_id: str) -> list[CheckpointRecord]:
        found = await self.find(saver, checkpoint_id)
        if found is None:
            return []
        rows = []
        for name in await self.all_workflows(saver):
            rows += [r for r, _ in await self.thread_rows(saver, name) if r.container_id == checkpoint_id]
        return sorted(rows, key=lambda r: r.position)

    async def all_workflows(self, saver: Any) -> list[str]:
        names = set()
        async for item in saver.alist(saver_config(INDEX_THREAD, RECORDS_NS)):
            values = item.checkpoint["channel_values"]
            if not values.get("deleted"):
                names.add(values["workflow"])
        return sorted(names)

    async def family(self, saver: Any, checkpoint_id: str) -> list[CheckpointRecord]:
        found = await self.find(saver, checkpoint_id)
        if found is None:
            return []
        result = [found[0]]
        for child in await self.children(saver, checkpoint_id):
            result += await self.family(saver, child.checkpoint_id)
        return result

    async def mark_deleted(self, saver: Any, record: CheckpointRecord) -> None:
        await self.put_values(
            saver, record.workflow_name, RECORDS_NS, record.checkpoint_id, {"deleted": True, "previous": None}
        )
        await self.put_values(
            saver,
            INDEX_THREAD,
            RECORDS_NS,
            record.checkpoint_id,
            {"workflow": record.workflow_name, "deleted": True},
        )

    async def drop_family(self, saver: Any, checkpoint_id: str) -> list[CheckpointID]:
        gone = await self.family(saver, checkpoint_id)
        for record in gone:
            await self.mark_deleted(saver, record)
        return [r.checkpoint_id for r in gone]

    async def head_id(self, saver: Any, workflow_name: str) -> CheckpointID | None:
        head = latest_record(await self.top_records(saver, workflow_name))
        return None if head is None else head.checkpoint_id

    async def tombstone_ids(self, saver: Any, workflow_name: str) -> list[CheckpointID]:
        found = []
        async for item in saver.alist(saver_config(workflow_name, TOMBSTONES_NS)):
            if not item.checkpoint["channel_values"].get("deleted"):
                found.append(item.checkpoint["id"])
        return found

    # ------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.step(lambda saver: self.write_family(saver, records))  # type: ignore[no-any-return]

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        async def work(saver: Any) -> FenceCheck | None:
            latest = await self.head_id(saver, records[0].workflow_name)
            stored_already = await self.stored_digest(saver, records[0].checkpoint_id) is not None
            if latest != expected_latest_id and not stored_already:
                return FenceCheck(latest, None)
            return FenceCheck.after_insert(latest, await self.write_family(saver, records))

        return await self.step(work)  # type: ignore[no-any-return]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        async def work(saver: Any) -> bool:
            found = await self.find(saver, checkpoint_id)
            if found is None:
                return False
            if found[0].container_id is not None:
                raise NestedCheckpointDeletionError(checkpoint_id, found[0].container_id)
            await self.drop_family(saver, checkpoint_id)
            return True

        return await self.step(work)  # type: ignore[no-any-return]

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        async def work(saver: Any) -> int:
            doomed = pruned_records(await self.top_records(saver, workflow_name), keep_last)
            for record in doomed:
                for gone in await self.drop_family(saver, record.checkpoint_id):
                    await self.put_values(saver, workflow_name, TOMBSTONES_NS, gone, {"deleted": False})
            return len(doomed)

        return await self.step(work)  # type: ignore[no-any-return]

    async def delete_workflow(self, workflow_name: str) -> int:
        async def work(saver: Any) -> int:
            doomed = await self.top_records(saver, workflow_name)
            for record in doomed:
                await self.drop_family(saver, record.checkpoint_id)
            for each in await self.tombstone_ids(saver, workflow_name):
                await self.put_values(saver, workflow_name, TOMBSTONES_NS, each, {"deleted": True})
            return len(doomed)

        return await self.step(work)  # type: ignore[no-any-return]

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        async def work(saver: Any) -> bool:
            found = await self.find(saver, checkpoint_id)
            if found is None:
                return False
            record, sequence = found
            values = values_of(record.replaced(body=body, digest=record.digest), sequence)
            await self.put_values(saver, record.workflow_name, RECORDS_NS, checkpoint_id, values)
            return True

        return await self.step(work)  # type: ignore[no-any-return]

    # ------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        async def work(saver: Any) -> StoredBody | None:
            found = await self.find(saver, checkpoint_id)
            return None if found is None else stored(found[0])

        return await self.step(work)  # type: ignore[no-any-return]

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        async def work(saver: Any) -> StoredBody | None:
            rows = await self.top_records(saver, workflow_name)
            head = latest_record(rows, graph_signature_hash)
            if head is None:
                return None
            return replace(stored(head), rivals=[stored(rival) for rival in rivals_of(rows, head)])

        return await self.step(work)  # type: ignore[no-any-return]

    async def listed(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        async def work(saver: Any) -> list[CheckpointRecord]:
            return [
                r
                for r, _ in await self.thread_rows(saver, workflow_name)
                if (include_nested or r.container_id is None)
                and graph_signature_hash in (None, r.graph_signature_hash)
            ]

        return await self.step(work)  # type: ignore[no-any-return]

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [stored(r) for r in await self.listed(workflow_name, graph_signature_hash, include_nested)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return [
            r.checkpoint_id for r in await self.listed(workflow_name, graph_signature_hash, include_nested)
        ]

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        async def work(saver: Any) -> dict[CheckpointID, bytes]:
            bodies: dict[CheckpointID, bytes] = {}
            for checkpoint_id in checkpoint_ids:
                for record in (await self.family(saver, checkpoint_id))[1:]:
                    bodies[record.checkpoint_id] = record.body
            return bodies

        return await self.step(work)  # type: ignore[no-any-return]

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        async def work(saver: Any) -> list[CheckpointID] | None:
            if await self.find(saver, checkpoint_id) is None:
                return None
            return [r.checkpoint_id for r in await self.children(saver, checkpoint_id)]

        return await self.step(work)  # type: ignore[no-any-return]

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        async def work(saver: Any) -> WalkRecords:
            links: dict[CheckpointID, CheckpointID | None] = {}
            bodies: dict[CheckpointID, bytes] = {}
            tombstones: set[CheckpointID] = set()
            current: CheckpointID | None = checkpoint_id
            known: dict[CheckpointID, CheckpointRecord] = {}
            by_container: dict[CheckpointID, list[CheckpointRecord]] | None = None
            threads_read: set[str] = set()
            while current is not None and current not in links and len(links) < max_depth:
                record_found = known.get(current)
                if record_found is None:
                    found = await self.find(saver, current)
                    if found is not None and found[0].workflow_name not in threads_read:
                        # one read of the thread serves the rest of the chain in it
                        threads_read.add(found[0].workflow_name)
                        for each, _ in await self.thread_rows(saver, found[0].workflow_name):
                            known[each.checkpoint_id] = each
                else:
                    found = (record_found, 0)
                if found is None:
                    if current != checkpoint_id:
                        for name in await self.all_workflows_with_tombstones(saver, current):
                            if current in await self.tombstone_ids(saver, name):
                                tombstones.add(current)
                    break
                record = found[0]
                links[current] = record.previous_checkpoint_id
                if with_bodies:
                    if by_container is None:
                        by_container = {}
                        for name in await self.all_workflows(saver):
                            for each, _ in await self.thread_rows(saver, name):
                                if each.container_id is not None:
                                    by_container.setdefault(each.container_id, []).append(each)
                    bodies[current] = record.body
                    pending = [current]
                    while pending:
                        for child in by_container.get(pending.pop(), []):
                            bodies[child.checkpoint_id] = child.body
                            pending.append(child.checkpoint_id)
                current = record.previous_checkpoint_id
            return WalkRecords(links, bodies, frozenset(tombstones))

        return await self.step(work)  # type: ignore[no-any-return]

    async def all_workflows_with_tombstones(self, saver: Any, checkpoint_id: str) -> list[str]:
        where = await self.get_values(saver, INDEX_THREAD, RECORDS_NS, checkpoint_id)
        names = set(await self.all_workflows(saver))
        if where is not None:
            names.add(where["workflow"])
        async for item in saver.alist(saver_config(INDEX_THREAD, RECORDS_NS)):
            names.add(item.checkpoint["channel_values"]["workflow"])
        return sorted(names)

    async def workflow_names(self) -> list[str]:
        async def work(saver: Any) -> list[str]:
            return [name for name in await self.all_workflows(saver) if await self.top_records(saver, name)]

        return await self.step(work)  # type: ignore[no-any-return]

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        async def work(saver: Any) -> CheckpointInfo | None:
            found = await self.find(saver, checkpoint_id)
            return None if found is None else found[0].info(found[1])

        return await self.step(work)  # type: ignore[no-any-return]

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        async def work(saver: Any) -> list[CheckpointInfo]:
            names = await self.all_workflows(saver) if workflow_name is None else [workflow_name]
            return [r.info(sequence) for name in names for r, sequence in await self.thread_rows(saver, name)]

        return await self.step(work)  # type: ignore[no-any-return]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        async def work(saver: Any) -> list[CheckpointID]:
            if workflow_name is not None:
                return await self.tombstone_ids(saver, workflow_name)
            found: list[CheckpointID] = []
            names = set()
            async for item in saver.alist(saver_config(INDEX_THREAD, RECORDS_NS)):
                names.add(item.checkpoint["channel_values"]["workflow"])
            for name in sorted(names):
                found += await self.tombstone_ids(saver, name)
            return found

        return await self.step(work)  # type: ignore[no-any-return]


# ---------------------------------------------------------------- broken adapters


class SaverSequenceFromSaverOrder(SaverSqliteAdapter):
    """A record's sequence is its place in the saver's own ordering of the thread (``alist``
    newest first, by checkpoint id, reversed), not a counter: uuid4 ids list in no commit
    order."""

    async def thread_rows(self, saver: Any, workflow_name: str) -> list[tuple[CheckpointRecord, int]]:
        rows = await super().thread_rows(saver, workflow_name)
        rows.sort(key=lambda row: row[0].checkpoint_id)
        return [(record, place) for place, (record, _) in enumerate(rows, 1)]


class SaverListingLimited(SaverSqliteAdapter):
    """Listings read the thread with ``alist(limit=100)`` (a page, as LangGraph's own history
    views do): a workflow of more than a hundred records loses those the saver orders last."""

    async def thread_rows(self, saver: Any, workflow_name: str) -> list[tuple[CheckpointRecord, int]]:
        rows = []
        async for item in saver.alist(saver_config(workflow_name, RECORDS_NS), limit=100):
            values = item.checkpoint["channel_values"]
            if not values.get("deleted"):
                rows.append(record_of_values(item.checkpoint["id"], values))
        rows.sort(key=lambda row: row[1])
        return rows


class SaverDeleteThread(SaverSqliteAdapter):
    """``delete_workflow`` is ``adelete_thread`` of the workflow's thread (what LangGraph offers
    for it): the counter goes with the records, and the workflow's next save is numbered from 1
    again."""

    async def delete_workflow(self, workflow_name: str) -> int:
        async def work(saver: Any) -> int:
            doomed = await self.top_records(saver, workflow_name)
            for record in doomed:
                await self.drop_family(saver, record.checkpoint_id)
            await saver.adelete_thread(workflow_name)
            return len(doomed)

        return await self.step(work)  # type: ignore[no-any-return]


class SaverNestedInContainerThread(SaverSqliteAdapter):
    """A nested record goes into its top-level container's thread, numbered by that thread's
    counter (one thread per workflow run): a nested record that names another workflow is not
    listed or numbered under its own name."""

    async def put_record(self, saver: Any, record: CheckpointRecord) -> None:
        thread = record.workflow_name
        if record.root_id is not None:
            root = await self.find(saver, record.root_id)
            thread = root[0].workflow_name if root is not None else thread
        sequence = await self.next_sequence(saver, thread)
        await self.put_values(saver, thread, RECORDS_NS, record.checkpoint_id, values_of(record, sequence))
        await self.put_values(
            saver, INDEX_THREAD, RECORDS_NS, record.checkpoint_id, {"workflow": thread, "deleted": False}
        )


class SaverDeletedMarkerBlocksResave(SaverSqliteAdapter):
    """The duplicate check asks ``aget_tuple`` whether the id is there and compares with what it
    finds, deleted marker or not: a checkpoint deleted and saved again is refused as a conflict."""

    async def stored_digest(self, saver: Any, checkpoint_id: str) -> str | None:
        where = await self.get_values(saver, INDEX_THREAD, RECORDS_NS, checkpoint_id)
        if where is None:
            return None
        values = await self.get_values(saver, where["workflow"], RECORDS_NS, checkpoint_id)
        if values is None:
            return None
        return str(values.get("digest", ""))


class SaverLatestFromGetTuple(SaverSqliteAdapter):
    """The head's search starts at ``aget_tuple`` of the thread without an id (the saver's
    newest, by checkpoint id) instead of the highest sequence."""

    async def top_records(self, saver: Any, workflow_name: str) -> list[CheckpointRecord]:
        rows = await super().top_records(saver, workflow_name)
        newest = await saver.aget_tuple(saver_config(workflow_name, RECORDS_NS))
        if newest is not None:
            rows.sort(key=lambda r: r.checkpoint_id == newest.checkpoint["id"])
        return rows


# ====================================================================== the batch


def durable_target(backend_class: type[Any], environment: str, where: str) -> Callable[[], StorageTarget]:
    """A store per handle the factory makes, named by ``environment`` for ``reopen`` and for
    the other process (``process_opener``)."""

    def target() -> StorageTarget:
        def factory() -> TableStorage:
            backend = backend_class()
            os.environ[environment] = getattr(backend, where)
            return TableStorage(backend)

        def reopen() -> TableStorage:
            return TableStorage(backend_class(os.environ[environment]))

        async def cleanup() -> None:
            _remove_bitcask_dirs()
            _remove_sqlite_files()

        return StorageTarget(
            backend_class.__name__,
            factory,
            reopen=reopen,
            process_opener=f"{__name__}:open_{backend_class.__name__}",
            cleanup=cleanup,
        )

    return target


def bitcask_target(backend_class: type[BitcaskBackend]) -> Callable[[], StorageTarget]:
    return durable_target(backend_class, ENVIRONMENT, "directory")


def aiosqlite_target(backend_class: type[AioSqliteBackend]) -> Callable[[], StorageTarget]:
    return durable_target(backend_class, SQLITE_ENVIRONMENT, "path")


def saver_target(backend_class: type[SaverSqliteAdapter]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        async def cleanup() -> None:
            _remove_saver_files()

        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()), cleanup=cleanup)

    return target


def sidecar_target(backend_class: type[SidecarBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


HONEST_BITCASK = BitcaskBackend
BROKEN_BITCASK: list[type[BitcaskBackend]] = [
    BitcaskFirstEntryWins,
    BitcaskDeletesNotReplayed,
    BitcaskCounterFromLiveRecords,
    BitcaskMergeDropsTombstones,
    BitcaskMergeDropsCounters,
    BitcaskMergeOutsideLock,
    BitcaskKeydirOnlyAtOpen,
]
BROKEN_AIOSQLITE: list[type[AioSqliteBackend]] = [
    AioSqliteDeferredWrites,
    AioSqliteFenceReadApart,
    AioSqliteFamilyAutocommit,
    AioSqliteSequenceFromRowid,
    AioSqliteSequenceFromCount,
    AioSqliteCascadeAssumed,
    AioSqlitePruneCountsRows,
]
BROKEN_SAVER: list[type[SaverSqliteAdapter]] = [
    SaverSequenceFromSaverOrder,
    SaverListingLimited,
    SaverDeleteThread,
    SaverNestedInContainerThread,
    SaverDeletedMarkerBlocksResave,
    SaverLatestFromGetTuple,
]
BROKEN_SIDECAR: list[type[SidecarBackend]] = [
    SidecarCancelLeavesReply,
    SidecarLockBeforeReply,
    SidecarErrorsAsNone,
    SidecarOwnChild,
    SidecarRawBodyBytearray,
    SidecarIdsAsTuples,
]

for _cls in [HONEST_BITCASK, *BROKEN_BITCASK, BitcaskTornTailRefusesFile]:

    def _opener(cls: type[BitcaskBackend] = _cls) -> TableStorage:
        return TableStorage(cls(os.environ[ENVIRONMENT]))

    globals()[f"open_{_cls.__name__}"] = _opener

for _sql in [AioSqliteBackend, *BROKEN_AIOSQLITE]:

    def _sql_opener(cls: type[AioSqliteBackend] = _sql) -> TableStorage:
        return TableStorage(cls(os.environ[SQLITE_ENVIRONMENT]))

    globals()[f"open_{_sql.__name__}"] = _sql_opener

ENTRIES: list[Entry] = (
    [(c.__name__, bitcask_target(c), _doc(c)) for c in BROKEN_BITCASK]
    + [(c.__name__, sidecar_target(c), _doc(c)) for c in BROKEN_SIDECAR]
    + [(c.__name__, aiosqlite_target(c), _doc(c)) for c in BROKEN_AIOSQLITE]
    + [(c.__name__, saver_target(c), _doc(c)) for c in BROKEN_SAVER]
)
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = [
    (
        "BitcaskTornTailRefusesFile",
        bitcask_target(BitcaskTornTailRefusesFile),
        _doc(BitcaskTornTailRefusesFile)
        + " Not a violation as built: a write appends its entries with one write() of a regular file,"
        " which a process's death does not tear, so no acknowledged save is ever followed by a torn"
        " entry; only a power loss (which ``durable`` does not promise against) could leave one.",
    ),
]
"""Written as broken, judged not to break the contract as built; each must pass the whole kit."""

HONEST: list[Entry] = [
    ("BitcaskBackend", bitcask_target(BitcaskBackend), _doc(BitcaskBackend)),
    ("SidecarBackend", sidecar_target(SidecarBackend), _doc(SidecarBackend)),
    ("AioSqliteBackend", aiosqlite_target(AioSqliteBackend), _doc(AioSqliteBackend)),
    ("SaverSqliteAdapter", saver_target(SaverSqliteAdapter), _doc(SaverSqliteAdapter)),
]
"""Honest storages: one per style; each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
