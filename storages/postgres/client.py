"""Connections and driver calls (psycopg 3 with psycopg_pool): a bounded pool per handle, every
statement in autocommit (each primitive is one statement, so one transaction), connection loss
retried with exponential backoff, then a typed error naming the operation.

A retried statement may already have been executed by the server (the connection broke after
the request left): every write is idempotent for exactly that reason (see commit.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import random
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..errors import StorageConfigurationError, StorageUnavailableError, StoreNotFoundError
from ..redaction import chainable, redact_text
from . import schema
from .config import PostgresOptions

T = TypeVar("T")
Connection = psycopg.AsyncConnection[Any]

BACKOFF_BASE = 0.05
BACKOFF_CAP = 2.0
CONNECT_TIMEOUT = 10
"""Seconds libpq waits for a server before a connection attempt fails (URL connect_timeout wins)."""


class PostgresClient:
    """What a storage handle talks to: its own pool (from a conninfo), or a pool or connection
    it was given and never closes."""

    def __init__(
        self,
        conninfo: str | None,
        options: PostgresOptions,
        describe: str,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        connection: Connection | None = None,
        read_only: bool = False,
    ) -> None:
        self._conninfo = conninfo
        self.read_only = read_only
        """Never create or migrate the schema, refuse one that does not exist, and run every
        statement of its own connections in a read-only transaction (the server refuses writes)."""
        self._options = options
        self._describe = describe
        self._injected_pool = pool
        self._injected_connection = connection
        self._pool: AsyncConnectionPool[Any] | None = pool
        self._abandoned: weakref.finalize[Any, Any] | None = None
        self._made: _Made | None = None
        self.statements = 0
        """Statements sent so far (round trips; the kit's ``scale`` clauses count them)."""

    @property
    def injected(self) -> bool:
        return self._injected_pool is not None or self._injected_connection is not None

    # ------------------------------------------------------------------ lifecycle

    async def open(self, operation: str) -> None:
        """Connect once (retrying like any operation), migrate the schema (a read-only client:
        check it is there, at this code's version), then start the pool. The engine opens a
        storage once, however many first operations start together."""
        if self._injected_connection is not None:
            if not self._injected_connection.autocommit:
                raise StorageConfigurationError(
                    f"{self._describe}: the connection given to the storage must be in autocommit "
                    "mode (psycopg.AsyncConnection.connect(..., autocommit=True)): each operation is "
                    "one statement and must commit on its own"
                )
            await self.run(operation, lambda connection: self._migrate(connection, operation))
            return
        if self._injected_pool is not None:
            await self.run(operation, lambda connection: self._migrate(connection, operation))
            return
        # Every handle checks the version: a schema migrated by newer code while this process
        # runs is refused by its next handle, not written with an older layout.
        await self._retrying(operation, lambda: self._connect_and_migrate(operation))
        self._pool = self._new_pool()
        await _start_detached(self._pool)

    def _new_pool(self) -> AsyncConnectionPool[Any]:
        assert self._conninfo is not None
        made = _Made(read_only=self.read_only)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self._conninfo,
            min_size=0,  # connections are made on demand: idle handles hold none
            max_size=self._options.pool_size,
            timeout=self._options.pool_timeout,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT, "client_encoding": "UTF8"},
            configure=made.configure,
            open=False,
            name="checkpoint-storages",
        )
        if self._abandoned is not None:
            self._abandoned.detach()
        self._abandoned = weakref.finalize(self, _finish_connections, made)
        self._made = made
        return pool

    async def follow_loop(self) -> None:
        """Our pool's workers and locks belong to the old event loop: drop it without awaiting
        (that loop is usually closed) and let the next operation start a new one here."""
        if self.injected or self._pool is None or self._made is None:
            return
        _finish_connections(self._made)
        self._pool = self._new_pool()
        await _start_detached(self._pool)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if self._abandoned is not None:
            self._abandoned.detach()
            self._abandoned = None
        if pool is not None and not self.injected and not pool.closed:
            await pool.close(timeout=5.0)

    # ------------------------------------------------------------------ statements

    async def run(self, operation: str, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work`` on a pooled connection, retried on connection loss; driver errors become
        StorageUnavailableError naming ``operation``."""

        async def attempt() -> T:
            async with self._connection() as connection:
                return await work(connection)

        return await self._retrying(operation, attempt)

    async def fetch(
        self, operation: str, query: str, parameters: Sequence[Any] | dict[str, Any] = ()
    ) -> list[Any]:
        """One statement's rows."""

        async def work(connection: Connection) -> list[Any]:
            self.statements += 1
            try:
                cursor = await connection.execute(query, parameters)
                return await cursor.fetchall() if cursor.description is not None else []
            except psycopg.errors.CharacterNotInRepertoire:
                # A SQL_ASCII database holds text that is not UTF-8 (none this storage writes),
                # which the server will not send as UTF-8, naming no row. Read it again as the
                # bytes it is, for the storage to name the record it belongs to.
                if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    raise  # a caller's connection inside its own transaction, which is aborted
                return await _fetch_as_stored(connection, query, parameters)

        return await self.run(operation, work)

    async def _retrying(self, operation: str, attempt: Callable[[], Awaitable[T]]) -> T:
        for tries in range(self._options.retries + 1):
            try:
                return await attempt()
            except PoolTimeout as exc:  # waited pool_timeout already: every connection is busy or failing
                raise self.unavailable(operation, exc) from chainable(exc)
            except psycopg.errors.InsufficientPrivilege as exc:
                # The role lacks a privilege: retrying cannot help, granting it does.
                raise StorageConfigurationError(
                    f"{self._describe}: {operation} refused, the connected role lacks "
                    f"{missing_privilege(exc)} (the storage needs USAGE on its schema, SELECT, "
                    "INSERT, UPDATE and DELETE on its tables and EXECUTE on its functions; CREATE on "
                    "the schema to create or migrate them; docs/postgres.md)"
                ) from chainable(exc)
            except psycopg.OperationalError as exc:
                # Connection lost, server restarting or shutting down, pool exhausted, deadlock,
                # serialization failure: all worth another try on a fresh connection.
                if tries == self._options.retries:
                    raise self.unavailable(operation, exc) from chainable(exc)
                await self._recover()
                delay = min(BACKOFF_CAP, BACKOFF_BASE * 2**tries)
                await asyncio.sleep(delay * (0.5 + random.random() / 2))  # noqa: S311 - jitter
            except psycopg.Error as exc:
                raise self.unavailable(operation, exc) from chainable(exc)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _recover(self) -> None:
        """After a lost connection, drop the pool's idle connections that are broken too (a
        restarted server broke them all), so the retry does not draw another dead one."""
        pool = self._pool
        if pool is not None and not pool.closed:
            with contextlib.suppress(Exception):
                await pool.check()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        if self._injected_connection is not None:
            yield self._injected_connection
            return
        pool = self._pool
        if pool is None:
            raise psycopg.OperationalError("the storage's connection pool is closed")
        async with pool.connection() as connection:
            yield connection

    def unavailable(self, operation: str, exc: BaseException) -> StorageUnavailableError:
        return StorageUnavailableError(
            operation, f"{self._describe}: {type(exc).__name__}: {redact_text(str(exc).strip())}"
        )

    # ------------------------------------------------------------------ schema

    async def _connect_and_migrate(self, operation: str) -> None:
        assert self._conninfo is not None
        connection = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT, client_encoding="UTF8"
        )
        try:
            if self.read_only:
                await _read_only_session(connection)
            await self._migrate(connection, operation)
        finally:
            await connection.close()

    async def _migrate(self, connection: Connection, operation: str) -> None:
        # Reading the state first refuses foreign and newer schemas, and a role that may not use
        # the schema, before anything changes them.
        state = await self._schema_state(connection)
        if state.version == schema.SCHEMA_VERSION:
            return
        if self.read_only:
            self._refuse_to_migrate(state)
        self._require_migration_privileges(state)
        for tries in range(self._options.retries + 1):
            try:
                await self._migrate_once(connection)
                return
            except psycopg.errors.LockNotAvailable as exc:
                # A long transaction holds one of our tables: our DDL gave up after the lock
                # timeout rather than make every reader of the table queue behind it.
                if tries == self._options.retries:
                    raise StorageUnavailableError(
                        operation,
                        f"{self._describe}: the migration to schema version {schema.SCHEMA_VERSION} "
                        f"could not take its table lock within the lock timeout in {tries + 1} "
                        "attempts (a long transaction holds a lock on the storage's tables: see "
                        f"pg_locks); gave up so that readers do not wait behind it: {exc}",
                    ) from chainable(exc)
                delay = min(BACKOFF_CAP, BACKOFF_BASE * 2**tries)
                await asyncio.sleep(delay * (0.5 + random.random() / 2))  # noqa: S311 - jitter

    async def _migrate_once(self, connection: Connection) -> None:
        """One attempt: every missing step in one transaction, rolled back whole if a DDL
        statement's table lock is not granted within the lock timeout."""
        name, prefix = self._options.schema, self._options.table_prefix
        async with connection.transaction():
            # Another process may be migrating the same schema: one waits for the other (an
            # advisory lock, which no reader of the tables waits for).
            await connection.execute(schema.LOCK_MIGRATION, (schema.migration_lock_key(name),))
            await connection.execute(schema.MIGRATION_LOCK_TIMEOUT)
            state = await self._schema_state(connection)
            if state.version == schema.SCHEMA_VERSION:
                return  # migrated by the process we waited for
            if not state.exists:
                await connection.execute(schema.render(schema.CREATE_SCHEMA, name, prefix))
            await connection.execute(schema.render(schema.CREATE_SCHEMA_VERSION, name, prefix))
            for step in schema.MIGRATIONS[state.version :]:
                for statement in step:
                    await connection.execute(schema.render(statement, name, prefix))
            await connection.execute(
                schema.render(schema.RECORD_VERSION, name, prefix), (schema.SCHEMA_VERSION,)
            )

    def _refuse_to_migrate(self, state: SchemaState) -> None:
        """A read-only client met a schema it would have to create or migrate: it does neither."""
        name, prefix = self._options.schema, self._options.table_prefix
        if not state.exists:
            raise StoreNotFoundError(
                self._describe, f"schema {name!r} does not exist in database {state.database!r}"
            )
        if state.version == 0:
            tables = f" with table_prefix {prefix!r}" if prefix else ""
            raise StoreNotFoundError(self._describe, f"schema {name!r} holds no checkpoint tables{tables}")
        raise StorageConfigurationError(
            f"{self._describe} has schema version {state.version}, and a read-only handle cannot "
            f"migrate it to version {schema.SCHEMA_VERSION}: open it once with a handle that may write"
        )

    def _require_migration_privileges(self, state: SchemaState) -> None:
        """Creating our tables needs CREATE on the schema (its owner has it), and creating the
        schema needs CREATE on the database; refuse naming the one missing, before any DDL."""
        name = self._options.schema
        if not state.exists and not state.may_create_schemas:
            raise StorageConfigurationError(
                f"{self._describe}: role {state.role!r} lacks CREATE on database {state.database!r}, "
                f"needed to create schema {name!r}; create the schema for it (CREATE SCHEMA {name} "
                f"AUTHORIZATION {state.role}) or grant CREATE on the database"
            )
        if state.exists and not state.may_create_in_schema:
            raise StorageConfigurationError(
                f"{self._describe}: role {state.role!r} lacks CREATE on schema {name!r}, needed to "
                f"{'create' if state.version == 0 else 'migrate'} the storage's tables (schema "
                f"version {state.version} -> {schema.SCHEMA_VERSION}); grant it (GRANT CREATE ON "
                f"SCHEMA {name} TO {state.role}) or open the store once as the schema's owner"
            )

    async def _schema_state(self, connection: Connection) -> SchemaState:
        """The schema's version (0 if new) and the role's privileges on it; refuses a schema this
        code cannot read, and one the role may not use."""
        name, prefix = self._options.schema, self._options.table_prefix
        version_table, *tables = schema.object_names(prefix)
        cursor = await connection.execute(
            schema.SELECT_STATE,
            {"version_table": f"{schema.quoted(name)}.{version_table}", "schema": name, "tables": tables},
        )
        row = await cursor.fetchone()
        assert row is not None
        exists, usage, create, create_schemas, role, database, has_version_table, existing = row
        state = SchemaState(bool(exists), bool(create), bool(create_schemas), str(role), str(database), 0)
        if exists and not usage:
            raise StorageConfigurationError(
                f"{self._describe}: role {state.role!r} lacks USAGE on schema {name!r}; grant it "
                f"(GRANT USAGE ON SCHEMA {name} TO {state.role}) or use a schema the role owns"
            )
        if not has_version_table:
            if existing:
                raise StorageConfigurationError(
                    f"{self._describe}: schema {name!r} has tables ({existing}) but no "
                    f"{version_table} table; it was not created by this storage, use another "
                    "schema or table_prefix"
                )
            return state
        cursor = await connection.execute(schema.render(schema.SELECT_VERSION, name, prefix))
        version_row = await cursor.fetchone()
        version = int(version_row[0]) if version_row else 0
        if version > schema.SCHEMA_VERSION:
            raise StorageConfigurationError(
                f"{self._describe} has schema version {version}, newer than version "
                f"{schema.SCHEMA_VERSION} known to this code; upgrade checkpoint-storages to open it"
            )
        return dataclasses.replace(state, version=version)


