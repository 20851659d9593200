"""How ``checkpoint-storages inspect`` and ``diff`` draw what :mod:`storages.tools.inspection.views`
builds: the workflow table, the lineage tree, the one-checkpoint table and the changes (rich
renderables; every stored string is shown as data, never as markup).

Laid out for 80 columns as much as for wide terminals: an id (a UUID is 36 characters) is never
folded over more than two lines, a tree line that wraps goes on under its own label with the
tree's guides kept, and a diff path breaks only between its parts (``state.a`` / ``[2]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..terminal import plain, printable
from ..verify import abbreviate_signature
from .diff import CheckpointDiff
from .lineage import LineageEntry, LineageLine, LineageStart, LineageTree, Relation
from .peek import BodyFields
from .threads import langgraph_place, shown_id
from .views import CheckpointView, WorkflowSummary


def render_workflows(summaries: list[WorkflowSummary], storage_name: str) -> Table:
    title = plain(f"{storage_name}: {len(summaries)} workflow{'' if len(summaries) == 1 else 's'}")
    table = Table(title=title, title_justify="left")
    # Folded, never cut: at 80 columns every count and name stays whole on its own lines, and the
    # latest id (36 characters for MAF's and LangGraph's) on at most two.
    table.add_column("Workflow", overflow="fold", min_width=10, ratio=2)
    for header in ("Check-\npoints", "Nested", "Pruned", "Signa-\ntures"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("Latest", overflow="fold", min_width=ID_HALF, ratio=1)
    for summary in summaries:
        name = summary.workflow_name
        if summary.thread_id is not None:
            name = f"thread {summary.thread_id}" + (
                f" ns {summary.checkpoint_ns}" if summary.checkpoint_ns else ""
            )
        latest = summary.latest_id
        if latest is not None:
            latest = shown_id(latest, summary.workflow_name)
        table.add_row(
            plain(name),
            str(summary.checkpoints),
            str(summary.nested),
            str(summary.pruned),
            str(summary.signatures),
            plain(latest or "-"),
        )
    lost = [
        f"{summary.workflow_name}: {', '.join(summary.listed_without_record)}"
        for summary in summaries
        if summary.listed_without_record
    ]
    if lost:
        table.caption = plain(
            "listed without their record (their reads raise; `checkpoint-storages verify` reports "
            "them, `verify --repair` removes them): " + "; ".join(lost)
        )
        table.caption_justify = "left"
    return table


def render_lineage_title(tree: LineageTree) -> Text:
    counts = (
        f"{tree.checkpoints} checkpoint{'' if tree.checkpoints == 1 else 's'}, {tree.nested_count} nested"
    )
    if tree.pruned:
        counts += f", {tree.pruned} pruned"
    thread = langgraph_place(tree.workflow_name)
    if thread is not None:
        name = f"thread {printable(thread[0])}" + (f" ns {printable(thread[1])}" if thread[1] else "")
        return Text.assemble(("langgraph ", "dim"), (name, "bold"), f"  ({counts})")
    return Text.assemble(("workflow ", "dim"), (printable(tree.workflow_name), "bold"), f"  ({counts})")


ID_HALF = 18
"""Columns an id column keeps at least: a 36-character UUID folds over two lines, never three."""


def render_lineage_line(line: LineageLine, workflow_name: str) -> Text:
    """One line of the drawn tree: its guides and a checkpoint's label, or a heading."""
    entry = line.entry
    text = Text(entry.guides, style="dim")
    if entry.info is None:
        text.append(printable(entry.heading), style="dim")
        return text
    text.append_text(_label(entry, line.fields, workflow_name))
    return text


def render_lineage_row(line: LineageLine, workflow_name: str) -> RenderableType:
    """:func:`render_lineage_line` for a console of any width: a label too long for its line goes
    on under itself, the tree's guides continued, instead of from the left edge."""
    entry = line.entry
    if entry.info is None:
        return render_lineage_line(line, workflow_name)
    return _TreeRow(entry.guides, _label(entry, line.fields, workflow_name))


