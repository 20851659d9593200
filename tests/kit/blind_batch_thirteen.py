"""A thirteenth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/registry.md, docs/integrity.md, docs/conformance.md's prose, examples/ and
the public author API could ship. Four styles:

* ``CasBackend``: content-addressed bodies. A body is cut into fixed-size chunks, each stored once
  under its SHA-256 with a reference count; a record keeps its index fields and the list of its
  chunk keys (its manifest). Saving links the chunks (a chunk already stored gains a reference),
  deleting releases them, and a chunk whose count reaches zero is collected. Batch nine's
  ``Tables`` does the rest, over a mapping that stores records this way;
* ``PartBackend``: a time-partitioned store, like a time-series database: a workflow's records
  are bucketed into partitions of ``PART`` consecutive sequence numbers, each with its own index
  (records in commit order); a global directory says which partition holds an id, listings read
  a workflow's partitions in order, and a partition that empties is dropped;
* ``SealBackend``: a body-transforming wrapper over the built-in SQLite backend on a temporary
  file: every body is compressed (zlib) and encrypted (a SHAKE-256 keystream of the key and a
  random nonce, XORed, with an HMAC-SHA256 tag) before it reaches SQLite, and opened again on
  every read. Keys rotate every ``ROTATE_EVERY`` sealed bodies; a sealed body names its key;
* ``ReplicaBackend``: a leader (the built-in in-memory backend) with two asynchronous read
  replicas fed from the leader's replication log, one entry at a time, one follower a call. A
  read is served by a follower once it has applied the log up to the read's token (the log's
  length when the read starts), else by the leader; every ``FAILOVER_EVERY`` writes a follower
  is promoted to leader once it has caught up.

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_thirteen.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import hmac
import os
import shutil
import tempfile
import threading
import zlib
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self, TypeVar

from conformance import StorageTarget
from storages import CheckpointCorruptedError
from storages.backend import (
    Backend,
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    latest_record,
    pruned_records,
    rivals_of,
)
from storages.contract import Capability, CheckpointID, CheckpointInfo
from storages.memory.backend import MemoryBackend
from storages.sqlite.backend import SQLiteBackend

from .blind_batch_nine import Tables, TableStorage, stored

Entry = tuple[str, Callable[[], StorageTarget], str]
T = TypeVar("T")
Value = tuple[int, CheckpointRecord]

ALL_CAPABILITIES = frozenset(
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


# ====================================================================== a backend over Tables


class TablesBackend(Backend):
    """Every primitive is one of ``Tables``' functions under the tables' lock, after a round
    trip; handles share the tables."""

    capabilities = ALL_CAPABILITIES

    def __init__(self, tables: Tables | None = None) -> None:
        self.tables = tables if tables is not None else self.new_tables()

    def new_tables(self) -> Tables:
        return Tables()

    def describe(self) -> str:
        return "tables://"

    def new_handle(self) -> Self:
        return type(self)(self.tables)

    async def step(self, call: Callable[[Tables], T]) -> T:
        await asyncio.sleep(0)  # a round trip
        with self.tables.lock:
            return call(self.tables)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.step(lambda t: t.insert(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.step(lambda t: t.insert_fenced(records, expected_latest_id))

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.step(lambda t: t.remove(checkpoint_id))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.step(lambda t: t.prune(workflow_name, keep_last))

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.step(lambda t: t.delete_workflow(workflow_name))

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.step(lambda t: t.overwrite_body(checkpoint_id, body, digest))

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.step(lambda t: t.load(checkpoint_id))

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.step(lambda t: t.latest(workflow_name, graph_signature_hash))

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.step(lambda t: t.list_bodies(workflow_name, graph_signature_hash, include_nested))

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self.step(lambda t: t.list_ids(workflow_name, graph_signature_hash, include_nested))

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.step(lambda t: t.nested_bodies(checkpoint_ids))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.step(lambda t: t.nested_ids(checkpoint_id))

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.step(lambda t: t.walk(checkpoint_id, max_depth, with_bodies))

    async def workflow_names(self) -> list[str]:
        return await self.step(lambda t: t.workflow_names())

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.step(lambda t: t.info(checkpoint_id))

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self.step(lambda t: t.records_of(workflow_name))

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self.step(lambda t: t.tombstones_of(workflow_name))


def tables_target(backend_class: type[TablesBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== content-addressed chunks

CHUNK = 64
"""Bytes per chunk: small, so bodies that share runs of bytes share chunks."""


def chunk_key(chunk: bytes) -> str:
    return hashlib.sha256(chunk).hexdigest()


Manifest = tuple[int, CheckpointRecord, tuple[str, ...]]


class ChunkRecords(MutableMapping[CheckpointID, Value]):
    """Records as manifests over shared, reference-counted chunks."""

    def __init__(self) -> None:
        self.chunks: dict[str, list[Any]] = {}
        """key -> [chunk bytes, reference count]"""
        self.manifests: dict[CheckpointID, Manifest] = {}

    # ------------------------------------------------------------ chunks

    def split(self, body: bytes) -> list[bytes]:
        return [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)]

    def link(self, body: bytes) -> tuple[str, ...]:
        keys = []
        for chunk in self.split(body):
            key = chunk_key(chunk)
            found = self.chunks.get(key)
            if found is None:
                self.chunks[key] = [chunk, 1]
            else:
                found[1] += 1
            keys.append(key)
        return tuple(keys)

    def release(self, keys: Sequence[str]) -> None:
        for key in keys:
            found = self.chunks[key]
            found[1] -= 1
            if found[1] <= 0:
                del self.chunks[key]

    def assemble(self, checkpoint_id: CheckpointID, keys: Sequence[str]) -> bytes:
        try:
            return b"".join(self.chunks[key][0] for key in keys)
        except KeyError:
            raise CheckpointCorruptedError(checkpoint_id, "a chunk of its body is gone") from None

    # ------------------------------------------------------------ the mapping

    def __getitem__(self, checkpoint_id: CheckpointID) -> Value:
        sequence, record, keys = self.manifests[checkpoint_id]
        return sequence, record.replaced(body=self.assemble(checkpoint_id, keys), digest=record.digest)

    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        sequence, record = value
        keys = self.link(record.body)  # before releasing the old ones: they may be the same
        old = self.manifests.get(checkpoint_id)
        self.manifests[checkpoint_id] = (sequence, record.replaced(body=b"", digest=record.digest), keys)
        if old is not None:
            self.release(old[2])

    def __delitem__(self, checkpoint_id: CheckpointID) -> None:
        self.release(self.manifests.pop(checkpoint_id)[2])

    def __iter__(self) -> Iterator[CheckpointID]:
        return iter(list(self.manifests))

    def __len__(self) -> int:
        return len(self.manifests)


class CasBackend(TablesBackend):
    """Bodies cut into 64-byte chunks stored once by their SHA-256 with reference counts; a
    record is its index fields and its chunk keys. Saving links chunks, deleting (and prune,
    and a raw overwrite of the old body) releases them, and a chunk no record refers to is
    collected."""

    def new_tables(self) -> Tables:
        return Tables(self.new_records())

    def new_records(self) -> ChunkRecords:
        return ChunkRecords()

    def describe(self) -> str:
        return "cas://"

    @property
    def chunked(self) -> ChunkRecords:
        records = self.tables.records
        assert isinstance(records, ChunkRecords)
        return records


class FreesSharedChunks(ChunkRecords):
    def release(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.chunks.pop(key, None)


class CasDeleteFreesSharedChunks(CasBackend):
    """Releasing a record deletes its chunks outright, without looking at their reference
    counts: a record sharing a chunk with a deleted one loses it."""

    def new_records(self) -> ChunkRecords:
        return FreesSharedChunks()


class DedupWithoutReference(ChunkRecords):
    def link(self, body: bytes) -> tuple[str, ...]:
        keys = []
        for chunk in self.split(body):
            key = chunk_key(chunk)
            self.chunks.setdefault(key, [chunk, 1])
            keys.append(key)
        return tuple(keys)


class CasDedupWithoutReference(CasBackend):
    """A chunk already stored is reused without counting the new reference: once the first
    record holding it is deleted, the chunk is collected under the others."""

    def new_records(self) -> ChunkRecords:
        return DedupWithoutReference()


class OverwriteInPlace(ChunkRecords):
    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        old = self.manifests.get(checkpoint_id)
        if old is None:
            super().__setitem__(checkpoint_id, value)
            return
        sequence, record = value
        pieces = self.split(record.body)
        keys = list(old[2][: len(pieces)])
        for i, piece in enumerate(pieces):
            if i < len(keys):
                self.chunks[keys[i]][0] = piece
            else:
                keys += self.link(piece)
        self.manifests[checkpoint_id] = (
            sequence,
            record.replaced(body=b"", digest=record.digest),
            tuple(keys),
        )


class CasOverwriteInPlace(CasBackend):
    """A raw overwrite writes the new bytes into the record's existing chunks, in place: every
    record sharing one of those chunks changes too."""

    def new_records(self) -> ChunkRecords:
        return OverwriteInPlace()


class CountsOncePerRecord(ChunkRecords):
    def link(self, body: bytes) -> tuple[str, ...]:
        keys = tuple(chunk_key(chunk) for chunk in self.split(body))
        pieces = dict(zip(keys, self.split(body), strict=True))
        for key in set(keys):
            found = self.chunks.get(key)
            if found is None:
                self.chunks[key] = [pieces[key], 1]
            else:
                found[1] += 1
        return keys


class CasRepeatedChunkCountedOnce(CasBackend):
    """A chunk repeated within one body gains one reference for the record, but releasing the
    record drops one per occurrence: a chunk shared with another record is collected early."""

    def new_records(self) -> ChunkRecords:
        return CountsOncePerRecord()


class PaddedChunks(ChunkRecords):
    def split(self, body: bytes) -> list[bytes]:
        pieces = super().split(body)
        if pieces:
            pieces[-1] = pieces[-1].ljust(CHUNK, b"\0")
        return pieces

    def assemble(self, checkpoint_id: CheckpointID, keys: Sequence[str]) -> bytes:
        return super().assemble(checkpoint_id, keys).rstrip(b"\0")


class CasLastChunkPadded(CasBackend):
    """Chunks are fixed blocks: the last is padded with NUL bytes, stripped again on reading, so
    a body that ends in NUL bytes comes back without them."""

    def new_records(self) -> ChunkRecords:
        return PaddedChunks()


class CasSizeFromChunkCount(CasBackend):
    """An index entry's size is the record's chunk count times the chunk size, not its body's
    length."""

    def sized(self, info: CheckpointInfo) -> CheckpointInfo:
        keys = self.chunked.manifests[info.checkpoint_id][2]
        return replace(info, size=len(keys) * CHUNK)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        def read(t: Tables) -> CheckpointInfo | None:
            found = t.info(checkpoint_id)
            return None if found is None else self.sized(found)

        return await self.step(read)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self.step(lambda t: [self.sized(i) for i in t.records_of(workflow_name)])


class CasBodyCache(CasBackend):
    """Each handle caches the bodies it loaded by id (a content-addressed body never changes)
    and drops an entry only on its own delete or raw overwrite."""

    def __init__(self, tables: Tables | None = None) -> None:
        super().__init__(tables)
        self.cache: dict[CheckpointID, StoredBody] = {}

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = self.cache.get(checkpoint_id)
        if found is None:
            found = await super().load(checkpoint_id)
            if found is not None:
                self.cache[checkpoint_id] = found
        return found

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        self.cache.pop(checkpoint_id, None)
        return await super().remove(checkpoint_id)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        self.cache.pop(checkpoint_id, None)
        return await super().overwrite_body(checkpoint_id, body, digest)


class CasManifestThenChunks(CasBackend):
    """load reads the manifest, then the chunks in a second round trip: a delete in between
    collects them, and the load reports the checkpoint corrupted instead of absent."""

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = await self.step(lambda t: self.chunked.manifests.get(checkpoint_id))
        if found is None:
            return None
        _, record, keys = found
        body = await self.step(lambda t: self.chunked.assemble(checkpoint_id, keys))
        return stored(record.replaced(body=body, digest=record.digest))


class StagedChunks(ChunkRecords):
    def stage(self, body: bytes) -> None:
        for chunk in self.split(body):
            self.chunks.setdefault(chunk_key(chunk), [chunk, 0])

    def link(self, body: bytes) -> tuple[str, ...]:
        keys = tuple(chunk_key(chunk) for chunk in self.split(body))
        for key in keys:
            self.chunks[key][1] += 1  # uploaded by stage(): only the reference is new
        return keys

    def sweep(self) -> None:
        for key in [k for k, (_, refs) in self.chunks.items() if refs <= 0]:
            del self.chunks[key]


class CasUploadThenLink(CasBackend):
    """A save uploads its chunks unreferenced, then links its manifest in a second step; the
    collector, run after every delete, sweeps every unreferenced chunk, so a delete between the
    two steps collects the chunks of a save in flight."""

    def new_records(self) -> ChunkRecords:
        return StagedChunks()

    @property
    def staged(self) -> StagedChunks:
        records = self.tables.records
        assert isinstance(records, StagedChunks)
        return records

    async def upload(self, records: Sequence[CheckpointRecord]) -> None:
        def stage(t: Tables) -> None:
            for record in records:
                self.staged.stage(record.body)

        await self.step(stage)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await self.upload(records)
        return await super().insert(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        await self.upload(records)
        return await super().insert_fenced(records, expected_latest_id)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        await self.step(lambda t: self.staged.stage(body))
        return await super().overwrite_body(checkpoint_id, body, digest)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        def remove(t: Tables) -> bool:
            removed = t.remove(checkpoint_id)
            self.staged.sweep()
            return removed

        return await self.step(remove)


# ====================================================================== partitions

PART = 3
"""Consecutive sequence numbers per partition: small, so histories cross many boundaries."""

Where = tuple[str, int]


class Partitions(MutableMapping[CheckpointID, Value]):
    """Records bucketed by (workflow, partition number), each partition an index of its records
    in commit order, with a directory of where each id is."""

    def __init__(self) -> None:
        self.directory: dict[CheckpointID, Where] = {}
        self.parts: dict[Where, dict[CheckpointID, Value]] = {}
        self.created: list[Where] = []

    def where(self, sequence: int, record: CheckpointRecord) -> Where:
        return record.workflow_name, (sequence - 1) // PART

    def partitions_of(self, workflow_name: str) -> list[int]:
        return sorted(p for w, p in self.parts if w == workflow_name)

    def part(self, where: Where) -> dict[CheckpointID, Value]:
        if where not in self.parts:
            self.parts[where] = {}
            self.created.append(where)
        return self.parts[where]

    def drop_from(self, where: Where, checkpoint_id: CheckpointID) -> None:
        part = self.parts[where]
        del part[checkpoint_id]
        if not part:
            del self.parts[where]
            self.created.remove(where)

    def __getitem__(self, checkpoint_id: CheckpointID) -> Value:
        return self.parts[self.directory[checkpoint_id]][checkpoint_id]

    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        where = self.where(*value)
        old = self.directory.get(checkpoint_id)
        if old is not None and old != where:
            self.drop_from(old, checkpoint_id)
        self.part(where)[checkpoint_id] = value
        self.directory[checkpoint_id] = where

    def __delitem__(self, checkpoint_id: CheckpointID) -> None:
        self.drop_from(self.directory.pop(checkpoint_id), checkpoint_id)

    def __iter__(self) -> Iterator[CheckpointID]:
        return iter(list(self.directory))

    def __len__(self) -> int:
        return len(self.directory)


class PartTables(Tables):
    """Listings read the workflow's partitions in order, each in its own index's order."""

    @property
    def partitions(self) -> Partitions:
        assert isinstance(self.records, Partitions)
        return self.records

    def rows_in(
        self,
        workflow_name: str,
        numbers: Collection[int],
        graph_signature_hash: str | None,
        include_nested: bool,
    ) -> list[CheckpointRecord]:
        found = []
        for number in numbers:
            for _, record in self.partitions.parts[(workflow_name, number)].values():
                if (include_nested or record.container_id is None) and graph_signature_hash in (
                    None,
                    record.graph_signature_hash,
                ):
                    found.append(record)
        return found

    def rows(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        return self.rows_in(
            workflow_name, self.partitions.partitions_of(workflow_name), graph_signature_hash, include_nested
        )


class PartBackend(TablesBackend):
    """A workflow's records bucketed into partitions of three consecutive sequence numbers, each
    with its own index in commit order; a directory finds an id's partition, listings read the
    partitions in order, and an empty partition is dropped."""

    def new_tables(self) -> Tables:
        return self.tables_class()(self.new_partitions())

    def tables_class(self) -> type[PartTables]:
        return PartTables

    def new_partitions(self) -> Partitions:
        return Partitions()

    def describe(self) -> str:
        return "partitioned://"


class MetaDroppedTables(PartTables):
    def drop(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        names = {self.records[i][1].workflow_name for i in self.family(checkpoint_id) if i in self.records}
        gone = super().drop(checkpoint_id)
        for name in names:
            if not self.partitions.partitions_of(name):
                self.sequences.pop(name, None)
        return gone


class PartMetaDroppedWithLastPartition(PartBackend):
    """A workflow's metadata (its sequence counter) lives with its partitions and is dropped
    when the last one empties: the next save numbers from one again."""

    def tables_class(self) -> type[PartTables]:
        return MetaDroppedTables


class TextOrderPartitions(Partitions):
    def partitions_of(self, workflow_name: str) -> list[int]:
        return sorted((p for w, p in self.parts if w == workflow_name), key=str)


class PartNamesSortedAsText(PartBackend):
    """A workflow's partitions are read in the order of their names as text: partition 10 comes
    before partition 2."""

    def new_partitions(self) -> Partitions:
        return TextOrderPartitions()


class NewestPartitionTables(PartTables):
    def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        for number in reversed(self.partitions.partitions_of(workflow_name)):
            rows = self.rows_in(workflow_name, [number], None, False)
            head = latest_record(rows, graph_signature_hash)
            if head is not None:
                return replace(stored(head), rivals=[stored(r) for r in rivals_of(rows, head)])
        return None


class PartLatestFromNewestPartition(PartBackend):
    """latest looks through the partitions newest first and answers from the first holding a
    record of the signature: the lineage and the rivals are followed within that partition."""

    def tables_class(self) -> type[PartTables]:
        return NewestPartitionTables


class HeadPartitionRivalsTables(PartTables):
    def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        head = latest_record(self.top_rows(workflow_name, None), graph_signature_hash)
        if head is None:
            return None
        number = self.partitions.directory[head.checkpoint_id][1]
        rows = self.rows_in(workflow_name, [number], None, False)
        return replace(stored(head), rivals=[stored(r) for r in rivals_of(rows, head)])


class PartRivalsFromHeadPartition(PartBackend):
    """latest finds the head across partitions but its rivals only in the head's partition."""

    def tables_class(self) -> type[PartTables]:
        return HeadPartitionRivalsTables


