"""faults (HTTP object stores): server errors, conditional-write conflicts and a crash between two
writes lose no acknowledged checkpoint and leave no partial one.

These clauses need a target whose :class:`~conformance.faults.FaultInjector` can answer requests
with retryable server errors (``Fault.TRANSIENT_ERRORS``: 500/503), answer conditional writes with
409 ConditionalRequestConflict or 412 (``Fault.CONDITIONAL_CONFLICTS``), or stop a save dead after
its first backend write (``Fault.CRASH_BETWEEN_WRITES``); without one they are reported as
skipped. A few such faults must be absorbed by retries; past the retry budget the storage must
raise a typed :class:`~storages.errors.StorageUnavailableError`, never a client library's raw
error, and must have written the whole checkpoint or nothing.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

from storages.contract import Capability
from storages.errors import StorageUnavailableError

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext
from ..faults import FAULT_CALL_SECONDS, Fault, SimulatedCrash
from ._loads import expect_loads_equal, loads_equal_or_absent
from .nested import FIXED_TIMESTAMP, embedded, sub_workflow_state

FEW = 2
"""Faults a storage must absorb by retrying (two in a row on one request)."""
MANY = 1000
"""Faults no retry budget outlasts."""


def _checkpoint(ctx: ClauseContext, workflow_name: str, label: str, previous: Any, nested: bool) -> Any:
    """A checkpoint chained to ``previous``; with ``nested`` (and the capability), carrying a
    sub-workflow checkpoint that embeds another, so a save writes several records."""
    fields: dict[str, Any] = {
        "previous_checkpoint_id": None if previous is None else previous.checkpoint_id,
        "timestamp": FIXED_TIMESTAMP,
    }
    if nested and ctx.has(Capability.NESTED):
        inner = embedded(ctx, f"{label}-inner")
        outer = embedded(ctx, f"{label}-outer", state=sub_workflow_state(inner))
        return ctx.checkpoint(workflow_name, state=sub_workflow_state(outer, label=label), **fields)
    return ctx.checkpoint(workflow_name, state={"label": label}, **fields)


async def _expect_exactly(storage: Any, workflow_name: str, saved: list[Any], when: str) -> None:
    """The workflow lists exactly ``saved`` in order, the last is latest, each loads equal."""
    ids = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(ids, [c.checkpoint_id for c in saved], f"list_checkpoint_ids {when}")
    latest = await storage.get_latest(workflow_name=workflow_name)
    ensure(
        latest is not None and latest.checkpoint_id == saved[-1].checkpoint_id,
        f"get_latest {when} returned {getattr(latest, 'checkpoint_id', None)!r}, "
        f"expected {saved[-1].checkpoint_id!r}",
    )
    for checkpoint in saved:
        await expect_loads_equal(storage, checkpoint, when)


async def _whole_or_absent(
    storage: Any, workflow_name: str, before: list[Any], attempted: Any, when: str
) -> bool:
    """After a failed save: the attempted checkpoint (with what it embeds) is either visible
    everywhere or nowhere, and what was there before is untouched. Returns whether it landed."""
    landed = await loads_equal_or_absent(storage, attempted, when)
    ids = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    expected = [c.checkpoint_id for c in before] + ([attempted.checkpoint_id] if landed else [])
    ensure_equal(
        ids,
        expected,
        f"list_checkpoint_ids {when} (the failed save {'loads' if landed else 'does not load'})",
    )
    latest = await storage.get_latest(workflow_name=workflow_name)
    ensure(
        latest is not None and latest.checkpoint_id == expected[-1],
        f"get_latest {when} returned {getattr(latest, 'checkpoint_id', None)!r}, expected {expected[-1]!r}",
    )
    outer = _embedded_in(attempted)
    if outer is not None:
        # The embedded checkpoint is a record of its own: it landed exactly when its container did.
        outer_landed = await loads_equal_or_absent(storage, outer, f"(the embedded checkpoint) {when}")
        ensure_equal(
            outer_landed,
            landed,
            f"whether embedded checkpoint {outer.checkpoint_id!r} loads {when}, given whether its "
            "container does",
        )
    for checkpoint in before:
        await expect_loads_equal(storage, checkpoint, when)
    return landed


def _embedded_in(checkpoint: Any) -> Any:
    """The sub-workflow checkpoint :func:`_checkpoint` embedded, or None."""
    executors = checkpoint.state.get("_executor_state", {})
    return executors["sub"]["sub_workflow_checkpoint"] if "sub" in executors else None


@clause(
    "faults.transient_errors_retried",
    f"{FEW} answers of 500/503 in a row are retried: save, load, listing and get_latest succeed and "
    "lose nothing.",
    injects=(Fault.TRANSIENT_ERRORS,),
    operation_timeout=FAULT_CALL_SECONDS,
    timeout=60.0,
)
async def transient_errors_retried(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("transient")
    saved: list[Any] = []
    for index in range(3):
        checkpoint = _checkpoint(
            ctx, workflow_name, f"t{index}", saved[-1] if saved else None, nested=index == 1
        )
        await _save_despite(
            ctx, checkpoint, index + 1, f"{FEW} server errors", ctx.faults.transient_errors(FEW)
        )
        saved.append(checkpoint)
    for read in ("load", "list", "latest"):
        async with ctx.faults.transient_errors(FEW):
            try:
                if read == "load":
                    await expect_loads_equal(ctx.storage, saved[1], f"with {FEW} server errors injected")
                elif read == "list":
                    listed = await ctx.storage.list_checkpoints(workflow_name=workflow_name)
                    ensure_equal(
                        [c.checkpoint_id for c in listed],
                        [c.checkpoint_id for c in saved],
                        f"list_checkpoints with {FEW} server errors injected",
                    )
                else:
                    latest = await ctx.storage.get_latest(workflow_name=workflow_name)
                    ensure(
                        latest is not None and latest.checkpoint_id == saved[-1].checkpoint_id,
                        f"get_latest with {FEW} server errors injected returned "
                        f"{getattr(latest, 'checkpoint_id', None)!r}",
                    )
            except Exception as exc:
                fail(f"{read} with {FEW} server errors injected raised {type(exc).__name__}: {exc}")
    await _expect_exactly(ctx.storage, workflow_name, saved, "after the faults")


@clause(
    "faults.transient_errors_exhausted",
    "When server errors outlast the retry budget, save raises StorageUnavailableError naming the "
    "operation, leaves all or nothing, and saving again succeeds.",
    injects=(Fault.TRANSIENT_ERRORS,),
    operation_timeout=FAULT_CALL_SECONDS,
    timeout=120.0,
)
async def transient_errors_exhausted(ctx: ClauseContext) -> None:
    await _exhausted(ctx, "server errors", lambda: ctx.faults.transient_errors(MANY))


@clause(
    "faults.conditional_conflicts_retried",
    "409 ConditionalRequestConflict and 412 answers to conditional writes are retried: every save "
    "succeeds once, in commit order.",
    injects=(Fault.CONDITIONAL_CONFLICTS,),
    timeout=60.0,
)
async def conditional_conflicts_retried(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("conflicts")
    saved: list[Any] = []
    for index in range(4):
        checkpoint = _checkpoint(
            ctx, workflow_name, f"c{index}", saved[-1] if saved else None, nested=index == 2
        )
        # 409, 412, 409, 412: more than one per save, so every conditional write of it is hit.
        await _save_despite(
            ctx, checkpoint, index + 1, "409/412 answers", ctx.faults.conditional_conflicts(4)
        )
        saved.append(checkpoint)
        await _expect_exactly(ctx.storage, workflow_name, saved, f"after save #{index + 1}")
    handle = await ctx.other_handle()
    await _expect_exactly(handle, workflow_name, saved, "on another handle")


@clause(
    "faults.conditional_conflicts_exhausted",
    "When 409/412 answers outlast the retry budget, save raises StorageUnavailableError naming the "
    "operation, leaves all or nothing, and saving again succeeds.",
    injects=(Fault.CONDITIONAL_CONFLICTS,),
    timeout=120.0,
)
async def conditional_conflicts_exhausted(ctx: ClauseContext) -> None:
    await _exhausted(ctx, "409/412 answers", lambda: ctx.faults.conditional_conflicts(MANY))


async def _save_despite(
    ctx: ClauseContext, checkpoint: Any, number: int, what: str, injected: AbstractAsyncContextManager[Any]
) -> None:
    """Save #``number`` while ``injected`` faults are active: it must succeed and return the id."""
    async with injected:
        try:
            returned = await ctx.storage.save(checkpoint)
        except Exception as exc:
            fail(f"save #{number} with {what} injected raised {type(exc).__name__}: {exc}")
    ensure_equal(returned, checkpoint.checkpoint_id, f"id returned by save #{number}")


