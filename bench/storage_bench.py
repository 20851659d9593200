"""Sections 2 and 3: save, load and get_latest at a small and a large store, per subject.

Subjects are measured side by side rather than one after another: every store is open at once,
and each round of samples visits every subject. Load from elsewhere on the machine (a shared
disk's fsync latency, other processes on two cores) then falls on all subjects alike, and the
ratios between them stay meaningful even when absolute figures drift.
"""

from __future__ import annotations

import gc
import random
import time
from dataclasses import dataclass
from typing import Any

from rich.progress import Progress, TaskID

from .measure import AsyncCase, Budget, Measurement, ratio, time_async, time_async_batch
from .subjects import Store, Subject
from .workload import checkpoint_id

OPERATIONS = ("save", "load", "latest")

COMPARISONS: tuple[tuple[str, str, str], ...] = (
    # (numerator, denominator, what the ratio means)
    ("ours-memory", "raw-dict", "ours ÷ raw: cost in multiples of the raw backend"),
    ("ours-sqlite", "raw-sqlite", "ours ÷ raw: cost in multiples of the raw backend"),
    ("maf-memory", "ours-memory", "MAF ÷ ours: how many times faster ours is"),
    ("maf-file", "ours-sqlite", "MAF ÷ ours: how many times faster ours is"),
)


