"""Redis on shared and damaged deployments (issue 27): a record that lost its body, tenants that
share a server under ACL users, users without CONFIG or INFO, the per-prefix workflow index.

Each test here failed on the code before: a body-less record read as not found (and a walk
with bodies raised a bare TypeError); ``list_workflows()`` found workflow names with SCAN, which
ACL key patterns do not restrict, so tenant A with B's prefix listed B's workflows; every handle
probed ``CONFIG GET`` and ``INFO``, leaving two ACL LOG denials per handle for a user without
them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis_servers
from redis.asyncio import Redis

from storages import CheckpointCorruptedError, StorageConfigurationError, WorkflowCheckpoint
from storages.errors import EvictionPolicyError
from storages.redis import RedisCheckpointStorage
from storages.redis import client as redis_client

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
    await storage.backend.client.hdel(storage.keys.record("wf", "b"), "b")
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
    await storage.backend.client.hdel(storage.keys.record("wf", "kid"), "b")
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


# ------------------------------------------------------------------ tenants under ACL users


@pytest.fixture(scope="module")
def acl_server() -> Iterator[redis_servers.AclRedis]:
    server = redis_servers.AclRedis()
    try:
        yield server
    finally:
        server.stop()


KEY_OPERATIONS: dict[str, Callable[[Any], Awaitable[object]]] = {
    "list_workflows": lambda s: s.list_workflows(),
    "list_records": lambda s: s.list_records(),
    "list_tombstones": lambda s: s.list_tombstones(),
    "list_checkpoint_ids": lambda s: s.list_checkpoint_ids(workflow_name="secret-b"),
    "get_latest": lambda s: s.get_latest(workflow_name="secret-b"),
    "load": lambda s: s.load("b-1"),
    "save": lambda s: s.save(WorkflowCheckpoint("planted-by-a", "sig")),
    "delete_workflow": lambda s: s.delete_workflow(workflow_name="secret-b"),
}


@redis_mark
@pytest.mark.parametrize("written_before_the_index", [False, True])
async def test_a_tenant_with_another_tenants_prefix_sees_none_of_its_names(
    acl_server: redis_servers.AclRedis, written_before_the_index: bool
) -> None:
    tenant_b = RedisCheckpointStorage.from_url(acl_server.url("tenantB", prefix="B"))
    tenant_a = RedisCheckpointStorage.from_url(acl_server.url("tenantA", prefix="A"))
    a_with_b_prefix = RedisCheckpointStorage.from_url(acl_server.url("tenantA", prefix="B"))
    admin = acl_server.admin()
    try:
        await tenant_b.save(WorkflowCheckpoint("secret-b", "sig", checkpoint_id="b-1"))
        await tenant_b.save(WorkflowCheckpoint("secret-b2", "sig"))
        await tenant_a.save(WorkflowCheckpoint("mine-a", "sig"))
        if written_before_the_index:
            # What a store written by an earlier version holds: every key but the index.
            await admin.delete(tenant_b.keys.workflows, tenant_a.keys.workflows)
        # SCAN is not restricted by ACL key patterns; the listing reads B's index first, which is.
        for name, operation in KEY_OPERATIONS.items():
            with pytest.raises(StorageConfigurationError, match=r"refused .* to this user \(ACL\)") as caught:
                await operation(a_with_b_prefix)
            assert "secret" not in str(caught.value), name
        # Under its own prefix, tenant A lists its own workflow and nothing of B's.
        assert await tenant_a.list_workflows() == ["mine-a"]
        assert await tenant_b.list_workflows() == ["secret-b", "secret-b2"]
        # Nothing was written under B's prefix by A.
        assert await admin.exists(tenant_b.keys.top("planted-by-a")) == 0
    finally:
        for storage in (tenant_a, tenant_b, a_with_b_prefix):
            await storage.aclose()
        for prefix in ("A", "B"):
            await redis_servers.delete_prefix(admin, prefix)
        await admin.aclose()


async def _acl_denials(admin: Redis, user: str) -> int:
    """Denials the server logged for ``user`` (ACL LOG groups repeats into one entry's count)."""
    return sum(int(entry["count"]) for entry in await admin.acl_log() if entry["username"] == user)


@redis_mark
async def test_a_user_without_config_or_info_is_probed_once_per_process(
    acl_server: redis_servers.AclRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh process: nothing remembered about this server yet.
    monkeypatch.setattr(redis_client, "refused_probes_by_server", {}, raising=False)
    admin = acl_server.admin()
    await admin.acl_log_reset()
    root = RedisCheckpointStorage.from_url(acl_server.url("limited", prefix="L"))
    try:
        handles = [root, *(root.new_handle() for _ in range(5))]
        for handle in handles:
            await handle.save(WorkflowCheckpoint("w", "sig"))
            await handle.list_workflows()
        # One denial (CONFIG GET); INFO is not asked of a user the ACL restricts.
        assert await _acl_denials(admin, "limited") == 1
        # Another root storage on the same server and user remembers it too; the key operations
        # of the user's own prefix were never denied.
        other = RedisCheckpointStorage.from_url(acl_server.url("limited", prefix="L:other"))
        async with other:
            await other.save(WorkflowCheckpoint("w", "sig"))
        assert await _acl_denials(admin, "limited") == 1
    finally:
        for handle in handles:
            await handle.aclose()
        await redis_servers.delete_prefix(admin, "L")
        await redis_servers.delete_prefix(admin, "L:other")
        await admin.aclose()


@redis_mark
async def test_a_user_who_may_read_the_policy_is_still_checked_on_every_handle(
    acl_server: redis_servers.AclRedis,
) -> None:
    # The eviction check's semantics for a user with CONFIG: each handle reads the policy.
    admin = acl_server.admin()
    root = RedisCheckpointStorage.from_url(acl_server.url("tenantA", prefix="A"))
    try:
        async with root:
            await root.list_workflows()
        await admin.config_set("maxmemory-policy", "allkeys-lru")
        handle = root.new_handle()
        with pytest.raises(EvictionPolicyError, match="allkeys-lru"):
            await handle.list_workflows()
        await handle.aclose()
    finally:
        await admin.config_set("maxmemory-policy", "noeviction")
        await redis_servers.delete_prefix(admin, "A")
        await admin.aclose()


# ------------------------------------------------------------------ the workflow index


def _no_scan(storage: RedisCheckpointStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("SCAN was used")

    monkeypatch.setattr(storage.backend.client, "scan_iter", refuse)


async def _index_lifecycle(storage: RedisCheckpointStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    parent = WorkflowCheckpoint(
        "wf",
        "sig",
        checkpoint_id="p",
        state={"_executor_state": {"s": {"sub_workflow_checkpoint": WorkflowCheckpoint("sub", "sig")}}},
    )
    await storage.save(parent)
    await storage.save(WorkflowCheckpoint("other", "sig", checkpoint_id="o1"))
    await storage.save(WorkflowCheckpoint("other", "sig", checkpoint_id="o2", previous_checkpoint_id="o1"))
    _no_scan(storage, monkeypatch)
    assert await storage.list_workflows() == ["other", "wf"]
    assert {info.workflow_name for info in await storage.list_records()} == {"other", "wf", "sub"}
    await storage.prune(workflow_name="other", keep_last=1)
    assert await storage.list_tombstones() == ["o1"]
    await storage.delete("p")  # wf and sub have nothing left
    assert await storage.list_workflows() == ["other"]
    assert await storage.backend.client.zscore(storage.keys.workflows, "wf") is None
    assert await storage.backend.client.zscore(storage.keys.workflows, "sub") is None
    await storage.delete_workflow(workflow_name="other")
    assert await storage.list_workflows() == []
    assert await storage.list_tombstones() == []
    assert await storage.backend.client.zrange(storage.keys.workflows, 0, -1) == [b""]  # only the mark
    await storage.save(WorkflowCheckpoint("other", "sig"))
    assert await storage.list_workflows() == ["other"]


@redis_mark
async def test_the_workflow_index_follows_saves_and_removals_without_scan(
    storage: RedisCheckpointStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _index_lifecycle(storage, monkeypatch)


@cluster_mark
async def test_the_workflow_index_follows_saves_and_removals_without_scan_on_a_cluster(
    cluster_storage: RedisCheckpointStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _index_lifecycle(cluster_storage, monkeypatch)


async def _written_before_the_index(storage: RedisCheckpointStorage) -> None:
    for name in ("a", "b:{x}%", "c"):
        await storage.save(WorkflowCheckpoint(name, "sig"))
    await storage.prune(workflow_name="c", keep_last=0)  # c: tombstones only
    await storage.backend.client.delete(storage.keys.workflows)  # what an earlier version wrote
    fresh = storage.new_handle()
    try:
        # Still listed (by SCAN, once the index was read), and the read wrote nothing.
        assert await fresh.list_workflows() == ["a", "b:{x}%"]
        assert len(await fresh.list_tombstones()) == 1
        assert await storage.backend.client.exists(storage.keys.workflows) == 0
        # The next save completes the index: from then on no listing scans.
        await fresh.save(WorkflowCheckpoint("d", "sig"))
        members = await storage.backend.client.zrange(storage.keys.workflows, 0, -1)
        assert sorted(members) == [b"", b"a", b"b:{x}%", b"c", b"d"]
        fresh.backend.client.scan_iter = None  # any SCAN now fails
        assert await fresh.list_workflows() == ["a", "b:{x}%", "d"]
    finally:
        await fresh.aclose()


@redis_mark
async def test_a_store_written_before_the_index_lists_and_is_indexed_by_its_next_save(
    storage: RedisCheckpointStorage,
) -> None:
    await _written_before_the_index(storage)


@cluster_mark
async def test_a_store_written_before_the_index_is_indexed_on_a_cluster(
    cluster_storage: RedisCheckpointStorage,
) -> None:
    await _written_before_the_index(cluster_storage)


@cluster_mark
async def test_a_cluster_index_entry_left_by_a_crash_is_not_listed(
    cluster_storage: RedisCheckpointStorage,
) -> None:
    # The client adds a name before the save's script; a crash between leaves the name alone.
    await cluster_storage.save(WorkflowCheckpoint("real", "sig"))
    await cluster_storage.backend.client.zadd(cluster_storage.keys.workflows, {"crashed": float("inf")})
    assert await cluster_storage.list_workflows() == ["real"]
    assert await cluster_storage.list_records() != []


@redis_mark
async def test_with_a_ttl_expired_workflows_leave_the_index() -> None:
    prefix = redis_servers.fresh_prefix("ttl-index")
    url = redis_servers.with_query(redis_servers.redis_url(), prefix=prefix, ttl="0.3")
    storage = RedisCheckpointStorage.from_url(url)
    try:
        await storage.save(WorkflowCheckpoint("old", "sig"))
        assert await storage.list_workflows() == ["old"]
        await asyncio.sleep(0.5)
        assert await storage.list_workflows() == []  # its keys expired: not listed
        await storage.save(WorkflowCheckpoint("new", "sig"))
        # The save dropped the expired name from the index, which lives as long as its newest name.
        assert sorted(await storage.backend.client.zrange(storage.keys.workflows, 0, -1)) == [b"", b"new"]
        assert 0 < await storage.backend.client.pttl(storage.keys.workflows) <= 300
    finally:
        await storage.aclose()
        await redis_servers.wipe(redis_servers.redis_url(), prefix)


@cluster_mark
async def test_a_cluster_save_racing_a_removal_that_empties_its_workflow_stays_listed(
    cluster_storage: RedisCheckpointStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The name goes in the index before the save's script; here another handle deletes the
    # workflow right then, removing the name, and the save's script runs after: the script says
    # the workflow was empty, so the save lists it again.
    await cluster_storage.save(WorkflowCheckpoint("w", "sig", checkpoint_id="first"))
    remover = cluster_storage.new_handle()
    span = cluster_storage.backend.span
    listed = span.list_workflows_of  # type: ignore[union-attr]

    async def listed_then_emptied(names: list[str]) -> None:
        await listed(names)
        assert await remover.delete_workflow(workflow_name="w") == 1
        assert await cluster_storage.backend.client.zscore(cluster_storage.keys.workflows, "w") is None

    monkeypatch.setattr(span, "list_workflows_of", listed_then_emptied)
    try:
        await cluster_storage.save(WorkflowCheckpoint("w", "sig", checkpoint_id="second"))
    finally:
        await remover.aclose()
    assert await cluster_storage.list_checkpoint_ids(workflow_name="w") == ["second"]
    assert await cluster_storage.list_workflows() == ["w"]