class WholePartitionPruneTables(PartTables):
    def prune(self, workflow_name: str, keep_last: int) -> int:
        rows = self.top_rows(workflow_name, None)
        doomed = pruned_records(rows, keep_last)
        doomed_ids = {r.checkpoint_id for r in doomed}
        kept_parts = {
            self.partitions.directory[r.checkpoint_id] for r in rows if r.checkpoint_id not in doomed_ids
        }
        doomed = [r for r in doomed if self.partitions.directory[r.checkpoint_id] not in kept_parts]
        marks = self.tombstones.setdefault(workflow_name, {})
        for record in doomed:
            for gone in self.drop(record.checkpoint_id):
                marks[gone] = None
        return len(doomed)


class PartPruneWholePartitions(PartBackend):
    """prune drops whole partitions only: a partition holding a kept record keeps its older
    records too."""

    def tables_class(self) -> type[PartTables]:
        return WholePartitionPruneTables


class TombstonesInPartitionTables(PartTables):
    def prune(self, workflow_name: str, keep_last: int) -> int:
        before = {i: w for i, w in self.partitions.directory.items()}
        count = super().prune(workflow_name, keep_last)
        marks = self.tombstones.get(workflow_name, {})
        for gone in list(marks):
            where = before.get(gone)
            if where is not None and where not in self.partitions.parts:
                del marks[gone]
        return count