class _TreeRow:
    """A tree line whose label wraps at spaces within the room its guides leave."""

    def __init__(self, guides: str, label: Text) -> None:
        self.guides = guides
        self.label = label

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        guides = self.guides
        continued = guides[:-4] + ("│   " if guides.endswith("├── ") else "    ") if guides else ""
        room = max(options.max_width - cell_len(guides), ID_HALF)
        for number, part in enumerate(self.label.wrap(console, room, overflow="fold")):
            part.rstrip()
            row = Text(guides if number == 0 else continued, style="dim", end="\n")
            row.append_text(part)
            yield row


def render_lineage(tree: LineageTree) -> Text:
    """The whole tree from the index alone (no timestamps), for a small tree in Python."""
    rendered = render_lineage_title(tree)
    for entry in tree.entries():
        rendered.append("\n")
        rendered.append_text(render_lineage_line(LineageLine(entry, None), tree.workflow_name))
    return rendered


def short_timestamp(timestamp: str) -> str:
    """An ISO timestamp to the second, in UTC when it says its zone (one word, so a wrapped line
    never splits it); anything else as stored."""
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    if moment.tzinfo is None:
        return moment.strftime("%Y-%m-%dT%H:%M:%S")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _label(entry: LineageEntry, fields: BodyFields | None, workflow_name: str) -> Text:
    info = entry.info
    assert info is not None
    nested = entry.first_of_run and entry.relation is Relation.NESTED
    label = Text()
    if nested:
        label.append("nested ", style="magenta")
    elif entry.first_of_run and entry.relation is Relation.SUBGRAPH:
        label.append("subgraph ", style="magenta")
    place = langgraph_place(info.workflow_name)
    label.append(printable(shown_id(info.checkpoint_id, info.workflow_name)), style="bold")
    label.append(f"  #{info.sequence}", style="dim")
    if fields is not None:
        _append_body(label, fields)
    # What a run shares (its signature, workflow or namespace) is said where the run starts, and
    # again where it changes: every line of a long run would repeat it.
    starts = entry.first_of_run or entry.start is not None or entry.parent_id is None
    if place is None and (starts or entry.signature_changed):
        label.append(f"  sig {printable(abbreviate_signature(info.graph_signature_hash))}")
    if info.workflow_name != workflow_name and starts:
        if place is not None:
            label.append(f"  ns {printable(place[1])}", style="dim")
        else:
            label.append(f"  workflow {printable(info.workflow_name)}", style="dim")
    if not nested and entry.relation is not Relation.NESTED and info.container_id is not None:
        # Nested in a checkpoint outside this tree (a sub-workflow's record seen from its own name).
        label.append(f"  nested in {printable(info.container_id)}", style="magenta")
    previous_id = None if info.previous_checkpoint_id is None else printable(info.previous_checkpoint_id)
    if entry.start is LineageStart.ROOT and not entry.first_of_run:
        label.append("  root", style="green")
    elif entry.start is LineageStart.PRUNED:
        label.append(f"  after pruned {previous_id}", style="yellow")
    elif entry.start is LineageStart.MISSING:
        label.append(f"  previous {previous_id} missing", style="bold red")
    elif entry.start is LineageStart.ELSEWHERE:
        elsewhere = printable(entry.previous_workflow)
        label.append(f"  after {previous_id} (workflow {elsewhere})", style="cyan")
    elif entry.start is LineageStart.CYCLE:
        label.append(f"  cycle: previous {previous_id}", style="bold red")
    elif nested and previous_id is not None:
        label.append(f"  previous {previous_id}", style="dim")
    if entry.signature_changed:
        label.append("  signature changed", style="yellow")
    if entry.latest:
        label.append("  latest", style="bold green")
    return label


def _append_body(label: Text, fields: BodyFields) -> None:
    """What a body says on a tree line: step, nodes, a wait on a person and time, or why it
    cannot be read."""
    if fields.step is not None:
        label.append(f"  step {fields.step}")
    if fields.source is not None and fields.source != "loop":
        label.append(f"  {printable(fields.source)}", style="dim")
    if fields.nodes:
        label.append(f"  {fields.nodes_role} {printable(', '.join(fields.nodes))}", style="blue")
    if fields.waiting:
        requests = "request" if fields.waiting == 1 else "requests"
        label.append(f"  waiting on {fields.waiting} {requests}", style="bold magenta")
    if fields.interrupt == "waiting":
        label.append("  interrupt waiting", style="bold magenta")
    elif fields.interrupt == "answered":
        label.append("  interrupt answered", style="magenta")
    if fields.timestamp is not None:
        label.append(f"  {printable(short_timestamp(fields.timestamp))}", style="cyan")
    if fields.error is not None:
        label.append(f"  body unreadable: {printable(fields.error)}", style="bold red")


