"""A workflow's lineage, built from the index and walked without recursion.

:func:`build_lineage` reads the index once (``list_records``) and keeps, per record, only its
index entry and the ids hanging under it; nothing per line of output. :meth:`LineageTree.entries`
then yields the drawn lines one at a time, depth first, from an explicit stack whose size is the
depth of forks and nesting (a run of checkpoints, each continuing from the one above, stays at one
level), so a chain of 100,000 checkpoints is drawn with a stack of one frame.
:func:`stream_lineage` adds what only a body holds (timestamp, iteration number) line by line.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..contract import Capability, CheckpointID, CheckpointInfo, CheckpointStorage
from ..verify import require_capabilities
from .peek import BodyFields, peek_body_fields

_NONE: list[CheckpointID] = []
"""The children of a checkpoint without any (shared, never modified)."""


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


class Relation(str, enum.Enum):
    """How a drawn checkpoint hangs under the checkpoint above it."""

    CHILD = "child"
    """Its previous id is that checkpoint (the next step of a run, or one branch of a fork)."""
    NESTED = "nested"
    """It is embedded in that checkpoint (a sub-workflow's record)."""
    SUBGRAPH = "subgraph"
    """A LangGraph subgraph's run, started while that checkpoint was the parent graph's."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class LineageEntry:
    """One line of a drawn lineage: a checkpoint, or a heading (``line 1 of 3``, ``branch 2 of 2``)."""

    guides: str
    """The tree's drawing left of the line (``│   ├── ``)."""
    level: int
    """Indentation level (0: directly under the title)."""
    heading: str | None = None
    """For a heading line: its text; None for a checkpoint."""
    info: CheckpointInfo | None = None
    parent_id: CheckpointID | None = None
    """The checkpoint this one is drawn under (None at the top or under a heading only)."""
    relation: Relation | None = None
    start: LineageStart | None = None
    previous_workflow: str | None = None
    """For ELSEWHERE: the workflow the previous checkpoint belongs to."""
    latest: bool = False
    signature_changed: bool = False
    first_of_run: bool = False
    """The first checkpoint drawn at its level under a container (marked ``nested``)."""


@dataclass(frozen=True, slots=True)
class LineageLine:
    """A drawn checkpoint line with the fields read from its body."""

    entry: LineageEntry
    fields: BodyFields | None
    """None for a heading."""

    def to_dict(self) -> dict[str, Any]:
        entry = self.entry
        if entry.info is None:
            return {"heading": entry.heading, "level": entry.level}
        return {
            **dataclasses.asdict(entry.info),
            "level": entry.level,
            "parent_id": entry.parent_id,
            "relation": None if entry.relation is None else entry.relation.value,
            "start": None if entry.start is None else entry.start.value,
            "previous_workflow": entry.previous_workflow,
            "latest": entry.latest,
            "signature_changed": entry.signature_changed,
            **(self.fields.to_dict() if self.fields is not None else {}),
        }


@dataclass(slots=True)
class _Segment:
    """What one level of the drawing holds: a run starting at ``run_start``, or a heading with
    the segments under it."""

    run_start: CheckpointID | None = None
    relation: Relation | None = None
    parent_id: CheckpointID | None = None
    heading: str | None = None
    below: list[_Segment] = field(default_factory=list)


@dataclass(slots=True)
class _Frame:
    guides: str
    level: int
    segments: list[_Segment]
    position: int = 0
    current: CheckpointID | None = None
    current_relation: Relation | None = None
    current_parent: CheckpointID | None = None
    first: bool = False


@dataclass(slots=True)
class LineageTree:
    """One workflow's records (and the records nested in them) with the links between them."""

    workflow_name: str
    records: dict[CheckpointID, CheckpointInfo]
    """Every record in the tree, in drawing-independent order (workflow first, then sequence)."""
    roots: list[CheckpointID]
    children: dict[CheckpointID, list[CheckpointID]]
    """Checkpoints whose previous id is this one and that hang under it, oldest first."""
    nested: dict[CheckpointID, list[CheckpointID]]
    """Records nested in this one, oldest first."""
    starts: dict[CheckpointID, tuple[LineageStart, str | None]]
    """Why each root starts a line (and, for ELSEWHERE, the previous checkpoint's workflow)."""
    signature_changes: frozenset[CheckpointID]
    latest_id: CheckpointID | None
    checkpoints: int
    """Top-level checkpoints of the workflow."""
    nested_count: int
    """Nested records in the tree, of any workflow name."""
    pruned: int
    """Tombstones of the workflow (checkpoints pruned from it)."""
    subgraphs: dict[CheckpointID, list[CheckpointID]] = field(default_factory=dict)
    """LangGraph: the first checkpoint of each subgraph run started under a parent checkpoint."""

    def __len__(self) -> int:
        return len(self.records)

    def entries(self) -> Iterator[LineageEntry]:
        """The drawn lines, depth first, containers before their nested records; iterative."""
        if len(self.roots) == 1:
            top = [_Segment(run_start=self.roots[0])]
        else:
            # Several starts: one heading per line of descent, so a level never holds two runs.
            top = [
                _Segment(heading=f"line {number} of {len(self.roots)}", below=[_Segment(run_start=root)])
                for number, root in enumerate(self.roots, 1)
            ]
        stack = [_Frame("", 0, top)]
        while stack:
            frame = stack[-1]
            if frame.current is None:
                if frame.position == len(frame.segments):
                    stack.pop()
                    continue
                segment = frame.segments[frame.position]
                frame.position += 1
                last = frame.position == len(frame.segments)
                if segment.heading is not None:
                    yield LineageEntry(_guide(frame.guides, last), frame.level, heading=segment.heading)
                    stack.append(_Frame(_indent(frame.guides, last), frame.level + 1, segment.below))
                    continue
                frame.current = segment.run_start
                frame.current_relation = segment.relation
                frame.current_parent = segment.parent_id
                frame.first = segment.relation is not None and segment.relation is not Relation.CHILD
            checkpoint_id = frame.current
            assert checkpoint_id is not None
            children = self.children.get(checkpoint_id, _NONE)
            continues = len(children) == 1
            last = not continues and frame.position == len(frame.segments)
            start = self.starts.get(checkpoint_id)
            yield LineageEntry(
                _guide(frame.guides, last),
                frame.level,
                info=self.records[checkpoint_id],
                parent_id=frame.current_parent,
                relation=frame.current_relation,
                start=None if start is None else start[0],
                previous_workflow=None if start is None else start[1],
                latest=checkpoint_id == self.latest_id,
                signature_changed=checkpoint_id in self.signature_changes,
                first_of_run=frame.first,
            )
            frame.first = False
            below = [
                _Segment(run_start=inner, relation=Relation.NESTED, parent_id=checkpoint_id)
                for inner in self.nested.get(checkpoint_id, ())
            ]
            below += [
                _Segment(run_start=run, relation=Relation.SUBGRAPH, parent_id=checkpoint_id)
                for run in self.subgraphs.get(checkpoint_id, ())
            ]
            if len(children) > 1:
                below += [
                    _Segment(
                        heading=f"branch {number} of {len(children)}",
                        below=[_Segment(run_start=child, relation=Relation.CHILD, parent_id=checkpoint_id)],
                    )
                    for number, child in enumerate(children, 1)
                ]
            if continues:
                frame.current_parent, frame.current = checkpoint_id, children[0]
                frame.current_relation = Relation.CHILD
            else:
                frame.current = None
            if below:
                stack.append(_Frame(_indent(frame.guides, last), frame.level + 1, below))

    def walk(self) -> Iterator[CheckpointInfo]:
        """Every record, in drawing order."""
        for entry in self.entries():
            if entry.info is not None:
                yield entry.info

    def header(self) -> dict[str, Any]:
        return {
            "workflow_name": self.workflow_name,
            "checkpoints": self.checkpoints,
            "nested": self.nested_count,
            "pruned": self.pruned,
        }


def _guide(guides: str, last: bool) -> str:
    return guides + ("└── " if last else "├── ")


def _indent(guides: str, last: bool) -> str:
    return guides + ("    " if last else "│   ")


async def build_lineage(storage: CheckpointStorage, workflow_name: str) -> LineageTree:
    """The lineage of ``workflow_name``: its records and every record nested in them.

    A workflow with no stored record gives a tree without roots.
    """
    require_capabilities(storage, "inspect", (Capability.INSPECT,))
    # The whole index: records nested in this workflow's checkpoints usually carry the
    # sub-workflow's own name, and a previous id may lead into another workflow.
    everything = await storage.list_records()
    by_container: dict[CheckpointID, list[CheckpointInfo]] = defaultdict(list)
    members: dict[CheckpointID, CheckpointInfo] = {}
    for info in everything:
        if info.workflow_name == workflow_name:
            members[info.checkpoint_id] = info
        if info.container_id is not None:
            by_container[info.container_id].append(info)
    pending = list(members)
    while pending:  # bring in what is nested in members, at any depth, whatever its name
        for inner in by_container.get(pending.pop(), ()):
            if inner.checkpoint_id not in members:
                members[inner.checkpoint_id] = inner
                pending.append(inner.checkpoint_id)
    del by_container
    elsewhere = {
        info.checkpoint_id: info.workflow_name for info in everything if info.checkpoint_id not in members
    }
    del everything
    # Every workflow's tombstones: a record nested under another name is tombstoned under the
    # name of the workflow that was pruned.
    tombstones = frozenset(await storage.list_tombstones())
    pruned = len(await storage.list_tombstones(workflow_name=workflow_name))
    return assemble_lineage(workflow_name, members, elsewhere, tombstones, pruned)


def assemble_lineage(
    workflow_name: str,
    members: dict[CheckpointID, CheckpointInfo],
    elsewhere: dict[CheckpointID, str],
    tombstones: frozenset[CheckpointID],
    pruned: int,
) -> LineageTree:
    """The tree of ``members``; ``elsewhere`` names the workflow of every other stored record."""
    order = sorted(members.values(), key=lambda info: (info.workflow_name != workflow_name, info.sequence))
    records = {info.checkpoint_id: info for info in order}
    children: dict[CheckpointID, list[CheckpointID]] = defaultdict(list)
    nested: dict[CheckpointID, list[CheckpointID]] = defaultdict(list)
    starts: dict[CheckpointID, tuple[LineageStart, str | None]] = {}
    parent: dict[CheckpointID, CheckpointID] = {}
    signature_changes: set[CheckpointID] = set()
    for info in order:
        checkpoint_id = info.checkpoint_id
        previous_id = info.previous_checkpoint_id
        previous = records.get(previous_id) if previous_id is not None else None
        if previous is not None and previous.graph_signature_hash != info.graph_signature_hash:
            signature_changes.add(checkpoint_id)
        # Where each record hangs: under its container if that is in the tree, else its previous.
        if info.container_id is not None and info.container_id in records:
            parent[checkpoint_id] = info.container_id
        elif previous_id is None:
            starts[checkpoint_id] = (LineageStart.ROOT, None)
        elif previous is not None:
            parent[checkpoint_id] = previous_id
        elif previous_id in elsewhere:
            starts[checkpoint_id] = (LineageStart.ELSEWHERE, elsewhere[previous_id])
        else:
            start = LineageStart.PRUNED if previous_id in tombstones else LineageStart.MISSING
            starts[checkpoint_id] = (start, None)
    # A record reachable from no start lies on (or leads into) a cycle: follow parents from it
    # until one repeats and start the tree there. Each step either reaches a record already
    # known to be reachable or breaks a cycle, so the whole pass is linear.
    reachable: set[CheckpointID] = set(starts)
    for info in order:
        path: list[CheckpointID] = []
        on_path: set[CheckpointID] = set()
        current = info.checkpoint_id
        while current not in reachable and current not in on_path:
            path.append(current)
            on_path.add(current)
            current = parent[current]
        if current in on_path:
            del parent[current]
            starts[current] = (LineageStart.CYCLE, None)
        reachable.update(path)
    for info in order:
        above = parent.get(info.checkpoint_id)
        if above is None:
            continue
        (nested if info.container_id == above else children)[above].append(info.checkpoint_id)
    top = [info for info in order if info.workflow_name == workflow_name and not info.nested]
    latest = max(top, key=lambda info: info.sequence).checkpoint_id if top else None
    return LineageTree(
        workflow_name=workflow_name,
        records=records,
        roots=[info.checkpoint_id for info in order if info.checkpoint_id in starts],
        children=dict(children),
        nested=dict(nested),
        starts=starts,
        signature_changes=frozenset(signature_changes),
        latest_id=latest,
        checkpoints=len(top),
        nested_count=sum(1 for info in order if info.nested),
        pruned=pruned,
    )


async def stream_lineage(
    storage: CheckpointStorage, tree: LineageTree, *, with_fields: bool = True
) -> AsyncIterator[LineageLine]:
    """The tree's lines one at a time, each checkpoint with its timestamp and iteration number
    read from its body (``with_fields=False``, or a storage without ``raw_access``: index only)."""
    readable = with_fields and Capability.RAW_ACCESS in getattr(storage, "capabilities", frozenset())
    for entry in tree.entries():
        fields = None
        if entry.info is not None:
            fields = await peek_body_fields(storage, entry.info.checkpoint_id) if readable else BodyFields()
        yield LineageLine(entry, fields)


__all__ = [
    "LineageEntry",
    "LineageLine",
    "LineageStart",
    "LineageTree",
    "Relation",
    "assemble_lineage",
    "build_lineage",
    "stream_lineage",
]
