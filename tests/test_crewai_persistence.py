"""StorageFlowPersistence's own promises beyond CrewAI's cases: commit-order latest, a stale run
fenced, calls from a running loop, typed errors, no pickle, integrity keys, CrewAI's rebuild."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import runner_env  # noqa: F401 - before crewai
from conftest import StorageMaker
from crewai.flow.flow import Flow, FlowState, listen, start
from crewai.flow.persistence import persist
from pydantic import Field

from storages import open_storage
from storages.contract import WorkflowCheckpoint
from storages.errors import (
    CheckpointCorruptedError,
    CheckpointTamperedError,
    InvalidCheckpointIdError,
    StaleWriterError,
    StorageConfigurationError,
    UnserializableValueError,
)
from storages.runners.crewai import StorageFlowPersistence, workflow_for

pytestmark = pytest.mark.crewai


class Steps(FlowState):
    done: list[str] = Field(default_factory=list)


@pytest.fixture
def adapters(storage_maker: StorageMaker) -> Iterator[tuple[StorageFlowPersistence, StorageFlowPersistence]]:
    """Two adapters on one store, each with a handle (and a loop) of its own: two processes."""
    first, second = StorageFlowPersistence(storage_maker()), StorageFlowPersistence(storage_maker())
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def test_latest_is_the_last_save_whichever_adapter_made_it(
    adapters: tuple[StorageFlowPersistence, StorageFlowPersistence],
) -> None:
    one, other = adapters
    one.save_state("flow-1", "a", {"id": "flow-1", "n": 1})
    assert other.load_state("flow-1") == {"id": "flow-1", "n": 1}
    other.save_state("flow-1", "b", {"id": "flow-1", "n": 2})
    assert one.load_state("flow-1") == {"id": "flow-1", "n": 2}
    one.save_state("flow-1", "c", {"id": "flow-1", "n": 3})
    assert other.load_state("flow-1") == {"id": "flow-1", "n": 3}


def test_a_stale_run_is_refused_and_stores_nothing(
    adapters: tuple[StorageFlowPersistence, StorageFlowPersistence],
) -> None:
    run_a, run_b = adapters
    run_a.save_state("flow-2", "step_1", {"id": "flow-2", "by": "a1"})
    assert run_b.load_state("flow-2") == {"id": "flow-2", "by": "a1"}  # B takes the flow over
    run_b.save_state("flow-2", "step_2", {"id": "flow-2", "by": "b2"})
    with pytest.raises(StaleWriterError) as refused:
        run_a.save_state("flow-2", "step_2", {"id": "flow-2", "by": "a2-late"})
    assert refused.value.workflow_name == workflow_for("flow-2")
    assert run_b.load_state("flow-2") == {"id": "flow-2", "by": "b2"}
    run_b.save_state("flow-2", "step_3", {"id": "flow-2", "by": "b3"})  # B goes on untroubled
    assert run_a.load_state("flow-2") == {"id": "flow-2", "by": "b3"}


def test_a_flow_run_superseded_by_another_fails_its_next_save(storage_maker: StorageMaker) -> None:
    """Through CrewAI: run A's late save fails the run (CrewAI raises on a refused save)."""
    handles = [StorageFlowPersistence(storage_maker()) for _ in range(2)]
    late: list[Any] = []

    def make(persistence: StorageFlowPersistence, on_first: Any = None) -> type[Flow[Steps]]:
        @persist(persistence)
        class Work(Flow[Steps]):
            @start()
            def first(self) -> None:
                self.state.done.append("first")

            @listen(first)
            def second(self) -> None:
                if on_first is not None:
                    on_first(self.state.id)
                self.state.done.append("second")

        return Work

    def successor_takes_over(flow_id: str) -> None:
        late.append(flow_id)
        make(handles[1])(persistence=handles[1]).kickoff(inputs={"id": flow_id})

    try:
        run_a = make(handles[0], successor_takes_over)(persistence=handles[0])
        with pytest.raises(RuntimeError, match="State persistence failed"):
            run_a.kickoff()
        assert handles[1].load_state(late[0])["done"] == ["first", "first", "second"]
    finally:
        for handle in handles:
            handle.close()


