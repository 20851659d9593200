"""Judging one answer: what the storage returned or raised for an op, against what the model
allows, observable by observable (values with type fidelity, error types, order, aliases).

Kept apart from running a program (execute.py): this is the contract's comparison, the part a
reader checks when a verdict surprises them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .execute import Judging, Observation, build, is_not_found
from .ops import Op
from .spec import (
    FIELDS,
    ContractModel,
    Draft,
    Expect,
    Walk,
    Write,
)
from .values import difference


def judge(
    op: Op, expect: Expect, seen: Observation, judging: Judging, model: ContractModel | None = None
) -> str:
    """Why ``seen`` is not what ``expect`` allows ('' when it is). ``families`` (id -> the top-level
    id saved with it, from ``model``) lets listings order one save's records among themselves."""
    if seen.error is not None:
        exc = seen.error
        if expect.not_found and is_not_found(exc):
            return ""
        if expect.errors and isinstance(exc, expect.errors):
            return ""
        return f"raised {type(exc).__name__}: {_clip(str(exc))}; the contract says {describe(expect)}"
    if not expect.values:
        return f"returned {_clip(_show(seen.value))}; the contract says {describe(expect)}"
    if expect.values and (op.kind == "list_records" or op.params.get("include_nested")):
        families = model.families() if model is not None else {}
        seen = Observation(_in_family_order(op, seen.value, families), None)
        expect = Expect(values=tuple(_in_family_order(op, want, families) for want in expect.values))
    problems = [_compare(op, want, seen.value, judging) for want in expect.values]
    if any(not problem for problem in problems):
        return ""
    return problems[0]


def _in_family_order(op: Op, listed: Any, families: dict[str, str]) -> Any:
    """``listed`` with each run of consecutive records of one family sorted by id: two listings
    that differ only in the order one save's records take among themselves become equal."""
    if not isinstance(listed, list):
        return listed
    if op.kind == "list_records" and listed and not isinstance(listed[0], str):
        listed = [info.checkpoint_id for info in sorted(listed, key=lambda info: info.sequence)]
    by_id = {_ident(item): item for item in listed}
    return [by_id[i] for i in _runs_sorted([_ident(item) for item in listed], families)]


def _ident(item: Any) -> str:
    return str(item.checkpoint_id if isinstance(item, Draft) or hasattr(item, "state") else item)


def _runs_sorted(ids: list[str], families: dict[str, str]) -> list[str]:
    out: list[str] = []
    run: list[str] = []
    for checkpoint_id in ids:
        if run and families.get(checkpoint_id, checkpoint_id) != families.get(run[-1], run[-1]):
            out += sorted(run)
            run = []
        run.append(checkpoint_id)
    return out + sorted(run)


def describe(expect: Expect) -> str:
    if expect.not_found:
        return "CheckpointNotFoundError"
    if not expect.values:
        return "it raises " + " or ".join(e.__name__ for e in expect.errors)
    shown = " or ".join(_clip(_show(v)) for v in expect.values)
    if expect.errors:
        return f"it returns {shown} or raises " + " or ".join(e.__name__ for e in expect.errors)
    return f"it returns {shown}"


def _show(value: Any) -> str:
    if isinstance(value, Draft):
        return f"checkpoint {value.checkpoint_id!r}"
    if isinstance(value, list) and value and all(isinstance(v, Draft) for v in value):
        return "[" + ", ".join(repr(v.checkpoint_id) for v in value) + "]"
    if (
        isinstance(value, list)
        and value
        and all(hasattr(v, "checkpoint_id") and hasattr(v, "state") for v in value)
    ):
        return "[" + ", ".join(repr(v.checkpoint_id) for v in value) + "]"
    if hasattr(value, "checkpoint_id") and hasattr(value, "state"):
        return f"checkpoint {value.checkpoint_id!r}"
    if isinstance(value, Walk):
        return f"walk {list(value.ids)!r} ending {value.end.value} at {value.end_id!r}"
    return repr(value)


