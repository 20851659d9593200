"""Redis and PostgreSQL requests whose answer is lost after the server applied them, injected by
a TCP proxy (tests/fault_proxy.py) that lets the request reach the server and then cuts the
connection before its answer reaches the client.

For each request of the "Lost answers" tables (docs/redis.md, docs/postgres.md): a save, plain
and fenced, of one checkpoint, of a family (a checkpoint with one nested in it) and of a body
large enough for Redis's staged transaction; a delete, a prune and a delete_workflow; on
PostgreSQL, the COMMIT of the schema's creation at open. The proxy loses the first answer (the
client's resend must get the right one) or every answer (the operation must raise
StorageUnavailableError, never answer wrongly). Then every acknowledged checkpoint not removed
is still stored as it was, the workflow reads (list, get_latest, load), repeating the operation
is a no-op, the next fenced save goes through, and verify finds nothing left behind (on Redis,
no stage key either).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager as ContextManager
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import postgres_servers
import pytest
import redis_servers
from fault_proxy import FaultProxy
from redis.asyncio import Redis

from storages import CheckpointStore, StorageUnavailableError, WorkflowCheckpoint
from storages.redis import RedisCheckpointStorage, escape, script_sha
from storages.redis.commit import STAGED_BODY_MIN
from storages.tools.verify import verify

LARGE_BODY = STAGED_BODY_MIN + 32 * 1024
"""A body Redis saves through its staged transaction (random bytes: nothing compresses them)."""

_POSTGRES_STATEMENTS = {
    # Text that only these statements carry (storages/postgres/commit.py); a statement is sent
    # with its text until psycopg prepares it, after five runs on one connection.
    "delete": b"WITH target AS",
    "prune": b"doomed AS",
    "delete_workflow": b"unburied AS",
}
_REDIS_SCRIPTS = {"delete": "remove", "prune": "prune", "delete_workflow": "delete_workflow"}


def through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's (credentials, path and options kept)."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@127.0.0.1:{port}" if credentials else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass
class LossyStore:
    """A fresh store on a real server, reached through a proxy that can lose answers."""

    backend: str
    proxy: FaultProxy
    new_handle: Callable[[], CheckpointStore]
    server_url: str
    """The server itself, not through the proxy."""

    def losing_save_answers(
        self, saved: WorkflowCheckpoint, *, family: bool, times: int
    ) -> ContextManager[None]:
        """The proxy armed at the save script (Redis) or statement (PostgreSQL) of ``saved``."""
        if self.backend == "redis":
            # Plain Redis saves a lone checkpoint with save_one (by a transaction when it is
            # large, the script's EVALSHA at its end), a family with save.
            script = script_sha("save" if family else "save_one").encode()
            return self.proxy.losing_answers(script, along_with=saved.checkpoint_id.encode(), times=times)
        return self.proxy.losing_answers(bind_parameter(saved.checkpoint_id), times=times)

    def losing_removal_answers(self, operation: str, subject: str, times: int) -> ContextManager[None]:
        """The proxy armed at ``operation`` ("delete" of the checkpoint ``subject``, "prune" or
        "delete_workflow" of the workflow ``subject``); not at the request that cleans the
        workflow's pending-writes log, which prune and delete_workflow send apart."""
        if self.backend == "redis":
            # The script's first key routes it: the checkpoint's location pointer for a delete,
            # the workflow's index otherwise.
            key = f"{{{escape(subject)}}}:{'loc' if operation == 'delete' else 'top'}"
            script = script_sha(_REDIS_SCRIPTS[operation]).encode()
            return self.proxy.losing_answers(script, along_with=key.encode(), times=times)
        statement = _POSTGRES_STATEMENTS[operation]
        return self.proxy.losing_answers(statement, along_with=bind_parameter(subject), times=times)


def bind_parameter(value: str) -> bytes:
    """A text parameter as a PostgreSQL Bind message carries it: its length (4 bytes), its bytes."""
    data = value.encode()
    return len(data).to_bytes(4, "big") + data


@asynccontextmanager
async def _redis_store(proxy: FaultProxy) -> AsyncIterator[LossyStore]:
    server_url = redis_servers.redis_url()
    async with redis_servers.server_store(through(server_url, proxy.port)) as maker:
        yield LossyStore("redis", proxy, maker, server_url)


@asynccontextmanager
async def _postgres_store(proxy: FaultProxy) -> AsyncIterator[LossyStore]:
    server_url = postgres_servers.run_database_url()
    async with postgres_servers.schema_store(through(server_url, proxy.port)) as maker:
        yield LossyStore("postgres", proxy, maker, server_url)