class PartTombstonesInPartition(PartBackend):
    """A pruned id's tombstone is kept in its partition's index and goes with the partition when
    prune empties it."""

    def tables_class(self) -> type[PartTables]:
        return TombstonesInPartitionTables


class OverwriteToNewestTables(PartTables):
    def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        found = self.records.get(checkpoint_id)
        if found is None:
            return False
        sequence, old = found
        new = old.replaced(body=body, digest=old.digest)
        p = self.partitions
        p.drop_from(p.directory[checkpoint_id], checkpoint_id)
        numbers = p.partitions_of(old.workflow_name)
        where = (old.workflow_name, numbers[-1] if numbers else (sequence - 1) // PART)
        p.part(where)[checkpoint_id] = (sequence, new)
        p.directory[checkpoint_id] = where
        return True


class PartOverwriteToNewestPartition(PartBackend):
    """A raw overwrite is written, like every write, to the workflow's newest partition, keeping
    its sequence number: the overwritten record is listed after the newer ones."""

    def tables_class(self) -> type[PartTables]:
        return OverwriteToNewestTables


RECENT = 8


class RecentPartitions(Partitions):
    def __getitem__(self, checkpoint_id: CheckpointID) -> Value:
        where = self.directory[checkpoint_id]
        if where not in self.created[-RECENT:]:
            raise KeyError(checkpoint_id)
        return super().__getitem__(checkpoint_id)


class PartLookupInRecentPartitions(PartBackend):
    """A lookup by id searches only the eight partitions created last, store-wide: an older
    checkpoint is not found, nor seen by a re-save of its id."""

    def new_partitions(self) -> Partitions:
        return RecentPartitions()


class WalkInPartitionTables(PartTables):
    def walk(self, checkpoint_id: CheckpointID, max_depth: int, with_bodies: bool) -> WalkRecords:
        walked = super().walk(checkpoint_id, max_depth, with_bodies)
        start = self.partitions.directory.get(checkpoint_id)
        links: dict[CheckpointID, CheckpointID | None] = {}
        for each, previous in walked.links.items():
            if self.partitions.directory.get(each) != start:
                break
            links[each] = previous
        bodies: dict[CheckpointID, bytes] = {}
        if with_bodies:
            bodies = {i: self.records[i][1].body for i in links}
            bodies.update(self.nested_bodies(list(links)))
        return WalkRecords(links, bodies, frozenset())


class PartWalkStopsAtPartitionEdge(PartBackend):
    """A walk follows the partition's own index of previous ids: it stops where the chain
    crosses into an older partition."""

    def tables_class(self) -> type[PartTables]:
        return WalkInPartitionTables


class ContainerPartitions(Partitions):
    def where(self, sequence: int, record: CheckpointRecord) -> Where:
        if record.container_id is not None and record.container_id in self.directory:
            return self.directory[record.container_id][0], (sequence - 1) // PART
        return super().where(sequence, record)


class PartNestedInContainerPartition(PartBackend):
    """A nested record is filed in its container's workflow's partition (by its own sequence
    number), not under its own workflow."""

    def new_partitions(self) -> Partitions:
        return ContainerPartitions()


# ====================================================================== compressed and encrypted

ROTATE_EVERY = 16
"""Sealed bodies per key: the keyring adds a key after this many."""

MAGIC = b"S1"
NONCE = 12
TAG = 16
DECOMPRESS_CAP = 256 * 1024


@dataclass
class Keyring:
    """The store's keys (id -> key) and the one new bodies are sealed with, shared by handles."""

    keys: dict[int, bytes] = field(default_factory=lambda: {0: os.urandom(32)})
    current: int = 0
    sealed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def for_sealing(self) -> tuple[int, bytes]:
        with self.lock:
            self.sealed += 1
            if self.sealed % ROTATE_EVERY == 0:
                self.current = (self.current + 1) % 256
                self.keys[self.current] = os.urandom(32)
            return self.current, self.keys[self.current]


def xor(data: bytes, key: bytes, nonce: bytes) -> bytes:
    stream = hashlib.shake_256(key + nonce).digest(len(data))
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(len(data), "big")


SQLITE_CAPABILITIES = SQLiteBackend.capabilities - {Capability.DURABLE}

TEMP_DIRS: list[str] = []


@atexit.register
def _remove_temp_dirs() -> None:
    for path in TEMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)


