"""The same LangGraph workload through StorageSaver and through LangGraph's own savers.

``python -m bench.langgraph_bench [--quick] [--json PATH]``: a parent graph that loops a
subgraph for a number of supersteps (each superstep saves a parent and subgraph checkpoints and
their pending writes), invoked on a fresh thread per run. Pairs, measured interleaved in one
process so machine noise hits both sides alike:

* StorageSaver over ``memory://`` vs LangGraph's InMemorySaver;
* StorageSaver over ``sqlite:///`` vs AsyncSqliteSaver (langgraph-checkpoint-sqlite), each on a
  file of its own in a temporary directory;
* StorageSaver over ``redis://`` vs langgraph-checkpoint-plainredis's AsyncRedisSaver, each under
  a key prefix of its own on the server at ``$REDIS_URL`` (deleted afterwards). LangGraph's
  official langgraph-checkpoint-redis is not measured: it needs the RediSearch and RedisJSON
  modules and fails on plain Redis with ``unknown command 'FT.INFO'``.

The figure is the ratio of medians (ours / theirs): below 1 means StorageSaver is faster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from storages.langgraph import StorageSaver

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


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


SaverFactory = Callable[[Path], AbstractAsyncContextManager[Any]]


@asynccontextmanager
async def storage_saver(url: str) -> AsyncIterator[Any]:
    async with StorageSaver.from_url(url) as saver:
        yield saver


@asynccontextmanager
async def in_memory_saver(directory: Path) -> AsyncIterator[Any]:
    yield InMemorySaver()


@asynccontextmanager
async def async_sqlite_saver(directory: Path) -> AsyncIterator[Any]:
    async with AsyncSqliteSaver.from_conn_string(str(directory / "native.db")) as saver:
        yield saver


@asynccontextmanager
async def redis_storage_saver(directory: Path) -> AsyncIterator[Any]:
    from storages.redis import delete_prefix

    prefix = f"bench-lg-ours-{uuid.uuid4().hex[:8]}"
    separator = "&" if "?" in REDIS_URL else "?"
    try:
        async with storage_saver(f"{REDIS_URL}{separator}prefix={prefix}") as saver:
            yield saver
    finally:
        async with _redis_client() as client:
            await delete_prefix(client, prefix)


@asynccontextmanager
async def plain_redis_saver(directory: Path) -> AsyncIterator[Any]:
    from langgraph_checkpoint_plainredis import AsyncRedisSaver

    prefix = f"bench-lg-plain-{uuid.uuid4().hex[:8]}"
    saver = AsyncRedisSaver(url=REDIS_URL, prefix=prefix)
    try:
        yield saver
    finally:
        await saver.aclose()
        async with _redis_client() as client:
            async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                await client.delete(key)


@asynccontextmanager
async def _redis_client() -> AsyncIterator[Any]:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        await client.aclose()


PAIRS: dict[str, tuple[SaverFactory, SaverFactory]] = {
    "memory": (lambda d: storage_saver("memory://"), in_memory_saver),
    "sqlite": (lambda d: storage_saver(f"sqlite:///{d}/ours.db"), async_sqlite_saver),
    "redis": (redis_storage_saver, plain_redis_saver),
}
"""Backend -> (StorageSaver over it, LangGraph's own saver for it)."""


@dataclass(frozen=True)
class PairResult:
    backend: str
    supersteps: int
    runs: int
    ours_ms: float
    theirs_ms: float

    @property
    def ratio(self) -> float:
        return self.ours_ms / self.theirs_ms


async def run_once(graph: Any, supersteps: int) -> float:
    config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex}"}}
    started = time.perf_counter()
    final = await graph.ainvoke({"count": 0, "limit": supersteps, "trail": []}, config)
    elapsed = time.perf_counter() - started
    if final["count"] != supersteps:
        raise RuntimeError(f"the loop ran {final['count']} supersteps, not {supersteps}")
    return elapsed


async def measure_pair(backend: str, *, supersteps: int, runs: int, directory: Path) -> PairResult:
    ours_factory, theirs_factory = PAIRS[backend]
    ours_times: list[float] = []
    theirs_times: list[float] = []
    async with ours_factory(directory) as ours, theirs_factory(directory) as theirs:
        ours_graph, theirs_graph = build_loop(ours), build_loop(theirs)
        for graph in (ours_graph, theirs_graph):  # warm up: schema creation, first connection
            await run_once(graph, supersteps)
        for index in range(runs):
            # Alternate which side goes first so drift hits both alike.
            order = ((ours_graph, ours_times), (theirs_graph, theirs_times))
            for graph, times in order if index % 2 == 0 else order[::-1]:
                times.append(await run_once(graph, supersteps))
    return PairResult(
        backend, supersteps, runs, statistics.median(ours_times) * 1e3, statistics.median(theirs_times) * 1e3
    )


async def run_all(*, supersteps: int, runs: int, backends: list[str]) -> list[PairResult]:
    with tempfile.TemporaryDirectory(prefix="langgraph-bench-") as directory:
        return [
            await measure_pair(backend, supersteps=supersteps, runs=runs, directory=Path(directory))
            for backend in backends
        ]


def table(results: list[PairResult]) -> str:
    lines = [
        "| backend | supersteps per run | runs | StorageSaver (ms, median) | native (ms, median) | ratio |",
        "|---|---|---|---|---|---|",
    ]
    natives = {"memory": "InMemorySaver", "sqlite": "AsyncSqliteSaver", "redis": "plainredis AsyncRedisSaver"}
    for r in results:
        lines.append(
            f"| {r.backend} (vs {natives[r.backend]}) | {r.supersteps} | {r.runs} | {r.ours_ms:.2f} | "
            f"{r.theirs_ms:.2f} | {r.ratio:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.langgraph_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--supersteps", type=int, default=10)
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    args = parser.parse_args(argv)
    runs = 9 if args.quick else 41
    results = asyncio.run(run_all(supersteps=args.supersteps, runs=runs, backends=list(PAIRS)))
    print(table(results))
    if args.json is not None:
        payload = [{**asdict(r), "ratio": r.ratio} for r in results]
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