@dataclasses.dataclass(frozen=True, slots=True)
class SchemaState:
    """What opening a store needs to know of its schema: whether it exists, what the connected
    role may do, and the version of the storage's tables in it (0: none yet)."""

    exists: bool
    may_create_in_schema: bool
    may_create_schemas: bool
    role: str
    database: str
    version: int


def missing_privilege(exc: psycopg.Error) -> str:
    """What a permission error (SQLSTATE 42501) says the role lacks, in GRANT's words where the
    server's message names the object: a table's or function's privileges, a schema's USAGE."""
    message = redact_text(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    found = _PERMISSION_DENIED.search(message)
    if found is None:  # "must be owner of table ...", a row-level policy, a server in another language
        return f"a privilege (the server said: {message})"
    kind, name = found.group(1), found.group(2)
    return f"{_PRIVILEGES_BY_KIND[kind]} on {kind} {name}"


_PERMISSION_DENIED = re.compile(r"permission denied for (table|schema|function|database|sequence) (\S+)")
_PRIVILEGES_BY_KIND = {
    "table": "SELECT, INSERT, UPDATE and DELETE",
    "schema": "USAGE",
    "function": "EXECUTE",
    "database": "CREATE",
    "sequence": "USAGE",
}


async def _fetch_as_stored(
    connection: Connection, query: str, parameters: Sequence[Any] | dict[str, Any]
) -> list[Any]:
    """One statement's rows with text as the database holds it: bytes, under client_encoding
    SQL_ASCII (no conversion), then the connection's own encoding again."""
    encoding = connection.info.parameter_status("client_encoding") or "UTF8"
    await connection.execute("SET client_encoding TO 'SQL_ASCII'")
    try:
        cursor = await connection.execute(query, parameters)
        return await cursor.fetchall() if cursor.description is not None else []
    finally:
        await connection.execute(
            psycopg.sql.SQL("SET client_encoding TO {}").format(psycopg.sql.Literal(str(encoding)))
        )


async def _read_only_session(connection: Connection) -> None:
    """Every later transaction of ``connection`` is read-only: the server refuses any write."""
    await connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


async def _start_detached(pool: AsyncConnectionPool[Any]) -> None:
    """Open the pool in a context of its own: the worker tasks it starts live as long as the
    storage, and must not count as tasks of whatever the first caller is running. A runner that
    cancels every task its run created when the run ends (MAF's functional workflows do, through
    a task factory that reads a context variable) would otherwise cancel the pool's workers, and
    the storage's next operations and its close would fail."""
    opening = contextvars.Context().run(asyncio.ensure_future, pool.open(wait=False))
    await opening


class _Made:
    """The connections a pool made, known through its public ``configure`` hook, so that they can
    be closed without the pool's loop (:func:`_finish_connections`); and the read-only session a
    read-only handle's connections start with."""

    def __init__(self, *, read_only: bool) -> None:
        self.read_only = read_only
        self.connections: weakref.WeakSet[Connection] = weakref.WeakSet()

    async def configure(self, connection: Connection) -> None:
        self.connections.add(connection)
        if self.read_only:
            await _read_only_session(connection)


def _finish_connections(made: _Made) -> None:
    """Close a pool's sockets without an event loop: its storage was collected unclosed, or its
    loop ended. Best effort, as nobody is left to tell. The pool itself needs nothing: an
    AsyncConnectionPool has no finalizer (psycopg_pool 3.2 on), and its worker tasks end with
    their loop."""
    with contextlib.suppress(Exception):
        for connection in list(made.connections):
            connection.pgconn.finish()


__all__ = ["PostgresClient", "SchemaState", "missing_privilege"]
