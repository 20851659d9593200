"""The LangGraph workload the LangGraph bench measures, and the saver calls it makes.

A parent graph loops a two-node subgraph for a number of supersteps; each superstep saves parent
and subgraph checkpoints and their pending writes. Two ways to drive a saver with it:

* :func:`run_graph`: the real graph on a fresh thread, end to end (LangGraph's own work included);
* :func:`replay`: the exact saver calls one run made (recorded once, through LangGraph's
  InMemorySaver), replayed one by one on a fresh thread, each timed, then the reads a caller
  makes afterwards (the thread's latest checkpoint with its writes, its whole history). This
  gives each operation's cost apart from LangGraph's own work, for every saver alike.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

OPERATIONS = ("aput", "aput_writes", "aget_tuple", "aget_tuple_latest", "alist")
"""What :func:`replay` times: the run's three kinds of call, then the two reads after it."""


class LoopState(TypedDict, total=False):
    count: int
    limit: int
    trail: Annotated[list[str], operator.add]


def _inner(state: LoopState) -> dict[str, Any]:
    return {"trail": ["inner"]}


def _count(state: LoopState) -> dict[str, Any]:
    return {"count": state.get("count", 0) + 1}


def _again(state: LoopState) -> str:
    return "work" if state.get("count", 0) < state.get("limit", 1) else END


def build_loop(checkpointer: Any) -> Any:
    """count -> work (a two-node subgraph) -> count ... until ``limit`` supersteps."""
    sub = StateGraph(LoopState)
    sub.add_node("inner", _inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    parent = StateGraph(LoopState)
    parent.add_node("count", _count)
    parent.add_node("work", sub.compile())
    parent.add_edge(START, "count")
    parent.add_conditional_edges("count", _again, ["work", END])
    parent.add_edge("work", "count")
    return parent.compile(checkpointer=checkpointer)


async def run_graph(graph: Any, supersteps: int) -> float:
    """Seconds one run of the graph takes on a fresh thread (its result checked)."""
    config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex}"}}
    started = time.perf_counter()
    final = await graph.ainvoke({"count": 0, "limit": supersteps, "trail": []}, config)
    elapsed = time.perf_counter() - started
    if final["count"] != supersteps:
        raise RuntimeError(f"the loop ran {final['count']} supersteps, not {supersteps}")
    return elapsed


# ---------------------------------------------------------------- recorded saver calls


@dataclass(frozen=True)
class SaverCall:
    """One call LangGraph made to its checkpointer; ``config`` keeps only what a saver reads."""

    operation: str
    config: dict[str, Any]
    arguments: tuple[Any, ...]


class _Recorder(InMemorySaver):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[SaverCall] = []

    def _record(self, operation: str, config: Any, *arguments: Any) -> None:
        kept = {
            "configurable": {
                key: value for key, value in config["configurable"].items() if not key.startswith("__")
            },
            "metadata": dict(config.get("metadata") or {}),
        }
        self.calls.append(SaverCall(operation, copy.deepcopy(kept), copy.deepcopy(arguments)))

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self._record("aput", config, checkpoint, metadata, new_versions)
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self._record("aput_writes", config, writes, task_id, task_path)
        await super().aput_writes(config, writes, task_id, task_path)

    async def aget_tuple(self, config: Any) -> Any:
        self._record("aget_tuple", config)
        return await super().aget_tuple(config)


async def record_calls(supersteps: int) -> list[SaverCall]:
    """The saver calls one run of the loop makes, in the order LangGraph made them."""
    recorder = _Recorder()
    await run_graph(build_loop(recorder), supersteps)
    return recorder.calls


@dataclass(frozen=True)
class Replayed:
    """Seconds spent in each operation of one replay, and how many calls each made."""

    seconds: dict[str, float]
    calls: dict[str, int]


