"""PostgreSQL with least privilege and under load: a role that owns one schema and may create
nothing else in the database starts, saves and is certified by the kit inside its schema (run
tables under a table prefix); a missing privilege is a configuration error naming it; a
migration behind a long reader gives up its table lock instead of queueing every reader behind
it; several stores share one schema by table prefix.

Every test runs on the shared server, in a database and roles of its own (unique names, dropped
afterwards). An unreachable server fails them; nothing is skipped.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import postgres_servers
import psycopg
import pytest

from storages import (
    CheckpointNotFoundError,
    StorageConfigurationError,
    StorageUnavailableError,
    WorkflowCheckpoint,
)
from storages.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresCheckpointStorage
from storages.postgres.schema import CREATE_SCHEMA, CREATE_SCHEMA_VERSION, RECORD_VERSION, render

pytestmark = pytest.mark.postgres


@dataclass(frozen=True)
class Database:
    """A database of this module's own on the shared server, with its superuser URL."""

    name: str
    admin_url: str

    def as_role(self, role: str, query: str = "") -> str:
        """The URL of this database for ``role`` (trust auth: no password)."""
        parts = urlsplit(self.admin_url)
        host = parts.hostname or "127.0.0.1"
        port = f":{parts.port}" if parts.port else ""
        return urlunsplit(("postgresql", f"{role}@{host}{port}", parts.path, query, ""))

    def admin(self, query: str) -> str:
        """The superuser's URL of this database with ``query``."""
        return f"{self.admin_url}?{query}"

    def execute(self, *statements: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            for statement in statements:
                connection.execute(statement)

    def fetch(self, statement: str) -> list[tuple[object, ...]]:
        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            return connection.execute(statement).fetchall()


@pytest.fixture(scope="module")
def database() -> Iterator[Database]:
    name = f"cs_priv_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    server = postgres_servers.server_url()
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    created = Database(name, postgres_servers.with_database(server, name))
    # Nobody but the superuser may create schemas or objects in public here.
    created.execute(
        f'REVOKE CREATE ON DATABASE "{name}" FROM PUBLIC', "REVOKE ALL ON SCHEMA public FROM PUBLIC"
    )
    try:
        yield created
    finally:
        postgres_servers.drop_database(server, name)


@pytest.fixture
def role(database: Database) -> Iterator[str]:
    """A login role with no privilege of its own, dropped (with what it owns) afterwards."""
    name = f"cs_role_{uuid.uuid4().hex[:10]}"
    database.execute(f'CREATE ROLE "{name}" LOGIN')
    try:
        yield name
    finally:
        database.execute(f'DROP OWNED BY "{name}" CASCADE')
        with psycopg.connect(postgres_servers.server_url(), autocommit=True) as connection:
            connection.execute(f'DROP ROLE "{name}"')


@pytest.fixture
def owned_schema(database: Database, role: str) -> str:
    """A schema the role owns; the role has no CREATE on the database."""
    schema = f"own_{uuid.uuid4().hex[:10]}"
    database.execute(f'CREATE SCHEMA "{schema}" AUTHORIZATION "{role}"')
    [(may_create_schemas,)] = database.fetch(
        f"SELECT has_database_privilege('{role}', current_database(), 'CREATE')"
    )
    assert may_create_schemas is False  # so the tests below can fail
    return schema


# ---------------------------------------------------------------------- least privilege


async def test_a_role_owning_its_schema_without_create_on_the_database_starts_and_saves(
    database: Database, role: str, owned_schema: str
) -> None:
    url = database.as_role(role, f"schema={owned_schema}")
    first = WorkflowCheckpoint("wf", "sig")
    second = WorkflowCheckpoint("wf", "sig", previous_checkpoint_id=first.checkpoint_id)
    async with PostgresCheckpointStorage.from_url(url) as storage:
        await storage.save(first)
        await storage.save(second)
    async with PostgresCheckpointStorage.from_url(url) as reopened:  # the next handle checks the version
        assert await reopened.get_latest(workflow_name="wf") == second
        assert await reopened.load(first.checkpoint_id) == first
        assert await reopened.list_workflows() == ["wf"]


async def test_a_role_that_may_not_create_the_schema_is_refused_naming_create_on_the_database(
    database: Database, role: str
) -> None:
    url = database.as_role(role, "schema=nowhere_yet")
    storage = PostgresCheckpointStorage.from_url(url)
    with pytest.raises(StorageConfigurationError, match=f"lacks CREATE on database '{database.name}'"):
        await storage.save(WorkflowCheckpoint("wf", "sig"))
    await storage.aclose()
    assert database.fetch("SELECT count(*) FROM pg_namespace WHERE nspname = 'nowhere_yet'") == [(0,)]


async def test_a_role_without_usage_on_the_schema_is_refused_naming_it(database: Database, role: str) -> None:
    schema = f"theirs_{uuid.uuid4().hex[:10]}"
    database.execute(f'CREATE SCHEMA "{schema}"')  # the superuser's; the role has no grant on it
    storage = PostgresCheckpointStorage.from_url(database.as_role(role, f"schema={schema}"))
    with pytest.raises(StorageConfigurationError, match=f"lacks USAGE on schema '{schema}'"):
        await storage.get_latest(workflow_name="wf")
    await storage.aclose()


async def test_a_role_that_may_use_but_not_create_in_the_schema_is_refused_naming_create_on_it(
    database: Database, role: str
) -> None:
    schema = f"theirs_{uuid.uuid4().hex[:10]}"
    database.execute(f'CREATE SCHEMA "{schema}"', f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    storage = PostgresCheckpointStorage.from_url(database.as_role(role, f"schema={schema}"))
    with pytest.raises(StorageConfigurationError, match=f"lacks CREATE on schema '{schema}'"):
        await storage.save(WorkflowCheckpoint("wf", "sig"))
    await storage.aclose()


async def test_a_role_without_privileges_on_the_tables_is_refused_naming_them(
    database: Database, role: str
) -> None:
    # The schema and its tables were made by their owner; the role may only look up names in it.
    schema = f"made_{uuid.uuid4().hex[:10]}"
    async with PostgresCheckpointStorage.from_url(database.admin(f"schema={schema}")) as owner:
        await owner.save(WorkflowCheckpoint("wf", "sig"))
    database.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
    storage = PostgresCheckpointStorage.from_url(database.as_role(role, f"schema={schema}"))
    with pytest.raises(
        StorageConfigurationError, match="SELECT, INSERT, UPDATE and DELETE on table"
    ) as refused:
        await storage.get_latest(workflow_name="wf")
    assert not isinstance(refused.value, StorageUnavailableError)
    await storage.aclose()
    # Granted what the message names, the same role works.
    database.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
    async with PostgresCheckpointStorage.from_url(database.as_role(role, f"schema={schema}")) as granted:
        assert await granted.list_workflows() == ["wf"]
        await granted.save(WorkflowCheckpoint("wf", "sig"))


def test_the_kit_certifies_a_least_privilege_role_inside_its_own_schema(
    database: Database, role: str, owned_schema: str
) -> None:
    # The kit's run gets tables of its own in the given schema (table_prefix), not a schema of
    # its own, which this role may not create.
    url = database.as_role(role, f"schema={owned_schema}")
    families = ["contract", "isolation", "fencing", "durability", "concurrency"]
    arguments = [sys.executable, "-m", "conformance.cli", url, *(f"--clause={f}" for f in families)]
    completed = subprocess.run(arguments, capture_output=True, text=True, check=False, timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "Every backend conforms" in completed.stdout
    schemas = database.fetch(f"SELECT nspname FROM pg_namespace WHERE nspowner = '{role}'::regrole")
    assert schemas == [(owned_schema,)]
    tables = {
        str(row[0])
        for row in database.fetch(f"SELECT tablename FROM pg_tables WHERE schemaname = '{owned_schema}'")
    }
    assert tables, "the run made no tables"
    assert all(name.startswith("ck_run_") for name in tables), tables


# ---------------------------------------------------------------------- table prefixes


async def test_stores_with_different_table_prefixes_share_a_schema_and_see_only_their_own(
    database: Database,
) -> None:
    schema = f"shared_{uuid.uuid4().hex[:10]}"
    one = PostgresCheckpointStorage.from_url(database.admin(f"schema={schema}&table_prefix=one_"))
    two = PostgresCheckpointStorage.from_url(database.admin(f"schema={schema}&table_prefix=two_"))
    plain = PostgresCheckpointStorage.from_url(database.admin(f"schema={schema}"))
    async with one, two, plain:
        mine = WorkflowCheckpoint("wf-one", "sig")
        await asyncio.gather(one.get_latest(workflow_name="x"), two.get_latest(workflow_name="x"))
        await one.save(mine)
        await two.save(WorkflowCheckpoint("wf-two", "sig"))
        assert await one.list_workflows() == ["wf-one"]
        assert await two.list_workflows() == ["wf-two"]
        assert await plain.list_workflows() == []
        with pytest.raises(CheckpointNotFoundError):
            await two.load(mine.checkpoint_id)
        assert "table prefix 'one_'" in one.describe()
    tables = {
        str(r[0]) for r in database.fetch(f"SELECT tablename FROM pg_tables WHERE schemaname = '{schema}'")
    }
    for prefix in ("one_", "two_", ""):
        assert {
            f"{prefix}{t}" for t in ("checkpoints", "workflows", "tombstones", "schema_version")
        } <= tables


@pytest.mark.parametrize(
    ("prefix", "message"),
    [("Bad", "table_prefix must be a lower-case identifier"), ("x" * 32, "at most 31 characters")],
)
def test_bad_table_prefixes_are_refused_by_name(prefix: str, message: str) -> None:
    with pytest.raises(StorageConfigurationError, match=message):
        PostgresCheckpointStorage.from_url(f"postgresql://u@127.0.0.1/db?table_prefix={prefix}")


# ---------------------------------------------------------------------- migration lock timeout


async def _create_version_1(url: str, schema: str) -> None:
    """A schema exactly as code of version 1 created it."""
    async with (
        await psycopg.AsyncConnection.connect(url, autocommit=True) as connection,
        connection.transaction(),
    ):
        await connection.execute(render(CREATE_SCHEMA, schema))
        await connection.execute(render(CREATE_SCHEMA_VERSION, schema))
        for statement in MIGRATIONS[0]:
            await connection.execute(render(statement, schema))
        await connection.execute(render(RECORD_VERSION, schema), (1,))


@pytest.fixture
async def version_1_schema(database: Database) -> AsyncIterator[str]:
    schema = f"old_{uuid.uuid4().hex[:10]}"
    await _create_version_1(database.admin_url, schema)
    yield schema
    database.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def test_a_migration_behind_a_long_reader_gives_up_its_lock_instead_of_stalling_readers(
    database: Database, version_1_schema: str
) -> None:
    schema = version_1_schema
    url = database.admin(f"schema={schema}&retries=3")
    table = f'"{schema}".checkpoints'
    async with (
        await psycopg.AsyncConnection.connect(database.admin_url) as long_reader,
        await psycopg.AsyncConnection.connect(database.admin_url, autocommit=True) as short_reader,
    ):
        await long_reader.execute(f"SELECT count(*) FROM {table}")  # holds ACCESS SHARE until it ends
        # A short reader that would wait for a migration's DDL queued behind the long reader
        # fails instead of waiting out the long reader: 10 s, a hundred times the DDL's limit.
        await short_reader.execute("SET lock_timeout = '10s'")
        storage = PostgresCheckpointStorage.from_url(url)
        migration = asyncio.ensure_future(storage.get_latest(workflow_name="wf"))
        short_reads = 0
        try:
            while not migration.done():
                await short_reader.execute(f"SELECT count(*) FROM {table}")
                short_reads += 1
                await asyncio.sleep(0.02)
            with pytest.raises(
                StorageUnavailableError,
                match=f"migration to schema version {SCHEMA_VERSION} could not take its table lock",
            ):
                await asyncio.wait_for(migration, timeout=60)
        finally:
            # A migration still waiting (the check failed) must not hold its locks past the test.
            migration.cancel()
            await asyncio.gather(migration, return_exceptions=True)
            await storage.aclose()
        assert short_reads >= 1
        # Gave up whole: still version 1, its indexes untouched; the long reader is unharmed.
        assert database.fetch(f'SELECT version FROM "{schema}".schema_version') == [(1,)]
        assert (await (await long_reader.execute(f"SELECT count(*) FROM {table}")).fetchone()) == (0,)
        await long_reader.commit()
    async with PostgresCheckpointStorage.from_url(url) as storage:  # nobody in the way now
        await storage.save(WorkflowCheckpoint("wf", "sig"))
    assert database.fetch(f'SELECT version FROM "{schema}".schema_version') == [(SCHEMA_VERSION,)]
