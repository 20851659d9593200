"""``checkpoint-conformance [URL ...]``: run the kit from a shell or CI.

With no URL it checks every built-in backend on its embedded default. A URL run writes under a
run prefix of its own where the backend has one (Redis ``prefix=``, the S3 key prefix) and
deletes every workflow it created unless ``--keep``; point it at a scratch namespace all the same.

Exit status: 0 when every clause passed, was not applicable, failed as declared or was a runner
finding (a defect of the runner, not of the storage); 1 when a clause failed, a backend could not
be opened or a ``--require``'d capability is not declared; 2 for a usage error or a backend that
did not answer the connectivity check (nothing else runs then).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from storages import installed_version
from storages.contract import Capability
from storages.errors import MissingDependencyError, StorageConfigurationError
from storages.redaction import redact_text
from storages.terminal import EXIT_BROKEN_PIPE, plain, silence_stdout
from storages.terminal import console as terminal_console

from .builtin import builtin_targets, unavailable_target
from .clause import FAMILIES, Clause
from .report import BackendReport, ClauseResult, Outcome, Report, now
from .runner import abandoned_loops, avalidate_target, capabilities_from_names
from .selection import select_clauses
from .target import (
    CHECKPOINT_CLASS_CHOICES,
    StorageTarget,
    new_run_prefix,
    target_from_url,
    with_checkpoint_class,
)

PROG = "checkpoint-conformance"

OUTCOME_STYLES: dict[Outcome, str] = {
    Outcome.PASSED: "green",
    Outcome.FAILED: "bold red",
    Outcome.SKIPPED: "yellow",
    Outcome.XFAILED: "magenta",
    Outcome.FINDING: "cyan",
}

OUTCOME_LABELS: dict[Outcome, str] = {
    Outcome.PASSED: "passed",
    Outcome.FAILED: "failed",
    Outcome.SKIPPED: "not applicable",
    Outcome.XFAILED: "xfailed",
    Outcome.FINDING: "runner finding",
}


class UsageError(Exception):
    """A mistake in the command line; reported in one line with exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``checkpoint-conformance`` console script; returns the exit status."""
    try:
        status = _main(argv)
        # Buffered output is written here, so a closed pipe is caught below, not at exit.
        sys.stdout.flush()
        return status
    except BrokenPipeError:  # the reader went away (``... | head``): stop printing, quietly
        silence_stdout()
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits for --help, --version and its own usage errors
        return exit_.code if isinstance(exit_.code, int) else 2
    # Piped output (CI logs, tee) is laid out for 80 columns unless COLUMNS says otherwise.
    console = terminal_console()
    try:
        # The MAF runner drives only the runner family unless clauses are named: the other
        # families call the storage directly, so a runner changes nothing for them.
        clauses = select_clauses(args.clause or (["runner"] if args.runner in ("maf", "langgraph") else None))
        if args.list:
            console.print(catalogue_table(clauses))
            return 0
        required = capabilities_from_names(
            name for value in args.require or () for name in value.split(",") if name.strip()
        )
        if args.checkpoint_class == "both":
            # Twice over, each from its own targets: a run closes its target's storage at the end.
            targets = [
                *_targets(args.urls, keep=args.keep),
                *with_checkpoint_class(_targets(args.urls, keep=args.keep), "maf"),
            ]
        else:
            targets = with_checkpoint_class(_targets(args.urls, keep=args.keep), args.checkpoint_class)
        _use_runner(targets, args.runner, args.child_storage)
        for path in (args.json, args.junit_xml):
            if path is not None and not path.parent.is_dir():
                raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
    except (UsageError, ValueError) as exc:
        print(f"{PROG}: error: {redact_text(str(exc))}", file=sys.stderr)
        return 2
    try:
        return run(
            targets,
            clauses=clauses,
            json_path=args.json,
            junit_path=args.junit_xml,
            quiet=args.quiet,
            console=console,
            required_capabilities=required,
        )
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def console_main() -> None:
    """The console script: :func:`main`, then exit even if a blocked storage left threads behind.

    The watchdog's abandoned clause loops are daemon threads, but a storage may have started
    threads of its own there (a database connection's worker) that would keep the interpreter
    from exiting; once the reports are written nothing of the run is worth waiting for.
    """
    exit_process(main())


def exit_process(status: int) -> None:
    """``sys.exit(status)``, or ``os._exit`` after flushing when the watchdog abandoned a loop."""
    if abandoned_loops():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def run(
    targets: Sequence[StorageTarget],
    *,
    clauses: Sequence[Clause] | None = None,
    json_path: Path | None = None,
    junit_path: Path | None = None,
    quiet: bool = False,
    console: Console | None = None,
    required_capabilities: frozenset[Capability] = frozenset(),
) -> int:
    """Run ``clauses`` (default: all) against ``targets``, print the report, write the files.

    Returns the exit status: 0 if the report is ok, 2 if a backend was unreachable (the run
    stops there), else 1. The files are written either way.
    """
    console = console if console is not None else Console()
    selected = list(clauses) if clauses is not None else select_clauses()
    report = asyncio.run(_run(targets, selected, console, quiet, required_capabilities))
    if json_path is not None:
        report.write_json(json_path)
    if junit_path is not None:
        report.write_junit_xml(junit_path)
    for backend in report.backends:
        if backend.unreachable:
            print(f"{PROG}: error: {backend.backend}: {backend.error}", file=sys.stderr)
            return 2
    console.print(summary_table(report, selected))
    console.print(Text("Cells: passed/applicable clauses; n/a: not applicable.", style="dim"))
    for line in _verdict(report):
        console.print(line)
    return 0 if report.ok else 1


async def _run(
    targets: Sequence[StorageTarget],
    clauses: list[Clause],
    console: Console,
    quiet: bool,
    required_capabilities: frozenset[Capability],
) -> Report:
    report = Report()
    per_family = {family: sum(1 for c in clauses if c.family == family) for family in FAMILIES}
    # Without a terminal there is no progress bar: one line per family as it finishes instead.
    lines = not quiet and not console.is_terminal
    # Progress draws only on a terminal; piped output gets the tables alone.
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=quiet or not console.is_terminal,
    ) as progress:
        task = progress.add_task("conformance", total=len(targets) * len(clauses))
        for index, target in enumerate(targets):
            progress.update(task, description=escape(target.name), completed=index * len(clauses))

            advance = _FamilyProgress(
                per_family, console if lines else None, lambda: progress.update(task, advance=1)
            )
            backend = await avalidate_target(
                target, clauses=clauses, progress=advance, required_capabilities=required_capabilities
            )
            report.backends.append(backend)
            if backend.unreachable:
                break  # fail fast: the other targets would only delay the exit status 2
            for renderable in backend_report(backend, quiet=quiet):
                progress.console.print(renderable)
    report.finished_at = now()
    return report


class _FamilyProgress:
    """Prints one line per family as its last clause finishes (for output that is not a terminal)."""

    def __init__(
        self, clauses_per_family: dict[str, int], console: Console | None, tick: Callable[[], None]
    ) -> None:
        self._expected = clauses_per_family
        self._console = console
        self._tick = tick
        self._done: dict[str, list[ClauseResult]] = {}
        self._since = time.perf_counter()

    def __call__(self, backend: str, result: ClauseResult) -> None:
        self._tick()
        results = self._done.setdefault(result.family, [])
        results.append(result)
        if self._console is not None and len(results) == self._expected[result.family]:
            seconds, self._since = time.perf_counter() - self._since, time.perf_counter()
            self._console.print(_family_line(backend, result.family, results, seconds))


def _family_line(backend: str, family: str, results: Sequence[ClauseResult], seconds: float) -> Text:
    """``backend family: 12/13 passed, 1 not applicable (0.4 s)``: progress for piped output."""
    passed = sum(1 for r in results if r.outcome is Outcome.PASSED)
    notes = [
        f"{n} {OUTCOME_LABELS[outcome]}"
        for outcome in (Outcome.FAILED, Outcome.SKIPPED, Outcome.XFAILED, Outcome.FINDING)
        if (n := sum(1 for r in results if r.outcome is outcome))
    ]
    tail = f", {', '.join(notes)}" if notes else ""
    return Text(f"{backend} {family}: {passed}/{len(results)} passed{tail} ({seconds:.1f} s)")


def backend_report(backend: BackendReport, *, quiet: bool = False) -> list[Table | Text]:
    """One backend's results as a table (only the failures when ``quiet``) and a summary line."""
    rendered: list[Table | Text] = []
    shown = backend.failures if quiet else backend.results
    if shown:
        capabilities = ", ".join(backend.capabilities) or "none"
        rendered.append(Text.assemble((backend.backend, "bold"), f"  capabilities: {capabilities}"))
        if backend.storage_type:
            package = f" ({backend.storage_package})" if backend.storage_package else ""
            rendered.append(Text(f"storage: {backend.storage_type}{package}", style="dim"))
        table = Table(expand=True)
        table.add_column("Clause", no_wrap=True)
        table.add_column("Outcome", no_wrap=True)
        table.add_column("ms", justify="right", no_wrap=True)
        # One line per clause keeps the table scannable; failures are spelled out in full below it.
        table.add_column("Message", no_wrap=True, overflow="ellipsis", ratio=1)
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


def catalogue_table(clauses: Sequence[Clause]) -> Table:
    """The clause catalogue: id, family, guarantee, required capabilities."""
    table = Table(title=f"{len(clauses)} clauses", title_justify="left")
    table.add_column("Clause", no_wrap=True)
    table.add_column("Family", no_wrap=True)
    table.add_column("Guarantee")
    table.add_column("Requires")
    for clause in clauses:
        requires = ", ".join(sorted(c.value for c in clause.requires)) or "-"
        table.add_row(clause.id, clause.family, Text(clause.guarantee), requires)
    return table


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Check checkpoint storages against the conformance clauses. "
            "With no URL, every built-in backend is checked on its embedded default."
        ),
        epilog="Exit status: 0 conforms (runner findings do not count against the storage), 1 a clause "
        "failed or a required capability is missing, 2 usage error or unreachable storage.",
    )
    parser.add_argument(
        "urls", nargs="*", metavar="URL", help="storage URL, e.g. memory:// or sqlite:///ck.db"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the report as JSON")
    parser.add_argument("--junit-xml", type=Path, metavar="PATH", help="write the report as JUnit XML")
    parser.add_argument(
        "--clause",
        action="append",
        metavar="ID_OR_FAMILY",
        help="run only this clause or family (repeatable)",
    )
    parser.add_argument(
        "--runner",
        choices=("reference", "maf", "langgraph"),
        default="reference",
        help="what drives the runner clauses: the reference driver, real Agent Framework workflows (maf) "
        "or real LangGraph graphs over StorageSaver (langgraph); maf and langgraph run only the runner "
        "family unless --clause is given",
    )
    parser.add_argument(
        "--child-storage",
        choices=("shared", "separate"),
        default="shared",
        help="with --runner maf: give the sub-workflow the parent's storage (shared) or an in-memory "
        "store of its own (separate), where MAF leaves a dangling link after a parent restore",
    )
    parser.add_argument(
        "--require",
        action="append",
        metavar="CAPABILITY[,...]",
        help="fail unless the storage declares these capabilities (e.g. nested,ancestry); clauses "
        "needing them fail instead of being not applicable (repeatable)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the workflows the kit wrote to a URL (default: delete each one it created)",
    )
    parser.add_argument(
        "--checkpoint-class",
        choices=CHECKPOINT_CLASS_CHOICES,
        default="project",
        help="the class clauses build checkpoints with: storages.WorkflowCheckpoint (project), "
        "agent_framework.WorkflowCheckpoint (maf), or each target once with each (both); "
        "contract.maf_checkpoint_class_round_trips checks MAF's class in every run where it is installed",
    )
    parser.add_argument("--list", action="store_true", help="print the clause catalogue and exit")
    parser.add_argument("--quiet", action="store_true", help="show only failures and the summary")
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    return parser


def _targets(urls: Sequence[str], *, keep: bool = False) -> list[StorageTarget]:
    if not urls:
        return builtin_targets()  # embedded backends are thrown away whole after the run
    targets: list[StorageTarget] = []
    run_prefix = new_run_prefix()
    for url in urls:
        try:
            targets.append(target_from_url(url, run_prefix=run_prefix, remove_workflows=not keep))
        except StorageConfigurationError as exc:
            raise UsageError(redact_text(str(exc))) from exc
        except MissingDependencyError as exc:
            # Not a usage error: the URL is right, the environment lacks an extra. Report it.
            targets.append(unavailable_target(url, exc))
    return targets


def _use_runner(targets: Sequence[StorageTarget], runner: str, child_storage: str) -> None:
    if runner == "reference":
        if child_storage != "shared":
            raise UsageError("--child-storage needs --runner maf")
        return
    if runner == "langgraph":
        _use_langgraph(targets, child_storage)
        return
    from .maf_profile import MafRunnerProfile

    try:
        profile = MafRunnerProfile(separate_child_storage=child_storage == "separate")
    except MissingDependencyError as exc:
        raise UsageError(str(exc)) from exc
    for target in targets:
        target.runner = profile


def _use_langgraph(targets: Sequence[StorageTarget], child_storage: str) -> None:
    if child_storage != "shared":
        raise UsageError(
            "--child-storage separate needs --runner maf: LangGraph subgraphs use the parent's saver"
        )
    try:
        from .langgraph_profile import LANGGRAPH_DEVIATIONS, LangGraphRunnerProfile

        profile = LangGraphRunnerProfile()
    except MissingDependencyError as exc:
        raise UsageError(str(exc)) from exc
    for target in targets:
        target.runner = profile
        # What LangGraph itself does not guarantee is reported as a runner finding, with its
        # reason: never as a pass, never as a storage failure.
        target.runner_findings = {**target.runner_findings, **LANGGRAPH_DEVIATIONS}


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
    Outcome.SKIPPED: "n/a",
    Outcome.XFAILED: "xfail",
    Outcome.FINDING: "finding",
}


