"""The workflow every ``maf_subworkflow_<backend>.py`` example runs, and the run-then-resume demo.

A parent workflow hands a number to a sub-workflow three times (through MAF's ``WorkflowExecutor``)
and collects what comes back. The sub-workflow doubles a running value it keeps in its executor
state, so resuming the parent from the middle only gives the right answer if the sub-workflow's
state comes back too. Only the parent has a checkpoint storage, as MAF recommends: the parent
checkpoints the sub-workflow's state with its own.
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


def build(storage: Any = None) -> Workflow:
    """The parent workflow, checkpointing to ``storage`` if given (else pass one to ``run``).

    Only the parent has a storage, as MAF recommends: the parent checkpoints the sub-workflow's
    state with its own at every superstep (MAF warns when a sub-workflow has a storage of its
    own). Our storages keep that embedded checkpoint as a nested record, addressable by its id.
    """
    doubler = Doubler("doubler")
    child = WorkflowBuilder(start_executor=doubler, name=CHILD_WORKFLOW).build()
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

    resumed = await build().run(checkpoint_id=middle.checkpoint_id, checkpoint_storage=storage)
    print("outputs, resumed:      ", resumed.get_outputs())
    assert resumed.get_outputs() == first.get_outputs(), "a resumed run must end as the uninterrupted one"

    if Capability.NESTED in storage.capabilities:
        # Each parent checkpoint embeds the sub-workflow's; the storage keeps it as a record of
        # its own, nested in the parent's: listed under the sub-workflow's name, loadable by id.
        nested = await storage.list_nested(middle.checkpoint_id)
        child_ids = await storage.list_checkpoint_ids(workflow_name=CHILD_WORKFLOW, include_nested=True)
        reloaded = await storage.load(embedded.checkpoint_id)
        assert nested == [embedded.checkpoint_id]
        assert reloaded.state == embedded.state
        print(
            f"sub-workflow checkpoints kept nested in the parent's: {len(child_ids)}, "
            f"the resumed one loads by its id"
        )


__all__ = ["Batch", "build", "run_then_resume"]
