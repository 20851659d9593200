"""A real CrewAI flow and a real Burr application, killed with SIGKILL mid-run and resumed in a fresh
process, on every durable built-in backend: no acknowledged step is lost and the run resumes at the
next step (tests/runner_worker.py is the process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import postgres_servers
import pytest
import redis_servers
import s3_support

WORKER = Path(__file__).resolve().parent / "runner_worker.py"
ACKS_BEFORE_KILL = 3
S3_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@asynccontextmanager
async def store_url(backend: str, directory: Path) -> AsyncIterator[str]:
    """The URL of a fresh store another process can open; removed afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{directory}/kill.db"
    elif backend == "redis":
        prefix = redis_servers.fresh_prefix("kill")
        try:
            yield redis_servers.with_query(redis_servers.redis_url(), prefix=prefix)
        finally:
            await redis_servers.wipe(redis_servers.redis_url(), prefix)
    elif backend == "postgres":
        base, schema = postgres_servers.run_database_url(), postgres_servers.fresh_schema("kill")
        try:
            yield postgres_servers.with_schema(base, schema)
        finally:
            await postgres_servers.drop_schema(base, schema)
    else:
        async with s3_support.s3_store(server=True) as store:
            yield store.url


def _worker(runner: str, url: str, identifier: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), runner, url, identifier, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **S3_ENVIRONMENT},
    )


def _lines(output: str) -> list[list[str]]:
    return [line.split()[1:] for line in output.splitlines() if line.startswith("WORKER ")]


@pytest.mark.parametrize("runner", ["crewai", "burr"])
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("s3", marks=pytest.mark.s3),
    ],
)
async def test_a_killed_run_resumes_at_the_next_step_with_nothing_acknowledged_lost(
    runner: str, backend: str, tmp_path: Path
) -> None:
    identifier = f"run-{uuid.uuid4().hex[:8]}"
    async with store_url(backend, tmp_path) as url:
        process = _worker(runner, url, identifier, "run")
        assert process.stdout is not None
        acknowledged = 0
        for line in process.stdout:  # blocks until the worker speaks; it never stops by itself
            if line.startswith("WORKER ack "):
                acknowledged = int(line.split()[2])
                if acknowledged >= ACKS_BEFORE_KILL:
                    process.send_signal(signal.SIGKILL)
                    break
                assert process.stdin is not None
                process.stdin.write("go\n")  # the worker waits for it before its next step
                process.stdin.flush()
        process.wait(timeout=60)
        assert process.returncode == -signal.SIGKILL, process.stderr.read() if process.stderr else ""
        assert acknowledged == ACKS_BEFORE_KILL

        resumed = _worker(runner, url, identifier, "resume")
        output, errors = resumed.communicate(timeout=180)
        assert resumed.returncode == 0, errors
        (loaded, step), (ack,) = (line[1:] for line in _lines(output))
        # Every acknowledged step survived; a step saved after the last acknowledgement may too.
        assert int(loaded) in (acknowledged, acknowledged + 1)
        if runner == "burr":
            assert int(step) == int(loaded) - 1  # the stored step is the one that made that count
        assert int(ack) == int(loaded) + 1  # the run resumed at the next step
