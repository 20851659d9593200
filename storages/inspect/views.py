"""What ``inspect`` shows, as data: workflow summaries, lineage trees and one checkpoint's fields,
built from the index (see the package's docstring); :mod:`storages.inspect.render` draws them."""

from __future__ import annotations

import dataclasses
import enum
import reprlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..contract import Capability, CheckpointID, CheckpointInfo, CheckpointStorage
from ..errors import CheckpointCorruptedError, CheckpointNotFoundError
from ..verify import require_capabilities

VALUE_WIDTH = 100
"""Longest abbreviated value shown in the one-checkpoint view, in characters."""


class LineageStart(str, enum.Enum):
    """Why a checkpoint starts a line of the tree instead of hanging under its previous one."""

    ROOT = "root"
    """Its previous id is None."""
    PRUNED = "pruned"
    """Its previous checkpoint was pruned (a tombstone marks it)."""
    MISSING = "missing"
    """Its previous id resolves to nothing: a dangling link."""
    ELSEWHERE = "elsewhere"
    """Its previous checkpoint is stored, outside this workflow's tree."""
    CYCLE = "cycle"
    """Its previous links form a cycle; the tree breaks the cycle here."""

    def __str__(self) -> str:
        return self.value


@dataclass(slots=True)
class LineageNode:
    info: CheckpointInfo
    children: list[LineageNode] = field(default_factory=list)
    """Checkpoints whose previous id is this one, oldest first."""
    nested: list[LineageNode] = field(default_factory=list)
    """Records nested in this one, oldest first."""
    start: LineageStart | None = None
    """Set on the first checkpoint of each line of the tree."""
    previous_workflow: str | None = None
    """For ELSEWHERE: the workflow the previous checkpoint belongs to."""
    latest: bool = False
    """The workflow's latest top-level checkpoint (what get_latest returns)."""
    signature_changed: bool = False
    """Its graph signature differs from its previous checkpoint's."""

    @property
    def checkpoint_id(self) -> CheckpointID:
        return self.info.checkpoint_id

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self.info),
            "start": None if self.start is None else self.start.value,
            "latest": self.latest,
            "signature_changed": self.signature_changed,
            "nested": [node.to_dict() for node in self.nested],
            "children": [node.to_dict() for node in self.children],
        }


