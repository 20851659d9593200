"""What the storage benchmark measures: our storages, MAF's storages, and raw-backend floors.

Every subject opens fresh stores and exposes three awaitable operations with one argument each,
so the harness calls them all the same way and its own overhead is equal for every subject:
``save(item)``, ``load(checkpoint_id)`` and ``latest(_)``. Items are built outside the clock by
``make_items``: checkpoint objects for storages, pre-encoded ``(id, body)`` pairs for raw backends.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storages import InMemoryCheckpointStorage
from storages.codec import CheckpointCodec
from storages.contract import WorkflowCheckpoint

from .workload import WORKFLOW_NAME, numbered, template

AsyncOp = Callable[[Any], Awaitable[Any]]


@dataclass
class Store:
    """One open store of a subject."""

    save: AsyncOp
    load: AsyncOp
    latest: AsyncOp
    latest_id: Callable[[], Awaitable[str | None]]
    """Untimed check that the store really holds what was saved."""
    loaded_id: Callable[[Any], str]
    close: Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Subject:
    key: str
    label: str
    family: str
    """``memory`` or ``durable``: which raw backend and which MAF storage it is compared with."""
    kind: str
    """``ours``, ``maf`` or ``raw``."""
    open: Callable[[], Awaitable[Store]]
    make_item: Callable[[int, str], Any]
    """The object saved as the ``index``-th checkpoint of a series."""


# ---------------------------------------------------------------- storages speaking MAF's protocol


def _storage_store(storage: Any, cleanup: Callable[[], Awaitable[None]]) -> Store:
    async def latest_id() -> str | None:
        checkpoint = await storage.get_latest(workflow_name=WORKFLOW_NAME)
        return None if checkpoint is None else str(checkpoint.checkpoint_id)

    return Store(
        save=storage.save,
        load=storage.load,
        latest=lambda _: storage.get_latest(workflow_name=WORKFLOW_NAME),
        latest_id=latest_id,
        loaded_id=lambda checkpoint: str(checkpoint.checkpoint_id),
        close=cleanup,
    )


def _checkpoint_maker(checkpoint_class: type[Any]) -> Callable[[int, str], Any]:
    base = template(checkpoint_class)
    return lambda index, series: numbered(base, index, series)


def _temp_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))


async def _open_ours_memory() -> Store:
    storage = InMemoryCheckpointStorage()
    await storage.__aenter__()
    return _storage_store(storage, storage.aclose)


async def _open_ours_sqlite() -> Store:
    from storages import SQLiteCheckpointStorage

    directory = _temp_dir("sqlite")
    storage = SQLiteCheckpointStorage(directory / "checkpoints.db")
    await storage.__aenter__()

    async def cleanup() -> None:
        await storage.aclose()
        shutil.rmtree(directory, ignore_errors=True)

    return _storage_store(storage, cleanup)


async def _open_maf_memory() -> Store:
    from agent_framework import InMemoryCheckpointStorage as MafInMemoryCheckpointStorage

    async def cleanup() -> None:
        return None

    return _storage_store(MafInMemoryCheckpointStorage(), cleanup)


async def _open_maf_file() -> Store:
    from agent_framework import FileCheckpointStorage

    directory = _temp_dir("maf-file")

    async def cleanup() -> None:
        shutil.rmtree(directory, ignore_errors=True)

    return _storage_store(FileCheckpointStorage(directory), cleanup)


# ---------------------------------------------------------------- raw backends: the floor


_CODEC = CheckpointCodec()
_OURS_MAKER = _checkpoint_maker(WorkflowCheckpoint)


def _raw_item(index: int, series: str) -> tuple[str, bytes]:
    """The id and the exact bytes our storages store for that checkpoint."""
    checkpoint = _OURS_MAKER(index, series)
    return checkpoint.checkpoint_id, _CODEC.encode_checkpoint(checkpoint)


class _RawDict:
    """A dict of bodies: the cheapest possible in-memory store of the same bytes."""

    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}

    async def save(self, item: tuple[str, bytes]) -> None:
        self.bodies[item[0]] = item[1]

    async def load(self, checkpoint_id: str) -> bytes:
        return self.bodies[checkpoint_id]

    async def latest(self, _: object) -> bytes:
        return self.bodies[next(reversed(self.bodies))]


async def _open_raw_dict() -> Store:
    raw = _RawDict()

    async def latest_id() -> str | None:
        return next(reversed(raw.bodies), None)

    async def cleanup() -> None:
        raw.bodies.clear()

    def loaded_id(body: bytes) -> str:
        return str(_CODEC.decode_checkpoint(body, checkpoint_id="raw").checkpoint_id)

    return Store(raw.save, raw.load, raw.latest, latest_id, loaded_id, cleanup)


SQLITE_PRAGMAS = ("journal_mode", "synchronous", "busy_timeout")
"""Connection settings the raw floor copies from our SQLite storage, so both pay the same commits."""


_SQLITE_SETTINGS: dict[str, str] = {}


async def sqlite_settings() -> dict[str, str]:
    """The pragmas our SQLite storage's connection runs with, read once from a scratch store."""
    if not _SQLITE_SETTINGS:
        _SQLITE_SETTINGS.update(await _read_sqlite_settings())
    return dict(_SQLITE_SETTINGS)


