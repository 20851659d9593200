"""Writer fencing's cost: a fenced save next to a plain save of the same checkpoint, per backend.

Run alone with ``python -m bench.fencing_bench [--quick] [--backends memory,sqlite,redis,s3]``.
Each backend saves two chains of the benchmark checkpoint (bench/workload.py), one plain and one
fenced on its previous id (what ``FencedStorage`` sends for a continuing run), interleaved by
:func:`bench.measure.time_async`, so a burst of load elsewhere hits both alike. The figure is the
median over repeats of fenced / plain within each repeat; the target is at most 1.10. Redis uses
the server at ``--redis-url`` under a fresh key prefix it deletes afterwards; S3 uses moto's
server on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import statistics
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from bench.measure import AsyncCase, Budget, Measurement, ratio, time_async
from bench.subjects import _temp_dir
from bench.workload import numbered, template
from storages import CheckpointStore, WorkflowCheckpoint

BACKENDS = ("memory", "sqlite", "redis", "s3")
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
TARGET = 1.10
"""A fenced save may cost at most this many plain saves."""
FULL = Budget(repeats=21, batch_seconds=0.05)
QUICK = Budget(repeats=5, batch_seconds=0.02)


@dataclass
class _Chain:
    """One workflow's chain of benchmark checkpoints, continued by each batch of arguments."""

    base: Any
    series: str
    next_index: int = 0

    def make(self, count: int) -> Sequence[Any]:
        # Batches run whole and in the order they are made, so each batch continues the last one.
        items = [numbered(self.base, self.next_index + offset, self.series) for offset in range(count)]
        self.next_index += count
        return items


def cases(storage: CheckpointStore, run: str) -> dict[str, AsyncCase]:
    """The plain and the fenced save, each on a workflow of its own."""
    plain = _Chain(dataclasses.replace(template(WorkflowCheckpoint), workflow_name=f"{run}-plain"), "plain")
    fenced = _Chain(
        dataclasses.replace(template(WorkflowCheckpoint), workflow_name=f"{run}-fenced"), "fenced"
    )

    async def save_plain(checkpoint: Any) -> None:
        await storage.save(checkpoint)

    async def save_fenced(checkpoint: Any) -> None:
        await storage.save(checkpoint, expected_latest_id=checkpoint.previous_checkpoint_id)

    return {"plain": AsyncCase(save_plain, plain.make), "fenced": AsyncCase(save_fenced, fenced.make)}


@asynccontextmanager
async def _open(backend: str, redis_url: str) -> AsyncIterator[CheckpointStore]:
    if backend == "memory":
        from storages.memory import InMemoryCheckpointStorage

        async with InMemoryCheckpointStorage() as storage:
            yield storage
    elif backend == "sqlite":
        from storages.sqlite import SQLiteCheckpointStorage

        directory = _temp_dir("fencing")
        try:
            async with SQLiteCheckpointStorage(directory / "fencing.db") as storage:
                yield storage
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    elif backend == "redis":
        from storages.redis import RedisCheckpointStorage

        prefix = f"bench-fencing-{uuid.uuid4().hex[:8]}"
        async with RedisCheckpointStorage(url=redis_url, prefix=prefix) as storage:
            try:
                yield storage
            finally:
                client = storage.backend.client
                keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
                if keys:
                    await client.delete(*keys)
    elif backend == "s3":
        from conformance.s3_moto import make_client, start_server
        from storages.s3 import S3CheckpointStorage

        endpoint, stop = start_server()
        try:
            client = make_client(endpoint)
            client.create_bucket(Bucket="bench-fencing")
            async with S3CheckpointStorage("bench-fencing", "fencing", client=client) as storage:
                yield storage
        finally:
            stop()
    else:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")


async def measure(
    backends: Sequence[str], budget: Budget, redis_url: str = DEFAULT_REDIS_URL
) -> dict[str, dict[str, Measurement]]:
    """Backend -> {"plain": ..., "fenced": ...} per-save times."""
    results: dict[str, dict[str, Measurement]] = {}
    for backend in backends:
        async with _open(backend, redis_url) as storage:
            results[backend] = await time_async(cases(storage, f"bench-{uuid.uuid4().hex[:6]}"), budget)
    return results


def paired_ratio(measured: dict[str, Measurement]) -> float:
    """The median over repeats of fenced / plain: each repeat samples both back to back, so a
    load burst elsewhere on the machine cancels out of its ratio (the medians alone do not)."""
    pairs = zip(measured["fenced"].per_op_seconds, measured["plain"].per_op_seconds, strict=True)
    return statistics.median(ratio(fenced, plain) for fenced, plain in pairs)


def table(results: dict[str, dict[str, Measurement]]) -> str:
    lines = [
        "| backend | plain save | fenced save | fenced / plain (median of paired repeats) |",
        "|---|---|---|---|",
    ]
    for backend, measured in results.items():
        plain, fenced = measured["plain"].median_us, measured["fenced"].median_us
        lines.append(f"| {backend} | {plain:,.1f} µs | {fenced:,.1f} µs | {paired_ratio(measured):.2f}x |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fencing_bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated, from %(default)s")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", DEFAULT_REDIS_URL))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    results = asyncio.run(measure(backends, QUICK if args.quick else FULL, args.redis_url))
    out(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
