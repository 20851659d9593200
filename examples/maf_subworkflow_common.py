"""The workflow every ``maf_subworkflow_<backend>.py`` example runs, and the run-then-resume demo.

A parent workflow hands a number to a sub-workflow three times (through MAF's ``WorkflowExecutor``)
and collects what comes back. The sub-workflow doubles a running value it keeps in its executor
state, so resuming the parent from the middle only gives the right answer if the sub-workflow's
state comes back too. The parent and the sub-workflow checkpoint to one storage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, WorkflowExecutor, handler

from storages import Capability

WORKFLOW = "orders"
CHILD_WORKFLOW = "orders-doubler"
ROUNDS = 3


@dataclass
class Batch:
    """A user type in messages: allowed by registering it with the storage's codec."""

    round: int
    total: int


class Doubler(Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.value = 1

    @handler
    async def double(self, batch: Batch, ctx: WorkflowContext[Batch, Batch]) -> None:
        self.value *= 2
        await ctx.yield_output(Batch(batch.round, batch.total + self.value))

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"value": self.value}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.value = state["value"]


class Collector(Executor):
    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.totals: list[int] = []

    @handler
    async def collect(self, batch: Batch, ctx: WorkflowContext[Batch, str]) -> None:
        self.totals.append(batch.total)
        if len(self.totals) < ROUNDS:
            await ctx.send_message(Batch(batch.round + 1, batch.total))
        else:
            await ctx.yield_output(f"totals {self.totals}")

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"totals": list(self.totals)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.totals = list(state["totals"])


def build(storage: Any = None, *, resumable_with: Any = None) -> Workflow:
    """The parent workflow; ``storage`` for both workflows at build time, or ``resumable_with``
    for the sub-workflow only (the parent then gets its storage from ``run(checkpoint_storage=...)``)."""
    doubler = Doubler("doubler")
    child_storage = storage if storage is not None else resumable_with
    child = WorkflowBuilder(
        start_executor=doubler, name=CHILD_WORKFLOW, checkpoint_storage=child_storage
    ).build()
    sub = WorkflowExecutor(child, id="sub")
    collector = Collector("collector")
    builder = WorkflowBuilder(start_executor=sub, name=WORKFLOW, checkpoint_storage=storage)
    return builder.add_edge(sub, collector).add_edge(collector, sub).build()


async def run_then_resume(storage: Any) -> None:
    """Run once with checkpoints, resume a new workflow from the middle, compare the outputs."""
    storage.codec.register(Batch)
    first = await build(storage).run(Batch(1, 0))
    print("outputs, uninterrupted:", first.get_outputs())

    checkpoints = await storage.list_checkpoints(workflow_name=WORKFLOW)
    iterations = [checkpoint.iteration_count for checkpoint in checkpoints]
    print(f"{len(checkpoints)} parent checkpoints saved, iterations {iterations}")
    middle = checkpoints[3]  # after the sub-workflow's second run
    embedded = middle.state["_executor_state"]["sub"]["sub_workflow_checkpoint"]
    print(
        f"resuming from {middle.checkpoint_id} (iteration {middle.iteration_count}); the sub-workflow "
        f"state inside it: {embedded.state['_executor_state']['doubler']}"
    )

    resumed = await build(resumable_with=storage).run(
        checkpoint_id=middle.checkpoint_id, checkpoint_storage=storage
    )
    print("outputs, resumed:      ", resumed.get_outputs())
    assert resumed.get_outputs() == first.get_outputs(), "a resumed run must end as the uninterrupted one"

    # The sub-workflow's first checkpoint after the resume points at the checkpoint embedded in the
    # parent's; one shared storage keeps it addressable, so the sub-workflow's chain is whole.
    latest = await storage.get_latest(workflow_name=CHILD_WORKFLOW)
    if Capability.ANCESTRY in storage.capabilities:
        walk = await storage.walk_ancestry_ids(latest.checkpoint_id)
        length = len(walk.items)
        print(f"sub-workflow chain from its latest checkpoint: {length} checkpoints, ends at {walk.end}")
        assert walk.end.value == "root"


__all__ = ["Batch", "build", "run_then_resume"]