def _cell(backend: BackendReport, results: Sequence[ClauseResult]) -> str:
    """``passed/applicable`` and what else happened, short enough for four backends in 80 columns."""
    if backend.error:
        return "-"
    passed = sum(1 for r in results if r.outcome is Outcome.PASSED)
    not_applicable = sum(1 for r in results if r.outcome is Outcome.SKIPPED)
    notes = [
        f"{n} {label}"
        for outcome, label in _CELL_NOTES.items()
        if (n := sum(1 for r in results if r.outcome is outcome))
    ]
    if results and not_applicable == len(results):
        return f"n/a ({not_applicable})"
    return f"{passed}/{len(results) - not_applicable}" + (f" {', '.join(notes)}" if notes else "")


def _outcome_text(outcome: Outcome) -> Text:
    label = "n/a" if outcome is Outcome.SKIPPED else outcome.value
    return Text(label, style=OUTCOME_STYLES[outcome])


def _backend_verdict(backend: BackendReport) -> Text:
    if backend.error:
        return Text("ERROR", style="bold red")
    return Text("OK", style="bold green") if backend.ok else Text("FAILED", style="bold red")


def _worst_style(results: Sequence[ClauseResult]) -> str:
    outcomes = {r.outcome for r in results}
    for outcome in (Outcome.FAILED, Outcome.FINDING, Outcome.XFAILED, Outcome.SKIPPED):
        if outcome in outcomes:
            return OUTCOME_STYLES[outcome]
    return OUTCOME_STYLES[Outcome.PASSED] if outcomes else "dim"


def _verdict(report: Report) -> list[Text]:
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


if __name__ == "__main__":
    console_main()
