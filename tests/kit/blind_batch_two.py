"""A second blind batch: broken storages written from the author docs alone.

Each storage has exactly one defect, of a kind an author writes by accident: a Backend on
``storages.backend`` redoing one primitive of the memory backend (or the worked example's
``DictBackend``), a wrapper around a built-in storage (caches, metrics, retries, transforms,
replicas, shards, write-behind), or a storage with only MAF's six methods. ``BATCH`` maps a
name to a factory; tests/kit/test_blind_batch_two.py runs the kit on each and names the clause
that catches it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
import unicodedata
import zlib
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import Any, Self

from examples.dict_storage import DictBackend, DictCheckpointStorage
from storages.backend import CheckpointRecord, FenceCheck, InsertResult, StoredBody, WalkRecords
from storages.contract import CheckpointID
from storages.engine import CheckpointStore
from storages.errors import CheckpointConflictError, CheckpointNotFoundError, CheckpointStorageError
from storages.memory import InMemoryCheckpointStorage, MemoryBackend
from storages.memory.backend import _Entry, _pruned

# ---------------------------------------------------------------------------- own backends


class _Mem(InMemoryCheckpointStorage):
    """The built-in storage's settings and handles over a backend named by ``backend_class``."""


def _over(backend: type[MemoryBackend]) -> Callable[[], InMemoryCheckpointStorage]:
    storage = type(f"{backend.__name__}Storage", (_Mem,), {"backend_class": backend})
    return storage


class KeepsEmptyWorkflowNames(MemoryBackend):
    """Lists every workflow it ever saw: the empty ones stay in the map for their counters."""

    async def workflow_names(self) -> list[str]:
        with self.store.lock:
            return list(self.store.workflows)


class PruneKeepsOneMore(MemoryBackend):
    """Counts the head twice: keeps ``keep_last`` others besides it."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await super().prune(workflow_name, keep_last + 1 if keep_last > 0 else 0)


class PruneTombstonesTopOnly(MemoryBackend):
    """Tombstones only the pruned top-level ids; their nested records vanish without one."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        store = self.store
        with store.lock:
            workflow = store.workflows.get(workflow_name)
            if workflow is None:
                return 0
            doomed = _pruned(workflow, keep_last)
            for entry in doomed:
                self._drop_family(entry)
                store.tombstones[entry.record.checkpoint_id] = workflow_name
        return len(doomed)


class DeleteWorkflowPrefixTombstones(MemoryBackend):
    """Clears tombstones by name prefix (as a key-prefix scan would): a bystander's go too."""

    async def delete_workflow(self, workflow_name: str) -> int:
        store = self.store
        with store.lock:
            workflow = store.workflows.get(workflow_name)
            entries = list(workflow.entries.values()) if workflow is not None else []
            for entry in entries:
                self._drop_family(entry)
            for pruned in [i for i, name in store.tombstones.items() if name.startswith(workflow_name)]:
                del store.tombstones[pruned]
        return len(entries)


class ForgetsEmptyWorkflow(MemoryBackend):
    """Drops a workflow's map (and its sequence counter) when its last record is removed."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.store.lock:
            entry = self.store.by_id.get(checkpoint_id)
            name = None if entry is None else entry.record.workflow_name
        removed = await super().remove(checkpoint_id)
        with self.store.lock:
            workflow = self.store.workflows.get(name) if name is not None else None
            if workflow is not None and not workflow.entries and not workflow.nested:
                del self.store.workflows[name]  # type: ignore[arg-type]
        return removed


class NestedIdsNewestFirst(MemoryBackend):
    """Lists direct children newest first (a stack)."""

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        found = await super().nested_ids(checkpoint_id)
        return None if found is None else list(reversed(found))


class RivalsNotFiltered(MemoryBackend):
    """Returns every sibling of the head as a rival, continued or not."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        from dataclasses import replace

        from storages.memory.backend import _stored

        with self.store.lock:
            workflow = self.store.workflows.get(workflow_name)
            head = None if workflow is None else workflow.latest(graph_signature_hash)
            if head is None or workflow is None:
                return None
            previous = head.record.previous_checkpoint_id
            siblings: list[_Entry] = []
            if previous is not None:
                found = workflow.successors.get((previous, head.record.graph_signature_hash), {})
                siblings = [e for e in found.values() if e is not head]
            return replace(_stored(head), rivals=[_stored(e) for e in siblings[-64:]])


