"""A third blind batch: broken storages written from the author docs alone.

The base is ``ListBackend``: every capability but ``ttl`` and ``durable``, its records in one
list searched linearly, written from docs/backends.md and the helpers of ``storages.backend``
(``latest_record``, ``rivals_of``, ``pruned_records``). Each broken storage redoes one small
piece of it (or wraps the built-in in-memory storage and redoes one method) with one defect of
its own kind: an order that breaks only past nine records, a lookup or listing that folds case or
normalises Unicode, a cache one write forgets to invalidate, an index a delete leaves behind, a
buffer reused across reads, a store released by one handle's close, an await inside a
read-modify-write, a cut at a size limit. ``BATCH`` maps a name to a factory; ``HONEST`` holds
unusual but correct storages. tests/kit/test_blind_batch_three.py runs the kit on each.
"""

from __future__ import annotations

import asyncio
import time
import unicodedata
import zlib
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from threading import Lock
from typing import Any, Self, cast

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
from storages.contract import Capability, CheckpointID, CheckpointInfo, PendingWrite
from storages.engine import CheckpointStore
from storages.errors import (
    CheckpointCorruptedError,
    InvalidCheckpointIdError,
    NestedCheckpointDeletionError,
)
from storages.memory import InMemoryCheckpointStorage

# ---------------------------------------------------------------------------- the base


@dataclass
class Row:
    """One stored record and the sequence its workflow gave it."""

    sequence: int
    record: CheckpointRecord


@dataclass
class Shelf:
    """The store every handle from ``new_handle()`` shares."""

    lock: Lock = field(default_factory=Lock)
    rows: list[Row] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    """Workflow name -> last sequence handed out; outlives the workflow's records."""
    tombstones: dict[CheckpointID, str] = field(default_factory=dict)
    """Pruned id -> the workflow that was pruned."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Per-store state of a subclass (a cache, a secondary index)."""


def _stored(row: Row) -> StoredBody:
    return StoredBody(row.record.checkpoint_id, row.record.body, entry=row.record.index_entry())


