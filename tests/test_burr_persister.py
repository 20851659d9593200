"""Our Burr persisters' own promises beyond Burr's cases: the latest completed step, retries after
a failed step, a stale run fenced, forks, calls from a running loop, typed errors, no pickle."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from burr.core import ApplicationBuilder, State, action
from conftest import StorageMaker

from storages import open_storage
from storages.contract import WorkflowCheckpoint
from storages.errors import (
    CheckpointCorruptedError,
    CheckpointTamperedError,
    InvalidCheckpointError,
    InvalidCheckpointIdError,
    StaleWriterError,
)
from storages.runners.burr import AsyncStorageStatePersister, StorageStatePersister, workflow_for

pytestmark = pytest.mark.burr


@pytest.fixture
def pair(storage_maker: StorageMaker) -> Iterator[tuple[StorageStatePersister, StorageStatePersister]]:
    """Two persisters on one store, each with a handle of its own (two workers)."""
    first, second = StorageStatePersister(storage_maker()), StorageStatePersister(storage_maker())
    try:
        yield first, second
    finally:
        first.cleanup()
        second.cleanup()


def _step(
    persister: StorageStatePersister, sequence_id: int, status: str = "completed", app: str = "app"
) -> None:
    persister.save("pk", app, sequence_id, f"action-{sequence_id}", State({"n": sequence_id}), status)


def test_latest_is_the_latest_completed_step_and_a_failed_step_can_be_retried(
    pair: tuple[StorageStatePersister, StorageStatePersister],
) -> None:
    worker, reader = pair
    _step(worker, 0)
    _step(worker, 1, "failed")
    loaded = reader.load("pk", "app")
    assert loaded is not None
    assert (loaded["sequence_id"], loaded["status"]) == (0, "completed")
    _step(reader, 1, "failed")  # the retry fails again: a record of its own, not a conflict
    _step(reader, 1)  # and then completes
    loaded = worker.load("pk", "app")
    assert loaded is not None
    assert (loaded["sequence_id"], loaded["status"], loaded["state"]["n"]) == (1, "completed", 1)
    assert reader.load("pk", "app", 1)["status"] == "completed"  # type: ignore[index]


def test_a_stale_worker_is_refused_and_stores_nothing(
    pair: tuple[StorageStatePersister, StorageStatePersister],
) -> None:
    run_a, run_b = pair
    _step(run_a, 0)
    _step(run_a, 1)
    assert run_b.load("pk", "app")["sequence_id"] == 1  # type: ignore[index]  # B resumes the app
    _step(run_b, 2)
    _step(run_b, 3)
    with pytest.raises(StaleWriterError) as refused:
        _step(run_a, 2)  # A's late save of the step B already took
    assert refused.value.workflow_name == workflow_for("pk", "app")
    with pytest.raises(StaleWriterError):
        _step(run_a, 2, "failed")  # a record of its own (no id in common with B's): only the fence stops it
    loaded = run_b.load("pk", "app")
    assert loaded is not None
    assert loaded["sequence_id"] == 3
    _step(run_b, 4)


def test_a_run_superseded_on_a_shared_persister_is_refused(storage_maker: StorageMaker) -> None:
    with StorageStatePersister(storage_maker()) as persister:
        _step(persister, 0)
        _step(persister, 1)  # run A is dropped here, mid-step 2
        assert persister.load("pk", "app")["sequence_id"] == 1  # type: ignore[index]  # run B resumes
        _step(persister, 2)
        _step(persister, 3)
        with pytest.raises(StaleWriterError):
            _step(persister, 2)  # A's late save
        assert persister.load("pk", "app")["sequence_id"] == 3  # type: ignore[index]


def test_a_persister_that_never_read_the_app_must_follow_its_latest(
    pair: tuple[StorageStatePersister, StorageStatePersister],
) -> None:
    first, fresh = pair
    _step(first, 0)
    _step(first, 1)
    with pytest.raises(StaleWriterError):
        _step(fresh, 5)
    with pytest.raises(StaleWriterError):
        _step(fresh, 0)  # a new run over an app with history it never read
    _step(fresh, 2)
    assert first.load("pk", "app")["sequence_id"] == 2  # type: ignore[index]


@action(reads=["count"], writes=["count"])
def count(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
    return {}, state.update(count=state["count"] + 1)


FLAKY = {"fail": False}


@action(reads=["count"], writes=["count"])
def flaky(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
    if FLAKY["fail"]:
        raise RuntimeError("flaky failed")
    return {}, state.update(count=state["count"] * 10)


def _app(persister: Any, app_id: str, **initialize: Any) -> Any:
    return (
        ApplicationBuilder()
        .with_actions(count=count, flaky=flaky)
        .with_transitions(("count", "flaky"), ("flaky", "count"))
        .initialize_from(
            persister,
            resume_at_next_action=True,
            default_state={"count": 0},
            default_entrypoint="count",
            **initialize,
        )
        .with_state_persister(persister)
        .with_identifiers(app_id=app_id, partition_key="pk")
        .build()
    )


def test_burr_retries_a_failed_step_after_the_latest_completed_one(
    storage_maker: StorageMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    with StorageStatePersister(storage_maker()) as persister:
        app = _app(persister, "flaky-app")
        app.step()  # count: 1 (sequence 0)
        monkeypatch.setitem(FLAKY, "fail", True)
        with pytest.raises(RuntimeError, match="flaky failed"):
            app.step()  # Burr saves sequence 1 as failed, with the state before the step
    monkeypatch.setitem(FLAKY, "fail", False)
    with StorageStatePersister(storage_maker()) as persister:
        loaded = persister.load("pk", "flaky-app")
        assert loaded is not None
        assert (loaded["sequence_id"], loaded["position"], loaded["status"]) == (0, "count", "completed")
        resumed = _app(persister, "flaky-app")
        action, _, state = resumed.step()
        assert (action.name, state["count"]) == ("flaky", 10)
        loaded = persister.load("pk", "flaky-app")
        assert loaded is not None
        assert (loaded["sequence_id"], loaded["status"], loaded["state"]["count"]) == (1, "completed", 10)


def test_a_fork_continues_another_app_from_a_step(storage_maker: StorageMaker) -> None:
    with StorageStatePersister(storage_maker()) as persister:
        source = _app(persister, "source")
        for _ in range(4):
            source.step()
        fork = _app(
            persister,
            "fork",
            fork_from_app_id="source",
            fork_from_partition_key="pk",
            fork_from_sequence_id=1,
        )
        assert fork.state["count"] == 10
        fork.step()
        assert persister.load("pk", "fork")["state"]["count"] == 11  # type: ignore[index]
        assert persister.load("pk", "source")["sequence_id"] == 3  # type: ignore[index]
        assert persister.list_app_ids("pk") == ["fork", "source"]


async def test_the_sync_persister_works_under_a_running_loop(storage_maker: StorageMaker) -> None:
    """Burr's sync application run from a coroutine: every storage call is on the persister's loop."""
    with StorageStatePersister(storage_maker()) as persister:
        app = _app(persister, "in-loop")
        app.step()
        await asyncio.sleep(0)
        app.step()
        assert persister.load("pk", "in-loop")["state"]["count"] == 10  # type: ignore[index]


class Opaque:
    """A value Burr's serde has no serializer for."""

    def __str__(self) -> str:
        return "opaque"


