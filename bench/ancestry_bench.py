"""Ancestry walks: one call that follows a chain of 1,000 previous ids, next to 1,000 loads.

A runner (or a person debugging one) that wants a checkpoint's history without a walk loads the
checkpoint, reads its previous id, loads that, and so on: one backend round trip per step. Our
storages answer the whole walk in one round trip (SQLite: one recursive query). Round trips are
counted, not assumed: every aiosqlite statement goes through a counting wrapper.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rich.progress import Progress

from bench.measure import TIMES, Budget, _gc_paused
from bench.report import TableData, fmt_ratio, fmt_us
from bench.subjects import _temp_dir
from bench.workload import template

DEPTH = 1_000


@dataclass
class _Subject:
    key: str
    label: str
    storage: Any
    statements: Callable[[], int] | None
    """Statements the backend has run so far (None: in-process, no round trips)."""
    cleanup: Callable[[], Awaitable[None]]


async def _ours_sqlite() -> _Subject:
    from storages.sqlite import SQLiteCheckpointStorage

    directory = _temp_dir("ancestry")
    storage = SQLiteCheckpointStorage(directory / "ancestry.db")
    await storage.__aenter__()
    connection = storage.backend.connection
    assert connection is not None
    count = [0]
    original = connection.execute_fetchall

    async def counting(sql: str, *args: Any) -> Any:
        count[0] += 1
        return await original(sql, *args)

    connection.execute_fetchall = counting  # type: ignore[method-assign]

    async def cleanup() -> None:
        await storage.aclose()
        shutil.rmtree(directory, ignore_errors=True)

    return _Subject("ours-sqlite", "ours: SQLite", storage, lambda: count[0], cleanup)


async def _ours_memory() -> _Subject:
    from storages.memory import InMemoryCheckpointStorage

    storage = InMemoryCheckpointStorage()

    async def cleanup() -> None:
        await storage.aclose()

    return _Subject("ours-memory", "ours: memory", storage, None, cleanup)


async def _maf(kind: str) -> _Subject:
    from agent_framework import FileCheckpointStorage, InMemoryCheckpointStorage

    if kind == "file":
        directory = _temp_dir("ancestry-maf")
        storage = FileCheckpointStorage(directory)

        async def remove_directory() -> None:
            shutil.rmtree(directory, ignore_errors=True)

        return _Subject("maf-file", "MAF FileCheckpointStorage", storage, None, remove_directory)
    return _Subject("maf-memory", "MAF InMemoryCheckpointStorage", InMemoryCheckpointStorage(), None, _noop)


async def _noop() -> None:
    return None


async def _build_chain(subject: _Subject) -> str:
    """Save DEPTH checkpoints chained by previous id; returns the newest id."""
    maf = subject.key.startswith("maf")
    if maf:
        from agent_framework import WorkflowCheckpoint as checkpoint_class
    else:
        from storages.contract import WorkflowCheckpoint as checkpoint_class
    base = template(checkpoint_class)
    previous: str | None = None
    for index in range(DEPTH):
        fields = base.to_dict()
        fields.update(checkpoint_id=f"chain-{index:05d}", previous_checkpoint_id=previous)
        previous = await subject.storage.save(checkpoint_class(**fields))
    assert previous is not None
    return previous


async def load_chain(storage: Any, newest: str) -> int:
    # Keeps what it loaded, as walk_ancestry returns it: a caller walks to use the history, and
    # 1,000 live checkpoints cost more to build than 1,000 that are freed at once.
    history: list[Any] = []
    current: str | None = newest
    while current is not None:
        checkpoint = await storage.load(current)
        history.append(checkpoint)
        current = checkpoint.previous_checkpoint_id
    return len(history)


async def _time(operation: Callable[[], Awaitable[int]], repeats: int) -> tuple[list[float], int]:
    samples: list[float] = []
    result = 0
    for _ in range(repeats):
        with _gc_paused():
            started = time.perf_counter()
            result = await operation()
            samples.append(time.perf_counter() - started)
    return samples, result


def _operations(storage: Any, newest: str) -> dict[str, Callable[[], Awaitable[int]]]:
    async def loads() -> int:
        return await load_chain(storage, newest)

    if not hasattr(storage, "walk_ancestry_ids"):
        return {"load_chain": loads}

    async def walk_ids() -> int:
        return len((await storage.walk_ancestry_ids(newest)).items)

    async def walk() -> int:
        return len((await storage.walk_ancestry(newest)).items)

    return {"walk_ids": walk_ids, "walk": walk, "load_chain": loads}


async def _measure(subject: _Subject, newest: str, repeats: int) -> dict[str, Any]:
    row: dict[str, Any] = {"label": subject.label}
    for name, operation in _operations(subject.storage, newest).items():
        before = subject.statements() if subject.statements is not None else 0
        samples, steps = await _time(operation, repeats)
        if steps != DEPTH:
            raise AssertionError(f"{subject.label} {name} covered {steps} checkpoints, not {DEPTH}")
        round_trips = None
        if subject.statements is not None:
            round_trips = (subject.statements() - before) // repeats
        row[name] = {
            "median_us": statistics.median(samples) * 1e6,
            "samples_us": [sample * 1e6 for sample in samples],
            "round_trips": round_trips,
        }
    return row


async def run_ancestry(budget: Budget, progress: Progress) -> dict[str, Any]:
    """Walk and load-chain timings at DEPTH for each subject, with round trips counted."""
    task = progress.add_task(f"ancestry chains of {DEPTH:,}", total=None)
    openers: list[Callable[[], Awaitable[_Subject]]] = [
        _ours_memory,
        _ours_sqlite,
        lambda: _maf("memory"),
        lambda: _maf("file"),
    ]
    results: dict[str, Any] = {}
    repeats = max(3, budget.repeats // 2)
    for open_subject in openers:
        subject = await open_subject()
        try:
            progress.update(task, description=f"ancestry: building a chain of {DEPTH:,} in {subject.label}")
            newest = await _build_chain(subject)
            progress.update(task, description=f"ancestry: timing {subject.label}")
            results[subject.key] = await _measure(subject, newest, repeats)
        finally:
            await subject.cleanup()
    progress.update(task, description="ancestry measured", total=1, completed=1)
    return {"depth": DEPTH, "subjects": results}


def ancestry_table(section: dict[str, Any]) -> TableData:
    depth = section["depth"]
    table = TableData(
        f"Ancestry: a chain of {depth:,} checkpoints, walked in one call vs loaded one by one (µs)",
        [
            "subject",
            "walk_ancestry_ids",
            "walk_ancestry",
            f"{depth:,} {TIMES} load",
            f"loads {TIMES} walk",
            "round trips (walk / loads)",
        ],
        caption="Round trips are SQL statements counted on the connection; in-process stores have none.",
    )
    for row in section["subjects"].values():
        walk_ids, walk, loads = row.get("walk_ids"), row.get("walk"), row["load_chain"]
        trips = "n/a"
        if walk is not None and walk["round_trips"] is not None:
            trips = f"{walk['round_trips']} / {loads['round_trips']:,}"
        table.rows.append(
            [
                row["label"],
                fmt_us(walk_ids["median_us"]) if walk_ids else "no walk",
                fmt_us(walk["median_us"]) if walk else "no walk",
                fmt_us(loads["median_us"]),
                fmt_ratio(loads["median_us"] / walk["median_us"]) if walk else "n/a",
                trips,
            ]
        )
    return table
