"""A fenced handle under a runner that saves several checkpoints at once (docs/contract.md,
"Writer fencing"): MAF's functional workflows save each completed step as a task of its own, so
parallel steps save siblings (checkpoints continuing the same one), and a later step continues
whichever sibling's save returned last. Through one ``FencedStorage`` they all commit, fenced on
the handle's own last commit; a save of any other writer in between still refuses the next one,
and a fork's line leaves the run it superseded off it.

The shared ``storage`` / ``storage_maker`` fixtures run each test once per backend (conftest.py).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from conftest import StorageMaker

from storages import CheckpointStore, FencedStorage, StaleWriterError, WorkflowCheckpoint, fencing

SIBLINGS = 3


def checkpoint(**fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="sig", **fields)


def after(previous: WorkflowCheckpoint, **fields: Any) -> WorkflowCheckpoint:
    return checkpoint(
        previous_checkpoint_id=previous.checkpoint_id, iteration_count=previous.iteration_count + 1, **fields
    )


def siblings(previous: WorkflowCheckpoint) -> list[WorkflowCheckpoint]:
    return [after(previous, state={"step": index}) for index in range(SIBLINGS)]


async def latest_id(storage: Any) -> str | None:
    latest = await storage.get_latest(workflow_name="wf")
    return None if latest is None else str(latest.checkpoint_id)


class Gated:
    """MAF's save in front of a handle: each save waits at its checkpoint's gate before it
    reaches the handle, so opening the gates in some order makes the saves reach it, and commit,
    in that order, whatever order they were started in."""

    def __init__(self, handle: FencedStorage) -> None:
        self.handle = handle
        self.gates: dict[str, asyncio.Event] = {}

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        await self.gates.setdefault(checkpoint.checkpoint_id, asyncio.Event()).wait()
        return await self.handle.save(checkpoint)

    async def save_all(self, checkpoints: list[WorkflowCheckpoint], order: tuple[int, ...]) -> list[str]:
        """Start every save as a task of its own (as MAF does), then let them through in ``order``."""
        tasks = [asyncio.ensure_future(self.save(saved)) for saved in checkpoints]
        await asyncio.sleep(0)  # every save is now waiting at its gate
        for index in order:
            self.gates.setdefault(checkpoints[index].checkpoint_id, asyncio.Event()).set()
        return list(await asyncio.gather(*tasks))


class LosesAnswers:
    """A storage whose next save commits but loses its answer (``lose_after_commit``), or is
    lost before it reaches the store (``lose_before_commit``)."""

    def __init__(self, inner: CheckpointStore) -> None:
        self.inner = inner
        self.lose_after_commit = False
        self.lose_before_commit = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def save(self, checkpoint: Any, **options: Any) -> str:
        if self.lose_before_commit:
            self.lose_before_commit = False
            raise ConnectionResetError("the request was lost")
        saved: str = await self.inner.save(checkpoint, **options)
        if self.lose_after_commit:
            self.lose_after_commit = False
            raise ConnectionResetError("the answer was lost")
        return saved


@pytest.mark.parametrize("order", list(itertools.permutations(range(SIBLINGS))))
async def test_parallel_siblings_through_one_fenced_handle_all_commit_in_any_order(
    storage: CheckpointStore, order: tuple[int, ...]
) -> None:
    handle = storage.fenced()
    prepared = checkpoint()
    await handle.save(prepared)
    steps = siblings(prepared)
    saved = await Gated(handle).save_all(steps, order)
    assert saved == [step.checkpoint_id for step in steps]
    committed = [steps[index].checkpoint_id for index in order]
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [prepared.checkpoint_id, *committed]


async def test_a_step_continuing_a_sibling_that_was_not_committed_last_commits(
    storage: CheckpointStore,
) -> None:
    handle = storage.fenced()
    prepared = checkpoint()
    await handle.save(prepared)
    first, second = siblings(prepared)[:2]
    await handle.save(first)
    await handle.save(second)
    # The first sibling's save returned last to the runner, which continues it.
    finish = after(first)
    await handle.save(finish)
    assert await latest_id(storage) == finish.checkpoint_id


async def test_a_sibling_reaching_the_handle_after_a_later_step_commits(storage: CheckpointStore) -> None:
    """Delayed in front of the handle, a sibling can arrive after a step that continued another
    sibling and a step after that: it continues the handle's line, so it commits."""
    handle = storage.fenced()
    prepared = checkpoint()
    await handle.save(prepared)
    left = after(prepared)
    await handle.save(left)
    right, late = after(left, state={"step": "right"}), after(left, state={"step": "middle"})
    await handle.save(right)
    continued = after(right)
    await handle.save(continued)
    assert await handle.save(late) == late.checkpoint_id