def _on_thread(config: dict[str, Any], thread_id: str) -> dict[str, Any]:
    metadata = {
        key: (thread_id if key == "thread_id" else value) for key, value in config["metadata"].items()
    }
    return {"configurable": {**config["configurable"], "thread_id": thread_id}, "metadata": metadata}


async def replay(saver: Any, calls: Sequence[SaverCall]) -> Replayed:
    """Replay ``calls`` on a fresh thread of ``saver``, then read its latest and its history."""
    thread_id = f"replay-{uuid.uuid4().hex}"
    seconds = dict.fromkeys(OPERATIONS, 0.0)
    counts = dict.fromkeys(OPERATIONS, 0)
    clock = time.perf_counter
    root_ids: list[str] = []
    for call in calls:
        config = _on_thread(call.config, thread_id)
        method = getattr(saver, call.operation)
        started = clock()
        await method(config, *call.arguments)
        seconds[call.operation] += clock() - started
        counts[call.operation] += 1
        if call.operation == "aput" and not config["configurable"].get("checkpoint_ns"):
            root_ids.append(call.arguments[0]["id"])
    root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    started = clock()
    latest = await saver.aget_tuple(root)
    seconds["aget_tuple_latest"] = clock() - started
    counts["aget_tuple_latest"] = 1
    started = clock()
    history = [item async for item in saver.alist(root)]
    seconds["alist"] = clock() - started
    counts["alist"] = 1
    # A saver that stored nothing (or listed the wrong thread) must not produce a figure.
    if latest is None or latest.checkpoint["id"] != root_ids[-1]:
        raise RuntimeError(f"{saver!r}: the replayed thread's latest checkpoint is not the last one put")
    if [item.checkpoint["id"] for item in history] != root_ids[::-1]:
        raise RuntimeError(f"{saver!r}: the replayed thread's history is not what was put")
    return Replayed(seconds, counts)


@contextlib.contextmanager
def counting_round_trips() -> Iterator[list[int]]:
    """Count the calls every SQLite connection hands to its worker thread meanwhile: each is one
    round trip between the event loop and that thread (a statement, a fetch, a commit), a cost
    that does not depend on the machine's load the way times do. LangGraph's saver talks to
    aiosqlite's thread (its ``_execute``, which every call goes through); ours to its own
    (``ConnectionThread.hand``, likewise)."""
    import aiosqlite.core

    from storages.sqlite.thread import ConnectionThread

    counter = [0]
    original = aiosqlite.core.Connection._execute
    hand = ConnectionThread.hand

    async def counted(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        return await original(self, fn, *args, **kwargs)

    def counted_hand(self: ConnectionThread, function: Any) -> None:
        counter[0] += 1
        hand(self, function)

    aiosqlite.core.Connection._execute = counted  # type: ignore[method-assign]
    ConnectionThread.hand = counted_hand  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        aiosqlite.core.Connection._execute = original  # type: ignore[method-assign]
        ConnectionThread.hand = hand  # type: ignore[method-assign]


async def round_trips(saver: Any, calls: Sequence[SaverCall]) -> dict[str, float]:
    """SQLite worker-thread round trips per call of each operation, over one replay of ``calls``."""
    thread_id = f"trips-{uuid.uuid4().hex}"
    totals = dict.fromkeys(OPERATIONS, 0)
    counts = dict.fromkeys(OPERATIONS, 0)
    with counting_round_trips() as counter:
        for call in calls:
            before = counter[0]
            await getattr(saver, call.operation)(_on_thread(call.config, thread_id), *call.arguments)
            totals[call.operation] += counter[0] - before
            counts[call.operation] += 1
        root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        before = counter[0]
        await saver.aget_tuple(root)
        totals["aget_tuple_latest"], counts["aget_tuple_latest"] = counter[0] - before, 1
        before = counter[0]
        _ = [item async for item in saver.alist(root)]
        totals["alist"], counts["alist"] = counter[0] - before, 1
    return {operation: totals[operation] / counts[operation] for operation in OPERATIONS}
