"""Checking a storage against the model: sequential programs, concurrent rounds (linearizability),
shrinking a failing program, and a runnable reproducer.

**Linearizability.** Calls started together (a ``concurrent`` op) are recorded with a logical clock
at invocation and return. The round is correct when some order of its calls that respects real
time (a call that returned before another was invoked comes first) makes the model give every
answer the storage gave. The checker tries such orders depth first from every model state still
possible (a bounded Wing & Gong search: rounds are small, and states no later observation could
tell apart are merged), in the manner of Knossos; later operations narrow the states down again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .execute import Observation, Subject, apply
from .judge import describe, judge
from .ops import Op
from .spec import FIELDS, VALUE_FIELDS, ContractModel, Draft, Embedded, Write

MAX_STATES = 256
"""Model states kept after a concurrent round (distinct fingerprints); more is not needed for
rounds of at most five calls, and bounds the search."""


@dataclass
class Failure:
    """Where a program and the contract parted."""

    index: int
    op: Op
    problem: str
    observations: list[Observation] = field(default_factory=list)


@dataclass
class Progress:
    executed: int = 0


async def run_program(
    subject: Subject,
    ops: Sequence[Op],
    *,
    nested: bool,
    deadline: float | None = None,
    progress: Progress | None = None,
) -> Failure | None:
    """Run ``ops`` in order on ``subject``; the first op whose answer the contract does not allow."""
    states = [ContractModel(nested=nested)]
    for index, op in enumerate(ops):
        if deadline is not None and time.monotonic() > deadline:
            break
        if op.kind == "concurrent":
            for call in op.round:
                await subject.handle(call.handle)  # opened beforehand: the calls start together
            observations = await asyncio.gather(*(subject.perform(call) for call in op.round))
            states, problem = linearize(states, op.round, list(observations), subject)
            if problem:
                return Failure(index, op, problem, list(observations))
        else:
            seen = await subject.perform(op)
            states, problem = _advance(states, op, seen, subject)
            if problem:
                return Failure(index, op, problem, [seen])
        if progress is not None:
            progress.executed = index + 1
    return None


def _advance(
    states: list[ContractModel], op: Op, seen: Observation, subject: Subject
) -> tuple[list[ContractModel], str]:
    for state in states:
        state.racing_deletes.clear()  # a call alone races nothing
    if len(states) == 1:
        expect = apply(states[0], op)  # one possible state: change it in place
        return states, judge(op, expect, seen, subject.judging, states[0])
    survivors: list[ContractModel] = []
    first = ""
    for state in states:
        twin = state.clone()
        problem = judge(op, apply(twin, op), seen, subject.judging, twin)
        if problem:
            first = first or problem
        else:
            survivors.append(twin)
    return (survivors, "") if survivors else (states, first)


def linearize(
    states: list[ContractModel], calls: Sequence[Op], seen: Sequence[Observation], subject: Subject
) -> tuple[list[ContractModel], str]:
    """The model states some real-time-respecting order of ``calls`` leads to, given what each
    returned; a message naming the calls and answers when no order explains them."""
    ends: dict[Any, ContractModel] = {}
    problems: list[str] = []

    def before(i: int, j: int) -> bool:
        return seen[i].returned < seen[j].invoked

    def search(state: ContractModel, remaining: frozenset[int]) -> None:
        if len(ends) >= MAX_STATES:
            return
        if not remaining:
            ends.setdefault(state.fingerprint(), state)
            return
        for j in sorted(remaining):
            if any(before(i, j) for i in remaining if i != j):
                continue
            twin = state.clone()
            problem = judge(calls[j], apply(twin, calls[j]), seen[j], subject.judging, twin)
            if problem:
                problems.append(f"call {j + 1} {problem}")
                continue
            search(twin, remaining - {j})

    for state in states:
        state.racing_deletes = set()
        search(state, frozenset(range(len(calls))))
    if ends:
        for end in ends.values():
            end.racing_deletes = set()
        return list(ends.values()), ""
    answers = "; ".join(
        f"call {i + 1} {render_call(call)} -> {_answer(observation)}"
        for i, (call, observation) in enumerate(zip(calls, seen, strict=True))
    )
    reason = problems[0] if problems else "no order respects real time"
    return (
        states,
        f"no order of these {len(calls)} concurrent calls explains their answers ({answers}); e.g. {reason}",
    )


def _answer(observation: Observation) -> str:
    if observation.error is not None:
        return f"raised {type(observation.error).__name__}"
    value = observation.value
    if hasattr(value, "checkpoint_id") and hasattr(value, "state"):
        return f"checkpoint {value.checkpoint_id!r}"
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


# ---------------------------------------------------------------------- shrinking


async def shrink(
    ops: list[Op], failure: Failure, replay: Callable[[list[Op]], Awaitable[Failure | None]], attempts: int
) -> tuple[list[Op], Failure]:
    """A shorter program that still fails (any failure counts), by removing chunks of ops, halving
    the chunk size down to one op (delta debugging); at most ``attempts`` replays."""
    current, found = ops[: failure.index + 1], failure
    chunk = max(len(current) // 2, 1)
    while attempts > 0:
        start, removed = 0, False
        while start < len(current) and attempts > 0:
            candidate = current[:start] + current[start + chunk :]
            if not candidate:
                start += chunk
                continue
            attempts -= 1
            again = await replay(candidate)
            if again is not None:
                current, found, removed = candidate[: again.index + 1], again, True
            else:
                start += chunk
        if chunk == 1 and not removed:
            break
        chunk = max(chunk // 2, 1)
    return current, found


# ---------------------------------------------------------------------- the reproducer


def reproducer(ops: Sequence[Op], failure: Failure, checkpoint_class: type[Any], header: str) -> str:
    """Python source that replays ``ops`` on a storage and shows the failing call's answer."""
    lines = [
        f"# {header}",
        "import asyncio, datetime, uuid, zoneinfo",
        "from decimal import Decimal",
        "from uuid import UUID",
        f"from {checkpoint_class.__module__} import {checkpoint_class.__qualname__} as Checkpoint",
        "from storages.contract import PendingWrite",
        "nan, inf = float('nan'), float('inf')",
        "",
        "",
        "async def reproduce(storage):",
        "    handles = [storage]",
    ]
    handles = 1
    renderer = _Renderer()
    for index, op in enumerate(ops):
        calls = op.round if op.kind == "concurrent" else [op]
        for call in calls:
            while call.handle >= handles:
                lines.append("    handles.append(storage.new_handle())")
                handles += 1
            for definition in renderer.definitions(call):
                lines.append(f"    {definition}")
        last = index == len(ops) - 1
        if op.kind == "reopen":
            lines.append("    # every handle closed and the storage rebuilt from its settings:")
            lines.append("    for handle in handles: await handle.aclose()")
            lines.append("    storage = handles[0] = ...  # build it again, as you built the first")
            lines.append("    handles[1:] = []")
            handles = 1
        elif op.kind == "concurrent":
            inner = ", ".join(renderer.call(call) for call in op.round)
            lines.append(f"    answers = await asyncio.gather({inner}, return_exceptions=True)")
            if last:
                lines.append("    print(answers)")
        else:
            expression = f"await {renderer.call(op)}"
            if last:
                lines.append(f"    print({expression})  # the call the contract disagrees with")
            else:
                lines.append(f"    {expression}")
    lines.append(f"    # {failure.problem[:300]}")
    lines.append("")
    lines.append("# asyncio.run(reproduce(<your storage, on an empty scratch store>))")
    return "\n".join(lines)


