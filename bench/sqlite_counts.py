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


class CountedConnection:
    """An aiosqlite connection whose calls are counted as they are made: aiosqlite runs each call
    of its connection (``execute``, ``execute_fetchall``, ``commit``) as one function on its
    thread, so the calls are the raw peer's hand-offs, counted through its public methods."""

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self.connection = connection
        self.handoffs = 0

    async def execute(self, sql: str, parameters: Any = None) -> Any:
        self.handoffs += 1
        return await self.connection.execute(sql, parameters)

    async def execute_fetchall(self, sql: str, parameters: Any = None) -> Any:
        self.handoffs += 1
        return await self.connection.execute_fetchall(sql, parameters)

    async def close(self) -> None:
        await self.connection.close()


class _Counted:
    """The hand-offs a connection has made since this was created."""

    def __init__(self, connection: ConnectionThread | CountedConnection) -> None:
        self.connection = connection
        self.start = connection.handoffs

    @property
    def puts(self) -> int:
        return self.connection.handoffs - self.start


def count_handoffs(connection: ConnectionThread | CountedConnection) -> _Counted:
    """Count the calls put on the connection's thread from now on (our connection thread counts
    its own; the raw peer is counted by :class:`CountedConnection`)."""
    return _Counted(connection)


async def _per_save(
    path: Path, connection: ConnectionThread | CountedConnection, save: Callable[[int], Awaitable[Any]]
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
    raw = CountedConnection(await aiosqlite.connect(raw_path, isolation_level=None))
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
