"""The same LangGraph workload through StorageSaver and through LangGraph's own savers.

``python -m bench.langgraph_bench [--quick] [--json PATH] [--markdown PATH ...]``: the workload of
bench/langgraph_workload.py (a parent graph looping a subgraph; each superstep saves parent and
subgraph checkpoints and their pending writes). Pairs, measured interleaved in one process so
machine noise hits both sides alike:

* StorageSaver over ``memory://`` vs LangGraph's InMemorySaver;
* StorageSaver over ``sqlite:///`` vs AsyncSqliteSaver (langgraph-checkpoint-sqlite), each on a
  file of its own in a temporary directory;
* StorageSaver over ``redis://`` vs langgraph-checkpoint-plainredis's AsyncRedisSaver, each under
  a key prefix of its own on the server at ``$REDIS_URL`` (deleted afterwards). LangGraph's
  official langgraph-checkpoint-redis is not measured: it needs the RediSearch and RedisJSON
  modules and fails on plain Redis with ``unknown command 'FT.INFO'``.

Each round runs the real graph once per saver (the whole-run figure) and replays the saver calls
one run makes once per saver (the per-operation figures: aput, aput_writes, aget_tuple as the run
calls it, then the thread's latest and its history read back). Every figure is a ratio of
medians, ours / theirs: below 1 means StorageSaver is faster; the target is at most 1.
``--markdown PATH`` (repeatable) replaces the section between this bench's markers in PATH
(appended if it has none), so docs/langgraph.md and docs/benchmarks.md carry the table of one run
of the committed command (``bench.run`` keeps the section when it rewrites docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from bench.langgraph_workload import (
    OPERATIONS,
    SaverCall,
    build_loop,
    record_calls,
    replay,
    round_trips,
    run_graph,
)
from bench.measure import _gc_paused
from bench.sections import LANGGRAPH_END, LANGGRAPH_START
from storages.runners.langgraph import StorageSaver

TARGET = 1.0
"""The issue's target for every ratio: StorageSaver at least as fast as the native saver."""
SECTION_START = LANGGRAPH_START
SECTION_END = LANGGRAPH_END
GRAPH_RUN = "graph run"
OPERATION_LABELS = {
    GRAPH_RUN: "whole graph run (`ainvoke`)",
    "aput": "`aput`",
    "aput_writes": "`aput_writes`",
    "aget_tuple": "`aget_tuple` (the run's own calls: none stored yet)",
    "aget_tuple_latest": "`aget_tuple` (the thread's latest, with its writes)",
    "alist": "`alist` (the thread's root history)",
}

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

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
NATIVES = {"memory": "InMemorySaver", "sqlite": "AsyncSqliteSaver", "redis": "plainredis AsyncRedisSaver"}
ROUND_TRIP_BACKENDS = frozenset({"sqlite"})
"""Pairs whose savers both talk to a SQLite worker thread (aiosqlite's, ours), so their round trips
are counted."""


@dataclass(frozen=True)
class OperationResult:
    """One row: ``calls`` per run, and the median per-run seconds of each side."""

    operation: str
    calls: int
    ours_seconds: float
    theirs_seconds: float

    @property
    def ratio(self) -> float:
        return self.ours_seconds / self.theirs_seconds

    @property
    def met(self) -> bool:
        return self.ratio <= TARGET


@dataclass(frozen=True)
class PairResult:
    backend: str
    supersteps: int
    runs: int
    operations: list[OperationResult]
    samples: dict[str, dict[str, list[float]]] = field(repr=False)
    """operation -> side ("ours", "theirs") -> per-run seconds, every sample."""
    round_trips: dict[str, dict[str, float]] | None = None
    """side -> operation -> SQLite worker-thread round trips per call (SQLite pairs only)."""

    def operation(self, name: str) -> OperationResult:
        return next(result for result in self.operations if result.operation == name)

    @property
    def ratio(self) -> float:
        """The whole-run ratio."""
        return self.operation(GRAPH_RUN).ratio

    @property
    def ours_ms(self) -> float:
        return self.operation(GRAPH_RUN).ours_seconds * 1e3

    @property
    def theirs_ms(self) -> float:
        return self.operation(GRAPH_RUN).theirs_seconds * 1e3


async def _round(
    index: int, sides: dict[str, tuple[Any, Any]], calls: list[SaverCall], supersteps: int, samples: Any
) -> None:
    # Alternate which side goes first so drift hits both alike; the collector runs between
    # timed parts, never inside one.
    order = list(sides.items()) if index % 2 == 0 else list(sides.items())[::-1]
    for side, (_, graph) in order:
        with _gc_paused():
            samples[GRAPH_RUN][side].append(await run_graph(graph, supersteps))
    for side, (saver, _) in order[::-1]:
        with _gc_paused():
            replayed = await replay(saver, calls)
        for operation in OPERATIONS:
            samples[operation][side].append(replayed.seconds[operation])


async def measure_pair(backend: str, *, supersteps: int, runs: int, directory: Path) -> PairResult:
    ours_factory, theirs_factory = PAIRS[backend]
    calls = await record_calls(supersteps)
    counts = {operation: sum(call.operation == operation for call in calls) for operation in OPERATIONS}
    counts.update({GRAPH_RUN: 1, "aget_tuple_latest": 1, "alist": 1})
    samples: dict[str, dict[str, list[float]]] = {
        operation: {"ours": [], "theirs": []} for operation in (GRAPH_RUN, *OPERATIONS)
    }
    async with ours_factory(directory) as ours, theirs_factory(directory) as theirs:
        sides = {"ours": (ours, build_loop(ours)), "theirs": (theirs, build_loop(theirs))}
        for saver, graph in sides.values():  # warm up: schema creation, first connection
            await run_graph(graph, supersteps)
            await replay(saver, calls)
        for index in range(runs):
            await _round(index, sides, calls, supersteps, samples)
        trips = (
            {side: await round_trips(saver, calls) for side, (saver, _) in sides.items()}
            if backend in ROUND_TRIP_BACKENDS
            else None
        )
    operations = [
        OperationResult(
            operation,
            counts[operation],
            statistics.median(samples[operation]["ours"]),
            statistics.median(samples[operation]["theirs"]),
        )
        for operation in (GRAPH_RUN, *OPERATIONS)
    ]
    return PairResult(backend, supersteps, runs, operations, samples, trips)


