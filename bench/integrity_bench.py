"""What tamper evidence costs: save and load of the benchmark checkpoint with and without a key.

``python -m bench.integrity_bench [--quick]`` prints, for the in-memory and SQLite storages, the
median time per save and per load without a key and with one (HMAC-SHA256 seal on save; seal
check on load, which on the in-memory storage recognises a reread of the very bytes object the
handle sealed or verified instead of computing the MAC again: docs/integrity.md), and the
overhead. The two variants of each storage are timed interleaved, round by round, so drift on a
shared machine hits both alike. Saves form one chain, as a runner's do,
so each save chains onto the record the handle saved just before (no extra round trip).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python bench/integrity_bench.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import AsyncCase, Budget, time_async, time_sync
from bench.subjects import _temp_dir
from bench.workload import numbered, template
from storages import BaseCheckpointStorage, CheckpointCodec, WorkflowCheckpoint
from storages.integrity import IntegrityKeys, Link, open_sealed, record_mac, seal_header

BENCH_KEY = IntegrityKeys(b"bench-integrity-key-0123456789ab")
FULL = Budget(repeats=15, batch_seconds=0.05)
QUICK = Budget(repeats=5, batch_seconds=0.01)
PRELOADED = 200
"""Checkpoints saved before loads are timed; loads cycle over them."""


@dataclass(frozen=True)
class Overhead:
    backend: str
    operation: str
    plain_us: float
    keyed_us: float

    @property
    def percent(self) -> float:
        return (self.keyed_us / self.plain_us - 1.0) * 100.0


@asynccontextmanager
async def _storages(backend: str) -> AsyncIterator[dict[str, BaseCheckpointStorage]]:
    """A handle without a key and one with a key, both new handles on one store of ``backend``:
    they write the same file (SQLite) through a connection of their own each, so the only
    difference between them is the key."""
    directory: Path | None = None
    if backend == "memory":
        from storages.memory import InMemoryCheckpointStorage

        root: BaseCheckpointStorage = InMemoryCheckpointStorage()
    else:
        from storages.sqlite import SQLiteCheckpointStorage

        directory = _temp_dir("integrity")
        root = SQLiteCheckpointStorage(directory / "integrity.db")
    handles = {"plain": root.new_handle(), "keyed": root.with_integrity_key(BENCH_KEY)}
    try:
        yield handles
    finally:
        for handle in (*handles.values(), root):
            await handle.aclose()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


async def measure(backend: str, budget: Budget) -> list[Overhead]:
    base = template(WorkflowCheckpoint)
    async with _storages(backend) as storages:
        ids: dict[str, list[str]] = {}
        for name, storage in storages.items():
            preload = (numbered(base, index, f"preload-{name}") for index in range(PRELOADED))
            ids[name] = [await storage.save(checkpoint) for checkpoint in preload]
        cases: dict[str, AsyncCase] = {}
        for name, storage in storages.items():
            counter = itertools.count()
            cases[f"save/{name}"] = AsyncCase(storage.save, _next_checkpoints(base, counter, name))
            cycle = itertools.cycle(ids[name])
            cases[f"load/{name}"] = AsyncCase(storage.load, lambda n, c=cycle: [next(c) for _ in range(n)])
        results = await time_async(cases, budget)
    return [
        Overhead(
            backend,
            operation,
            results[f"{operation}/plain"].median_us,
            results[f"{operation}/keyed"].median_us,
        )
        for operation in ("save", "load")
    ]


def seal_and_check_us(budget: Budget) -> dict[str, float]:
    """The integrity work alone, per record, without any storage around it (CPU only)."""
    body = CheckpointCodec().encode_checkpoint(template(WorkflowCheckpoint))
    key_id, key = BENCH_KEY.signing_key()
    header = seal_header(key_id, Link.PRESENT, bytes(32), 12, None, 0, "bench-main-00000011")
    sealed = header + record_mac(key, "bench-main-00000012", header, body) + body

    def seal() -> bytes:
        return record_mac(key, "bench-main-00000012", header, body)

    def check() -> bytes:  # what every keyed read does: parse the seal, recompute and compare
        return open_sealed("bench-main-00000012", sealed, BENCH_KEY.verifying_key)[1]

    timed = time_sync({"seal": seal, "check": check}, budget)
    return {"body_bytes": float(len(body)), **{name: m.median_us for name, m in timed.items()}}


def _next_checkpoints(
    base: Any, counter: itertools.count[int], series: str
) -> Callable[[int], Sequence[Any]]:
    def make(n: int) -> list[Any]:
        return [numbered(base, next(counter), series) for _ in range(n)]

    return make


async def run(budget: Budget, backends: Sequence[str] = ("memory", "sqlite")) -> list[Overhead]:
    return [row for backend in backends for row in await measure(backend, budget)]


def render(rows: Sequence[Overhead]) -> str:
    lines = [
        "| storage | operation | without a key (µs) | with a key (µs) | overhead |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [
        f"| {row.backend} | {row.operation} | {row.plain_us:,.1f} | {row.keyed_us:,.1f} "
        f"| {row.percent:+.1f}% |"
        for row in rows
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.integrity_bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    args = parser.parse_args(argv)
    budget = QUICK if args.quick else FULL
    print(render(asyncio.run(run(budget))))
    alone = seal_and_check_us(budget)
    print(
        f"\nThe integrity work alone on the {alone['body_bytes']:,.0f}-byte stored body: "
        f"sealing {alone['seal']:.1f} µs, checking {alone['check']:.1f} µs per record."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
