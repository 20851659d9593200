"""Redis under loss: the storage refuses a server that may evict its keys, and a record that was
lost anyway (evicted, or deleted behind the storage's back) is reported by every read that meets
it, never replaced by an older checkpoint; no read writes.

Policies are set only on private servers this module starts (and, for one node of the session's
test cluster, set and restored): the development server's configuration is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis_servers
from redis.asyncio import Redis

from storages import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    StorageConfigurationError,
    WorkflowCheckpoint,
)
from storages.errors import EvictionPolicyError
from storages.redis import RedisCheckpointStorage
from storages.redis import client as redis_storage

redis_mark = pytest.mark.redis
cluster_mark = pytest.mark.redis_cluster


def _chain(workflow_name: str, length: int) -> list[WorkflowCheckpoint]:
    chain: list[WorkflowCheckpoint] = []
    previous = None
    for index in range(length):
        checkpoint = WorkflowCheckpoint(
            workflow_name, "sig", previous_checkpoint_id=previous, iteration_count=index
        )
        chain.append(checkpoint)
        previous = checkpoint.checkpoint_id
    return chain


@asynccontextmanager
async def _fake(**options: Any) -> AsyncIterator[RedisCheckpointStorage]:
    import fakeredis

    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    storage = RedisCheckpointStorage(client, prefix=redis_servers.fresh_prefix("evict"), **options)
    try:
        yield storage
    finally:
        await storage.aclose()
        await client.aclose()


@asynccontextmanager
async def _real(**query: str) -> AsyncIterator[RedisCheckpointStorage]:
    prefix = redis_servers.fresh_prefix("evict")
    url = redis_servers.with_query(redis_servers.redis_url(), prefix=prefix, **query)
    try:
        async with RedisCheckpointStorage.from_url(url) as storage:
            yield storage
    finally:
        await redis_servers.wipe(redis_servers.redis_url(), prefix)


def _stores(**query: str) -> dict[str, Callable[[], Any]]:
    fake_options: dict[str, Any] = {"allow_evicting_policy": True}
    if "ttl" in query:
        fake_options["ttl"] = float(query["ttl"])
    return {"real": lambda: _real(**query), "fake": lambda: _fake(**fake_options)}


async def _lose(storage: RedisCheckpointStorage, workflow_name: str, checkpoint_id: str) -> None:
    """What eviction does to a record: its hash goes, the indexes keep the id."""
    assert await storage.backend.client.delete(storage.keys.record(workflow_name, checkpoint_id)) == 1


# ---------------------------------------------------------------------- reads after a loss


@redis_mark
@pytest.mark.parametrize("where", ["real", "fake"])
async def test_latest_never_falls_back_to_an_older_checkpoint(where: str) -> None:
    async with _stores()[where]() as storage:
        first, second = _chain("wf", 2)
        await storage.save(first)
        await storage.save(second)
        await _lose(storage, "wf", second.checkpoint_id)
        for signature in (None, "sig"):
            with pytest.raises(CheckpointCorruptedError, match="get_latest does not fall back") as caught:
                await storage.get_latest(workflow_name="wf", graph_signature_hash=signature)
            assert caught.value.checkpoint_id == second.checkpoint_id
        # The read left the index alone: re-saving the lost checkpoint makes it whole again.
        assert await storage.backend.client.zscore(storage.keys.top("wf"), second.checkpoint_id) is not None
        await storage.save(second)
        assert await storage.get_latest(workflow_name="wf") == second
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [
            first.checkpoint_id,
            second.checkpoint_id,
        ]


@redis_mark
@pytest.mark.parametrize("where", ["real", "fake"])
async def test_listing_reports_a_lost_checkpoint_instead_of_a_shorter_list(where: str) -> None:
    # Both stores here may lose records by design: the real one opts into an evicting policy,
    # the fake one always does. Every listing then checks each entry.
    async with _stores(allow_evicting_policy="true")[where]() as storage:
        chain = _chain("wf", 3)
        for checkpoint in chain:
            await storage.save(checkpoint)
        await _lose(storage, "wf", chain[0].checkpoint_id)
        listings: list[Callable[[], Awaitable[object]]] = [
            lambda: storage.list_checkpoint_ids(workflow_name="wf"),
            lambda: storage.list_checkpoints(workflow_name="wf"),
            lambda: storage.list_checkpoint_ids(workflow_name="wf", graph_signature_hash="sig"),
            lambda: storage.list_checkpoints(workflow_name="wf", include_nested=True),
        ]
        for listing in listings:
            with pytest.raises(CheckpointCorruptedError, match="does not skip lost checkpoints") as caught:
                await listing()
            assert caught.value.checkpoint_id == chain[0].checkpoint_id
        # The newest is intact, so latest still answers with it.
        assert await storage.get_latest(workflow_name="wf") == chain[-1]


@redis_mark
async def test_where_records_cannot_vanish_the_id_listing_reads_the_index_and_reads_report_a_loss() -> None:
    # No TTL and no evicting policy: a record goes only if deleted behind the storage's back. The
    # id listing is then one ZRANGE (docs/redis.md: checking every entry cost ten times that) and
    # lists the id; every read that needs the record reports it, naming it.
    async with _stores()["real"]() as storage:
        chain = _chain("wf", 3)
        for checkpoint in chain:
            await storage.save(checkpoint)
        await _lose(storage, "wf", chain[0].checkpoint_id)
        ids = [checkpoint.checkpoint_id for checkpoint in chain]
        assert await storage.list_checkpoint_ids(workflow_name="wf") == ids
        assert await storage.list_checkpoint_ids(workflow_name="wf", graph_signature_hash="sig") == ids
        async with storage.new_handle() as cold:  # a handle that never saw the record
            with pytest.raises(CheckpointCorruptedError) as loaded:
                await cold.load(chain[0].checkpoint_id)
            assert loaded.value.checkpoint_id == chain[0].checkpoint_id
        with pytest.raises(CheckpointCorruptedError, match="does not skip lost checkpoints") as listed:
            await storage.list_checkpoints(workflow_name="wf")
        assert listed.value.checkpoint_id == chain[0].checkpoint_id
        with pytest.raises(CheckpointCorruptedError) as nested:
            await storage.list_checkpoint_ids(workflow_name="wf", include_nested=True)
        assert nested.value.checkpoint_id == chain[0].checkpoint_id


@redis_mark
@pytest.mark.parametrize("where", ["real", "fake"])
async def test_listing_checks_an_escaped_id_under_its_own_key(where: str) -> None:
    # The listing script builds the keys of ids that need no escaping by concatenation. The raw
    # text of "x%3Ay" is the escaped form of "x:y", so its record must still be looked for under
    # its own key: under the key its raw text names (x:y's record, listed under another graph
    # signature, so not checked itself) the loss would hide. (A store that may evict: its id
    # listing checks every entry.)
    async with _stores(allow_evicting_policy="true")[where]() as storage:
        plain = [WorkflowCheckpoint("wf", "sig", checkpoint_id=f"plain-{index}") for index in range(450)]
        escaped = WorkflowCheckpoint("wf", "sig", checkpoint_id="x%3Ay")
        await storage.save(WorkflowCheckpoint("wf", "other", checkpoint_id="x:y"))
        listed = [*plain[:300], escaped, *plain[300:]]
        for checkpoint in listed:
            await storage.save(checkpoint)
        ids = [checkpoint.checkpoint_id for checkpoint in listed]
        assert await storage.list_checkpoint_ids(workflow_name="wf", graph_signature_hash="sig") == ids
        await _lose(storage, "wf", "x%3Ay")
        for include_nested in (False, True):
            with pytest.raises(CheckpointCorruptedError) as caught:
                await storage.list_checkpoint_ids(
                    workflow_name="wf", graph_signature_hash="sig", include_nested=include_nested
                )
            assert caught.value.checkpoint_id == "x%3Ay"


@redis_mark
@pytest.mark.parametrize("where", ["real", "fake"])
async def test_with_a_ttl_only_what_expiry_explains_is_skipped(where: str) -> None:
    # Records expire oldest first: gone entries older than every stored record are expired ones.
    async with _stores(ttl="3600")[where]() as storage:
        chain = _chain("wf", 4)
        for checkpoint in chain:
            await storage.save(checkpoint)
        await _lose(storage, "wf", chain[0].checkpoint_id)
        ids = [checkpoint.checkpoint_id for checkpoint in chain]
        assert await storage.list_checkpoint_ids(workflow_name="wf") == ids[1:]
        await _lose(storage, "wf", chain[2].checkpoint_id)  # newer than chain[1], which is stored
        with pytest.raises(CheckpointCorruptedError) as caught:
            await storage.list_checkpoint_ids(workflow_name="wf")
        assert caught.value.checkpoint_id == ids[2]
        await _lose(storage, "wf", chain[3].checkpoint_id)
        with pytest.raises(CheckpointCorruptedError) as caught:
            await storage.get_latest(workflow_name="wf")
        assert caught.value.checkpoint_id == ids[3]
        await _lose(storage, "wf", chain[1].checkpoint_id)  # now every record is gone: expiry
        assert await storage.get_latest(workflow_name="wf") is None
        assert await storage.list_checkpoint_ids(workflow_name="wf") == []


async def _keyspace(client: Redis, prefix: str) -> dict[str, tuple[str, Any, bool]]:
    """Every key of the prefix with its type, value and whether it has a TTL."""
    found: dict[str, tuple[str, Any, bool]] = {}
    async for raw in client.scan_iter(match=f"{prefix}:*"):
        key = raw.decode()
        kind = (await client.type(key)).decode()
        value: Any
        if kind == "hash":
            value = await client.hgetall(key)
        elif kind == "zset":
            value = await client.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            value = await client.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(await client.smembers(key))
        else:
            value = await client.get(key)
        found[key] = (kind, value, await client.pttl(key) > 0)
    return found


@redis_mark
async def test_no_read_writes_to_the_store() -> None:
    async with _real() as storage:
        first, second, third = _chain("wf", 3)
        child = WorkflowCheckpoint("child", "sig", checkpoint_id="nested-child")
        state = {"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}}
        parent = WorkflowCheckpoint("wf", "sig", previous_checkpoint_id=third.checkpoint_id, state=state)
        for checkpoint in (first, second, third, parent):
            await storage.save(checkpoint)
        await storage.prune(workflow_name="wf", keep_last=3)
        await _lose(storage, "wf", parent.checkpoint_id)  # the newest: latest and listing meet it
        await storage.backend.client.set(storage.keys.location("orphan"), "wf")  # a pointer to nothing
        before = await _keyspace(storage.backend.client, storage.prefix)
        reads: list[Callable[[], Awaitable[object]]] = [
            lambda: storage.get_latest(workflow_name="wf"),
            lambda: storage.get_latest(workflow_name="wf", graph_signature_hash="sig"),
            lambda: storage.list_checkpoints(workflow_name="wf"),
            lambda: storage.list_checkpoint_ids(workflow_name="wf", include_nested=True),
            lambda: storage.list_checkpoint_ids(workflow_name="child", include_nested=True),
            lambda: storage.load(parent.checkpoint_id),
            lambda: storage.load(third.checkpoint_id),
            lambda: storage.load("orphan"),
            lambda: storage.walk_ancestry(third.checkpoint_id),
            lambda: storage.walk_ancestry_ids(parent.checkpoint_id),
            lambda: storage.list_nested(parent.checkpoint_id),
            lambda: storage.checkpoint_info("orphan"),
            lambda: storage.list_records(),
            lambda: storage.list_tombstones(),
            lambda: storage.list_workflows(),
            lambda: storage.read_raw_body(third.checkpoint_id),
        ]
        for read in reads:
            # The lost newest record and the orphan pointer are reported, as they must be.
            with contextlib.suppress(CheckpointCorruptedError, CheckpointNotFoundError):
                await read()
            assert await _keyspace(storage.backend.client, storage.prefix) == before


# ---------------------------------------------------------------------- the eviction policy


@pytest.fixture(scope="module")
def private_server() -> Iterator[redis_servers.RedisServerProcess]:
    """A server of this module's own: its maxmemory-policy is changed freely."""
    server = redis_servers.RedisServerProcess("--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
    server.start()
    yield server
    server.stop()


async def _set_policy(url: str, policy: str) -> None:
    client = Redis.from_url(url)
    try:
        await client.config_set("maxmemory-policy", policy)
    finally:
        await client.aclose()


@redis_mark
@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
async def test_an_evicting_policy_is_refused_at_first_use(
    private_server: redis_servers.RedisServerProcess, policy: str
) -> None:
    await _set_policy(private_server.url, policy)
    url = redis_servers.with_query(private_server.url, prefix=redis_servers.fresh_prefix("evict"))
    storage = RedisCheckpointStorage.from_url(url)
    with pytest.raises(EvictionPolicyError) as caught:
        await storage.save(WorkflowCheckpoint("wf", "sig"))
    error = caught.value
    assert isinstance(error, StorageConfigurationError)
    assert error.policy == policy
    assert "allow_evicting_policy" in str(error)
    assert "noeviction" in str(error)
    await storage.aclose()
    client = Redis.from_url(private_server.url)
    try:
        with pytest.raises(EvictionPolicyError):
            async with RedisCheckpointStorage(client, prefix="injected") as injected:
                await injected.list_workflows()
        assert await client.ping()  # the caller's client is left open for the caller
    finally:
        await client.aclose()


@redis_mark
async def test_a_refused_open_leaves_no_client_connected(
    private_server: redis_servers.RedisServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine counts a failed open as no open: aclose() does not close the backend, and the
    # next operation opens again. So the client that open built must not outlive its failure.
    await _set_policy(private_server.url, "allkeys-lru")
    built: list[Any] = []
    build = redis_storage.client_from_url

    def recorded(*args: Any, **kwargs: Any) -> Any:
        built.append(build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(redis_storage, "client_from_url", recorded)
    url = redis_servers.with_query(private_server.url, prefix=redis_servers.fresh_prefix("evict"))
    storage = RedisCheckpointStorage.from_url(url)
    for _ in range(2):  # each operation opens again, and fails again
        with pytest.raises(EvictionPolicyError):
            await storage.list_workflows()
    assert storage.backend.client is None
    await storage.aclose()
    assert len(built) == 2
    for client in built:
        pool = client.connection_pool
        connections = [*pool._available_connections, *pool._in_use_connections]
        assert connections  # the check connected: there was something to close
        assert not any(connection.is_connected for connection in connections)


@redis_mark
@pytest.mark.parametrize("policy", ["volatile-lru", "volatile-lfu", "volatile-random"])
async def test_a_policy_evicting_keys_with_a_ttl_is_refused_for_a_storage_with_a_ttl(
    private_server: redis_servers.RedisServerProcess, policy: str
) -> None:
    await _set_policy(private_server.url, policy)
    url = redis_servers.with_query(private_server.url, prefix=redis_servers.fresh_prefix("evict"), ttl="60")
    storage = RedisCheckpointStorage.from_url(url)
    with pytest.raises(EvictionPolicyError, match="every key of this storage has one") as caught:
        await storage.save(WorkflowCheckpoint("wf", "sig"))
    assert caught.value.policy == policy
    await storage.aclose()


@redis_mark
@pytest.mark.parametrize(
    ("policy", "ttl"),
    [
        ("noeviction", ""),
        ("noeviction", "60"),
        ("volatile-lru", ""),
        ("volatile-ttl", ""),
        ("volatile-ttl", "60"),
    ],
)
async def test_a_policy_that_spares_the_storages_keys_is_accepted(
    private_server: redis_servers.RedisServerProcess, policy: str, ttl: str
) -> None:
    await _set_policy(private_server.url, policy)
    prefix = redis_servers.fresh_prefix("evict")
    try:
        options = {"prefix": prefix, **({"ttl": ttl} if ttl else {})}  # "": no TTL
        async with RedisCheckpointStorage.from_url(
            redis_servers.with_query(private_server.url, **options)
        ) as storage:
            checkpoint = WorkflowCheckpoint("wf", "sig")
            await storage.save(checkpoint)
            assert await storage.load(checkpoint.checkpoint_id) == checkpoint
    finally:
        await redis_servers.wipe(private_server.url, prefix)


def _big(previous: WorkflowCheckpoint | None) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        "wf",
        "sig",
        previous_checkpoint_id=None if previous is None else previous.checkpoint_id,
        state={"payload": os.urandom(4096).hex()},
    )


_EVICTION_ATTEMPTS = 3
"""Runs of the eviction scenario before the test gives up on getting one that kept the counter."""


async def _evict_old_records(
    storage: RedisCheckpointStorage,
) -> tuple[list[WorkflowCheckpoint], WorkflowCheckpoint] | None:
    """Save old records, let them age, then save until the server evicts the first of them.

    Returns the old checkpoints and the newest one; or None when the server also evicted the
    workflow's sequence counter or its index (an INCR after that starts again from 1, a ZADD from
    an empty index: a save count above either shows it). The opt-out leaves the counter and index
    unprotected (docs/redis.md), so such a run shows nothing about what reads report.
    """
    old: list[WorkflowCheckpoint] = []
    for _ in range(120):  # about 1 MB of checkpoints, well under maxmemory
        old.append(_big(old[-1] if old else None))
        await storage.save(old[-1])
    # Redis's LRU clock ticks once a second: let the records above become the oldest keys,
    # so eviction takes them first.
    await asyncio.sleep(1.2)
    newest = old[-1]
    saves = len(old)
    for _ in range(3000):
        newest = _big(newest)
        await storage.save(newest)
        saves += 1
        if not await _stored(storage, old[0]):
            break
    else:
        pytest.fail("the server evicted nothing; the scenario did not happen")
    counter = await storage.backend.client.get(storage.keys.sequence("wf"))
    indexed = await storage.backend.client.zcard(storage.keys.top("wf"))
    if counter is None or int(counter) < saves or indexed < saves:
        return None
    return old, newest


async def _indexed_last(storage: RedisCheckpointStorage, checkpoint: WorkflowCheckpoint) -> bool:
    newest = await storage.backend.client.zrevrange(storage.keys.top("wf"), 0, 0)
    return newest == [checkpoint.checkpoint_id.encode()]


async def _stored(storage: RedisCheckpointStorage, checkpoint: WorkflowCheckpoint) -> bool:
    return bool(await storage.backend.client.exists(storage.keys.record("wf", checkpoint.checkpoint_id)))


@redis_mark
async def test_under_eviction_with_the_opt_out_a_lost_checkpoint_is_reported(
    private_server: redis_servers.RedisServerProcess,
) -> None:
    await _set_policy(private_server.url, "allkeys-lru")
    try:
        for _ in range(_EVICTION_ATTEMPTS):
            prefix = redis_servers.fresh_prefix("evict")
            url = redis_servers.with_query(private_server.url, prefix=prefix, allow_evicting_policy="true")
            try:
                async with RedisCheckpointStorage.from_url(url) as storage:
                    scenario = await _evict_old_records(storage)
                    if scenario is None:
                        continue
                    old, newest = scenario
                    lost = {record.checkpoint_id for record in old if not await _stored(storage, record)}
                    # Acknowledged checkpoints were evicted: listing says so instead of returning fewer.
                    with pytest.raises(CheckpointCorruptedError) as caught:
                        await storage.list_checkpoint_ids(workflow_name="wf")
                    assert caught.value.checkpoint_id in lost
                    if not await _indexed_last(storage, newest):
                        # The index went too, after the check above (the listing's large reply
                        # can push the server over its limit again): nothing to say of latest.
                        continue
                    # The newest record itself may be gone too: then latest names it, never an older one.
                    if await _stored(storage, newest):
                        latest = await storage.get_latest(workflow_name="wf")
                        if latest is None and not await _indexed_last(storage, newest):
                            continue  # the index went between the check and the read
                        assert latest == newest
                    else:
                        with pytest.raises(CheckpointCorruptedError) as latest_lost:
                            await storage.get_latest(workflow_name="wf")
                        assert latest_lost.value.checkpoint_id == newest.checkpoint_id
                    return
            finally:
                await redis_servers.wipe(private_server.url, prefix)
        pytest.fail(f"in {_EVICTION_ATTEMPTS} runs the server evicted the workflow's own counter or index")
    finally:
        await _set_policy(private_server.url, "noeviction")


@redis_mark
async def test_a_server_that_refuses_config_is_asked_through_info() -> None:
    # Managed services rename or forbid CONFIG; INFO memory still names the policy.
    server = redis_servers.RedisServerProcess(
        "--rename-command", "CONFIG", "", "--maxmemory-policy", "allkeys-lru"
    )
    server.start()
    try:
        storage = RedisCheckpointStorage.from_url(server.url)
        with pytest.raises(EvictionPolicyError, match="allkeys-lru"):
            await storage.list_workflows()
        await storage.aclose()
    finally:
        server.stop()


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_storage, "unverified_servers", set())


@redis_mark
@pytest.mark.usefixtures("fresh_warnings")
async def test_a_server_that_refuses_config_and_info_is_used_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = redis_servers.RedisServerProcess(
        "--rename-command", "CONFIG", "", "--rename-command", "INFO", "", "--maxmemory-policy", "allkeys-lru"
    )
    server.start()
    try:
        url = redis_servers.with_query(server.url, prefix="refusing")
        with caplog.at_level(logging.WARNING, logger="storages.redis"):
            root = RedisCheckpointStorage.from_url(url)
            for storage in (root, root.new_handle()):
                async with storage:
                    await storage.list_workflows()
        warnings = [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
        assert "allow_evicting_policy" in warnings[0].getMessage()
    finally:
        server.stop()


@redis_mark
@pytest.mark.usefixtures("fresh_warnings")
async def test_fakeredis_refuses_config_and_gets_the_warning_unless_opted_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="storages.redis"):
        async with _fake() as storage:
            await storage.save(WorkflowCheckpoint("wf", "sig"))
        warnings = [r.levelno for r in caplog.records if "maxmemory-policy" in r.getMessage()]
        assert warnings == [logging.WARNING]
        caplog.clear()
        redis_storage.unverified_servers.clear()
        async with _fake(allow_evicting_policy=True) as storage:
            await storage.save(WorkflowCheckpoint("wf", "sig"))
        assert not caplog.records  # the opt-out skips the check: no round trip, no warning


@redis_mark
def test_the_opt_out_is_a_url_option_and_a_keyword() -> None:
    on = RedisCheckpointStorage.from_url("redis://h/0?allow_evicting_policy=true")
    assert on.allow_evicting_policy
    assert on.new_handle().allow_evicting_policy
    assert not RedisCheckpointStorage.from_url("redis://h/0").allow_evicting_policy
    with pytest.raises(StorageConfigurationError, match="allow_evicting_policy must be true or false"):
        RedisCheckpointStorage.from_url("redis://h/0?allow_evicting_policy=perhaps")
    with pytest.raises(StorageConfigurationError, match="allow_evicting_policy must be True or False"):
        RedisCheckpointStorage(url="redis://h/0", allow_evicting_policy="yes")  # type: ignore[arg-type]


@cluster_mark
async def test_every_cluster_node_is_checked() -> None:
    cluster = redis_servers.shared_cluster()
    node = cluster.nodes[-1]  # not the seed node the URL names
    await _set_policy(node.url, "allkeys-lru")
    try:
        storage = RedisCheckpointStorage.from_url(
            redis_servers.with_query(cluster.url, prefix=redis_servers.fresh_prefix("evict"))
        )
        with pytest.raises(EvictionPolicyError) as caught:
            await storage.list_workflows()
        assert caught.value.node == f"127.0.0.1:{node.port}"
        await storage.aclose()
        opted_out = RedisCheckpointStorage.from_url(
            redis_servers.with_query(cluster.url, prefix="evict-opt-out", allow_evicting_policy="true")
        )
        async with opted_out:
            await opted_out.list_workflows()
    finally:
        await _set_policy(node.url, "noeviction")


@redis_mark
def test_a_reply_is_read_per_node_only_when_it_is_one() -> None:
    # A cluster client answers a command sent to several nodes per node, and one sent to a
    # single node (a one-node cluster) as a plain client does.
    per_node = {"10.0.0.1:7000": {"maxmemory-policy": "noeviction"}, "10.0.0.2:7000": {"x": "y"}}
    assert redis_storage.by_node(per_node) == per_node
    assert redis_storage.by_node({b"maxmemory-policy": b"allkeys-lru"}) == {
        None: {b"maxmemory-policy": b"allkeys-lru"}
    }
    assert redis_storage.config_policy({b"maxmemory-policy": b"allkeys-lru"}) == "allkeys-lru"
    info = {"maxmemory_policy": "volatile-ttl", "used_memory": 1}
    assert redis_storage.info_policy(info) == "volatile-ttl"