def temp_sqlite() -> SQLiteBackend:
    path = tempfile.mkdtemp(prefix="blind13-")
    TEMP_DIRS.append(path)
    return SQLiteBackend(os.path.join(path, "store.db"))


class SealBackend(Backend):
    """Every body is compressed and encrypted (zlib, then a SHAKE-256 keystream of a rotating
    key and a random nonce, with an HMAC tag) before it reaches the built-in SQLite backend,
    and opened on every read; a sealed body names its key, and the store's keyring keeps them
    all. Digests are the plain body's, so a re-save compares what was saved."""

    capabilities = SQLITE_CAPABILITIES
    orders_inserts = True  # the inner backend's queue order: sealing never awaits

    def __init__(self, inner: SQLiteBackend | None = None, keyring: Keyring | None = None) -> None:
        self.inner = inner if inner is not None else temp_sqlite()
        self.keyring = keyring if keyring is not None else Keyring()

    def describe(self) -> str:
        return "sealed+" + self.inner.describe()

    def new_handle(self) -> Self:
        return type(self)(self.inner.new_handle(), self.keyring)

    async def open(self, operation: str) -> None:
        await self.inner.open(operation)

    async def close(self) -> None:
        await self.inner.close()

    async def follow_loop(self) -> None:
        await self.inner.follow_loop()

    # ------------------------------------------------------------ the transform

    def seal(self, body: bytes) -> bytes:
        key_id, key = self.keyring.for_sealing()
        nonce = os.urandom(NONCE)
        head = MAGIC + bytes([key_id]) + nonce
        sealed = head + xor(zlib.compress(body), key, nonce)
        return sealed + hmac.new(key, sealed, hashlib.sha256).digest()[:TAG]

    def key_for(self, key_id: int) -> bytes | None:
        return self.keyring.keys.get(key_id)

    def decompress(self, data: bytes) -> bytes:
        return zlib.decompress(data)

    def unseal(self, checkpoint_id: CheckpointID, sealed: bytes) -> bytes:
        if len(sealed) < len(MAGIC) + 1 + NONCE + TAG or not sealed.startswith(MAGIC):
            raise CheckpointCorruptedError(checkpoint_id, "not a sealed body")
        key = self.key_for(sealed[len(MAGIC)])
        if key is None:
            raise CheckpointCorruptedError(checkpoint_id, "sealed with an unknown key")
        body, tag = sealed[:-TAG], sealed[-TAG:]
        if not hmac.compare_digest(hmac.new(key, body, hashlib.sha256).digest()[:TAG], tag):
            raise CheckpointCorruptedError(checkpoint_id, "its seal does not verify")
        nonce = body[len(MAGIC) + 1 : len(MAGIC) + 1 + NONCE]
        try:
            return self.decompress(xor(body[len(MAGIC) + 1 + NONCE :], key, nonce))
        except zlib.error as e:
            raise CheckpointCorruptedError(checkpoint_id, f"does not decompress: {e}") from None

    def sealed(self, record: CheckpointRecord) -> CheckpointRecord:
        return record.replaced(body=self.seal(record.body), digest=record.digest)

    def sealed_all(self, records: Sequence[CheckpointRecord]) -> list[CheckpointRecord]:
        return [self.sealed(r) for r in records]

    def opened(self, found: StoredBody) -> StoredBody:
        return replace(
            found,
            body=self.unseal(found.checkpoint_id, found.body),
            nested=self.opened_map(found.nested) if found.nested is not None else None,
            rivals=self.opened_rivals(found.rivals),
        )

    def opened_rivals(self, rivals: Sequence[StoredBody]) -> list[StoredBody]:
        return [self.opened(r) for r in rivals]

    def opened_map(self, bodies: Mapping[CheckpointID, bytes]) -> dict[CheckpointID, bytes]:
        return {i: self.unseal(i, b) for i, b in bodies.items()}

    # ------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.inner.insert(self.sealed_all(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.inner.insert_fenced(self.sealed_all(records), expected_latest_id)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.inner.remove(checkpoint_id)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.inner.prune(workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.inner.delete_workflow(workflow_name)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.inner.overwrite_body(checkpoint_id, self.seal(body), digest)

    # ------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = await self.inner.load(checkpoint_id)
        return None if found is None else self.opened(found)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        found = await self.inner.latest(workflow_name, graph_signature_hash)
        return None if found is None else self.opened(found)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        found = await self.inner.list_bodies(
            workflow_name, graph_signature_hash, include_nested=include_nested
        )
        return [self.opened(b) for b in found]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return list(
            await self.inner.list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        )

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return self.opened_map(await self.inner.nested_bodies(checkpoint_ids))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.inner.nested_ids(checkpoint_id)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        found = await self.inner.walk(checkpoint_id, max_depth, with_bodies=with_bodies)
        return WalkRecords(found.links, self.opened_map(found.bodies), found.tombstones)

    async def workflow_names(self) -> list[str]:
        return list(await self.inner.workflow_names())

    async def sized(self, info: CheckpointInfo) -> CheckpointInfo | None:
        """The entry with the plain body's size (what ``read_raw_body`` returns)."""
        found = await self.inner.load(info.checkpoint_id)
        return None if found is None else replace(info, size=len(self.unseal(info.checkpoint_id, found.body)))

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        found = await self.inner.info(checkpoint_id)
        return None if found is None else await self.sized(found)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        found = [await self.sized(i) for i in await self.inner.records(workflow_name)]
        return [i for i in found if i is not None]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self.inner.tombstones(workflow_name)


