"""The CrewAI and Burr examples run as their own processes, as docs/crewai.md and docs/burr.md
show them, and resume what the first run stored: on SQLite (no argument) and on Redis (a URL)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis_servers

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(script: str, tmp_path: Path, *arguments: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *arguments],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env=dict(os.environ),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture
def store_arguments(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """No argument (the example's own SQLite file), or the URL of a fresh Redis prefix, wiped after."""
    if request.param == "sqlite":
        yield []
        return
    prefix = redis_servers.fresh_prefix("example")
    try:
        yield [redis_servers.with_query(redis_servers.redis_url(), prefix=prefix)]
    finally:
        asyncio.run(redis_servers.wipe(redis_servers.redis_url(), prefix))


BACKENDS = [pytest.param("sqlite", marks=pytest.mark.sqlite), pytest.param("redis", marks=pytest.mark.redis)]


@pytest.mark.parametrize("store_arguments", BACKENDS, indirect=True)
def test_the_crewai_example_resumes_the_stopped_flow(store_arguments: list[str], tmp_path: Path) -> None:
    lines = _run("crewai_flow.py", tmp_path, *store_arguments)
    assert "first run stopped: worker lost before the review" in lines
    assert "resumed: outline ['why', 'how', 'what next'], drafted 1 time(s), approved True" in lines


@pytest.mark.parametrize("store_arguments", BACKENDS, indirect=True)
def test_the_burr_example_resumes_at_the_third_step(store_arguments: list[str], tmp_path: Path) -> None:
    lines = _run("burr_app.py", tmp_path, *store_arguments)
    assert lines == [
        "first run stopped after two steps: {'count': 1, 'log': ['count reached 1']}",
        "resumed after step 1 with {'count': 1, 'log': ['count reached 1']}",
        "ran count: count 2, log ['count reached 1']",
        "applications stored: ['counter-1']",
    ]
