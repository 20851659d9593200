"""A tenth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/registry.md, docs/integrity.md, docs/conformance.md's prose, examples/ and
the public author API could ship. Four styles:

* ``ShardRouter``: workflows placed on ``SHARDS`` sub-stores (``Tables``, the author's own) by a
  CRC-32 of the workflow name. A save's family goes to its checkpoint's shard; each workflow's
  sequence counter lives on its home shard; a directory (id -> shard) keeps ids global across
  shards; walks and nested reads cross shards through it; listings merge every shard's rows by
  sequence. One router lock makes each primitive one step;
* ``ClientBackend``: a client of a small server. An asyncio TCP server on 127.0.0.1 (port 0, a
  thread of its own) holds the tables and speaks JSON lines, one request and one answer a line,
  each carrying the client's id and a request id (arguments and answers pickled in base64). The
  server answers reads at once and writes on a task of their own (so answers can overtake each
  other), keeps every answer by (client, request id) and replays it for a request sent again, and
  drops the connection instead of answering one request in ``LOSE_EVERY`` of each client's
  (never a request sent again): a lost answer of a request that was applied. The client matches
  answers by request id, and resends a request whose answer was lost under the same id on a new
  connection;
* ``CowBackend``: a copy-on-write store. The whole state is one root (``Tables``) never changed
  once published; a write copies the root it read, applies itself to the copy, and publishes it
  with a compare-and-swap on the store's cell, starting again from the new root when another
  writer published first; a read answers from the root it found;
* ``TierBackend``: a tiered store. Records live in a hot tier or a cold one (``TierMap``); after
  a save a background flusher task demotes every workflow's top-level records but the newest
  ``HOT_KEEP`` (with what is nested in them) to the cold tier, in one step, keeping each record's
  sequence.

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_ten.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import pickle
import random
import threading
import uuid
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self

from conformance import StorageTarget
from storages import StorageUnavailableError
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

from .blind_batch_nine import Tables, TableStorage, stored

Entry = tuple[str, Callable[[], StorageTarget], str]
Row = tuple[int, CheckpointRecord]

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


# ====================================================================== a sharded router

SHARDS = 4


@dataclass
class Cluster:
    """The store: ``SHARDS`` sub-stores, the id directory, and the router's lock."""

    shards: list[Tables] = field(default_factory=lambda: [Tables() for _ in range(SHARDS)])
    directory: dict[CheckpointID, int] = field(default_factory=dict)
    """id -> the shard holding it (entries of removed ids are stale: the shard decides)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class ShardRouter(Backend):
    """Workflows placed on four sub-stores by a CRC-32 of the name; a save's family on its
    checkpoint's shard, each workflow's counter on its home shard, a directory keeping ids
    global; walks and nested reads cross shards, listings merge every shard by sequence."""

    capabilities = TABLE_CAPABILITIES

    def __init__(self, cluster: Cluster | None = None) -> None:
        self.cluster = cluster if cluster is not None else Cluster()

    def describe(self) -> str:
        return f"shards://{len(self.cluster.shards)}"

    def new_handle(self) -> Self:
        return type(self)(self.cluster)

    # ------------------------------------------------------------ placement

    def place(self, workflow_name: str) -> int:
        return zlib.crc32(workflow_name.encode("utf-8", "surrogatepass")) % len(self.cluster.shards)

    def home(self, workflow_name: str) -> Tables:
        return self.cluster.shards[self.place(workflow_name)]

    def same_name(self, stored_name: str, asked: str) -> bool:
        return stored_name == asked

    def find(self, checkpoint_id: CheckpointID) -> tuple[Tables, Row] | None:
        index = self.cluster.directory.get(checkpoint_id)
        if index is None:
            return None
        shard = self.cluster.shards[index]
        found = shard.records.get(checkpoint_id)
        return None if found is None else (shard, found)

    def taken(self, checkpoint_id: CheckpointID) -> CheckpointRecord | None:
        found = self.find(checkpoint_id)
        return None if found is None else found[1][1]

    def next_sequence(self, record: CheckpointRecord, target: Tables) -> int:
        counters = self.home(record.workflow_name).sequences
        sequence = counters.get(record.workflow_name, 0) + 1
        counters[record.workflow_name] = sequence
        return sequence

    def target_of(self, record: CheckpointRecord, top: CheckpointRecord) -> int:
        return self.place(top.workflow_name)

    def write(self, records: Sequence[CheckpointRecord]) -> None:
        top = records[0]
        for record in records:
            index = self.target_of(record, top)
            shard = self.cluster.shards[index]
            shard.records[record.checkpoint_id] = (self.next_sequence(record, shard), record)
            if record.container_id is not None:
                shard.children.setdefault(record.container_id, []).append(record.checkpoint_id)
            self.cluster.directory[record.checkpoint_id] = index

    def check(self, records: Sequence[CheckpointRecord]) -> InsertResult | None:
        """What a save of ``records`` meets: the verdict on a stored id, or None to write."""
        top = records[0]
        stored = self.taken(top.checkpoint_id)
        if stored is not None:
            return InsertResult.of_stored_digest(stored.digest, top)
        for record in records[1:]:
            if self.taken(record.checkpoint_id) is not None:
                raise nested_id_conflict(records, record.checkpoint_id)
        return None

    def insert_held(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        verdict = self.check(records)
        if verdict is not None:
            return verdict
        self.write(records)
        return InsertResult.INSERTED

    def pairs(
        self, shards: Sequence[Tables], workflow_name: str, signature: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        rows = [
            row
            for shard in shards
            for row in shard.records.values()
            if self.same_name(row[1].workflow_name, workflow_name)
            and (include_nested or row[1].container_id is None)
            and signature in (None, row[1].graph_signature_hash)
        ]
        rows.sort(key=lambda row: row[0])
        return [record for _, record in rows]

    def rows(self, workflow_name: str, signature: str | None, include_nested: bool) -> list[CheckpointRecord]:
        if not include_nested:
            return self.pairs([self.home(workflow_name)], workflow_name, signature, False)
        return self.pairs(self.cluster.shards, workflow_name, signature, True)

    def family_shard(self, checkpoint_id: CheckpointID) -> Tables | None:
        found = self.find(checkpoint_id)
        return None if found is None else found[0]

    # ------------------------------------------------------------ primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self.cluster.lock:
            return self.insert_held(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        top = records[0]
        with self.cluster.lock:
            head = latest_record(self.rows(top.workflow_name, None, False))
            latest = None if head is None else head.checkpoint_id
            if latest != expected_latest_id and self.taken(top.checkpoint_id) is None:
                return FenceCheck(latest, None)
            return FenceCheck.after_insert(latest, self.insert_held(records))

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        with self.cluster.lock:
            record = self.taken(checkpoint_id)
        return None if record is None else stored(record)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        with self.cluster.lock:
            rows = self.rows(workflow_name, None, False)
        head = latest_record(rows, graph_signature_hash)
        if head is None:
            return None
        return replace(stored(head), rivals=[stored(rival) for rival in rivals_of(rows, head)])

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        with self.cluster.lock:
            return [stored(r) for r in self.rows(workflow_name, graph_signature_hash, include_nested)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        with self.cluster.lock:
            return [r.checkpoint_id for r in self.rows(workflow_name, graph_signature_hash, include_nested)]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.cluster.lock:
            shard = self.family_shard(checkpoint_id)
            return False if shard is None else shard.remove(checkpoint_id)

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        bodies: dict[CheckpointID, bytes] = {}
        with self.cluster.lock:
            for checkpoint_id in checkpoint_ids:
                shard = self.family_shard(checkpoint_id)
                if shard is not None:
                    bodies.update(shard.nested_bodies([checkpoint_id]))
        return bodies

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        with self.cluster.lock:
            shard = self.family_shard(checkpoint_id)
            return None if shard is None else shard.nested_ids(checkpoint_id)

    def walk_held(self, checkpoint_id: CheckpointID, max_depth: int, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        start = self.find(checkpoint_id)
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            found = self.walk_step(current, start)
            if found is None:
                if current != checkpoint_id and any(s.is_tombstone(current) for s in self.cluster.shards):
                    tombstones.add(current)
                break
            shard, (_, record) = found
            links[current] = record.previous_checkpoint_id
            if with_bodies:
                bodies[current] = record.body
                bodies.update(shard.nested_bodies([current]))
            current = record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))

    def walk_step(
        self, checkpoint_id: CheckpointID, start: tuple[Tables, Row] | None
    ) -> tuple[Tables, Row] | None:
        return self.find(checkpoint_id)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        with self.cluster.lock:
            return self.walk_held(checkpoint_id, max_depth, with_bodies)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.cluster.lock:
            return self.home(workflow_name).prune(workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        with self.cluster.lock:
            return self.home(workflow_name).delete_workflow(workflow_name)

    async def workflow_names(self) -> list[str]:
        with self.cluster.lock:
            return sorted({name for shard in self.cluster.shards for name in shard.workflow_names()})

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.cluster.lock:
            shard = self.family_shard(checkpoint_id)
            return False if shard is None else shard.overwrite_body(checkpoint_id, body, digest)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        with self.cluster.lock:
            shard = self.family_shard(checkpoint_id)
            return None if shard is None else shard.info(checkpoint_id)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        with self.cluster.lock:
            return [info for shard in self.cluster.shards for info in shard.records_of(workflow_name)]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        with self.cluster.lock:
            if workflow_name is not None:
                return self.home(workflow_name).tombstones_of(workflow_name)
            return [each for shard in self.cluster.shards for each in shard.tombstones_of(None)]


class ShardFoldedNames(ShardRouter):
    """Names are placed and matched in their case-folded form (so "Orders" and "orders" reach
    one shard, as a case-insensitive collation of the shard key would)."""

    def place(self, workflow_name: str) -> int:
        return super().place(workflow_name.casefold())

    def same_name(self, stored_name: str, asked: str) -> bool:
        return stored_name.casefold() == asked.casefold()


class ShardSaltPerHandle(ShardRouter):
    """Placement is Python's ``hash()`` of (salt, name), the salt drawn per handle as
    ``PYTHONHASHSEED`` is per process: a new handle places a workflow on another shard."""

    def __init__(self, cluster: Cluster | None = None) -> None:
        super().__init__(cluster)
        self.salt = random.getrandbits(32)

    def place(self, workflow_name: str) -> int:
        return hash((self.salt, workflow_name)) % len(self.cluster.shards)


class ShardCountersPerShard(ShardRouter):
    """Each record takes its sequence from the counter of the shard it lands on: a nested record
    stored with its container on another shard is numbered by that shard's counter for its name."""

    def next_sequence(self, record: CheckpointRecord, target: Tables) -> int:
        sequence = target.sequences.get(record.workflow_name, 0) + 1
        target.sequences[record.workflow_name] = sequence
        return sequence