class SealDigestOfSealedBody(SealBackend):
    """A sealed record's digest is taken of the sealed bytes (fresh nonce each time), not of the
    body saved: a re-save of the same checkpoint never matches the stored digest."""

    def sealed(self, record: CheckpointRecord) -> CheckpointRecord:
        return record.replaced(body=self.seal(record.body))


class SealOverwriteStoresPlain(SealBackend):
    """A raw overwrite stores the bytes as given, unsealed: the next read of them fails to
    open."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.inner.overwrite_body(checkpoint_id, body, digest)


class SealNestedBodiesLeftSealed(SealBackend):
    """nested_bodies hands the nested records' bodies back still sealed."""

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.inner.nested_bodies(checkpoint_ids)


class SealRivalsLeftSealed(SealBackend):
    """latest opens the head's body but hands its rivals back still sealed."""

    def opened_rivals(self, rivals: Sequence[StoredBody]) -> list[StoredBody]:
        return list(rivals)


class SealWalkBodiesLeftSealed(SealBackend):
    """A walk with bodies hands them back still sealed."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.inner.walk(checkpoint_id, max_depth, with_bodies=with_bodies)


class SealSizeOfSealedBody(SealBackend):
    """Index entries report the sealed body's size, as SQLite stores it."""

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.inner.info(checkpoint_id)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self.inner.records(workflow_name)


