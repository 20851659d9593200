"""Saves of one workflow through one handle commit in the order save() was called, on a backend
whose inserts can overtake each other (a pool of connections with uneven latency)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from storages import WorkflowCheckpoint
from storages.backend import CheckpointRecord, InsertResult
from storages.engine import CheckpointStore
from storages.memory import MemoryBackend


class Overtaking(MemoryBackend):
    """The in-memory store behind inserts whose latency falls with each call, so that, started
    together, the last one called would commit first."""

    orders_inserts = False

    def __init__(self) -> None:
        super().__init__()
        self.started: list[str] = []
        self.block: dict[str, asyncio.Event] = {}

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        checkpoint_id = records[0].checkpoint_id
        self.started.append(checkpoint_id)
        for _ in range(max(0, 30 - 5 * len(self.started))):
            await asyncio.sleep(0)
        gate = self.block.get(checkpoint_id)
        if gate is not None:
            await gate.wait()
        return await super().insert(records)


def _checkpoints(workflow: str, count: int) -> list[WorkflowCheckpoint]:
    return [WorkflowCheckpoint(workflow, "sig", checkpoint_id=f"{workflow}-{n}") for n in range(count)]


async def test_saves_started_together_commit_in_call_order() -> None:
    storage = CheckpointStore(Overtaking())
    saved = _checkpoints("wf", 6)
    await asyncio.gather(*(storage.save(checkpoint) for checkpoint in saved))
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [c.checkpoint_id for c in saved]
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None
    assert latest.checkpoint_id == saved[-1].checkpoint_id


async def test_without_the_queue_the_backend_would_reorder_them() -> None:
    # The same backend behind a storage that skips the engine's queue: the check above can fail.
    backend = Overtaking()
    backend.orders_inserts = True  # type: ignore[misc]  # claims an order it does not keep
    storage = CheckpointStore(backend)
    saved = _checkpoints("wf", 6)
    await asyncio.gather(*(storage.save(checkpoint) for checkpoint in saved))
    assert await storage.list_checkpoint_ids(workflow_name="wf") != [c.checkpoint_id for c in saved]


async def test_other_workflows_do_not_wait_behind_a_stuck_save() -> None:
    backend = Overtaking()
    storage = CheckpointStore(backend)
    stuck = WorkflowCheckpoint("one", "sig", checkpoint_id="stuck")
    backend.block["stuck"] = asyncio.Event()
    first = asyncio.ensure_future(storage.save(stuck))
    await asyncio.sleep(0)
    # Another workflow's save goes through while "one" holds its turn.
    await storage.save(WorkflowCheckpoint("two", "sig", checkpoint_id="free"))
    queued = asyncio.ensure_future(storage.save(WorkflowCheckpoint("one", "sig", checkpoint_id="next")))
    for _ in range(50):
        await asyncio.sleep(0)
    assert "next" not in backend.started  # queued behind the stuck save of its workflow
    backend.block["stuck"].set()
    assert await first == "stuck"
    assert await queued == "next"
    assert await storage.list_checkpoint_ids(workflow_name="one") == ["stuck", "next"]


@pytest.mark.parametrize("where", ["waiting", "holding"])
async def test_a_cancelled_save_hands_its_turn_on(where: str) -> None:
    backend = Overtaking()
    storage = CheckpointStore(backend)
    backend.block["a"] = asyncio.Event()
    holder = asyncio.ensure_future(storage.save(WorkflowCheckpoint("wf", "sig", checkpoint_id="a")))
    waiter = asyncio.ensure_future(storage.save(WorkflowCheckpoint("wf", "sig", checkpoint_id="b")))
    last = asyncio.ensure_future(storage.save(WorkflowCheckpoint("wf", "sig", checkpoint_id="c")))
    for _ in range(40):
        await asyncio.sleep(0)
    if where == "waiting":
        waiter.cancel()
        backend.block["a"].set()
        assert await holder == "a"
        assert await last == "c"
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a", "c"]
    else:
        holder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await holder
        assert await waiter == "b"
        assert await last == "c"
        assert await storage.list_checkpoint_ids(workflow_name="wf") == ["b", "c"]


async def test_a_failed_save_hands_its_turn_on() -> None:
    storage = CheckpointStore(Overtaking())
    await storage.save(WorkflowCheckpoint("wf", "sig", checkpoint_id="a"))
    conflicting = WorkflowCheckpoint("wf", "sig", checkpoint_id="a", state={"other": 1})
    results = await asyncio.gather(
        storage.save(conflicting),
        storage.save(WorkflowCheckpoint("wf", "sig", checkpoint_id="b")),
        return_exceptions=True,
    )
    assert isinstance(results[0], Exception)
    assert results[1] == "b"
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a", "b"]
