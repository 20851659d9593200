"""What tamper evidence costs: save and load of the benchmark checkpoint with and without a key.

``python -m bench.integrity_bench [--quick]`` prints, for the in-memory and SQLite storages, the
time per save and per load without a key and with one (HMAC-SHA256 seal on save; seal check on
load, which on the in-memory storage recognises a reread of the very bytes object the handle
sealed or verified instead of computing the MAC again: docs/integrity.md), and the overhead.
Saves form one chain, as a runner's do, so each save chains onto the record the handle saved just
before (no extra round trip); loads cycle over records each handle saved beforehand.

Method (chosen so that a shared machine, and on SQLite the hand-off to aiosqlite's thread, blur
both variants alike instead of whichever happened to run during a burst):

* Two new handles on one store, one without a key and one with it (on SQLite each has its own
  connection, so its own worker thread): the key is the only difference between them.
* Each operation is timed in rounds (21; 5 with ``--quick``). A round is ``n`` pairs of calls,
  one without a key and one with it, each call timed on its own, the order inside a pair
  alternating (plain first in even pairs, keyed first in odd ones) so neither variant always runs
  right after the other's hand-off or cache traffic. ``n`` is calibrated once per operation so a
  round's calls take about 2 x ``batch_seconds``; the garbage collector is paused during a round,
  as ``timeit`` does, and every handle makes untimed warm-up calls first.
* A round gives each variant's median time per call (a call the scheduler preempted, or that
  waited for a worker thread another process held the CPU from, is an outlier of one variant;
  the median drops it, where a mean would charge it to whichever variant it hit) and the ratio
  of the two. The figures printed are the median over rounds of those per-round medians (µs)
  and, as the overhead, the median of the per-round ratios (not the ratio of two medians taken
  apart, which can pair a quiet round of one variant with a busy round of the other), with the
  middle half of the per-round ratios (first to third quartile) to show how stable it is.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import shutil
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python bench/integrity_bench.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import Budget, time_sync
from bench.subjects import _temp_dir
from bench.workload import numbered, template
from storages import CheckpointStore, WorkflowCheckpoint
from storages.codec import CheckpointCodec
from storages.integrity import IntegrityKeys, Link, open_sealed, record_mac, seal_header

BENCH_KEY = IntegrityKeys(b"bench-integrity-key-0123456789ab")
FULL = Budget(repeats=21, batch_seconds=0.05)
QUICK = Budget(repeats=5, batch_seconds=0.01)
PRELOADED = 200
"""Checkpoints saved before loads are timed; loads cycle over them."""


@dataclass(frozen=True)
class Overhead:
    backend: str
    operation: str
    plain_us: float
    """Median over rounds of the median time per call without a key."""
    keyed_us: float
    """The same with a key."""
    ratio: float = float("nan")
    """Median over rounds of (keyed median / plain median) in the same round."""
    ratio_quartiles: tuple[float, float] = (float("nan"), float("nan"))

    @property
    def percent(self) -> float:
        ratio = self.ratio if self.ratio == self.ratio else self.keyed_us / self.plain_us
        return (ratio - 1.0) * 100.0

    @property
    def spread(self) -> tuple[float, float]:
        """The overhead's middle half over rounds (first and third quartile), in percent."""
        low, high = self.ratio_quartiles
        return (low - 1.0) * 100.0, (high - 1.0) * 100.0


@dataclass(frozen=True)
class _Pair:
    """One operation of both handles: ``call(variant, arg)``, arguments made untimed per round."""

    plain: Callable[[Any], Awaitable[Any]]
    keyed: Callable[[Any], Awaitable[Any]]
    make_args: Callable[[str, int], Sequence[Any]]


async def _timed_round(pair: _Pair, calls: int) -> tuple[list[float], list[float]]:
    """Seconds of each of ``calls`` plain and ``calls`` keyed calls, interleaved call by call
    (the order inside each pair alternating), with the garbage collector paused."""
    plain_args, keyed_args = pair.make_args("plain", calls), pair.make_args("keyed", calls)
    plain_op, keyed_op = pair.plain, pair.keyed
    clock = time.perf_counter
    plain_times: list[float] = []
    keyed_times: list[float] = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        sides = ((plain_op, plain_args, plain_times), (keyed_op, keyed_args, keyed_times))
        for index in range(calls):
            # The order inside each pair alternates, so neither variant always runs second.
            for op, args, times in sides if index % 2 == 0 else sides[::-1]:
                start = clock()
                await op(args[index])
                times.append(clock() - start)
    finally:
        if was_enabled:
            gc.enable()
    return plain_times, keyed_times


async def _time_pair(backend: str, operation: str, pair: _Pair, budget: Budget) -> Overhead:
    await _timed_round(pair, 4)  # warm-up: caches, lazy connections, the first chain links
    plain_probe, keyed_probe = await _timed_round(pair, 8)
    per_call = max(statistics.fmean(plain_probe + keyed_probe), 1e-7)
    calls = max(2, min(budget.max_batch, round(budget.batch_seconds / per_call)))
    plain_medians: list[float] = []
    keyed_medians: list[float] = []
    ratios: list[float] = []
    for _ in range(budget.repeats):
        plain_times, keyed_times = await _timed_round(pair, calls)
        plain_median, keyed_median = statistics.median(plain_times), statistics.median(keyed_times)
        plain_medians.append(plain_median)
        keyed_medians.append(keyed_median)
        ratios.append(keyed_median / plain_median)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return Overhead(
        backend,
        operation,
        statistics.median(plain_medians) * 1e6,
        statistics.median(keyed_medians) * 1e6,
        statistics.median(ratios),
        (quartiles[0], quartiles[2]),
    )


@asynccontextmanager
async def _storages(backend: str) -> AsyncIterator[dict[str, CheckpointStore]]:
    """A handle without a key and one with a key, both new handles on one store of ``backend``:
    they write the same file (SQLite) through a connection of their own each, so the only
    difference between them is the key."""
    directory: Path | None = None
    if backend == "memory":
        from storages.memory import InMemoryCheckpointStorage

        root: CheckpointStore = InMemoryCheckpointStorage()
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
        counters = {name: itertools.count() for name in storages}
        cycles = {name: itertools.cycle(ids[name]) for name in storages}

        def next_checkpoints(name: str, n: int) -> list[Any]:
            return [numbered(base, next(counters[name]), name) for _ in range(n)]

        def next_ids(name: str, n: int) -> list[str]:
            return [next(cycles[name]) for _ in range(n)]

        plain, keyed = storages["plain"], storages["keyed"]
        return [
            await _time_pair(backend, "save", _Pair(plain.save, keyed.save, next_checkpoints), budget),
            await _time_pair(backend, "load", _Pair(plain.load, keyed.load, next_ids), budget),
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


async def run(budget: Budget, backends: Sequence[str] = ("memory", "sqlite")) -> list[Overhead]:
    return [row for backend in backends for row in await measure(backend, budget)]


def render(rows: Sequence[Overhead]) -> str:
    lines = [
        "| storage | operation | without a key (µs) | with a key (µs) | overhead | middle half of rounds |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {row.backend} | {row.operation} | {row.plain_us:,.1f} | {row.keyed_us:,.1f} "
        f"| {row.percent:+.1f}% | {row.spread[0]:+.1f}% to {row.spread[1]:+.1f}% |"
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