@dataclass(frozen=True)
class Sizes:
    small: int
    large: int

    @property
    def chunk(self) -> int:
        """Saves timed together while populating the large store."""
        return max(10, self.large // 100)


def op_key(operation: str, stored: int) -> str:
    return f"{operation}@{stored}"


async def _save_series(store: Store, subject: Subject, start: int, stop: int, series: str) -> float:
    items = [subject.make_item(index, series) for index in range(start, stop)]
    return await time_async_batch(store.save, items)


async def _check(store: Store, count: int, series: str = "main") -> None:
    """Fail loudly if the store does not hold what was saved: a benchmark of a no-op is worthless."""
    expected = checkpoint_id(count - 1, series)
    latest = await store.latest_id()
    if latest != expected:
        raise AssertionError(f"latest is {latest!r}, expected {expected!r}")
    probe = checkpoint_id(count // 2, series)
    loaded = store.loaded_id(await store.load(probe))
    if loaded != probe:
        raise AssertionError(f"load({probe!r}) returned {loaded!r}")


async def _measure_small_saves(
    line_up: list[Subject], sizes: Sizes, budget: Budget
) -> dict[str, Measurement]:
    """Saves into fresh stores of up to ``sizes.small`` checkpoints, one fresh store per sample."""
    samples: dict[str, list[float]] = {subject.key: [] for subject in line_up}
    for repeat in range(budget.repeats + 1):  # round 0 warms caches and is discarded
        for subject in line_up:
            store = await subject.open()
            try:
                seconds = await _save_series(store, subject, 0, sizes.small, f"small{repeat}")
                await _check(store, sizes.small, f"small{repeat}")
            finally:
                await store.close()
            if repeat:
                samples[subject.key].append(seconds / sizes.small)
    return {key: Measurement(tuple(values), sizes.small) for key, values in samples.items()}


async def _measure_reads(
    stores: dict[str, Store], count: int, budget: Budget, rng: random.Random
) -> dict[str, dict[str, Measurement]]:
    ids = [checkpoint_id(index) for index in range(count)]
    cases: dict[tuple[str, str], AsyncCase] = {}
    for key, store in stores.items():
        cases[key, "load"] = AsyncCase(store.load, lambda n: rng.choices(ids, k=n))
        cases[key, "latest"] = AsyncCase(store.latest, lambda n: [None] * n)
    by_name = {f"{key}/{op}": case for (key, op), case in cases.items()}
    measured = await time_async(by_name, budget)
    return {key: {op_key(op, count): measured[f"{key}/{op}"] for op in ("load", "latest")} for key in stores}


async def run_storages(
    line_up: list[Subject], sizes: Sizes, budget: Budget, progress: Progress, seed: int = 1
) -> dict[str, Any]:
    """Every operation at both sizes for every subject, plus the populate throughput."""
    rng = random.Random(seed)
    started = time.perf_counter()
    phase = progress.add_task(f"save into fresh stores of {sizes.small}", total=None)
    ops: dict[str, dict[str, Measurement]] = {subject.key: {} for subject in line_up}
    for key, measurement in (await _measure_small_saves(line_up, sizes, budget)).items():
        ops[key][op_key("save", sizes.small)] = measurement

    stores: dict[str, Store] = {}
    populate_seconds = dict.fromkeys(ops, 0.0)
    chunk_samples: dict[str, list[tuple[int, float]]] = {key: [] for key in ops}
    try:
        for subject in line_up:
            stores[subject.key] = await subject.open()
            populate_seconds[subject.key] += await _save_series(
                stores[subject.key], subject, 0, sizes.small, "main"
            )
            await _check(stores[subject.key], sizes.small)
        progress.update(phase, description=f"load and get_latest at {sizes.small:,} stored")
        for key, measured in (await _measure_reads(stores, sizes.small, budget, rng)).items():
            ops[key].update(measured)

        progress.update(phase, description=f"populate to {sizes.large:,}")
        tasks: dict[str, TaskID] = {
            subject.key: progress.add_task(f"  {subject.label}", total=sizes.large, completed=sizes.small)
            for subject in line_up
        }
        for start in range(sizes.small, sizes.large, sizes.chunk):
            stop = min(start + sizes.chunk, sizes.large)
            for subject in line_up:
                seconds = await _save_series(stores[subject.key], subject, start, stop, "main")
                populate_seconds[subject.key] += seconds
                chunk_samples[subject.key].append((start, seconds / (stop - start)))
                progress.advance(tasks[subject.key], stop - start)
        for subject in line_up:
            await _check(stores[subject.key], sizes.large)
            # "save at the large size": the chunks saved while the store held its last 10 %.
            tail = [per_op for start, per_op in chunk_samples[subject.key] if start >= sizes.large * 0.9]
            ops[subject.key][op_key("save", sizes.large)] = Measurement(tuple(tail), sizes.chunk)

        progress.update(phase, description=f"load and get_latest at {sizes.large:,} stored")
        for key, measured in (await _measure_reads(stores, sizes.large, budget, rng)).items():
            ops[key].update(measured)
        progress.update(phase, description="storages measured", total=1, completed=1)
    finally:
        for store in stores.values():
            await store.close()
        gc.collect()

    results = {
        subject.key: {
            "label": subject.label,
            "family": subject.family,
            "kind": subject.kind,
            "ops": {key: measurement.to_json() for key, measurement in ops[subject.key].items()},
            "populate": {
                "count": sizes.large,
                "seconds": populate_seconds[subject.key],
                "per_op_us": populate_seconds[subject.key] / sizes.large * 1e6,
            },
        }
        for subject in line_up
    }
    return {
        "sizes": {"small": sizes.small, "large": sizes.large, "populate_chunk": sizes.chunk},
        "subjects": results,
        "seconds": time.perf_counter() - started,
    } | derive_ratios(results, sizes)


def derive_ratios(results: dict[str, Any], sizes: Sizes) -> dict[str, Any]:
    """The comparison ratios and get_latest flatness, from the per-subject medians."""

    def median(key: str, op: str) -> float:
        return float(results[key]["ops"][op]["median_us"])

    op_keys = [op_key(op, n) for op in OPERATIONS for n in (sizes.small, sizes.large)]
    comparisons = [
        {
            "numerator": numerator,
            "denominator": denominator,
            "meaning": meaning,
            "values": {op: ratio(median(numerator, op), median(denominator, op)) for op in op_keys},
        }
        for numerator, denominator, meaning in COMPARISONS
        if numerator in results and denominator in results
    ]
    flatness = {
        key: ratio(median(key, op_key("latest", sizes.large)), median(key, op_key("latest", sizes.small)))
        for key in results
    }
    return {"comparisons": comparisons, "latest_large_over_small": flatness}
