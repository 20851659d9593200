"""The latest rule's rivals on every backend (docs/contract.md, "Latest"): what only a timestamp
decides, and what it never decides. Each backend's own file checks what its read costs."""

from __future__ import annotations

from typing import Any

from storages import WorkflowCheckpoint


def stamped(previous: WorkflowCheckpoint | None, second: int) -> WorkflowCheckpoint:
    """A checkpoint of "wf" continuing ``previous`` (a root if None), built at ``second``."""
    return WorkflowCheckpoint(
        "wf",
        "sig",
        previous_checkpoint_id=None if previous is None else previous.checkpoint_id,
        timestamp=f"2026-01-01T00:00:{second:02d}+00:00",
    )


async def test_a_sibling_with_a_continuation_is_no_rival(storage: Any) -> None:
    prepare = stamped(None, 0)
    continued = stamped(prepare, 5)
    following = stamped(continued, 1)  # an older timestamp than the head: never a candidate
    head = stamped(prepare, 2)
    for saved in (prepare, continued, following, head):
        await storage.save(saved)
    assert await storage.get_latest(workflow_name="wf") == head


async def test_roots_rival_until_one_is_continued(storage: Any) -> None:
    built_last, committed_last = stamped(None, 3), stamped(None, 2)
    await storage.save(built_last)
    await storage.save(committed_last)
    assert await storage.get_latest(workflow_name="wf") == built_last  # parallel first steps
    continued = stamped(built_last, 1)
    await storage.save(continued)
    assert await storage.get_latest(workflow_name="wf") == continued
    next_run = stamped(None, 0)  # a root after a checkpoint with a previous id rivals nothing
    await storage.save(next_run)
    assert await storage.get_latest(workflow_name="wf") == next_run


async def test_equal_timestamps_resume_from_the_head(storage: Any) -> None:
    prepare = stamped(None, 0)
    first, head = stamped(prepare, 2), stamped(prepare, 2)
    for saved in (prepare, first, head):
        await storage.save(saved)
    assert await storage.get_latest(workflow_name="wf") == head


async def test_successors_saved_before_their_parent_are_followed_to_the_one_committed_last(
    storage: Any,
) -> None:
    # The newest record's successors can be older than it: a run that saves each step's checkpoint
    # as it finishes may commit a continuation before the checkpoint it continues. The walk then
    # follows the successor committed last (b), never the first (a), whatever the clocks say.
    prepare = stamped(None, 0)
    late_parent = stamped(prepare, 1)
    first, last = stamped(late_parent, 2), stamped(late_parent, 3)
    after_first, after_last = stamped(first, 9), stamped(last, 4)
    for saved in (prepare, first, last, after_first, after_last, late_parent):
        await storage.save(saved)
    assert await storage.get_latest(workflow_name="wf") == after_last