class FenceAgainstNewestCommit(MemoryBackend):
    """Fences on the newest commit, not the lineage head."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        from storages.memory.backend import _compared

        store = self.store
        with store.lock:
            workflow = store.workflows.get(records[0].workflow_name)
            newest = None
            if workflow is not None and workflow.entries:
                newest = next(reversed(workflow.entries.values())).record.checkpoint_id
            existing = store.by_id.get(records[0].checkpoint_id)
            if existing is not None:
                return FenceCheck(newest, _compared(existing, records[0]))
            if newest != expected_latest_id:
                return FenceCheck(newest, None)
            self._write_family(records)
        return None


class FenceNoneIsAny(MemoryBackend):
    """Reads ``expected_latest_id=None`` as "no fence" instead of "the workflow has none"."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        if expected_latest_id is None:
            result = await self.insert(records)
            if result is InsertResult.INSERTED:
                return None
            with self.store.lock:
                workflow = self.store.workflows.get(records[0].workflow_name)
                tip = None if workflow is None else workflow.latest(None)
            return FenceCheck(None if tip is None else tip.record.checkpoint_id, result)
        return await super().insert_fenced(records, expected_latest_id)


class NestedConflictAfterTop(MemoryBackend):
    """Writes the family record by record and stops at a taken nested id: the rest stays."""

    def _write_family(self, records: Sequence[CheckpointRecord]) -> None:
        from storages.backend import nested_id_conflict

        for record in records:
            if record.checkpoint_id in self.store.by_id:
                raise nested_id_conflict(records, record.checkpoint_id)
            self._add(record)


class OverwriteForgetsSavedDigest(MemoryBackend):
    """Rewrites the digest with the body: a re-save is then compared with the new bytes."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        done = await super().overwrite_body(checkpoint_id, body, digest)
        if done:
            with self.store.lock:
                self.store.by_id[checkpoint_id].saved_digest = digest
        return done


class RecordsTopLevelOnly(MemoryBackend):
    """The index listing leaves nested records out (they "belong to" their container)."""

    async def records(self, workflow_name: str | None) -> Sequence[Any]:
        return [info for info in await super().records(workflow_name) if info.container_id is None]


class TombstonesByPrefix(MemoryBackend):
    """Filters tombstones by name prefix."""

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        with self.store.lock:
            return [
                pruned
                for pruned, name in self.store.tombstones.items()
                if workflow_name is None or name.startswith(workflow_name)
            ]


class NestedListedLast(MemoryBackend):
    """With ``include_nested``, appends the nested records after the top-level ones."""

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        top = await super().list_ids(workflow_name, graph_signature_hash, include_nested=False)
        if not include_nested:
            return top
        every = await super().list_ids(workflow_name, graph_signature_hash, include_nested=True)
        return [*top, *(i for i in every if i not in set(top))]


class EmptySignatureIsNoFilter(MemoryBackend):
    """Treats a falsy signature as no filter."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        signature = graph_signature_hash or None
        return await super().list_bodies(workflow_name, signature, include_nested=include_nested)


class WalkWithoutNestedBodies(MemoryBackend):
    """A walk with bodies returns the reached records' bodies, not their nested records'."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        found = await super().walk(checkpoint_id, max_depth, with_bodies=with_bodies)
        if not with_bodies:
            return found
        bodies = {i: b for i, b in found.bodies.items() if i in found.links}
        return WalkRecords(found.links, bodies, found.tombstones)


class ChunkedBodies(MemoryBackend):
    """Keeps big bodies in 64 KiB chunks; counts the chunks with a floor division."""

    CHUNK = 65536

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        chunked = []
        for record in records:
            if len(record.body) > self.CHUNK:
                count = len(record.body) // self.CHUNK
                parts = [record.body[i * self.CHUNK : (i + 1) * self.CHUNK] for i in range(count)]
                record = record.replaced(body=b"".join(parts), digest=record.digest)
            chunked.append(record)
        return await super().insert(chunked)


class JournalledDict(DictBackend):
    """The worked example with a journal line written before the row: the sequence is read
    before the await and stored after it."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        tables = self.tables
        with tables.lock:
            existing = tables.records.get(record.checkpoint_id)
            if existing is not None:
                return InsertResult.of_stored_digest(existing[1].digest, record)
            sequence = tables.sequences.get(record.workflow_name, 0) + 1
        await asyncio.sleep(0)  # the journal append
        with tables.lock:
            tables.sequences[record.workflow_name] = sequence
            tables.records[record.checkpoint_id] = (sequence, record)
        return InsertResult.INSERTED