class ShardMergeConcatenates(ShardRouter):
    """A listing over every shard is each shard's rows, in sequence, one shard after another
    (the home shard first): no merge by sequence across shards."""

    def rows(self, workflow_name: str, signature: str | None, include_nested: bool) -> list[CheckpointRecord]:
        if not include_nested:
            return super().rows(workflow_name, signature, include_nested)
        home = self.home(workflow_name)
        order = [home] + [shard for shard in self.cluster.shards if shard is not home]
        return [record for shard in order for record in self.pairs([shard], workflow_name, signature, True)]


class ShardDirectoryOutlivesDeletes(ShardRouter):
    """A save asks the directory whether its id is taken (one lookup instead of one per shard),
    and removes never clear the directory: an id deleted once stays taken, with its old digest."""

    def __init__(self, cluster: Cluster | None = None) -> None:
        super().__init__(cluster)
        self.digests: dict[CheckpointID, str] = self.cluster.__dict__.setdefault("digests", {})

    def write(self, records: Sequence[CheckpointRecord]) -> None:
        super().write(records)
        for record in records:
            self.digests[record.checkpoint_id] = record.digest

    def check(self, records: Sequence[CheckpointRecord]) -> InsertResult | None:
        top = records[0]
        if top.checkpoint_id in self.digests:
            return InsertResult.of_stored_digest(self.digests[top.checkpoint_id], top)
        for record in records[1:]:
            if record.checkpoint_id in self.digests:
                raise nested_id_conflict(records, record.checkpoint_id)
        return None


