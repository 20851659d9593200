"""How ``checkpoint-storages copy`` and ``import-maf`` show their progress and their reports: a
summary table (counts per workflow, bytes) that stays readable at 80 columns, the problems, and
a verdict."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence

from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..terminal import plain
from ..verify.render import name_ids
from .report import CopyProblem, CopyProgress, CopyReport, WorkflowCopy

_COLUMNS = ("Workflow", "Check-\npoints", "Nested", "Pruned", "Writes", "Written", "Present", "Bytes")


PROBLEMS_PER_KIND = 20
"""Problems of one kind listed one per line; the rest are counted (``--json`` lists every one)."""


def render_copy(
    report: CopyReport, *, title: str, advise: Callable[[str], str] | None = None
) -> RenderableType:
    """The summary table, then the problems (files refused for one type on one line, with the fix
    ``advise(type_key)`` says) and the verdict."""
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
    parts += [plain(line, style="bold red") for line in problem_lines(report.problems, advise)]
    parts.append(copy_verdict(report))
    return Group(*parts)


def problem_lines(problems: Sequence[CopyProblem], advise: Callable[[str], str] | None = None) -> list[str]:
    """One line per problem, except that files refused for the same type are one line and the
    fix is said once, and that past :data:`PROBLEMS_PER_KIND` of a kind the rest are counted."""
    lines: list[str] = []
    refused: dict[str, list[CopyProblem]] = {}
    shown: dict[str, int] = {}
    for problem in problems:
        if problem.kind == "refused_file" and problem.refused_type is not None:
            refused.setdefault(problem.refused_type, []).append(problem)
            continue
        shown[problem.kind] = shown.get(problem.kind, 0) + 1
        if shown[problem.kind] <= PROBLEMS_PER_KIND:
            lines.append(f"{problem.kind}: {problem.message}")
    for kind, count in shown.items():
        if count > PROBLEMS_PER_KIND:
            lines.append(f"{kind}: … and {count - PROBLEMS_PER_KIND} more (--json lists every one)")
    for type_key, alike in refused.items():
        files = [f"{problem.checkpoint_id}.json" for problem in alike]
        noun = "file holds" if len(files) == 1 else f"{len(files)} files hold"
        fix = f". Fix: {advise(type_key)}" if advise is not None else ""
        lines.append(
            f"refused_file: {noun} {type_key}, which MAF's allow-list refuses (not imported): "
            f"{name_ids(files)}{fix}"
        )
    return lines


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


__all__ = ["PROBLEMS_PER_KIND", "copy_verdict", "human_bytes", "problem_lines", "render_copy"]


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
