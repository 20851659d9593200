"""SQLite storage: one file, shared safely by handles, tasks and processes (needs ``aiosqlite``).

How it stays correct with several writers on one file:

* WAL journal mode, so readers never block the writer and the writer never blocks readers.
* Every write is one ``BEGIN IMMEDIATE`` transaction: it takes the write lock before reading
  anything, so a transaction never has to upgrade a read lock (which fails at once, whatever the
  busy timeout). Waiting for the lock is bounded by ``busy_timeout_ms``.
* Each workflow's next sequence number lives in ``workflows.next_sequence`` and is taken inside
  that transaction, so sequences follow commit order across processes and never go back, even
  after the newest checkpoint is deleted. "Latest" is one indexed query on the highest sequence.

Each handle owns one aiosqlite connection and so one thread. Close handles with ``aclose()`` or
``async with``: that checkpoints the WAL and ends the thread at a point the program chooses. A
handle never closed still lets the process exit: its thread is a daemon (aiosqlite's is not, and
would keep the interpreter alive forever), and when the handle is garbage-collected, or at
interpreter exit, its connection is closed on that thread without touching any event loop (the
loop that opened it is usually closed by then). A handle works from successive event loops
(several ``asyncio.run()`` calls). Operations on one handle run one at a time; use more handles
for more parallelism.

Nested records are rows of the same table with ``container_id`` (the checkpoint whose body refers
to them) and ``root_id`` (the top-level checkpoint they were saved with); a save inserts the whole
family in its one transaction, and a delete removes every row whose root is the deleted id.
Listing and latest read top-level rows only, through indexes that lead with ``nested``.

The ancestry walk is one recursive CTE over the ``checkpoint_id`` primary key. It uses ``UNION``
(not ``UNION ALL``) on (id, previous id) rows, so a cycle produces a repeated row that SQLite
drops and the recursion ends by itself; ``LIMIT`` caps it at ``max_depth`` rows. The same
statement returns the bodies of the walked rows and their nested rows, and whether a missing
previous id is a tombstone: one round trip whatever the depth.

The schema is versioned: ``schema_version`` holds the number of :data:`MIGRATIONS` applied, and
opening a file applies the missing ones in one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import threading
import weakref
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite
import aiosqlite.core
from typing_extensions import Self

from .base import BaseCheckpointStorage, CheckpointRecord, FenceCheck, IndexEntry, StoredBody, WalkRecords
from .codec import CheckpointCodec, TypeRef
from .contract import Capability, CheckpointID, CheckpointInfo
from .errors import (
    CheckpointConflictError,
    NestedCheckpointDeletionError,
    StorageClosedError,
    StorageConfigurationError,
    StorageUnavailableError,
)
from .integrity import IntegrityKeyInput

DEFAULT_BUSY_TIMEOUT_MS = 5000
"""How long a write waits for another connection's write lock before giving up."""

URL_PREFIX = "sqlite://"
URL_OPTIONS: tuple[str, ...] = ("busy_timeout_ms",)
"""Query options ``sqlite://`` takes besides the common ones (see ``storages.urls``)."""

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: per-workflow sequence counters and the checkpoints they order.
    (
        """
        CREATE TABLE workflows (
            name TEXT PRIMARY KEY NOT NULL,
            next_sequence INTEGER NOT NULL
        )
        """,
        """
        CREATE TABLE checkpoints (
            checkpoint_id TEXT PRIMARY KEY NOT NULL,
            workflow_name TEXT NOT NULL,
            sequence INTEGER NOT NULL,
            previous_checkpoint_id TEXT,
            graph_signature_hash TEXT NOT NULL,
            digest TEXT NOT NULL,
            body BLOB NOT NULL
        )
        """,
        "CREATE UNIQUE INDEX checkpoints_by_sequence ON checkpoints (workflow_name, sequence)",
        """
        CREATE INDEX checkpoints_by_signature
            ON checkpoints (workflow_name, graph_signature_hash, sequence)
        """,
    ),
    # 2: nested records, tombstones of pruned records, top-level-only indexes.
    (
        "ALTER TABLE checkpoints ADD COLUMN nested INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE checkpoints ADD COLUMN container_id TEXT",
        "ALTER TABLE checkpoints ADD COLUMN root_id TEXT",
        "ALTER TABLE checkpoints ADD COLUMN position INTEGER NOT NULL DEFAULT 0",
        "DROP INDEX checkpoints_by_signature",
        "CREATE INDEX checkpoints_top_by_sequence ON checkpoints (workflow_name, nested, sequence)",
        """
        CREATE INDEX checkpoints_top_by_signature
            ON checkpoints (workflow_name, nested, graph_signature_hash, sequence)
        """,
        "CREATE INDEX checkpoints_by_container ON checkpoints (container_id, position)",
        "CREATE INDEX checkpoints_by_root ON checkpoints (root_id)",
        """
        CREATE TABLE tombstones (
            checkpoint_id TEXT PRIMARY KEY NOT NULL,
            workflow_name TEXT NOT NULL
        )
        """,
        "CREATE INDEX tombstones_by_workflow ON tombstones (workflow_name)",
    ),
)
"""Schema migrations, applied in order; step ``n`` (1-based) brings the file to version ``n``.
Append new steps, never edit old ones: files in the field are at every earlier version."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes and reads."""

