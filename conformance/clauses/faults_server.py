"""faults (server backends): a killed server or a cut connection loses no acknowledged checkpoint
and leaves no partial one.

These clauses need a target whose :class:`~conformance.faults.FaultInjector` can kill and restart
the server (``Fault.SERVER_RESTART``) or cut a connection while a save is in flight
(``Fault.CONNECTION_CUT``); without one they are reported as skipped. "Acknowledged" means
``save()`` returned: from then on the checkpoint must survive anything. A save that raised may or
may not have landed (the request may have reached the server before the cut), but what landed is
the whole checkpoint, nested records included, or nothing at all.
"""

from __future__ import annotations

import asyncio
from typing import Any

from storages.contract import Capability
from storages.errors import CheckpointStorageError

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext
from ..faults import FAULT_CALL_SECONDS, Fault
from ._loads import loads_equal_or_absent
from .nested import FIXED_TIMESTAMP, embedded, sub_workflow_state

SAVES_AROUND_RESTART = 12
"""Saves made while the server is killed and restarted; the restart comes after the third."""


def _with_nested(ctx: ClauseContext, workflow_name: str, label: str, **fields: Any) -> tuple[Any, list[Any]]:
    """A checkpoint with, where the storage declares ``nested``, a sub-workflow checkpoint that
    itself embeds one: returns it and the embedded checkpoints, outermost first."""
    fields.setdefault("timestamp", FIXED_TIMESTAMP)
    if not ctx.has(Capability.NESTED):
        return ctx.checkpoint(workflow_name, state={"label": label}, **fields), []
    inner = embedded(ctx, f"{label}-inner")
    outer = embedded(ctx, f"{label}-outer", state=sub_workflow_state(inner))
    checkpoint = ctx.checkpoint(workflow_name, state=sub_workflow_state(outer, label=label), **fields)
    return checkpoint, [outer, inner]


@clause(
    "faults.server_restart_keeps_acknowledged",
    "After kill -9 and restart of the server mid-run, every acknowledged save loads equal, in order.",
    requires=(Capability.DURABLE,),
    injects=(Fault.SERVER_RESTART,),
    operation_timeout=FAULT_CALL_SECONDS,
    timeout=120.0,
)
async def server_restart_keeps_acknowledged(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("restart")
    acknowledged = await ctx.save_chain(workflow_name, 2, timestamp=FIXED_TIMESTAMP)
    with_nested, nested = _with_nested(
        ctx, workflow_name, "restart", previous_checkpoint_id=acknowledged[-1].checkpoint_id
    )
    await ctx.storage.save(with_nested)
    acknowledged.append(with_nested)
    unacknowledged: list[Any] = []
    restarted = asyncio.Event()

    async def keep_saving() -> None:
        previous = acknowledged[-1].checkpoint_id
        for index in range(SAVES_AROUND_RESTART):
            if index == 3:
                await restarted.wait()
            checkpoint = ctx.checkpoint(
                workflow_name, previous_checkpoint_id=previous, iteration_count=100 + index,
                timestamp=FIXED_TIMESTAMP,
            )  # fmt: skip
            try:
                await ctx.storage.save(checkpoint)
            except CheckpointStorageError:
                unacknowledged.append(checkpoint)  # in flight during the restart: may or may not be there
                continue
            acknowledged.append(checkpoint)
            previous = checkpoint.checkpoint_id

    saver = asyncio.ensure_future(keep_saving())
    try:
        await asyncio.sleep(0)
        await ctx.faults.restart_server()
    finally:
        restarted.set()
        try:
            await saver
        except Exception as exc:
            fail(f"a save around the restart raised {type(exc).__name__}: {exc}, not a storage error")
    storage = await ctx.reopen()
    for checkpoint in [*acknowledged, *nested]:
        ensure(
            await loads_equal_or_absent(storage, checkpoint, "after kill -9 and restart"),
            f"acknowledged checkpoint {checkpoint.checkpoint_id!r} was lost by kill -9 and restart",
        )
    ids = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    acknowledged_ids = [c.checkpoint_id for c in acknowledged]
    unacknowledged_ids = {c.checkpoint_id for c in unacknowledged}
    ensure_equal(
        [i for i in ids if i not in unacknowledged_ids],
        acknowledged_ids,
        "list_checkpoint_ids after restart (acknowledged saves, in the order they were acknowledged)",
    )
    after = ctx.checkpoint(workflow_name, previous_checkpoint_id=acknowledged_ids[-1], iteration_count=999)
    await storage.save(after)
    latest = await storage.get_latest(workflow_name=workflow_name)
    ensure_equal(
        getattr(latest, "checkpoint_id", None),
        after.checkpoint_id,
        "get_latest after a save following the restart (did the sequence go back?)",
    )


@clause(
    "faults.connection_cut_whole_or_nothing",
    "A connection cut mid-save leaves the whole checkpoint (nested ones too) or nothing; errors are typed.",
    injects=(Fault.CONNECTION_CUT,),
    operation_timeout=FAULT_CALL_SECONDS,
    timeout=60.0,
)
async def connection_cut_whole_or_nothing(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("cut")
    (parent,) = await ctx.save_chain(workflow_name, 1, timestamp=FIXED_TIMESTAMP)
    checkpoint, nested = _with_nested(ctx, workflow_name, "cut", previous_checkpoint_id=parent.checkpoint_id)
    acknowledged = False
    async with ctx.faults.cut_connection_during_save():
        try:
            await ctx.storage.save(checkpoint)
            acknowledged = True
        except CheckpointStorageError:
            pass
        except Exception as exc:
            fail(
                f"save() with its connection cut raised {type(exc).__name__}: {exc}; "
                "expected success or a typed storage error (StorageUnavailableError)"
            )
    storage = await ctx.reopen()
    present = await loads_equal_or_absent(storage, checkpoint, "after its save's connection was cut")
    if acknowledged:
        ensure(present, f"save() returned but checkpoint {checkpoint.checkpoint_id!r} is not stored")
    for record in nested:
        here = await loads_equal_or_absent(storage, record, "after its container's save was cut")
        ensure_equal(
            here,
            present,
            f"nested checkpoint {record.checkpoint_id!r} stored (container "
            f"{'stored' if present else 'absent'}); a partial save",
        )
    ids = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    expected = [parent.checkpoint_id, checkpoint.checkpoint_id] if present else [parent.checkpoint_id]
    ensure_equal(ids, expected, "list_checkpoint_ids after the cut save")
    # The caller's retry of a save whose outcome it never learned must succeed and change nothing.
    ensure_equal(await storage.save(checkpoint), checkpoint.checkpoint_id, "save() retried after the cut")
    ensure_equal(
        await storage.list_checkpoint_ids(workflow_name=workflow_name),
        [parent.checkpoint_id, checkpoint.checkpoint_id],
        "list_checkpoint_ids after retrying the cut save",
    )
    for record in [checkpoint, *nested]:
        ensure(
            await loads_equal_or_absent(storage, record, "after the retried save"),
            f"{record.checkpoint_id!r} missing",
        )
