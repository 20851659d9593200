"""The MAF workflow bench/maf_bench.py runs (imports agent_framework)."""

from __future__ import annotations

from typing import Any

from agent_framework import Executor, Workflow, WorkflowBuilder, WorkflowContext, handler

NOTES = 40
"""Strings in the executor's state: about 1.5 KB of state per checkpoint."""


class Loop(Executor):
    """Sends itself a message until it has run ``supersteps`` times, then yields its count."""

    def __init__(self, supersteps: int) -> None:
        super().__init__("loop")
        self.supersteps = supersteps
        self.count = 0
        self.notes: list[str] = []

    @handler
    async def step(self, message: int, ctx: WorkflowContext[int, int]) -> None:
        self.count += 1
        self.notes = [f"superstep {self.count} note {index}" for index in range(NOTES)]
        if message + 1 < self.supersteps:
            await ctx.send_message(message + 1)
        else:
            await ctx.yield_output(self.count)

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"count": self.count, "notes": list(self.notes)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.count = state["count"]
        self.notes = list(state["notes"])


def loop_workflow(name: str, supersteps: int, storage: Any) -> tuple[Workflow, Loop]:
    loop = Loop(supersteps)
    builder = WorkflowBuilder(
        start_executor=loop, name=name, checkpoint_storage=storage, max_iterations=supersteps + 1
    )
    return builder.add_edge(loop, loop).build(), loop