_STORES = {
    # backend: (its server's URL, its default port, a fresh store through a proxy)
    "redis": (redis_servers.redis_url, 6379, _redis_store),
    "postgres": (postgres_servers.server_url, 5432, _postgres_store),
}


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
async def lossy(request: pytest.FixtureRequest) -> AsyncIterator[LossyStore]:
    server_url, default_port, fresh_store = _STORES[request.param]
    upstream = urlsplit(server_url())
    with FaultProxy(upstream.port or default_port, upstream.hostname or "127.0.0.1") as proxy:
        async with fresh_store(proxy) as opened:
            yield opened


def checkpoint(
    workflow_name: str, previous: WorkflowCheckpoint | None = None, **fields: Any
) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash="sig",
        previous_checkpoint_id=None if previous is None else previous.checkpoint_id,
        **fields,
    )


LOSSES = {"once": 1, "every": 50}
"""How many answers in a row the proxy loses: the first (the client's resend gets its answer), or
every one (more than any retry budget here: the operation gives up)."""


async def outcome(operation: Awaitable[Any], losses: str) -> Any:
    """The operation's answer after losing one; after losing every one, the StorageUnavailableError
    it must raise (retriable: the caller cannot tell whether the request was applied)."""
    if losses == "once":
        return await operation
    with pytest.raises(StorageUnavailableError):
        await operation
    return None


class History:
    """A workflow of three checkpoints saved with fences, and another workflow that no fault touches."""

    def __init__(self) -> None:
        self.workflow = f"wf-{uuid.uuid4().hex[:8]}"
        self.first = checkpoint(self.workflow)
        self.second = checkpoint(self.workflow, self.first)
        self.bystander = checkpoint(f"other-{uuid.uuid4().hex[:8]}")

    async def save(self, storage: CheckpointStore) -> None:
        await storage.save(self.bystander, expected_latest_id=None)
        await storage.save(self.first, expected_latest_id=None)
        await storage.save(self.second, expected_latest_id=self.first.checkpoint_id)


async def check_store(
    lossy: LossyStore,
    storage: CheckpointStore,
    history: History,
    stored: list[WorkflowCheckpoint],
    gone: list[WorkflowCheckpoint],
) -> None:
    """The workflow holds ``stored`` (in save order) and none of ``gone``; it reads; the next
    fenced save goes through; the bystander is intact; verify finds nothing left behind."""
    workflow = history.workflow
    assert await storage.list_checkpoint_ids(workflow_name=workflow) == [c.checkpoint_id for c in stored]
    assert await storage.list_checkpoints(workflow_name=workflow) == stored
    assert await storage.get_latest(workflow_name=workflow) == (stored[-1] if stored else None)
    for kept in stored:
        assert await storage.load(kept.checkpoint_id) == kept
    for removed in gone:
        assert await storage.checkpoint_info(removed.checkpoint_id) is None, removed.checkpoint_id
    assert await storage.load(history.bystander.checkpoint_id) == history.bystander
    assert (await verify(storage)).ok
    if lossy.backend == "redis":
        assert await stage_keys(lossy, storage) == []
    latest = stored[-1] if stored else None
    after = checkpoint(workflow, latest)
    expected = None if latest is None else latest.checkpoint_id
    assert await storage.save(after, expected_latest_id=expected) == after.checkpoint_id
    assert await storage.list_checkpoint_ids(workflow_name=workflow) == [
        c.checkpoint_id for c in [*stored, after]
    ]


async def stage_keys(lossy: LossyStore, storage: CheckpointStore) -> list[bytes]:
    """Stage keys of the storage's prefix on the server: a staged body that outlived its save."""
    assert isinstance(storage, RedisCheckpointStorage)
    client = Redis.from_url(lossy.server_url)
    try:
        return [key async for key in client.scan_iter(match=f"{storage.keys.prefix}:*:stage:*")]
    finally:
        await client.aclose()


# ---------------------------------------------------------------------- saves


SHAPES = ["one", "family", "large"]
"""A lone checkpoint; one with a checkpoint nested in it; a lone one whose body Redis stages."""


