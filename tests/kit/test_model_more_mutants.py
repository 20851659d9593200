"""A second batch of broken storages for the model family, written as outside authors would write
them and without looking at what the generator aims at: wrappers that re-rank, filter, cache,
sanitise or re-shape what a correct storage answers. Each must be caught by the family with its
default seed and budget (the first batch, one per axis of issue 26, is tests/kit/test_model_family.py).
"""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from storages.contract import AncestryEnd
from storages.errors import CheckpointNotFoundError

from .test_model_family import Wrapper, _Sanitiser, failures, run_model, wrapped

pytestmark = pytest.mark.memory


class LatestByIteration(Wrapper):
    """get_latest is the highest iteration_count, not the last committed."""

    async def get_latest(self, *, workflow_name, graph_signature_hash=None):
        items = await self.inner.list_checkpoints(
            workflow_name=workflow_name,
            **({} if graph_signature_hash is None else {"graph_signature_hash": graph_signature_hash}),
        )
        return max(items, key=lambda c: c.iteration_count) if items else None


class DropsEmptyState(Wrapper):
    """list_checkpoints leaves out checkpoints whose state is empty."""

    async def list_checkpoints(self, **kw):
        return [c for c in await self.inner.list_checkpoints(**kw) if c.state]


class DeleteMissingRaises(Wrapper):
    """delete of an id that is not stored raises instead of returning False."""

    async def delete(self, checkpoint_id):
        if not await self.inner.delete(checkpoint_id):
            raise CheckpointNotFoundError(checkpoint_id)
        return True


class IgnoresExpectedSignature(Wrapper):
    """load drops expected_graph_signature_hash instead of enforcing it."""

    async def load(self, checkpoint_id, **kw):
        return await self.inner.load(checkpoint_id)


class PruneKeepsOneMore(Wrapper):
    """prune keeps one checkpoint more than asked (an off-by-one)."""

    async def prune(self, *, workflow_name, keep_last):
        return await self.inner.prune(
            workflow_name=workflow_name, keep_last=keep_last + 1 if keep_last >= 0 else keep_last
        )


class NegativeIndexKeepsFirst(Wrapper):
    """Pending writes at a negative index keep the first write instead of the latest."""

    async def put_writes(self, checkpoint_id, writes, *, workflow_name):
        stored = await self.inner.list_writes(checkpoint_id, workflow_name=workflow_name)
        existing = {(w.task_id, w.index) for w in stored}
        kept = [w for w in writes if (w.task_id, w.index) not in existing]
        if kept or not writes:
            await self.inner.put_writes(checkpoint_id, kept or writes, workflow_name=workflow_name)


class WritesSorted(Wrapper):
    """list_writes sorts by task and index instead of the order first stored."""

    async def list_writes(self, checkpoint_id, *, workflow_name):
        return sorted(
            await self.inner.list_writes(checkpoint_id, workflow_name=workflow_name),
            key=lambda w: (w.task_id, w.index),
        )


class NoneMeansUnfenced(Wrapper):
    """expected_latest_id=None (a workflow with no checkpoint yet) is treated as unfenced."""

    async def save(self, checkpoint, **kw):
        if kw.get("expected_latest_id", 0) is None:
            kw.pop("expected_latest_id")
        return await self.inner.save(checkpoint, **kw)


class IgnoresIncludeNested(Wrapper):
    """list_checkpoint_ids ignores include_nested."""

    async def list_checkpoint_ids(self, **kw):
        kw.pop("include_nested", None)
        return await self.inner.list_checkpoint_ids(**kw)


class InfoContainerIsRoot(Wrapper):
    """checkpoint_info names the top-level checkpoint as every nested record's container."""

    async def checkpoint_info(self, checkpoint_id):
        info = await self.inner.checkpoint_info(checkpoint_id)
        if info is None or info.container_id is None:
            return info
        root = info.container_id
        while True:
            up = await self.inner.checkpoint_info(root)
            if up is None or up.container_id is None:
                break
            root = up.container_id
        return dataclasses.replace(info, container_id=root)


class ListNestedAllDescendants(Wrapper):
    """list_nested returns every descendant, not the direct children."""

    async def list_nested(self, checkpoint_id):
        out, todo = [], list(await self.inner.list_nested(checkpoint_id))
        while todo:
            c = todo.pop(0)
            out.append(c)
            todo += await self.inner.list_nested(c)
        return out


class DeleteWorkflowLeavesTombstones(Wrapper):
    """Tombstones are kept in a side table that delete_workflow does not clear."""

    def fresh_shared(self):
        return {}

    async def prune(self, *, workflow_name, keep_last):
        before = set(await self.inner.list_tombstones(workflow_name=workflow_name))
        n = await self.inner.prune(workflow_name=workflow_name, keep_last=keep_last)
        self.shared.setdefault(workflow_name, set()).update(
            set(await self.inner.list_tombstones(workflow_name=workflow_name)) | before
        )
        return n

    async def list_tombstones(self, *, workflow_name=None):
        return sorted(
            set(await self.inner.list_tombstones(workflow_name=workflow_name))
            | self.shared.get(workflow_name, set())
        )


