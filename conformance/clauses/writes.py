"""writes: pending writes (``pending_writes``) are atomic per call, idempotent per (task, index),
isolated per checkpoint and workflow, and go with their checkpoint.

LangGraph's tasks record their outputs against the checkpoint they ran from before the next one is
saved; on resume, a task with stored writes is not run again. So a call's writes must land all or
none, a retried call must change nothing, the first write per (task_id, index) is kept except at a
negative index (a special channel: error, interrupt, resume), where the latest replaces it, and
pruning or deleting a workflow must take its checkpoints' writes along. A storage that declares
the capability gets StorageSaver (storages.runners.langgraph) on top of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storages.contract import Capability, PendingWrite
from storages.errors import InvalidCheckpointError

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext

_WRITES = (Capability.PENDING_WRITES,)


def _rows(writes: Sequence[Any]) -> list[tuple[str, int, str, Any, str]]:
    return [(w.task_id, w.index, w.channel, w.value, w.task_path) for w in writes]


async def _listed(ctx: ClauseContext, checkpoint: Any, when: str) -> list[tuple[str, int, str, Any, str]]:
    writes = await ctx.storage.list_writes(checkpoint.checkpoint_id, workflow_name=checkpoint.workflow_name)
    ensure(isinstance(writes, list), f"list_writes {when} returned {writes!r:.120}, not a list")
    return _rows(writes)


@clause(
    "writes.round_trip",
    "list_writes returns each write stored with put_writes (task, index, channel, value with its types, "
    "task path), only for its checkpoint and workflow; a checkpoint without writes lists none.",
    requires=_WRITES,
)
async def round_trip(ctx: ClauseContext) -> None:
    first, second = await ctx.save_chain(ctx.workflow_name("writes"), 2)
    # Values go through the storage's codec: a tuple, bytes, a set and an int key come back as
    # they were (a layer that makes values JSON-portable first turns them into lists and strings).
    value: dict[object, object] = {
        "rows": [1, 2.5, "three"],
        "nested": {"ok": True},
        "pair": ("a", 1),
        "raw": b"\x00\xff",
        "tags": {"x"},
        7: "an int key",
    }
    batch = [
        PendingWrite("task-a", 0, "messages", value, "path:0"),
        PendingWrite("task-a", 1, "count", 7, "path:0"),
        PendingWrite("task-a", -3, "__interrupt__", ["ask", "a human"], "path:0"),
    ]
    await ctx.storage.put_writes(first.checkpoint_id, batch, workflow_name=first.workflow_name)
    await ctx.storage.put_writes(
        first.checkpoint_id,
        [PendingWrite("task-b", 0, "messages", "from b")],
        workflow_name=first.workflow_name,
    )
    expected = [*_rows(batch), ("task-b", 0, "messages", "from b", "")]
    ensure_equal(await _listed(ctx, first, "after two calls"), expected, "writes listed for the checkpoint")
    ensure_equal(await _listed(ctx, second, "of a checkpoint given none"), [], "writes of another checkpoint")
    elsewhere = ctx.workflow_name("writes-elsewhere")
    stray = await ctx.storage.list_writes(first.checkpoint_id, workflow_name=elsewhere)
    ensure_equal(_rows(stray), [], f"writes listed for the same id under workflow {elsewhere!r}")


LARGE_CALL = 37
"""Writes in one call: past every small batch size a wrapper or driver splits calls at (8, 16, 32),
and no multiple of one."""


@clause(
    "writes.large_call_whole",
    f"One put_writes call of {LARGE_CALL} writes (several tasks, special channels included) lists back "
    "whole, in the order stored.",
    requires=_WRITES,
)
async def large_call_whole(ctx: ClauseContext) -> None:
    (owner,) = await ctx.save_chain(ctx.workflow_name("writes-large"), 1)
    batch = [
        PendingWrite(
            f"task-{number % 3}", -1 - number // 3 if number % 12 == 11 else number // 3, "out", number
        )
        for number in range(LARGE_CALL)
    ]
    await ctx.storage.put_writes(owner.checkpoint_id, batch, workflow_name=owner.workflow_name)
    listed = await _listed(ctx, owner, f"after one call of {LARGE_CALL} writes")
    ensure(
        len(listed) == LARGE_CALL,
        f"list_writes after one put_writes call of {LARGE_CALL} writes returned {len(listed)} of them "
        f"(missing {[row for row in _rows(batch) if row not in listed][:3]!r:.200})",
    )
    ensure_equal(listed, _rows(batch), f"writes listed after one call of {LARGE_CALL} writes")


@clause(
    "writes.idempotent",
    "Repeating a put_writes call changes nothing; per (task_id, index) the first write is kept, except at a "
    "negative index (special channel), where the latest replaces it in place.",
    requires=_WRITES,
)
async def idempotent(ctx: ClauseContext) -> None:
    (checkpoint,) = await ctx.save_chain(ctx.workflow_name("idempotent"), 1)
    owner, workflow = checkpoint.checkpoint_id, checkpoint.workflow_name
    first = [PendingWrite("task", 0, "out", "first"), PendingWrite("task", -1, "__error__", "boom 1")]
    for _ in range(2):
        await ctx.storage.put_writes(owner, first, workflow_name=workflow)
    ensure_equal(await _listed(ctx, checkpoint, "after the same call twice"), _rows(first), "writes")
    retry = [
        PendingWrite("task", 0, "out", "second"),
        PendingWrite("task", -1, "__error__", "boom 2"),
        PendingWrite("task", 1, "extra", "new"),
    ]
    await ctx.storage.put_writes(owner, retry, workflow_name=workflow)
    expected = [
        ("task", 0, "out", "first", ""),
        ("task", -1, "__error__", "boom 2", ""),
        ("task", 1, "extra", "new", ""),
    ]
    ensure_equal(
        await _listed(ctx, checkpoint, "after a call rewriting (task, 0) and (task, -1)"),
        expected,
        "writes: (task, 0) keeps its first value, (task, -1) takes the latest, (task, 1) is added",
    )


@clause(
    "writes.whole_workflow",
    "list_workflow_writes maps each checkpoint of a workflow that has writes to what list_writes returns "
    "for it (one read for a whole history), and names no other checkpoint and no other workflow's.",
    requires=_WRITES,
)
async def whole_workflow(ctx: ClauseContext) -> None:
    first, _without_writes, third = await ctx.save_chain(ctx.workflow_name("whole"), 3)
    workflow = first.workflow_name
    await ctx.storage.put_writes(
        first.checkpoint_id,
        [PendingWrite("task", 0, "out", "first"), PendingWrite("task", -1, "__error__", "boom 1")],
        workflow_name=workflow,
    )
    await ctx.storage.put_writes(
        first.checkpoint_id,
        [PendingWrite("task", 0, "out", "second"), PendingWrite("task", -1, "__error__", "boom 2")],
        workflow_name=workflow,
    )
    await ctx.storage.put_writes(
        third.checkpoint_id, [PendingWrite("other", 0, "out", 3)], workflow_name=workflow
    )
    (elsewhere,) = await ctx.save_chain(ctx.workflow_name("whole-elsewhere"), 1)
    await ctx.storage.put_writes(
        elsewhere.checkpoint_id,
        [PendingWrite("stray", 0, "out", "no")],
        workflow_name=elsewhere.workflow_name,
    )
    whole = await ctx.storage.list_workflow_writes(workflow_name=workflow)
    ensure(isinstance(whole, dict), f"list_workflow_writes returned {whole!r:.120}, not a dict")
    listed = {owner: _rows(writes) for owner, writes in whole.items()}
    expected = {
        first.checkpoint_id: [("task", 0, "out", "first", ""), ("task", -1, "__error__", "boom 2", "")],
        third.checkpoint_id: [("other", 0, "out", 3, "")],
    }
    ensure_equal(
        listed,
        expected,
        f"list_workflow_writes({workflow!r}): per checkpoint, what list_writes returns (the first write "
        "per (task, index), a special channel's latest), none for a checkpoint without writes or of "
        "another workflow",
    )


@clause(
    "writes.all_or_nothing",
    "A put_writes call with an invalid write raises InvalidCheckpointError and stores none of its writes.",
    requires=_WRITES,
)
async def all_or_nothing(ctx: ClauseContext) -> None:
    (checkpoint,) = await ctx.save_chain(ctx.workflow_name("atomic"), 1)
    batch: list[Any] = [PendingWrite("task", 0, "out", "kept?"), PendingWrite("", 1, "out", "no task id")]
    try:
        await ctx.storage.put_writes(checkpoint.checkpoint_id, batch, workflow_name=checkpoint.workflow_name)
    except InvalidCheckpointError:
        pass
    except Exception as exc:
        fail(
            f"put_writes with an empty task_id raised {type(exc).__name__}: {exc}, not InvalidCheckpointError"
        )
    else:
        fail("put_writes with an empty task_id returned; it must raise InvalidCheckpointError")
    ensure_equal(
        await _listed(ctx, checkpoint, "after a refused call"), [], "writes stored by a refused call"
    )


@clause(
    "writes.go_with_checkpoints",
    "delete_writes removes one checkpoint's writes; prune drops the pruned checkpoints' writes and keeps the "
    "survivors' (embedded ones of a kept checkpoint too); delete_workflow removes the workflow's; "
    "list_workflows never names a writes log.",
    requires=(Capability.PENDING_WRITES, Capability.PRUNE, Capability.LIST_WORKFLOWS),
)
async def go_with_checkpoints(ctx: ClauseContext) -> None:
    chain = await ctx.save_chain(ctx.workflow_name("retained"), 3)
    workflow = chain[0].workflow_name
    for index, checkpoint in enumerate(chain):
        await ctx.storage.put_writes(
            checkpoint.checkpoint_id, [PendingWrite("task", 0, "out", index)], workflow_name=workflow
        )
    removed = await ctx.storage.delete_writes(chain[0].checkpoint_id, workflow_name=workflow)
    ensure_equal(removed, 1, "delete_writes of a checkpoint with one batch: count")
    ensure_equal(await _listed(ctx, chain[0], "after delete_writes"), [], "writes after delete_writes")
    ensure_equal(
        await _listed(ctx, chain[1], "of a neighbour after delete_writes"),
        [("task", 0, "out", 1, "")],
        "a neighbour's writes",
    )
    names = await ctx.storage.list_workflows()
    ensure_equal(
        [name for name in names if workflow in name and name != workflow], [], "list_workflows extras"
    )
    await ctx.storage.prune(workflow_name=workflow, keep_last=1)
    ensure_equal(await _listed(ctx, chain[1], "of a pruned checkpoint"), [], "writes of a pruned checkpoint")
    ensure_equal(
        await _listed(ctx, chain[2], "of the survivor of prune(keep_last=1)"),
        [("task", 0, "out", 2, "")],
        "the survivor's writes",
    )
    await ctx.storage.delete_workflow(workflow_name=workflow)
    ensure_equal(await _listed(ctx, chain[2], "after delete_workflow"), [], "writes after delete_workflow")
    # The same ids saved again start clean: nothing of the deleted workflow's writes comes back.
    await ctx.storage.save(chain[2])
    ensure_equal(await _listed(ctx, chain[2], "of a re-saved checkpoint"), [], "writes of a re-saved id")
    if ctx.has(Capability.NESTED):
        await _writes_of_an_embedded_survivor(ctx)


async def _writes_of_an_embedded_survivor(ctx: ClauseContext) -> None:
    """A checkpoint embedded in one prune keeps is still stored, so its writes stay: survivors are
    every record of the workflow, not only its top-level ones."""
    workflow = ctx.workflow_name("embedded-writes")
    child = ctx.checkpoint(workflow, checkpoint_id=f"{workflow}-child")
    old = ctx.checkpoint(workflow, checkpoint_id=f"{workflow}-old")
    kept = ctx.checkpoint(
        workflow,
        checkpoint_id=f"{workflow}-kept",
        previous_checkpoint_id=old.checkpoint_id,
        state={"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}},
    )
    await ctx.storage.save(old)
    await ctx.storage.save(kept)
    for index, checkpoint in enumerate((old, child)):
        await ctx.storage.put_writes(
            checkpoint.checkpoint_id, [PendingWrite("task", 0, "out", index)], workflow_name=workflow
        )
    await ctx.storage.prune(workflow_name=workflow, keep_last=1)
    ensure_equal(await _listed(ctx, old, "of a pruned checkpoint"), [], "writes of a pruned checkpoint")
    ensure_equal(
        await _listed(ctx, child, "of a checkpoint embedded in the one prune(keep_last=1) kept"),
        [("task", 0, "out", 1, "")],
        "the writes of a kept checkpoint's embedded one",
    )


@clause(
    "writes.logs_never_shadow_workflows",
    "A workflow's pending writes never show as checkpoints of a workflow whose name is the log's with "
    "its control characters dropped or replaced ('writes' + name, '_writes_' + name, '?writes?' + name).",
    requires=_WRITES,
)
async def logs_never_shadow_workflows(ctx: ClauseContext) -> None:
    # The engine keeps a workflow's writes in a log named "\x1fwrites\x1f" + name, a name no caller
    # may use; a backend that makes names safe (for files, keys) by dropping or replacing control
    # characters files the log under a name a caller may use.
    (owner,) = await ctx.save_chain(ctx.workflow_name("shadowed"), 1)
    await ctx.storage.put_writes(
        owner.checkpoint_id, [PendingWrite("task", 0, "out", "value")], workflow_name=owner.workflow_name
    )
    for name in (
        f"writes{owner.workflow_name}",
        f"_writes_{owner.workflow_name}",
        f"?writes?{owner.workflow_name}",
    ):
        listed = await ctx.storage.list_checkpoint_ids(workflow_name=name)
        ensure_equal(list(listed), [], f"list_checkpoint_ids({name!r}), a workflow never saved to")
        latest = await ctx.storage.get_latest(workflow_name=name)
        ensure(latest is None, f"get_latest({name!r}), a workflow never saved to, returned {latest!r:.200}")
