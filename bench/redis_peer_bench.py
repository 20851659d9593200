"""Redis, operation by operation, against langgraph-checkpoint-plainredis: the same LangGraph call.

``python -m bench.redis_peer_bench [--url redis://...] [--quick]``. Both sides are LangGraph
checkpointers on the same server, each under a key prefix of its own (deleted afterwards):
StorageSaver (storages/runners/langgraph/) over our RedisCheckpointStorage, and plainredis's
AsyncRedisSaver. Each gets the same checkpoints (the benchmark state of bench/workload.py as one
channel value), interleaved in one process:

* ``aput``: a new checkpoint, chained to the previous one, on a thread of its own;
* ``aget_tuple`` by id, and ``aget_tuple`` of the latest (no id);
* ``alist`` of the whole thread (``STORED`` checkpoints, newest first).

LangGraph's official langgraph-checkpoint-redis is not measured: it needs the RediSearch and
RedisJSON modules and fails on plain Redis with ``unknown command 'FT.INFO'``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph_checkpoint_plainredis import AsyncRedisSaver
from redis.asyncio import Redis

from storages.contract import WorkflowCheckpoint
from storages.redis import delete_prefix
from storages.runners.langgraph import StorageSaver

from .measure import TIMES, AsyncCase, Budget, ratio, time_async
from .report import TableData, fmt_ratio, fmt_us
from .workload import template

DEFAULT_URL = "redis://127.0.0.1:6379/0"
STORED, QUICK_STORED = 200, 20
TARGET = 1.0
"""Ours ÷ plainredis, per operation, at most."""
OPERATIONS = ("aput", "aget_tuple", "aget_tuple latest", "alist")


_STATE = template(WorkflowCheckpoint).state


def _checkpoint(index: int) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = f"1ef{index:013d}-0000-6000-8000-000000000000"
    checkpoint["channel_values"] = {"state": _STATE}
    checkpoint["channel_versions"] = {"state": f"{index:032d}"}
    return checkpoint


@asynccontextmanager
async def savers(url: str) -> AsyncIterator[dict[str, Any]]:
    """Both savers, each under a fresh prefix, cleaned up at exit."""
    run = uuid.uuid4().hex[:8]
    ours_prefix, theirs_prefix = f"bench-peer-ours-{run}", f"bench-peer-plain-{run}"
    separator = "&" if "?" in url else "?"
    client = Redis.from_url(url)
    theirs = AsyncRedisSaver(url=url, prefix=theirs_prefix)
    try:
        async with StorageSaver.from_url(f"{url}{separator}prefix={ours_prefix}") as ours:
            yield {"ours": ours, "plainredis": theirs}
    finally:
        await theirs.aclose()
        await delete_prefix(client, ours_prefix)
        async for key in client.scan_iter(match=f"{theirs_prefix}:*", count=1000):
            await client.delete(key)
        await client.aclose()


def _cases(saver: Any, stored: int, counter: itertools.count[int]) -> dict[str, AsyncCase]:
    thread = {"configurable": {"thread_id": "bench-thread", "checkpoint_ns": ""}}
    rng = random.Random(stored)
    last: dict[str, Any] = {"config": None}

    async def put(index: int) -> None:
        # Onto a thread of its own: the number of timed puts differs between the two sides, and
        # the listed thread must hold the same checkpoints on both.
        config = last["config"] or {"configurable": {"thread_id": "bench-put-thread", "checkpoint_ns": ""}}
        last["config"] = await saver.aput(
            config, _checkpoint(index), {"step": index}, {"state": f"{index:032d}"}
        )

    async def get(checkpoint_id: str) -> None:
        config = {"configurable": {**thread["configurable"], "checkpoint_id": checkpoint_id}}
        assert await saver.aget_tuple(config) is not None

    async def latest(_: object) -> None:
        assert await saver.aget_tuple(thread) is not None

    async def listing(_: object) -> None:
        count = 0
        async for _tuple in saver.alist(thread):
            count += 1
        assert count == stored

    def ids(n: int) -> list[str]:
        return [_checkpoint(rng.randrange(stored))["id"] for _ in range(n)]

    return {
        "aput": AsyncCase(put, lambda n: [next(counter) for _ in range(n)]),
        "aget_tuple": AsyncCase(get, ids),
        "aget_tuple latest": AsyncCase(latest, lambda n: [None] * n),
        "alist": AsyncCase(listing, lambda n: [None] * n),
    }


async def run_peer(url: str, budget: Budget, *, stored: int = STORED) -> dict[str, Any]:
    async with savers(url) as subjects:
        thread = {"configurable": {"thread_id": "bench-thread", "checkpoint_ns": ""}}
        for saver in subjects.values():
            config: Any = thread
            for index in range(stored):
                config = await saver.aput(
                    config, _checkpoint(index), {"step": index}, {"state": f"{index:032d}"}
                )
        cases = {
            f"{name}/{operation}": case
            for name, saver in subjects.items()
            for operation, case in _cases(saver, stored, itertools.count(10 * stored)).items()
        }
        measured = await time_async(cases, budget)
    operations = {key: m.to_json() for key, m in measured.items()}
    ratios = {
        operation: ratio(
            operations[f"ours/{operation}"]["median_us"], operations[f"plainredis/{operation}"]["median_us"]
        )
        for operation in OPERATIONS
    }
    return {"url": url, "stored": stored, "operations": operations, "ratios": ratios}


def table(results: dict[str, Any]) -> TableData:
    ops = results["operations"]
    data = TableData(
        "Redis vs langgraph-checkpoint-plainredis: µs per LangGraph call (median), "
        f"{results['stored']:,} stored",
        ["operation", "StorageSaver over ours", "plainredis AsyncRedisSaver", "ours ÷ plainredis", "target"],
    )
    for operation in OPERATIONS:
        data.rows.append(
            [
                operation,
                fmt_us(ops[f"ours/{operation}"]["median_us"]),
                fmt_us(ops[f"plainredis/{operation}"]["median_us"]),
                fmt_ratio(results["ratios"][operation]),
                f"≤ {TARGET}{TIMES}",
            ]
        )
    return data


def markdown(results: dict[str, Any]) -> list[str]:
    return [
        f"### {table(results).title}",
        "",
        "Both are LangGraph checkpointers given the same calls (bench/redis_peer_bench.py): StorageSaver "
        "over RedisCheckpointStorage and plainredis's AsyncRedisSaver, each under its own key prefix. "
        "LangGraph's official langgraph-checkpoint-redis is not measured: it needs the RediSearch and "
        "RedisJSON modules and fails on plain Redis with `unknown command 'FT.INFO'`.",
        "",
        table(results).to_markdown(),
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(
        prog="python -m bench.redis_peer_bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--url", default=os.environ.get("REDIS_URL", DEFAULT_URL))
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STORED} instead of {STORED} stored")
    args = parser.parse_args(argv)
    budget = Budget(repeats=7, batch_seconds=0.02) if args.quick else Budget(repeats=15, batch_seconds=0.03)
    results = asyncio.run(run_peer(args.url, budget, stored=QUICK_STORED if args.quick else STORED))
    Console().print(table(results).to_rich())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