class ShardWalkStaysOnShard(ShardRouter):
    """A walk runs on the shard holding its start (one recursive query on one database): a
    previous id held by another shard reads as missing."""

    def walk_step(
        self, checkpoint_id: CheckpointID, start: tuple[Tables, Row] | None
    ) -> tuple[Tables, Row] | None:
        if start is None:
            return None
        found = start[0].records.get(checkpoint_id)
        return None if found is None else (start[0], found)


class ShardNamesFromCounters(ShardRouter):
    """``workflow_names`` reads every shard's counter table (one small table per shard instead
    of a scan of the records): every name that was ever numbered."""

    async def workflow_names(self) -> list[str]:
        with self.cluster.lock:
            return sorted({name for shard in self.cluster.shards for name in shard.sequences})


class ShardCheckThenWrite(ShardRouter):
    """A save checks the directory in one step and writes on the chosen shard in the next (a
    round trip to the shard in between), as two requests to two servers would."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self.cluster.lock:
            verdict = self.check(records)
        if verdict is not None:
            return verdict
        await asyncio.sleep(0)  # the request to the shard
        with self.cluster.lock:
            self.write(records)
        return InsertResult.INSERTED


class ShardRecordsFromHome(ShardRouter):
    """``records(workflow)`` reads the workflow's home shard (where its checkpoints are): the
    nested records of that name stored with containers on other shards are left out."""

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        if workflow_name is None:
            return await super().records(None)
        with self.cluster.lock:
            return self.home(workflow_name).records_of(workflow_name)


class ShardChildrenAtRecordHome(ShardRouter):
    """Nested reads (``nested_ids``, ``nested_bodies``) go to the home shard of the record's own
    workflow name rather than the shard the directory names: a sub-workflow's own embedded
    records, stored with the top-level checkpoint's family, are not found."""

    def family_shard(self, checkpoint_id: CheckpointID) -> Tables | None:
        found = self.find(checkpoint_id)
        return None if found is None else self.home(found[1][1].workflow_name)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.cluster.lock:
            found = self.find(checkpoint_id)
            return False if found is None else found[0].remove(checkpoint_id)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.cluster.lock:
            found = self.find(checkpoint_id)
            return False if found is None else found[0].overwrite_body(checkpoint_id, body, digest)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        with self.cluster.lock:
            found = self.find(checkpoint_id)
            return None if found is None else found[0].info(checkpoint_id)