def _clip(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _checkpoint(want: Draft, got: Any, judging: Judging, what: str) -> str:
    checkpoint_class = judging.checkpoint_class
    if got is None:
        return f"{what}: returned None, expected checkpoint {want.checkpoint_id!r}"
    if type(got) is not checkpoint_class:
        wanted = checkpoint_class.__name__
        return f"{what}: returned a {type(got).__name__}, expected a {wanted} (the class saved)"
    problem = difference(
        build(want, checkpoint_class), got, "checkpoint", checkpoint_fields=FIELDS, aliases=judging.aliases
    )
    return f"{what}: {problem}" if problem else ""


def _checkpoints(want: Sequence[Draft], got: Any, judging: Judging, what: str) -> str:
    if not isinstance(got, list):
        return f"{what}: returned a {type(got).__name__}, not a list"
    want_ids = [str(d.checkpoint_id) for d in want]
    got_ids = [getattr(c, "checkpoint_id", c) for c in got]
    if want_ids != got_ids:
        return f"{what}: returned {got_ids!r}, expected {want_ids!r}"
    for draft, item in zip(want, got, strict=True):
        problem = _checkpoint(draft, item, judging, what)
        if problem:
            return problem
    return ""


def _compare(op: Op, want: Any, got: Any, judging: Judging) -> str:
    prefix = judging.prefix
    kind = op.kind
    what = "the answer"
    if kind in ("save", "save_fenced"):
        return "" if got == want else f"{what}: returned {got!r}, expected the id {want!r}"
    if kind in ("load", "get_latest"):
        if want is None:
            return "" if got is None else f"{what}: returned {_show(got)}, expected None"
        return _checkpoint(want, got, judging, what)
    if kind == "list_checkpoints":
        return _checkpoints(want, got, judging, what)
    if kind in ("list_checkpoint_ids", "list_nested"):
        return "" if got == want else f"{what}: {_list_difference(got, want)}"
    if kind == "delete":
        return "" if got is want or got == want else f"{what}: returned {got!r}, expected {want!r}"
    if kind == "walk":
        return _walk(op, want, got, judging)
    if kind in ("prune", "delete_workflow"):
        return "" if got == want and type(got) is int else f"{what}: returned {got!r}, expected {want!r}"
    if kind == "list_workflows":
        ours = [name for name in got if isinstance(name, str) and name.startswith(prefix)]
        if len(ours) != len(set(ours)):
            return f"{what}: lists a workflow twice: {sorted(ours)!r}"
        return "" if set(ours) == want else f"{what}: returned {sorted(ours)!r}, expected {sorted(want)!r}"
    if kind == "checkpoint_info":
        if want is None:
            return "" if got is None else f"{what}: returned {got!r} for an id that is not stored"
        if got is None:
            return f"{what}: returned None for a stored record"
        seen = (got.workflow_name, got.previous_checkpoint_id, got.graph_signature_hash, got.container_id)
        return (
            ""
            if seen == want
            else f"{what}: (workflow, previous, signature, container) is {seen!r}, expected {want!r}"
        )
    if kind == "list_records":
        ids = got  # ids in sequence order (see _in_family_order)
        return (
            ""
            if ids == want
            else f"{what}: records by sequence are {_clip(repr(ids))}, expected {_clip(repr(want))}"
        )
    if kind == "list_tombstones":
        # A pruned id saved again since is the storage's to list or not; every other is exact.
        graves, unclear = want
        listed = set(got) - unclear
        return "" if listed == graves else f"{what}: returned {sorted(got)!r}, expected {sorted(graves)!r}"
    if kind == "put_writes":
        return ""
    if kind == "list_writes":
        return _writes(want, got, what)
    if kind == "delete_writes":
        counted = isinstance(got, int) and not isinstance(got, bool) and got > 0
        return (
            ""
            if counted == want
            else f"{what}: returned {got!r} where writes {'were' if want else 'were not'} stored"
        )
    if kind == "list_workflow_writes":
        if set(got) != set(want):
            return f"{what}: covers checkpoints {sorted(got)!r}, expected {sorted(want)!r}"
        for checkpoint_id, writes in want.items():
            problem = _writes(writes, got[checkpoint_id], f"{what}[{checkpoint_id!r}]")
            if problem:
                return problem
        return ""
    if kind == "reopen":
        return ""
    raise ValueError(kind)


def _list_difference(got: Any, want: Sequence[Any]) -> str:
    """Where two listings part: the first differing position, with a few entries either side."""
    if not isinstance(got, list):
        return f"returned a {type(got).__name__}, not a list"
    position = next(
        (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want))
    )
    start = max(position - 2, 0)
    return (
        f"returned {len(got)} ids, expected {len(want)}; they part at position {position}: "
        f"returned ...{_clip(repr(got[start : position + 3]))}, "
        f"expected ...{_clip(repr(want[start : position + 3]))}"
    )


def _walk(op: Op, want: Walk, got: Any, judging: Judging) -> str:
    if op.params["bodies"]:
        ids = tuple(getattr(item, "checkpoint_id", item) for item in got.items)
    else:
        ids = tuple(got.items)
    end = getattr(got.end, "value", got.end)
    if (ids, end, got.end_id) != (want.ids, want.end.value, want.end_id):
        return (
            f"the walk: returned {list(ids)!r} ending {end} at {got.end_id!r}, "
            f"expected {list(want.ids)!r} ending {want.end.value} at {want.end_id!r}"
        )
    if op.params["bodies"]:
        for draft, item in zip(want.drafts, got.items, strict=True):
            problem = _checkpoint(draft, item, judging, "the walk's checkpoint")
            if problem:
                return problem
    return ""


def _writes(want: Sequence[Write], got: Any, what: str) -> str:
    if len(want) != len(got):
        return f"{what}: {len(got)} writes, expected {len(want)}: {_clip(repr(got))}"
    for index, (w, g) in enumerate(zip(want, got, strict=True)):
        seen = (g.task_id, g.index, g.channel, g.task_path)
        expected = (w.task_id, w.index, w.channel, w.task_path)
        if seen != expected:
            return f"{what}[{index}]: (task_id, index, channel, task_path) is {seen!r}, expected {expected!r}"
        problem = difference(w.value, g.value, f"{what}[{index}].value")
        if problem:
            return problem
    return ""


__all__ = ["describe", "judge"]