class _Renderer:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def definitions(self, op: Op) -> list[str]:
        """Assignments of the embedded checkpoints ``op`` needs (each object once, for aliases)."""
        out: list[str] = []
        draft = op.params.get("draft")
        if isinstance(draft, Draft):
            for embedded in reversed(_embedded_objects(draft)):
                if id(embedded) not in self.names:
                    name = f"sub{len(self.names) + 1}"
                    out.append(f"{name} = {self.checkpoint(embedded.draft)}")
                    self.names[id(embedded)] = name
        return out

    def checkpoint(self, draft: Draft) -> str:
        parts = [f"{name}={self.value(getattr(draft, name))}" for name in FIELDS]
        return "Checkpoint(" + ", ".join(parts) + ")"

    def value(self, value: Any) -> str:
        if isinstance(value, Embedded):
            return self.names.get(id(value), self.checkpoint(value.draft))
        if isinstance(value, dict):
            return "{" + ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(self.value(v) for v in value) + "]"
        if isinstance(value, tuple):
            inner = ", ".join(self.value(v) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return repr(value)

    def call(self, op: Op) -> str:
        p = op.params
        target = f"handles[{op.handle}]"
        kind = op.kind
        if kind == "save":
            return f"{target}.save({self.checkpoint(p['draft'])})"
        if kind == "save_fenced":
            expected = p["expected_latest_id"]
            return f"{target}.save({self.checkpoint(p['draft'])}, expected_latest_id={expected!r})"
        if kind == "load":
            extra = "" if p["signature"] is None else f", expected_graph_signature_hash={p['signature']!r}"
            return f"{target}.load({p['checkpoint_id']!r}{extra})"
        if kind in ("get_latest", "list_checkpoints", "list_checkpoint_ids"):
            extra = "" if p.get("signature") is None else f", graph_signature_hash={p['signature']!r}"
            if p.get("include_nested"):
                extra += ", include_nested=True"
            return f"{target}.{kind}(workflow_name={p['workflow']!r}{extra})"
        if kind in ("delete", "list_nested", "checkpoint_info"):
            return f"{target}.{kind}({p['checkpoint_id']!r})"
        if kind == "walk":
            method = "walk_ancestry" if p["bodies"] else "walk_ancestry_ids"
            depth = "" if p["max_depth"] == 100_000 else f", max_depth={p['max_depth']!r}"
            return f"{target}.{method}({p['checkpoint_id']!r}{depth})"
        if kind == "prune":
            return f"{target}.prune(workflow_name={p['workflow']!r}, keep_last={p['keep_last']!r})"
        if kind in ("delete_workflow", "list_records", "list_tombstones", "list_workflow_writes"):
            return f"{target}.{kind}(workflow_name={p['workflow']!r})"
        if kind == "list_workflows":
            return f"{target}.list_workflows()"
        if kind == "put_writes":
            writes = ", ".join(_write(w, self) for w in p["writes"])
            return f"{target}.put_writes({p['checkpoint_id']!r}, [{writes}], workflow_name={p['workflow']!r})"
        if kind in ("list_writes", "delete_writes"):
            return f"{target}.{kind}({p['checkpoint_id']!r}, workflow_name={p['workflow']!r})"
        return f"{target}  # {kind}"


def _write(write: Write, renderer: _Renderer) -> str:
    return (
        f"PendingWrite({write.task_id!r}, {write.index!r}, {write.channel!r}, "
        f"{renderer.value(write.value)}, {write.task_path!r})"
    )


def _embedded_objects(draft: Draft) -> list[Embedded]:
    found: list[Embedded] = []
    seen: set[int] = set()

    def visit(value: Any) -> None:
        if isinstance(value, Embedded):
            if id(value) not in seen:
                seen.add(id(value))
                found.append(value)
                for name in VALUE_FIELDS:
                    visit(getattr(value.draft, name))
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    for name in VALUE_FIELDS:
        visit(getattr(draft, name))
    return found


def render_call(op: Op) -> str:
    return _Renderer().call(op)


def summary(ops: Sequence[Op]) -> str:
    """The shrunk program, one call a line, for the console."""
    renderer = _Renderer()
    lines = []
    for index, op in enumerate(ops, start=1):
        if op.kind == "concurrent":
            lines.append(f"{index:>3}. together: " + " | ".join(_short(renderer.call(c)) for c in op.round))
        elif op.kind == "reopen":
            lines.append(f"{index:>3}. rebuild the storage from its settings")
        else:
            lines.append(f"{index:>3}. {_short(renderer.call(op))}")
    return "\n".join(lines)


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = [
    "Failure",
    "Progress",
    "describe",
    "linearize",
    "reproducer",
    "run_program",
    "shrink",
    "summary",
]