class LatestCacheNotInvalidatedByDelete(Wrapper):
    """A per-handle cache of get_latest, cleared by saves but not by deletes."""

    def __init__(self, inner, shared=None):
        super().__init__(inner, shared)
        self.cache = {}

    async def save(self, checkpoint, **kw):
        r = await self.inner.save(checkpoint, **kw)
        self.cache.pop(checkpoint.workflow_name, None)
        return r

    async def get_latest(self, *, workflow_name, graph_signature_hash=None):
        if graph_signature_hash is not None:
            return await self.inner.get_latest(
                workflow_name=workflow_name, graph_signature_hash=graph_signature_hash
            )
        if workflow_name not in self.cache:
            self.cache[workflow_name] = await self.inner.get_latest(workflow_name=workflow_name)
        return (
            await self.inner.load(self.cache[workflow_name].checkpoint_id)
            if self.cache[workflow_name] is not None
            else None
        )


class TuplesToLists(_Sanitiser):
    """A sanitiser turns tuples into lists."""

    def clean(self, v):
        return list(v) if isinstance(v, tuple) else v


class SetsToSortedLists(_Sanitiser):
    """A sanitiser turns sets into sorted lists."""

    def clean(self, v):
        return sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v


class IntKeysToStr(_Sanitiser):
    """A sanitiser turns integer dict keys into strings (as JSON does)."""

    def clean(self, v):
        return {(str(k) if isinstance(k, int) else k): x for k, x in v.items()} if isinstance(v, dict) else v


class DropsEmptyKey(_Sanitiser):
    """A sanitiser drops the empty-string key from dicts."""

    def clean(self, v):
        return {k: x for k, x in v.items() if k != ""} if isinstance(v, dict) else v


class EqualResaveMovesToLatest(Wrapper):
    """An equal re-save deletes and saves again, moving the checkpoint to the latest."""

    async def save(self, checkpoint, **kw):
        try:
            existing = await self.inner.load(checkpoint.checkpoint_id)
        except Exception:
            existing = None
        if existing is not None and existing == checkpoint and not kw:
            info = await self.inner.checkpoint_info(checkpoint.checkpoint_id)
            if info is not None and info.container_id is None:
                await self.inner.delete(checkpoint.checkpoint_id)
        return await self.inner.save(checkpoint, **kw)


class ListWorkflowsIncludesNestedOnly(Wrapper):
    """list_workflows also names workflows that only have nested records."""

    async def list_workflows(self):
        names = set(await self.inner.list_workflows())
        for r in await self.inner.list_records():
            names.add(r.workflow_name)
        return sorted(names)


class WalkStopsAtNested(Wrapper):
    """An ids-only walk reaching a nested record reports it as the root."""

    async def walk_ancestry_ids(self, checkpoint_id, **kw):
        w = await self.inner.walk_ancestry_ids(checkpoint_id, **kw)
        items = []
        for i in w.items:
            info = await self.inner.checkpoint_info(i)
            items.append(i)
            if info and info.container_id is not None and i != checkpoint_id:
                return dataclasses.replace(w, items=tuple(items), end=AncestryEnd.ROOT, end_id=i)
        return w


class BytesAsLatin1Str(_Sanitiser):
    """Large bytes are stored as latin-1 text and come back as str."""

    def clean(self, v):
        return v.decode("latin-1") if type(v) is bytes and len(v) > 1000 else v


class TruncatesLargeStrings(_Sanitiser):
    """Strings are cut at 65,535 characters (a TEXT column's limit)."""

    def clean(self, v):
        return v[:65535] if isinstance(v, str) else v


class TimestampsNormalised(Wrapper):
    """Timestamps are rewritten to UTC ISO form."""

    async def save(self, checkpoint, **kw):
        ts = datetime.datetime.fromisoformat(checkpoint.timestamp).astimezone(datetime.UTC).isoformat()
        return await self.inner.save(dataclasses.replace(checkpoint, timestamp=ts), **kw)


class VersionDefaulted(Wrapper):
    """The version field is always stored as '1.0'."""

    async def save(self, checkpoint, **kw):
        return await self.inner.save(dataclasses.replace(checkpoint, version="1.0"), **kw)


MUTANTS: list[type[Wrapper]] = [
    LatestByIteration,
    DropsEmptyState,
    DeleteMissingRaises,
    IgnoresExpectedSignature,
    PruneKeepsOneMore,
    NegativeIndexKeepsFirst,
    WritesSorted,
    NoneMeansUnfenced,
    IgnoresIncludeNested,
    InfoContainerIsRoot,
    ListNestedAllDescendants,
    DeleteWorkflowLeavesTombstones,
    LatestCacheNotInvalidatedByDelete,
    TuplesToLists,
    SetsToSortedLists,
    IntKeysToStr,
    DropsEmptyKey,
    EqualResaveMovesToLatest,
    ListWorkflowsIncludesNestedOnly,
    WalkStopsAtNested,
    BytesAsLatin1Str,
    TruncatesLargeStrings,
    TimestampsNormalised,
    VersionDefaulted,
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.__name__ for m in MUTANTS])
def test_the_family_catches_an_unseen_mutant(mutant: type[Wrapper]) -> None:
    assert failures(run_model(wrapped(mutant))), f"the model family let {mutant.__name__} through"