class SealOpensWithCurrentKey(SealBackend):
    """A body is opened with the keyring's current key, not the one it names: once the key
    rotates, older bodies no longer open."""

    def key_for(self, key_id: int) -> bytes | None:
        return self.keyring.keys[self.keyring.current]


class SealDecompressCapped(SealBackend):
    """Decompression stops at 256 KiB (a guard against zlib bombs) without checking that the
    stream ended: a larger body comes back cut short."""

    def decompress(self, data: bytes) -> bytes:
        return zlib.decompressobj().decompress(data, DECOMPRESS_CAP)


class SealNestedStoredPlain(SealBackend):
    """A save seals the checkpoint's own record but stores its nested records' bodies plain."""

    def sealed_all(self, records: Sequence[CheckpointRecord]) -> list[CheckpointRecord]:
        return [self.sealed(records[0]), *records[1:]]


class SealFencedStoredPlain(SealBackend):
    """A fenced save passes its records to SQLite unsealed."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.inner.insert_fenced(records, expected_latest_id)


class SealKeyringPerHandle(SealBackend):
    """Each handle makes its own keyring: a body sealed through one handle does not open
    through another."""

    def new_handle(self) -> Self:
        return type(self)(self.inner.new_handle(), Keyring())


def seal_target(backend_class: type[SealBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== a leader with read replicas

FOLLOWERS = 2
FAILOVER_EVERY = 25
"""Writes between failovers: a follower is promoted to leader this often."""

Entry_ = tuple[str, tuple[Any, ...]]


@dataclass
class Cluster:
    """What every handle on one replicated store shares."""

    leader: MemoryBackend = field(default_factory=MemoryBackend)
    followers: list[MemoryBackend] = field(
        default_factory=lambda: [MemoryBackend() for _ in range(FOLLOWERS)]
    )
    applied: list[int] = field(default_factory=lambda: [0] * FOLLOWERS)
    log: list[Entry_] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    turn: int = 0
    reads: int = 0
    writes: int = 0
    last_save: int = 0


class ReplicaBackend(Backend):
    """A leader (a built-in in-memory backend) with two asynchronous followers fed from its
    replication log one entry per call; a read goes to a follower once it has applied the log
    up to the read's token (the log's length when the read starts), else to the leader. Every
    25 writes a follower is promoted to leader after it has caught up."""

    capabilities = ALL_CAPABILITIES
    orders_inserts = True  # each write runs whole under the cluster's lock

    def __init__(self, cluster: Cluster | None = None) -> None:
        self.cluster = cluster if cluster is not None else Cluster()
        self.written = 0

    def describe(self) -> str:
        return "replicated://"

    def new_handle(self) -> Self:
        return type(self)(self.cluster)

    # ------------------------------------------------------------ replication

    async def apply(self, follower: MemoryBackend, entry: Entry_) -> None:
        op, args = entry
        if op == "insert":
            await follower.insert(*args)
        elif op == "remove":
            await follower.remove(*args)
        elif op == "prune":
            await follower.prune(*args)
        elif op == "delete_workflow":
            await follower.delete_workflow(*args)
        elif op == "overwrite_body":
            await follower.overwrite_body(*args)

    async def pump(self) -> None:
        """The replication task's step: one follower (in turn) applies its next log entry."""
        c = self.cluster
        c.turn = (c.turn + 1) % FOLLOWERS
        i = c.turn
        if c.applied[i] < len(c.log):
            await self.apply(c.followers[i], c.log[c.applied[i]])
            c.applied[i] += 1

    async def drain(self, i: int) -> None:
        c = self.cluster
        while c.applied[i] < len(c.log):
            await self.apply(c.followers[i], c.log[c.applied[i]])
            c.applied[i] += 1

    async def failover(self) -> None:
        await self.drain(0)
        self.promote()

    def promote(self) -> None:
        c = self.cluster
        c.leader, c.followers[0] = c.followers[0], c.leader
        c.applied[0] = len(c.log)  # the old leader holds every entry

    def logged(self, op: str, *args: Any) -> None:
        c = self.cluster
        c.log.append((op, args))
        if op == "insert":
            c.last_save = len(c.log)
        self.written = len(c.log)

    async def write(self, op: str, call: Callable[[MemoryBackend], Awaitable[T]], *args: Any) -> T:
        c = self.cluster
        with c.lock:
            await self.pump()
            result = await call(c.leader)
            changed = (
                result is InsertResult.INSERTED
                if op == "insert"
                else result is None
                if op == "insert_fenced"
                else bool(result)
                if op in ("remove", "overwrite_body")
                else True
            )
            if changed:
                self.logged("insert" if op == "insert_fenced" else op, *args)
                c.writes += 1
                if c.writes % FAILOVER_EVERY == 0:
                    await self.failover()
            return result

    def token(self) -> int:
        return len(self.cluster.log)

    def caught_up(self, i: int, token: int) -> bool:
        return self.cluster.applied[i] >= token

    def follower(self) -> int:
        c = self.cluster
        c.reads += 1
        return c.reads % FOLLOWERS

    async def read(self, call: Callable[[MemoryBackend], Awaitable[T]]) -> T:
        c = self.cluster
        with c.lock:
            await self.pump()
            token = self.token()
            i = self.follower()
            side = c.followers[i] if self.caught_up(i, token) else c.leader
            return await call(side)

    async def any_follower(self, call: Callable[[MemoryBackend], Awaitable[T]]) -> T:
        """A read that any follower may serve, caught up or not."""
        c = self.cluster
        with c.lock:
            await self.pump()
            return await call(c.followers[self.follower()])

    # ------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.write("insert", lambda s: s.insert(records), list(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.write(
            "insert_fenced", lambda s: s.insert_fenced(records, expected_latest_id), list(records)
        )

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.write("remove", lambda s: s.remove(checkpoint_id), checkpoint_id)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.write(
            "prune", lambda s: s.prune(workflow_name, keep_last), workflow_name, keep_last
        )

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.write("delete_workflow", lambda s: s.delete_workflow(workflow_name), workflow_name)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.write(
            "overwrite_body",
            lambda s: s.overwrite_body(checkpoint_id, body, digest),
            checkpoint_id,
            body,
            digest,
        )

    # ------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.read(lambda s: s.load(checkpoint_id))

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.read(lambda s: s.latest(workflow_name, graph_signature_hash))

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.read(
            lambda s: s.list_bodies(workflow_name, graph_signature_hash, include_nested=include_nested)
        )

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        found = await self.read(
            lambda s: s.list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        )
        return list(found)

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.read(lambda s: s.nested_bodies(checkpoint_ids))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.read(lambda s: s.nested_ids(checkpoint_id))

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.read(lambda s: s.walk(checkpoint_id, max_depth, with_bodies=with_bodies))

    async def workflow_names(self) -> list[str]:
        return list(await self.read(lambda s: s.workflow_names()))

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.read(lambda s: s.info(checkpoint_id))

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self.read(lambda s: s.records(workflow_name))

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self.read(lambda s: s.tombstones(workflow_name))