_SCHEMA_TABLES = ("workflows", "checkpoints", "checkpoints_by_sequence", "checkpoints_by_signature")

_CREATE_SCHEMA_VERSION = """
    CREATE TABLE IF NOT EXISTS schema_version (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        version INTEGER NOT NULL
    )
"""
_SELECT_SCHEMA_VERSION = """
    SELECT
        EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'),
        (SELECT group_concat(name) FROM sqlite_master WHERE name IN (?, ?, ?, ?))
"""
_RECORD_SCHEMA_VERSION = """
    INSERT INTO schema_version (singleton, version) VALUES (1, ?)
    ON CONFLICT (singleton) DO UPDATE SET version = excluded.version
"""

# One query tells an insert whether the id exists and, if not, which sequence it gets.
_SELECT_DIGEST_AND_NEXT_SEQUENCE = """
    SELECT
        (SELECT digest FROM checkpoints WHERE checkpoint_id = ?),
        (SELECT next_sequence FROM workflows WHERE name = ?)
"""
# A fenced insert also reads the workflow's latest top-level id, in the same transaction.
_SELECT_DIGEST_NEXT_SEQUENCE_AND_LATEST = """
    SELECT
        (SELECT digest FROM checkpoints WHERE checkpoint_id = ?),
        (SELECT next_sequence FROM workflows WHERE name = ?),
        (SELECT checkpoint_id FROM checkpoints WHERE workflow_name = ? AND nested = 0
            ORDER BY sequence DESC LIMIT 1)
"""
_SELECT_NEXT_SEQUENCE = "SELECT next_sequence FROM workflows WHERE name = ?"
_INSERT_CHECKPOINT = """
    INSERT INTO checkpoints (
        checkpoint_id, workflow_name, sequence, previous_checkpoint_id, graph_signature_hash, digest, body,
        nested, container_id, root_id, position
    ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_ADVANCE_SEQUENCE = """
    INSERT INTO workflows (name, next_sequence) VALUES (?, ?)
    ON CONFLICT (name) DO UPDATE SET next_sequence = excluded.next_sequence
"""
# Reads select the body with the index entry it is checked against (_stored() reads the row).
_SELECT_BODY = "SELECT body FROM checkpoints WHERE checkpoint_id = ?"
_SELECT_RECORD = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash
    FROM checkpoints WHERE checkpoint_id = ?
"""
SELECT_LATEST = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash FROM checkpoints
    WHERE workflow_name = ? AND nested = 0
    ORDER BY sequence DESC LIMIT 1
"""
SELECT_LATEST_WITH_SIGNATURE = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash FROM checkpoints
    WHERE workflow_name = ? AND nested = 0 AND graph_signature_hash = ?
    ORDER BY sequence DESC LIMIT 1
"""
_SELECT_BODIES = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash
    FROM checkpoints WHERE workflow_name = ? AND nested = 0 ORDER BY sequence
"""
_SELECT_BODIES_WITH_SIGNATURE = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash FROM checkpoints
    WHERE workflow_name = ? AND nested = 0 AND graph_signature_hash = ?
    ORDER BY sequence
"""
_SELECT_ALL_BODIES = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash
    FROM checkpoints WHERE workflow_name = ? ORDER BY sequence