class ListBackend(Backend):
    """Every record in one list, found by linear scans: slow and simple, and correct."""

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,
            Capability.ANCESTRY,
            Capability.NESTED,
            Capability.PRUNE,
            Capability.LIST_WORKFLOWS,
            Capability.RAW_ACCESS,
            Capability.INSPECT,
            Capability.FENCING,
            Capability.PENDING_WRITES,
            Capability.SHARED,
        }
    )

    def __init__(self, shelf: Shelf | None = None) -> None:
        self.shelf = shelf if shelf is not None else Shelf()

    def describe(self) -> str:
        return "list://"

    def new_handle(self) -> Self:
        return type(self)(self.shelf)

    # ------------------------------------------------------------ lookups subclasses redo

    def _same_id(self, stored: CheckpointID, asked: CheckpointID) -> bool:
        return stored == asked

    def _same_workflow(self, stored: str, asked: str) -> bool:
        return stored == asked

    def _ordered(self, rows: list[Row]) -> list[Row]:
        return sorted(rows, key=lambda row: row.sequence)

    def _find(self, checkpoint_id: CheckpointID) -> Row | None:
        return next(
            (row for row in self.shelf.rows if self._same_id(row.record.checkpoint_id, checkpoint_id)), None
        )

    def _tops(self, workflow_name: str) -> list[CheckpointRecord]:
        rows = [
            row
            for row in self.shelf.rows
            if row.record.container_id is None
            and self._same_workflow(row.record.workflow_name, workflow_name)
        ]
        return [row.record for row in self._ordered(rows)]

    def _listed(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[Row]:
        rows = [
            row
            for row in self.shelf.rows
            if self._same_workflow(row.record.workflow_name, workflow_name)
            and graph_signature_hash in (None, row.record.graph_signature_hash)
            and (include_nested or row.record.container_id is None)
        ]
        return self._ordered(rows)

    def _descendants(self, checkpoint_ids: Collection[CheckpointID]) -> list[Row]:
        found: list[Row] = []
        frontier = set(checkpoint_ids)
        while frontier:
            children = [row for row in self.shelf.rows if row.record.container_id in frontier]
            found.extend(children)
            frontier = {row.record.checkpoint_id for row in children}
        return found

    def _drop_family(self, top_id: CheckpointID) -> list[CheckpointID]:
        doomed = {top_id} | {row.record.checkpoint_id for row in self._descendants([top_id])}
        self.shelf.rows = [row for row in self.shelf.rows if row.record.checkpoint_id not in doomed]
        return sorted(doomed)

    def _insert_locked(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        existing = self._find(records[0].checkpoint_id)
        if existing is not None:
            return InsertResult.of_stored_digest(existing.record.digest, records[0])
        for record in records[1:]:
            if self._find(record.checkpoint_id) is not None:
                raise nested_id_conflict(records, record.checkpoint_id)
        counters = self.shelf.counters
        for record in records:
            counters[record.workflow_name] = counters.get(record.workflow_name, 0) + 1
            self.shelf.rows.append(Row(counters[record.workflow_name], record))
        return InsertResult.INSERTED

    # ------------------------------------------------------------ core

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self.shelf.lock:
            return self._insert_locked(records)

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        with self.shelf.lock:
            row = self._find(checkpoint_id)
            return None if row is None else _stored(row)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        with self.shelf.lock:
            tops = self._tops(workflow_name)
            head = latest_record(tops, graph_signature_hash)
            if head is None:
                return None
            return StoredBody(
                head.checkpoint_id,
                head.body,
                entry=head.index_entry(),
                rivals=[
                    StoredBody(r.checkpoint_id, r.body, entry=r.index_entry()) for r in rivals_of(tops, head)
                ],
            )

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        with self.shelf.lock:
            return [_stored(row) for row in self._listed(workflow_name, graph_signature_hash, include_nested)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        with self.shelf.lock:
            rows = self._listed(workflow_name, graph_signature_hash, include_nested)
            return [row.record.checkpoint_id for row in rows]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.shelf.lock:
            row = self._find(checkpoint_id)
            if row is None:
                return False
            if row.record.container_id is not None:
                raise NestedCheckpointDeletionError(checkpoint_id, row.record.container_id)
            self._drop_family(row.record.checkpoint_id)
            return True

    # ------------------------------------------------------------ per capability

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        with self.shelf.lock:
            head = latest_record(self._tops(records[0].workflow_name))
            head_id = None if head is None else head.checkpoint_id
            existing = self._find(records[0].checkpoint_id)
            if existing is not None:
                return FenceCheck(head_id, InsertResult.of_stored_digest(existing.record.digest, records[0]))
            if head_id != expected_latest_id:
                return FenceCheck(head_id, None)
            self._insert_locked(records)
            return None

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        with self.shelf.lock:
            return {row.record.checkpoint_id: row.record.body for row in self._descendants(checkpoint_ids)}

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        with self.shelf.lock:
            if self._find(checkpoint_id) is None:
                return None
            children = [row.record for row in self.shelf.rows if row.record.container_id == checkpoint_id]
            return [record.checkpoint_id for record in sorted(children, key=lambda r: r.position)]

    def _link(self, record: CheckpointRecord) -> CheckpointID | None:
        return record.previous_checkpoint_id

    def _walk_tombstones(self, unreached: CheckpointID | None) -> frozenset[CheckpointID]:
        if unreached is not None and unreached in self.shelf.tombstones:
            return frozenset({unreached})
        return frozenset()

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        with self.shelf.lock:
            current: CheckpointID | None = checkpoint_id
            while current is not None and current not in links and len(links) < max_depth:
                row = self._find(current)
                if row is None:
                    break
                links[current] = self._link(row.record)
                if with_bodies:
                    bodies[current] = row.record.body
                    for nested in self._descendants([current]):
                        bodies[nested.record.checkpoint_id] = nested.record.body
                current = self._link(row.record)
            return WalkRecords(links, bodies, self._walk_tombstones(current))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.shelf.lock:
            doomed = pruned_records(self._tops(workflow_name), keep_last)
            for record in doomed:
                for gone in self._drop_family(record.checkpoint_id):
                    self.shelf.tombstones[gone] = workflow_name
            return len(doomed)

    async def delete_workflow(self, workflow_name: str) -> int:
        with self.shelf.lock:
            tops = self._tops(workflow_name)
            for record in tops:
                self._drop_family(record.checkpoint_id)
            self.shelf.tombstones = {i: w for i, w in self.shelf.tombstones.items() if w != workflow_name}
            return len(tops)

    async def workflow_names(self) -> list[str]:
        with self.shelf.lock:
            return sorted(
                {row.record.workflow_name for row in self.shelf.rows if row.record.container_id is None}
            )

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.shelf.lock:
            row = self._find(checkpoint_id)
            if row is None:
                return False
            row.record = row.record.replaced(body=body, digest=row.record.digest)
            return True

    def _info(self, row: Row) -> CheckpointInfo:
        return row.record.info(row.sequence)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        with self.shelf.lock:
            row = self._find(checkpoint_id)
            return None if row is None else self._info(row)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        with self.shelf.lock:
            return [
                self._info(row)
                for row in self.shelf.rows
                if workflow_name is None or row.record.workflow_name == workflow_name
            ]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        with self.shelf.lock:
            return [i for i, w in self.shelf.tombstones.items() if workflow_name in (None, w)]

    async def records_after(self, after: CheckpointID | None, limit: int) -> Sequence[CheckpointInfo]:
        with self.shelf.lock:
            rows = sorted(self.shelf.rows, key=lambda row: row.record.checkpoint_id)
            later = [row for row in rows if after is None or row.record.checkpoint_id > after]
            return [self._info(row) for row in later[:limit]]


def over(backend_class: type[ListBackend]) -> Callable[[], CheckpointStore[Any]]:
    """A factory of the engine over a fresh store of ``backend_class``."""

    def make() -> CheckpointStore[Any]:
        return CheckpointStore(backend_class())

    make.__name__ = backend_class.__name__
    return make


# ---------------------------------------------------------------------------- honest variants


class LruListBackend(ListBackend):
    """Loads through an LRU cache of 32 bodies kept on the shelf (so every handle sees one cache),
    invalidated by every write that removes or rewrites a record."""

    def _cache(self) -> OrderedDict[CheckpointID, StoredBody]:
        cache: OrderedDict[CheckpointID, StoredBody] = self.shelf.extras.setdefault("lru", OrderedDict())
        return cache

    def _drop_family(self, top_id: CheckpointID) -> list[CheckpointID]:
        gone = super()._drop_family(top_id)
        for checkpoint_id in gone:
            self._cache().pop(checkpoint_id, None)
        return gone

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        with self.shelf.lock:
            cache = self._cache()
            if checkpoint_id in cache:
                cache.move_to_end(checkpoint_id)
                return cache[checkpoint_id]
            row = self._find(checkpoint_id)
            if row is None:
                return None
            cache[checkpoint_id] = stored = _stored(row)
            if len(cache) > 32:
                cache.popitem(last=False)
            return stored

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.shelf.lock:
            self._cache().pop(checkpoint_id, None)
        return await super().overwrite_body(checkpoint_id, body, digest)


class CompressedListBackend(ListBackend):
    """Keeps every body zlib-compressed and inflates it on each read; the saved digest is kept."""

    def _insert_locked(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        packed = [r.replaced(body=zlib.compress(r.body), digest=r.digest) for r in records]
        return super()._insert_locked(packed)

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return _inflated(await super().load(checkpoint_id))

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        stored = await super().latest(workflow_name, graph_signature_hash)
        if stored is None:
            return None
        return replace(_inflated(stored) or stored, rivals=[_inflated(r) or r for r in stored.rivals])

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        listed = await super().list_bodies(workflow_name, graph_signature_hash, include_nested=include_nested)
        return [_inflated(s) or s for s in listed]

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        bodies = await super().nested_bodies(checkpoint_ids)
        return {i: zlib.decompress(b) for i, b in bodies.items()}

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        walked = await super().walk(checkpoint_id, max_depth, with_bodies=with_bodies)
        bodies = {i: zlib.decompress(b) for i, b in walked.bodies.items()}
        return WalkRecords(walked.links, bodies, walked.tombstones)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await super().overwrite_body(checkpoint_id, zlib.compress(body), digest)

    def _info(self, row: Row) -> CheckpointInfo:
        return replace(super()._info(row), size=len(zlib.decompress(row.record.body)))


def _inflated(stored: StoredBody | None) -> StoredBody | None:
    return None if stored is None else replace(stored, body=zlib.decompress(stored.body))


# ---------------------------------------------------------------------------- broken backends


class SequenceSortedAsText(ListBackend):
    """Orders by the sequence as text (a TEXT column): 10 sorts before 9."""

    def _ordered(self, rows: list[Row]) -> list[Row]:
        return sorted(rows, key=lambda row: str(row.sequence))


class ListIdsCaseFolded(ListBackend):
    """Lists ids through a lower-cased workflow index: 'Flow' lists 'flow''s ids too."""

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        with self.shelf.lock:
            rows = [
                row
                for row in self.shelf.rows
                if row.record.workflow_name.casefold() == workflow_name.casefold()
                and graph_signature_hash in (None, row.record.graph_signature_hash)
                and (include_nested or row.record.container_id is None)
            ]
            return [row.record.checkpoint_id for row in self._ordered(rows)]


class WorkflowNamesNfc(ListBackend):
    """Lists workflow names NFC-normalised for display: an NFD name comes back as another name."""

    async def workflow_names(self) -> list[str]:
        return sorted({unicodedata.normalize("NFC", name) for name in await super().workflow_names()})


class IdsStripped(ListBackend):
    """Matches ids with surrounding whitespace trimmed (a CHAR column that pads and trims)."""

    def _same_id(self, stored: CheckpointID, asked: CheckpointID) -> bool:
        return stored.strip() == asked.strip()


class LatestCacheSurvivesPrune(ListBackend):
    """Caches latest per workflow; inserts, deletes and overwrites invalidate it, prunes and
    workflow deletes do not."""

    def _cache(self) -> dict[tuple[str, str | None], StoredBody]:
        cache: dict[tuple[str, str | None], StoredBody] = self.shelf.extras.setdefault("latest", {})
        return cache

    def _forget(self, workflow_name: str) -> None:
        for key in [k for k in self._cache() if k[0] == workflow_name]:
            del self._cache()[key]

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self.shelf.lock:
            for record in records:
                self._forget(record.workflow_name)
        return await super().insert(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        with self.shelf.lock:
            for record in records:
                self._forget(record.workflow_name)
        return await super().insert_fenced(records, expected_latest_id)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.shelf.lock:
            row = self._find(checkpoint_id)
            if row is not None:
                self._forget(row.record.workflow_name)
        return await super().remove(checkpoint_id)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.shelf.lock:
            self._cache().clear()
        return await super().overwrite_body(checkpoint_id, body, digest)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        key = (workflow_name, graph_signature_hash)
        with self.shelf.lock:
            if key in self._cache():
                return self._cache()[key]
        found = await super().latest(workflow_name, graph_signature_hash)
        if found is not None:
            with self.shelf.lock:
                self._cache()[key] = found
        return found


class SignatureIndexOutlivesDelete(ListBackend):
    """Keeps a (workflow, signature) -> ids index for filtered id listings; only
    delete_workflow clears it, so a deleted or pruned id stays listed by signature."""

    def _index(self) -> dict[tuple[str, str], list[CheckpointID]]:
        index: dict[tuple[str, str], list[CheckpointID]] = self.shelf.extras.setdefault("by_signature", {})
        return index

    def _insert_locked(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = super()._insert_locked(records)
        if result is InsertResult.INSERTED:
            top = records[0]
            self._index().setdefault((top.workflow_name, top.graph_signature_hash), []).append(
                top.checkpoint_id
            )
        return result

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        if graph_signature_hash is None or include_nested:
            return await super().list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        with self.shelf.lock:
            return list(self._index().get((workflow_name, graph_signature_hash), []))

    async def delete_workflow(self, workflow_name: str) -> int:
        with self.shelf.lock:
            for key in [k for k in self._index() if k[0] == workflow_name]:
                del self._index()[key]
        return await super().delete_workflow(workflow_name)


class RootRivalsOverFilteredRows(ListBackend):
    """Filters the workflow's rows by signature before choosing the head and its rivals, so a
    record of another signature no longer ends a run of root rivals."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        with self.shelf.lock:
            tops = [
                r for r in self._tops(workflow_name) if graph_signature_hash in (None, r.graph_signature_hash)
            ]
            head = latest_record(tops)
            if head is None:
                return None
            rivals = [
                StoredBody(r.checkpoint_id, r.body, entry=r.index_entry()) for r in rivals_of(tops, head)
            ]
            return StoredBody(head.checkpoint_id, head.body, entry=head.index_entry(), rivals=rivals)


class WalkNestedAsRoots(ListBackend):
    """Walks only top-level links (a recursive query over the checkpoints table alone): a nested
    record reads as a root."""

    def _link(self, record: CheckpointRecord) -> CheckpointID | None:
        return None if record.container_id is not None else record.previous_checkpoint_id


class PruneKeepsOneFewer(ListBackend):
    """Counts the head among the ``keep_last - 1`` others: keeps one checkpoint too few."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await super().prune(workflow_name, keep_last - 1 if keep_last > 1 else keep_last)


class BodyCutAt64KiB(ListBackend):
    """Stores at most 64 KiB of a body (a BLOB column's limit), keeping the saved digest."""

    def _insert_locked(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return super()._insert_locked([r.replaced(body=r.body[:65536], digest=r.digest) for r in records])


class ListBodiesReuseOneBuffer(ListBackend):
    """Copies each listed body into one read buffer it reuses: every body listed is the last."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        buffer = bytearray()
        listed: list[StoredBody] = []
        with self.shelf.lock:
            for row in self._listed(workflow_name, graph_signature_hash, include_nested):
                buffer[:] = row.record.body
                aliased = cast("bytes", buffer)
                listed.append(StoredBody(row.record.checkpoint_id, aliased, entry=row.record.index_entry()))
        return listed


class CloseReleasesSharedStore(ListBackend):
    """close() frees the rows to release memory, though every other handle shares them."""

    async def close(self) -> None:
        with self.shelf.lock:
            self.shelf.rows.clear()


class NestedDeleteRaisesValueError(ListBackend):
    """Refuses a nested id's delete with ValueError, not NestedCheckpointDeletionError."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.shelf.lock:
            row = self._find(checkpoint_id)
            if row is not None and row.record.container_id is not None:
                raise ValueError(f"{checkpoint_id!r} is nested in {row.record.container_id!r}")
        return await super().remove(checkpoint_id)


class CounterRaceAcrossAwait(ListBackend):
    """Reads the workflow's counter, awaits (persisting it elsewhere), then writes counter and
    rows: concurrent inserts through different handles get the same sequence."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self.shelf.lock:
            existing = self._find(records[0].checkpoint_id)
            if existing is not None:
                return InsertResult.of_stored_digest(existing.record.digest, records[0])
            counters = dict(self.shelf.counters)
            numbered: list[Row] = []
            for record in records:
                counters[record.workflow_name] = counters.get(record.workflow_name, 0) + 1
                numbered.append(Row(counters[record.workflow_name], record))
        await asyncio.sleep(0)
        with self.shelf.lock:
            if self._find(records[0].checkpoint_id) is not None:
                existing = self._find(records[0].checkpoint_id)
                assert existing is not None
                return InsertResult.of_stored_digest(existing.record.digest, records[0])
            for record in records[1:]:
                if self._find(record.checkpoint_id) is not None:
                    raise nested_id_conflict(records, record.checkpoint_id)
            for row in numbered:
                self.shelf.counters[row.record.workflow_name] = row.sequence
                self.shelf.rows.append(row)
        return InsertResult.INSERTED


class FenceOnHandleMemo(ListBackend):
    """Fences on the head this handle last inserted (sparing the scan); another handle's saves
    and every delete go unseen."""

    def __init__(self, shelf: Shelf | None = None) -> None:
        super().__init__(shelf)
        self.last_inserted: dict[str, CheckpointID] = {}

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        workflow_name = records[0].workflow_name
        if workflow_name not in self.last_inserted:
            return await self._fence_and_note(records, expected_latest_id)
        with self.shelf.lock:
            head_id = self.last_inserted[workflow_name]
            existing = self._find(records[0].checkpoint_id)
            if existing is not None:
                return FenceCheck(head_id, InsertResult.of_stored_digest(existing.record.digest, records[0]))
            if head_id != expected_latest_id:
                return FenceCheck(head_id, None)
            self._insert_locked(records)
        self.last_inserted[workflow_name] = records[0].checkpoint_id
        return None

    async def _fence_and_note(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        check = await super().insert_fenced(records, expected_latest_id)
        if check is None:
            self.last_inserted[records[0].workflow_name] = records[0].checkpoint_id
        return check


class RecordsAfterCaseFoldedOrder(ListBackend):
    """Pages the index in case-insensitive order but resumes after ``after`` by exact comparison:
    an id that sorts differently under the two orders is skipped or repeated."""

    async def records_after(self, after: CheckpointID | None, limit: int) -> Sequence[CheckpointInfo]:
        with self.shelf.lock:
            rows = sorted(self.shelf.rows, key=lambda row: row.record.checkpoint_id.casefold())
            later = [row for row in rows if after is None or row.record.checkpoint_id > after]
            return [self._info(row) for row in later[:limit]]


class NestedBodiesOneLevel(ListBackend):
    """Returns the bodies of direct children only, not of their own nested records."""

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        with self.shelf.lock:
            wanted = set(checkpoint_ids)
            return {
                r.record.checkpoint_id: r.record.body
                for r in self.shelf.rows
                if r.record.container_id in wanted
            }


class ListBodiesTopLevelOnly(ListBackend):
    """Honours ``include_nested`` in list_ids but not in list_bodies."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await super().list_bodies(workflow_name, graph_signature_hash, include_nested=False)


class LoadMatchesNfc(ListBackend):
    """load compares ids NFC-normalised: an NFD id finds the NFC record."""

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        asked = unicodedata.normalize("NFC", checkpoint_id)
        with self.shelf.lock:
            for row in self.shelf.rows:
                if unicodedata.normalize("NFC", row.record.checkpoint_id) == asked:
                    return _stored(row)
        return None


class OverwriteReinserts(ListBackend):
    """Rewrites a body as delete plus insert: the record takes a new sequence and moves last."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.shelf.lock:
            row = self._find(checkpoint_id)
            if row is None:
                return False
            self.shelf.rows.remove(row)
            workflow_name = row.record.workflow_name
            self.shelf.counters[workflow_name] += 1
            record = row.record.replaced(body=body, digest=row.record.digest)
            self.shelf.rows.append(Row(self.shelf.counters[workflow_name], record))
            return True


class InfoSequenceIsPosition(ListBackend):
    """Reports a record's sequence as its place among its workflow's records (a ROW_NUMBER()):
    it changes when an earlier record is deleted."""

    def _info(self, row: Row) -> CheckpointInfo:
        same = [r for r in self.shelf.rows if r.record.workflow_name == row.record.workflow_name]
        place = [r.record.checkpoint_id for r in self._ordered(same)].index(row.record.checkpoint_id) + 1
        return row.record.info(place)


class PruneAllIsDeleteWorkflow(ListBackend):
    """Prunes with ``keep_last=0`` by deleting the workflow: no tombstones, and the old ones go."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        if keep_last == 0:
            return await self.delete_workflow(workflow_name)
        return await super().prune(workflow_name, keep_last)


class WalkWithoutTombstones(ListBackend):
    """Adds prune to the worked example but keeps its walk, which never reports a tombstone."""

    def _walk_tombstones(self, unreached: CheckpointID | None) -> frozenset[CheckpointID]:
        return frozenset()


class LatestAmongNested(ListBackend):
    """Chooses the head among every record of the workflow, nested ones included."""

    def _tops(self, workflow_name: str) -> list[CheckpointRecord]:
        rows = [row for row in self.shelf.rows if row.record.workflow_name == workflow_name]
        return [row.record for row in self._ordered(rows)]


class SleepsInInsert(ListBackend):
    """Waits for its 'fsync' with time.sleep on the loop's thread."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        time.sleep(0.005)  # noqa: ASYNC251 - the defect: a wait on the loop's thread
        return await super().insert(records)


class InsertAwaitsBetweenRecords(ListBackend):
    """Writes the checkpoint, awaits, then writes its nested records: a cancellation or a
    concurrent read in between sees a container without its children."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self.shelf.lock:
            existing = self._find(records[0].checkpoint_id)
            if existing is not None:
                return InsertResult.of_stored_digest(existing.record.digest, records[0])
            for record in records[1:]:
                if self._find(record.checkpoint_id) is not None:
                    raise nested_id_conflict(records, record.checkpoint_id)
            self._insert_locked(records[:1])
        await asyncio.sleep(0)
        with self.shelf.lock:
            for record in records[1:]:
                counters = self.shelf.counters
                counters[record.workflow_name] = counters.get(record.workflow_name, 0) + 1
                self.shelf.rows.append(Row(counters[record.workflow_name], record))
        return InsertResult.INSERTED


class NewHandleFreshStore(ListBackend):
    """Declares ``shared`` but builds each new handle on a store of its own."""

    def new_handle(self) -> Self:
        return type(self)()


class RefusesControlCharacters(ListBackend):
    """Validates workflow names itself and refuses control characters, the engine's own logs
    included."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        for record in records:
            if any(ord(c) < 0x20 for c in record.workflow_name):
                raise InvalidCheckpointIdError(
                    "workflow_name", record.workflow_name, "control characters are not allowed"
                )
        return await super().insert(records)


class RemoveOneLevel(ListBackend):
    """Deletes a checkpoint with its direct children: grandchildren stay behind."""

    def _drop_family(self, top_id: CheckpointID) -> list[CheckpointID]:
        doomed = {top_id} | {
            r.record.checkpoint_id for r in self.shelf.rows if r.record.container_id == top_id
        }
        self.shelf.rows = [row for row in self.shelf.rows if row.record.checkpoint_id not in doomed]
        return sorted(doomed)


class WorkflowNamesPerRecord(ListBackend):
    """Lists a workflow name once per record, not once per workflow."""

    async def workflow_names(self) -> list[str]:
        with self.shelf.lock:
            return [row.record.workflow_name for row in self.shelf.rows if row.record.container_id is None]


# ---------------------------------------------------------------------------- wrappers


class Wrapper:
    """Delegates everything to an in-memory storage; subclasses redo one method."""

    def __init__(self, inner: Any = None) -> None:
        self._inner = inner if inner is not None else InMemoryCheckpointStorage()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def new_handle(self) -> Any:
        return type(self)(self._inner.new_handle())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.aclose()


class PutWritesDropsTailChunk(Wrapper):
    """Sends writes in chunks of 8 past 8 writes, and the range drops the last partial chunk."""

    async def put_writes(
        self, checkpoint_id: CheckpointID, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None:
        if len(writes) <= 8:
            await self._inner.put_writes(checkpoint_id, writes, workflow_name=workflow_name)
            return
        for start in range(0, len(writes) // 8 * 8, 8):
            await self._inner.put_writes(
                checkpoint_id, writes[start : start + 8], workflow_name=workflow_name
            )


class TimestampsToSeconds(Wrapper):
    """Truncates timestamps to whole seconds before saving (a DATETIME(0) column upstream)."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        try:
            moment = datetime.fromisoformat(checkpoint.timestamp)
        except (TypeError, ValueError):
            return cast("CheckpointID", await self._inner.save(checkpoint, **options))
        trimmed = replace(checkpoint, timestamp=moment.replace(microsecond=0).isoformat())
        return cast("CheckpointID", await self._inner.save(trimmed, **options))


class LatestFallsBackOnCorruption(Wrapper):
    """Resumes from the newest checkpoint that still loads when the latest is corrupted."""

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        try:
            return await self._inner.get_latest(workflow_name=workflow_name, **options)
        except CheckpointCorruptedError:
            ids = await self._inner.list_checkpoint_ids(workflow_name=workflow_name)
            for checkpoint_id in reversed(ids):
                try:
                    return await self._inner.load(checkpoint_id)
                except CheckpointCorruptedError:
                    continue
            return None


class LoadDropsSignatureKeyword(Wrapper):
    """Forwards load without its ``expected_graph_signature_hash``."""

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        return await self._inner.load(checkpoint_id)


class NewHandleIsSelf(Wrapper):
    """Hands itself out as a new handle: closing the 'new' one closes the original."""

    def new_handle(self) -> Any:
        return self


class ListWritesSorted(Wrapper):
    """Returns writes sorted by (task_id, index) instead of in the order first stored."""

    async def list_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> list[PendingWrite]:
        writes = await self._inner.list_writes(checkpoint_id, workflow_name=workflow_name)
        return sorted(writes, key=lambda w: (w.task_id, w.index))


class ListIdsDeduplicatedBySet(Wrapper):
    """Deduplicates listed ids through a set, which loses their order."""

    async def list_checkpoint_ids(self, **options: Any) -> list[CheckpointID]:
        return list(set(await self._inner.list_checkpoint_ids(**options)))


# ---------------------------------------------------------------------------- the batch

BATCH: dict[str, Callable[[], Any]] = {
    "sequence_sorted_as_text": over(SequenceSortedAsText),
    "list_ids_case_folded": over(ListIdsCaseFolded),
    "workflow_names_nfc": over(WorkflowNamesNfc),
    "ids_stripped": over(IdsStripped),
    "latest_cache_survives_prune": over(LatestCacheSurvivesPrune),
    "signature_index_outlives_delete": over(SignatureIndexOutlivesDelete),
    "root_rivals_over_filtered_rows": over(RootRivalsOverFilteredRows),
    "walk_nested_as_roots": over(WalkNestedAsRoots),
    "prune_keeps_one_fewer": over(PruneKeepsOneFewer),
    "body_cut_at_64kib": over(BodyCutAt64KiB),
    "list_bodies_reuse_one_buffer": over(ListBodiesReuseOneBuffer),
    "close_releases_shared_store": over(CloseReleasesSharedStore),
    "nested_delete_raises_value_error": over(NestedDeleteRaisesValueError),
    "counter_race_across_await": over(CounterRaceAcrossAwait),
    "fence_on_handle_memo": over(FenceOnHandleMemo),
    "records_after_case_folded_order": over(RecordsAfterCaseFoldedOrder),
    "nested_bodies_one_level": over(NestedBodiesOneLevel),
    "list_bodies_top_level_only": over(ListBodiesTopLevelOnly),
    "load_matches_nfc": over(LoadMatchesNfc),
    "overwrite_reinserts": over(OverwriteReinserts),
    "info_sequence_is_position": over(InfoSequenceIsPosition),
    "prune_all_is_delete_workflow": over(PruneAllIsDeleteWorkflow),
    "walk_without_tombstones": over(WalkWithoutTombstones),
    "latest_among_nested": over(LatestAmongNested),
    "sleeps_in_insert": over(SleepsInInsert),
    "insert_awaits_between_records": over(InsertAwaitsBetweenRecords),
    "new_handle_fresh_store": over(NewHandleFreshStore),
    "refuses_control_characters": over(RefusesControlCharacters),
    "remove_one_level": over(RemoveOneLevel),
    "workflow_names_per_record": over(WorkflowNamesPerRecord),
    "put_writes_drops_tail_chunk": PutWritesDropsTailChunk,
    "timestamps_to_seconds": TimestampsToSeconds,
    "latest_falls_back_on_corruption": LatestFallsBackOnCorruption,
    "load_drops_signature_keyword": LoadDropsSignatureKeyword,
    "new_handle_is_self": NewHandleIsSelf,
    "list_writes_sorted": ListWritesSorted,
    "list_ids_deduplicated_by_set": ListIdsDeduplicatedBySet,
}
"""Name -> factory of one broken storage."""

HONEST: dict[str, Callable[[], Any]] = {
    "list_backend": over(ListBackend),
    "lru_list_backend": over(LruListBackend),
    "compressed_list_backend": over(CompressedListBackend),
}
"""Unusual but correct storages: they pass the whole kit."""
