"""isolation: objects handed in and out are copies; the store never aliases caller state.

MAF's runner keeps using a checkpoint's dicts after saving it and mutates restored state, so a
storage that keeps or hands out shared objects silently rewrites history. Every clause here
changes an object in place, nested containers included, and reads again.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext


def _rich_checkpoint(ctx: ClauseContext, workflow: str) -> Any:
    """A checkpoint with a mutable container, nested two levels deep, in every dict field."""
    return ctx.checkpoint(
        workflow,
        state={"nested": {"items": [1, 2]}, "counter": 1},
        messages={"executor": [{"text": "hello"}]},
        pending_request_info_events={"request": {"prompt": "continue?"}},
        metadata={"tags": ["original"]},
        iteration_count=1,
    )


def _scribble(checkpoint: Any) -> None:
    """Change every mutable part of ``checkpoint`` in place and rebind its scalar fields."""
    checkpoint.state["nested"]["items"].append(99)
    checkpoint.state["added"] = "by the caller"
    checkpoint.messages["executor"][0]["text"] = "rewritten"
    checkpoint.messages["executor"].append({"text": "injected"})
    checkpoint.pending_request_info_events["request"]["prompt"] = "rewritten"
    checkpoint.metadata["tags"].append("rewritten")
    checkpoint.iteration_count += 100
    checkpoint.timestamp = "rewritten"


def _containers(checkpoint: Any) -> dict[str, Any]:
    """Every mutable container of a checkpoint built by :func:`_rich_checkpoint`, by path."""
    return {
        "state": checkpoint.state,
        "state['nested']": checkpoint.state["nested"],
        "state['nested']['items']": checkpoint.state["nested"]["items"],
        "messages": checkpoint.messages,
        "messages['executor']": checkpoint.messages["executor"],
        "messages['executor'][0]": checkpoint.messages["executor"][0],
        "pending_request_info_events": checkpoint.pending_request_info_events,
        "pending_request_info_events['request']": checkpoint.pending_request_info_events["request"],
        "metadata": checkpoint.metadata,
        "metadata['tags']": checkpoint.metadata["tags"],
    }


async def _only_listed(ctx: ClauseContext, workflow: str) -> Any:
    listed = await ctx.storage.list_checkpoints(workflow_name=workflow)
    ensure(len(listed) == 1, f"list_checkpoints({workflow!r}) returned {len(listed)} checkpoints, expected 1")
    return listed[0]


async def _latest(ctx: ClauseContext, workflow: str) -> Any:
    latest = await ctx.storage.get_latest(workflow_name=workflow)
    ensure(latest is not None, f"get_latest({workflow!r}) returned None after a save")
    return latest


async def _expect_every_read_equals(ctx: ClauseContext, expected: Any, after: str) -> None:
    workflow, checkpoint_id = expected.workflow_name, expected.checkpoint_id
    ensure_equal(await ctx.storage.load(checkpoint_id), expected, f"load({checkpoint_id!r}) {after}")
    ensure_equal(await _only_listed(ctx, workflow), expected, f"list_checkpoints() entry {after}")
    ensure_equal(await _latest(ctx, workflow), expected, f"get_latest() {after}")


@clause(
    "isolation.save_snapshots",
    "Changing a checkpoint in place after save() returned, or once a save started as a task has begun, "
    "nested containers included, changes nothing that load(), list_checkpoints() or get_latest() return.",
)
async def save_snapshots(ctx: ClauseContext) -> None:
    checkpoint = _rich_checkpoint(ctx, ctx.workflow_name())
    snapshot = copy.deepcopy(checkpoint)
    await ctx.storage.save(checkpoint)
    _scribble(checkpoint)
    await _expect_every_read_equals(ctx, snapshot, "after the caller changed the saved object")
    # The snapshot is taken when the save is called: a caller that starts a save as a task and
    # changes the object once the task has begun (a runner moving on to its next superstep) must
    # not find the change stored, even though the save has not returned yet.
    started = _rich_checkpoint(ctx, ctx.workflow_name())
    started_snapshot = copy.deepcopy(started)
    task = asyncio.ensure_future(ctx.storage.save(started))
    await asyncio.sleep(0)  # the task's first step runs: the save has been called
    _scribble(started)
    await task
    await _expect_every_read_equals(
        ctx, started_snapshot, "after the caller changed the object once its save had begun"
    )


@clause(
    "isolation.loaded_is_caller_owned",
    "Changing a checkpoint returned by load() in place, nested containers included, changes nothing "
    "that later reads return.",
)
async def loaded_is_caller_owned(ctx: ClauseContext) -> None:
    checkpoint = _rich_checkpoint(ctx, ctx.workflow_name())
    expected = copy.deepcopy(checkpoint)  # the saved object itself may be what reads return
    await ctx.storage.save(checkpoint)
    _scribble(await ctx.storage.load(checkpoint.checkpoint_id))
    await _expect_every_read_equals(ctx, expected, "after the caller changed a loaded object")


@clause(
    "isolation.listed_are_caller_owned",
    "Changing a checkpoint returned by list_checkpoints() in place, nested containers included, "
    "changes nothing that later reads return.",
)
async def listed_are_caller_owned(ctx: ClauseContext) -> None:
    checkpoint = _rich_checkpoint(ctx, ctx.workflow_name())
    expected = copy.deepcopy(checkpoint)  # the saved object itself may be what reads return
    await ctx.storage.save(checkpoint)
    _scribble(await _only_listed(ctx, checkpoint.workflow_name))
    await _expect_every_read_equals(ctx, expected, "after the caller changed a listed object")


@clause(
    "isolation.latest_is_caller_owned",
    "Changing the checkpoint returned by get_latest() in place, nested containers included, changes "
    "nothing that later reads return.",
)
async def latest_is_caller_owned(ctx: ClauseContext) -> None:
    checkpoint = _rich_checkpoint(ctx, ctx.workflow_name())
    expected = copy.deepcopy(checkpoint)  # the saved object itself may be what reads return
    await ctx.storage.save(checkpoint)
    _scribble(await _latest(ctx, checkpoint.workflow_name))
    await _expect_every_read_equals(ctx, expected, "after the caller changed the latest object")


@clause(
    "isolation.reads_are_distinct",
    "Each read (two load() calls, list_checkpoints(), get_latest()) returns a new object that shares "
    "no mutable container with the saved checkpoint or with any other read.",
)
async def reads_are_distinct(ctx: ClauseContext) -> None:
    checkpoint = _rich_checkpoint(ctx, ctx.workflow_name())
    await ctx.storage.save(checkpoint)
    objects: dict[str, Any] = {
        "the saved checkpoint": checkpoint,
        "first load()": await ctx.storage.load(checkpoint.checkpoint_id),
        "second load()": await ctx.storage.load(checkpoint.checkpoint_id),
        "list_checkpoints()": await _only_listed(ctx, checkpoint.workflow_name),
        "get_latest()": await _latest(ctx, checkpoint.workflow_name),
    }
    _expect_no_shared_identity(objects, "checkpoint object")
    for path in _containers(checkpoint):
        _expect_no_shared_identity(
            {label: _containers(obj)[path] for label, obj in objects.items()}, f"container {path}"
        )


def _expect_no_shared_identity(objects: dict[str, Any], what: str) -> None:
    seen: dict[int, str] = {}
    for label, obj in objects.items():
        other = seen.setdefault(id(obj), label)
        if other != label:
            fail(f"{label} and {other} return the same {what} (one object, not a copy)")
