"""A workflow's lineage, built from the index and walked without recursion.

:func:`build_lineage` streams the index page by page into a :class:`LineageIndex` (a temporary
SQLite file), which works out the tree there; nothing per record stays in memory.
:meth:`LineageTree.entries` then yields the drawn lines one at a time, depth first, from an
explicit stack whose size is the depth of forks and nesting (a run of checkpoints, each
continuing from the one above, stays at one level), asking the index for one checkpoint and what
hangs under it at a time: a chain of 100,000 checkpoints is drawn with a stack of one frame and
flat memory. :func:`stream_lineage` adds what only a body holds (timestamp, iteration number)
line by line.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...contract import Capability, CheckpointID, CheckpointInfo, CheckpointStorage
from ...errors import CheckpointStorageError
from ..verify import require_capabilities
from .lineage_index import LineageIndex
from .peek import BodyFields, peek_body_fields

INTERRUPT_CHANNEL = "__interrupt__"
RESUME_CHANNEL = "__resume__"
"""LangGraph's special channels: an interrupt raised by a task, and the answer it was resumed with."""

INDEX_PAGE: int = 1_000
"""Index entries read per round trip when the storage streams its index (``iter_records``)."""


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
    branch: str | None = None
    """The fork's branch it is drawn in (``2 of 3``: its heading's words), the innermost one."""
    branch_start: bool = False
    """The first checkpoint of its branch (the fork's child)."""


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
            "branch": entry.branch,
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
    branch: str | None = None
    position: int = 0
    current: CheckpointID | None = None
    current_relation: Relation | None = None
    current_parent: CheckpointID | None = None
    first: bool = False
    branch_start: bool = False


