"""A storage never closed with ``aclose()`` must not hang its process or print at exit, and one
storage must work across successive event loops, on every backend.

MAF's storages have no ``aclose()``, so code switching to ours often never calls it. Each case
runs a fresh interpreter: the storage at module level (global) or inside the coroutine (local),
the program ending normally or by an exception, two ``asyncio.run()`` calls in a row (the second
reads what the first saved). Once its work is done the process must exit, with nothing on stderr
but the program's own traceback. Only the exit is timed, not the imports and round trips before it
(those take seconds on a loaded machine): a process that hangs at exit never ends, so the wait
has a wide margin over the unloaded figure.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from storages import WorkflowCheckpoint
from storages.sqlite import SQLiteCheckpointStorage
from tests import postgres_servers, redis_servers, s3_support

WORK_WITHIN_SECONDS = 120.0
"""For the program's imports and its four round trips, before the exit is timed (0.3 s for memory
to 2.2 s for S3 over moto's server, measured at load average 8 on two cores; over 5 s at
times): a bound, not what the test checks."""
EXIT_WITHIN_SECONDS = 30.0
"""From the program's last line to the end of the process: interpreter shutdown, 0.06 s (memory)
to 0.32 s (S3) measured at load average 8, so about 100 times the slowest; a process held up
at exit by a thread or a loop never ends."""

PROGRAM = """
import asyncio, sys
from storages import WorkflowCheckpoint, open_storage

url, scope, ending, run = sys.argv[1:]
shared = open_storage(url) if scope == "global" else None

def checkpoint(n):
    return WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", checkpoint_id=f"{run}-{n}")

async def use(n):
    storage = shared if shared is not None else open_storage(url)
    await storage.save(checkpoint(n))
    assert (await storage.load(f"{run}-{n}")).checkpoint_id == f"{run}-{n}"
    if storage is shared and n:
        # The first loop is closed: what it saved is read through this one.
        assert (await storage.load(f"{run}-0")).checkpoint_id == f"{run}-0"
    if ending == "raise" and n:
        raise RuntimeError("the program failed")

try:
    asyncio.run(use(0))
    asyncio.run(use(1))
    print("finished")
finally:
    print("exiting", flush=True)  # the work is done: from here on only the exit is left
"""


@pytest.fixture(scope="module")
def redis_prefix() -> Iterator[str]:
    """One key prefix for this module's Redis cases (each uses ids of its own), wiped after them."""
    prefix = redis_servers.fresh_prefix("lifecycle")
    yield prefix
    asyncio.run(redis_servers.wipe(redis_servers.redis_url(), prefix))


def backend_url(backend: str, directory: Path, request: pytest.FixtureRequest) -> str:
    """A fresh store of ``backend``, reachable by URL from another process."""
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{directory}/lifecycle.db"
    if backend == "redis":
        prefix = request.getfixturevalue("redis_prefix")
        return redis_servers.with_query(redis_servers.redis_url(), prefix=prefix)
    if backend == "redis-cluster":
        # The cluster's own processes outlive the test session's; keys go with the cluster.
        url = redis_servers.shared_cluster().url
        return redis_servers.with_query(url, prefix=redis_servers.fresh_prefix("lifecycle"))
    prefix = f"lifecycle-{uuid.uuid4().hex[:12]}"
    return (
        f"s3://{s3_support.BUCKET}/{prefix}?endpoint_url={s3_support.server_endpoint()}"
        "&region=us-east-1&create_bucket=true"
    )


