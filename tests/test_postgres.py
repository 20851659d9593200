"""The PostgreSQL backend: the whole kit on the shared server (in this run's own database), the
CLI with the MAF and LangGraph runners, the fault clauses on a private cluster, and URLs,
schema versions, injected pools and connections, retries and redaction.

An unreachable server fails these tests; nothing is skipped.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import postgres_servers
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from conformance import Outcome, StorageTarget, all_clauses, validate
from storages import (
    CheckpointConflictError,
    StorageConfigurationError,
    StorageUnavailableError,
    WorkflowCheckpoint,
    open_storage,
)
from storages.postgres import SCHEMA_VERSION, PostgresCheckpointStorage

pytestmark = pytest.mark.postgres

FAULT_CLAUSES = {c.id for c in all_clauses() if c.injects}
NO_TTL = "expiry.checkpoints_expire_after_ttl"


def _statements(storage: Any) -> int:
    return int(storage.statements_sent)


@pytest.fixture
async def schema_url() -> AsyncIterator[str]:
    base = postgres_servers.run_database_url()
    schema = postgres_servers.fresh_schema("u")
    yield postgres_servers.with_schema(base, schema)
    await postgres_servers.drop_schema(base, schema)


@pytest.fixture
async def storage(schema_url: str) -> AsyncIterator[PostgresCheckpointStorage]:
    async with PostgresCheckpointStorage.from_url(schema_url) as opened:
        yield opened


# ---------------------------------------------------------------------- the kit


def test_scale_clauses_count_one_round_trip_per_walk_and_latest() -> None:
    # The whole kit runs through the CLI below; here the scale family gets a round-trip counter,
    # so "one round trip" is counted, not timed.
    base = postgres_servers.run_database_url()
    schema = postgres_servers.fresh_schema("scale")
    url = postgres_servers.with_schema(base, schema)
    root = PostgresCheckpointStorage.from_url(url)
    target = StorageTarget(
        name="postgresql", factory=root.new_handle, cleanup=root.aclose, round_trips=_statements
    )
    try:
        (backend,) = validate(target, clauses=["scale"]).backends
    finally:
        asyncio.run(postgres_servers.drop_schema(base, schema))
    assert not backend.error, backend.error
    outcomes = {r.clause_id: r.outcome for r in backend.results}
    assert set(outcomes.values()) == {Outcome.PASSED}, outcomes
    assert {"scale.walk_is_one_round_trip", "scale.latest_is_constant_cost"} <= set(outcomes)


@pytest.mark.parametrize("runner", [None, "maf", "langgraph"])
def test_cli_passes_against_the_real_server(runner: str | None) -> None:
    script = shutil.which("checkpoint-conformance", path=str(Path(sys.executable).parent))
    assert script is not None
    # Every clause of the kit (and the MAF and LangGraph runner families), from the URL exactly
    # as a user types it: the default schema of this run's database.
    url = postgres_servers.run_database_url().replace("postgresql://postgres@", "postgresql://")
    arguments = [script, url] + ([] if runner is None else ["--runner", runner])
    completed = subprocess.run(arguments, capture_output=True, text=True, check=False, timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "Every backend conforms" in completed.stdout


# ---------------------------------------------------------------------- faults on a private cluster


def test_fault_clauses_pass_on_a_private_cluster() -> None:
    faulty = postgres_servers.FaultyPostgres()
    try:
        target = faulty.target(postgres_servers.fresh_schema("faults"))
        (backend,) = validate(target, clauses=["faults"]).backends
        ours = {r.clause_id: r for r in backend.results if r.clause_id in FAULT_CLAUSES}
        for clause_id in (
            "faults.server_restart_keeps_acknowledged",
            "faults.connection_cut_whole_or_nothing",
        ):
            assert ours[clause_id].outcome is Outcome.PASSED, ours[clause_id].message
        assert faulty.proxy.cuts == 1
        assert isinstance(target.faults, postgres_servers.PostgresFaultInjector)
        assert target.faults.restarts == 1
    finally:
        faulty.stop()


async def test_a_save_cut_after_it_reached_the_server_is_retried_and_lands_once() -> None:
    faulty = postgres_servers.FaultyPostgres()
    try:
        url = postgres_servers.with_schema(faulty.url, "cut")
        async with PostgresCheckpointStorage.from_url(url) as storage:
            first = WorkflowCheckpoint("wf", "sig")
            await storage.save(first)
            child = WorkflowCheckpoint("child", "sig")
            state = {"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}}
            second = WorkflowCheckpoint("wf", "sig", previous_checkpoint_id=first.checkpoint_id, state=state)
            injector = postgres_servers.PostgresFaultInjector(faulty.cluster, faulty.proxy)
            async with injector.cut_connection_during_save():
                # The statement committed, its reply was lost: the retry finds the record stored.
                assert await storage.save(second) == second.checkpoint_id
            assert await storage.list_checkpoint_ids(workflow_name="wf") == [
                first.checkpoint_id,
                second.checkpoint_id,
            ]
            info = await storage.checkpoint_info(second.checkpoint_id)
            assert info is not None
            assert info.sequence == 2  # the retry took no second sequence number
            assert await storage.load(second.checkpoint_id) == second
    finally:
        faulty.stop()


# ---------------------------------------------------------------------- URLs and options


def test_both_schemes_open_the_storage_with_its_options() -> None:
    for scheme in ("postgresql", "postgres"):
        storage = open_storage(
            f"{scheme}://u:hunter2@db.example:6543/app?schema=mine&pool_size=3&sslmode=disable"
        )
        assert isinstance(storage, PostgresCheckpointStorage)
        assert storage.schema == "mine"
        assert storage.options.pool_size == 3
        assert storage.describe() == "postgresql://u@db.example:6543/app (schema 'mine')"
        assert "hunter2" not in repr(storage)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("schema=Bad-Name", "lower-case identifier"),
        ("pool_size=0", "pool_size must be an int >= 1"),
        ("pool_size=many", "pool_size must be int"),
        ("retries=-1", "retries must be an int >= 0"),
        ("colour=blue", "unknown option 'colour'"),
    ],
)
def test_bad_url_options_are_refused_by_name(query: str, message: str) -> None:
    with pytest.raises(StorageConfigurationError, match=message) as raised:
        open_storage(f"postgresql://u:hunter2@127.0.0.1/db?{query}")
    assert "hunter2" not in str(raised.value)


async def test_an_unreachable_server_is_a_typed_error_naming_the_operation() -> None:
    port = postgres_servers.free_port()
    storage = PostgresCheckpointStorage.from_url(f"postgresql://u:hunter2@127.0.0.1:{port}/db?retries=1")
    with pytest.raises(StorageUnavailableError, match="get_latest") as raised:
        await storage.get_latest(workflow_name="wf")
    assert "hunter2" not in str(raised.value)
    await storage.aclose()


# ---------------------------------------------------------------------- schema


async def test_a_schema_of_a_newer_version_is_refused(schema_url: str) -> None:
    async with PostgresCheckpointStorage.from_url(schema_url) as storage:
        await storage.save(WorkflowCheckpoint("wf", "sig"))
        schema = storage.schema
    base = schema_url.partition("?")[0]
    async with await psycopg.AsyncConnection.connect(base, autocommit=True) as connection:
        await connection.execute(f'UPDATE "{schema}".schema_version SET version = %s', (SCHEMA_VERSION + 1,))
    with pytest.raises(StorageConfigurationError, match=f"schema version {SCHEMA_VERSION + 1}, newer"):
        async with PostgresCheckpointStorage.from_url(schema_url) as storage:
            await storage.get_latest(workflow_name="wf")


async def test_a_foreign_schema_is_refused_untouched(schema_url: str) -> None:
    base = schema_url.partition("?")[0]
    schema = schema_url.rpartition("schema=")[2]
    async with await psycopg.AsyncConnection.connect(base, autocommit=True) as connection:
        await connection.execute(f'CREATE SCHEMA "{schema}"')
        await connection.execute(f'CREATE TABLE "{schema}".checkpoints (x int)')
    with pytest.raises(StorageConfigurationError, match="no schema_version table"):
        async with PostgresCheckpointStorage.from_url(schema_url) as storage:
            await storage.get_latest(workflow_name="wf")


async def test_concurrent_first_opens_migrate_once(schema_url: str) -> None:
    handles = [PostgresCheckpointStorage.from_url(schema_url) for _ in range(4)]
    await asyncio.gather(*(h.get_latest(workflow_name="wf") for h in handles))
    for handle in handles:
        await handle.aclose()


# ---------------------------------------------------------------------- injected pool or connection


async def test_an_injected_pool_and_connection_are_used_and_left_open(schema_url: str) -> None:
    base, _, _ = schema_url.partition("?")
    schema = schema_url.rpartition("schema=")[2]
    async with AsyncConnectionPool(base, kwargs={"autocommit": True}, min_size=1, max_size=2) as pool:
        storage = PostgresCheckpointStorage(pool=pool, schema=schema)
        checkpoint = WorkflowCheckpoint("wf", "sig")
        await storage.save(checkpoint)
        await storage.aclose()
        assert not pool.closed
        async with await psycopg.AsyncConnection.connect(base, autocommit=True) as connection:
            other = PostgresCheckpointStorage(connection=connection, schema=schema)
            assert await other.load(checkpoint.checkpoint_id) == checkpoint
            await other.aclose()
            assert not connection.closed


async def test_an_injected_connection_outside_autocommit_is_refused(schema_url: str) -> None:
    base = schema_url.partition("?")[0]
    async with await psycopg.AsyncConnection.connect(base) as connection:
        storage = PostgresCheckpointStorage(connection=connection)
        with pytest.raises(StorageConfigurationError, match="autocommit"):
            await storage.get_latest(workflow_name="wf")


# ---------------------------------------------------------------------- one round trip each


async def test_save_load_latest_and_walk_are_one_statement_each(storage: PostgresCheckpointStorage) -> None:
    child = WorkflowCheckpoint("child", "sig")
    first = WorkflowCheckpoint("wf", "sig")
    second = WorkflowCheckpoint(
        "wf",
        "sig",
        previous_checkpoint_id=first.checkpoint_id,
        state={"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}},
    )
    await storage.save(first)
    for operation in (
        lambda: storage.save(second),
        lambda: storage.load(second.checkpoint_id),
        lambda: storage.get_latest(workflow_name="wf"),
        lambda: storage.walk_ancestry(second.checkpoint_id),
    ):
        before = storage.statements_sent
        await operation()
        assert storage.statements_sent == before + 1


async def test_a_nested_id_already_stored_writes_nothing(storage: PostgresCheckpointStorage) -> None:
    taken = WorkflowCheckpoint("other", "sig")
    await storage.save(taken)
    clash = WorkflowCheckpoint(
        "wf", "sig", state={"_executor_state": {"s": {"sub_workflow_checkpoint": taken}}}
    )
    with pytest.raises(CheckpointConflictError, match=taken.checkpoint_id):
        await storage.save(clash)
    assert await storage.list_checkpoint_ids(workflow_name="wf") == []
