"""The MAF workflows :class:`~conformance.maf_profile.MafRunnerProfile` runs (imports MAF)."""

from typing import Any

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, WorkflowExecutor, handler

from ._maf_ids import PARENT_EXECUTOR_ID
from .scenario import GraphChange, Scenario


class Work(Executor):
    """Counts its runs in checkpointed state and yields the count; notes each value it yields."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.progress = 0
        self.observed: list[int] = []

    @handler
    async def step(self, message: int, ctx: WorkflowContext[int, int]) -> None:
        self.progress += 1
        self.observed.append(self.progress)
        await ctx.yield_output(self.progress)

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"progress": self.progress}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.progress = state["progress"]


class Sink(Executor):
    """What a changed graph gains: an executor that takes the messages and does nothing."""

    @handler
    async def take(self, message: int, ctx: WorkflowContext) -> None:
        return None


def build_child(scenario: Scenario, work: Work, storage: Any) -> Workflow:
    """The sub-workflow: ``work`` alone (plus ``review`` when the child graph changed)."""
    builder = WorkflowBuilder(start_executor=work, name=scenario.child_workflow, checkpoint_storage=storage)
    if scenario.changed_graph is GraphChange.CHILD:
        builder.add_edge(work, Sink("review"))
    return builder.build()


def build_parent(scenario: Scenario, child_workflow: Workflow, storage: Any, max_iterations: int) -> Workflow:
    """The parent: a WorkflowExecutor around the child, looping to itself (plus ``audit``)."""
    child = WorkflowExecutor(child_workflow, id=PARENT_EXECUTOR_ID)
    builder = WorkflowBuilder(
        max_iterations=max_iterations,
        start_executor=child,
        name=scenario.parent_workflow,
        checkpoint_storage=storage,
    )
    builder.add_edge(child, child)
    if scenario.changed_graph is GraphChange.PARENT:
        builder.add_edge(child, Sink("audit"))
    return builder.build()