class ReplicaTokenPerHandle(ReplicaBackend):
    """A read's token is the last log entry this handle wrote (read-your-writes): a follower
    that has not applied another handle's save serves the read."""

    def token(self) -> int:
        return self.written


class ReplicaTokenFromLastSave(ReplicaBackend):
    """A read's token is the log position of the last save, so a follower that has applied
    every save but not a later delete, prune or overwrite serves the read."""

    def token(self) -> int:
        return self.cluster.last_save


class ReplicaSavesReplicatedFirst(ReplicaBackend):
    """Replication ships saves and the other writes on two streams: a follower catching up
    applies every pending save first, then the pending deletes, prunes and overwrites."""

    async def pump(self) -> None:
        c = self.cluster
        c.turn = (c.turn + 1) % FOLLOWERS
        i = c.turn
        pending = c.log[c.applied[i] :]
        for entry in [e for e in pending if e[0] == "insert"] + [e for e in pending if e[0] != "insert"]:
            await self.apply(c.followers[i], entry)
        c.applied[i] = len(c.log)


class ReplicaFailoverWithoutCatchUp(ReplicaBackend):
    """A failover promotes the follower as it is, without applying what it has not yet
    applied: the acknowledged writes it lacked are lost."""

    async def failover(self) -> None:
        self.promote()