class JournalledDictStorage(CheckpointStore[JournalledDict]):
    def __init__(self) -> None:
        super().__init__(JournalledDict())


class CaseInsensitiveDict(DictBackend):
    """Matches workflow names case-insensitively in its listings."""

    def _rows(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointRecord]:
        with self.tables.lock:
            rows = [
                (sequence, record)
                for sequence, record in self.tables.records.values()
                if record.workflow_name.casefold() == workflow_name.casefold()
                and graph_signature_hash in (None, record.graph_signature_hash)
            ]
        rows.sort(key=lambda row: row[0])
        return [record for _, record in rows]


class CaseInsensitiveDictStorage(CheckpointStore[CaseInsensitiveDict]):
    def __init__(self) -> None:
        super().__init__(CaseInsensitiveDict())


# ---------------------------------------------------------------------------- wrappers


class Wrapper:
    """Delegates everything to a built-in storage; subclasses redo one method."""

    def __init__(self, inner: Any = None) -> None:
        self._inner = inner if inner is not None else InMemoryCheckpointStorage()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def new_handle(self) -> Self:
        return type(self)(self._inner.new_handle())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.aclose()


class LatestCache(Wrapper):
    """Caches get_latest per workflow; a save through it refreshes the entry, a delete does not."""

    def __init__(self, inner: Any = None) -> None:
        super().__init__(inner)
        self._latest: dict[tuple[str, str | None], Any] = {}

    async def save(self, checkpoint: Any, **kwargs: Any) -> CheckpointID:
        self._latest.clear()
        return await self._inner.save(checkpoint, **kwargs)

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        key = (workflow_name, graph_signature_hash)
        if key not in self._latest:
            self._latest[key] = await self._inner.get_latest(
                workflow_name=workflow_name, graph_signature_hash=graph_signature_hash
            )
        return copy.deepcopy(self._latest[key])


class ShallowCopyCache(Wrapper):
    """A read cache handing out shallow copies of the decoded checkpoint."""

    def __init__(self, inner: Any = None) -> None:
        super().__init__(inner)
        self._cache: dict[str, Any] = {}

    async def load(self, checkpoint_id: CheckpointID, **kwargs: Any) -> Any:
        if checkpoint_id not in self._cache or kwargs:
            found = await self._inner.load(checkpoint_id, **kwargs)
            self._cache[checkpoint_id] = found
        return copy.copy(self._cache[checkpoint_id])

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self._cache.pop(checkpoint_id, None)
        return await self._inner.delete(checkpoint_id)


class MetricsStampsMetadata(Wrapper):
    """Counts saves and stamps the saving host into the checkpoint's metadata."""

    async def save(self, checkpoint: Any, **kwargs: Any) -> CheckpointID:
        if isinstance(checkpoint.metadata, dict):
            checkpoint.metadata.setdefault("saved_by", "metrics-wrapper")
        return await self._inner.save(checkpoint, **kwargs)


class RetryTreatsConflictAsDone(Wrapper):
    """Retries a failed save; a conflict on the retry means the first attempt landed."""

    async def save(self, checkpoint: Any, **kwargs: Any) -> CheckpointID:
        try:
            return await self._inner.save(checkpoint, **kwargs)
        except CheckpointConflictError as error:
            if type(error) is CheckpointConflictError:
                return checkpoint.checkpoint_id  # type: ignore[no-any-return]
            raise


