"""SQLite backend specifics; the contract itself is checked by the conformance kit."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import linecache
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from storages import (
    AncestryEnd,
    CheckpointConflictError,
    CheckpointCorruptedError,
    StorageClosedError,
    StorageConfigurationError,
    StorageUnavailableError,
    StoreNotFoundError,
    WorkflowCheckpoint,
    open_storage,
)
from storages.backend import body_digest
from storages.codec import CheckpointCodec
from storages.sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteCheckpointStorage, lineage
from storages.sqlite.schema import (
    SELECT_LATEST,
    SELECT_LATEST_WITH_SIGNATURE,
    SELECT_RIVALS,
    SELECT_ROOT_RIVALS,
    WALK_IDS,
)

pytestmark = pytest.mark.sqlite

WORKER = Path(__file__).with_name("sqlite_worker.py")
PAUSE_BETWEEN_SAVES = 0.002
"""As between a workflow's supersteps. Writers saving back to back without pause starve each other:
SQLite's busy handler sleeps with backoff while the other process keeps taking the free lock."""


def checkpoint(workflow: str = "wf", **fields: object) -> WorkflowCheckpoint:
    fields.setdefault("graph_signature_hash", "sig")
    return WorkflowCheckpoint(workflow_name=workflow, **fields)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "nested" / "dir" / "checkpoints.db"


@pytest.fixture
async def storage(db_path: Path) -> AsyncIterator[SQLiteCheckpointStorage]:
    async with SQLiteCheckpointStorage(db_path) as opened:
        yield opened


def query(
    path: Path, sql: str, parameters: tuple[object, ...] | Mapping[str, object] = ()
) -> list[tuple[object, ...]]:
    """Rows read through a plain sqlite3 connection, bypassing the storage."""
    with closing(sqlite3.connect(path)) as connection:
        return connection.execute(sql, parameters).fetchall()


def sequences(path: Path, workflow: str) -> dict[str, int]:
    rows = query(path, "SELECT checkpoint_id, sequence FROM checkpoints WHERE workflow_name = ?", (workflow,))
    return {str(checkpoint_id): int(sequence) for checkpoint_id, sequence in rows}


@contextmanager
def write_lock_held(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holding the file's write lock."""
    with closing(sqlite3.connect(path, timeout=0.1, isolation_level=None)) as connection:
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        finally:
            if connection.in_transaction:
                connection.execute("ROLLBACK")


def connection_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread is not threading.main_thread()}


async def threads_after_closing(threads_before: set[threading.Thread]) -> set[threading.Thread]:
    """Threads started since ``threads_before`` still alive after a grace period.

    A closed connection's thread resolves its last future just before it returns, so it may be
    seen alive for a moment after aclose().
    """
    for _ in range(100):
        started = connection_threads() - threads_before
        if not started:
            break
        await asyncio.sleep(0.01)
    return started


# ---------------------------------------------------------------------- connection settings


async def test_wal_mode_and_busy_timeout_are_set(db_path: Path) -> None:
    async with SQLiteCheckpointStorage(db_path, busy_timeout_ms=1234) as storage:
        connection = storage.backend.connection
        assert connection is not None
        assert list(await connection.execute_fetchall("PRAGMA journal_mode")) == [("wal",)]
        assert list(await connection.execute_fetchall("PRAGMA busy_timeout")) == [(1234,)]
    assert query(db_path, "PRAGMA journal_mode") == [("wal",)]


async def test_default_busy_timeout_is_five_seconds(storage: SQLiteCheckpointStorage) -> None:
    assert storage.backend.connection is not None
    assert list(await storage.backend.connection.execute_fetchall("PRAGMA busy_timeout")) == [(5000,)]


async def test_parent_directories_are_created(db_path: Path, storage: SQLiteCheckpointStorage) -> None:
    await storage.save(checkpoint())
    assert query(db_path, "SELECT count(*) FROM checkpoints") == [(1,)]


async def test_new_handle_keeps_path_settings_and_codec(db_path: Path) -> None:
    storage = SQLiteCheckpointStorage(db_path, busy_timeout_ms=77)
    handle = storage.new_handle()
    assert handle is not storage
    assert (handle.path, handle.busy_timeout_ms, handle.codec) == (db_path, 77, storage.codec)
    async with storage, handle:
        saved = await storage.save(checkpoint())
        assert (await handle.load(saved)).checkpoint_id == saved


# ---------------------------------------------------------------------- schema