@dataclass(slots=True, eq=False)
class LineageTree:
    """One workflow's records (and the records nested in them) with the links between them, on
    disk (:class:`LineageIndex`): ask for a record, never hold them all."""

    workflow_name: str
    index: LineageIndex
    roots: list[CheckpointID]
    """The checkpoints that start a line (a root, or after a pruned, missing or other workflow's
    previous checkpoint, or where a cycle was broken), in order."""
    latest_id: CheckpointID | None
    checkpoints: int
    """Top-level checkpoints of the workflow."""
    nested_count: int
    """Nested records in the tree, of any workflow name."""
    pruned: int
    """Tombstones of the workflow (checkpoints pruned from it)."""
    subgraphs: dict[CheckpointID, list[CheckpointID]] = field(default_factory=dict)
    """LangGraph: the first checkpoint of each subgraph run started under a parent checkpoint."""

    def record(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        """The index entry of a record in the tree, or None."""
        return self.index.info(checkpoint_id)

    def start_of(self, checkpoint_id: CheckpointID) -> LineageStart | None:
        """Why a record starts a line, or None if it hangs under another."""
        start = self.index.node(checkpoint_id)[1]
        return None if start is None else LineageStart(start)

    @property
    def forks(self) -> int:
        """Checkpoints with more than one child."""
        return self.index.forks()

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
                    heading = segment.heading
                    branch = heading.removeprefix(_BRANCH) if heading.startswith(_BRANCH) else frame.branch
                    stack.append(_Frame(_indent(frame.guides, last), frame.level + 1, segment.below, branch))
                    continue
                frame.current = segment.run_start
                frame.current_relation = segment.relation
                frame.current_parent = segment.parent_id
                frame.first = segment.relation is not None and segment.relation is not Relation.CHILD
                frame.branch_start = segment.relation is Relation.CHILD  # only a fork's branches
            checkpoint_id = frame.current
            assert checkpoint_id is not None
            children, nested = self.index.below(checkpoint_id)
            continues = len(children) == 1
            last = not continues and frame.position == len(frame.segments)
            info, start, start_workflow, signature_changed = self.index.node(checkpoint_id)
            yield LineageEntry(
                _guide(frame.guides, last),
                frame.level,
                info=info,
                parent_id=frame.current_parent,
                relation=frame.current_relation,
                start=None if start is None else LineageStart(start),
                previous_workflow=start_workflow,
                latest=checkpoint_id == self.latest_id,
                signature_changed=signature_changed,
                first_of_run=frame.first,
                branch=frame.branch,
                branch_start=frame.branch_start,
            )
            frame.first = frame.branch_start = False
            below = [
                _Segment(run_start=inner, relation=Relation.NESTED, parent_id=checkpoint_id)
                for inner in nested
            ]
            below += [
                _Segment(run_start=run, relation=Relation.SUBGRAPH, parent_id=checkpoint_id)
                for run in self.subgraphs.get(checkpoint_id, ())
            ]
            if len(children) > 1:
                below += [
                    _Segment(
                        heading=f"{_BRANCH}{number} of {len(children)}",
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
                stack.append(_Frame(_indent(frame.guides, last), frame.level + 1, below, frame.branch))

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


_BRANCH = "branch "


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
    index = LineageIndex()
    async for page in index_pages(storage):
        index.add(page, members=False)
    index.take_workflow(workflow_name)
    # Every workflow's tombstones: a record nested under another name is tombstoned under the
    # name of the workflow that was pruned.
    index.add_tombstones(await storage.list_tombstones())
    pruned = len(await storage.list_tombstones(workflow_name=workflow_name))
    return lineage_from_index(index, workflow_name, pruned)


async def index_pages(storage: CheckpointStorage) -> AsyncIterator[list[CheckpointInfo]]:
    """The storage's whole index in pages: streamed where the storage offers ``iter_records``
    (every built-in storage), else its one ``list_records`` answer."""
    stream = getattr(storage, "iter_records", None)
    if stream is None:
        yield await storage.list_records()
        return
    page: list[CheckpointInfo] = []
    async for info in stream(page_size=INDEX_PAGE):
        page.append(info)
        if len(page) == INDEX_PAGE:
            yield page
            page = []
    if page:
        yield page


def lineage_from_index(index: LineageIndex, workflow_name: str, pruned: int) -> LineageTree:
    """The tree of the members of ``index`` (filled, not yet assembled), drawn for
    ``workflow_name``."""
    index.assemble(workflow_name)
    checkpoints, nested_count = index.counts(workflow_name)
    return LineageTree(
        workflow_name=workflow_name,
        index=index,
        roots=index.roots(),
        latest_id=index.latest(workflow_name),
        checkpoints=checkpoints,
        nested_count=nested_count,
        pruned=pruned,
    )


async def stream_lineage(
    storage: CheckpointStorage, tree: LineageTree, *, with_fields: bool = True
) -> AsyncIterator[LineageLine]:
    """The tree's lines one at a time, each checkpoint with its timestamp and iteration number
    read from its body (``with_fields=False``, or a storage without ``raw_access``: index only)."""
    capabilities: frozenset[Capability] = getattr(storage, "capabilities", frozenset())
    readable = with_fields and Capability.RAW_ACCESS in capabilities
    writes = with_fields and Capability.PENDING_WRITES in capabilities
    for entry in tree.entries():
        fields = None
        if entry.info is not None:
            fields = await peek_body_fields(storage, entry.info.checkpoint_id) if readable else BodyFields()
            if writes and fields.nodes_role == "next":  # a LangGraph checkpoint: interrupts are writes
                fields = dataclasses.replace(fields, interrupt=await _interrupt(storage, entry.info))
        yield LineageLine(entry, fields)


async def _interrupt(storage: CheckpointStorage, info: CheckpointInfo) -> str | None:
    """``"waiting"`` when a task of this LangGraph checkpoint raised an interrupt, ``"answered"``
    once it was resumed; None when neither (or the writes cannot be read)."""
    try:
        writes = await storage.list_writes(info.checkpoint_id, workflow_name=info.workflow_name)
    except CheckpointStorageError:
        return None
    channels = {write.channel for write in writes}
    if INTERRUPT_CHANNEL not in channels:
        return None
    return "answered" if RESUME_CHANNEL in channels else "waiting"


__all__ = [
    "LineageEntry",
    "LineageLine",
    "LineageStart",
    "LineageTree",
    "Relation",
    "build_lineage",
    "index_pages",
    "lineage_from_index",
    "stream_lineage",
]