async def test_a_foreign_writers_save_between_two_siblings_refuses_the_next(
    storage_maker: StorageMaker,
) -> None:
    async with storage_maker() as one, storage_maker() as two:
        handle, other_run = one.fenced(), two.fenced()
        prepared = checkpoint()
        await handle.save(prepared)
        first, second, third = siblings(prepared)
        await handle.save(first)
        await handle.save(second)
        restored = await other_run.load(prepared.checkpoint_id)
        foreign = after(restored, state={"run": "other"})
        await other_run.save(foreign)  # a fork: the latest it saw at the restore is still the head
        with pytest.raises(StaleWriterError) as refused:
            await handle.save(third)
        assert refused.value.expected_latest_id == second.checkpoint_id
        assert refused.value.actual_latest_id == foreign.checkpoint_id
        with pytest.raises(StaleWriterError):
            await handle.save(after(second))
        assert await latest_id(one) == foreign.checkpoint_id


async def test_a_fresh_runs_entry_between_two_siblings_refuses_the_next(storage: CheckpointStore) -> None:
    handle = storage.fenced()
    prepared = checkpoint()
    await handle.save(prepared)
    first, second, third = siblings(prepared)
    await handle.save(first)
    await handle.save(second)
    entry = checkpoint(state={"run": "fresh"})
    await storage.save(entry)
    with pytest.raises(StaleWriterError) as refused:
        await handle.save(third)
    assert refused.value.actual_latest_id == entry.checkpoint_id


async def test_a_shared_handle_keeps_the_superseded_run_off_the_forks_line(storage: CheckpointStore) -> None:
    """One handle for every run: A's parallel steps continue ``prepared``; B restores
    ``prepared`` and saves parallel steps of its own, which all commit; A's late step, which
    continues one of A's siblings (on A's line, not on the line B's fork began), is refused."""
    shared = storage.fenced()
    prepared = checkpoint()
    await shared.save(prepared)
    a_first, a_second, _ = siblings(prepared)
    await shared.save(a_first)
    await shared.save(a_second)
    restored = await shared.load(prepared.checkpoint_id)
    b_steps = siblings(restored)
    await Gated(shared).save_all(b_steps, (2, 0, 1))
    with pytest.raises(StaleWriterError) as refused:
        await shared.save(after(a_first))
    assert refused.value.actual_latest_id == b_steps[1].checkpoint_id
    b_finish = after(b_steps[0])
    await shared.save(b_finish)
    assert await latest_id(storage) == b_finish.checkpoint_id


async def test_a_retried_sibling_whose_answer_was_lost_after_it_committed_returns_its_id(
    storage: CheckpointStore,
) -> None:
    loses = LosesAnswers(storage)
    handle = FencedStorage(loses)
    prepared = checkpoint()
    await handle.save(prepared)
    first, second, third = siblings(prepared)
    await handle.save(first)
    loses.lose_after_commit = True
    with pytest.raises(ConnectionResetError):
        await handle.save(second)
    assert await handle.save(second) == second.checkpoint_id  # the retry finds it the head
    await handle.save(third)
    assert await handle.save(second) == second.checkpoint_id  # a re-save of its own commit
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [
        prepared.checkpoint_id,
        first.checkpoint_id,
        second.checkpoint_id,
        third.checkpoint_id,
    ]


async def test_a_retried_sibling_whose_request_was_lost_commits(storage: CheckpointStore) -> None:
    loses = LosesAnswers(storage)
    handle = FencedStorage(loses)
    prepared = checkpoint()
    await handle.save(prepared)
    first, second, third = siblings(prepared)
    await handle.save(first)
    loses.lose_before_commit = True
    with pytest.raises(ConnectionResetError):
        await handle.save(second)
    await handle.save(third)
    await handle.save(second)
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [
        prepared.checkpoint_id,
        first.checkpoint_id,
        third.checkpoint_id,
        second.checkpoint_id,
    ]


async def test_a_workflow_whose_line_was_dropped_begins_a_new_one(
    storage: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past LINES_KEPT workflows, the line of the one saved longest ago is dropped: its next save
    is fenced on its previous id, and begins a new line its siblings continue."""
    monkeypatch.setattr(fencing, "LINES_KEPT", 1)
    handle = storage.fenced()
    prepared = checkpoint()
    await handle.save(prepared)
    first, second = siblings(prepared)[:2]
    await handle.save(first)
    await handle.save(WorkflowCheckpoint(workflow_name="other", graph_signature_hash="sig"))
    with pytest.raises(StaleWriterError) as refused:
        await handle.save(second)  # off every line: fenced on the checkpoint it continues
    assert refused.value.expected_latest_id == prepared.checkpoint_id
    continued = after(first)
    await handle.save(continued)  # fenced on ``first``, the head: it begins a new line
    sibling = after(first, state={"step": "sibling"})
    assert await handle.save(sibling) == sibling.checkpoint_id
