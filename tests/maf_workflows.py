"""Real MAF workflows for the tests: a multi-superstep loop, a parent with a sub-workflow, and a
human-in-the-loop workflow, each with user types in its messages and state.

Also a worker for resuming in a fresh process:
``python maf_workflows.py pause URL`` runs the human-in-the-loop workflow until it asks its
question and prints ``{"checkpoint_id", "request_id"}`` as JSON; ``python maf_workflows.py resume
URL CHECKPOINT_ID REQUEST_ID ANSWER`` restores that checkpoint with the answer and prints
``{"outputs": [...]}``. Both close the storage before exiting.
"""

from __future__ import annotations

import asyncio
import enum
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
from agent_framework import (
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    WorkflowExecutor,
    handler,
    register_checkpoint_type,
    response_handler,
)

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storages import CheckpointStore, open_storage


class Stage(enum.Enum):
    """A user enum, allowed through MAF's own registry (``register_checkpoint_type``)."""

    DRAFT = "draft"
    FINAL = "final"


register_checkpoint_type(Stage)


@dataclass
class Tally:
    """A user dataclass in messages and shared state; allowed through the codec (``allow_user_types``)."""

    step: int
    total: int
    stage: Stage


@dataclass
class Question:
    """A user dataclass sent with ``request_info``; kept in the pending request event."""

    topic: str
    asked_at_step: int


@dataclass
class Budget:
    """Executor state whose ``__post_init__`` refuses an overspent budget; the workflow overspends it
    by mutation, as applications do (MAF's own storages restore it without ``__post_init__``)."""

    limit: int
    spent: int = 0

    def __post_init__(self) -> None:
        if self.spent > self.limit:
            raise ValueError(f"spent {self.spent} over limit {self.limit}")


class Note(pydantic.BaseModel):
    """Shared state with a normalising validator: each validation appends a suffix."""

    text: str

    @pydantic.field_validator("text")
    @classmethod
    def _checked(cls, value: str) -> str:
        return value + " [checked]"


USER_TYPES: tuple[type[Any], ...] = (Tally, Question, Budget, Note)


def allow_user_types(storage: CheckpointStore) -> CheckpointStore:
    """Register the user types with the storage's codec (every handle of a store shares it)."""
    for cls in USER_TYPES:
        storage.codec.register(cls)
    return storage


# ---------------------------------------------------------------- a loop of supersteps


class Accumulate(Executor):
    """Adds up over ``supersteps`` supersteps, one message to itself each, then yields a summary."""

    def __init__(self, id: str, supersteps: int) -> None:
        super().__init__(id)
        self.supersteps = supersteps
        self.history: list[int] = []

    @handler
    async def step(self, message: Tally, ctx: WorkflowContext[Tally, str]) -> None:
        total = message.total + message.step + 1
        self.history.append(total)
        last = message.step + 1 == self.supersteps
        ctx.set_state("last_tally", Tally(message.step, total, Stage.FINAL if last else Stage.DRAFT))
        if last:
            await ctx.yield_output(
                f"total={total} history={self.history} stage={ctx.get_state('last_tally').stage.value}"
            )
        else:
            await ctx.send_message(Tally(message.step + 1, total, Stage.DRAFT))

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"history": list(self.history)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.history = list(state["history"])


def loop_workflow(name: str, supersteps: int, storage: Any = None) -> Workflow:
    accumulate = Accumulate("accumulate", supersteps)
    builder = WorkflowBuilder(start_executor=accumulate, name=name, checkpoint_storage=storage)
    return builder.add_edge(accumulate, accumulate).build()


LOOP_INPUT = Tally(0, 0, Stage.DRAFT)


# ---------------------------------------------------------------- values a constructor would refuse


class Spend(Executor):
    """Spends 3 a superstep from a budget of 5 (over it from the second superstep on), with a note
    in shared state; yields what it spent and the note."""

    def __init__(self, id: str, supersteps: int) -> None:
        super().__init__(id)
        self.supersteps = supersteps
        self.budget = Budget(limit=5)

    @handler
    async def spend(self, message: Tally, ctx: WorkflowContext[Tally, str]) -> None:
        if message.step == 0:
            ctx.set_state("note", Note(text="plan"))
        self.budget.spent += 3
        if message.step + 1 == self.supersteps:
            note = ctx.get_state("note")
            await ctx.yield_output(f"spent={self.budget.spent} of {self.budget.limit} note={note.text!r}")
        else:
            await ctx.send_message(Tally(message.step + 1, self.budget.spent, Stage.DRAFT))

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"budget": self.budget}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.budget = state["budget"]