async def test_a_flow_run_on_a_running_loop_saves_and_loads(storage_maker: StorageMaker) -> None:
    """kickoff_async runs the flow on this test's loop; the adapter's calls never touch it."""
    persistence = StorageFlowPersistence(storage_maker())
    try:

        @persist(persistence)
        class Async(Flow[Steps]):
            @start()
            async def first(self) -> None:
                await asyncio.sleep(0)
                self.state.done.append("first")

            @listen(first)
            def second(self) -> None:
                self.state.done.append("second")

        flow = Async(persistence=persistence)
        await flow.kickoff_async()
        assert persistence.load_state(flow.state.id)["done"] == ["first", "second"]
        again = Async(persistence=persistence)
        await again.kickoff_async(inputs={"id": flow.state.id})
        assert persistence.load_state(flow.state.id)["done"] == ["first", "second"] * 2
    finally:
        persistence.close()


class Opaque:
    """A value with no JSON form."""


def test_state_without_a_json_form_is_refused_by_name(storage_maker: StorageMaker) -> None:
    with StorageFlowPersistence(storage_maker()) as persistence:
        with pytest.raises(UnserializableValueError) as refused:
            persistence.save_state("flow-3", "m", {"id": "flow-3", "thing": Opaque()})
        assert refused.value.path == "state_data"
        assert persistence.load_state("flow-3") is None
        with pytest.raises(InvalidCheckpointIdError):
            persistence.save_state("", "m", {"id": ""})


async def test_a_foreign_record_under_a_flow_is_reported_corrupted(storage_maker: StorageMaker) -> None:
    async with storage_maker() as storage:
        await storage.save(WorkflowCheckpoint(workflow_for("flow-4"), "crewai", state={"not": "a flow"}))
        with (
            StorageFlowPersistence(storage) as persistence,
            pytest.raises(CheckpointCorruptedError, match="not a CrewAI flow state"),
        ):
            persistence.load_state("flow-4")
        await storage.save(
            WorkflowCheckpoint(
                workflow_for("flow-5"),
                "crewai",
                state={"flow_uuid": "other", "method_name": "m", "state": {}, "pending": None},
            )
        )
        with (
            StorageFlowPersistence(storage) as persistence,
            pytest.raises(CheckpointCorruptedError, match="stored for flow 'other'"),
        ):
            persistence.load_state("flow-5")


@pytest.mark.sqlite
async def test_a_keyed_store_refuses_a_tampered_flow_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOW_KEY", "00" * 32)
    url = f"sqlite:///{tmp_path}/keyed.db?integrity_key_env=FLOW_KEY"
    with StorageFlowPersistence(url) as persistence:
        persistence.save_state("flow-6", "a", {"id": "flow-6", "n": 1})
        persistence.save_state("flow-6", "b", {"id": "flow-6", "n": 2})
    async with open_storage(url) as storage:
        first, second = await storage.list_checkpoint_ids(workflow_name=workflow_for("flow-6"))
        await storage.write_raw_body(second, await storage.read_raw_body(first))  # type: ignore[arg-type]
    with StorageFlowPersistence(url) as persistence, pytest.raises(CheckpointTamperedError):
        persistence.load_state("flow-6")


@pytest.mark.sqlite
def test_crewai_rebuilds_the_adapter_from_its_serialized_form(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/flows.db"
    with StorageFlowPersistence(url) as persistence:
        persistence.save_state("flow-7", "a", {"id": "flow-7"})
        dumped = persistence.model_dump(mode="json")
    assert dumped == {"persistence_type": "StorageFlowPersistence", "url": url}
    rebuilt = StorageFlowPersistence.model_validate(dumped)
    try:
        assert rebuilt.load_state("flow-7") == {"id": "flow-7"}
    finally:
        rebuilt.close()


@pytest.mark.memory
def test_an_adapter_needs_a_storage() -> None:
    with pytest.raises(StorageConfigurationError, match="needs a storage URL or a storage"):
        StorageFlowPersistence()
