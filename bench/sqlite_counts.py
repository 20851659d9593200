"""Load-independent SQLite save figures: pages written (WAL frames) and hand-offs to the
connection's thread per save, ours next to a raw single INSERT of the same body.

Wall-clock ratios move with the machine's load; these counts do not. Each WAL frame is one page
written (and synced at synchronous=FULL); each hand-off is one item on aiosqlite's queue, a
thread wake-up and a loop wake-up. ``python -m bench.sqlite_counts`` prints them.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosqlite

from storages import WorkflowCheckpoint
from storages.codec import CheckpointCodec
from storages.sqlite import SQLiteCheckpointStorage
from storages.sqlite.thread import ConnectionThread

from .workload import numbered, template

WARM_UP = 20
MEASURED = 40


def wal_frames(path: Path, page_size: int) -> int:
    """Frames in the WAL file (no checkpoint runs during a measurement: far below 1,000 pages)."""
    wal = Path(f"{path}-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - 32) // (page_size + 24)


def _make(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)


class _CountingQueue:
    """Stands in for aiosqlite's queue on the loop's side (its thread keeps the real one): how
    the raw peer's hand-offs are counted, aiosqlite having no count of its own."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self.puts = 0

    def put_nowait(self, item: Any) -> None:
        self.puts += 1
        self.queue.put_nowait(item)


class _CountedByThread:
    """Our connection thread counts its hand-offs itself (ConnectionThread.handoffs)."""

    def __init__(self, connection: ConnectionThread) -> None:
        self.connection = connection
        self.start = connection.handoffs

    @property
    def puts(self) -> int:
        return self.connection.handoffs - self.start


def count_handoffs(connection: ConnectionThread | aiosqlite.Connection) -> _CountingQueue | _CountedByThread:
    """Count the calls put on the connection's thread from now on."""
    if isinstance(connection, ConnectionThread):
        return _CountedByThread(connection)
    counting = _CountingQueue(connection._tx)
    connection._tx = counting  # type: ignore[assignment]
    return counting


async def _per_save(
    path: Path, connection: ConnectionThread | aiosqlite.Connection, save: Callable[[int], Awaitable[Any]]
) -> dict[str, float]:
    (row,) = await connection.execute_fetchall("PRAGMA page_size")
    page_size = int(row[0])
    for index in range(WARM_UP):
        await save(index)
    handoffs = count_handoffs(connection)
    frames = wal_frames(path, page_size)
    for index in range(WARM_UP, WARM_UP + MEASURED):
        await save(index)
    return {
        "wal_frames": (wal_frames(path, page_size) - frames) / MEASURED,
        "handoffs": handoffs.puts / MEASURED,
    }


async def measure(directory: Path) -> dict[str, dict[str, float]]:
    _make(directory)
    base = template(WorkflowCheckpoint)
    body = CheckpointCodec().encode_checkpoint(base)
    ours_path = directory / "ours.db"
    async with SQLiteCheckpointStorage(ours_path) as storage:
        connection = storage.backend.connection
        assert connection is not None

        async def ours(index: int) -> Any:
            return await storage.save(numbered(base, index))

        ours_counts = await _per_save(ours_path, connection, ours)
    raw_path = directory / "raw.db"
    raw = await aiosqlite.connect(raw_path, isolation_level=None)
    try:
        await raw.execute("PRAGMA journal_mode = WAL")
        await raw.execute("PRAGMA synchronous = FULL")
        await raw.execute("CREATE TABLE raw (id TEXT PRIMARY KEY, body BLOB NOT NULL)")

        async def insert(index: int) -> Any:
            return await raw.execute("INSERT INTO raw (id, body) VALUES (?, ?)", (f"raw-{index:09d}", body))

        raw_counts = await _per_save(raw_path, raw, insert)
    finally:
        await raw.close()
    return {"ours": ours_counts, "raw": raw_counts}


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        counts = asyncio.run(measure(Path(directory)))
    for name, figures in counts.items():
        print(f"{name:5} wal_frames/save={figures['wal_frames']:.2f} handoffs/save={figures['handoffs']:.2f}")


if __name__ == "__main__":
    main()