async def _exhausted(ctx: ClauseContext, what: str, inject: Any) -> None:
    workflow_name = ctx.workflow_name("exhausted")
    first = _checkpoint(ctx, workflow_name, "first", None, nested=False)
    await ctx.storage.save(first)
    attempted = _checkpoint(ctx, workflow_name, "attempted", first, nested=True)
    async with inject():
        try:
            await ctx.storage.save(attempted)
        except StorageUnavailableError as exc:
            ensure(
                "save" in str(exc),
                f"StorageUnavailableError from save with endless {what} does not name the operation: {exc}",
            )
        except Exception as exc:
            fail(
                f"save with endless {what} raised {type(exc).__name__}: {exc}; expected "
                "StorageUnavailableError"
            )
        else:
            fail(f"save with endless {what} injected returned as if it had succeeded")
    handle = await ctx.reopen()
    await _whole_or_absent(
        handle, workflow_name, [first], attempted, f"after a save failed on endless {what}"
    )
    ensure_equal(await handle.save(attempted), attempted.checkpoint_id, "id returned by saving again")
    await _expect_exactly(handle, workflow_name, [first, attempted], "after saving again")


@clause(
    "faults.crash_between_writes",
    "A save killed after its first backend write leaves the checkpoint wholly visible or wholly absent, "
    "and saving it again completes it exactly once as the latest.",
    injects=(Fault.CRASH_BETWEEN_WRITES,),
    timeout=60.0,
)
async def crash_between_writes(ctx: ClauseContext) -> None:
    await _crash(ctx, nested=False)


