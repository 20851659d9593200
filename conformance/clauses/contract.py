"""contract: MAF's six-method protocol behaves as MAF's runner expects."""

from __future__ import annotations

from storages.errors import CheckpointNotFoundError

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext
from ._maf import is_runner_checkpoint_error


@clause("contract.save_returns_id", "save() returns the checkpoint's own id.")
async def save_returns_id(ctx: ClauseContext) -> None:
    checkpoint = ctx.checkpoint(ctx.workflow_name())
    returned = await ctx.storage.save(checkpoint)
    ensure_equal(returned, checkpoint.checkpoint_id, "id returned by save()")


@clause("contract.load_returns_saved", "load() returns a checkpoint equal to the one saved, of the same class.")
async def load_returns_saved(ctx: ClauseContext) -> None:
    checkpoint = ctx.checkpoint(ctx.workflow_name(), state={"answer": 42}, iteration_count=3)
    await ctx.storage.save(checkpoint)
    loaded = await ctx.storage.load(checkpoint.checkpoint_id)
    ensure(type(loaded) is type(checkpoint), f"load() returned {type(loaded).__name__}, saved {type(checkpoint).__name__}")
    ensure_equal(loaded, checkpoint, "loaded checkpoint")


@clause(
    "contract.load_missing_raises",
    "load() of an unknown id raises CheckpointNotFoundError (a WorkflowCheckpointException under MAF).",
)
async def load_missing_raises(ctx: ClauseContext) -> None:
    missing = f"missing-{ctx.workflow_name()}"
    try:
        await ctx.storage.load(missing)
    except Exception as exc:
        if isinstance(exc, CheckpointNotFoundError) or is_runner_checkpoint_error(exc):
            return
        fail(f"load() of a missing id raised {type(exc).__name__}: {exc}")
    fail("load() of a missing id returned instead of raising")