"""
_SELECT_ALL_BODIES_WITH_SIGNATURE = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash FROM checkpoints
    WHERE workflow_name = ? AND graph_signature_hash = ?
    ORDER BY sequence
"""
_SELECT_IDS = "SELECT checkpoint_id FROM checkpoints WHERE workflow_name = ? AND nested = 0 ORDER BY sequence"
_SELECT_IDS_WITH_SIGNATURE = """
    SELECT checkpoint_id FROM checkpoints
    WHERE workflow_name = ? AND nested = 0 AND graph_signature_hash = ?
    ORDER BY sequence
"""
_SELECT_ALL_IDS = "SELECT checkpoint_id FROM checkpoints WHERE workflow_name = ? ORDER BY sequence"
_SELECT_ALL_IDS_WITH_SIGNATURE = """
    SELECT checkpoint_id FROM checkpoints
    WHERE workflow_name = ? AND graph_signature_hash = ?
    ORDER BY sequence
"""
_SELECT_CONTAINER = "SELECT container_id FROM checkpoints WHERE checkpoint_id = ?"
# The workflow row is kept: its counter must outlive its checkpoints.
_DELETE_FAMILY = "DELETE FROM checkpoints WHERE checkpoint_id = ? OR root_id = ?"
_UPDATE_BODY = "UPDATE checkpoints SET body = ?, digest = ? WHERE checkpoint_id = ?"
_SELECT_WORKFLOW_NAMES = "SELECT DISTINCT workflow_name FROM checkpoints WHERE nested = 0"
# Nested rows of the given containers, at any depth: everything saved with the same root.
_SELECT_NESTED_BODIES = """
    SELECT nested.checkpoint_id, nested.body
    FROM checkpoints AS container
    JOIN checkpoints AS nested ON nested.root_id = coalesce(container.root_id, container.checkpoint_id)
    WHERE container.checkpoint_id IN (SELECT value FROM json_each(?))
"""
_SELECT_CHILDREN = """
    SELECT
        EXISTS (SELECT 1 FROM checkpoints WHERE checkpoint_id = :id),
        (SELECT json_group_array(checkpoint_id) FROM (
            SELECT checkpoint_id FROM checkpoints WHERE container_id = :id ORDER BY position
        ))
"""
# UNION drops a repeated (id, previous) row, which ends the recursion on a cycle.
_WALK = """
    WITH RECURSIVE walk (checkpoint_id, previous_checkpoint_id) AS (
        SELECT checkpoint_id, previous_checkpoint_id FROM checkpoints WHERE checkpoint_id = :start
        UNION
        SELECT c.checkpoint_id, c.previous_checkpoint_id
        FROM walk JOIN checkpoints AS c ON c.checkpoint_id = walk.previous_checkpoint_id
        LIMIT :max_depth
    )
"""
# Both walks are constant SQL: the CTE is shared text, not input.
WALK_IDS = (
    _WALK  # noqa: S608
    + """
    SELECT walk.checkpoint_id, walk.previous_checkpoint_id,
        EXISTS (SELECT 1 FROM tombstones WHERE checkpoint_id = walk.previous_checkpoint_id)
    FROM walk
"""
)
WALK_WITH_BODIES = (
    _WALK  # noqa: S608
    + """
    SELECT walk.checkpoint_id, walk.previous_checkpoint_id,
        EXISTS (SELECT 1 FROM tombstones WHERE checkpoint_id = walk.previous_checkpoint_id), c.body, 1
    FROM walk JOIN checkpoints AS c ON c.checkpoint_id = walk.checkpoint_id
    UNION ALL
    SELECT nested.checkpoint_id, NULL, 0, nested.body, 0
    FROM walk
    JOIN checkpoints AS c ON c.checkpoint_id = walk.checkpoint_id
    JOIN checkpoints AS nested ON nested.root_id = coalesce(c.root_id, c.checkpoint_id)
"""
)
_SELECT_PRUNED = """
    SELECT checkpoint_id FROM checkpoints
    WHERE workflow_name = ? AND nested = 0
    ORDER BY sequence DESC LIMIT -1 OFFSET ?
"""
_TOMBSTONE_FAMILY = """
    INSERT OR IGNORE INTO tombstones (checkpoint_id, workflow_name)
    SELECT checkpoint_id, ? FROM checkpoints WHERE checkpoint_id = ? OR root_id = ?
"""
_SELECT_TOP_IDS = "SELECT checkpoint_id FROM checkpoints WHERE workflow_name = ? AND nested = 0"
_DELETE_TOMBSTONES = "DELETE FROM tombstones WHERE workflow_name = ?"
_SELECT_ALL_INFO = """
    SELECT checkpoint_id, workflow_name, previous_checkpoint_id, graph_signature_hash, container_id,
        sequence, length(body)
    FROM checkpoints
"""
_SELECT_INFO = _SELECT_ALL_INFO + " WHERE checkpoint_id = ?"
_SELECT_WORKFLOW_INFO = _SELECT_ALL_INFO + " WHERE workflow_name = ?"
_SELECT_TOMBSTONES = "SELECT checkpoint_id FROM tombstones"
_SELECT_WORKFLOW_TOMBSTONES = "SELECT checkpoint_id FROM tombstones WHERE workflow_name = ?"