# moto accepts any credentials; the child must not look for real ones.
CHILD_ENVIRONMENT = {
    **os.environ,
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


BACKEND_MARKS = {
    "memory": pytest.mark.memory,
    "sqlite": pytest.mark.sqlite,
    "redis": pytest.mark.redis,
    "redis-cluster": pytest.mark.redis_cluster,
    "s3": pytest.mark.s3,
}

CASES = [
    pytest.param(backend, scope, ending, marks=mark, id=f"{backend}-{scope}-{ending}")
    for backend, mark in BACKEND_MARKS.items()
    for scope in ("global", "local")
    for ending in ("normal", "raise")
]


@dataclass(frozen=True)
class Ended:
    returncode: int
    stdout: str
    stderr: str


async def run_until_exit(*arguments: str, cwd: Path) -> Ended:
    """Run PROGRAM; fail if its work does not end within WORK_WITHIN_SECONDS or the process
    does not exit within EXIT_WITHIN_SECONDS after that."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PROGRAM,
        *arguments,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=CHILD_ENVIRONMENT,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    stderr = asyncio.ensure_future(process.stderr.read())  # drained meanwhile: a full pipe blocks
    try:
        lines: list[bytes] = []
        while not lines or lines[-1] != b"exiting\n":
            line = await asyncio.wait_for(process.stdout.readline(), WORK_WITHIN_SECONDS)
            if not line:
                break
            lines.append(line)
        try:
            await asyncio.wait_for(process.wait(), EXIT_WITHIN_SECONDS)
        except TimeoutError:
            pytest.fail(f"the process did not exit within {EXIT_WITHIN_SECONDS:g} s of its last line")
        rest = await process.stdout.read()
        return Ended(process.returncode or 0, b"".join([*lines, rest]).decode(), (await stderr).decode())
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        stderr.cancel()


@pytest.mark.parametrize(("backend", "scope", "ending"), CASES)
async def test_a_storage_never_closed_lets_its_process_exit_quietly(
    backend: str, scope: str, ending: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = backend_url(backend, tmp_path, request)
    result = await run_until_exit(url, scope, ending, uuid.uuid4().hex, cwd=tmp_path)
    if ending == "normal":
        assert (result.returncode, result.stderr) == (0, ""), result.stderr
        assert result.stdout == "finished\nexiting\n"
    else:
        assert result.stdout == "exiting\n"
        assert result.returncode == 1
        # Only the program's own traceback: nothing from a thread, a destructor or a closed loop.
        assert result.stderr.count("Traceback") == 1, result.stderr
        assert result.stderr.rstrip().endswith("RuntimeError: the program failed"), result.stderr
        for noise in (
            "Exception ignored",
            "Exception in thread",
            "Event loop is closed",
            "Task was destroyed",
        ):
            assert noise not in result.stderr


LEFT_OPEN_PROGRAM = """
import asyncio, gc, os, sys
from storages import WorkflowCheckpoint, open_storage

def sockets():
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return count

url, run = sys.argv[1:]
before = sockets()
storage = open_storage(url)

async def save(n):
    checkpoint = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", checkpoint_id=f"{run}-{n}")
    await storage.save(checkpoint)

asyncio.run(save(0))
print(sockets() - before)
asyncio.run(save(1))  # the storage follows a new loop
del storage
gc.collect()
print(sockets() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts sockets through /proc")
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis_cluster),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
async def test_a_storage_left_open_closes_its_sockets_without_a_resource_warning(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Never closed, used on two loops in turn, then collected: every socket it opened is closed,
    and nothing warns of an unclosed client, connection, transport or socket (ResourceWarning is
    shown here, where Python hides it by default). Redis clients close when their loop ends;
    a PostgreSQL pool's connections when the storage follows a new loop or is collected."""
    if backend == "postgres":
        base, schema = postgres_servers.run_database_url(), postgres_servers.fresh_schema("lifecycle")
        url = postgres_servers.with_schema(base, schema)
        request.addfinalizer(lambda: asyncio.run(postgres_servers.drop_schema(base, schema)))
    else:
        url = backend_url(backend, tmp_path, request)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-W",
        "always::ResourceWarning",
        "-c",
        LEFT_OPEN_PROGRAM,
        url,
        uuid.uuid4().hex,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), WORK_WITHIN_SECONDS)
    assert (process.returncode, stderr.decode()) == (0, "")
    after_first_loop, after_collection = (int(line) for line in stdout.decode().split())
    assert after_collection == 0
    if backend != "postgres":
        assert after_first_loop == 0


