"""Running a program: each op applied to the model (what must happen) and to the storage (what did),
and the two compared, observable by observable.

The comparison is the contract's, strictly: return values with type fidelity (the class the
checkpoint was saved as, every value of the type it was saved as), error types, order, and
isolation (what was saved, or returned, is mutated afterwards; the store must not notice).
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from storages.errors import CheckpointNotFoundError, CheckpointStorageError, InvalidCheckpointIdError

from .ops import Op
from .spec import (
    FIELDS,
    VALUE_FIELDS,
    ContractModel,
    Draft,
    Embedded,
    Expect,
    Walk,
    Write,
    identifier_problem,
)
from .values import KEEP, copy_value, difference, mutate_everywhere


def is_not_found(exc: BaseException) -> bool:
    """ "No such checkpoint": ours, or MAF's own exception from a storage of MAF's (which raises
    WorkflowCheckpointException for a missing id; our other errors derive from it too)."""
    if isinstance(exc, CheckpointNotFoundError):
        return True
    if isinstance(exc, CheckpointStorageError) or importlib.util.find_spec("agent_framework") is None:
        return False
    from agent_framework.exceptions import WorkflowCheckpointException

    return isinstance(exc, WorkflowCheckpointException)


def apply(model: ContractModel, op: Op) -> Expect:
    """What the contract says ``op`` must answer; the model changes as the store must."""
    expect = _apply(model, op)
    refusable = identifier_problem(op.params.get("checkpoint_id", "-")) or identifier_problem(
        op.params.get("workflow", "-")
    )
    if op.kind not in ("save", "save_fenced") and refusable:
        # A read of an id no save accepts may be refused as such, or answered as not stored.
        return replace(expect, errors=(*expect.errors, InvalidCheckpointIdError))
    return expect


def _apply(model: ContractModel, op: Op) -> Expect:
    kind, p = op.kind, op.params
    if kind == "save":
        return model.save(p["draft"])
    if kind == "save_fenced":
        return model.save(p["draft"], fenced=True, expected_latest=p["expected_latest_id"])
    if kind == "load":
        return model.load(p["checkpoint_id"], p["signature"])
    if kind == "get_latest":
        return model.get_latest(p["workflow"], p["signature"])
    if kind == "list_checkpoints":
        return model.list_checkpoints(p["workflow"], p["signature"], p["include_nested"])
    if kind == "list_checkpoint_ids":
        return model.list_checkpoint_ids(p["workflow"], p["signature"], p["include_nested"])
    if kind == "delete":
        return model.delete(p["checkpoint_id"])
    if kind == "walk":
        return model.walk(p["checkpoint_id"], p["max_depth"])
    if kind == "prune":
        return model.prune(p["workflow"], p["keep_last"])
    if kind == "delete_workflow":
        return model.delete_workflow(p["workflow"])
    if kind == "list_workflows":
        return Expect.value(model.workflows())
    if kind == "list_nested":
        return model.list_nested(p["checkpoint_id"])
    if kind == "checkpoint_info":
        return model.info(p["checkpoint_id"])
    if kind == "list_records":
        return model.records_of(p["workflow"])
    if kind == "list_tombstones":
        return Expect.value(model.tombstones_of(p["workflow"]))
    if kind == "put_writes":
        return model.put_writes(p["checkpoint_id"], p["workflow"], p["writes"])
    if kind == "list_writes":
        return model.list_writes(p["checkpoint_id"], p["workflow"])
    if kind == "delete_writes":
        return model.delete_writes(p["checkpoint_id"], p["workflow"])
    if kind == "list_workflow_writes":
        return model.workflow_writes(p["workflow"])
    if kind == "reopen":
        return Expect.value(None)
    raise ValueError(f"unknown op kind {kind!r}")


# ---------------------------------------------------------------------- the storage's side


def build(draft: Draft, checkpoint_class: type[Any], memo: dict[int, Any] | None = None) -> Any:
    """A fresh checkpoint object of ``checkpoint_class`` from a draft; embedded drafts become
    embedded objects, one object per Embedded (aliases stay aliases)."""
    memo = {} if memo is None else memo

    def rebuild(value: Any) -> Any:
        if isinstance(value, Embedded):
            if id(value) not in memo:
                memo[id(value)] = build(value.draft, checkpoint_class, memo)
            return memo[id(value)]
        return KEEP

    fields = {
        name: copy_value(getattr(draft, name), rebuild) if name in VALUE_FIELDS else getattr(draft, name)
        for name in FIELDS
    }
    return checkpoint_class(**fields)


@dataclass
class Observation:
    value: Any = None
    error: BaseException | None = None
    invoked: int = 0
    returned: int = 0


class Subject:
    """The storage under test as the program sees it: numbered handles on one store, and how to
    rebuild the store from its settings (``rebuild``: None when the target gives no way)."""

    def __init__(
        self,
        first: Any,
        more: Callable[[], Any],
        rebuild: Callable[[], Any] | None,
        checkpoint_class: type[Any],
        prefix: str,
        *,
        aliases: bool = True,
    ) -> None:
        self.handles = [first]
        self.judging = Judging(checkpoint_class, prefix, aliases)
        self._more = more
        self._rebuild = rebuild
        self.checkpoint_class = checkpoint_class
        self.prefix = prefix
        self.clock = 0

    async def handle(self, index: int) -> Any:
        while len(self.handles) <= index:
            handle = self._more()
            self.handles.append(await handle if inspect.isawaitable(handle) else handle)
        return self.handles[index]

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    async def perform(self, op: Op) -> Observation:
        if op.kind == "reopen":
            assert self._rebuild is not None
            self.handles = [await self._rebuild()]
            return Observation(None)
        storage = await self.handle(op.handle)
        observation = Observation(invoked=self.tick())
        try:
            observation.value = await self._call(storage, op)
        except Exception as exc:
            observation.error = exc
        observation.returned = self.tick()
        return observation

    async def _call(self, storage: Any, op: Op) -> Any:
        kind, p = op.kind, op.params
        if kind in ("save", "save_fenced"):
            checkpoint = build(p["draft"], self.checkpoint_class)
            if kind == "save":
                result = await storage.save(checkpoint)
            else:
                result = await storage.save(checkpoint, expected_latest_id=p["expected_latest_id"])
            if p.get("mutate_after"):
                mutate_everywhere(checkpoint)
            return result
        if kind == "load":
            if p["signature"] is None:
                loaded = await storage.load(p["checkpoint_id"])
            else:
                loaded = await storage.load(p["checkpoint_id"], expected_graph_signature_hash=p["signature"])
            return _snapshot_then_mutate(loaded, p)
        if kind == "get_latest":
            options = {} if p["signature"] is None else {"graph_signature_hash": p["signature"]}
            return _snapshot_then_mutate(await storage.get_latest(workflow_name=p["workflow"], **options), p)
        if kind in ("list_checkpoints", "list_checkpoint_ids"):
            options = {}
            if p["signature"] is not None:
                options["graph_signature_hash"] = p["signature"]
            if p["include_nested"]:
                options["include_nested"] = True
            listed = await getattr(storage, kind)(workflow_name=p["workflow"], **options)
            return _snapshot_then_mutate(listed, p) if kind == "list_checkpoints" else list(listed)
        if kind == "delete":
            return await storage.delete(p["checkpoint_id"])
        if kind == "walk":
            walk = storage.walk_ancestry if p["bodies"] else storage.walk_ancestry_ids
            if p["max_depth"] == 100_000:
                return await walk(p["checkpoint_id"])
            return await walk(p["checkpoint_id"], max_depth=p["max_depth"])
        if kind == "prune":
            return await storage.prune(workflow_name=p["workflow"], keep_last=p["keep_last"])
        if kind == "delete_workflow":
            return await storage.delete_workflow(workflow_name=p["workflow"])
        if kind == "list_workflows":
            return list(await storage.list_workflows())
        if kind == "list_nested":
            return list(await storage.list_nested(p["checkpoint_id"]))
        if kind == "checkpoint_info":
            return await storage.checkpoint_info(p["checkpoint_id"])
        if kind == "list_records":
            return list(await storage.list_records(workflow_name=p["workflow"]))
        if kind == "list_tombstones":
            return list(await storage.list_tombstones(workflow_name=p["workflow"]))
        if kind == "put_writes":
            from storages.contract import PendingWrite

            writes = [
                PendingWrite(w.task_id, w.index, w.channel, copy_value(w.value), w.task_path)
                for w in p["writes"]
            ]
            return await storage.put_writes(p["checkpoint_id"], writes, workflow_name=p["workflow"])
        if kind == "list_writes":
            return list(await storage.list_writes(p["checkpoint_id"], workflow_name=p["workflow"]))
        if kind == "delete_writes":
            return await storage.delete_writes(p["checkpoint_id"], workflow_name=p["workflow"])
        if kind == "list_workflow_writes":
            return dict(await storage.list_workflow_writes(workflow_name=p["workflow"]))
        raise ValueError(f"unknown op kind {kind!r}")


def _snapshot_then_mutate(value: Any, params: dict[str, Any]) -> Any:
    """The answer as it was returned; then, for the isolation probe, the caller's copy is mutated
    (a later read must not see it). The snapshot is taken before mutating, so the answer itself is
    judged as returned."""
    if not params.get("mutate_after") or value is None:
        return value
    import copy

    snapshot = copy.deepcopy(value)
    mutate_everywhere(value if not isinstance(value, list) else list(value))
    if isinstance(value, list):
        for item in value:
            mutate_everywhere(item)
    return snapshot


# ---------------------------------------------------------------------- judging


@dataclass(frozen=True)
class Judging:
    """How answers are judged for one storage: the class it was given, the program's name prefix
    (list_workflows is judged on those names only), and whether embedded checkpoints keep their
    aliases (the contract asks it of nested records; a storage without ``nested`` keeps values)."""

    checkpoint_class: type[Any]
    prefix: str
    aliases: bool = True


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


__all__ = ["Judging", "Observation", "Subject", "apply", "build", "describe", "judge"]