async def run_all(*, supersteps: int, runs: int, backends: list[str]) -> list[PairResult]:
    with tempfile.TemporaryDirectory(prefix="langgraph-bench-") as directory:
        return [
            await measure_pair(backend, supersteps=supersteps, runs=runs, directory=Path(directory))
            for backend in backends
        ]


def _per_call(result: OperationResult, seconds: float) -> str:
    if result.operation == GRAPH_RUN:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds / result.calls * 1e6:,.1f} µs"


def _trips(pair: PairResult, row: OperationResult) -> str:
    if pair.round_trips is None or row.operation == GRAPH_RUN:
        return "-"
    return f"{pair.round_trips['ours'][row.operation]:.1f} / {pair.round_trips['theirs'][row.operation]:.1f}"


def table(results: list[PairResult]) -> str:
    lines = [
        "| backend (native saver) | operation | calls per run | StorageSaver (per call) | native (per call) "
        "| ratio | target | met | worker round trips per call (ours / native) |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for pair in results:
        for row in pair.operations:
            lines.append(
                f"| {pair.backend} ({NATIVES[pair.backend]}) | {OPERATION_LABELS[row.operation]} | "
                f"{row.calls} | {_per_call(row, row.ours_seconds)} | {_per_call(row, row.theirs_seconds)} | "
                f"{row.ratio:.2f} | <= {TARGET:.2f} | {'yes' if row.met else 'no'} | {_trips(pair, row)} |"
            )
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": platform.python_version(),
        "langgraph": version("langgraph"),
        "langgraph_checkpoint": version("langgraph-checkpoint"),
        "langgraph_checkpoint_sqlite": version("langgraph-checkpoint-sqlite"),
        "nproc": os.cpu_count(),
        "load_average": None if load is None else [round(value, 2) for value in load],
    }


def markdown(results: list[PairResult], command: str, env: dict[str, Any]) -> str:
    """The bench's section, between its markers, for docs/langgraph.md or docs/benchmarks.md."""
    first = results[0]
    load = "unknown" if env["load_average"] is None else " / ".join(f"{v:.2f}" for v in env["load_average"])
    lines = [
        SECTION_START,
        "Produced by `" + command + "` (bench/langgraph_bench.py, bench/langgraph_workload.py). "
        f"Run {env['date']}, Python {env['python']}, langgraph {env['langgraph']}, langgraph-checkpoint "
        f"{env['langgraph_checkpoint']}, langgraph-checkpoint-sqlite {env['langgraph_checkpoint_sqlite']}, "
        f"{env['nproc']} CPUs, load average (1, 5, 15 min) {load} at the end.",
        "",
        f"A parent graph loops a two-node subgraph for {first.supersteps} supersteps, one fresh thread per "
        f"run. Each of {first.runs} rounds (after a warm-up) runs the graph once per saver, then replays the "
        "saver calls one run makes (recorded once) once per saver on a fresh thread, timing each call, and "
        "reads the thread back. Figures are medians of per-run totals, divided by the calls per run; the "
        "ratio is ours / native (below 1: StorageSaver faster). Both SQLite savers use WAL with "
        "synchronous=FULL; the last column counts the calls each hands to its SQLite worker thread (a "
        "statement, a fetch, a commit) per operation, over one more replay: a figure the machine's load "
        "does not change.",
        "",
        table(results),
        SECTION_END,
    ]
    return "\n".join(lines) + "\n"


def replace_section(document: str, section: str) -> str:
    """``document`` with this bench's section replaced by ``section`` (appended if it has none)."""
    start, end = document.find(SECTION_START), document.find(SECTION_END)
    if start == -1 or end == -1:
        return document.rstrip("\n") + "\n\n" + section
    rest = document[end + len(SECTION_END) :].lstrip("\n")
    return document[:start] + section + ("\n" + rest if rest else "")


def payload(results: list[PairResult], env: dict[str, Any]) -> dict[str, Any]:
    return {
        "environment": env,
        "pairs": [
            {
                "backend": pair.backend,
                "native": NATIVES[pair.backend],
                "supersteps": pair.supersteps,
                "runs": pair.runs,
                "operations": [
                    {**asdict(row), "ratio": row.ratio, "met": row.met} for row in pair.operations
                ],
                "samples": pair.samples,
                "round_trips": pair.round_trips,
            }
            for pair in results
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.langgraph_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--supersteps", type=int, default=10)
    parser.add_argument(
        "--backends", default=",".join(PAIRS), help="comma-separated subset of: memory,sqlite"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results (every sample) as JSON")
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="PATH",
        action="append",
        help="replace this bench's section of PATH (repeat for several files: one run, one table)",
    )
    arguments = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(arguments)
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    unknown = sorted(set(backends) - set(PAIRS))
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(PAIRS)}")
    runs = 9 if args.quick else 41
    results = asyncio.run(run_all(supersteps=args.supersteps, runs=runs, backends=backends))
    env = environment()
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(payload(results, env), indent=2) + "\n", encoding="utf-8")
    command = " ".join(["python -m bench.langgraph_bench", *arguments])
    for path in args.markdown or ():
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
        path.write_text(replace_section(existing, markdown(results, command, env)), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