class JsonStateTransform(Wrapper):
    """Seals ``state`` as a JSON text field on save ("encryption"), unseals it on reads."""

    @staticmethod
    def _seal(checkpoint: Any) -> Any:
        sealed = copy.copy(checkpoint)
        sealed.state = {"__sealed__": json.dumps(checkpoint.state, default=str)}
        return sealed

    @staticmethod
    def _open(checkpoint: Any) -> Any:
        if checkpoint is not None and isinstance(checkpoint.state, dict) and "__sealed__" in checkpoint.state:
            checkpoint.state = json.loads(checkpoint.state["__sealed__"])
        return checkpoint

    async def save(self, checkpoint: Any, **kwargs: Any) -> CheckpointID:
        return await self._inner.save(self._seal(checkpoint), **kwargs)

    async def load(self, checkpoint_id: CheckpointID, **kwargs: Any) -> Any:
        return self._open(await self._inner.load(checkpoint_id, **kwargs))

    async def get_latest(self, **kwargs: Any) -> Any:
        return self._open(await self._inner.get_latest(**kwargs))

    async def list_checkpoints(self, **kwargs: Any) -> list[Any]:
        return [self._open(c) for c in await self._inner.list_checkpoints(**kwargs)]


class CompressOnlyInLoad(Wrapper):
    """Compresses messages on save; decompresses in load and get_latest, not in listings."""

    @staticmethod
    def _pack(checkpoint: Any) -> Any:
        packed = copy.copy(checkpoint)
        if isinstance(checkpoint.messages, dict) and checkpoint.messages:
            packed.messages = {"__z__": zlib.compress(pickle.dumps(checkpoint.messages))}
        return packed

    @staticmethod
    def _unpack(checkpoint: Any) -> Any:
        messages = None if checkpoint is None else checkpoint.messages
        if isinstance(messages, dict) and "__z__" in messages:
            checkpoint.messages = pickle.loads(zlib.decompress(checkpoint.messages["__z__"]))
        return checkpoint

    async def save(self, checkpoint: Any, **kwargs: Any) -> CheckpointID:
        return await self._inner.save(self._pack(checkpoint), **kwargs)

    async def load(self, checkpoint_id: CheckpointID, **kwargs: Any) -> Any:
        return self._unpack(await self._inner.load(checkpoint_id, **kwargs))

    async def get_latest(self, **kwargs: Any) -> Any:
        return self._unpack(await self._inner.get_latest(**kwargs))


class ShardedByWorkflow:
    """Six methods over two stores, chosen by a hash of the workflow name; reads by id ask each."""

    def __init__(self) -> None:
        self._shards = [InMemoryCheckpointStorage(), InMemoryCheckpointStorage()]

    def _shard(self, workflow_name: str) -> Any:
        return self._shards[zlib.crc32(workflow_name.encode()) % len(self._shards)]

    async def save(self, checkpoint: Any) -> CheckpointID:
        return await self._shard(checkpoint.workflow_name).save(checkpoint)  # type: ignore[no-any-return]

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        for shard in self._shards:
            try:
                return await shard.load(checkpoint_id)
            except CheckpointNotFoundError:
                continue
        raise CheckpointNotFoundError(checkpoint_id)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return any([await shard.delete(checkpoint_id) for shard in self._shards])

    async def get_latest(self, *, workflow_name: str) -> Any:
        return await self._shard(workflow_name).get_latest(workflow_name=workflow_name)

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return await self._shard(workflow_name).list_checkpoints(workflow_name=workflow_name)  # type: ignore[no-any-return]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return await self._shard(workflow_name).list_checkpoint_ids(workflow_name=workflow_name)  # type: ignore[no-any-return]


class WriteBehind(Wrapper):
    """Acknowledges a save at once and writes it before the next operation of this handle."""

    def __init__(self, inner: Any = None) -> None:
        super().__init__(inner)
        self._queue: list[Any] = []

    async def _flush(self) -> None:
        while self._queue:
            await self._inner.save(self._queue.pop(0))

    async def save(self, checkpoint: Any, **kwargs: Any) -> CheckpointID:
        if kwargs:
            await self._flush()
            return await self._inner.save(checkpoint, **kwargs)
        self._queue.append(checkpoint)
        return checkpoint.checkpoint_id  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not asyncio.iscoroutinefunction(target):
            return target

        async def flushed(*args: Any, **kwargs: Any) -> Any:
            await self._flush()
            return await target(*args, **kwargs)

        import functools

        return functools.wraps(target)(flushed)


