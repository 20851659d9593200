"""The connection: one sqlite3 connection on a thread of its own per handle, opened, prepared
and closed (storages/sqlite/thread.py says why the thread is ours and not aiosqlite's).

WAL journal mode, so readers never block the writer and the writer never blocks readers; the
busy timeout bounds how long a write waits for another connection's lock; ``PRAGMA synchronous``
is FULL unless the handle asked for NORMAL (see ``config.SYNCHRONOUS_MODES``).

Every operation is one call on the connection's thread: a read is one ``execute_fetchall``, a
write one function of storages/sqlite/commit.py. Calls queue on that thread in the order they
are made, so a handle needs no lock of its own. Saves on one handle commit in groups: those made
while a group is on the thread commit together in the next one (one transaction, one fsync), so
many tasks sharing a handle save faster than one by one.

A handle never closed still lets the process exit: its thread is a daemon, and when the handle is
garbage-collected, or at interpreter exit, its connection is closed on that thread without
touching any event loop (the loop that opened it is usually closed by then).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..backend import CheckpointRecord, InsertResult
from ..errors import (
    StorageClosedError,
    StorageConfigurationError,
    StorageUnavailableError,
    StoreNotFoundError,
)
from . import schema
from .commit import Abandon, immediate_transaction, insert_families
from .config import Access, Synchronous
from .thread import ConnectionClosed, ConnectionThread

T = TypeVar("T")


class SQLiteClient:
    """One handle's connection to the file, and the error translation of every call on it."""

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_ms: int,
        synchronous: Synchronous,
        describe: str,
        access: Access = "rw",
        statement_trace: Callable[[str], object] | None = None,
    ) -> None:
        self._path = path
        self._statement_trace = statement_trace
        self._access = access
        self._busy_timeout_ms = busy_timeout_ms
        self._synchronous = synchronous
        self._describe = describe
        self.connection: ConnectionThread | None = None
        self.release_at_exit: weakref.finalize[Any, Any] | None = None
        self._queued_saves: list[tuple[Sequence[CheckpointRecord], asyncio.Future[Any], Abandon]] = []
        self._committing: asyncio.Future[None] | None = None  # done when no group is on the thread
        self._identity: tuple[int, int] | None = None
        """(st_dev, st_ino) of the file this handle opened: a write is kept only if the path still
        leads to it (see :func:`_check_still_at_path`)."""

    async def open(self, owner: object) -> None:
        timeout = self._busy_timeout_ms / 1000
        if self._access == "rw":
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageUnavailableError(
                    "open", f"cannot create the directory of {self._path}: {exc}"
                ) from exc
            target, uri = str(self._path), False
        else:
            if not self._path.exists():
                raise StoreNotFoundError(self._describe, f"no such file {self._path}")
            if self._path.is_dir():
                raise StorageConfigurationError(f"{self._describe} is a directory, not a SQLite file")
            # A URI, so SQLite itself refuses to create or write the file (nothing here could
            # forget to): mode=ro, and with immutable=1 no locks, -wal or -shm either.
            query = "mode=ro&immutable=1" if self._access == "immutable" else "mode=ro"
            target, uri = f"{self._path.as_uri()}?{query}", True

        def connect() -> sqlite3.Connection:
            # autocommit (isolation_level None): commit.py opens every transaction itself.
            return sqlite3.connect(target, timeout=timeout, isolation_level=None, uri=uri)

        connection = ConnectionThread(connect, name=f"sqlite {self._path.name}")
        try:
            await connection.open()
            if self._access == "rw":
                await connection.call(_prepare, self._describe, self._synchronous, self._busy_timeout_ms)
            else:
                await connection.call(_check_readable, self._describe)
        except BaseException as exc:
            # A failed open must not leave the connection's thread behind.
            with contextlib.suppress(Exception):
                await connection.close()
            if isinstance(exc, sqlite3.Error):
                raise self.translate("open", exc) from exc
            raise
        try:
            # The file exists now (the connection created it if it was new): its identity, once.
            opened = os.stat(self._path)
        except OSError as exc:
            with contextlib.suppress(Exception):
                await connection.close()
            raise StorageUnavailableError(
                "open", f"cannot stat {self._path} after opening it: {exc}"
            ) from exc
        self._identity = (opened.st_dev, opened.st_ino)
        if self._statement_trace is not None:
            await connection.set_trace_callback(self._statement_trace)
        self.connection = connection
        self.release_at_exit = weakref.finalize(owner, connection.release_abandoned)

    async def close(self) -> None:
        while self._committing is not None:  # saves already made are committed first
            with contextlib.suppress(Exception):
                await asyncio.shield(self._committing)
        connection, self.connection = self.connection, None
        if self.release_at_exit is not None:
            self.release_at_exit.detach()
            self.release_at_exit = None
        if connection is not None:
            try:
                await connection.close()
            except sqlite3.Error as exc:
                raise self.translate("aclose", exc) from exc

    async def fetchall(self, operation: str, sql: str, parameters: Any = ()) -> list[Any]:
        """One statement's rows: one hand-off to the connection's thread."""
        connection = self._live(operation)
        try:
            try:
                return await connection.execute_fetchall(sql, parameters)
            except sqlite3.OperationalError as exc:
                if not str(exc).startswith(_NOT_UTF8):
                    raise
            # A TEXT value that is not UTF-8 (none this storage writes: a damaged or hostile file)
            # fails the whole statement, naming neither its row nor a typed error. Read it again
            # with such values as NotText, for the storage to name the record they belong to.
            return await connection.call(_fetch_marking_not_text, sql, parameters)
        except sqlite3.Error as exc:
            raise self.translate(operation, exc) from exc
        except ConnectionClosed as exc:  # closed while this call waited on the thread
            raise StorageClosedError(self._describe, operation) from exc

    async def read(self, operation: str, function: Callable[..., T], *args: Any) -> T:
        """``function(sqlite3_connection, *args)``, a read of several statements (lineage.py),
        on the connection's thread: one hand-off, on a read-only handle too."""
        connection = self._live(operation)
        try:
            try:
                return await connection.call(function, *args)
            except sqlite3.OperationalError as exc:
                if not str(exc).startswith(_NOT_UTF8):
                    raise
            # As in fetchall: read again with TEXT values that are not UTF-8 as NotText.
            return await connection.call(_call_marking_not_text, function, *args)
        except sqlite3.Error as exc:
            raise self.translate(operation, exc) from exc
        except ConnectionClosed as exc:
            raise StorageClosedError(self._describe, operation) from exc

    async def run(self, operation: str, function: Callable[..., T], *args: Any) -> T:
        """``function(sqlite3_connection, abandon, *args)`` (a write of commit.py) on the
        connection's thread: one hand-off. If the caller is cancelled, ``abandon`` is set, and a
        transaction that has not committed yet rolls back."""
        connection = self._live(operation)
        self._refuse_if_read_only(operation)
        abandon = Abandon()
        try:
            result: T = await connection.call(
                _write_kept_at_path,
                operation,
                self._path,
                self._identity,
                function,
                abandon,
                *args,
            )
        except asyncio.CancelledError:
            abandon.set()
            raise
        except sqlite3.Error as exc:
            raise self.translate(operation, exc) from exc
        except ConnectionClosed as exc:
            raise StorageClosedError(self._describe, operation) from exc
        return result

    async def save(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        """Insert a family (see ``commit.insert_families``) by group commit: saves made while the
        previous group is on the thread queue up and commit together, in one transaction and
        one hand-off (``commit.insert_families``). A lone save is a group of one.

        No task runs the groups: a save that finds no group on the thread puts one there
        itself, and the thread's answer, a callback on the loop, settles every save of the group
        and puts the next group (the saves queued meanwhile) on the thread. So a save costs one
        hand-off and one wake-up, as one raw statement on a thread does, and a cancelled caller cannot
        strand the others: nothing any caller awaits drives the commit."""
        connection = self._live("save")
        self._refuse_if_read_only("save")
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[Any] = loop.create_future()
        abandon = Abandon()
        self._queued_saves.append((records, outcome, abandon))
        if self._committing is None:
            self._committing = loop.create_future()
            self._commit_next_group(loop, connection)
        try:
            result: InsertResult = await outcome
        except asyncio.CancelledError:
            abandon.set()
            raise
        return result

    def _commit_next_group(self, loop: asyncio.AbstractEventLoop, connection: ConnectionThread) -> None:
        """Put the queued saves on the connection's thread as one group commit."""
        group, self._queued_saves = self._queued_saves, []
        if connection.stopped:  # closed under us
            if not connection.abandoned:  # at exit nothing is answered (ConnectionThread)
                self._settle_group(loop, connection, group, StorageClosedError(self._describe, "save"))
            return
        path, identity = self._path, self._identity
        handed = [group]  # emptied on the thread, which keeps this function until its next call

        def commit_on_thread() -> None:
            committed = handed.pop()
            saves = [(records, abandon) for records, _, abandon in committed]
            outcomes: list[InsertResult | BaseException] | BaseException
            try:
                sqlite_connection = connection.connection
                if sqlite_connection is None:
                    if connection.abandoned:
                        return  # at exit nothing is answered (ConnectionThread.release_abandoned)
                    raise StorageClosedError(self._describe, "save")
                outcomes = insert_families(sqlite_connection, saves)
                _check_still_at_path("save", path, identity)
            except BaseException as exc:  # answered on the loop, never lost on the thread
                outcomes = exc
            with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile
                loop.call_soon_threadsafe(self._settle_group, loop, connection, committed, outcomes)

        connection.hand(commit_on_thread)

    def _settle_group(
        self,
        loop: asyncio.AbstractEventLoop,
        connection: ConnectionThread,
        group: list[tuple[Sequence[CheckpointRecord], asyncio.Future[Any], Abandon]],
        outcomes: list[InsertResult | BaseException] | BaseException,
    ) -> None:
        """On the loop: answer every save of a committed (or failed) group, then start the next."""
        if isinstance(outcomes, BaseException):
            failure = self.translate("save", outcomes) if isinstance(outcomes, sqlite3.Error) else outcomes
            outcomes = [failure] * len(group)
        for (_, future, _), result in zip(group, outcomes, strict=True):
            if future.done():  # its caller was cancelled
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
        if self._queued_saves:
            self._commit_next_group(loop, connection)
            return
        idle, self._committing = self._committing, None
        if idle is not None and not idle.done():
            idle.set_result(None)

    def _refuse_if_read_only(self, operation: str) -> None:
        if self._access != "rw":
            raise StorageConfigurationError(
                f"{self._describe} was opened read-only ({self._access}): {operation} would write; "
                "open it without read_only or immutable to write"
            )

    def _live(self, operation: str) -> ConnectionThread:
        connection = self.connection
        if connection is None:
            raise StorageClosedError(self._describe, operation)
        return connection

    def translate(self, operation: str, exc: sqlite3.Error) -> Exception:
        if _error_name(exc) == "SQLITE_NOTADB" or "file is not a database" in str(exc):
            return StorageConfigurationError(f"{self._describe} is not a SQLite database file: {exc}")
        hint = ""
        if operation == "open" and self._access == "ro":
            hint = (
                " (a read-only handle still needs the -shm file, or a directory it may create it in; "
                "on read-only media, and only while nothing writes the file, add ?immutable=true)"
            )
        return StorageUnavailableError(operation, f"{self._describe}: {type(exc).__name__}: {exc}{hint}")


def _write_kept_at_path(
    connection: sqlite3.Connection,
    operation: str,
    path: Path,
    identity: tuple[int, int] | None,
    function: Callable[..., T],
    abandon: Abandon,
    *args: Any,
) -> T:
    """``function(connection, abandon, *args)`` (a write transaction), answered only if the
    database file is still reachable by its path once it committed."""
    result = function(connection, abandon, *args)
    _check_still_at_path(operation, path, identity)
    return result


def _check_still_at_path(operation: str, path: Path, identity: tuple[int, int] | None) -> None:
    """Raise StorageUnavailableError unless ``path`` still names the file the handle opened.

    An open connection keeps writing to its file after the file, or its directory, is removed,
    renamed or replaced: SQLite commits into an inode nobody will open again, and the write
    would be acknowledged and then gone. One ``os.stat`` after each write transaction commits
    (a group commit's one for all its saves) compares the path's (st_dev, st_ino) with the ones
    read at open; what it cannot see is in docs/sqlite.md ("A file removed under the handle")."""
    if identity is None:
        return
    try:
        current = os.stat(path)
    except FileNotFoundError:
        reason = "it was removed (or its directory was)"
    except OSError as exc:
        reason = f"it cannot be reached: {exc}"
    else:
        if (current.st_dev, current.st_ino) == identity:
            return
        reason = "another file now has its path (it was replaced or renamed)"
    raise StorageUnavailableError(
        operation,
        f"the SQLite database {path} is no longer the file this handle opened: {reason}; what this "
        "write committed went to the old file and is not kept. Open the storage again (a handle "
        "on a vanished file refuses every write)",
    )


_NOT_UTF8 = "Could not decode to UTF-8"
"""How sqlite3 starts the OperationalError of a TEXT value that is not UTF-8."""


class NotText(bytes):
    """A TEXT value read from the file that is not UTF-8: never a str, so every check of a
    column the storage reads as text refuses it, and never the bytes of a BLOB column."""


def _text_or_marked(value: bytes) -> str | NotText:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return NotText(value)


def _fetch_marking_not_text(connection: sqlite3.Connection, sql: str, parameters: Any) -> list[Any]:
    """One statement's rows with TEXT values that are not UTF-8 as NotText."""
    return _call_marking_not_text(connection, lambda c: c.execute(sql, parameters).fetchall())


def _call_marking_not_text(connection: sqlite3.Connection, function: Callable[..., T], *args: Any) -> T:
    """``function(connection, *args)`` with TEXT values that are not UTF-8 read as NotText (on the
    thread, where no other statement runs meanwhile, so no other read sees the changed text
    factory)."""
    previous = connection.text_factory
    connection.text_factory = _text_or_marked
    try:
        return function(connection, *args)
    finally:
        connection.text_factory = previous


def _prepare(
    connection: sqlite3.Connection, describe: str, synchronous: Synchronous, busy_timeout_ms: int
) -> None:
    """On the connection's thread, once: refuse foreign or newer files, WAL, sync mode, migrate."""
    # Reading the version first refuses foreign and newer files before anything changes them.
    version = _schema_version(connection, describe)
    mode = _switch_to_wal(connection, busy_timeout_ms)
    if mode != "wal":
        raise StorageConfigurationError(
            f"{describe}: could not switch to WAL journal mode (it is {mode!r}); "
            "is the file on a file system without shared memory support?"
        )
    connection.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    if version < schema.SCHEMA_VERSION:
        with immediate_transaction(connection):
            connection.execute(schema.CREATE_SCHEMA_VERSION)
            # Another connection may have migrated since the version was read outside the lock.
            version = _schema_version(connection, describe)
            for step in schema.MIGRATIONS[version:]:
                for statement in step:
                    connection.execute(statement)
            connection.execute(schema.RECORD_SCHEMA_VERSION, (schema.SCHEMA_VERSION,))


def _switch_to_wal(connection: sqlite3.Connection, busy_timeout_ms: int) -> str:
    """The file's journal mode after asking for WAL. Switching a new file takes an exclusive lock,
    and SQLite answers SQLITE_BUSY at once, without its busy handler, to one of several
    connections switching together (to avoid a deadlock between them): so a busy answer is
    retried within the busy timeout, each try first reading the mode another connection may have
    switched already (WAL is kept in the file)."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    pause = 0.001
    while True:
        try:
            row = connection.execute("PRAGMA journal_mode").fetchone()
            if row is None or str(row[0]).lower() != "wal":
                row = connection.execute("PRAGMA journal_mode = WAL").fetchone()
            return str(row[0]).lower() if row else "unknown"
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)  # on the connection's own thread, never the loop's
        pause = min(pause * 2, 0.05)


_SQLITE_BUSY = 5
"""SQLite's primary result code for a lock another connection holds (extended codes keep it in
their low byte)."""


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY or one of its extended codes (an error the module raises itself carries no
    code, only the message)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF == _SQLITE_BUSY
    return "database is locked" in str(exc)


def _check_readable(connection: sqlite3.Connection, describe: str) -> None:
    """On a read-only connection: the file must be this storage's, at this code's schema version
    (a read-only handle cannot migrate it, and an empty file has no tables to read)."""
    version = _schema_version(connection, describe)
    if version == 0:
        raise StoreNotFoundError(describe, "the file holds no checkpoint storage (no tables of one)")
    if version < schema.SCHEMA_VERSION:
        raise StorageConfigurationError(
            f"{describe} has schema version {version}, and a read-only handle cannot migrate it to "
            f"version {schema.SCHEMA_VERSION}: open it once with a handle that may write"
        )


def _schema_version(connection: sqlite3.Connection, describe: str) -> int:
    """The file's schema version (0 if new); refuses files this code cannot read."""
    has_version_table, existing_tables = connection.execute(
        schema.SELECT_SCHEMA_VERSION, schema.SCHEMA_TABLES
    ).fetchone()
    if not has_version_table:
        if existing_tables:
            raise StorageConfigurationError(
                f"{describe} has tables ({existing_tables}) but no schema_version table; "
                "it was not created by this storage, use another file"
            )
        return 0
    row = connection.execute("SELECT version FROM schema_version").fetchone()
    version = int(row[0]) if row else 0
    if version > schema.SCHEMA_VERSION:
        raise StorageConfigurationError(
            f"{describe} has schema version {version}, newer than version {schema.SCHEMA_VERSION} "
            "known to this code; upgrade checkpoint-storages to open it"
        )
    return version


def _error_name(exc: sqlite3.Error) -> str | None:
    # None on an error the module raises itself rather than SQLite.
    name = getattr(exc, "sqlite_errorname", None)
    return name if isinstance(name, str) else None
