"""Repeated timing in the manner of ``timeit``: batches of calls, several repeats, the median.

Every figure is seconds per operation; each repeat times a batch of ``number`` calls (arguments
are prepared before the clock starts) with the garbage collector paused, as ``timeit`` does.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

TIMES = "\N{MULTIPLICATION SIGN}"
"""The sign a ratio is written with in every table and note."""

AsyncOp = Callable[[Any], Awaitable[Any]]


@dataclass(frozen=True)
class Measurement:
    """Per-operation times of one measured operation, one sample per repeat."""

    per_op_seconds: tuple[float, ...]
    number: int
    """Calls timed together in each repeat."""

    @property
    def median(self) -> float:
        return statistics.median(self.per_op_seconds)

    @property
    def median_us(self) -> float:
        return self.median * 1e6

    def to_json(self) -> dict[str, Any]:
        return {
            "median_us": self.median_us,
            "samples_us": [sample * 1e6 for sample in self.per_op_seconds],
            "calls_per_sample": self.number,
            "samples": len(self.per_op_seconds),
        }


@dataclass(frozen=True)
class Budget:
    """How long to spend measuring one operation."""

    repeats: int = 7
    batch_seconds: float = 0.05
    """Aim for batches of about this long, so timer resolution and loop noise stay small."""
    max_batch: int = 5_000
    slow_op_seconds: float = 0.1
    """Operations slower than this get only ``slow_repeats`` single-call samples."""
    slow_repeats: int = 3


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def time_sync(fns: dict[str, Callable[[], Any]], budget: Budget) -> dict[str, Measurement]:
    """Time synchronous callables, interleaved: each repeat samples every callable once, so a
    burst of load from elsewhere on the machine hits all of them alike rather than one."""
    numbers = {name: _calibrate_sync(fn, budget) for name, fn in fns.items()}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(budget.repeats):
        for name, fn in fns.items():
            samples[name].append(_time_sync_batch(fn, numbers[name]) / numbers[name])
    return {name: Measurement(tuple(samples[name]), numbers[name]) for name in fns}


def _calibrate_sync(fn: Callable[[], Any], budget: Budget) -> int:
    number = 1
    while True:  # like timeit.autorange, capped by the budget
        elapsed = _time_sync_batch(fn, number)
        if elapsed >= budget.batch_seconds / 4 or number >= budget.max_batch:
            return _batch_size(elapsed / number, budget)
        number = min(number * 4, budget.max_batch)


def _time_sync_batch(fn: Callable[[], Any], number: int) -> float:
    with _gc_paused():
        start = time.perf_counter()
        for _ in range(number):
            fn()
        return time.perf_counter() - start


@dataclass(frozen=True)
class AsyncCase:
    """One operation to time: ``await op(arg)`` over arguments from ``make_args(n)`` (built untimed)."""

    op: AsyncOp
    make_args: Callable[[int], Sequence[Any]]


async def time_async(cases: dict[str, AsyncCase], budget: Budget) -> dict[str, Measurement]:
    """Time async operations, interleaved like :func:`time_sync`.

    Each case gets an untimed warm-up call and a calibration batch. Cases slower than
    ``budget.slow_op_seconds`` per call take part in only ``budget.slow_repeats`` rounds, one
    call per sample, so one slow storage cannot stretch the run.
    """
    numbers: dict[str, int] = {}
    wanted: dict[str, int] = {}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for name, case in cases.items():
        await time_async_batch(case.op, case.make_args(1))  # warm-up: caches, lazy connections
        probe = await time_async_batch(case.op, case.make_args(1))
        if probe >= budget.slow_op_seconds:
            numbers[name], wanted[name] = 1, budget.slow_repeats
            samples[name].append(probe)
            continue
        wanted[name] = budget.repeats
        calls = max(1, min(budget.max_batch, int(budget.batch_seconds / 10 / max(probe, 1e-7))))
        per_op = await time_async_batch(case.op, case.make_args(calls)) / calls
        numbers[name] = _batch_size(per_op, budget)
    for _ in range(budget.repeats):
        for name, case in cases.items():
            if len(samples[name]) < wanted[name]:
                if numbers[name] > 1:
                    # Settle first: the previous case may have left the scheduler placing this
                    # case's threads (aiosqlite, to_thread) differently from where its calls run.
                    await time_async_batch(case.op, case.make_args(max(1, numbers[name] // 10)))
                args = case.make_args(numbers[name])
                samples[name].append(await time_async_batch(case.op, args) / numbers[name])
    return {name: Measurement(tuple(samples[name]), numbers[name]) for name in cases}


async def time_async_batch(op: AsyncOp, args: Sequence[Any]) -> float:
    """Seconds to await ``op(arg)`` for every argument, in order."""
    with _gc_paused():
        start = time.perf_counter()
        for arg in args:
            await op(arg)
        return time.perf_counter() - start


def _batch_size(per_op_seconds: float, budget: Budget) -> int:
    return max(1, min(budget.max_batch, round(budget.batch_seconds / max(per_op_seconds, 1e-9))))


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else float("nan")