@pytest.mark.sqlite
async def test_a_collected_sqlite_handle_closes_its_connection_and_ends_its_thread(tmp_path: Path) -> None:
    storage = SQLiteCheckpointStorage(tmp_path / "t.db")
    await storage.save(WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", checkpoint_id="a"))
    assert storage.backend.connection is not None
    thread = storage.backend.connection.thread
    assert thread.daemon  # cannot keep the interpreter alive
    del storage
    gc.collect()
    thread.join(timeout=2.0)
    assert not thread.is_alive()
    async with SQLiteCheckpointStorage(tmp_path / "t.db") as reopened:
        assert await reopened.list_checkpoint_ids(workflow_name="wf") == ["a"]


@pytest.mark.sqlite
async def test_a_closed_sqlite_handle_leaves_no_finalizer_behind(tmp_path: Path) -> None:
    storage = SQLiteCheckpointStorage(tmp_path / "t.db")
    await storage.save(WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", checkpoint_id="a"))
    finalizer = storage.backend.release_at_exit
    assert finalizer is not None
    assert finalizer.alive
    await storage.aclose()
    assert not finalizer.alive


@pytest.mark.redis
def test_an_injected_redis_client_on_an_ended_loop_is_a_clear_error() -> None:
    from redis.asyncio import Redis

    from storages import StorageUnavailableError
    from storages.redis import RedisCheckpointStorage

    prefix = redis_servers.fresh_prefix("lifecycle-injected")
    client = Redis.from_url(redis_servers.redis_url())
    storage = RedisCheckpointStorage(client, prefix=prefix)

    async def save(checkpoint_id: str) -> None:
        await storage.save(
            WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", checkpoint_id=checkpoint_id)
        )

    try:
        asyncio.run(save("first"))
        with pytest.raises(StorageUnavailableError, match="bound to an event loop that has ended"):
            asyncio.run(save("second"))
    finally:
        asyncio.run(redis_servers.wipe(redis_servers.redis_url(), prefix))


@pytest.mark.redis
def test_a_storage_built_from_a_url_follows_each_new_loop(redis_prefix: str) -> None:
    from storages import open_storage

    storage = open_storage(redis_servers.with_query(redis_servers.redis_url(), prefix=redis_prefix))
    ids = [f"loop-{n}" for n in range(3)]

    async def save_and_count(checkpoint_id: str) -> int:
        await storage.save(
            WorkflowCheckpoint(
                workflow_name="follows-loops", graph_signature_hash="s", checkpoint_id=checkpoint_id
            )
        )
        return len(await storage.list_checkpoint_ids(workflow_name="follows-loops"))

    assert [asyncio.run(save_and_count(checkpoint_id)) for checkpoint_id in ids] == [1, 2, 3]
    asyncio.run(storage.aclose())  # closing from yet another loop closes what that loop holds


async def test_first_operations_started_together_open_the_storage_once() -> None:
    from storages.engine import CheckpointStore
    from storages.errors import CheckpointNotFoundError
    from storages.memory import MemoryBackend

    class CountsOpens(MemoryBackend):
        opens = 0

        async def open(self, operation: str) -> None:
            type(self).opens += 1
            await asyncio.sleep(0.01)  # still opening while the other callers arrive

    storage = CheckpointStore(CountsOpens())
    results = await asyncio.gather(*(storage.load(f"absent-{n}") for n in range(8)), return_exceptions=True)
    assert CountsOpens.opens == 1
    assert all(isinstance(result, CheckpointNotFoundError) for result in results), results


async def test_a_handle_closed_while_its_first_operation_opens_it_closes_what_the_open_made() -> None:
    from storages.engine import CheckpointStore
    from storages.errors import StorageClosedError
    from storages.memory import MemoryBackend

    opening = asyncio.Event()
    may_finish = asyncio.Event()

    class SlowOpen(MemoryBackend):
        opened = closed = 0

        async def open(self, operation: str) -> None:
            opening.set()
            await may_finish.wait()
            type(self).opened += 1

        async def close(self) -> None:
            type(self).closed += 1

    storage = CheckpointStore(SlowOpen())
    first = asyncio.ensure_future(storage.save(WorkflowCheckpoint("wf", "sig")))
    await opening.wait()
    waiting = asyncio.ensure_future(storage.load("queued-behind-the-open"))
    closing = asyncio.ensure_future(storage.aclose())
    await asyncio.sleep(0)
    may_finish.set()
    await closing
    # A pool or a connection the open made would otherwise outlive the closed handle.
    assert (SlowOpen.opened, SlowOpen.closed) == (1, 1)
    await asyncio.gather(first, return_exceptions=True)
    with pytest.raises(StorageClosedError):
        await waiting
