"""A blind batch of broken storages, written from the author docs alone (docs/backends.md,
docs/contract.md, docs/conformance.md, README.md, examples/dict_storage.py) before reading what
the kit's clauses or its model check. Each has exactly one defect of a kind outside authors write:
an own backend on ``storages.backend`` (the worked example's ``DictBackend`` grown, persisted to a
JSON-lines file, or a backend over the built-in memory one that redoes one primitive), a wrapper
around a built-in storage (a cache, metrics, a retry layer), or a storage with MAF's six methods.

``BATCH`` maps each storage's name to a factory of its :class:`~conformance.StorageTarget`;
tests/kit/test_blind_batch.py runs the kit on every one and requires each to be caught.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Self

from conformance import StorageTarget
from conformance.six_methods import SixMethods
from examples.dict_storage import DictBackend, Tables, _stored
from storages.backend import (
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    is_engine_log_name,
    rivals_of,
)
from storages.contract import Capability, CheckpointID, CheckpointInfo
from storages.engine import CheckpointStore
from storages.errors import (
    CheckpointConflictError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    GraphSignatureMismatchError,
    NestedCheckpointDeletionError,
    StorageClosedError,
)
from storages.memory import InMemoryCheckpointStorage
from storages.memory.backend import MemoryBackend, _compared

# ---------------------------------------------------------------------------------------------
# Own backends grown from the worked example (signature_filter, ancestry, list_workflows,
# raw_access, shared).


def _like(pattern: str, name: str) -> bool:
    """SQL LIKE: ``_`` any one character, ``%`` any run (what ``WHERE workflow LIKE ?`` does)."""
    regex = "".join("." if c == "_" else ".*" if c == "%" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.DOTALL) is not None


class DictLikeWorkflow(DictBackend):
    """Listings and latest select the workflow with LIKE, as a SQL port would without escaping."""

    def _rows(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointRecord]:
        with self.tables.lock:
            rows = [
                (sequence, record)
                for sequence, record in self.tables.records.values()
                if _like(workflow_name, record.workflow_name)
                and graph_signature_hash in (None, record.graph_signature_hash)
            ]
        rows.sort(key=lambda row: row[0])
        return [record for _, record in rows]


class DictIdsPageLimit(DictBackend):
    """list_ids returns one page of 1,000 ids (a query's default LIMIT), not every id."""

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return (await super().list_ids(workflow_name, graph_signature_hash))[:1000]


class _OwnLatest(DictBackend):
    """latest as an author writes it by hand; subclasses get one step wrong."""

    def follow(self, rows: list[CheckpointRecord], start: CheckpointRecord) -> CheckpointRecord:
        current, visited = start, {start.checkpoint_id}
        while True:
            following = [
                r
                for r in self.successor_pool(rows)
                if r.previous_checkpoint_id == current.checkpoint_id
                and r.graph_signature_hash == current.graph_signature_hash
                and r.checkpoint_id not in visited
            ]
            if not following:
                return current
            current = self.pick(following)
            visited.add(current.checkpoint_id)

    def successor_pool(self, rows: list[CheckpointRecord]) -> list[CheckpointRecord]:
        return rows

    def pick(self, following: list[CheckpointRecord]) -> CheckpointRecord:
        return following[-1]

    def rivals(self, rows: list[CheckpointRecord], head: CheckpointRecord) -> list[CheckpointRecord]:
        return rivals_of(rows, head)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self._rows(workflow_name, graph_signature_hash)
        if not rows:
            return None
        everything = self._rows(workflow_name, None)
        head = self.follow(everything, rows[-1])
        return dataclasses.replace(_stored(head), rivals=[_stored(r) for r in self.rivals(everything, head)])


class DictRivalsNewestFirst(_OwnLatest):
    """Rivals come back newest commit first (ORDER BY sequence DESC), not in ascending sequence."""

    def rivals(self, rows: list[CheckpointRecord], head: CheckpointRecord) -> list[CheckpointRecord]:
        return list(reversed(rivals_of(rows, head)))


class DictRivalsFirst64(_OwnLatest):
    """The 64 rivals read are the first committed (LIMIT 64 without ORDER BY ... DESC)."""

    def rivals(self, rows: list[CheckpointRecord], head: CheckpointRecord) -> list[CheckpointRecord]:
        continued = {(r.previous_checkpoint_id, r.graph_signature_hash) for r in rows}
        if head.previous_checkpoint_id is None:
            return []
        return [
            r
            for r in rows
            if r is not head
            and r.previous_checkpoint_id == head.previous_checkpoint_id
            and r.graph_signature_hash == head.graph_signature_hash
            and (r.checkpoint_id, r.graph_signature_hash) not in continued
        ][:64]


class DictRivalsIncludeContinued(_OwnLatest):
    """Every sibling is a rival, also one that a later checkpoint continues."""

    def rivals(self, rows: list[CheckpointRecord], head: CheckpointRecord) -> list[CheckpointRecord]:
        if head.previous_checkpoint_id is None:
            return []
        return [
            r
            for r in rows
            if r is not head
            and r.previous_checkpoint_id == head.previous_checkpoint_id
            and r.graph_signature_hash == head.graph_signature_hash
        ][-64:]


class DictSuccessorAnySignature(_OwnLatest):
    """The lineage is followed through successors of any graph signature."""

    def follow(self, rows: list[CheckpointRecord], start: CheckpointRecord) -> CheckpointRecord:
        current, visited = start, {start.checkpoint_id}
        while True:
            following = [
                r
                for r in rows
                if r.previous_checkpoint_id == current.checkpoint_id and r.checkpoint_id not in visited
            ]
            if not following:
                return current
            current = following[-1]
            visited.add(current.checkpoint_id)


class DictSuccessorFirstCommitted(_OwnLatest):
    """Of several successors the lineage moves to the first committed, not the last."""

    def pick(self, following: list[CheckpointRecord]) -> CheckpointRecord:
        return following[0]


class DictSuccessorsStoreWide(_OwnLatest):
    """Successors are looked up store-wide (an index on previous id alone), so a checkpoint of
    another workflow continuing this one moves its latest."""

    def successor_pool(self, rows: list[CheckpointRecord]) -> list[CheckpointRecord]:
        with self.tables.lock:
            every = sorted(self.tables.records.values(), key=lambda row: row[0])
        return [record for _, record in every]

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self._rows(workflow_name, graph_signature_hash)
        if not rows:
            return None
        head = self.follow(self._rows(workflow_name, None), rows[-1])
        if head.workflow_name != workflow_name:
            return _stored(head)
        return dataclasses.replace(
            _stored(head), rivals=[_stored(r) for r in rivals_of(self._rows(workflow_name, None), head)]
        )


class DictSequenceFromCount(DictBackend):
    """A save's sequence is the workflow's record count plus one, not a counter that is kept."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        tables = self.tables
        with tables.lock:
            existing = tables.records.get(record.checkpoint_id)
            if existing is not None:
                return InsertResult.of_stored_digest(existing[1].digest, record)
            count = sum(1 for _, r in tables.records.values() if r.workflow_name == record.workflow_name)
            tables.records[record.checkpoint_id] = (count + 1, record)
        return InsertResult.INSERTED


class DictWalkOneShort(DictBackend):
    """walk stops one link short of max_depth (``< max_depth - 1``)."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await super().walk(checkpoint_id, max(1, max_depth - 1), with_bodies=with_bodies)


class DictNamesFromCounters(DictBackend):
    """workflow_names reads the sequence counters, which are kept after a workflow's last delete."""

    async def workflow_names(self) -> list[str]:
        with self.tables.lock:
            return sorted(self.tables.sequences)


class DictOverwriteCreates(DictBackend):
    """overwrite_body of an absent id creates a record (an upsert) and returns True."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        if await super().overwrite_body(checkpoint_id, body, digest):
            return True
        record = CheckpointRecord(checkpoint_id, "raw", None, "", body, digest)
        with self.tables.lock:
            self.tables.records[checkpoint_id] = (0, record)
        return True


class DictCheckThenInsert(DictBackend):
    """insert checks the id, then writes after an await (two statements, no transaction)."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        tables = self.tables
        with tables.lock:
            existing = tables.records.get(record.checkpoint_id)
        if existing is not None:
            return InsertResult.of_stored_digest(existing[1].digest, record)
        await asyncio.sleep(0)  # the write is a second round trip
        with tables.lock:
            sequence = tables.sequences.get(record.workflow_name, 0) + 1
            tables.sequences[record.workflow_name] = sequence
            tables.records[record.checkpoint_id] = (sequence, record)
        return InsertResult.INSERTED


# ---------------------------------------------------------------------------------------------
# A durable own backend: the worked example persisted to a JSON file after every write, read back
# whole when a storage is built on the path (the rows are docs/backends.md's).


class JsonFileBackend(DictBackend):
    """The worked example kept in a JSON-lines file (``durable``): each change appends a line, and
    building a backend on the path replays them."""

    capabilities = DictBackend.capabilities | {Capability.DURABLE}

    def __init__(self, path: str, tables: Tables | None = None) -> None:
        self.path = path
        super().__init__(tables if tables is not None else self.read())

    def new_handle(self) -> Self:
        return type(self)(self.path, self.tables)

    def body_text(self, body: bytes) -> str:
        return base64.b64encode(body).decode("ascii")

    def body_bytes(self, text: str) -> bytes:
        return base64.b64decode(text)

    def read(self) -> Tables:
        tables = Tables()
        if not os.path.exists(self.path):
            return tables
        with open(self.path, encoding="utf-8") as file:
            for line in file:
                self.replay(tables, json.loads(line))
        return tables

    def replay(self, tables: Tables, row: dict[str, Any]) -> None:
        if row["op"] == "remove":
            tables.records.pop(row["id"], None)
            return
        record = CheckpointRecord(
            row["id"],
            row["workflow"],
            row["previous"],
            row["signature"],
            self.body_bytes(row["body"]),
            row["digest"],
        )
        tables.records[record.checkpoint_id] = (row["sequence"], record)
        if row["op"] == "insert":
            tables.sequences[record.workflow_name] = max(
                tables.sequences.get(record.workflow_name, 0), row["sequence"]
            )

    def append(self, row: dict[str, Any]) -> None:
        with self.tables.lock, open(self.path, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")

    def row(self, op: str, checkpoint_id: CheckpointID) -> dict[str, Any]:
        sequence, record = self.tables.records[checkpoint_id]
        return {
            "op": op,
            "id": record.checkpoint_id,
            "workflow": record.workflow_name,
            "previous": record.previous_checkpoint_id,
            "signature": record.graph_signature_hash,
            "digest": record.digest,
            "sequence": sequence,
            "body": self.body_text(record.body),
        }

    # Appends run in a worker thread, so the loop's thread never waits on the file; a call
    # returns once its line is written, so the lines of one id keep the order of its calls.

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await super().insert(records)
        if result is InsertResult.INSERTED:
            await asyncio.to_thread(self.append, self.row("insert", records[0].checkpoint_id))
        return result

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        removed = await super().remove(checkpoint_id)
        if removed:
            await asyncio.to_thread(self.append, {"op": "remove", "id": checkpoint_id})
        return removed

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        written = await super().overwrite_body(checkpoint_id, body, digest)
        if written:
            await asyncio.to_thread(self.append, self.row("overwrite", checkpoint_id))
        return written


class JsonBodyAsText(JsonFileBackend):
    """Bodies are kept in the file as UTF-8 text (errors replaced), not base64."""

    def body_text(self, body: bytes) -> str:
        return body.decode("utf-8", errors="replace")

    def body_bytes(self, text: str) -> bytes:
        return text.encode("utf-8")


class JsonRowsById(JsonFileBackend):
    """Reading the file back numbers the records again in id order (a dict keyed by id, sorted)."""

    def read(self) -> Tables:
        tables = super().read()
        ordered = sorted(tables.records.values(), key=lambda row: row[1].checkpoint_id)
        tables.records = {r.checkpoint_id: (n + 1, r) for n, (_, r) in enumerate(ordered)}
        return tables


class JsonDeleteNotWritten(JsonFileBackend):
    """A delete changes the handle's tables but is not written to the file."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await DictBackend.remove(self, checkpoint_id)


# ---------------------------------------------------------------------------------------------
# Backends over the built-in memory one that redo one primitive (nested, prune, inspect,
# fencing, pending writes).


class MemFenceBySignature(MemoryBackend):
    """The fence compares with the latest of the incoming checkpoint's signature, not of any."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        store = self.store
        with store.lock:
            workflow = store.workflows.get(records[0].workflow_name)
            tip = None if workflow is None else workflow.latest(records[0].graph_signature_hash)
            latest = None if tip is None else tip.record.checkpoint_id
            existing = store.by_id.get(records[0].checkpoint_id)
            if existing is not None:
                return FenceCheck(latest, _compared(existing, records[0]))
            if latest != expected_latest_id:
                return FenceCheck(latest, None)
            self._write_family(records)
        return None


class MemFenceStoredIdIsLatest(MemoryBackend):
    """A fenced save of an id already stored reports that id as the latest (a retry succeeds)."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        existing = self.store.by_id.get(records[0].checkpoint_id)
        if existing is not None:
            return FenceCheck(records[0].checkpoint_id, _compared(existing, records[0]))
        return await super().insert_fenced(records, expected_latest_id)


class MemFenceCheckThenWrite(MemoryBackend):
    """The fence reads the latest, then inserts in a second step (no transaction around both)."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        head = await self.latest(records[0].workflow_name, None)
        latest = None if head is None else head.checkpoint_id
        existing = self.store.by_id.get(records[0].checkpoint_id)
        if existing is not None:
            return FenceCheck(latest, _compared(existing, records[0]))
        if latest != expected_latest_id:
            return FenceCheck(latest, None)
        await asyncio.sleep(0)  # the insert is a round trip of its own
        await self.insert(records)
        return None


class _OwnPrune(MemoryBackend):
    """prune as an author writes it over the store's maps; subclasses get one step wrong."""

    def doomed(self, workflow: Any, keep_last: int) -> list[Any]:
        entries = list(workflow.entries.values())
        if keep_last <= 0:
            return entries
        head = workflow.latest(None)
        protected = {id(head), *(id(r) for r in workflow.rivals(head))}
        others = [e for e in entries if id(e) not in protected]
        return others[: max(0, len(others) - (keep_last - 1))]

    def names(self, workflow_name: str) -> list[str]:
        return [workflow_name] if workflow_name in self.store.workflows else []

    def tombstone(self, workflow_name: str, member: Any, top: Any) -> None:
        self.store.tombstones[member.record.checkpoint_id] = workflow_name

    def counted(self, top: Any, members: list[Any]) -> int:
        return 1

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        store = self.store
        count = 0
        with store.lock:
            for name in self.names(workflow_name):
                for top in self.doomed(store.workflows[name], keep_last):
                    members = [top, *self._descendants(top)]
                    self._drop_family(top)
                    for member in members:
                        self.tombstone(name, member, top)
                    count += self.counted(top, members)
        return count


class MemPruneDropsRivals(_OwnPrune):
    """prune protects the head but not its rivals (parallel steps' checkpoints)."""

    def doomed(self, workflow: Any, keep_last: int) -> list[Any]:
        entries = list(workflow.entries.values())
        if keep_last <= 0:
            return entries
        head = workflow.latest(None)
        others = [e for e in entries if e is not head]
        return others[: max(0, len(others) - (keep_last - 1))]


class MemPruneTombstonesTopOnly(_OwnPrune):
    """prune tombstones the top-level ids it deletes, not the nested records deleted with them."""

    def tombstone(self, workflow_name: str, member: Any, top: Any) -> None:
        if member is top:
            super().tombstone(workflow_name, member, top)


class MemPruneCountsNested(_OwnPrune):
    """prune returns every record it deleted, nested ones included, not the top-level count."""

    def counted(self, top: Any, members: list[Any]) -> int:
        return len(members)


class MemPruneLike(_OwnPrune):
    """prune selects workflows with LIKE: pruning 'a_b' prunes 'axb' too."""

    def names(self, workflow_name: str) -> list[str]:
        return [name for name in list(self.store.workflows) if _like(workflow_name, name)]


class MemTombstoneUnderOwnWorkflow(_OwnPrune):
    """A pruned nested record's tombstone is filed under its own workflow name, not the pruned one."""

    def tombstone(self, workflow_name: str, member: Any, top: Any) -> None:
        self.store.tombstones[member.record.checkpoint_id] = member.record.workflow_name


class MemTombstoneBlocksResave(MemoryBackend):
    """An insert of a pruned id answers SAME_BODY (the tombstone row holds the id), storing nothing."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        if records[0].checkpoint_id in self.store.tombstones:
            return InsertResult.SAME_BODY
        return await super().insert(records)


class MemRecordsTopLevelOnly(MemoryBackend):
    """records(workflow) lists top-level records only, leaving nested ones out."""

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return [info for info in await super().records(workflow_name) if info.container_id is None]


class MemNestedIdsReversed(MemoryBackend):
    """nested_ids answers the children last first (a stack), not in position order."""

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        found = await super().nested_ids(checkpoint_id)
        return None if found is None else list(reversed(found))


class MemNestedBodiesOneLevel(MemoryBackend):
    """nested_bodies returns the direct children's bodies, not those nested deeper."""

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        store = self.store
        with store.lock:
            return {
                child: store.by_id[child].record.body
                for container in checkpoint_ids
                if container in store.by_id
                for child in store.by_id[container].children
                if child in store.by_id
            }


class MemNestedListedLast(MemoryBackend):
    """With include_nested, a workflow's nested records are listed after its top-level ones
    (two queries concatenated), not interleaved in sequence."""

    def _entries(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[Any]:
        with self.store.lock:
            workflow = self.store.workflows.get(workflow_name)
            if workflow is None:
                return []
            entries = list(workflow.entries.values())
            if include_nested:
                entries += list(workflow.nested.values())
            return [
                e
                for e in entries
                if graph_signature_hash is None or e.record.graph_signature_hash == graph_signature_hash
            ]


class MemSignedIdsTopOnly(MemoryBackend):
    """list_ids filtered by signature ignores include_nested (a second query path)."""

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        if graph_signature_hash is not None:
            include_nested = False
        return await super().list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)


class MemNamesWithNestedOnly(MemoryBackend):
    """workflow_names names workflows that hold only nested records."""

    async def workflow_names(self) -> list[str]:
        with self.store.lock:
            return [name for name, w in self.store.workflows.items() if w.entries or w.nested]


class _Paged(MemoryBackend):
    """records_after over the index in id order."""

    def page(
        self, every: list[CheckpointInfo], after: CheckpointID | None, limit: int
    ) -> list[CheckpointInfo]:
        return [i for i in every if after is None or i.checkpoint_id > after][:limit]

    async def records_after(self, after: CheckpointID | None, limit: int) -> Sequence[CheckpointInfo]:
        every = sorted(await self.records(None), key=lambda info: info.checkpoint_id)
        return self.page(every, after, limit)


class MemPageFromInclusive(_Paged):
    """records_after starts at ``after`` itself (``>=``), so each page repeats the last entry."""

    def page(
        self, every: list[CheckpointInfo], after: CheckpointID | None, limit: int
    ) -> list[CheckpointInfo]:
        return [i for i in every if after is None or i.checkpoint_id >= after][:limit]


class MemPageFiltersLogs(_Paged):
    """records_after leaves out the engine's own records after the LIMIT: short pages mid-way."""

    def page(
        self, every: list[CheckpointInfo], after: CheckpointID | None, limit: int
    ) -> list[CheckpointInfo]:
        return [i for i in super().page(every, after, limit) if not is_engine_log_name(i.workflow_name)]


# ---------------------------------------------------------------------------------------------
# Wrappers around a built-in storage.


class Wrapper:
    """Delegates everything to an in-memory storage; a subclass changes one behaviour."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def new_handle(self) -> Any:
        return type(self)(self.inner.new_handle())

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Cached(Wrapper):
    """A per-handle read cache, dropped on this handle's saves and deletes."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.cache: dict[Any, Any] = {}

    async def save(self, checkpoint: Any, **options: Any) -> Any:
        self.cache.clear()
        return await self.inner.save(checkpoint, **options)

    async def delete(self, checkpoint_id: str) -> bool:
        self.cache.clear()
        return bool(await self.inner.delete(checkpoint_id))


class CacheIdsBySignatureless(_Cached):
    """list_checkpoint_ids is cached per workflow, whatever the signature filter asked."""

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[str]:
        key = ("ids", workflow_name, options.get("include_nested", False))
        if key not in self.cache:
            self.cache[key] = await self.inner.list_checkpoint_ids(workflow_name=workflow_name, **options)
        return list(self.cache[key])


class CacheLatestBySignatureless(_Cached):
    """get_latest is cached per workflow, whatever the signature filter asked."""

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        key = ("latest", workflow_name)
        if key not in self.cache:
            self.cache[key] = await self.inner.get_latest(
                workflow_name=workflow_name, graph_signature_hash=graph_signature_hash
            )
        found = self.cache[key]
        return None if found is None else await self.inner.load(found.checkpoint_id)


class CacheLoadsKeptOverPrune(_Cached):
    """load is cached (ids are immutable); the cache is dropped on saves and deletes, not prunes."""

    async def load(self, checkpoint_id: str, **options: Any) -> Any:
        if options:
            return await self.inner.load(checkpoint_id, **options)
        if checkpoint_id not in self.cache:
            self.cache[checkpoint_id] = await self.inner.load(checkpoint_id)
        return _fresh(self.cache[checkpoint_id])


def _fresh(checkpoint: Any) -> Any:
    import copy

    return copy.deepcopy(checkpoint)


class CacheLatestKeptOverPrune(_Cached):
    """get_latest is cached per (workflow, signature), dropped on saves and deletes, not prunes."""

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        key = ("latest", workflow_name, graph_signature_hash)
        if key not in self.cache:
            self.cache[key] = await self.inner.get_latest(
                workflow_name=workflow_name, graph_signature_hash=graph_signature_hash
            )
        return _fresh(self.cache[key])


class _Remembers(Wrapper):
    """Remembers what this handle saved, to skip a store round trip on a retried save."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.saved: dict[str, Any] = {}

    async def save(self, checkpoint: Any, **options: Any) -> Any:
        checkpoint_id = checkpoint.checkpoint_id
        if not options and checkpoint_id in self.saved:
            verdict = self.same(self.saved[checkpoint_id], checkpoint)
            if verdict is True:
                return checkpoint_id
            if verdict is False:
                raise CheckpointConflictError(f"checkpoint {checkpoint_id!r} is stored with other content")
        saved = await self.inner.save(checkpoint, **options)
        self.saved[checkpoint_id] = _fresh(checkpoint)
        return saved

    def same(self, stored: Any, incoming: Any) -> bool | None:
        return None


class ResaveSkippedWhenEqual(_Remembers):
    """A re-save equal by ``==`` to what this handle saved is a no-op (True over 1 too)."""

    def same(self, stored: Any, incoming: Any) -> bool | None:
        return True if stored == incoming else None


class ResaveConflictWhenUnequal(_Remembers):
    """A re-save unequal by ``==`` to what this handle saved is a conflict (a NaN too)."""

    def same(self, stored: Any, incoming: Any) -> bool | None:
        return False if stored != incoming else None


class ResaveSkippedByJsonFingerprint(_Remembers):
    """A re-save with the same JSON fingerprint is a no-op (a tuple over a list too)."""

    def same(self, stored: Any, incoming: Any) -> bool | None:
        def fingerprint(c: Any) -> str:
            return json.dumps(dataclasses.asdict(c), sort_keys=True, default=repr)

        return True if fingerprint(stored) == fingerprint(incoming) else None


class NotFoundWithoutId(Wrapper):
    """A metrics wrapper re-raises a missing id as a generic not-found, without the id."""

    async def load(self, checkpoint_id: str, **options: Any) -> Any:
        try:
            return await self.inner.load(checkpoint_id, **options)
        except CheckpointNotFoundError:
            raise CheckpointNotFoundError("(unknown)") from None


class SignatureFilterTruthy(Wrapper):
    """The signature filter is passed on only when truthy: '' lists and latest unfiltered."""

    async def list_checkpoints(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, **o: Any
    ) -> Any:
        extra = {"graph_signature_hash": graph_signature_hash} if graph_signature_hash else {}
        return await self.inner.list_checkpoints(workflow_name=workflow_name, **extra, **o)

    async def list_checkpoint_ids(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, **o: Any
    ) -> Any:
        extra = {"graph_signature_hash": graph_signature_hash} if graph_signature_hash else {}
        return await self.inner.list_checkpoint_ids(workflow_name=workflow_name, **extra, **o)

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        extra = {"graph_signature_hash": graph_signature_hash} if graph_signature_hash else {}
        return await self.inner.get_latest(workflow_name=workflow_name, **extra)


class RetryTakesConflictAsLanded(Wrapper):
    """A retry layer: any storage error is retried once, and a conflict on the retry is taken as
    the first attempt having landed."""

    async def save(self, checkpoint: Any, **options: Any) -> Any:
        try:
            return await self.inner.save(checkpoint, **options)
        except CheckpointStorageError:
            try:
                return await self.inner.save(checkpoint, **options)
            except CheckpointConflictError:
                return checkpoint.checkpoint_id


class DeleteNestedCountedAsMiss(Wrapper):
    """A metrics layer counts a refused delete as a miss and answers False."""

    async def delete(self, checkpoint_id: str) -> bool:
        try:
            return bool(await self.inner.delete(checkpoint_id))
        except NestedCheckpointDeletionError:
            return False


class NoHandleAfterClose(Wrapper):
    """new_handle() refuses once this handle is closed."""

    closed = False

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()

    def new_handle(self) -> Any:
        if self.closed:
            raise StorageClosedError("the storage is closed")
        return type(self)(self.inner.new_handle())


class WritesCachedByCheckpoint(_Cached):
    """list_writes is cached per checkpoint id, whatever the workflow asked."""

    async def put_writes(self, checkpoint_id: str, writes: Any, *, workflow_name: str) -> Any:
        self.cache.clear()
        return await self.inner.put_writes(checkpoint_id, writes, workflow_name=workflow_name)

    async def delete_writes(self, checkpoint_id: str, *, workflow_name: str) -> Any:
        self.cache.clear()
        return await self.inner.delete_writes(checkpoint_id, workflow_name=workflow_name)

    async def prune(self, **options: Any) -> Any:
        self.cache.clear()
        return await self.inner.prune(**options)

    async def delete_workflow(self, **options: Any) -> Any:
        self.cache.clear()
        return await self.inner.delete_workflow(**options)

    async def list_writes(self, checkpoint_id: str, *, workflow_name: str) -> Any:
        if ("w", checkpoint_id) not in self.cache:
            self.cache["w", checkpoint_id] = await self.inner.list_writes(
                checkpoint_id, workflow_name=workflow_name
            )
        return list(self.cache["w", checkpoint_id])


class IdsPagedOffByOne(Wrapper):
    """list_checkpoint_ids reads in pages of 50 and steps 50 over slices of 49."""

    async def list_checkpoint_ids(self, **options: Any) -> list[str]:
        every = list(await self.inner.list_checkpoint_ids(**options))
        out: list[str] = []
        for start in range(0, len(every), 50):
            out += every[start : start + 49]
        return out


class ExpectedSignatureCaseless(Wrapper):
    """load checks expected_graph_signature_hash itself, ignoring case (hex digests)."""

    async def load(self, checkpoint_id: str, *, expected_graph_signature_hash: str | None = None) -> Any:
        checkpoint = await self.inner.load(checkpoint_id)
        if (
            expected_graph_signature_hash is not None
            and checkpoint.graph_signature_hash.lower() != expected_graph_signature_hash.lower()
        ):
            raise GraphSignatureMismatchError(
                checkpoint_id, expected_graph_signature_hash, checkpoint.graph_signature_hash
            )
        return checkpoint


# ---------------------------------------------------------------------------------------------
# Six-method storages (MAF's methods only) that work out latest themselves.


def _parsed(timestamp: str) -> tuple[int, datetime.datetime]:
    try:
        moment = datetime.datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        return (0, datetime.datetime.min.replace(tzinfo=datetime.UTC))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return (1, moment)


class SixOwnLatest(SixMethods):
    """get_latest by the contract's rule, worked out from the oldest-first listing."""

    def rank(self, timestamp: str) -> Any:
        return _parsed(timestamp)

    async def get_latest(self, *, workflow_name: str) -> Any | None:
        items = await self.inner.list_checkpoints(workflow_name=workflow_name)
        if not items:
            return None
        head, visited = items[-1], {items[-1].checkpoint_id}
        while True:
            following = [
                c
                for c in items
                if c.previous_checkpoint_id == head.checkpoint_id
                and c.graph_signature_hash == head.graph_signature_hash
                and c.checkpoint_id not in visited
            ]
            if not following:
                break
            head = following[-1]
            visited.add(head.checkpoint_id)
        rivals = {id(c) for c in rivals_of(items, head)}
        group = [c for c in items if c is head or id(c) in rivals]
        ranked = [(self.rank(c.timestamp), position, c) for position, c in enumerate(group)]
        return max(ranked, key=lambda r: (r[0], r[1]))[2]


class SixTimestampsAsText(SixOwnLatest):
    """Rival timestamps are compared as strings (offsets and 'Z' order wrongly)."""

    def rank(self, timestamp: str) -> Any:
        return timestamp


class SixUnparsedRanksFirst(SixOwnLatest):
    """A rival timestamp that does not parse ranks above every one that does."""

    def rank(self, timestamp: str) -> Any:
        kind, moment = _parsed(timestamp)
        return (2, moment) if kind == 0 else (kind, moment)


class SixResaveByEquality(SixMethods):
    """Re-saves are decided by ``==`` against a copy kept per handle (True over 1 is a no-op, a
    NaN over a NaN a conflict)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.saved: dict[str, Any] = {}

    async def save(self, checkpoint: Any) -> str:
        checkpoint_id = str(checkpoint.checkpoint_id)
        if checkpoint_id in self.saved:
            if self.saved[checkpoint_id] == checkpoint:
                return checkpoint_id
            raise CheckpointConflictError(f"checkpoint {checkpoint_id} is stored with other content")
        saved = await self.inner.save(checkpoint)
        self.saved[checkpoint_id] = _fresh(checkpoint)
        return str(saved)


class SixListDropsEmptyPrevious(SixMethods):
    """list_checkpoint_ids is derived from list_checkpoints and sorts roots first."""

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        items = await self.inner.list_checkpoints(workflow_name=workflow_name)
        return [c.checkpoint_id for c in sorted(items, key=lambda c: c.previous_checkpoint_id is not None)]


# ---------------------------------------------------------------------------------------------
# The batch.


def _engine(backend_class: type[Any]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        if issubclass(backend_class, DictBackend):
            root = CheckpointStore(backend_class(Tables()))
        else:
            root = CheckpointStore(backend_class())
        return StorageTarget(name=backend_class.__name__, factory=root.new_handle)

    return target


def _json_file(backend_class: type[JsonFileBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        directory = tempfile.mkdtemp(prefix="blind-json-")
        path = os.path.join(directory, "store.json")

        def reopen() -> Any:
            return CheckpointStore(backend_class(path))

        async def cleanup() -> None:
            shutil.rmtree(directory, ignore_errors=True)

        return StorageTarget(
            name=backend_class.__name__,
            factory=CheckpointStore(backend_class(path)).new_handle,
            reopen=reopen,
            cleanup=cleanup,
        )

    return target


def _wrapped(wrapper_class: type[Any]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        root = wrapper_class(InMemoryCheckpointStorage())
        return StorageTarget(name=wrapper_class.__name__, factory=root.new_handle)

    return target


def _six(six_class: type[Any]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        store = InMemoryCheckpointStorage()

        def factory() -> Any:
            return six_class(store.new_handle())

        # Worked out from a listing, latest costs what the history does: a known deviation here.
        slow = {"scale.latest_is_constant_cost": "get_latest reads the whole listing"}
        known = slow if issubclass(six_class, SixOwnLatest) else {}
        return StorageTarget(name=six_class.__name__, factory=factory, expected_failures=known)

    return target


BATCH: dict[str, Callable[[], StorageTarget]] = {
    **{
        cls.__name__: _engine(cls)
        for cls in (
            DictLikeWorkflow,
            DictIdsPageLimit,
            DictRivalsNewestFirst,
            DictRivalsFirst64,
            DictRivalsIncludeContinued,
            DictSuccessorAnySignature,
            DictSuccessorFirstCommitted,
            DictSuccessorsStoreWide,
            DictSequenceFromCount,
            DictWalkOneShort,
            DictNamesFromCounters,
            DictOverwriteCreates,
            DictCheckThenInsert,
            MemFenceBySignature,
            MemFenceStoredIdIsLatest,
            MemFenceCheckThenWrite,
            MemPruneDropsRivals,
            MemPruneTombstonesTopOnly,
            MemPruneCountsNested,
            MemPruneLike,
            MemTombstoneUnderOwnWorkflow,
            MemTombstoneBlocksResave,
            MemRecordsTopLevelOnly,
            MemNestedIdsReversed,
            MemNestedBodiesOneLevel,
            MemNestedListedLast,
            MemSignedIdsTopOnly,
            MemNamesWithNestedOnly,
            MemPageFromInclusive,
            MemPageFiltersLogs,
        )
    },
    **{
        cls.__name__: _wrapped(cls)
        for cls in (
            CacheIdsBySignatureless,
            CacheLatestBySignatureless,
            CacheLoadsKeptOverPrune,
            CacheLatestKeptOverPrune,
            ResaveSkippedWhenEqual,
            ResaveConflictWhenUnequal,
            ResaveSkippedByJsonFingerprint,
            NotFoundWithoutId,
            SignatureFilterTruthy,
            RetryTakesConflictAsLanded,
            DeleteNestedCountedAsMiss,
            NoHandleAfterClose,
            WritesCachedByCheckpoint,
            IdsPagedOffByOne,
            ExpectedSignatureCaseless,
        )
    },
    **{cls.__name__: _json_file(cls) for cls in (JsonBodyAsText, JsonRowsById, JsonDeleteNotWritten)},
    **{
        cls.__name__: _six(cls)
        for cls in (
            SixTimestampsAsText,
            SixUnparsedRanksFirst,
            SixResaveByEquality,
            SixListDropsEmptyPrevious,
        )
    },
}
"""Every broken storage of the batch, by name: a factory of its target."""

HEALTHY: dict[str, Callable[[], StorageTarget]] = {
    "DictOwnLatest": _engine(_OwnLatest),
    "MemOwnPrune": _engine(_OwnPrune),
    "MemPaged": _engine(_Paged),
    "SixOwnLatest": _six(SixOwnLatest),
    "JsonFileBackend": _json_file(JsonFileBackend),
}
"""The honest bases the batch's defects were written over: each must pass the kit."""