async def test_state_is_stored_as_burr_serializes_it(storage_maker: StorageMaker) -> None:
    """Burr's own serialization (its default turns an unknown value into its str, as Burr's
    persisters store it), carried by our codec: what is stored is plain values, never a pickle."""
    async with storage_maker() as storage:
        persister = AsyncStorageStatePersister(storage)
        await persister.save("pk", "app", 0, "a", State({"thing": Opaque(), "items": [1, 2]}), "completed")
        (stored,) = await storage.list_checkpoints(workflow_name=workflow_for("pk", "app"))
        assert stored.state["state"] == {"thing": "opaque", "items": [1, 2]}
        loaded = await persister.load("pk", "app")
        assert loaded is not None
        assert loaded["state"].get_all() == {"thing": "opaque", "items": [1, 2]}


def test_bad_input_is_refused_by_name(storage_maker: StorageMaker) -> None:
    with StorageStatePersister(storage_maker()) as persister:
        with pytest.raises(InvalidCheckpointError, match="sequence_id"):
            persister.save("pk", "app", -1, "a", State({}), "completed")
        with pytest.raises(InvalidCheckpointIdError, match="app_id"):
            persister.save("pk", "", 0, "a", State({}), "completed")
        with pytest.raises(InvalidCheckpointError, match="status"):
            persister.save("pk", "app", 0, "a", State({}), None)  # type: ignore[arg-type]
        assert persister.load("pk", "app") is None
        assert persister.list_app_ids("pk") == []


async def test_a_foreign_record_under_an_app_is_reported_corrupted(storage_maker: StorageMaker) -> None:
    async with storage_maker() as storage:
        await storage.save(WorkflowCheckpoint(workflow_for("pk", "app"), "burr", state={"not": "a step"}))
        persister = AsyncStorageStatePersister(storage)
        with pytest.raises(CheckpointCorruptedError, match="not a Burr step"):
            await persister.load("pk", "app")


@pytest.mark.sqlite
async def test_a_keyed_store_refuses_a_tampered_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURR_KEY", "11" * 32)
    url = f"sqlite:///{tmp_path}/keyed.db?integrity_key_env=BURR_KEY"
    with StorageStatePersister(url) as persister:
        persister.save("pk", "app", 0, "a", State({"n": 0}), "completed")
        persister.save("pk", "app", 1, "b", State({"n": 1}), "completed")
    async with open_storage(url) as storage:
        first, second = await storage.list_checkpoint_ids(workflow_name=workflow_for("pk", "app"))
        await storage.write_raw_body(second, await storage.read_raw_body(first))  # type: ignore[arg-type]
    with StorageStatePersister(url) as persister, pytest.raises(CheckpointTamperedError):
        persister.load("pk", "app")