def shard_target(backend_class: type[ShardRouter]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== a client and its server

LOSE_EVERY = 17
"""The server drops the connection instead of sending one first answer in this many of each
client's (after applying); an answer sent again is never lost on purpose."""

LINE_LIMIT = 1 << 30
"""A request or an answer is one line, whatever the body's size."""

WRITES = frozenset({"insert", "insert_fenced", "remove", "prune", "delete_workflow", "overwrite_body"})
EMPTY_READS: dict[str, Any] = {
    "load": None,
    "latest": None,
    "list_bodies": [],
    "list_ids": [],
    "nested_bodies": {},
    "nested_ids": None,
    "workflow_names": [],
    "info": None,
    "records_of": [],
    "tombstones_of": [],
}


def packed(value: Any) -> str:
    return base64.b64encode(pickle.dumps(value)).decode("ascii")


def unpacked(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


class Server:
    """Holds every store's tables (by store id) and answers JSON lines on 127.0.0.1, from a
    thread of its own. Reads are answered at once, writes on a task of their own; every answer is
    kept by (client, request id) and replayed for the same request sent again."""

    KEEP_ANSWERS = 20_000

    def __init__(self) -> None:
        self.stores: dict[str, Tables] = {}
        self.answers: dict[tuple[str, int], bytes] = {}
        self.counts: dict[str, int] = {}
        """client -> first answers made to it."""
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self.run, name="blind10-server", daemon=True)
        self.thread.start()
        self.started.wait()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self.serve, "127.0.0.1", 0, limit=LINE_LIMIT)
        )
        self.port = server.sockets[0].getsockname()[1]
        self.started.set()
        self.loop.run_forever()

    async def requests(self, reader: asyncio.StreamReader) -> Any:
        """Each request line, parsed (an async generator)."""
        while True:
            line = await reader.readline()
            if not line:
                return
            yield json.loads(line)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for request in self.requests(reader):
                if request["op"] in WRITES:
                    task = asyncio.get_running_loop().create_task(self.answer_later(request, writer))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                else:
                    self.answer(request, writer)
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            writer.close()

    async def answer_later(self, request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0)  # a write is applied on its turn: later reads may be answered first
        self.answer(request, writer)

    def key(self, request: dict[str, Any]) -> tuple[str, int]:
        return (request["client"], request["rid"])

    def answer(self, request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        key = self.key(request)
        line = self.answers.get(key)
        first = line is None
        if line is None:
            line = self.apply(request)
            self.answers[key] = line
            if len(self.answers) > self.KEEP_ANSWERS:
                del self.answers[next(iter(self.answers))]
            self.counts[request["client"]] = self.counts.get(request["client"], 0) + 1
        if first and self.counts[request["client"]] % LOSE_EVERY == 0:
            writer.close()  # applied, but its answer is lost with the connection
            return
        if not writer.is_closing():
            writer.write(line)

    def apply(self, request: dict[str, Any]) -> bytes:
        tables = self.stores.setdefault(request["store"], Tables())
        answer: dict[str, Any] = {"rid": request["rid"]}
        try:
            answer["ok"] = packed(getattr(tables, request["op"])(*unpacked(request["args"])))
        except Exception as exc:  # the caller's error, raised where it waits
            answer["error"] = packed(exc)
        return json.dumps(answer).encode("ascii") + b"\n"


class SplitLinesServer(Server):
    """Reads what arrives and cuts it into lines with ``str.splitlines``."""

    async def requests(self, reader: asyncio.StreamReader) -> Any:
        pending = ""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            pending += chunk.decode("utf-8")
            *lines, pending = pending.splitlines(keepends=True) or [""]
            if pending.endswith("\n"):
                lines.append(pending)
                pending = ""
            for line in lines:
                yield json.loads(line)


class RequestIdServer(Server):
    """Keeps answers by request id."""

    def key(self, request: dict[str, Any]) -> tuple[str, int]:
        return ("", request["rid"])


SERVERS: dict[type[Server], Server] = {}
SERVERS_LOCK = threading.Lock()


def server_of(server_class: type[Server]) -> Server:
    with SERVERS_LOCK:
        if server_class not in SERVERS:
            SERVERS[server_class] = server_class()
        return SERVERS[server_class]


class ConnectionLost(Exception):
    """The connection closed before the answer came."""


class Connection:
    """One connection of a client on one loop: a reader task hands each answer to the future of
    its request id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.loop = asyncio.get_running_loop()
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.closed = False
        self.task = self.loop.create_task(self.read())

    def waiter(self, answer: dict[str, Any]) -> asyncio.Future[dict[str, Any]] | None:
        return self.pending.pop(answer["rid"], None)

    async def read(self) -> None:
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    break
                answer = json.loads(line)
                future = self.waiter(answer)
                if future is not None and not future.done():
                    future.set_result(answer)
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            self.closed = True
            # Also run when a loop closed with this task pending is collected: nothing can be
            # scheduled on that loop any more, and no one waits there.
            with contextlib.suppress(RuntimeError):
                for future in self.pending.values():
                    if not future.done():
                        future.set_exception(ConnectionLost())
                self.writer.close()
            self.pending.clear()

    def send(self, request: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        if self.closed:
            raise ConnectionLost()
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.pending[request["rid"]] = future
        self.writer.write(json.dumps(request, ensure_ascii=False).encode("utf-8") + b"\n")
        return future

    async def close(self) -> None:
        self.writer.close()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
            await self.task
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


class OrderedConnection(Connection):
    """Hands each answer to the oldest request waiting."""

    def waiter(self, answer: dict[str, Any]) -> asyncio.Future[dict[str, Any]] | None:
        if not self.pending:
            return None
        return self.pending.pop(next(iter(self.pending)))


ATTEMPTS = 64


class ClientBackend(Backend):
    """A client of a JSON-lines server holding the tables: answers matched by request id, a
    request whose answer was lost sent again under the same id (the server replays what it did),
    a connection per event loop, and a cancelled call's late answer dropped by id."""

    capabilities = TABLE_CAPABILITIES
    server_class: type[Server] = Server
    connection_class: type[Connection] = Connection

    def __init__(self, store: str | None = None) -> None:
        self.server = server_of(self.server_class)
        self.store = store if store is not None else uuid.uuid4().hex
        self.client = uuid.uuid4().hex
        self.rids = itertools.count(1)
        self.connection: Connection | None = None
        self.closed = False

    def describe(self) -> str:
        return "jsonl://127.0.0.1"

    def new_handle(self) -> Self:
        return type(self)(self.store)

    def current(self) -> Connection | None:
        connection = self.connection
        if connection is None or connection.closed or connection.loop is not asyncio.get_running_loop():
            return None
        return connection

    async def connect(self) -> Connection:
        connection = self.current()
        if connection is not None:
            return connection
        if self.closed:
            raise StorageUnavailableError("request", "the handle was closed")
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server.port, limit=LINE_LIMIT)
        connection = self.current()  # another call may have connected meanwhile
        if connection is not None:
            writer.close()
            return connection
        self.connection = self.connection_class(reader, writer)
        self.opened()
        return self.connection

    def opened(self) -> None:
        """A new connection is in use."""

    def request(self, op: str, args: tuple[Any, ...]) -> dict[str, Any]:
        key = next((a for a in args if isinstance(a, str)), None)
        return {
            "rid": next(self.rids),
            "client": self.client,
            "store": self.store,
            "op": op,
            "key": key,
            "args": packed(args),
        }

    def resent(self, request: dict[str, Any]) -> dict[str, Any]:
        return request

    async def call(self, op: str, *args: Any) -> Any:
        request = self.request(op, args)
        for _ in range(ATTEMPTS):
            connection = await self.connect()
            future = connection.send(request)
            try:
                answer = await future
            except ConnectionLost:
                if op not in WRITES and self.reads_lost_as_empty():
                    return EMPTY_READS[op]
                # The request may have been applied: sent again under its id, the server
                # answers with what it did rather than doing it twice.
                request = self.resent(request)
                continue
            finally:
                connection.pending.pop(request["rid"], None)
            if "error" in answer:
                raise unpacked(answer["error"])
            return unpacked(answer["ok"])
        raise StorageUnavailableError(op, f"no answer after {ATTEMPTS} attempts")

    def reads_lost_as_empty(self) -> bool:
        return False

    async def close(self) -> None:
        self.closed = True
        connection, self.connection = self.connection, None
        if connection is not None and connection.loop is asyncio.get_running_loop():
            await connection.close()

    async def follow_loop(self) -> None:
        self.connection = None  # bound to a loop that is gone

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


class ClientResendsUnderNewId(ClientBackend):
    """A request whose answer was lost is sent again as a new request (a new id): a write that
    was applied is applied twice (a remove that deleted answers False the second time)."""

    def resent(self, request: dict[str, Any]) -> dict[str, Any]:
        return {**request, "rid": next(self.rids)}


class ClientAnswersInSendOrder(ClientBackend):
    """Answers are handed to requests in the order they were sent (the server answers in order,
    the author assumed): an answer that overtakes another goes to the wrong caller."""

    connection_class = OrderedConnection


class ClientConnectionKeptAcrossLoops(ClientBackend):
    """The connection is opened once and kept whatever loop a call runs on (``follow_loop`` is
    left out: a socket is a socket)."""

    def current(self) -> Connection | None:
        connection = self.connection
        return None if connection is None or connection.closed else connection

    async def follow_loop(self) -> None:
        return None