class ReplicaMissesPrune(Wrapper):
    """Reads from a replica fed by this wrapper's saves and deletes; prune goes to the primary only."""

    def __init__(self, inner: Any = None, replica: Any = None) -> None:
        super().__init__(inner)
        self._replica = replica if replica is not None else InMemoryCheckpointStorage()

    def new_handle(self) -> Self:
        return type(self)(self._inner.new_handle(), self._replica.new_handle())

    async def save(self, checkpoint: Any, **kwargs: Any) -> CheckpointID:
        found = await self._inner.save(checkpoint, **kwargs)
        await self._replica.save(checkpoint)
        return found

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        await self._replica.delete(checkpoint_id)
        return await self._inner.delete(checkpoint_id)

    async def load(self, checkpoint_id: CheckpointID, **kwargs: Any) -> Any:
        return await self._replica.load(checkpoint_id, **kwargs)

    async def list_checkpoints(self, **kwargs: Any) -> list[Any]:
        return await self._replica.list_checkpoints(**kwargs)


class TimestampToUtc(Wrapper):
    """Normalises every timestamp to UTC on save, so stores compare them as text."""

    async def save(self, checkpoint: Any, **kwargs: Any) -> CheckpointID:
        try:
            instant = datetime.fromisoformat(checkpoint.timestamp)
        except (TypeError, ValueError):
            return await self._inner.save(checkpoint, **kwargs)
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=UTC)
        normal = copy.copy(checkpoint)
        normal.timestamp = instant.astimezone(UTC).isoformat()
        return await self._inner.save(normal, **kwargs)


class WritesCacheSurvivesDeleteWorkflow(Wrapper):
    """Caches list_writes; put_writes and delete_writes refresh it, delete_workflow does not."""

    def __init__(self, inner: Any = None) -> None:
        super().__init__(inner)
        self._writes: dict[tuple[str, str], list[Any]] = {}

    async def put_writes(self, checkpoint_id: CheckpointID, writes: Any, *, workflow_name: str) -> Any:
        self._writes.pop((workflow_name, checkpoint_id), None)
        return await self._inner.put_writes(checkpoint_id, writes, workflow_name=workflow_name)

    async def delete_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> int:
        self._writes.pop((workflow_name, checkpoint_id), None)
        return await self._inner.delete_writes(checkpoint_id, workflow_name=workflow_name)

    async def list_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> list[Any]:
        key = (workflow_name, checkpoint_id)
        if key not in self._writes:
            self._writes[key] = await self._inner.list_writes(checkpoint_id, workflow_name=workflow_name)
        return list(self._writes[key])


class LoadErrorsAreNotFound(Wrapper):
    """Maps every storage error of a load to "not found", for callers that only catch that."""

    async def load(self, checkpoint_id: CheckpointID, **kwargs: Any) -> Any:
        try:
            return await self._inner.load(checkpoint_id, **kwargs)
        except CheckpointStorageError as error:
            raise CheckpointNotFoundError(checkpoint_id) from error


class CloseOnlyFlushesMetrics(Wrapper):
    """aclose() flushes the wrapper's metrics and leaves the pooled inner storage open."""

    def __init__(self, inner: Any = None) -> None:
        super().__init__(inner)
        self.saves = 0

    async def save(self, checkpoint: Any, **kwargs: Any) -> CheckpointID:
        self.saves += 1
        return await self._inner.save(checkpoint, **kwargs)

    async def aclose(self) -> None:
        self.saves = 0

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class DeleteAlwaysTrue(Wrapper):
    """Counts deletes and reports each as done."""

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        await self._inner.delete(checkpoint_id)
        return True


# ---------------------------------------------------------------------------- six methods


