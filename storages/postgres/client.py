"""Connections and driver calls (psycopg 3 with psycopg_pool): a bounded pool per handle, every
statement in autocommit (each primitive is one statement, so one transaction), connection loss
retried with exponential backoff, then a typed error naming the operation.

A retried statement may already have been executed by the server (the connection broke after
the request left): every write is idempotent for exactly that reason (see commit.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..errors import StorageConfigurationError, StorageUnavailableError
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
    ) -> None:
        self._conninfo = conninfo
        self._options = options
        self._describe = describe
        self._injected_pool = pool
        self._injected_connection = connection
        self._pool: AsyncConnectionPool[Any] | None = pool
        self._abandoned: weakref.finalize[Any, Any] | None = None
        self.statements = 0
        """Statements sent so far (round trips; the kit's ``scale`` clauses count them)."""

    @property
    def injected(self) -> bool:
        return self._injected_pool is not None or self._injected_connection is not None

    # ------------------------------------------------------------------ lifecycle

    async def open(self, operation: str) -> None:
        """Connect once (retrying like any operation), migrate the schema, then start the pool.
        The engine opens a storage once, however many first operations start together."""
        if self._injected_connection is not None:
            if not self._injected_connection.autocommit:
                raise StorageConfigurationError(
                    f"{self._describe}: the connection given to the storage must be in autocommit "
                    "mode (psycopg.AsyncConnection.connect(..., autocommit=True)): each operation is "
                    "one statement and must commit on its own"
                )
            await self.run(operation, self._migrate)
            return
        if self._injected_pool is not None:
            await self.run(operation, self._migrate)
            return
        # Every handle checks the version: a schema migrated by newer code while this process
        # runs is refused by its next handle, not written with an older layout.
        await self._retrying(operation, self._connect_and_migrate)
        self._pool = self._new_pool()
        await self._pool.open(wait=False)

    def _new_pool(self) -> AsyncConnectionPool[Any]:
        assert self._conninfo is not None
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self._conninfo,
            min_size=0,  # connections are made on demand: idle handles hold none
            max_size=self._options.pool_size,
            timeout=self._options.pool_timeout,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT, "client_encoding": "UTF8"},
            open=False,
            name="checkpoint-storages",
        )
        if self._abandoned is not None:
            self._abandoned.detach()
        self._abandoned = weakref.finalize(self, _finish_connections, pool)
        return pool

    async def follow_loop(self) -> None:
        """Our pool's workers and locks belong to the old event loop: drop it without awaiting
        (that loop is usually closed) and let the next operation start a new one here."""
        if self.injected or self._pool is None:
            return
        _finish_connections(self._pool)
        self._pool = self._new_pool()
        await self._pool.open(wait=False)

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

    async def _connect_and_migrate(self) -> None:
        assert self._conninfo is not None
        connection = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT, client_encoding="UTF8"
        )
        try:
            await self._migrate(connection)
        finally:
            await connection.close()

    async def _migrate(self, connection: Connection) -> None:
        # Reading the version first refuses foreign and newer schemas before anything changes them.
        name = self._options.schema
        if await self._schema_version(connection) == schema.SCHEMA_VERSION:
            return
        async with connection.transaction():
            # Another process may be migrating the same schema: one waits for the other.
            await connection.execute(schema.LOCK_MIGRATION, (schema.migration_lock_key(name),))
            await connection.execute(schema.render(schema.CREATE_SCHEMA, name))
            version = await self._schema_version(connection)
            await connection.execute(schema.render(schema.CREATE_SCHEMA_VERSION, name))
            for step in schema.MIGRATIONS[version:]:
                for statement in step:
                    await connection.execute(schema.render(statement, name))
            await connection.execute(schema.render(schema.RECORD_VERSION, name), (schema.SCHEMA_VERSION,))

    async def _schema_version(self, connection: Connection) -> int:
        """The schema's version (0 if new); refuses schemas this code cannot read."""
        name = self._options.schema
        cursor = await connection.execute(
            schema.SELECT_STATE,
            {
                "version_table": f"{schema.quoted(name)}.schema_version",
                "schema": name,
                "tables": list(schema.OWN_TABLES),
            },
        )
        row = await cursor.fetchone()
        assert row is not None
        has_version_table, existing_tables = row
        if not has_version_table:
            if existing_tables:
                raise StorageConfigurationError(
                    f"{self._describe}: schema {name!r} has tables ({existing_tables}) but no "
                    "schema_version table; it was not created by this storage, use another schema"
                )
            return 0
        cursor = await connection.execute(schema.render(schema.SELECT_VERSION, name))
        version_row = await cursor.fetchone()
        version = int(version_row[0]) if version_row else 0
        if version > schema.SCHEMA_VERSION:
            raise StorageConfigurationError(
                f"{self._describe} has schema version {version}, newer than version "
                f"{schema.SCHEMA_VERSION} known to this code; upgrade checkpoint-storages to open it"
            )
        return version


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


def _finish_connections(pool: AsyncConnectionPool[Any]) -> None:
    """Close a pool's sockets without an event loop: its storage was collected unclosed, or its
    loop ended. Best effort, as nobody is left to tell."""
    with contextlib.suppress(Exception):
        connections = list(getattr(pool, "_pool", ()))
        for connection in connections:
            connection.pgconn.finish()
        pool._closed = True  # what close() sets first; keeps __del__ from warning


__all__ = ["PostgresClient"]
