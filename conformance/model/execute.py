"""Running a program: each op applied to the model (what must happen) and to the storage (what did),
and the two compared, observable by observable.

The comparison is the contract's, strictly: return values with type fidelity (the class the
checkpoint was saved as, every value of the type it was saved as), error types, order, and
isolation (what was saved, or returned, is mutated afterwards; the store must not notice).
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
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
    identifier_problem,
)
from .values import KEEP, copy_value, mutate_everywhere


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


@dataclass(frozen=True)
class Judging:
    """How answers are judged for one storage: the class it was given, the program's name prefix
    (list_workflows is judged on those names only), and whether embedded checkpoints keep their
    aliases (the contract asks it of nested records; a storage without ``nested`` keeps values)."""

    checkpoint_class: type[Any]
    prefix: str
    aliases: bool = True


__all__ = ["Judging", "Observation", "Subject", "apply", "build", "is_not_found"]