class SixMethods:
    """Only MAF's six methods, over a built-in storage."""

    def __init__(self) -> None:
        self._inner = InMemoryCheckpointStorage()

    async def save(self, checkpoint: Any) -> CheckpointID:
        return await self._inner.save(checkpoint)

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        return await self._inner.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return await self._inner.list_checkpoints(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return await self._inner.list_checkpoint_ids(workflow_name=workflow_name)

    async def get_latest(self, *, workflow_name: str) -> Any:
        return await self._inner.get_latest(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return await self._inner.delete(checkpoint_id)


class SixSortedIds(SixMethods):
    """Lists ids sorted, as a key-value scan returns them."""

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return sorted(await self._inner.list_checkpoint_ids(workflow_name=workflow_name))


class SixDeleteCascades(SixMethods):
    """Deleting a checkpoint also deletes the ones continuing it (they are "its run")."""

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        try:
            doomed = await self._inner.load(checkpoint_id)
        except CheckpointNotFoundError:
            return False
        for other in await self._inner.list_checkpoints(workflow_name=doomed.workflow_name):
            if other.previous_checkpoint_id == checkpoint_id:
                await self._inner.delete(other.checkpoint_id)
        return await self._inner.delete(checkpoint_id)


class SixUpsert(SixMethods):
    """Last write wins: a save of a stored id replaces it."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        try:
            return await self._inner.save(checkpoint)
        except CheckpointConflictError:
            await self._inner.delete(checkpoint.checkpoint_id)
            return await self._inner.save(checkpoint)


class SixKeyPrefix:
    """Six methods over one flat map keyed ``workflow:id``; a listing scans the ``workflow:`` prefix."""

    def __init__(self) -> None:
        self._inner = InMemoryCheckpointStorage()
        self._keys: dict[str, CheckpointID] = {}

    async def save(self, checkpoint: Any) -> CheckpointID:
        found = await self._inner.save(checkpoint)
        self._keys.setdefault(f"{checkpoint.workflow_name}:{found}", found)
        return found

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        return await self._inner.load(checkpoint_id)

    def _ids(self, workflow_name: str) -> list[CheckpointID]:
        return [i for key, i in self._keys.items() if key.startswith(f"{workflow_name}:")]

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return [await self._inner.load(i) for i in self._ids(workflow_name)]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return self._ids(workflow_name)

    async def get_latest(self, *, workflow_name: str) -> Any:
        return await self._inner.get_latest(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        for key in [k for k, i in self._keys.items() if i == checkpoint_id]:
            del self._keys[key]
        return await self._inner.delete(checkpoint_id)


class SixNfcNames(SixMethods):
    """Normalises workflow names to NFC on every read "to be safe" (saves keep what they got)."""

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        name = unicodedata.normalize("NFC", workflow_name)
        return await self._inner.list_checkpoints(workflow_name=name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        name = unicodedata.normalize("NFC", workflow_name)
        return await self._inner.list_checkpoint_ids(workflow_name=name)

    async def get_latest(self, *, workflow_name: str) -> Any:
        return await self._inner.get_latest(workflow_name=unicodedata.normalize("NFC", workflow_name))


class SixLatestByTimestampText(SixMethods):
    """Latest is the greatest timestamp, compared as text (ISO 8601 sorts, doesn't it?)."""

    async def get_latest(self, *, workflow_name: str) -> Any:
        every = await self._inner.list_checkpoints(workflow_name=workflow_name)
        return max(every, key=lambda c: str(c.timestamp)) if every else None


class SixLatestIsLastListed(SixMethods):
    """Latest is the last checkpoint listed (commit order), lineage aside."""

    async def get_latest(self, *, workflow_name: str) -> Any:
        every = await self._inner.list_checkpoints(workflow_name=workflow_name)
        return every[-1] if every else None


class SixKeepsCallersObject(SixMethods):
    """Keeps a hot map of the objects it saved, for loads that skip decoding."""

    def __init__(self) -> None:
        super().__init__()
        self._hot: dict[str, Any] = {}

    async def save(self, checkpoint: Any) -> CheckpointID:
        found = await self._inner.save(checkpoint)
        self._hot.setdefault(found, checkpoint)
        return found

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        if checkpoint_id in self._hot:
            return self._hot[checkpoint_id]
        return await self._inner.load(checkpoint_id)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self._hot.pop(checkpoint_id, None)
        return await self._inner.delete(checkpoint_id)


class SixOwnIndexReadModifyWrite(SixMethods):
    """Keeps its own per-workflow index document, read, extended and written back per save."""

    def __init__(self) -> None:
        super().__init__()
        self._index: dict[str, list[CheckpointID]] = {}

    async def save(self, checkpoint: Any) -> CheckpointID:
        ids = list(self._index.get(checkpoint.workflow_name, []))
        found = await self._inner.save(checkpoint)
        if found not in ids:
            ids.append(found)
        self._index[checkpoint.workflow_name] = ids
        return found

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        stored = set(await self._inner.list_checkpoint_ids(workflow_name=workflow_name))
        return [i for i in self._index.get(workflow_name, []) if i in stored]


# ---------------------------------------------------------------------------- the batch

BATCH: dict[str, Callable[[], Any]] = {
    "keeps_empty_workflow_names": _over(KeepsEmptyWorkflowNames),
    "prune_keeps_one_more": _over(PruneKeepsOneMore),
    "prune_tombstones_top_only": _over(PruneTombstonesTopOnly),
    "delete_workflow_prefix_tombstones": _over(DeleteWorkflowPrefixTombstones),
    "forgets_empty_workflow": _over(ForgetsEmptyWorkflow),
    "nested_ids_newest_first": _over(NestedIdsNewestFirst),
    "rivals_not_filtered": _over(RivalsNotFiltered),
    "fence_against_newest_commit": _over(FenceAgainstNewestCommit),
    "fence_none_is_any": _over(FenceNoneIsAny),
    "nested_conflict_after_top": _over(NestedConflictAfterTop),
    "records_top_level_only": _over(RecordsTopLevelOnly),
    "tombstones_by_prefix": _over(TombstonesByPrefix),
    "nested_listed_last": _over(NestedListedLast),
    "empty_signature_is_no_filter": _over(EmptySignatureIsNoFilter),
    "walk_without_nested_bodies": _over(WalkWithoutNestedBodies),
    "chunked_bodies": _over(ChunkedBodies),
    "journalled_dict": JournalledDictStorage,
    "case_insensitive_dict": CaseInsensitiveDictStorage,
    "latest_cache": LatestCache,
    "shallow_copy_cache": ShallowCopyCache,
    "metrics_stamps_metadata": MetricsStampsMetadata,
    "retry_treats_conflict_as_done": RetryTreatsConflictAsDone,
    "json_state_transform": JsonStateTransform,
    "compress_only_in_load": CompressOnlyInLoad,
    "sharded_by_workflow": ShardedByWorkflow,
    "write_behind": WriteBehind,
    "replica_misses_prune": ReplicaMissesPrune,
    "timestamp_to_utc": TimestampToUtc,
    "writes_cache_survives_delete_workflow": WritesCacheSurvivesDeleteWorkflow,
    "load_errors_are_not_found": LoadErrorsAreNotFound,
    "close_only_flushes_metrics": CloseOnlyFlushesMetrics,
    "delete_always_true": DeleteAlwaysTrue,
    "six_sorted_ids": SixSortedIds,
    "six_delete_cascades": SixDeleteCascades,
    "six_upsert": SixUpsert,
    "six_key_prefix": SixKeyPrefix,
    "six_nfc_names": SixNfcNames,
    "six_latest_by_timestamp_text": SixLatestByTimestampText,
    "six_latest_is_last_listed": SixLatestIsLastListed,
    "six_keeps_callers_object": SixKeepsCallersObject,
    "six_own_index_read_modify_write": SixOwnIndexReadModifyWrite,
}
"""Name -> factory of one broken storage."""

EQUIVALENT: dict[str, tuple[Callable[[], Any], str]] = {
    "overwrite_forgets_saved_digest": (
        _over(OverwriteForgetsSavedDigest),
        "docs/backends.md allows either digest after overwrite_body (SQLite rewrites it with the body): "
        "a mismatch only sends a re-save to the engine's decoded comparison",
    ),
}
"""Written as defects, found correct under the docs: the kit rightly passes them."""

HONEST: dict[str, Callable[[], Any]] = {
    "memory_over_subclass": _over(MemoryBackend),
    "dict_example": DictCheckpointStorage,
    "wrapper": Wrapper,
    "six_methods": SixMethods,
}
"""The storages the defects were written over, which pass the kit."""