def spend_workflow(name: str, supersteps: int, storage: Any = None) -> Workflow:
    spend = Spend("spend", supersteps)
    return (
        WorkflowBuilder(start_executor=spend, name=name, checkpoint_storage=storage)
        .add_edge(spend, spend)
        .build()
    )


# ---------------------------------------------------------------- a parent with a sub-workflow


class Double(Executor):
    """The sub-workflow's executor: doubles its running value (checkpointed) on every call."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.value = 1

    @handler
    async def double(self, message: Tally, ctx: WorkflowContext[Tally, Tally]) -> None:
        self.value *= 2
        await ctx.yield_output(Tally(message.step, message.total + self.value, Stage.DRAFT))

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"value": self.value}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.value = state["value"]


class Rounds(Executor):
    """The parent's executor: sends the sub-workflow ``rounds`` times, then yields what came back."""

    def __init__(self, id: str, rounds: int) -> None:
        super().__init__(id)
        self.rounds = rounds
        self.seen: list[int] = []

    @handler
    async def collect(self, message: Tally, ctx: WorkflowContext[Tally, str]) -> None:
        self.seen.append(message.total)
        if len(self.seen) < self.rounds:
            await ctx.send_message(Tally(message.step + 1, message.total, Stage.DRAFT))
        else:
            await ctx.yield_output(f"rounds={self.seen}")

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"seen": list(self.seen)}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.seen = list(state["seen"])


def sub_workflow(name: str, rounds: int, storage: Any = None, child_storage: Any = None) -> Workflow:
    """Parent ``name`` runs sub-workflow ``name-child`` ``rounds`` times (2 supersteps a round).

    ``child_storage`` is the sub-workflow's own storage (None: it saves nothing on its own).
    """
    double = Double("double")
    child = WorkflowBuilder(
        start_executor=double, name=f"{name}-child", checkpoint_storage=child_storage
    ).build()
    sub = WorkflowExecutor(child, id="sub")
    collect = Rounds("rounds", rounds)
    builder = WorkflowBuilder(start_executor=sub, name=name, checkpoint_storage=storage)
    return builder.add_edge(sub, collect).add_edge(collect, sub).build()


# ---------------------------------------------------------------- human in the loop


class Ask(Executor):
    """Counts two supersteps, asks a question, and answers with what it was told."""

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.steps = 0

    @handler
    async def think(self, message: Tally, ctx: WorkflowContext[Tally, str]) -> None:
        self.steps += 1
        if self.steps < 2:
            await ctx.send_message(Tally(message.step + 1, message.total + 1, Stage.DRAFT))
        else:
            await ctx.request_info(Question(topic=f"total {message.total}", asked_at_step=self.steps), str)

    @response_handler
    async def answer(
        self, original_request: Question, response: str, ctx: WorkflowContext[Tally, str]
    ) -> None:
        await ctx.yield_output(
            f"{original_request.topic} at step {original_request.asked_at_step}: {response}"
        )

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"steps": self.steps}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.steps = state["steps"]


def hitl_workflow(name: str, storage: Any = None) -> Workflow:
    ask = Ask("ask")
    return (
        WorkflowBuilder(start_executor=ask, name=name, checkpoint_storage=storage).add_edge(ask, ask).build()
    )


HITL_NAME = "maf-hitl"


async def pause(url: str) -> dict[str, str]:
    """Run the human-in-the-loop workflow until it asks; the checkpoint to resume from is latest."""
    async with open_storage(url) as storage:
        allow_user_types(storage)
        result = await hitl_workflow(HITL_NAME, storage).run(LOOP_INPUT)
        (request,) = result.get_request_info_events()
        latest = await storage.get_latest(workflow_name=HITL_NAME)
        assert latest is not None
        assert request.request_id in latest.pending_request_info_events
        return {"checkpoint_id": latest.checkpoint_id, "request_id": request.request_id}


async def resume(url: str, checkpoint_id: str, request_id: str, answer: str) -> dict[str, Any]:
    async with open_storage(url) as storage:
        allow_user_types(storage)
        result = await hitl_workflow(HITL_NAME).run(
            checkpoint_id=checkpoint_id, checkpoint_storage=storage, responses={request_id: answer}
        )
        return {"outputs": result.get_outputs()}


def main(argv: list[str]) -> None:
    mode, url, *rest = argv
    if mode == "pause":
        print(json.dumps(asyncio.run(pause(url))), flush=True)
    elif mode == "resume":
        checkpoint_id, request_id, answer = rest
        print(json.dumps(asyncio.run(resume(url, checkpoint_id, request_id, answer))), flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    # Through the module's own name, so stored type keys say ``maf_workflows:...``, not ``__main__``.
    import maf_workflows

    maf_workflows.main(sys.argv[1:])