class ClientOneRequestAtATime(ClientBackend):
    """No reader task: a call takes the handle's lock, sends its request and reads the next line
    as its answer; a call cancelled while it waits leaves its answer in the stream for the next."""

    def __init__(self, store: str | None = None) -> None:
        super().__init__(store)
        self.stream: tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.AbstractEventLoop] | None = (
            None
        )
        self.turns: tuple[asyncio.Lock, asyncio.AbstractEventLoop] | None = None

    def turn(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self.turns is None or self.turns[1] is not loop:
            self.turns = (asyncio.Lock(), loop)
        return self.turns[0]

    async def call(self, op: str, *args: Any) -> Any:
        request = self.request(op, args)
        line = json.dumps(request, ensure_ascii=False).encode("utf-8") + b"\n"
        async with self.turn():
            for _ in range(ATTEMPTS):
                loop = asyncio.get_running_loop()
                if self.stream is None or self.stream[2] is not loop:
                    if self.closed:
                        raise StorageUnavailableError(op, "the handle was closed")
                    reader, writer = await asyncio.open_connection(
                        "127.0.0.1", self.server.port, limit=LINE_LIMIT
                    )
                    self.stream = (reader, writer, loop)
                reader, writer, _ = self.stream
                writer.write(line)
                answer = await reader.readline()
                if not answer:
                    writer.close()
                    self.stream = None
                    continue
                got = json.loads(answer)
                if "error" in got:
                    raise unpacked(got["error"])
                return unpacked(got["ok"])
        raise StorageUnavailableError(op, f"no answer after {ATTEMPTS} attempts")

    async def close(self) -> None:
        self.closed = True
        stream, self.stream = self.stream, None
        if stream is not None and stream[2] is asyncio.get_running_loop():
            stream[1].close()
            with contextlib.suppress(ConnectionError, OSError):
                await stream[1].wait_closed()

    async def follow_loop(self) -> None:
        self.stream = None


class ClientIdsRestartPerConnection(ClientBackend):
    """Request ids count from 1 on each connection (they only have to be unique on it): after a
    reconnect, a request carries an id the server has already answered for this client."""

    def opened(self) -> None:
        self.rids = itertools.count(1)


class ClientServerKeysAnswersByRequestId(ClientBackend):
    """The server keeps its answers by request id alone (the client id is sent but not part of
    the key): two handles' requests with the same id get one answer."""

    server_class = RequestIdServer


class ClientServerSplitsLines(ClientBackend):
    """The server reads what arrives and splits it with ``str.splitlines()`` (the client sends
    UTF-8 JSON, ``ensure_ascii=False``), which also cuts at U+2028, U+0085 and other breaks."""

    server_class = SplitLinesServer


class ClientRetriesPastCancellation(ClientBackend):
    """A wait that ends in ``CancelledError`` is treated as a lost answer (the connection's reader
    was cancelled, the author thought) and the request is sent again."""

    async def call(self, op: str, *args: Any) -> Any:
        request = self.request(op, args)
        for _ in range(ATTEMPTS):
            connection = await self.connect()
            future = connection.send(request)
            try:
                answer = await future
            except (ConnectionLost, asyncio.CancelledError):
                continue
            finally:
                connection.pending.pop(request["rid"], None)
            if "error" in answer:
                raise unpacked(answer["error"])
            return unpacked(answer["ok"])
        raise StorageUnavailableError(op, f"no answer after {ATTEMPTS} attempts")


class ClientLostReadsAnswerEmpty(ClientBackend):
    """A read whose answer was lost is not sent again: it answers empty (nothing found), as a
    cache miss would."""

    def reads_lost_as_empty(self) -> bool:
        return True


class ClientCancelDropsConnection(ClientBackend):
    """A call cancelled while it waits closes the connection, so that no late answer can reach
    anyone; the other calls in flight on it lose their answers and send again under their ids."""

    async def call(self, op: str, *args: Any) -> Any:
        try:
            return await super().call(op, *args)
        except asyncio.CancelledError:
            connection = self.connection
            if connection is not None and connection.loop is asyncio.get_running_loop():
                connection.writer.close()
            raise


def client_target(backend_class: type[ClientBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        server_of(backend_class.server_class)  # started before the kit counts threads
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== a copy-on-write store


@dataclass
class Cell:
    """The store: the published root, swapped only by compare-and-swap."""

    root: Tables
    lock: threading.Lock = field(default_factory=threading.Lock)

    def swap(self, expected: Tables, new: Tables) -> bool:
        with self.lock:
            if self.root is not expected:
                return False
            self.root = new
            return True


class CowBackend(Backend):
    """The state is one root never changed once published: a write copies the root it read,
    applies itself to the copy and publishes it with a compare-and-swap, starting again from
    the new root if another writer published first; a read answers from the root it found."""

    capabilities = TABLE_CAPABILITIES
    tables_class: type[Tables] = Tables

    def __init__(self, cell: Cell | None = None) -> None:
        self.cell = cell if cell is not None else Cell(self.tables_class())

    def describe(self) -> str:
        return "cow://"

    def new_handle(self) -> Self:
        return type(self)(self.cell)

    def root(self) -> Tables:
        return self.cell.root

    def publish(self, base: Tables, new: Tables) -> bool:
        return self.cell.swap(base, new)

    def published(self, new: Tables) -> None:
        """``new`` is the store's root now."""

    async def write(self, op: str, *args: Any) -> Any:
        while True:
            base = self.cell.root
            new = base.copy()
            result = self.apply(new, op, args)
            await asyncio.sleep(0)  # building the root is work: other writers may publish meanwhile
            if self.publish(base, new):
                self.published(new)
                return result

    def apply(self, new: Tables, op: str, args: tuple[Any, ...]) -> Any:
        return getattr(new, op)(*args)

    def read(self, op: str, *args: Any) -> Any:
        return getattr(self.root(), op)(*args)

    # ------------------------------------------------------------ primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result: InsertResult = await self.write("insert", list(records))
        return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        result: FenceCheck | None = await self.write("insert_fenced", list(records), expected_latest_id)
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
        result: bool = await self.write("remove", checkpoint_id)
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
        result: int = await self.write("prune", workflow_name, keep_last)
        return result

    async def delete_workflow(self, workflow_name: str) -> int:
        result: int = await self.write("delete_workflow", workflow_name)
        return result

    async def workflow_names(self) -> list[str]:
        result: list[str] = self.read("workflow_names")
        return result

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        result: bool = await self.write("overwrite_body", checkpoint_id, body, digest)
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


class CowReadsOwnLastRoot(CowBackend):
    """After a write, the handle reads from the root it published (its own writes are there,
    and it saves a look at the cell) until it writes again."""

    def __init__(self, cell: Cell | None = None) -> None:
        super().__init__(cell)
        self.mine: Tables | None = None

    def published(self, new: Tables) -> None:
        self.mine = new

    def root(self) -> Tables:
        return self.mine if self.mine is not None else self.cell.root


class CowBlindPublish(CowBackend):
    """The new root is published by assignment (a reference store is atomic, the author knew),
    without comparing it with the root the write started from."""

    def publish(self, base: Tables, new: Tables) -> bool:
        self.cell.root = new
        return True


class CowRetryKeepsFirstAnswer(CowBackend):
    """A write that lost the swap is applied again to the new root, but answers what its first
    attempt decided (the decision was made; only the publish failed)."""

    async def write(self, op: str, *args: Any) -> Any:
        first: list[Any] = []
        while True:
            base = self.cell.root
            new = base.copy()
            result = self.apply(new, op, args)
            if not first:
                first.append(result)
            await asyncio.sleep(0)
            if self.publish(base, new):
                return first[0]


class CowLatestAcrossTwoRoots(CowBackend):
    """``latest`` chooses the head on the root it found, then reads the bodies from the root
    published by then (the bodies are a second read): a head deleted between the two reads
    leaves the workflow without a latest."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self.root().top_rows(workflow_name, None)
        head = latest_record(rows, graph_signature_hash)
        if head is None:
            return None
        await asyncio.sleep(0)  # the bodies' read
        now = self.root()
        found = now.records.get(head.checkpoint_id)
        if found is None:
            return None
        rivals = [
            now.records[r.checkpoint_id][1] for r in rivals_of(rows, head) if r.checkpoint_id in now.records
        ]
        return replace(stored(found[1]), rivals=[stored(rival) for rival in rivals])


class SharedListsTables(Tables):
    """Tables whose copy shares the lists and maps inside its maps (records are immutable, so
    sharing is cheap)."""

    def copy(self) -> Self:
        return type(self)(
            dict(self.records), dict(self.sequences), dict(self.children), dict(self.tombstones)
        )


class CowSharesInnerLists(CowBackend):
    """A new root shares the children lists and tombstone maps of the root it was copied from
    (structural sharing): what a write appends to them is seen by every root, including the
    ones of attempts that lost the swap."""

    tables_class = SharedListsTables


class ReplacingTombstonesTables(Tables):
    """Tables whose prune writes the workflow's tombstones anew."""

    def prune(self, workflow_name: str, keep_last: int) -> int:
        doomed = pruned_records(self.top_rows(workflow_name, None), keep_last)
        marks: dict[CheckpointID, None] = {}
        for record in doomed:
            for gone in self.drop(record.checkpoint_id):
                marks[gone] = None
        self.tombstones[workflow_name] = marks
        return len(doomed)


class CowPruneReplacesTombstones(CowBackend):
    """A prune's new root holds the tombstones of that prune for the workflow (the set is built
    fresh for the new root): the tombstones of earlier prunes are gone."""

    tables_class = ReplacingTombstonesTables


class CowCountersPerHandle(CowBackend):
    """Each handle keeps the sequence counters it handed out and numbers its next saves from
    them (a cache that spares reading the root's counters)."""

    def __init__(self, cell: Cell | None = None) -> None:
        super().__init__(cell)
        self.counters: dict[str, int] = {}

    def apply(self, new: Tables, op: str, args: tuple[Any, ...]) -> Any:
        if op in ("insert", "insert_fenced"):
            new.sequences.update(self.counters)
        result = super().apply(new, op, args)
        if op in ("insert", "insert_fenced"):
            for record in args[0]:
                self.counters[record.workflow_name] = new.sequences.get(record.workflow_name, 0)
        return result


class CowFenceOnFirstRoot(CowBackend):
    """A fenced save checks the fence on the root it first read; when its swap fails it applies
    the save again to the new root as a plain insert (the fence was passed)."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        base = self.cell.root
        new = base.copy()
        result: FenceCheck | None = new.insert_fenced(list(records), expected_latest_id)
        await asyncio.sleep(0)
        if self.publish(base, new):
            return result
        if result is not None and result.existing is None:
            return result
        latest = new.head_id(records[0].workflow_name)
        inserted: InsertResult = await self.write("insert", list(records))
        return FenceCheck.after_insert(latest, inserted)


class CowRawWriteInPlace(CowBackend):
    """A raw write replaces the body in the published root in place (a raw write is no commit,
    so it publishes no new root)."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return self.cell.root.overwrite_body(checkpoint_id, body, digest)


class CowNewHandleCopiesCell(CowBackend):
    """``new_handle`` gives the new handle a cell of its own holding the current root (roots are
    immutable, so sharing the root shares the store, the author thought)."""

    def new_handle(self) -> Self:
        return type(self)(Cell(self.cell.root))


def cow_target(backend_class: type[CowBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== a tiered store

HOT_KEEP = 3
"""Top-level records of a workflow kept hot; older ones (with their nested records) go cold."""


class TierMap(MutableMapping[CheckpointID, Row]):
    """Records in two tiers: a record is in one of them; a new one goes hot, a changed one stays
    where it is."""

    def __init__(self) -> None:
        self.hot: dict[CheckpointID, Row] = {}
        self.cold: dict[CheckpointID, Row] = {}

    def __getitem__(self, key: CheckpointID) -> Row:
        found = self.hot.get(key)
        return found if found is not None else self.cold[key]

    def __setitem__(self, key: CheckpointID, value: Row) -> None:
        if key in self.cold:
            self.cold[key] = value
        else:
            self.hot[key] = value

    def __delitem__(self, key: CheckpointID) -> None:
        if key in self.hot:
            del self.hot[key]
        else:
            del self.cold[key]

    def __iter__(self) -> Iterator[CheckpointID]:
        yield from list(self.hot)
        yield from list(self.cold)

    def __len__(self) -> int:
        return len(self.hot) + len(self.cold)


@dataclass
class TierStore:
    tiers: TierMap = field(default_factory=TierMap)
    tables: Tables = field(init=False)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.tables = Tables(records=self.tiers)


class TierBackend(Backend):
    """Records in a hot and a cold tier (one map each); after a save, a background flusher task
    demotes every workflow's top-level records but the newest ``HOT_KEEP``, with their nested
    records, to the cold tier in one step, keeping each record's sequence. Reads see both tiers;
    ``close`` waits for the flusher."""

    capabilities = TABLE_CAPABILITIES

    def __init__(self, store: TierStore | None = None) -> None:
        self.store = store if store is not None else TierStore()
        self.flusher: asyncio.Task[None] | None = None

    def describe(self) -> str:
        return "tiers://"

    def new_handle(self) -> Self:
        return type(self)(self.store)

    def tables(self) -> Tables:
        return self.store.tables

    # ------------------------------------------------------------ the flusher

    def wake_flusher(self) -> None:
        loop = asyncio.get_running_loop()
        flusher = self.flusher
        if flusher is not None and not flusher.done() and flusher.get_loop() is loop:
            return
        self.flusher = loop.create_task(self.flush())

    async def flush(self) -> None:
        await asyncio.sleep(0)  # off the save's path
        self.demote()

    def demoted(self) -> list[CheckpointID]:
        """Every id to demote now, families whole, oldest first (lock held)."""
        tiers = self.store.tiers
        tables = self.store.tables
        by_workflow: dict[str, list[Row]] = {}
        for row in tiers.hot.values():
            if row[1].container_id is None:
                by_workflow.setdefault(row[1].workflow_name, []).append(row)
        ids: list[CheckpointID] = []
        for rows in by_workflow.values():
            if len(rows) <= HOT_KEEP:
                continue
            rows.sort(key=lambda row: row[0])
            for _, record in rows[:-HOT_KEEP]:
                ids += tables.family(record.checkpoint_id)
        return ids

    def move(self, ids: Sequence[CheckpointID]) -> None:
        tiers = self.store.tiers
        for each in ids:
            row = tiers.hot.pop(each, None)
            if row is not None:
                tiers.cold[each] = self.cold_row(row)

    def cold_row(self, row: Row) -> Row:
        return row

    def demote(self) -> None:
        with self.store.lock:
            self.move(self.demoted())

    async def close(self) -> None:
        flusher, self.flusher = self.flusher, None
        if flusher is not None and not flusher.done() and flusher.get_loop() is asyncio.get_running_loop():
            await flusher

    async def follow_loop(self) -> None:
        self.flusher = None

    def do(self, op: str, *args: Any) -> Any:
        with self.store.lock:
            return getattr(self.store.tables, op)(*args)

    # ------------------------------------------------------------ primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result: InsertResult = self.do("insert", list(records))
        if result is InsertResult.INSERTED:
            self.saved(records)
        return result

    def saved(self, records: Sequence[CheckpointRecord]) -> None:
        self.wake_flusher()

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        result: FenceCheck | None = self.do("insert_fenced", list(records), expected_latest_id)
        if result is None:
            self.saved(records)
        return result

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        result: StoredBody | None = self.do("load", checkpoint_id)
        return result

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        result: StoredBody | None = self.do("latest", workflow_name, graph_signature_hash)
        return result

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        result: list[StoredBody] = self.do("list_bodies", workflow_name, graph_signature_hash, include_nested)
        return result

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        result: list[CheckpointID] = self.do("list_ids", workflow_name, graph_signature_hash, include_nested)
        return result

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        result: bool = self.do("remove", checkpoint_id)
        return result

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        result: dict[CheckpointID, bytes] = self.do("nested_bodies", list(checkpoint_ids))
        return result

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        result: list[CheckpointID] | None = self.do("nested_ids", checkpoint_id)
        return result

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        result: WalkRecords = self.do("walk", checkpoint_id, max_depth, with_bodies)
        return result

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        result: int = self.do("prune", workflow_name, keep_last)
        return result

    async def delete_workflow(self, workflow_name: str) -> int:
        result: int = self.do("delete_workflow", workflow_name)
        return result

    async def workflow_names(self) -> list[str]:
        result: list[str] = self.do("workflow_names")
        return result

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        result: bool = self.do("overwrite_body", checkpoint_id, body, digest)
        return result

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        result: CheckpointInfo | None = self.do("info", checkpoint_id)
        return result

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        result: list[CheckpointInfo] = self.do("records_of", workflow_name)
        return result

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        result: list[CheckpointID] = self.do("tombstones_of", workflow_name)
        return result

    def hot_tables(self) -> Tables:
        """A view of the hot tier alone, sharing the store's other maps (lock held)."""
        tables = self.store.tables
        return Tables(self.store.tiers.hot, tables.sequences, tables.children, tables.tombstones)


class TierDemotesInTwoSteps(TierBackend):
    """A demotion takes the records out of the hot tier in one step and writes them to the cold
    one in the next (the cold write is slow; the lock is not held across it): a read between the
    two does not find them."""

    async def flush(self) -> None:
        await asyncio.sleep(0)
        with self.store.lock:
            ids = self.demoted()
            rows = {each: self.store.tiers.hot.pop(each) for each in ids if each in self.store.tiers.hot}
        await asyncio.sleep(0)  # the write to the cold tier
        with self.store.lock:
            self.store.tiers.cold.update(rows)


class TierFlushSortsById(TierBackend):
    """The cold tier numbers what it receives (its own sequence per workflow, after the highest
    it holds) and each flush sends its batch sorted by id, as a key-ordered bulk load."""

    def move(self, ids: Sequence[CheckpointID]) -> None:
        tiers = self.store.tiers
        for each in sorted(ids):
            row = tiers.hot.pop(each, None)
            if row is None:
                continue
            name = row[1].workflow_name
            highest = max((s for s, r in tiers.cold.values() if r.workflow_name == name), default=0)
            tiers.cold[each] = (highest + 1, row[1])


class TierColdDropsSignature(TierBackend):
    """The cold tier's rows have no graph-signature column: demoted records carry the empty
    signature (their bodies still hold theirs)."""

    def cold_row(self, row: Row) -> Row:
        return (row[0], row[1].replaced(graph_signature_hash=""))


class TierPromotesOnLoad(TierBackend):
    """``load`` of a cold record promotes it to the hot tier as a new write (the next sequence of
    its workflow), as a read-through cache fills itself."""

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        with self.store.lock:
            tiers = self.store.tiers
            row = tiers.cold.pop(checkpoint_id, None)
            if row is not None:
                tables = self.store.tables
                sequence = tables.sequences.get(row[1].workflow_name, 0) + 1
                tables.sequences[row[1].workflow_name] = sequence
                tiers.hot[checkpoint_id] = (sequence, row[1])
            result: StoredBody | None = self.store.tables.load(checkpoint_id)
            return result


class TierLatestFromHot(TierBackend):
    """``latest`` reads the hot tier only (the newest records are there, and it must be
    cheap)."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        with self.store.lock:
            return self.hot_tables().latest(workflow_name, graph_signature_hash)


class TierPruneHotOnly(TierBackend):
    """``prune`` works on the hot tier (the cold one is an archive, trimmed by its own
    retention): cold records survive every prune."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.store.lock:
            return self.hot_tables().prune(workflow_name, keep_last)


class TierCloseDropsBuffer(TierBackend):
    """``close`` discards the handle's records still in the hot tier, as a write-behind cache
    drops its buffer on shutdown (the author took the hot tier for the handle's buffer)."""

    def __init__(self, store: TierStore | None = None) -> None:
        super().__init__(store)
        self.mine: list[CheckpointID] = []

    def saved(self, records: Sequence[CheckpointRecord]) -> None:
        self.mine += [r.checkpoint_id for r in records]
        super().saved(records)

    async def close(self) -> None:
        await super().close()
        with self.store.lock:
            for each in self.mine:
                self.store.tiers.hot.pop(each, None)
        self.mine = []


class TierOverwriteHotOnly(TierBackend):
    """``overwrite_body`` writes the hot tier only (the cold tier is append-only): a raw write
    of a demoted record answers absent."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.store.lock:
            return self.hot_tables().overwrite_body(checkpoint_id, body, digest)


class TierColdPrunedUnmarked(TierBackend):
    """A prune tombstones the hot records it deletes; cold records it deletes leave no tombstone
    (they were archived already)."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.store.lock:
            cold = set(self.store.tiers.cold)
            tables = self.store.tables
            count = tables.prune(workflow_name, keep_last)
            marks = tables.tombstones.get(workflow_name, {})
            for each in [m for m in marks if m in cold]:
                del marks[each]
            return count


class TierRecordsHotOnly(TierBackend):
    """The inspect reads (``info``, ``records``) read the hot tier's index only."""

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        with self.store.lock:
            return self.hot_tables().info(checkpoint_id)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        with self.store.lock:
            return self.hot_tables().records_of(workflow_name)


def tier_target(backend_class: type[TierBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== the lists


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


BROKEN_SHARDS: list[type[ShardRouter]] = [
    ShardFoldedNames,
    ShardSaltPerHandle,
    ShardCountersPerShard,
    ShardMergeConcatenates,
    ShardDirectoryOutlivesDeletes,
    ShardWalkStaysOnShard,
    ShardNamesFromCounters,
    ShardCheckThenWrite,
    ShardRecordsFromHome,
    ShardChildrenAtRecordHome,
]
BROKEN_CLIENTS: list[type[ClientBackend]] = [
    ClientResendsUnderNewId,
    ClientAnswersInSendOrder,
    ClientConnectionKeptAcrossLoops,
    ClientOneRequestAtATime,
    ClientIdsRestartPerConnection,
    ClientServerKeysAnswersByRequestId,
    ClientServerSplitsLines,
    ClientRetriesPastCancellation,
    ClientLostReadsAnswerEmpty,
]
BROKEN_COW: list[type[CowBackend]] = [
    CowReadsOwnLastRoot,
    CowBlindPublish,
    CowRetryKeepsFirstAnswer,
    CowLatestAcrossTwoRoots,
    CowSharesInnerLists,
    CowPruneReplacesTombstones,
    CowCountersPerHandle,
    CowFenceOnFirstRoot,
    CowRawWriteInPlace,
    CowNewHandleCopiesCell,
]
BROKEN_TIERS: list[type[TierBackend]] = [
    TierDemotesInTwoSteps,
    TierFlushSortsById,
    TierColdDropsSignature,
    TierPromotesOnLoad,
    TierLatestFromHot,
    TierPruneHotOnly,
    TierCloseDropsBuffer,
    TierOverwriteHotOnly,
    TierColdPrunedUnmarked,
    TierRecordsHotOnly,
]


def _entries() -> list[Entry]:
    entries: list[Entry] = []
    entries += [(c.__name__, shard_target(c), _doc(c)) for c in BROKEN_SHARDS]
    entries += [(c.__name__, client_target(c), _doc(c)) for c in BROKEN_CLIENTS]
    entries += [(c.__name__, cow_target(c), _doc(c)) for c in BROKEN_COW]
    entries += [(c.__name__, tier_target(c), _doc(c)) for c in BROKEN_TIERS]
    return entries


ENTRIES: list[Entry] = _entries()
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = [
    # docs/contract.md: a cancelled call ends cancelled and "no reply left unread reaches the
    # next call"; the calls that lose their answers with the connection send again under their
    # ids, and the server answers with what it did.
    (
        "ClientCancelDropsConnection",
        client_target(ClientCancelDropsConnection),
        _doc(ClientCancelDropsConnection),
    ),
]
"""Written as broken, judged not to break the contract as built (tests/kit/blind_batch_ten.md
says why); each must pass the whole kit."""

HONEST: list[Entry] = [
    ("ShardRouter", shard_target(ShardRouter), _doc(ShardRouter)),
    ("ClientBackend", client_target(ClientBackend), _doc(ClientBackend)),
    ("CowBackend", cow_target(CowBackend), _doc(CowBackend)),
    ("TierBackend", tier_target(TierBackend), _doc(TierBackend)),
]
"""Honest storages: one per style; each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
