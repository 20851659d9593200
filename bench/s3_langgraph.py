"""LangGraph pair for the S3 bench: the same graph through StorageSaver over our S3 storage and
through StorageSaver over memory, interleaved in one run, with the S3 requests one run sends.

The workload is bench/langgraph_workload.py's loop (a parent graph looping a two-node subgraph; each
superstep saves parent and subgraph checkpoints and their pending writes). No LangGraph saver for
S3 exists to compare with (S3 savers are community-only), so the pair shows what S3 adds over the
same saver on memory; the requests and their price are the figures to plan with.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.s3_costs import cost_per_million, total


async def measure(client: Any, counter: Any, bucket: str, *, supersteps: int, runs: int) -> dict[str, Any]:
    from bench.langgraph_workload import build_loop
    from bench.langgraph_workload import run_graph as run_once
    from storages.memory import InMemoryCheckpointStorage
    from storages.runners.langgraph import StorageSaver
    from storages.s3 import S3CheckpointStorage

    s3_times: list[float] = []
    memory_times: list[float] = []
    async with (
        S3CheckpointStorage(bucket, "langgraph", client=client) as s3_storage,
        InMemoryCheckpointStorage() as memory_storage,
    ):
        s3_graph = build_loop(StorageSaver(s3_storage))
        memory_graph = build_loop(StorageSaver(memory_storage))
        await run_once(memory_graph, supersteps)
        counter.reset()
        await run_once(s3_graph, supersteps)  # warm-up, and the requests of one run
        requests = counter.snapshot()
        for index in range(runs):
            order = ((s3_graph, s3_times), (memory_graph, memory_times))
            for graph, times in order if index % 2 == 0 else order[::-1]:
                times.append(await run_once(graph, supersteps))
    s3_ms, memory_ms = statistics.median(s3_times) * 1e3, statistics.median(memory_times) * 1e3
    return {
        "supersteps": supersteps,
        "runs": runs,
        "s3_ms": s3_ms,
        "memory_ms": memory_ms,
        "ratio": s3_ms / memory_ms,
        "requests": requests,
        "requests_per_superstep": total(requests) / supersteps,
        "usd_per_million_runs": cost_per_million(requests),
    }


def markdown(pair: dict[str, Any] | str) -> list[str]:
    lines = ["## LangGraph: StorageSaver over S3 vs over memory", ""]
    if isinstance(pair, str):
        return [*lines, f"Not measured: {pair}.", ""]
    mix = ", ".join(f"{count} {name}" for name, count in sorted(pair["requests"].items()))
    return [
        *lines,
        f"bench/langgraph_bench.py's loop, {pair['supersteps']} supersteps per run, median of "
        f"{pair['runs']} runs, the two savers taking turns.",
        "",
        "| StorageSaver over | ms per run (median) | S3 requests per run | USD per million runs |",
        "|---|---:|---|---:|",
        f"| S3 (moto server) | {pair['s3_ms']:,.1f} | {mix} "
        f"({pair['requests_per_superstep']:.1f} per superstep) | {pair['usd_per_million_runs']:,.2f} |",
        f"| memory | {pair['memory_ms']:,.1f} | none | none |",
        "",
        f"S3 ÷ memory: {pair['ratio']:.2f}.",
        "",
    ]


__all__ = ["markdown", "measure"]
