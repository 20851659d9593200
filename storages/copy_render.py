"""How ``checkpoint-storages copy`` and ``import-maf`` show their progress and their reports: a
summary table (counts per workflow, bytes) that stays readable at 80 columns, the problems, and
a verdict."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .copy_report import CopyProgress, CopyReport, WorkflowCopy
from .terminal import plain

_COLUMNS = ("Workflow", "Check-\npoints", "Nested", "Pruned", "Writes", "Written", "Present", "Bytes")


def render_copy(report: CopyReport, *, title: str) -> RenderableType:
    """The summary table, then one line per problem and the verdict."""
    table = Table(title=plain(title), title_justify="left")
    for index, column in enumerate(_COLUMNS):
        if index == 0:
            table.add_column(column, overflow="fold", ratio=1)
        else:
            table.add_column(column, justify="right", no_wrap=True)
    for item in report.workflows:
        table.add_row(*_row(item))
    if len(report.workflows) > 1:
        table.add_section()
        table.add_row(*_row(report.totals(), label="total"))
    parts: list[RenderableType] = [table]
    for problem in report.problems:
        parts.append(plain(f"{problem.kind}: {problem.message}", style="bold red"))
    parts.append(copy_verdict(report))
    return Group(*parts)


def _row(item: WorkflowCopy, *, label: str | None = None) -> list[Text]:
    name = plain(label, style="bold") if label is not None else plain(item.workflow_name)
    counts = (item.checkpoints, item.nested, item.tombstones, item.writes, item.written, item.present)
    return [name, *(Text(str(count)) for count in counts), Text(human_bytes(item.bytes))]


def human_bytes(count: int) -> str:
    """``count`` bytes in at most 7 characters: 512 B, 12.3 kB, 4.0 MB, 1.2 GB."""
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def copy_verdict(report: CopyReport) -> Text:
    total = report.totals()
    records = total.checkpoints + total.nested
    verb = "would write" if report.dry_run else "wrote"
    workflows = len(report.workflows)
    what = (
        f"{records} record{'' if records == 1 else 's'} in {workflows} workflow"
        f"{'' if workflows == 1 else 's'}: {verb} {total.written}, {total.present} already present"
    )
    if not report.order_preserved:
        what += "; the source's sequences contradict each other, so each workflow kept only its own order"
    findings = sum(len(r.findings) for r in report.verify_reports)
    checked = "" if not report.verify_reports else f"; verify of the destination: {findings} finding(s)"
    if report.ok:
        checked = "" if not report.verify_reports else "; verify of the destination: no problems"
        return plain(f"{report.destination}: {what}{checked}.", style="bold green")
    problems = f"; {len(report.problems)} problem(s)" if report.problems else ""
    return plain(f"{report.destination}: {what}{problems}{checked}.", style="bold red")


__all__ = ["copy_verdict", "human_bytes", "render_copy"]


@contextlib.contextmanager
def copy_progress(console: Console, program: str, command: str, *, quiet: bool) -> Iterator[CopyProgress]:
    """A bar on a terminal; piped, a line to stderr at every tenth of the way (``program command:
    done/total``); none with --json."""
    if console.is_terminal and not quiet:
        with Progress(
            TextColumn(f"[bold]{command}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True,
        ) as bar:  # fmt: skip
            task = bar.add_task(command, total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total)
        return
    shown = -1

    def lines(done: int, total: int) -> None:
        nonlocal shown
        tenth = done * 10 // total if total else 10
        if not quiet and tenth > shown and done:
            shown = tenth
            print(f"{program} {command}: {done}/{total} checkpoints", file=sys.stderr, flush=True)

    yield lines