def third_checkpoint(shape: str, history: History) -> tuple[WorkflowCheckpoint, list[WorkflowCheckpoint]]:
    """The checkpoint whose save loses its answer, and the checkpoints nested in it."""
    if shape == "family":
        child = checkpoint(f"child-{uuid.uuid4().hex[:8]}")
        state = {"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}}
        return checkpoint(history.workflow, history.second, state=state), [child]
    if shape == "large":
        return checkpoint(history.workflow, history.second, state={"blob": os.urandom(LARGE_BODY)}), []
    return checkpoint(history.workflow, history.second), []


@pytest.mark.parametrize("losses", LOSSES)
@pytest.mark.parametrize("fenced", [False, True], ids=["unfenced", "fenced"])
@pytest.mark.parametrize("shape", SHAPES)
async def test_a_save_whose_answer_was_lost_lands_once(
    lossy: LossyStore, shape: str, fenced: bool, losses: str
) -> None:
    history = History()
    async with lossy.new_handle() as storage:
        await history.save(storage)
        third, nested = third_checkpoint(shape, history)
        fence: dict[str, Any] = {"expected_latest_id": history.second.checkpoint_id} if fenced else {}
        if shape == "large" and isinstance(storage, RedisCheckpointStorage):
            assert storage.backend.connection.transactions, "the large body would not be staged"
        with lossy.losing_save_answers(third, family=bool(nested), times=LOSSES[losses]):
            answer = await outcome(storage.save(third, **fence), losses)
        assert answer == (third.checkpoint_id if losses == "once" else None)
        info = await storage.checkpoint_info(third.checkpoint_id)
        assert info is not None, "the save was applied before its answer was lost"

        # The same save again is a no-op that answers the id: nothing written twice.
        assert await storage.save(third, **fence) == third.checkpoint_id
        assert await storage.checkpoint_info(third.checkpoint_id) == info
        if shape == "large":
            body = await storage.read_raw_body(third.checkpoint_id)
            assert body is not None
            assert len(body) >= STAGED_BODY_MIN
        for child in nested:
            assert await storage.list_nested(third.checkpoint_id) == [child.checkpoint_id]
            assert await storage.load(child.checkpoint_id) == child
        await check_store(lossy, storage, history, [history.first, history.second, third], [])


# ---------------------------------------------------------------------- removals


@pytest.mark.parametrize("losses", LOSSES)
async def test_a_delete_whose_answer_was_lost_deleted_it(lossy: LossyStore, losses: str) -> None:
    history = History()
    async with lossy.new_handle() as storage:
        await history.save(storage)
        third = checkpoint(history.workflow, history.second)
        await storage.save(third, expected_latest_id=history.second.checkpoint_id)
        with lossy.losing_removal_answers("delete", third.checkpoint_id, LOSSES[losses]):
            answer = await outcome(storage.delete(third.checkpoint_id), losses)
        # False when the resend found it deleted by the first send (docs: "Lost answers").
        assert answer in ((True, False) if losses == "once" else (None,))
        assert await storage.delete(third.checkpoint_id) is False
        await check_store(lossy, storage, history, [history.first, history.second], [third])


@pytest.mark.parametrize("losses", LOSSES)
async def test_a_prune_whose_answer_was_lost_pruned_once(lossy: LossyStore, losses: str) -> None:
    history = History()
    async with lossy.new_handle() as storage:
        await history.save(storage)
        third = checkpoint(history.workflow, history.second)
        await storage.save(third, expected_latest_id=history.second.checkpoint_id)
        with lossy.losing_removal_answers("prune", history.workflow, LOSSES[losses]):
            answer = await outcome(storage.prune(workflow_name=history.workflow, keep_last=1), losses)
        # 0 when the resend found them pruned by the first send.
        assert answer in ((2, 0) if losses == "once" else (None,))
        assert await storage.prune(workflow_name=history.workflow, keep_last=1) == 0
        await check_store(lossy, storage, history, [third], [history.first, history.second])


@pytest.mark.parametrize("losses", LOSSES)
async def test_a_delete_workflow_whose_answer_was_lost_deleted_it(lossy: LossyStore, losses: str) -> None:
    history = History()
    async with lossy.new_handle() as storage:
        await history.save(storage)
        with lossy.losing_removal_answers("delete_workflow", history.workflow, LOSSES[losses]):
            answer = await outcome(storage.delete_workflow(workflow_name=history.workflow), losses)
        assert answer in ((2, 0) if losses == "once" else (None,))
        assert await storage.delete_workflow(workflow_name=history.workflow) == 0
        assert history.workflow not in await storage.list_workflows()
        await check_store(lossy, storage, history, [], [history.first, history.second])


# ---------------------------------------------------------------------- opening


@pytest.mark.postgres
@pytest.mark.parametrize("lossy", ["postgres"], indirect=True)
async def test_an_open_whose_migration_commit_answer_was_lost_opens_the_store(lossy: LossyStore) -> None:
    """The first handle on a fresh schema creates it in one transaction; its COMMIT is applied and
    its answer lost. The retry reads the schema's recorded version, finds it current and migrates
    nothing again: the handle opens, and the store takes saves."""

    async def open_and_close() -> str:
        async with lossy.new_handle():
            return "opened"

    with lossy.proxy.losing_answers(b"COMMIT"):
        assert await open_and_close() == "opened"
    history = History()
    async with lossy.new_handle() as storage:
        await history.save(storage)
        await check_store(lossy, storage, history, [history.first, history.second], [])
