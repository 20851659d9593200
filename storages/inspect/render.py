"""How ``checkpoint-storages inspect`` draws what :mod:`storages.inspect.views` builds: the
workflow table, the lineage tree and the one-checkpoint table (rich renderables; every stored
string is shown as data, never as markup)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..terminal import plain, printable
from ..verify import abbreviate_signature
from .views import CheckpointView, LineageNode, LineageStart, LineageTree, WorkflowSummary


def render_workflows(summaries: list[WorkflowSummary], storage_name: str) -> Table:
    title = plain(f"{storage_name}: {len(summaries)} workflow{'' if len(summaries) == 1 else 's'}")
    table = Table(title=title, title_justify="left")
    table.add_column("Workflow", no_wrap=True)
    table.add_column("Checkpoints", justify="right")
    table.add_column("Nested", justify="right")
    table.add_column("Pruned", justify="right")
    table.add_column("Signatures", justify="right")
    table.add_column("Latest", no_wrap=True)
    for summary in summaries:
        table.add_row(
            plain(summary.workflow_name),
            str(summary.checkpoints),
            str(summary.nested),
            str(summary.pruned),
            str(summary.signatures),
            plain(summary.latest_id or "-"),
        )
    return table


def render_lineage(tree: LineageTree) -> Tree:
    """The tree as a rich renderable: straight runs at one level, forks and nesting indented."""
    counts = f"{tree.checkpoints} checkpoint{'' if tree.checkpoints == 1 else 's'}, {tree.nested} nested"
    if tree.pruned:
        counts += f", {tree.pruned} pruned"
    rendered = Tree(
        Text.assemble(("workflow ", "dim"), (printable(tree.workflow_name), "bold"), f"  ({counts})")
    )
    if len(tree.roots) == 1:
        _render_run(rendered, tree.roots[0], tree.workflow_name)
        return rendered
    # Several starts: one entry per line of descent, so a level never holds two runs.
    for number, root in enumerate(tree.roots, 1):
        line = rendered.add(Text(f"line {number} of {len(tree.roots)}", style="dim"))
        _render_run(line, root, tree.workflow_name)
    return rendered


def _render_run(parent: Tree, node: LineageNode, workflow_name: str, *, nested: bool = False) -> None:
    current: LineageNode | None = node
    while current is not None:
        branch = parent.add(_label(current, workflow_name, nested=nested))
        nested = False  # only the run's first node sits under a container
        for inner in current.nested:
            _render_run(branch, inner, workflow_name, nested=True)
        children = current.children
        if len(children) == 1:
            current = children[0]
            continue
        for number, child in enumerate(children, 1):
            fork = branch.add(Text(f"branch {number} of {len(children)}", style="dim"))
            _render_run(fork, child, workflow_name)
        current = None


def _label(node: LineageNode, workflow_name: str, *, nested: bool) -> Text:
    info = node.info
    label = Text()
    if nested:
        label.append("nested ", style="magenta")
    label.append(printable(info.checkpoint_id), style="bold")
    label.append(f"  #{info.sequence}", style="dim")
    label.append(f"  sig {printable(abbreviate_signature(info.graph_signature_hash))}")
    if info.workflow_name != workflow_name:
        label.append(f"  workflow {printable(info.workflow_name)}", style="dim")
    if not nested and info.container_id is not None:
        # Nested in a checkpoint outside this tree (a sub-workflow's record seen from its own name).
        label.append(f"  nested in {printable(info.container_id)}", style="magenta")
    previous_id = None if info.previous_checkpoint_id is None else printable(info.previous_checkpoint_id)
    if node.start is LineageStart.ROOT and not nested:
        label.append("  root", style="green")
    elif node.start is LineageStart.PRUNED:
        label.append(f"  after pruned {previous_id}", style="yellow")
    elif node.start is LineageStart.MISSING:
        label.append(f"  previous {previous_id} missing", style="bold red")
    elif node.start is LineageStart.ELSEWHERE:
        elsewhere = printable(node.previous_workflow)
        label.append(f"  after {previous_id} (workflow {elsewhere})", style="cyan")
    elif node.start is LineageStart.CYCLE:
        label.append(f"  cycle: previous {previous_id}", style="bold red")
    elif nested and previous_id is not None:
        label.append(f"  previous {previous_id}", style="dim")
    if node.signature_changed:
        label.append("  signature changed", style="yellow")
    if node.latest:
        label.append("  latest", style="bold green")
    return label


def render_checkpoint(view: CheckpointView) -> Table:
    info = view.info
    title = plain(f"checkpoint {printable(info.checkpoint_id)}")
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("Field", style="bold", no_wrap=True)
    table.add_column("Value")
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
    for name, value in rows:
        table.add_row(plain(name), value)
    return table
