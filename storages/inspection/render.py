"""How ``checkpoint-storages inspect`` draws what :mod:`storages.inspection.views` builds: the
workflow table, the lineage tree and the one-checkpoint table (rich renderables; every stored
string is shown as data, never as markup)."""

from __future__ import annotations

from datetime import datetime, timezone

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
    # Folded, never cut: at 80 columns every count and id stays whole on its own lines.
    table.add_column("Workflow", overflow="fold", min_width=10, ratio=2)
    for header in ("Checkpoints", "Nested", "Pruned", "Signatures"):
        table.add_column(header, justify="right", overflow="fold", min_width=6)
    table.add_column("Latest", overflow="fold", min_width=8, ratio=1)
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


def render_lineage_line(line: LineageLine, workflow_name: str) -> Text:
    """One line of the drawn tree: its guides and a checkpoint's label, or a heading."""
    entry = line.entry
    text = Text(entry.guides, style="dim")
    if entry.info is None:
        text.append(printable(entry.heading), style="dim")
        return text
    text.append_text(_label(entry, line.fields, workflow_name))
    return text


def render_lineage(tree: LineageTree) -> Text:
    """The whole tree from the index alone (no timestamps), for a small tree in Python."""
    rendered = render_lineage_title(tree)
    for entry in tree.entries():
        rendered.append("\n")
        rendered.append_text(render_lineage_line(LineageLine(entry, None), tree.workflow_name))
    return rendered


def short_timestamp(timestamp: str) -> str:
    """An ISO timestamp to the second, in UTC when it says its zone; anything else as stored."""
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    if moment.tzinfo is None:
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


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
        if fields.timestamp is not None:
            label.append(f"  {printable(short_timestamp(fields.timestamp))}", style="cyan")
        if fields.iteration_count is not None:
            label.append(f"  iter {fields.iteration_count}")
        if fields.error is not None:
            label.append(f"  body unreadable: {printable(fields.error)}", style="bold red")
    if place is None:
        label.append(f"  sig {printable(abbreviate_signature(info.graph_signature_hash))}")
    if info.workflow_name != workflow_name:
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


def render_diff(diff: CheckpointDiff) -> Table:
    """What changed, one path per row: ``+`` added, ``-`` removed, ``~`` changed (old -> new)."""
    count = len(diff.changes) + diff.omitted
    title = plain(f"{diff.old_id} -> {diff.new_id}: {count} change{'' if count == 1 else 's'}")
    table = Table(title=title, title_justify="left")
    table.add_column("", overflow="fold", min_width=1, max_width=1)
    table.add_column("Path", overflow="fold", min_width=12, ratio=1)
    table.add_column("Old", overflow="fold", min_width=12, ratio=2)
    table.add_column("New", overflow="fold", min_width=12, ratio=2)
    marks = {"added": ("+", "green"), "removed": ("-", "red"), "changed": ("~", "yellow")}
    for change in diff.changes:
        mark, style = marks[change.kind.value]
        table.add_row(
            Text(mark, style=style),
            plain(change.path),
            plain("" if change.old is None else change.old),
            plain("" if change.new is None else change.new),
        )
    if diff.omitted:
        table.add_row("…", plain(f"{diff.omitted} more changes not listed"), "", "")
    return table
