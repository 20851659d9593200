"""Redis on shared and damaged deployments (issue 27): a record that lost its body, tenants that
share a server under ACL users, users without CONFIG or INFO, the per-prefix workflow index.

Each test here failed on the code before: a body-less record read as not found (and a walk
with bodies raised a bare TypeError); ``list_workflows()`` found workflow names with SCAN, which
ACL key patterns do not restrict, so tenant A with B's prefix listed B's workflows; every handle
probed ``CONFIG GET`` and ``INFO``, leaving two ACL LOG denials per handle for a user without
them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import redis_servers

from storages import CheckpointCorruptedError, WorkflowCheckpoint
from storages.redis import RedisCheckpointStorage

redis_mark = pytest.mark.redis
cluster_mark = pytest.mark.redis_cluster

STORES: dict[str, Callable[[], Any]] = {
    "real": lambda: redis_servers.server_store(redis_servers.redis_url()),
    "real-ttl": lambda: redis_servers.server_store(
        redis_servers.with_query(redis_servers.redis_url(), ttl="600")
    ),
    "fake": redis_servers.fake_store,
}


@pytest.fixture(params=sorted(STORES))
async def storage(request: pytest.FixtureRequest) -> AsyncIterator[RedisCheckpointStorage]:
    async with STORES[request.param]() as maker, maker() as opened:
        yield opened


@pytest.fixture
async def cluster_storage() -> AsyncIterator[RedisCheckpointStorage]:
    async with redis_servers.server_store(redis_servers.shared_cluster().url) as maker, maker() as opened:
        yield opened


# ------------------------------------------------------------------ a record without its body

BODY_READS: dict[str, Callable[[Any], Awaitable[object]]] = {
    "load": lambda s: s.load("b"),
    "read_raw_body": lambda s: s.read_raw_body("b"),
    "get_latest": lambda s: s.get_latest(workflow_name="wf"),
    "get_latest(signature)": lambda s: s.get_latest(workflow_name="wf", graph_signature_hash="sig"),
    "list_checkpoints": lambda s: s.list_checkpoints(workflow_name="wf"),
    "walk_ancestry": lambda s: s.walk_ancestry("b"),
    "walk_ancestry from a child": lambda s: s.walk_ancestry("c"),
}


def _checkpoint(checkpoint_id: str, previous: str | None, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        "wf", "sig", checkpoint_id=checkpoint_id, previous_checkpoint_id=previous, state={}, **fields
    )


async def _bodiless_reads(storage: RedisCheckpointStorage) -> None:
    for checkpoint in (_checkpoint("a", None), _checkpoint("b", "a")):
        await storage.save(checkpoint)
    await storage.save(WorkflowCheckpoint("other", "sig", checkpoint_id="c", previous_checkpoint_id="b"))
    await storage._client.hdel(storage.keys.record("wf", "b"), "b")
    fresh = storage.new_handle()
    try:
        # The handle that saved "b" remembers its home (the MULTI/EXEC load); a fresh one does not.
        for handle in (storage, fresh):
            for name, read in BODY_READS.items():
                with pytest.raises(
                    CheckpointCorruptedError, match="'b' is corrupted: its record is stored without its body"
                ):
                    await read(handle)
                assert name  # the read that failed is named in pytest's report
            # What needs no body still answers: the index and the links are intact.
            assert await handle.list_checkpoint_ids(workflow_name="wf") == ["a", "b"]
            assert (await handle.walk_ancestry_ids("b")).items == ("b", "a")
    finally:
        await fresh.aclose()


@redis_mark
async def test_a_record_without_its_body_is_corrupted_not_missing(storage: RedisCheckpointStorage) -> None:
    await _bodiless_reads(storage)


@cluster_mark
async def test_a_record_without_its_body_is_corrupted_not_missing_on_a_cluster(
    cluster_storage: RedisCheckpointStorage,
) -> None:
    await _bodiless_reads(cluster_storage)


@redis_mark
async def test_a_nested_record_without_its_body_is_corrupted(storage: RedisCheckpointStorage) -> None:
    child = WorkflowCheckpoint("sub", "sig", checkpoint_id="kid", state={})
    parent = WorkflowCheckpoint(
        "wf", "sig", checkpoint_id="b", state={"_executor_state": {"s": {"sub_workflow_checkpoint": child}}}
    )
    await storage.save(parent)
    await storage._client.hdel(storage.keys.record("wf", "kid"), "b")
    fresh = storage.new_handle()
    try:
        for read in (
            lambda s: s.load("b"),
            lambda s: s.get_latest(workflow_name="wf"),
            lambda s: s.walk_ancestry("b"),
            lambda s: s.list_checkpoints(workflow_name="sub", include_nested=True),
        ):
            with pytest.raises(
                CheckpointCorruptedError, match="'kid' is corrupted: its record is stored without"
            ):
                await read(fresh)
    finally:
        await fresh.aclose()