@clause(
    "faults.crash_between_nested_writes",
    "A save of a checkpoint with nested ones killed after its first write leaves the whole family or "
    "none of it; saving again completes it once.",
    requires=(Capability.NESTED,),
    injects=(Fault.CRASH_BETWEEN_WRITES,),
    timeout=60.0,
)
async def crash_between_nested_writes(ctx: ClauseContext) -> None:
    await _crash(ctx, nested=True)


async def _crash(ctx: ClauseContext, *, nested: bool) -> None:
    label = "crash-nested" if nested else "crash"
    workflow_name = ctx.workflow_name(label)
    before = [_checkpoint(ctx, workflow_name, "before", None, nested=False)]
    await ctx.storage.save(before[0])
    attempted = _checkpoint(ctx, workflow_name, "attempted", before[0], nested=nested)
    crashed = False
    async with ctx.faults.crash_between_writes():
        try:
            await ctx.storage.save(attempted)
        except SimulatedCrash:
            crashed = True
    ensure(crashed, "the injected crash did not stop the save (it returned normally)")
    # A new process: every handle of the crashed one is gone.
    handle = await ctx.reopen()
    await _whole_or_absent(handle, workflow_name, before, attempted, "after the crash")
    ensure_equal(await handle.save(attempted), attempted.checkpoint_id, "id returned by saving again")
    await _expect_exactly(handle, workflow_name, [*before, attempted], "after saving again")
    following = _checkpoint(ctx, workflow_name, "following", attempted, nested=False)
    await handle.save(following)
    await _expect_exactly(handle, workflow_name, [*before, attempted, following], "after one more save")
