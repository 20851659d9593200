"""Real LangGraph graphs through StorageSaver: a subgraph interrupted with ``interrupt()`` is
resumed with ``Command(resume=...)`` in a fresh process, and time travel from an older checkpoint
forks a chain whose every link resolves. On SQLite and on the real Redis server."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis_servers
from langgraph.types import Command

from conformance._langgraph_graphs import QUESTION, build_tour, finished, thread_config
from storages.runners.langgraph import StorageSaver

pytestmark = pytest.mark.langgraph

WORKER = Path(__file__).with_name("langgraph_worker.py")


@pytest.fixture(
    params=[pytest.param("sqlite", marks=pytest.mark.sqlite), pytest.param("redis", marks=pytest.mark.redis)]
)
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A URL two processes can open on one fresh store."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/graphs.db"
        return
    prefix = redis_servers.fresh_prefix("langgraph")
    try:
        yield redis_servers.with_query(redis_servers.redis_url(), prefix=prefix)
    finally:
        await redis_servers.wipe(redis_servers.redis_url(), prefix)


async def _resume_in_fresh_process(url: str, thread_id: str, answer: str) -> dict[str, Any]:
    worker = await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), "resume", url, thread_id, answer,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(worker.communicate(), timeout=120)
    assert worker.returncode == 0, err.decode(errors="replace")[-2000:]
    final: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return final


async def _every_link_resolves(saver: StorageSaver, thread_id: str) -> int:
    """Checks the parent of every checkpoint of every namespace of the thread; returns how many."""
    seen = 0
    async for item in saver.alist({"configurable": {"thread_id": thread_id}}):
        seen += 1
        if item.parent_config is not None:
            parent = await saver.aget_tuple(item.parent_config)
            assert parent is not None, f"the parent of {item.config} does not resolve"
            assert (
                parent.config["configurable"]["checkpoint_ns"] == item.config["configurable"]["checkpoint_ns"]
            )
    return seen


async def test_subgraph_interrupt_resumes_in_a_fresh_process(store_url: str) -> None:
    thread_id = f"tour-{uuid.uuid4().hex[:8]}"
    async with StorageSaver.from_url(store_url) as saver:
        graph = build_tour(saver)
        paused = await graph.ainvoke({"steps": []}, thread_config(thread_id))
        assert [i.value for i in paused["__interrupt__"]] == [QUESTION]
        state = await graph.aget_state(thread_config(thread_id), subgraphs=True)
        assert state.next == ("ask",)
        (task,) = state.tasks
        assert task.state is not None
        assert task.state.values["trail"] == ["sub:prepare"]
        assert task.state.config["configurable"]["checkpoint_ns"].startswith("ask:")

    final = await _resume_in_fresh_process(store_url, thread_id, "teal")
    assert final == finished("teal")

    async with StorageSaver.from_url(store_url) as saver:
        graph = build_tour(saver)
        done = await graph.aget_state(thread_config(thread_id))
        assert done.next == ()
        assert done.values == final
        assert await _every_link_resolves(saver, thread_id) >= 8


async def test_time_travel_from_an_older_checkpoint_forks_a_whole_chain(store_url: str) -> None:
    thread_id = f"travel-{uuid.uuid4().hex[:8]}"
    async with StorageSaver.from_url(store_url) as saver:
        graph = build_tour(saver)
        await graph.ainvoke({"steps": []}, thread_config(thread_id))
        first = await graph.ainvoke(Command(resume="red"), thread_config(thread_id))
        assert first == finished("red")
        history = [snapshot async for snapshot in graph.aget_state_history(thread_config(thread_id))]
        (before_ask,) = [s for s in history if s.next == ("ask",)]
        fork_point = before_ask.config["configurable"]["checkpoint_id"]

        replay = await graph.ainvoke(None, thread_config(thread_id, fork_point))
        assert [i.value for i in replay["__interrupt__"]] == [QUESTION]
        second = await graph.ainvoke(Command(resume="blue"), thread_config(thread_id))
        assert second == finished("blue")

        # The new branch walks back through the fork point to the root; the old one is intact.
        latest = await saver.aget_tuple(thread_config(thread_id))
        assert latest is not None
        chain: list[str] = []
        cursor: Any = latest
        while cursor is not None:
            chain.append(cursor.config["configurable"]["checkpoint_id"])
            cursor = None if cursor.parent_config is None else await saver.aget_tuple(cursor.parent_config)
        assert fork_point in chain
        assert chain[-1] == history[-1].config["configurable"]["checkpoint_id"]
        old_end = await saver.aget_tuple(history[0].config)
        assert old_end is not None
        assert old_end.checkpoint["channel_values"]["answer"] == "red"
        assert await _every_link_resolves(saver, thread_id) > len(history)