class SQLiteCheckpointStorage(BaseCheckpointStorage):
    """Checkpoints in a SQLite file. Handles on one file, in any process, share one store."""

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,
            Capability.ANCESTRY,
            Capability.NESTED,
            Capability.PRUNE,
            Capability.LIST_WORKFLOWS,
            Capability.RAW_ACCESS,
            Capability.INSPECT,
            Capability.PENDING_WRITES,
            Capability.SHARED,
            Capability.DURABLE,
            Capability.FENCING,
        }
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        codec: CheckpointCodec | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
    ) -> None:
        super().__init__(
            codec=codec,
            allowed_checkpoint_types=allowed_checkpoint_types,
            allowed_modules=allowed_modules,
            integrity_key=integrity_key,
        )
        # Resolved now, so a later chdir changes neither this handle nor its new_handle()s.
        self._path = _checked_path(path)
        if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, int) or busy_timeout_ms < 0:
            raise StorageConfigurationError(f"busy_timeout_ms must be an int >= 0, got {busy_timeout_ms!r}")
        self._busy_timeout_ms = busy_timeout_ms
        self._connection: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._release_at_exit: weakref.finalize[Any, Any] | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        codec: CheckpointCodec | None = None,
        busy_timeout_ms: int | None = None,
    ) -> Self:
        """``sqlite:///relative/to/cwd.db`` or ``sqlite:////absolute/path.db``, optionally with
        ``?busy_timeout_ms=...``; a keyword wins over the URL."""
        options = url_options(url)
        if busy_timeout_ms is None:
            text = options.get("busy_timeout_ms", "")
            try:
                busy_timeout_ms = int(text) if text else DEFAULT_BUSY_TIMEOUT_MS
            except ValueError:
                raise StorageConfigurationError(
                    f"SQLite URL {url!r}: busy_timeout_ms must be an int >= 0, got {text!r}"
                ) from None
        from .urls import allowance_options

        return cls(
            path_from_url(url),
            codec=codec,
            busy_timeout_ms=busy_timeout_ms,
            **allowance_options(options),
        )

    @property
    def path(self) -> Path:
        return self._path

    @property
    def busy_timeout_ms(self) -> int:
        return self._busy_timeout_ms

    def describe(self) -> str:
        return URL_PREFIX + "/" + self._path.as_posix()

    def new_handle(self) -> Self:
        return type(self)(self._path, codec=self._codec, busy_timeout_ms=self._busy_timeout_ms)

    # ------------------------------------------------------------------ lifecycle

    async def _open(self) -> None:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageUnavailableError(
                "open", f"cannot create the directory of {self._path}: {exc}"
            ) from exc
        pending = aiosqlite.connect(self._path, timeout=self._busy_timeout_ms / 1000, isolation_level=None)
        _run_as_daemon(pending)  # before awaiting it: awaiting starts the thread
        try:
            connection = await pending
        except sqlite3.Error as exc:
            raise self._translate("open", exc) from exc
        try:
            await self._prepare(connection)
        except BaseException:
            # A failed open must not leave the connection's thread behind.
            with contextlib.suppress(Exception):
                await connection.close()
            raise
        self._connection = connection
        self._release_at_exit = weakref.finalize(self, _release_abandoned, connection)

    async def _follow_loop(self) -> None:
        # The connection's thread answers each call on the loop that made it; only the lock is
        # bound to the old loop.
        self._lock = asyncio.Lock()

    async def _close(self) -> None:
        async with self._lock:
            connection, self._connection = self._connection, None
            if self._release_at_exit is not None:
                self._release_at_exit.detach()
                self._release_at_exit = None
            if connection is not None:
                try:
                    await connection.close()
                except sqlite3.Error as exc:
                    raise self._translate("aclose", exc) from exc

    async def _prepare(self, connection: aiosqlite.Connection) -> None:
        try:
            # Reading the version first refuses foreign and newer files before anything changes them.
            version = await self._schema_version(connection)
            rows = list(await connection.execute_fetchall("PRAGMA journal_mode = WAL"))
            mode = str(rows[0][0]).lower() if rows else "unknown"
            if mode != "wal":
                raise StorageConfigurationError(
                    f"{self.describe()}: could not switch to WAL journal mode (it is {mode!r}); "
                    "is the file on a file system without shared memory support?"
                )
            if version < SCHEMA_VERSION:
                await self._migrate(connection)
        except sqlite3.Error as exc:
            raise self._translate("open", exc) from exc

    async def _migrate(self, connection: aiosqlite.Connection) -> None:
        async with _immediate_transaction(connection):
            await connection.execute(_CREATE_SCHEMA_VERSION)
            # Another connection may have migrated since the version was read outside the lock.
            version = await self._schema_version(connection)
            for step in MIGRATIONS[version:]:
                for statement in step:
                    await connection.execute(statement)
            await connection.execute(_RECORD_SCHEMA_VERSION, (SCHEMA_VERSION,))

    async def _schema_version(self, connection: aiosqlite.Connection) -> int:
        """The file's schema version (0 if new); refuses files this code cannot read."""
        rows = list(await connection.execute_fetchall(_SELECT_SCHEMA_VERSION, _SCHEMA_TABLES))
        has_version_table, existing_tables = bool(rows[0][0]), rows[0][1]
        if not has_version_table:
            if existing_tables:
                raise StorageConfigurationError(
                    f"{self.describe()} has tables ({existing_tables}) but no schema_version table; "
                    "it was not created by this storage, use another file"
                )
            return 0
        version_rows = list(await connection.execute_fetchall("SELECT version FROM schema_version"))
        version = int(version_rows[0][0]) if version_rows else 0
        if version > SCHEMA_VERSION:
            raise StorageConfigurationError(
                f"{self.describe()} has schema version {version}, newer than version {SCHEMA_VERSION} "
                "known to this code; upgrade checkpoint-storages to open it"
            )
        return version

    # ------------------------------------------------------------------ primitives

    async def _insert(self, record: CheckpointRecord) -> str | None:
        return await self._insert_family((record,))

    async def _insert_family(self, records: Sequence[CheckpointRecord]) -> str | None:
        top = records[0]
        async with self._write("save") as connection:
            rows = list(
                await connection.execute_fetchall(
                    _SELECT_DIGEST_AND_NEXT_SEQUENCE, (top.checkpoint_id, top.workflow_name)
                )
            )
            existing_digest, next_sequence = rows[0]
            if existing_digest is not None:
                return str(existing_digest)
            await self._write_family(connection, records, next_sequence)
        return None

    async def _insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        top = records[0]
        # The check and the write share one BEGIN IMMEDIATE transaction: no other writer, in this
        # process or another, can commit between them.
        async with self._write("save") as connection:
            rows = list(
                await connection.execute_fetchall(
                    _SELECT_DIGEST_NEXT_SEQUENCE_AND_LATEST,
                    (top.checkpoint_id, top.workflow_name, top.workflow_name),
                )
            )
            existing_digest, next_sequence, latest = rows[0]
            latest_id = None if latest is None else str(latest)
            if existing_digest is not None:
                return FenceCheck(latest_id, str(existing_digest))
            if latest_id != expected_latest_id:
                return FenceCheck(latest_id, None)
            await self._write_family(connection, records, next_sequence)
        return None

    async def _write_family(
        self, connection: aiosqlite.Connection, records: Sequence[CheckpointRecord], next_sequence: object
    ) -> None:
        """Insert a family whose top id is absent, inside the caller's write transaction."""
        top = records[0]
        sequences: dict[str, int] = {
            top.workflow_name: 1 if next_sequence is None else int(str(next_sequence))
        }
        for record in records:
            if record.workflow_name not in sequences:
                found = list(
                    await connection.execute_fetchall(_SELECT_NEXT_SEQUENCE, (record.workflow_name,))
                )
                sequences[record.workflow_name] = int(found[0][0]) if found else 1
            sequence = sequences[record.workflow_name]
            sequences[record.workflow_name] = sequence + 1
            try:
                await connection.execute(_INSERT_CHECKPOINT, _row(record, sequence))
            except sqlite3.IntegrityError as exc:
                # The transaction rolls back: none of the family is written.
                raise CheckpointConflictError(
                    record.checkpoint_id,
                    f"embedded in checkpoint {record.container_id!r}, but a record with this id "
                    "is already stored; an embedded checkpoint needs an id of its own",
                ) from exc
        await connection.executemany(_ADVANCE_SEQUENCE, list(sequences.items()))

    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        async with self._connected("load") as connection:
            rows = list(await connection.execute_fetchall(_SELECT_BODY, (checkpoint_id,)))
        return bytes(rows[0][0]) if rows else None

    async def _load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        async with self._connected("load") as connection:
            rows = list(await connection.execute_fetchall(_SELECT_RECORD, (checkpoint_id,)))
        return _stored(rows[0]) if rows else None

    async def _nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        ids = json.dumps(list(dict.fromkeys(checkpoint_ids)))
        async with self._connected("load") as connection:
            rows = await connection.execute_fetchall(_SELECT_NESTED_BODIES, (ids,))
        return {str(row[0]): bytes(row[1]) for row in rows}

    async def _latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        query, parameters = _query_for(
            SELECT_LATEST, SELECT_LATEST_WITH_SIGNATURE, workflow_name, graph_signature_hash
        )
        async with self._connected("get_latest") as connection:
            rows = list(await connection.execute_fetchall(query, parameters))
        return _stored(rows[0]) if rows else None

    async def _list(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        query, parameters = (
            _query_for(
                _SELECT_ALL_BODIES, _SELECT_ALL_BODIES_WITH_SIGNATURE, workflow_name, graph_signature_hash
            )
            if include_nested
            else _query_for(
                _SELECT_BODIES, _SELECT_BODIES_WITH_SIGNATURE, workflow_name, graph_signature_hash
            )
        )
        async with self._connected("list_checkpoints") as connection:
            rows = await connection.execute_fetchall(query, parameters)
        return [_stored(row) for row in rows]

    async def _list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        query, parameters = (
            _query_for(_SELECT_ALL_IDS, _SELECT_ALL_IDS_WITH_SIGNATURE, workflow_name, graph_signature_hash)
            if include_nested
            else _query_for(_SELECT_IDS, _SELECT_IDS_WITH_SIGNATURE, workflow_name, graph_signature_hash)
        )
        async with self._connected("list_checkpoint_ids") as connection:
            rows = await connection.execute_fetchall(query, parameters)
        return [str(row[0]) for row in rows]

    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
        async with self._write("delete") as connection:
            rows = list(await connection.execute_fetchall(_SELECT_CONTAINER, (checkpoint_id,)))
            if not rows:
                return False
            container_id = rows[0][0]
            if container_id is not None:
                raise NestedCheckpointDeletionError(checkpoint_id, str(container_id))
            await connection.execute(_DELETE_FAMILY, (checkpoint_id, checkpoint_id))
        return True

    async def _overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        async with self._write("write_raw_body") as connection:
            cursor = await connection.execute(_UPDATE_BODY, (body, digest, checkpoint_id))
            return cursor.rowcount > 0

    async def _walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        parameters = {"start": checkpoint_id, "max_depth": max_depth}
        async with self._connected("walk_ancestry") as connection:
            rows = await connection.execute_fetchall(
                WALK_WITH_BODIES if with_bodies else WALK_IDS, parameters
            )
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        for row in rows:
            row_id = str(row[0])
            if with_bodies:
                bodies[row_id] = bytes(row[3])
                if not row[4]:
                    continue  # a row nested in a walked one: its body only
            previous = None if row[1] is None else str(row[1])
            links[row_id] = previous
            if row[2] and previous is not None:
                tombstones.add(previous)
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def _nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        async with self._connected("list_nested") as connection:
            rows = list(await connection.execute_fetchall(_SELECT_CHILDREN, {"id": checkpoint_id}))
        exists, children = rows[0]
        if not exists:
            return None
        return [str(child) for child in json.loads(children)]

    async def _prune(self, workflow_name: str, keep_last: int) -> int:
        async with self._write("prune") as connection:
            doomed = [
                str(row[0])
                for row in await connection.execute_fetchall(_SELECT_PRUNED, (workflow_name, keep_last))
            ]
            await connection.executemany(
                _TOMBSTONE_FAMILY, [(workflow_name, doomed_id, doomed_id) for doomed_id in doomed]
            )
            await connection.executemany(_DELETE_FAMILY, [(doomed_id, doomed_id) for doomed_id in doomed])
        return len(doomed)

    async def _delete_workflow(self, workflow_name: str) -> int:
        async with self._write("delete_workflow") as connection:
            doomed = [
                str(row[0]) for row in await connection.execute_fetchall(_SELECT_TOP_IDS, (workflow_name,))
            ]
            await connection.executemany(_DELETE_FAMILY, [(doomed_id, doomed_id) for doomed_id in doomed])
            await connection.execute(_DELETE_TOMBSTONES, (workflow_name,))
        return len(doomed)

    async def _workflow_names(self) -> list[str]:
        async with self._connected("list_workflows") as connection:
            rows = await connection.execute_fetchall(_SELECT_WORKFLOW_NAMES)
        return [str(row[0]) for row in rows]

    async def _info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        async with self._connected("checkpoint_info") as connection:
            rows = list(await connection.execute_fetchall(_SELECT_INFO, (checkpoint_id,)))
        return _info(rows[0]) if rows else None

    async def _records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        async with self._connected("list_records") as connection:
            if workflow_name is None:
                rows = await connection.execute_fetchall(_SELECT_ALL_INFO)
            else:
                rows = await connection.execute_fetchall(_SELECT_WORKFLOW_INFO, (workflow_name,))
        return [_info(row) for row in rows]

    async def _tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        async with self._connected("list_tombstones") as connection:
            if workflow_name is None:
                rows = await connection.execute_fetchall(_SELECT_TOMBSTONES)
            else:
                rows = await connection.execute_fetchall(_SELECT_WORKFLOW_TOMBSTONES, (workflow_name,))
        return [str(row[0]) for row in rows]

    # ------------------------------------------------------------------ machinery

    @contextlib.asynccontextmanager
    async def _connected(self, operation: str) -> AsyncIterator[aiosqlite.Connection]:
        """The connection, for one operation at a time; sqlite errors become typed errors."""
        async with self._lock:
            connection = self._connection
            if connection is None:
                # aclose() ran while this operation waited for the lock.
                raise StorageClosedError(self.describe(), operation)
            try:
                yield connection
            except sqlite3.Error as exc:
                raise self._translate(operation, exc) from exc

    @contextlib.asynccontextmanager
    async def _write(self, operation: str) -> AsyncIterator[aiosqlite.Connection]:
        """The connection inside a BEGIN IMMEDIATE transaction, committed when the block ends."""
        async with self._connected(operation) as connection, _immediate_transaction(connection):
            yield connection

    def _translate(self, operation: str, exc: sqlite3.Error) -> Exception:
        if _error_name(exc) == "SQLITE_NOTADB" or "file is not a database" in str(exc):
            return StorageConfigurationError(f"{self.describe()} is not a SQLite database file: {exc}")
        return StorageUnavailableError(operation, f"{self.describe()}: {type(exc).__name__}: {exc}")


def _run_as_daemon(connection: aiosqlite.Connection) -> None:
    """Make a not yet started connection's thread a daemon, so it cannot keep the process alive."""
    # aiosqlite >= 0.22 keeps its worker in ``_thread``; tests/test_sqlite_lifecycle.py fails if
    # a release moves it.
    thread = connection._thread
    if not isinstance(thread, threading.Thread):  # pragma: no cover - an aiosqlite we do not know
        raise TypeError(f"aiosqlite {aiosqlite.__version__}: no worker thread where expected")
    thread.daemon = True


def _release_abandoned(connection: aiosqlite.Connection) -> None:
    """Close a connection its handle never closed, when the handle is collected or the interpreter
    exits. aiosqlite's own cleanup (``stop()``) answers on whatever loop is current, which may
    be closed, and its thread then dies with a traceback; this answers on no loop at all."""
    sqlite_connection = connection._connection
    if sqlite_connection is None:
        return
    connection._connection = None  # aiosqlite's __del__ then has nothing left to do
    connection._running = False

    def close_and_stop() -> object:
        sqlite_connection.close()
        return aiosqlite.core._STOP_RUNNING_SENTINEL  # ends the worker's loop

    connection._tx.put_nowait((None, close_and_stop))
    thread = connection._thread
    if threading.current_thread() is threading.main_thread() and not _loop_running():
        # At exit (or collected outside any loop): let the close finish, checkpointing the WAL,
        # rather than end the process under it; a few milliseconds unless the disk is stuck.
        thread.join(timeout=2.0)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextlib.asynccontextmanager
async def _immediate_transaction(connection: aiosqlite.Connection) -> AsyncIterator[None]:
    # BEGIN sits inside the try: if the caller is cancelled while BEGIN waits for the lock, the
    # connection's thread still finishes it, and the rollback queued behind it ends the transaction.
    try:
        await connection.execute("BEGIN IMMEDIATE")
        yield
        await connection.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # fails only when no transaction is open
            await connection.execute("ROLLBACK")
        raise


def _row(record: CheckpointRecord, sequence: int) -> tuple[object, ...]:
    return (
        record.checkpoint_id,
        record.workflow_name,
        sequence,
        record.previous_checkpoint_id,
        record.graph_signature_hash,
        record.digest,
        record.body,
        1 if record.nested else 0,
        record.container_id,
        record.root_id,
        record.position,
    )


def _info(row: Iterable[object]) -> CheckpointInfo:
    checkpoint_id, workflow_name, previous_id, signature, container_id, sequence, size = row
    return CheckpointInfo(
        checkpoint_id=str(checkpoint_id),
        workflow_name=str(workflow_name),
        previous_checkpoint_id=None if previous_id is None else str(previous_id),
        graph_signature_hash=str(signature),
        container_id=None if container_id is None else str(container_id),
        sequence=int(str(sequence)),
        size=int(str(size)),
    )


def _query_for(
    unfiltered: str, by_signature: str, workflow_name: str, graph_signature_hash: str | None
) -> tuple[str, tuple[str, ...]]:
    if graph_signature_hash is None:
        return unfiltered, (workflow_name,)
    return by_signature, (workflow_name, graph_signature_hash)


def _error_name(exc: sqlite3.Error) -> str | None:
    # sqlite_errorname exists from Python 3.11; older versions fall back to the message.
    name = getattr(exc, "sqlite_errorname", None)
    return name if isinstance(name, str) else None


def _checked_path(path: str | os.PathLike[str]) -> Path:
    if isinstance(path, (str, os.PathLike)):
        text = os.fspath(path)
        if isinstance(text, str) and text.strip():
            if text == ":memory:":
                raise StorageConfigurationError(
                    "SQLite ':memory:' databases are private to one connection, so handles could not "
                    "share them; use a file path, or memory:// for an in-memory store"
                )
            return Path(os.path.abspath(text))
    raise StorageConfigurationError(f"SQLite path must be a non-empty str or path, got {path!r}")


def path_from_url(url: str) -> Path:
    """The file path in a ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL."""
    if not isinstance(url, str) or url[: len(URL_PREFIX)].lower() != URL_PREFIX:
        raise StorageConfigurationError(f"Not a SQLite URL: {url!r}; expected sqlite:///path.db")
    rest = url[len(URL_PREFIX) :]
    if rest in ("", "/"):
        raise StorageConfigurationError(f"SQLite URL {url!r} has no file path; expected sqlite:///path.db")
    if not rest.startswith("/"):
        raise StorageConfigurationError(
            f"SQLite URL {url!r} names a host; SQLite files are local: use sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    path, _, _ = rest[1:].partition("?")  # the query holds options, see url_options()
    return _checked_path(path)


def _stored(row: Sequence[object]) -> StoredBody:
    """A row of checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash."""
    checkpoint_id, body, workflow_name, previous_id, signature = row
    entry = IndexEntry(str(workflow_name), None if previous_id is None else str(previous_id), str(signature))
    assert isinstance(body, bytes)
    return StoredBody(str(checkpoint_id), body, entry=entry)


def url_options(url: str) -> dict[str, str]:
    """The options in a SQLite URL's query string; an option not in :data:`URL_OPTIONS` (or the
    common ones) raises StorageConfigurationError listing the valid ones."""
    from .urls import parse_url_options

    path_from_url(url)  # a malformed URL is reported as such first
    _, _, query = url[len(URL_PREFIX) :].partition("?")
    return parse_url_options(url, query, URL_OPTIONS, what="SQLite")


__all__ = [
    "DEFAULT_BUSY_TIMEOUT_MS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SQLiteCheckpointStorage",
    "path_from_url",
    "url_options",
]