@dataclass(slots=True)
class LineageTree:
    workflow_name: str
    roots: list[LineageNode]
    checkpoints: int
    """Top-level checkpoints of the workflow."""
    nested: int
    """Nested records in the tree, of any workflow name."""
    pruned: int
    """Tombstones of the workflow (checkpoints pruned from it)."""

    def walk(self) -> list[LineageNode]:
        """Every node, depth first, containers before their nested records."""
        found: list[LineageNode] = []
        pending = list(reversed(self.roots))
        while pending:
            node = pending.pop()
            found.append(node)
            pending.extend(reversed([*node.nested, *node.children]))
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow_name": self.workflow_name,
            "checkpoints": self.checkpoints,
            "nested": self.nested,
            "pruned": self.pruned,
            "roots": [node.to_dict() for node in self.roots],
        }


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    workflow_name: str
    checkpoints: int
    nested: int
    pruned: int
    latest_id: CheckpointID | None
    signatures: int
    """Distinct graph signatures among its records."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow_name": self.workflow_name,
            "checkpoints": self.checkpoints,
            "nested": self.nested,
            "pruned": self.pruned,
            "latest_id": self.latest_id,
            "signatures": self.signatures,
        }


@dataclass(frozen=True, slots=True)
class CheckpointView:
    """One checkpoint: its index entry, its neighbours, and its fields abbreviated for display."""

    info: CheckpointInfo
    previous_status: str | None
    """None without a previous id, else "stored", "pruned" or "missing"."""
    container: CheckpointInfo | None
    nested_ids: tuple[CheckpointID, ...]
    fields: tuple[tuple[str, str], ...]
    """Decoded fields other than the index ones, values abbreviated; empty if it cannot be loaded."""
    error: str | None
    """Why the body could not be loaded, if it could not."""

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self.info),
            "previous_status": self.previous_status,
            "nested_ids": list(self.nested_ids),
            "fields": dict(self.fields),
            "error": self.error,
        }


# ---------------------------------------------------------------------- building


async def list_workflow_summaries(storage: CheckpointStorage) -> list[WorkflowSummary]:
    """One summary per workflow name with a stored record, sorted by name."""
    require_capabilities(storage, "inspect", (Capability.INSPECT,))
    by_workflow: dict[str, list[CheckpointInfo]] = defaultdict(list)
    for info in await storage.list_records():
        by_workflow[info.workflow_name].append(info)
    summaries: list[WorkflowSummary] = []
    for name in sorted(by_workflow):
        records = by_workflow[name]
        top = [info for info in records if not info.nested]
        summaries.append(
            WorkflowSummary(
                workflow_name=name,
                checkpoints=len(top),
                nested=len(records) - len(top),
                pruned=len(await storage.list_tombstones(workflow_name=name)),
                latest_id=max(top, key=lambda info: info.sequence).checkpoint_id if top else None,
                signatures=len({info.graph_signature_hash for info in records}),
            )
        )
    return summaries


async def build_lineage(storage: CheckpointStorage, workflow_name: str) -> LineageTree:
    """The lineage tree of ``workflow_name``: its records and every record nested in them.

    A workflow with no stored record gives a tree without roots.
    """
    require_capabilities(storage, "inspect", (Capability.INSPECT,))
    # The whole index: records nested in this workflow's checkpoints usually carry the
    # sub-workflow's own name, and a previous id may lead into another workflow.
    everything = {info.checkpoint_id: info for info in await storage.list_records()}
    members = {i: info for i, info in everything.items() if info.workflow_name == workflow_name}
    by_container: dict[CheckpointID, list[CheckpointInfo]] = defaultdict(list)
    for info in everything.values():
        if info.container_id is not None:
            by_container[info.container_id].append(info)
    pending = list(members)
    while pending:  # bring in what is nested in members, at any depth, whatever its name
        for nested in by_container.get(pending.pop(), ()):
            if nested.checkpoint_id not in members:
                members[nested.checkpoint_id] = nested
                pending.append(nested.checkpoint_id)
    # Every workflow's tombstones: a record nested under another name is tombstoned under the
    # name of the workflow that was pruned.
    tombstones = frozenset(await storage.list_tombstones())
    pruned = len(await storage.list_tombstones(workflow_name=workflow_name))
    return _assemble(workflow_name, members, everything, tombstones, pruned)


def _assemble(
    workflow_name: str,
    members: dict[CheckpointID, CheckpointInfo],
    everything: dict[CheckpointID, CheckpointInfo],
    tombstones: frozenset[CheckpointID],
    pruned: int,
) -> LineageTree:
    order = sorted(members.values(), key=lambda info: (info.workflow_name != workflow_name, info.sequence))
    nodes = {info.checkpoint_id: LineageNode(info) for info in order}
    # Where each node hangs: under its container if that is in the tree, else under its previous.
    parent: dict[CheckpointID, tuple[CheckpointID, bool]] = {}
    for info in order:
        node = nodes[info.checkpoint_id]
        previous_id = info.previous_checkpoint_id
        previous = members.get(previous_id) if previous_id is not None else None
        if previous is not None and previous.graph_signature_hash != info.graph_signature_hash:
            node.signature_changed = True
        if info.container_id is not None and info.container_id in members:
            parent[info.checkpoint_id] = (info.container_id, True)
        elif previous_id is None:
            node.start = LineageStart.ROOT
        elif previous is not None:
            parent[info.checkpoint_id] = (previous_id, False)
        elif previous_id in everything:
            node.start = LineageStart.ELSEWHERE
            node.previous_workflow = everything[previous_id].workflow_name
        else:
            node.start = LineageStart.PRUNED if previous_id in tombstones else LineageStart.MISSING
    # A record reachable from no start lies on (or leads into) a cycle: start the tree at one
    # record of that cycle, found by following parents until one repeats, and try again.
    reached = _reachable(nodes, parent)
    for info in order:
        while info.checkpoint_id not in reached:
            seen: set[CheckpointID] = set()
            current = info.checkpoint_id
            while current not in seen:
                seen.add(current)
                current = parent[current][0]
            del parent[current]
            nodes[current].start = LineageStart.CYCLE
            reached = _reachable(nodes, parent)
    for child_id, (parent_id, is_nested) in parent.items():
        (nodes[parent_id].nested if is_nested else nodes[parent_id].children).append(nodes[child_id])
    top = [info for info in order if info.workflow_name == workflow_name and not info.nested]
    if top:
        nodes[max(top, key=lambda info: info.sequence).checkpoint_id].latest = True
    return LineageTree(
        workflow_name=workflow_name,
        roots=[nodes[info.checkpoint_id] for info in order if nodes[info.checkpoint_id].start is not None],
        checkpoints=len(top),
        nested=sum(1 for info in order if info.nested),
        pruned=pruned,
    )


def _reachable(
    nodes: dict[CheckpointID, LineageNode], parent: dict[CheckpointID, tuple[CheckpointID, bool]]
) -> set[CheckpointID]:
    below: dict[CheckpointID, list[CheckpointID]] = defaultdict(list)
    for child_id, (parent_id, _) in parent.items():
        below[parent_id].append(child_id)
    pending = [i for i, node in nodes.items() if node.start is not None]
    reached = set(pending)
    while pending:
        for child_id in below.get(pending.pop(), ()):
            if child_id not in reached:
                reached.add(child_id)
                pending.append(child_id)
    return reached


async def describe_checkpoint(storage: CheckpointStorage, checkpoint_id: CheckpointID) -> CheckpointView:
    """One checkpoint's index entry, neighbours and fields; raises CheckpointNotFoundError."""
    require_capabilities(storage, "inspect", (Capability.INSPECT,))
    info = await storage.checkpoint_info(checkpoint_id)
    if info is None:
        raise CheckpointNotFoundError(checkpoint_id)
    previous_status: str | None = None
    if info.previous_checkpoint_id is not None:
        if await storage.checkpoint_info(info.previous_checkpoint_id) is not None:
            previous_status = "stored"
        elif info.previous_checkpoint_id in await storage.list_tombstones():
            previous_status = "pruned"
        else:
            previous_status = "missing"
    container = None if info.container_id is None else await storage.checkpoint_info(info.container_id)
    nested_ids: list[CheckpointID] = []
    if Capability.NESTED in getattr(storage, "capabilities", frozenset()):
        nested_ids = await storage.list_nested(checkpoint_id)
    error: str | None = None
    shown: list[tuple[str, str]] = []
    try:
        checkpoint = await storage.load(checkpoint_id)
    except CheckpointCorruptedError as exc:
        error = exc.reason
    else:
        for name in ("timestamp", "iteration_count", "version"):
            shown.append((name, abbreviate_value(getattr(checkpoint, name))))
        for name in ("messages", "state", "pending_request_info_events", "metadata"):
            value = getattr(checkpoint, name)
            shown.append((name, _count(value) + abbreviate_value(value)))
    return CheckpointView(info, previous_status, container, tuple(nested_ids), tuple(shown), error)


class _ShortRepr(reprlib.Repr):
    """reprlib with room for a line of context, showing embedded checkpoints by id only."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxdict = 6
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = 6
        self.maxstring = 40
        self.maxother = 40

    def repr1(self, x: Any, level: int) -> str:
        if hasattr(x, "checkpoint_id") and hasattr(x, "graph_signature_hash"):
            return f"<checkpoint {x.checkpoint_id!r}>"
        return super().repr1(x, level)


_SHORT_REPR = _ShortRepr()


def abbreviate_value(value: Any, width: int = VALUE_WIDTH) -> str:
    """A one-line repr of at most ``width`` characters."""
    text = _SHORT_REPR.repr(value).replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _count(value: Any) -> str:
    if not isinstance(value, dict) or not value:
        return ""
    return f"{len(value)} key{'' if len(value) == 1 else 's'}: "


# ---------------------------------------------------------------------- rendering


__all__ = [
    "CheckpointView",
    "LineageNode",
    "LineageStart",
    "LineageTree",
    "WorkflowSummary",
    "abbreviate_value",
    "build_lineage",
    "describe_checkpoint",
    "list_workflow_summaries",
]
