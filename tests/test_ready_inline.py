"""The hot operations check an open handle inline instead of awaiting ``_ready``
(engine/storage.py, ``_is_ready``). What that path must still do: call a backend's own
``_ready`` on every operation, name the operation for a translated driver error, refuse a closed
handle, and follow a new event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storages import InMemoryCheckpointStorage, WorkflowCheckpoint
from storages.contract import PendingWrite
from storages.engine.primitives import current_operation
from storages.errors import StorageClosedError, StorageUnavailableError

pytestmark = pytest.mark.memory


def checkpoint(checkpoint_id: str) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="sig", checkpoint_id=checkpoint_id)


class CountingReady(InMemoryCheckpointStorage):
    """A backend extending ``_ready`` (as Redis does): it must run before every operation."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.readied: list[str] = []

    async def _ready(self, operation: str) -> None:
        await super()._ready(operation)
        self.readied.append(operation)


class DriverFailure(Exception):
    pass


class FailingLatest(InMemoryCheckpointStorage):
    driver_errors = (DriverFailure,)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> Any:
        raise DriverFailure(current_operation("none"))

    async def _insert(self, record: Any) -> str | None:
        raise DriverFailure(current_operation("none"))


async def test_an_extended_ready_runs_for_every_hot_operation() -> None:
    storage = CountingReady()
    assert not CountingReady._engine_ready
    assert InMemoryCheckpointStorage._engine_ready
    await storage.save(checkpoint("a"))
    await storage.save(checkpoint("b"))
    await storage.load("a")
    await storage.get_latest(workflow_name="wf")
    await storage.list_checkpoints(workflow_name="wf")
    await storage.put_writes("a", [PendingWrite("t", 0, "c", 1)], workflow_name="wf")
    await storage.list_writes("a", workflow_name="wf")
    await storage.list_workflow_writes(workflow_name="wf")
    assert storage.readied == [
        "save",
        "save",
        "load",
        "get_latest",
        "list_checkpoints",
        "put_writes",
        "list_writes",
        "list_workflow_writes",
    ]


async def test_an_open_handle_names_each_operation_in_driver_errors() -> None:
    storage = FailingLatest()
    with pytest.raises(StorageUnavailableError) as caught:
        await storage.save(checkpoint("a"))  # opens: _ready's path
    assert caught.value.operation == "save"
    with pytest.raises(StorageUnavailableError) as caught:
        await storage.get_latest(workflow_name="wf")  # open: the inline path
    assert caught.value.operation == "get_latest"
    assert "get_latest" in str(caught.value)
    with pytest.raises(StorageUnavailableError) as caught:
        await storage.save(checkpoint("b"))
    assert caught.value.operation == "save"
    with pytest.raises(StorageUnavailableError) as caught:
        await storage.put_writes("a", [PendingWrite("t", 0, "c", 1)], workflow_name="wf")
    assert caught.value.operation == "put_writes"


async def test_an_open_handle_refuses_every_hot_operation_once_closed() -> None:
    storage = InMemoryCheckpointStorage()
    await storage.save(checkpoint("a"))
    await storage.aclose()
    operations = {
        "save": lambda: storage.save(checkpoint("b")),
        "load": lambda: storage.load("a"),
        "get_latest": lambda: storage.get_latest(workflow_name="wf"),
        "list_checkpoints": lambda: storage.list_checkpoints(workflow_name="wf"),
        "put_writes": lambda: storage.put_writes("a", [PendingWrite("t", 0, "c", 1)], workflow_name="wf"),
        "list_writes": lambda: storage.list_writes("a", workflow_name="wf"),
        "list_workflow_writes": lambda: storage.list_workflow_writes(workflow_name="wf"),
    }
    for name, operation in operations.items():
        with pytest.raises(StorageClosedError) as caught:
            await operation()
        assert caught.value.operation == name


def test_a_handle_used_from_a_new_loop_follows_it() -> None:
    followed: list[asyncio.AbstractEventLoop] = []

    class Following(InMemoryCheckpointStorage):
        async def follow_loop(self) -> None:
            followed.append(asyncio.get_running_loop())

    storage = Following()
    asyncio.run(storage.save(checkpoint("a")))
    assert followed == []
    asyncio.run(storage.save(checkpoint("b")))
    assert len(followed) == 1
    assert asyncio.run(storage.load("b")).checkpoint_id == "b"
    assert len(followed) == 2