def render_checkpoint(view: CheckpointView) -> Table:
    info = view.info
    title = plain(f"checkpoint {printable(info.checkpoint_id)}")
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("Field", style="bold", overflow="fold", min_width=12)
    table.add_column("Value", overflow="fold", min_width=20, ratio=1)
    previous = info.previous_checkpoint_id
    rows: list[tuple[str, Text]] = [
        ("checkpoint_id", plain(info.checkpoint_id)),
        ("workflow_name", plain(info.workflow_name)),
        (
            "previous_checkpoint_id",
            plain("-" if previous is None else f"{previous} ({view.previous_status})"),
        ),
        ("graph_signature_hash", plain(info.graph_signature_hash)),
        ("sequence", plain(info.sequence)),
        ("size", plain(f"{info.size} bytes")),
    ]
    if view.container is not None:
        container = view.container
        rows.append(("container", plain(f"{container.checkpoint_id} (workflow {container.workflow_name})")))
    elif info.container_id is not None:
        rows.append(("container", plain(f"{info.container_id} (not stored)", style="bold red")))
    if view.nested_ids:
        rows.append(("nested", Text("\n".join(printable(nested_id) for nested_id in view.nested_ids))))
    rows.extend((name, plain(value)) for name, value in view.fields)
    if view.error is not None:
        rows.append(("body", plain(f"cannot be loaded: {view.error}", style="bold red")))
    if view.refused_type is not None:
        refused = f"intact, but holds {view.refused_type}, which this codec does not build"
        rows.append(("body", plain(refused, style="yellow")))
    for name, value in rows:
        table.add_row(plain(name), value)
    return table


_MARKS = {"added": ("+", "green"), "removed": ("-", "red"), "changed": ("~", "yellow")}
_PATH_PARTS = re.compile(r"[^.\[]+|\.[^.\[]*|\[[^\]]*\]?")


def render_diff(diff: CheckpointDiff) -> RenderableType:
    """What changed, one path per entry: ``+`` added, ``-`` removed, ``~`` changed, the path on
    its own line (broken, when it must be, only between its parts) and the values under it,
    ``old → new``."""
    count = len(diff.changes) + diff.omitted
    rows: list[RenderableType] = [
        plain(f"{diff.old_id} -> {diff.new_id}: {count} change{'' if count == 1 else 's'}", style="bold")
    ]
    for change in diff.changes:
        mark, style = _MARKS[change.kind.value]
        rows.append(_DiffPath(Text(f"{mark} ", style=style), printable(change.path)))
        values = Text("    ")
        if change.old is not None:
            values.append(printable(change.old), style="red" if change.new is not None else "")
        if change.old is not None and change.new is not None:
            values.append("  →  ", style="dim")
        if change.new is not None:
            values.append(printable(change.new), style="green" if change.old is not None else "")
        rows.append(values)
    if diff.omitted:
        rows.append(
            plain(f"… {diff.omitted} more changes not listed (--json lists the first {len(diff.changes)})")
        )
    return Group(*rows)


class _DiffPath:
    """A diff path on lines of its own, broken only between its parts (``.name``, ``[3]``)."""

    def __init__(self, mark: Text, path: str) -> None:
        self.mark = mark
        self.path = path

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        room = max(options.max_width - 4, ID_HALF)
        lines = [""]
        for part in _PATH_PARTS.findall(self.path) or [self.path]:
            if lines[-1] and cell_len(lines[-1]) + cell_len(part) > room:
                lines.append("")
            lines[-1] += part
        for number, line in enumerate(lines):
            row = self.mark.copy() if number == 0 else Text("  ")
            row.append(line, style="bold")
            row.end = "\n"
            yield row