async def _read_sqlite_settings() -> dict[str, str]:
    from storages import SQLiteCheckpointStorage

    directory = _temp_dir("sqlite-probe")
    try:
        async with SQLiteCheckpointStorage(directory / "probe.db") as storage:
            connection = (
                storage.backend.connection
            )  # the settings are per connection: read them where they live
            assert connection is not None
            return {name: await _pragma(connection, name) for name in SQLITE_PRAGMAS}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _pragma(connection: Any, name: str) -> str:
    rows = await connection.execute_fetchall(f"PRAGMA {name}")
    return str(next(iter(rows))[0])


class _RawSQLite:
    """One aiosqlite connection, one autocommit statement per operation: the aiosqlite floor."""

    def __init__(self, connection: Any) -> None:
        self.db = connection

    async def save(self, item: tuple[str, bytes]) -> None:
        await self.db.execute("INSERT INTO checkpoints (id, body) VALUES (?, ?)", item)

    async def load(self, checkpoint_id: str) -> bytes:
        rows = await self.db.execute_fetchall("SELECT body FROM checkpoints WHERE id = ?", (checkpoint_id,))
        return bytes(next(iter(rows))[0])

    async def latest(self, _: object) -> bytes:
        rows = await self.db.execute_fetchall("SELECT body FROM checkpoints ORDER BY rowid DESC LIMIT 1")
        return bytes(next(iter(rows))[0])


async def _open_raw_sqlite() -> Store:
    import aiosqlite

    directory = _temp_dir("raw-sqlite")
    connection = await aiosqlite.connect(directory / "raw.db", isolation_level=None)
    wanted = await sqlite_settings()
    for name, value in wanted.items():
        await connection.execute(f"PRAGMA {name} = {value}")
    applied = {name: await _pragma(connection, name) for name in SQLITE_PRAGMAS}
    if applied != wanted:
        raise AssertionError(f"raw SQLite floor runs with {applied}, our storage with {wanted}")
    await connection.execute("CREATE TABLE checkpoints (id TEXT PRIMARY KEY, body BLOB NOT NULL)")
    raw = _RawSQLite(connection)

    async def latest_id() -> str | None:
        rows = list(
            await connection.execute_fetchall("SELECT id FROM checkpoints ORDER BY rowid DESC LIMIT 1")
        )
        return str(rows[0][0]) if rows else None

    async def cleanup() -> None:
        await connection.close()
        shutil.rmtree(directory, ignore_errors=True)

    def loaded_id(body: bytes) -> str:
        return str(_CODEC.decode_checkpoint(body, checkpoint_id="raw").checkpoint_id)

    return Store(raw.save, raw.load, raw.latest, latest_id, loaded_id, cleanup)


# ---------------------------------------------------------------- the line-up


def sqlite_unavailable_reason() -> str | None:
    """Why our SQLite storage cannot be benchmarked, or None if it can."""
    if importlib.util.find_spec("aiosqlite") is None:
        return "aiosqlite is not installed"
    try:
        from storages import SQLiteCheckpointStorage  # noqa: F401
    except Exception as exc:
        return f"storages.sqlite does not import: {exc}"
    return None


@functools.cache
def _maf_maker() -> Callable[[int, str], Any]:
    from agent_framework import WorkflowCheckpoint as MafWorkflowCheckpoint

    return _checkpoint_maker(MafWorkflowCheckpoint)


def _maf_item(index: int, series: str) -> Any:
    return _maf_maker()(index, series)


def subjects(*, include_sqlite: bool) -> list[Subject]:
    """Every subject, grouped by family with the raw floor first."""
    line_up = [
        Subject("raw-dict", "raw dict (floor)", "memory", "raw", _open_raw_dict, _raw_item),
        Subject(
            "ours-memory", "ours InMemoryCheckpointStorage", "memory", "ours", _open_ours_memory, _OURS_MAKER
        ),
        Subject("maf-memory", "MAF InMemoryCheckpointStorage", "memory", "maf", _open_maf_memory, _maf_item),
    ]
    if include_sqlite:
        line_up += [
            Subject("raw-sqlite", "raw aiosqlite (floor)", "durable", "raw", _open_raw_sqlite, _raw_item),
            Subject(
                "ours-sqlite",
                "ours SQLiteCheckpointStorage",
                "durable",
                "ours",
                _open_ours_sqlite,
                _OURS_MAKER,
            ),
        ]
    line_up.append(
        Subject("maf-file", "MAF FileCheckpointStorage", "durable", "maf", _open_maf_file, _maf_item)
    )
    return line_up
