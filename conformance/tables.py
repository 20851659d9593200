"""How ``checkpoint-conformance`` draws a report in a terminal: one table per backend, the summary
of families by backends, the verdict lines and the clause catalogue (conformance/cli.py prints
them)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from storages.tools.terminal import plain

from .clause import FAMILIES, Clause
from .report import BackendReport, ClauseResult, Outcome, Report

OUTCOME_STYLES: dict[Outcome, str] = {
    Outcome.PASSED: "green",
    Outcome.FAILED: "bold red",
    Outcome.NOT_APPLICABLE: "yellow",
    Outcome.XFAILED: "magenta",
    Outcome.FINDING: "cyan",
}


OUTCOME_LABELS: dict[Outcome, str] = {
    Outcome.PASSED: "passed",
    Outcome.FAILED: "failed",
    Outcome.NOT_APPLICABLE: "not applicable",
    Outcome.XFAILED: "xfailed",
    Outcome.FINDING: "runner finding",
}


def family_line(backend: str, family: str, results: Sequence[ClauseResult], seconds: float) -> Text:
    """``backend family: 12/13 passed, 1 not applicable (0.4 s)``: progress for piped output."""
    passed = sum(1 for r in results if r.outcome is Outcome.PASSED)
    notes = [
        f"{n} {OUTCOME_LABELS[outcome]}"
        for outcome in (Outcome.FAILED, Outcome.NOT_APPLICABLE, Outcome.XFAILED, Outcome.FINDING)
        if (n := sum(1 for r in results if r.outcome is outcome))
    ]
    tail = f", {', '.join(notes)}" if notes else ""
    return Text(f"{backend} {family}: {passed}/{len(results)} passed{tail} ({seconds:.1f} s)")


CLAUSE_COLUMN = 44
"""The Clause column's widest: the longest clause ids fit whole, and at 80 columns the Outcome,
ms and Message headers still do (a longer id folds onto a second line)."""


def backend_report(
    backend: BackendReport, *, quiet: bool = False, verbose: bool = False
) -> list[Table | Text]:
    """One backend's results as a table (only the failures when ``quiet``) and a summary line;
    ``verbose`` prints the traceback of each unexpected exception under its failure."""
    rendered: list[Table | Text] = []
    shown = backend.failures if quiet else backend.results
    if shown:
        capabilities = ", ".join(backend.capabilities) or "none"
        if backend.expiry_capabilities is not None:
            capabilities += f"; its expiry store: {', '.join(backend.expiry_capabilities) or 'none'}"
        rendered.append(Text.assemble((backend.backend, "bold"), f"  capabilities: {capabilities}"))
        if backend.storage_type:
            package = f" ({backend.storage_package})" if backend.storage_package else ""
            rendered.append(Text(f"storage: {backend.storage_type}{package}", style="dim"))
        table = Table(expand=True)
        # At 80 columns (piped, CI logs) a long clause id folds onto a second line rather than
        # squeezing the other columns: every header stays whole.
        table.add_column("Clause", overflow="fold", max_width=CLAUSE_COLUMN)
        table.add_column("Outcome", no_wrap=True, min_width=len("Outcome"))
        table.add_column("ms", justify="right", no_wrap=True, min_width=5)
        # One line per clause keeps the table scannable; failures are spelled out in full below it.
        table.add_column("Message", no_wrap=True, overflow="ellipsis", ratio=1, min_width=len("Message"))
        for result in shown:
            table.add_row(
                result.clause_id,
                _outcome_text(result.outcome),
                f"{result.duration * 1000:.1f}",
                plain(result.message.replace("\n", " ")),
            )
        rendered.append(table)
    for result in backend.results:
        if result.outcome in (Outcome.FAILED, Outcome.XFAILED, Outcome.FINDING):
            rendered.append(
                Text.assemble(
                    _outcome_text(result.outcome),
                    " ",
                    (result.clause_id, "bold"),
                    ": ",
                    plain(result.message, multiline=True),
                )
            )
            if result.traceback and verbose:
                rendered.append(plain(result.traceback, multiline=True, style="dim"))
            elif result.traceback:
                rendered.append(
                    Text("  (its traceback: --verbose, or the JSON and JUnit reports)", style="dim")
                )
    rendered.append(_backend_line(backend))
    return rendered


def summary_table(report: Report, clauses: Sequence[Clause]) -> Table:
    """Families by backends: passed of the clauses that apply in each cell, with what did not
    apply (n/a), then how much of the kit applied to each backend and its verdict."""
    families = [family for family in FAMILIES if any(c.family == family for c in clauses)]
    table = Table(title="Summary", title_justify="left")
    table.add_column("Family", no_wrap=True)
    for backend in report.backends:
        table.add_column(Text(backend.backend, overflow="fold"), justify="center")
    for family in [*families, None]:
        cells: list[Text] = []
        for backend in report.backends:
            results = [r for r in backend.results if family is None or r.family == family]
            cells.append(Text(_cell(backend, results), style=_worst_style(results)))
        table.add_row(family or "total", *cells, end_section=family is None)
    table.add_row("applies", *(_applies(backend) for backend in report.backends))
    table.add_row("result", *(_backend_verdict(backend) for backend in report.backends))
    return table


def _applies(backend: BackendReport) -> Text:
    """``121 of 135``: how many clauses applied; a backend that most of the kit skipped stands out."""
    if backend.error:
        return Text("-")
    total = len(backend.results)
    applied = total - backend.not_applicable
    style = "bold yellow" if total and applied * 4 < total * 3 else ""
    return Text(f"{applied} of {total}", style=style)


def catalogue_table(clauses: Sequence[Clause]) -> Catalogue:
    """The clause catalogue: id, family, guarantee, required capabilities."""
    return Catalogue(clauses)


class Catalogue:
    """The clause catalogue, laid out for the console it is printed on: a table where ids and
    guarantees fit side by side, else (80 columns: piped output, CI logs) each clause's id over
    its guarantee, so no column is cut and no id is broken."""

    TABLE_GUARANTEE = 40
    """Columns the table must leave the guarantee besides the widest id, family and requires."""

    def __init__(self, clauses: Sequence[Clause]) -> None:
        self.clauses = clauses

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        title = f"{len(self.clauses)} clauses"
        rows = [(clause.id, clause.family, clause.guarantee, _requires(clause)) for clause in self.clauses]
        widest = max((len(row[0]) + len(row[1]) + len(row[3]) for row in rows), default=0)
        if options.max_width >= widest + 13 + self.TABLE_GUARANTEE:  # 13: borders and padding
            table = Table(title=title, title_justify="left")
            table.add_column("Clause", no_wrap=True)
            table.add_column("Family", no_wrap=True)
            table.add_column("Guarantee")
            table.add_column("Requires")
            for clause_id, family, guarantee, requires in rows:
                table.add_row(clause_id, family, Text(guarantee), requires)
            yield table
            return
        yield Text(title, style="italic")
        for clause_id, _, guarantee, requires in rows:
            needs = "" if requires == "-" else f"  requires {requires}"
            yield Text.assemble((clause_id, "bold"), (needs, "dim"))
            yield Padding(Text(guarantee), (0, 0, 0, 4))


def _requires(clause: Clause) -> str:
    return ", ".join(sorted(capability.value for capability in clause.requires)) or "-"


def _backend_line(backend: BackendReport) -> Text:
    counts = ", ".join(
        f"{backend.count(outcome)} {OUTCOME_LABELS[outcome]}"
        for outcome in Outcome
        if outcome in (Outcome.PASSED, Outcome.FAILED) or backend.count(outcome)
    )
    seconds = sum(r.duration for r in backend.results)
    line = Text(f"{backend.backend}: ")
    if backend.error:
        return line.append(f"ERROR {backend.error}", style="bold red")
    line.append(f"{counts} in {seconds:.2f} s  ")
    line.append_text(_backend_verdict(backend))
    if backend.missing_capabilities:
        line.append(
            f"\n  required but not declared: {', '.join(backend.missing_capabilities)}", style="bold red"
        )
    if backend.leftovers:
        line.append(f"\n  could not delete {len(backend.leftovers)} workflow(s) it created: ", style="yellow")
        line.append(", ".join(backend.leftovers[:5]) + (" ..." if len(backend.leftovers) > 5 else ""))
    return line


_CELL_NOTES: dict[Outcome, str] = {
    Outcome.FAILED: "failed",
    Outcome.NOT_APPLICABLE: "n/a",
    Outcome.XFAILED: "xfail",
    Outcome.FINDING: "finding",
}


def _cell(backend: BackendReport, results: Sequence[ClauseResult]) -> str:
    """``passed/applicable`` and what else happened, short enough for four backends in 80 columns."""
    if backend.error:
        return "-"
    passed = sum(1 for r in results if r.outcome is Outcome.PASSED)
    not_applicable = sum(1 for r in results if r.outcome is Outcome.NOT_APPLICABLE)
    notes = [
        f"{n} {label}"
        for outcome, label in _CELL_NOTES.items()
        if (n := sum(1 for r in results if r.outcome is outcome))
    ]
    if results and not_applicable == len(results):
        return f"n/a ({not_applicable})"
    return f"{passed}/{len(results) - not_applicable}" + (f" {', '.join(notes)}" if notes else "")


def _outcome_text(outcome: Outcome) -> Text:
    label = "n/a" if outcome is Outcome.NOT_APPLICABLE else outcome.value
    return Text(label, style=OUTCOME_STYLES[outcome])


def _backend_verdict(backend: BackendReport) -> Text:
    if backend.error:
        return Text("ERROR", style="bold red")
    return Text("OK", style="bold green") if backend.ok else Text("FAILED", style="bold red")


def _worst_style(results: Sequence[ClauseResult]) -> str:
    outcomes = {r.outcome for r in results}
    for outcome in (Outcome.FAILED, Outcome.FINDING, Outcome.XFAILED, Outcome.NOT_APPLICABLE):
        if outcome in outcomes:
            return OUTCOME_STYLES[outcome]
    return OUTCOME_STYLES[Outcome.PASSED] if outcomes else "dim"


def verdict_lines(report: Report) -> list[Text]:
    """One line per backend saying how much of the kit it conforms to, then the overall verdict.

    "Conforms" always comes with how many clauses applied: a storage that declares nothing passes
    only the clauses every storage must, and the line says how many did not apply.
    """
    lines: list[Text] = []
    for backend in report.backends:
        if backend.error:
            continue
        total = len(backend.results)
        applied = total - backend.not_applicable
        verdict = "conforms" if backend.ok else "does not conform"
        text = Text(f"{backend.backend} {verdict} ", style="bold green" if backend.ok else "bold red")
        text.append(f"({applied} of {total} clauses apply; ")
        text.append(
            f"{backend.not_applicable} of {total} not applicable",
            style="bold yellow" if backend.not_applicable else "",
        )
        if backend.findings:
            text.append(f"; {len(backend.findings)} runner finding(s), not storage defects", style="cyan")
        text.append(")")
        lines.append(text)
    summary = ", ".join(
        f"{count} {OUTCOME_LABELS[Outcome(outcome)]}"
        for outcome, count in report.summary.items()
        if outcome in (Outcome.PASSED, Outcome.FAILED) or count
    )
    failing = [b.backend for b in report.backends if not b.ok]
    if not failing:
        lines.append(Text(f"Every backend conforms. Clauses: {summary}.", style="bold green"))
    else:
        lines.append(Text(f"Does not conform: {', '.join(failing)}. Clauses: {summary}.", style="bold red"))
    return lines


__all__ = [
    "OUTCOME_LABELS",
    "OUTCOME_STYLES",
    "backend_report",
    "catalogue_table",
    "family_line",
    "summary_table",
    "verdict_lines",
]