async def test_schema_version_is_recorded_and_reopening_is_idempotent(db_path: Path) -> None:
    async with SQLiteCheckpointStorage(db_path) as storage:
        saved = await storage.save(checkpoint())
    assert query(db_path, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    for _ in range(2):
        async with SQLiteCheckpointStorage(db_path) as storage:
            assert (await storage.load(saved)).checkpoint_id == saved
    assert query(db_path, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]


async def test_opening_a_current_file_needs_no_write_lock(db_path: Path) -> None:
    async with SQLiteCheckpointStorage(db_path) as storage:
        saved = await storage.save(checkpoint())
    with write_lock_held(db_path):
        async with SQLiteCheckpointStorage(db_path, busy_timeout_ms=0) as storage:
            assert (await storage.load(saved)).checkpoint_id == saved


async def test_handles_opening_a_new_file_together_all_open(tmp_path: Path) -> None:
    # Switching a new file to WAL takes an exclusive lock, and SQLite answers one of several
    # connections switching at once with SQLITE_BUSY without waiting: each round races twelve
    # first opens of a fresh file, and an open refused instead of retried fails most runs.
    for round_number in range(300):
        first = SQLiteCheckpointStorage(tmp_path / f"race-{round_number}.db")
        handles = [first, *(first.new_handle() for _ in range(11))]
        try:
            listed = await asyncio.gather(*(h.list_checkpoint_ids(workflow_name="w") for h in handles))
        finally:
            for handle in handles:
                await handle.aclose()
        assert listed == [[]] * len(handles)


async def test_file_with_a_newer_schema_is_refused(db_path: Path) -> None:
    async with SQLiteCheckpointStorage(db_path) as storage:
        await storage.save(checkpoint())
    with closing(sqlite3.connect(db_path)) as connection, connection:
        connection.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    threads_before = connection_threads()
    storage = SQLiteCheckpointStorage(db_path)
    with pytest.raises(StorageConfigurationError, match=f"schema version {SCHEMA_VERSION + 1}") as raised:
        await storage.list_checkpoint_ids(workflow_name="wf")
    assert str(db_path) in str(raised.value)
    assert not await threads_after_closing(threads_before), "a failed open left its connection thread running"
    await storage.aclose()


async def test_foreign_sqlite_file_is_refused(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    with closing(sqlite3.connect(db_path)) as connection:
        connection.execute("CREATE TABLE checkpoints (thread_id TEXT, data BLOB)")
    storage = SQLiteCheckpointStorage(db_path)
    with pytest.raises(StorageConfigurationError, match="not created by this storage"):
        await storage.save(checkpoint())
    await storage.aclose()
    assert query(db_path, "SELECT name FROM sqlite_master") == [("checkpoints",)]
    assert query(db_path, "PRAGMA journal_mode") == [("delete",)], "a refused file was changed"


# ---------------------------------------------------------------------- queries


@pytest.mark.parametrize(
    ("sql", "parameters", "index"),
    [
        (SELECT_LATEST, ("wf",), "checkpoints_by_kind_and_sequence"),
        (SELECT_LATEST_WITH_SIGNATURE, ("wf", "sig"), "checkpoints_top_by_signature"),
    ],
)
async def test_latest_is_one_indexed_search(
    db_path: Path, storage: SQLiteCheckpointStorage, sql: str, parameters: tuple[str, ...], index: str
) -> None:
    for _ in range(3):
        await storage.save(checkpoint())
    plan = " | ".join(str(row[-1]) for row in query(db_path, "EXPLAIN QUERY PLAN " + sql, parameters))
    assert f"USING INDEX {index}" in plan, plan
    assert "SCAN" not in plan, plan
    assert "TEMP B-TREE" not in plan, plan


async def test_sequence_stays_monotonic_after_deleting_the_newest(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    first, second = checkpoint(), checkpoint()
    await storage.save(first)
    await storage.save(second)
    assert await storage.delete(second.checkpoint_id)
    third = checkpoint()
    await storage.save(third)
    assert sequences(db_path, "wf") == {first.checkpoint_id: 1, third.checkpoint_id: 3}
    assert (await storage.get_latest(workflow_name="wf")).checkpoint_id == third.checkpoint_id
    for saved in (first, third):
        await storage.delete(saved.checkpoint_id)
    assert await storage.list_workflows() == []
    fourth = checkpoint()
    await storage.save(fourth)
    assert sequences(db_path, "wf") == {fourth.checkpoint_id: 4}
    assert await storage.list_workflows() == ["wf"]


async def test_a_save_finds_its_next_sequence_by_index_searches_and_writes_no_counter(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    from storages.sqlite import schema

    for _ in range(3):
        await storage.save(checkpoint())
    parameters = ("x", "wf", None, "sig", "", b"body", 0, None, None, 0)
    sql = "EXPLAIN QUERY PLAN " + schema.INSERT_CHECKPOINT
    plan = " | ".join(str(row[-1]) for row in query(db_path, sql, parameters))
    assert "SCAN checkpoints" not in plan, plan
    assert "TEMP B-TREE" not in plan, plan
    assert plan.count("COVERING INDEX checkpoints_by_kind_and_sequence (workflow_name=? AND nested=?)") == 2
    assert query(db_path, "SELECT count(*) FROM workflows") == [(0,)]


def test_a_save_inserts_from_values_without_a_temporary_copy_of_the_row() -> None:
    from storages.sqlite import schema

    with closing(sqlite3.connect(":memory:")) as connection:
        for step in MIGRATIONS:
            for statement in step:
                connection.execute(statement)
        parameters = ("x", "wf", None, "sig", "", b"body", 0, None, None, 0)
        plan = connection.execute("EXPLAIN " + schema.INSERT_CHECKPOINT, parameters)
        opcodes = [row[1] for row in plan]
    # INSERT ... SELECT from the table inserted into copies each row into an ephemeral table first.
    assert "OpenEphemeral" not in opcodes
    assert opcodes.count("SeekLE") == 2  # the largest sequence of each kind: one index step each


async def test_an_unkeyed_save_stores_no_digest_and_a_resave_compares_the_stored_bytes(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    saved = checkpoint(state={"n": 1})
    await storage.save(saved)
    assert query(db_path, "SELECT digest FROM checkpoints") == [("",)]
    assert await storage.save(saved) == saved.checkpoint_id
    with pytest.raises(CheckpointConflictError):
        await storage.save(dataclasses.replace(saved, state={"n": 2}))
    assert await storage.load(saved.checkpoint_id) == saved


@pytest.mark.parametrize("stored_digest", ["blake2b", "other"])
async def test_a_row_of_an_earlier_version_compares_by_its_bytes_on_resave(
    db_path: Path, stored_digest: str
) -> None:
    """Rows written before saves stopped hashing hold a blake2b digest (or, damaged, anything):
    a re-save of the same checkpoint is still a no-op and one of other content still conflicts."""
    first = checkpoint(state={"n": 1})
    version_3_file(db_path, [first], next_sequence=2)
    if stored_digest == "other":
        with closing(sqlite3.connect(db_path)) as connection:
            connection.execute("UPDATE checkpoints SET digest = 'not a digest'")
            connection.commit()
    else:
        body = CheckpointCodec().encode_checkpoint(first)
        assert query(db_path, "SELECT digest FROM checkpoints") == [(body_digest(body),)]
    async with SQLiteCheckpointStorage(db_path) as storage:
        assert await storage.save(first) == first.checkpoint_id
        with pytest.raises(CheckpointConflictError):
            await storage.save(dataclasses.replace(first, state={"n": 2}))
        with pytest.raises(CheckpointConflictError):
            await storage.save(dataclasses.replace(first, state={"n": 2}), expected_latest_id=None)
        assert await storage.save(first, expected_latest_id=first.checkpoint_id) == first.checkpoint_id
        assert await storage.get_latest(workflow_name="wf") == first
    assert sequences(db_path, "wf") == {first.checkpoint_id: 1}


async def test_a_resave_over_a_stored_value_that_is_not_a_blob_raises_a_typed_error(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    saved = checkpoint()
    await storage.save(saved)
    body = query(db_path, "SELECT body FROM checkpoints")[0][0]
    assert isinstance(body, bytes)
    with closing(sqlite3.connect(db_path)) as connection:  # the same bytes, as TEXT
        connection.execute("UPDATE checkpoints SET body = CAST(body AS TEXT)")
        connection.commit()
    with pytest.raises(CheckpointCorruptedError):
        await storage.save(saved)


async def test_deleting_a_family_keeps_the_high_water_mark_of_every_workflow_it_held(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    child = checkpoint("other")
    top = checkpoint(state={"child": child})
    await storage.save(top)
    assert sequences(db_path, "other") == {child.checkpoint_id: 1}
    assert await storage.delete(top.checkpoint_id)
    later = checkpoint("other")
    await storage.save(later)
    assert sequences(db_path, "other") == {later.checkpoint_id: 2}


async def test_a_version_3_file_keeps_its_counters_after_migrating(db_path: Path) -> None:
    first = checkpoint()
    version_3_file(db_path, [first], next_sequence=5)  # sequences 2 to 4 were deleted
    async with SQLiteCheckpointStorage(db_path) as storage:
        second = checkpoint(previous_checkpoint_id=first.checkpoint_id)
        await storage.save(second)
        assert await storage.get_latest(workflow_name="wf") == second
    assert sequences(db_path, "wf") == {first.checkpoint_id: 1, second.checkpoint_id: 5}
    assert query(db_path, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    indexes = {row[0] for row in query(db_path, "SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "checkpoints_top_by_sequence" not in indexes
    assert "checkpoints_by_kind_and_sequence" in indexes


async def test_idempotent_resave_takes_no_sequence(db_path: Path, storage: SQLiteCheckpointStorage) -> None:
    saved = checkpoint()
    await storage.save(saved)
    await storage.save(saved)
    later = checkpoint()
    await storage.save(later)
    assert sequences(db_path, "wf") == {saved.checkpoint_id: 1, later.checkpoint_id: 2}


async def test_racing_saves_of_one_id_store_it_once(db_path: Path, storage: SQLiteCheckpointStorage) -> None:
    other = storage.new_handle()
    async with other:
        same = checkpoint()
        results = await asyncio.gather(*(handle.save(same) for handle in (storage, other) * 10))
        assert results == [same.checkpoint_id] * 20
        assert sequences(db_path, "wf") == {same.checkpoint_id: 1}

        contested = "contested"
        outcomes = await asyncio.gather(
            storage.save(checkpoint(checkpoint_id=contested, state={"writer": 1})),
            other.save(checkpoint(checkpoint_id=contested, state={"writer": 2})),
            return_exceptions=True,
        )
    conflicts = [outcome for outcome in outcomes if isinstance(outcome, CheckpointConflictError)]
    assert len(conflicts) == 1, outcomes
    assert outcomes.count(contested) == 1, outcomes


# ---------------------------------------------------------------------- durability and sharing


async def test_checkpoints_persist_across_close_and_reopen(db_path: Path) -> None:
    chain = []
    async with SQLiteCheckpointStorage(db_path) as storage:
        previous = None
        for index in range(3):
            saved = checkpoint(previous_checkpoint_id=previous, iteration_count=index, state={"i": index})
            await storage.save(saved)
            chain.append(saved)
            previous = saved.checkpoint_id
    async with SQLiteCheckpointStorage(db_path) as reopened:
        assert await reopened.list_checkpoints(workflow_name="wf") == chain
        assert await reopened.get_latest(workflow_name="wf") == chain[-1]
        assert await reopened.load(chain[0].checkpoint_id) == chain[0]


@pytest.mark.slow
async def test_two_processes_write_one_file_concurrently(db_path: Path) -> None:
    count = 100
    async with SQLiteCheckpointStorage(db_path) as storage:
        await storage.list_checkpoint_ids(workflow_name="shared")  # create the schema before the race
        worker = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), "save", str(db_path), "shared", str(count), "child",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert worker.stdin is not None
        assert worker.stdout is not None
        assert await asyncio.wait_for(worker.stdout.readline(), 60) == b"ready\n"
        worker.stdin.write(b"go\n")
        await worker.stdin.drain()
        parent_ids = [f"parent-{index}" for index in range(count)]
        for index, checkpoint_id in enumerate(parent_ids):
            if index == count // 2:
                # Each side's second half waits for the other's first: whatever the load (one
                # process may get no CPU for a while), neither can finish before the other starts.
                assert await asyncio.wait_for(worker.stdout.readline(), 120) == b"half\n"
                worker.stdin.write(b"on\n")
                await worker.stdin.drain()
            await storage.save(checkpoint("shared", checkpoint_id=checkpoint_id, iteration_count=index))
            await asyncio.sleep(PAUSE_BETWEEN_SAVES)
        stdout, stderr = await asyncio.wait_for(worker.communicate(), 120)
        assert worker.returncode == 0, stderr.decode()
        assert stdout == b"done\n"
        assert b"locked" not in stderr

        listed = await storage.list_checkpoint_ids(workflow_name="shared")
        child_ids = [f"child-{index}" for index in range(count)]
        assert sorted(listed) == sorted(parent_ids + child_ids)
        # Each process's saves keep their commit order within the shared list.
        assert [i for i in listed if i.startswith("parent-")] == parent_ids
        assert [i for i in listed if i.startswith("child-")] == child_ids
        interleaved = sum(1 for a, b in itertools.pairwise(listed) if a[:5] != b[:5])
        latest = await storage.get_latest(workflow_name="shared")
    assert sorted(sequences(db_path, "shared").values()) == list(range(1, 2 * count + 1))
    assert latest is not None
    assert latest.checkpoint_id == listed[-1]
    assert latest.checkpoint_id in (parent_ids[-1], child_ids[-1])
    # At least twice by construction (each half waits for the other side's first half); more
    # when the two writers' saves really overlapped within a half, as they do unloaded.
    assert interleaved >= 2, "the two writers never overlapped; the test proved nothing"


# ---------------------------------------------------------------------- lifecycle


async def test_aclose_stops_the_connection_thread(db_path: Path) -> None:
    threads_before = connection_threads()
    storage = SQLiteCheckpointStorage(db_path)
    await storage.save(checkpoint())
    assert len(connection_threads() - threads_before) == 1
    await storage.aclose()
    assert not await threads_after_closing(threads_before)
    with pytest.raises(StorageClosedError):
        await storage.load("anything")


def test_process_exits_after_aclose(db_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, str(WORKER), "save-and-exit", str(db_path), "wf"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr.decode()
    assert finished.stdout == b"closed\n"
    assert query(db_path, "SELECT count(*) FROM checkpoints") == [(1,)]


def test_no_traceback_at_exit_while_a_daemon_thread_is_saving(db_path: Path) -> None:
    """The interpreter exits while a daemon thread's event loop is saving through a handle it
    never closed: the handle is released at exit, the saves already queued commit, and the
    thread is not woken to print a StorageClosedError traceback as the process ends."""
    root = Path(__file__).resolve().parents[1]  # this checkout's storages, not an installed one
    finished = subprocess.run(
        [sys.executable, str(WORKER), "exit-while-saving", str(db_path), "wf"],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    stderr = finished.stderr.decode()
    assert finished.returncode == 0, stderr
    assert finished.stdout == b"exiting\n"
    assert "Traceback" not in stderr, stderr
    assert "Exception in thread" not in stderr, stderr
    (saved,) = query(db_path, "SELECT count(*) FROM checkpoints")[0]
    assert saved >= 3


async def test_aclose_waits_for_an_operation_in_flight(db_path: Path) -> None:
    storage = SQLiteCheckpointStorage(db_path)
    await storage.list_workflows()
    saving = asyncio.ensure_future(storage.save(checkpoint()))
    await asyncio.sleep(0)
    await storage.aclose()
    await saving
    assert query(db_path, "SELECT count(*) FROM checkpoints") == [(1,)]


# ---------------------------------------------------------------------- URLs


def test_from_url_relative_path_is_relative_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    storage = SQLiteCheckpointStorage.from_url("sqlite:///sub/k.db", busy_timeout_ms=10)
    assert storage.path == tmp_path / "sub" / "k.db"
    assert storage.busy_timeout_ms == 10
    monkeypatch.chdir("/")
    assert storage.new_handle().path == tmp_path / "sub" / "k.db"


def test_from_url_absolute_path_and_describe_round_trip(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/k.db"
    assert url.startswith("sqlite:////")
    storage = open_storage(url)
    assert isinstance(storage, SQLiteCheckpointStorage)
    assert storage.path == tmp_path / "k.db"
    assert storage.describe() == url
    assert SQLiteCheckpointStorage.from_url(storage.describe()).path == storage.path


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://host/k.db", "names a host"),
        ("sqlite://", "no file path"),
        ("sqlite:///", "no file path"),
        ("sqlite:///:memory:", "memory://"),
        (
            "sqlite:///k.db?mode=ro",
            "unknown option .mode.; valid options: allowed_checkpoint_types, allowed_modules, "
            "busy_timeout_ms",
        ),
        ("sqlite:///k.db?busy_timeout_ms=soon", "busy_timeout_ms must be an int"),
        ("memory://", "Not a SQLite URL"),
    ],
)
def test_from_url_rejects_invalid_forms(url: str, message: str) -> None:
    with pytest.raises(StorageConfigurationError, match=message):
        SQLiteCheckpointStorage.from_url(url)


def test_constructor_rejects_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(StorageConfigurationError, match="memory://"):
        SQLiteCheckpointStorage(":memory:")
    with pytest.raises(StorageConfigurationError, match="non-empty"):
        SQLiteCheckpointStorage("")
    with pytest.raises(StorageConfigurationError, match="busy_timeout_ms"):
        SQLiteCheckpointStorage(tmp_path / "k.db", busy_timeout_ms=-1)


# ---------------------------------------------------------------------- errors


async def test_a_file_that_is_not_sqlite_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"this is not a database, just some text " * 100)
    threads_before = connection_threads()
    storage = SQLiteCheckpointStorage(path)
    with pytest.raises(StorageConfigurationError, match="not a SQLite database") as raised:
        await storage.get_latest(workflow_name="wf")
    assert str(path) in str(raised.value)
    assert not await threads_after_closing(threads_before)
    await storage.aclose()


async def test_an_unopenable_path_is_unavailable(tmp_path: Path) -> None:
    threads_before = connection_threads()
    storage = SQLiteCheckpointStorage(tmp_path)  # a directory
    with pytest.raises(StorageUnavailableError, match=str(tmp_path)):
        await storage.list_workflows()
    assert not await threads_after_closing(threads_before)
    await storage.aclose()


async def test_a_held_write_lock_past_busy_timeout_is_unavailable(db_path: Path) -> None:
    async with SQLiteCheckpointStorage(db_path, busy_timeout_ms=50) as storage:
        kept = checkpoint()
        await storage.save(kept)
        with write_lock_held(db_path):
            with pytest.raises(StorageUnavailableError, match="locked") as raised:
                await storage.save(checkpoint())
            assert raised.value.operation == "save"
            assert not isinstance(raised.value, sqlite3.Error)
            with pytest.raises(StorageUnavailableError, match="locked"):
                await storage.delete(kept.checkpoint_id)
            # WAL: readers are not blocked by another connection's write.
            assert await storage.list_checkpoint_ids(workflow_name="wf") == [kept.checkpoint_id]
        # The failed transactions were rolled back; the handle writes again.
        later = checkpoint()
        await storage.save(later)
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [
            kept.checkpoint_id,
            later.checkpoint_id,
        ]


async def test_cancelled_save_leaves_no_transaction_open(db_path: Path) -> None:
    async with SQLiteCheckpointStorage(db_path, busy_timeout_ms=10_000) as storage:
        await storage.list_workflows()
        with write_lock_held(db_path):
            saving = asyncio.ensure_future(storage.save(checkpoint()))
            await asyncio.sleep(0.2)  # the save now waits in BEGIN IMMEDIATE
            saving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await saving
        later = checkpoint()
        await storage.save(later)
        with write_lock_held(db_path):  # would raise "database is locked" if a transaction lingered
            pass
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [later.checkpoint_id]


# ---------------------------------------------------------------------- nested records, ancestry, prune


def version_1_file(path: Path, rows: list[WorkflowCheckpoint]) -> None:
    """A file as version 1 of the schema wrote it, holding ``rows`` chained in order."""
    codec = CheckpointCodec()
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path)) as connection:
        for statement in MIGRATIONS[0]:
            connection.execute(statement)
        connection.execute("CREATE TABLE schema_version (singleton INTEGER PRIMARY KEY, version INTEGER)")
        connection.execute("INSERT INTO schema_version VALUES (1, 1)")
        for sequence, row in enumerate(rows, start=1):
            body = codec.encode_checkpoint(row)
            connection.execute(
                "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    row.checkpoint_id,
                    row.workflow_name,
                    sequence,
                    row.previous_checkpoint_id,
                    row.graph_signature_hash,
                    body_digest(body),
                    body,
                ),
            )
        connection.execute("INSERT INTO workflows VALUES (?, ?)", ("wf", len(rows) + 1))
        connection.commit()


def version_3_file(path: Path, rows: list[WorkflowCheckpoint], *, next_sequence: int) -> None:
    """A file as version 3 of the schema wrote it: ``rows`` at sequences 1, 2, ... and the
    workflow's counter at ``next_sequence`` (which every version-3 save advanced)."""
    codec = CheckpointCodec()
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(path)) as connection:
        for step in MIGRATIONS[:3]:
            for statement in step:
                connection.execute(statement)
        connection.execute("CREATE TABLE schema_version (singleton INTEGER PRIMARY KEY, version INTEGER)")
        connection.execute("INSERT INTO schema_version VALUES (1, 3)")
        for sequence, row in enumerate(rows, start=1):
            body = codec.encode_checkpoint(row)
            connection.execute(
                "INSERT INTO checkpoints (checkpoint_id, workflow_name, sequence, previous_checkpoint_id,"
                " graph_signature_hash, digest, body) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    row.checkpoint_id,
                    row.workflow_name,
                    sequence,
                    row.previous_checkpoint_id,
                    row.graph_signature_hash,
                    body_digest(body),
                    body,
                ),
            )
        connection.execute("INSERT INTO workflows VALUES (?, ?)", ("wf", next_sequence))
        connection.commit()


async def test_a_version_1_file_is_migrated_with_its_checkpoints_intact(db_path: Path) -> None:
    first = checkpoint()
    second = checkpoint(previous_checkpoint_id=first.checkpoint_id)
    version_1_file(db_path, [first, second])
    async with SQLiteCheckpointStorage(db_path) as storage:
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [
            first.checkpoint_id,
            second.checkpoint_id,
        ]
        assert (await storage.walk_ancestry(second.checkpoint_id)).items == (second, first)
        third = checkpoint(previous_checkpoint_id=second.checkpoint_id)
        await storage.save(third)
        assert await storage.get_latest(workflow_name="wf") == third
    assert query(db_path, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert sequences(db_path, "wf")[third.checkpoint_id] == 3


async def test_nested_records_are_rows_of_their_own_deleted_with_their_root(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    leaf = checkpoint("leaf")
    middle = checkpoint("middle", state={"leaf": leaf})
    top = checkpoint(state={"_executor_state": {"sub": {"sub_workflow_checkpoint": middle}}})
    await storage.save(top)
    rows = query(
        db_path,
        "SELECT checkpoint_id, nested, container_id, root_id, position FROM checkpoints ORDER BY position",
    )
    assert rows == [
        (top.checkpoint_id, 0, None, None, 0),
        (middle.checkpoint_id, 1, top.checkpoint_id, top.checkpoint_id, 1),
        (leaf.checkpoint_id, 1, middle.checkpoint_id, top.checkpoint_id, 2),
    ]
    assert await storage.load(top.checkpoint_id) == top
    assert await storage.delete(top.checkpoint_id)
    assert query(db_path, "SELECT count(*) FROM checkpoints") == [(0,)]


async def test_a_family_with_a_taken_nested_id_writes_nothing(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    taken = checkpoint("other")
    await storage.save(taken)
    parent = checkpoint(state={"fresh": checkpoint("child"), "clash": dataclasses.replace(taken)})
    with pytest.raises(CheckpointConflictError, match=taken.checkpoint_id):
        await storage.save(parent)
    assert query(db_path, "SELECT checkpoint_id FROM checkpoints") == [(taken.checkpoint_id,)]
    # Nor did it take a sequence: the next save of its workflow gets the first.
    after = checkpoint()
    await storage.save(after)
    assert sequences(db_path, "wf") == {after.checkpoint_id: 1}


class StatementCounter:
    """Counts statements a connection runs, to prove an operation is one round trip."""

    def __init__(self, connection: Any) -> None:
        self.statements: list[str] = []
        self._original = connection.execute_fetchall

        async def counting(sql: str, *args: Any) -> Any:
            self.statements.append(" ".join(sql.split())[:60])
            return await self._original(sql, *args)

        connection.execute_fetchall = counting


@pytest.mark.parametrize("with_bodies", [False, True])
async def test_an_ancestry_walk_of_any_depth_is_one_statement(
    storage: SQLiteCheckpointStorage, with_bodies: bool
) -> None:
    previous = None
    for _ in range(300):
        saved = checkpoint(previous_checkpoint_id=previous, state={"sub": checkpoint("child")})
        await storage.save(saved)
        previous = saved.checkpoint_id
    assert previous is not None
    counter = StatementCounter(storage.backend.connection)
    walk = await (storage.walk_ancestry(previous) if with_bodies else storage.walk_ancestry_ids(previous))
    assert len(walk.items) == 300
    assert walk.end is AncestryEnd.ROOT
    assert len(counter.statements) == 1, counter.statements


async def test_a_cycle_ends_the_recursive_query_without_the_depth_limit(
    storage: SQLiteCheckpointStorage,
) -> None:
    await storage.save(checkpoint(checkpoint_id="a", previous_checkpoint_id="b"))
    await storage.save(checkpoint(checkpoint_id="b", previous_checkpoint_id="a"))
    rows = await storage.backend.connection.execute_fetchall(WALK_IDS, {"start": "a", "max_depth": 1_000_000})
    assert [row[0] for row in rows] == ["a", "b"]
    walk = await storage.walk_ancestry_ids("a")
    assert (walk.items, walk.end, walk.end_id) == (("a", "b"), AncestryEnd.CYCLE, "a")


async def test_prune_tombstones_the_whole_family_in_one_transaction(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    child = checkpoint("child")
    old = checkpoint(state={"sub": child})
    new = checkpoint(previous_checkpoint_id=old.checkpoint_id)
    await storage.save(old)
    await storage.save(new)
    assert await storage.prune(workflow_name="wf", keep_last=1) == 1
    assert query(
        db_path, "SELECT checkpoint_id, workflow_name FROM tombstones ORDER BY checkpoint_id"
    ) == sorted([(old.checkpoint_id, "wf"), (child.checkpoint_id, "wf")])
    assert query(db_path, "SELECT checkpoint_id FROM checkpoints") == [(new.checkpoint_id,)]
    walk = await storage.walk_ancestry_ids(new.checkpoint_id)
    assert (walk.end, walk.end_id) == (AncestryEnd.PRUNED, old.checkpoint_id)


async def _synchronous_pragma(storage: SQLiteCheckpointStorage) -> int:
    assert storage.backend.connection is not None
    rows = list(await storage.backend.connection.execute_fetchall("PRAGMA synchronous"))
    return int(rows[0][0])


async def test_synchronous_is_full_unless_normal_is_asked_for(db_path: Path) -> None:
    async with SQLiteCheckpointStorage(db_path) as full:
        assert full.synchronous == "full"
        assert await _synchronous_pragma(full) == 2
        async with full.new_handle() as same:
            assert await _synchronous_pragma(same) == 2
    url = f"sqlite:///{db_path}?synchronous=normal"
    async with SQLiteCheckpointStorage.from_url(url) as normal:
        assert normal.synchronous == "normal"
        assert await _synchronous_pragma(normal) == 1
        saved = await normal.save(checkpoint())
        assert (await normal.load(saved)).checkpoint_id == saved
        async with normal.new_handle() as same:
            assert await _synchronous_pragma(same) == 1
    async with SQLiteCheckpointStorage(db_path, synchronous="NORMAL") as keyword:
        assert keyword.synchronous == "normal"


def test_an_unknown_synchronous_mode_is_refused_naming_the_option(db_path: Path) -> None:
    with pytest.raises(StorageConfigurationError, match=r"must be one of full, normal, got 'off'"):
        SQLiteCheckpointStorage(db_path, synchronous="off")  # type: ignore[arg-type]
    with pytest.raises(StorageConfigurationError, match=r"SQLite URL .*synchronous"):
        SQLiteCheckpointStorage.from_url(f"sqlite:///{db_path}?synchronous=extra")


async def test_a_save_is_one_hand_off_to_the_connection_thread(db_path: Path) -> None:
    async with SQLiteCheckpointStorage(db_path) as storage:
        await storage.save(checkpoint())
        connection = storage.backend.connection
        assert connection is not None
        before = connection.handoffs
        await storage.save(checkpoint())
        assert connection.handoffs - before == 1
        await storage.list_checkpoint_ids(workflow_name="wf")
        assert connection.handoffs - before == 2  # the counter sees reads too: it can fail


async def test_the_partial_nested_indexes_serve_every_lookup_of_nested_rows(db_path: Path) -> None:
    from storages.sqlite import schema

    async with SQLiteCheckpointStorage(db_path):
        pass
    with sqlite3.connect(db_path) as connection:

        def plan(sql: str, parameters: object) -> str:
            return " | ".join(
                str(row[-1]) for row in connection.execute("EXPLAIN QUERY PLAN " + sql, parameters)
            )

        assert "INDEX checkpoints_by_container (container_id=?)" in plan(schema.SELECT_CHILDREN, {"id": "a"})
        for sql, parameters in (
            (schema.DELETE_FAMILY, ("a", "a")),
            (schema.TOMBSTONE_FAMILY, ("wf", "a", "a")),
            (schema.SELECT_NESTED_BODIES, ('["a"]',)),
            (schema.WALK_WITH_BODIES, {"start": "a", "max_depth": 5}),
        ):
            assert "INDEX checkpoints_by_root (root_id=?)" in plan(sql, parameters), sql
        definitions = dict(connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    assert "WHERE container_id IS NOT NULL" in definitions["checkpoints_by_container"]
    assert "WHERE root_id IS NOT NULL" in definitions["checkpoints_by_root"]


async def test_concurrent_saves_on_one_handle_commit_in_groups_each_refused_alone(db_path: Path) -> None:
    async with SQLiteCheckpointStorage(db_path) as storage:
        await storage.save(checkpoint())
        connection = storage.backend.connection
        assert connection is not None
        handoffs_before = connection.handoffs
        batch = [checkpoint() for _ in range(32)]
        nested_clash = WorkflowCheckpoint(
            "wf",
            "sig",
            state={"child": WorkflowCheckpoint("wf", "sig", checkpoint_id=batch[0].checkpoint_id)},
        )
        results = await asyncio.gather(
            *(storage.save(item) for item in [*batch, nested_clash]), return_exceptions=True
        )
        assert results[:32] == [item.checkpoint_id for item in batch]
        assert isinstance(results[32], CheckpointConflictError)
        assert connection.handoffs - handoffs_before < 32  # group commits: far fewer hand-offs than saves
        stored = await storage.list_checkpoint_ids(workflow_name="wf")
        assert stored[-32:] == [item.checkpoint_id for item in batch]
        assert nested_clash.checkpoint_id not in stored


# ------------------------------------------------------- a file removed under the handle


def _remove_directory(path: Path) -> None:
    shutil.rmtree(path.parent)


def _unlink_file(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _replace_file(path: Path) -> None:
    other = path.with_name("other.db")
    with closing(sqlite3.connect(other)) as connection:
        connection.execute("CREATE TABLE t (x)")
    other.replace(path)


def _rename_file(path: Path) -> None:
    path.rename(path.with_name("moved.db"))


@pytest.mark.parametrize("vanish", [_remove_directory, _unlink_file, _replace_file, _rename_file])
async def test_a_write_to_a_file_no_longer_at_its_path_is_refused(tmp_path: Path, vanish: Any) -> None:
    path = tmp_path / "sub" / "checkpoints.db"
    async with SQLiteCheckpointStorage(path) as storage:
        kept = checkpoint()
        await storage.save(kept)  # the control: reachable, acknowledged
        vanish(path)
        lost = checkpoint(previous_checkpoint_id=kept.checkpoint_id)
        # Before the check, this save (and the writes below) was acknowledged into a file no
        # one could open again.
        with pytest.raises(StorageUnavailableError, match="no longer the file this handle opened") as refused:
            await storage.save(lost)
        assert str(path) in str(refused.value)
        assert refused.value.operation == "save"
        concurrent = await asyncio.gather(
            *(storage.save(checkpoint()) for _ in range(3)), return_exceptions=True
        )  # one group commit, one check: every save refused
        assert all(isinstance(outcome, StorageUnavailableError) for outcome in concurrent)
        for write in (
            storage.save(checkpoint(), expected_latest_id=kept.checkpoint_id),  # a fenced save
            storage.delete(kept.checkpoint_id),
            storage.prune(workflow_name="wf", keep_last=1),
            storage.delete_workflow(workflow_name="wf"),
        ):
            with pytest.raises(StorageUnavailableError, match="no longer the file"):
                await write


async def test_the_file_identity_check_is_one_stat_per_write_transaction(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import storages.sqlite.client as client_module

    async with SQLiteCheckpointStorage(db_path) as storage:
        await storage.save(checkpoint())  # opened (one stat of the path at open)
        stats: list[object] = []
        real_stat = os.stat

        def counting_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            stats.append(path)
            return real_stat(path, *args, **kwargs)

        monkeypatch.setattr(client_module.os, "stat", counting_stat)
        await asyncio.gather(*(storage.save(checkpoint()) for _ in range(5)))
        first_groups = len(stats)
        assert 1 <= first_groups <= 5  # one per group commit, however many saves it holds
        await storage.list_workflows()  # reads are not checked
        assert len(stats) == first_groups
        assert all(Path(path) == db_path for path in stats)


# ------------------------------------------------------- read-only handles and media


async def _stored_file(path: Path) -> list[WorkflowCheckpoint]:
    chain = [checkpoint(), checkpoint()]
    async with SQLiteCheckpointStorage(path) as writer:
        for saved in chain:
            await writer.save(saved)
    return chain


def _untouched(path: Path) -> tuple[list[str], bytes]:
    return sorted(entry.name for entry in path.parent.iterdir()), path.read_bytes()


@pytest.mark.parametrize("access", [{"read_only": True}, {"immutable": True}])
async def test_a_read_only_handle_reads_and_refuses_every_write(
    db_path: Path, access: dict[str, bool]
) -> None:
    chain = await _stored_file(db_path)
    before = _untouched(db_path)
    async with SQLiteCheckpointStorage(db_path, **access) as reader:
        assert reader.read_only
        assert (await reader.load(chain[0].checkpoint_id)).checkpoint_id == chain[0].checkpoint_id
        latest = await reader.get_latest(workflow_name="wf")
        assert latest is not None
        assert latest.checkpoint_id == chain[-1].checkpoint_id
        for write in (
            reader.save(checkpoint()),
            reader.save(checkpoint(), expected_latest_id=chain[-1].checkpoint_id),
            reader.delete(chain[0].checkpoint_id),
            reader.prune(workflow_name="wf", keep_last=1),
            reader.delete_workflow(workflow_name="wf"),
        ):
            with pytest.raises(StorageConfigurationError, match="opened read-only"):
                await write
        assert reader.new_handle().read_only  # a new handle keeps the access
    files, body = _untouched(db_path)
    assert body == before[1]  # the database file is byte for byte the same
    if access.get("immutable"):
        assert files == before[0]  # immutable=1: not even a -wal or -shm file was made


async def test_a_read_only_handle_neither_creates_nor_migrates_a_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent" / "checkpoints.db"
    reader = SQLiteCheckpointStorage(missing, read_only=True)
    with pytest.raises(StoreNotFoundError, match="no such file"):
        await reader.list_workflows()
    await reader.aclose()
    assert not missing.parent.exists()
    old = tmp_path / "old.db"
    version_3_file(old, [checkpoint()], next_sequence=1)
    reader = SQLiteCheckpointStorage(old, immutable=True)
    with pytest.raises(StorageConfigurationError, match="cannot migrate"):
        await reader.list_workflows()
    await reader.aclose()


def test_read_only_and_immutable_come_from_the_url(tmp_path: Path) -> None:
    base = f"sqlite:///{tmp_path}/x.db"
    assert not SQLiteCheckpointStorage.from_url(base).read_only
    assert SQLiteCheckpointStorage.from_url(base + "?read_only=true").read_only
    assert SQLiteCheckpointStorage.from_url(base + "?immutable=1").read_only
    with pytest.raises(StorageConfigurationError, match="read_only must be true or false"):
        SQLiteCheckpointStorage.from_url(base + "?read_only=maybe")


def test_inspect_and_verify_read_an_immutable_url_writing_nothing(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from storages.tools.cli.main import main

    asyncio.run(_stored_file(db_path))
    before = _untouched(db_path)
    url = f"sqlite:///{db_path}?immutable=true"
    assert main(["inspect", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["verify", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]
    assert _untouched(db_path) == before  # no -wal, no -shm, the same bytes


def test_inspect_and_verify_run_on_a_read_only_mount(db_path: Path) -> None:
    """A real read-only file system (tests run as root, which file permissions do not stop): a
    read-only bind mount of the file's directory in a private mount namespace (unshare -m)."""
    asyncio.run(_stored_file(db_path))
    directory = db_path.parent
    for url, command in (
        (f"sqlite:///{db_path}?immutable=true", "inspect"),
        (f"sqlite:///{db_path}?immutable=true", "verify"),
    ):
        script = (
            f"mount --bind {directory} {directory} && mount -o remount,bind,ro {directory} && "
            f"! touch {directory}/probe 2>/dev/null && "
            f"{sys.executable} -m storages.tools.cli.main {command} '{url}' --json"
        )
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)
    # Without immutable=true (mode=ro), SQLite needs a -shm file it cannot create there: a typed
    # error that says what to do, and nothing written.
    script = (
        f"mount --bind {directory} {directory} && mount -o remount,bind,ro {directory} && "
        f"{sys.executable} -m storages.tools.cli.main inspect 'sqlite:///{db_path}'"
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "?immutable=true" in done.stderr


def _held_by_connection_thread(storage: SQLiteCheckpointStorage) -> list[object]:
    """What the connection's thread still holds of its last call while it waits for the next:
    the locals of its serving loop, and what any function among them closes over (and what a
    future among those answered)."""
    assert storage.backend.connection is not None
    thread = storage.backend.connection.thread
    # The answer reaches the loop just before the thread returns from the call: wait (a state,
    # not a time) until the thread is back in its queue's get(), its innermost frame the loop's.
    for _ in range(10_000):
        frame = sys._current_frames()[thread.ident or 0]
        if frame.f_code.co_name == "_serve" and "calls.get()" in linecache.getline(
            frame.f_code.co_filename, frame.f_lineno
        ):
            break
        time.sleep(0.001)
    else:
        raise AssertionError("the connection's thread never went back to waiting for a call")
    held = list(frame.f_locals.values())
    cells = [
        cell.cell_contents
        for value in held
        if callable(value)
        for cell in getattr(value, "__closure__", None) or ()
    ]
    answered = [
        cell.result()
        for cell in cells
        if isinstance(cell, asyncio.Future) and cell.done() and not cell.cancelled() and not cell.exception()
    ]
    return [*held, *cells, *answered]


async def test_the_connection_thread_keeps_nothing_of_a_read_or_a_save_for_its_next_call(
    storage: SQLiteCheckpointStorage,
) -> None:
    # A list of many records left on the thread was freed there at the start of the next call,
    # holding the GIL while that call's caller waited: a save after a list took milliseconds.
    saved = [checkpoint(state={"n": index}) for index in range(50)]
    for record in saved:
        await storage.save(record)
    assert len(await storage.list_checkpoints(workflow_name="wf")) == 50
    held = _held_by_connection_thread(storage)
    assert all(not value for value in held if isinstance(value, list)), held
    await storage.save(checkpoint(state={"n": "after the list"}))
    held = _held_by_connection_thread(storage)
    assert all(not value for value in held if isinstance(value, list)), held


# ---------------------------------------------------------------------- rivals (parallel steps)


def stamped(previous: WorkflowCheckpoint | None, second: int) -> WorkflowCheckpoint:
    """A checkpoint of "wf" continuing ``previous`` (a root if None), built at ``second``."""
    return checkpoint(
        previous_checkpoint_id=None if previous is None else previous.checkpoint_id,
        timestamp=f"2026-01-01T00:00:{second:02d}+00:00",
    )


async def _latest_and_handoffs(storage: SQLiteCheckpointStorage) -> tuple[WorkflowCheckpoint, int]:
    connection = storage.backend.connection
    assert connection is not None
    before = connection.handoffs
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None
    return latest, connection.handoffs - before


async def test_get_latest_resumes_from_the_rival_built_last(storage: SQLiteCheckpointStorage) -> None:
    prepare = stamped(None, 0)
    built_last, built_first = stamped(prepare, 3), stamped(prepare, 2)
    for saved in (prepare, built_last, built_first):  # the sibling built last commits first
        await storage.save(saved)
    latest, handoffs = await _latest_and_handoffs(storage)
    assert latest == built_last
    assert handoffs == 1  # head and rivals read in one transaction, in one hand-off
    alone = stamped(built_first, 4)
    await storage.save(alone)
    latest, handoffs = await _latest_and_handoffs(storage)
    assert latest == alone
    assert handoffs == 1  # no rival, no successor: the same one hand-off


async def test_prune_keeps_the_head_and_its_rivals(db_path: Path, storage: SQLiteCheckpointStorage) -> None:
    root = stamped(None, 0)
    prepare = stamped(root, 1)
    siblings = [stamped(prepare, second) for second in (5, 3, 4)]
    abandoned = stamped(root, 2)  # a leaf, but it continues the root, not what the head continues
    for saved in (root, prepare, abandoned, *siblings):
        await storage.save(saved)
    assert await storage.prune(workflow_name="wf", keep_last=1) == 3
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [s.checkpoint_id for s in siblings]
    assert await storage.get_latest(workflow_name="wf") == siblings[0]
    tombstoned = {row[0] for row in query(db_path, "SELECT checkpoint_id FROM tombstones")}
    assert tombstoned == {root.checkpoint_id, prepare.checkpoint_id, abandoned.checkpoint_id}
    assert await storage.prune(workflow_name="wf", keep_last=0) == 3


async def test_prune_keeps_as_many_others_as_asked_past_the_head_and_its_rivals(
    storage: SQLiteCheckpointStorage,
) -> None:
    chain = [stamped(None, 0)]
    for second in range(1, 4):
        chain.append(stamped(chain[-1], second))
    rival, head = stamped(chain[-1], 9), stamped(chain[-1], 8)
    for saved in (*chain, rival, head):
        await storage.save(saved)
    assert await storage.prune(workflow_name="wf", keep_last=3) == 2  # head, rival, two others
    kept = [chain[2].checkpoint_id, chain[3].checkpoint_id, rival.checkpoint_id, head.checkpoint_id]
    assert await storage.list_checkpoint_ids(workflow_name="wf") == kept
    assert await storage.prune(workflow_name="wf", keep_last=3) == 0


async def test_the_rival_probes_search_the_successor_index_only(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    await storage.save(checkpoint())
    for sql, parameters in (
        (SELECT_LATEST, ("wf",)),
        (SELECT_RIVALS, {"head": "h", "previous": "p", "signature": "sig", "workflow": "wf", "limit": 64}),
    ):
        plan = " | ".join(str(row[-1]) for row in query(db_path, "EXPLAIN QUERY PLAN " + sql, parameters))
        assert "SEARCH r USING INDEX checkpoints_by_successor" in plan, plan
        assert "SCAN checkpoints" not in plan, plan
        assert "SCAN r" not in plan, plan


async def test_a_root_heads_rivals_are_a_bounded_step_back_in_commit_order(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    await storage.save(checkpoint())
    parameters = {"head": "h", "signature": "sig", "workflow": "wf", "limit": 64}
    for sql, arguments in ((SELECT_LATEST, ("wf",)), (SELECT_ROOT_RIVALS, parameters)):
        plan = " | ".join(str(row[-1]) for row in query(db_path, "EXPLAIN QUERY PLAN " + sql, arguments))
        step_back = "(workflow_name=? AND nested=? AND sequence<?)"
        assert f"SEARCH r USING INDEX checkpoints_by_kind_and_sequence {step_back}" in plan, plan
        assert "SCAN checkpoints" not in plan, plan
        assert "SCAN r" not in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # rows come newest first as fetched: no sort reads them all


async def _traced_latest(
    storage: SQLiteCheckpointStorage, trace: list[str]
) -> tuple[WorkflowCheckpoint | None, list[str]]:
    """get_latest of "wf" and the first word of each statement it ran (``trace`` is the
    storage's statement_trace list)."""
    trace.clear()
    latest = await storage.get_latest(workflow_name="wf")
    return latest, [sql.split()[0] for sql in trace]


async def test_parallel_first_steps_resume_from_the_root_built_last_in_one_transaction(db_path: Path) -> None:
    trace: list[str] = []
    async with SQLiteCheckpointStorage(db_path, statement_trace=trace.append) as storage:
        built_second, built_last, built_first = stamped(None, 2), stamped(None, 3), stamped(None, 1)
        for saved in (built_second, built_last, built_first):  # each step's save is its own task
            await storage.save(saved)
        latest, handoffs = await _latest_and_handoffs(storage)
        assert latest == built_last
        assert handoffs == 1
        assert await _traced_latest(storage, trace) == (built_last, ["BEGIN", "SELECT", "SELECT", "COMMIT"])
        assert await storage.latest_id(workflow_name="wf") == built_first.checkpoint_id  # the head


async def test_a_root_after_anything_but_a_leaf_root_reads_no_rivals(db_path: Path) -> None:
    trace: list[str] = []
    async with SQLiteCheckpointStorage(db_path, statement_trace=trace.append) as storage:
        first_run = stamped(None, 9)
        await storage.save(first_run)
        await storage.save(stamped(first_run, 9))
        new_run = stamped(None, 1)  # the root before it is continued: no rival, whatever the clock
        await storage.save(new_run)
        assert await _traced_latest(storage, trace) == (new_run, ["BEGIN", "SELECT", "COMMIT"])
        continued = stamped(new_run, 2)  # the common case: a previous id, no successor, no sibling
        await storage.save(continued)
        assert await _traced_latest(storage, trace) == (continued, ["BEGIN", "SELECT", "COMMIT"])


async def test_reading_a_root_heads_rivals_stops_at_the_row_that_ends_them(db_path: Path) -> None:
    histories = {"short": 3, "long": 60}  # both under RIVALS_LIMIT rows back, read whole by a LIMIT alone
    async with SQLiteCheckpointStorage(db_path) as storage:
        for workflow, length in histories.items():
            previous = None
            for _ in range(length):
                saved = checkpoint(workflow, previous_checkpoint_id=previous)
                await storage.save(saved)
                previous = saved.checkpoint_id
            for second in (2, 1):
                await storage.save(checkpoint(workflow, timestamp=f"2026-01-01T00:00:0{second}+00:00"))
    steps = dict.fromkeys(histories, 0)
    with closing(sqlite3.connect(db_path, isolation_level=None)) as connection:
        lineage.latest_rows(connection, "short", None)  # reads the schema and prepares the statements
        for workflow in histories:

            def count(workflow: str = workflow) -> int:
                steps[workflow] += 1
                return 0

            connection.set_progress_handler(count, 1)
            read = lineage.latest_rows(connection, workflow, None)
            assert read is not None
            assert len(read[1]) == 1, workflow
    assert steps["short"] == steps["long"], steps  # SQLite virtual machine steps: the same work


async def test_prune_keeps_a_root_head_and_the_leaf_roots_committed_right_before_it(
    db_path: Path, storage: SQLiteCheckpointStorage
) -> None:
    earlier_run = stamped(None, 50)
    earlier_step = stamped(earlier_run, 51)
    roots = [stamped(None, second) for second in (2, 3, 1)]
    for saved in (earlier_run, earlier_step, *roots):
        await storage.save(saved)
    assert await storage.prune(workflow_name="wf", keep_last=1) == 2
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [r.checkpoint_id for r in roots]
    assert await storage.get_latest(workflow_name="wf") == roots[1]
    tombstoned = {row[0] for row in query(db_path, "SELECT checkpoint_id FROM tombstones")}
    assert tombstoned == {earlier_run.checkpoint_id, earlier_step.checkpoint_id}