class ReplicaInspectFromAnyFollower(ReplicaBackend):
    """Index entries and tombstones (admin reads) are served by any follower, caught up or not."""

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.any_follower(lambda s: s.info(checkpoint_id))

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self.any_follower(lambda s: s.records(workflow_name))

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self.any_follower(lambda s: s.tombstones(workflow_name))


class ReplicaFenceCheckedOnFollower(ReplicaBackend):
    """A fenced save reads the head from a follower (any, caught up or not) and, if it is the
    one expected, writes a plain insert to the leader."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        found = await self.any_follower(lambda s: s.latest(records[0].workflow_name, None))
        head = None if found is None else found.checkpoint_id
        if head != expected_latest_id:
            stored_already = await self.read(lambda s: s.load(records[0].checkpoint_id))
            if stored_already is None:
                return FenceCheck(head, None)
        return FenceCheck.after_insert(head, await self.insert(records))


class ReplicaLatestFromAnyFollower(ReplicaBackend):
    """latest (the hottest read) is served by any follower, caught up or not."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.any_follower(lambda s: s.latest(workflow_name, graph_signature_hash))


class ReplicaLagOfOneAllowed(ReplicaBackend):
    """A follower one log entry behind the token counts as caught up (the entry in flight)."""

    def caught_up(self, i: int, token: int) -> bool:
        return self.cluster.applied[i] + 1 >= token


class ReplicaNestedBodiesFromAnyFollower(ReplicaBackend):
    """Nested bodies (records never change) are read from any follower, caught up or not."""

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.any_follower(lambda s: s.nested_bodies(checkpoint_ids))


def replica_target(backend_class: type[ReplicaBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== the batch


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


BROKEN_CAS: list[type[CasBackend]] = [
    CasDeleteFreesSharedChunks,
    CasDedupWithoutReference,
    CasOverwriteInPlace,
    CasRepeatedChunkCountedOnce,
    CasLastChunkPadded,
    CasSizeFromChunkCount,
    CasBodyCache,
    CasManifestThenChunks,
    CasUploadThenLink,
]
BROKEN_PART: list[type[PartBackend]] = [
    PartMetaDroppedWithLastPartition,
    PartNamesSortedAsText,
    PartLatestFromNewestPartition,
    PartRivalsFromHeadPartition,
    PartPruneWholePartitions,
    PartTombstonesInPartition,
    PartOverwriteToNewestPartition,
    PartLookupInRecentPartitions,
    PartWalkStopsAtPartitionEdge,
    PartNestedInContainerPartition,
]
BROKEN_SEAL: list[type[SealBackend]] = [
    SealOverwriteStoresPlain,
    SealNestedBodiesLeftSealed,
    SealRivalsLeftSealed,
    SealWalkBodiesLeftSealed,
    SealSizeOfSealedBody,
    SealOpensWithCurrentKey,
    SealDecompressCapped,
    SealNestedStoredPlain,
    SealFencedStoredPlain,
    SealKeyringPerHandle,
]
BROKEN_REPLICA: list[type[ReplicaBackend]] = [
    ReplicaTokenPerHandle,
    ReplicaTokenFromLastSave,
    ReplicaSavesReplicatedFirst,
    ReplicaFailoverWithoutCatchUp,
    ReplicaInspectFromAnyFollower,
    ReplicaFenceCheckedOnFollower,
    ReplicaLatestFromAnyFollower,
    ReplicaLagOfOneAllowed,
    ReplicaNestedBodiesFromAnyFollower,
]


def _entries() -> list[Entry]:
    entries: list[Entry] = []
    entries += [(c.__name__, tables_target(c), _doc(c)) for c in BROKEN_CAS]
    entries += [(c.__name__, tables_target(c), _doc(c)) for c in BROKEN_PART]
    entries += [(c.__name__, seal_target(c), _doc(c)) for c in BROKEN_SEAL]
    entries += [(c.__name__, replica_target(c), _doc(c)) for c in BROKEN_REPLICA]
    return entries


ENTRIES: list[Entry] = _entries()
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = [
    # docs/backends.md: a digest "only tells a re-save of the same bytes from another body, and a
    # mismatch is never a verdict on its own: DIFFERENT_BODY sends the save to the engine's
    # decoded comparison". A digest of the sealed bytes never matches, so every re-save of a
    # stored id is decided by that comparison: slower, never wrong.
    ("SealDigestOfSealedBody", seal_target(SealDigestOfSealedBody), _doc(SealDigestOfSealedBody)),
]
"""Written as broken, judged not to break the contract as built (tests/kit/blind_batch_thirteen.md
says why); each must pass the whole kit."""

HONEST: list[Entry] = [
    ("CasBackend", tables_target(CasBackend), _doc(CasBackend)),
    ("PartBackend", tables_target(PartBackend), _doc(PartBackend)),
    ("SealBackend", seal_target(SealBackend), _doc(SealBackend)),
    ("ReplicaBackend", replica_target(ReplicaBackend), _doc(ReplicaBackend)),
]
"""Honest storages: one per style; each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
