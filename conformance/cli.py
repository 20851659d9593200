"""``checkpoint-conformance [URL ...]``: run the kit from a shell or CI.

With no URL it checks every built-in backend on its embedded default. Exit status: 0 when every
clause passed (or was skipped, or failed as declared), 1 when any failed, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from storages import installed_version
from storages.errors import MissingDependencyError, StorageConfigurationError

from .builtin import builtin_targets, unavailable_target
from .clause import FAMILIES, Clause, select_clauses
from .report import BackendReport, ClauseResult, Outcome, Report
from .runner import avalidate_target
from .target import StorageTarget, target_from_url

PROG = "checkpoint-conformance"

OUTCOME_STYLES: dict[Outcome, str] = {
    Outcome.PASSED: "green",
    Outcome.FAILED: "bold red",
    Outcome.SKIPPED: "yellow",
    Outcome.XFAILED: "magenta",
}


class UsageError(Exception):
    """A mistake in the command line; reported in one line with exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``checkpoint-conformance`` console script; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits for --help, --version and its own usage errors
        return exit_.code if isinstance(exit_.code, int) else 2
    # Piped output (CI logs, tee) gets room for the family table instead of 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        # The MAF runner drives only the runner family unless clauses are named: the other
        # families call the storage directly, so a runner changes nothing for them.
        clauses = select_clauses(args.clause or (["runner"] if args.runner in ("maf", "langgraph") else None))
        if args.list:
            console.print(catalogue_table(clauses))
            return 0
        targets = _targets(args.urls)
        _use_runner(targets, args.runner, args.child_storage)
        for path in (args.json, args.junit_xml):
            if path is not None and not path.parent.is_dir():
                raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
    except (UsageError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return run(
            targets,
            clauses=clauses,
            json_path=args.json,
            junit_path=args.junit_xml,
            quiet=args.quiet,
            console=console,
        )
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def run(
    targets: Sequence[StorageTarget],
    *,
    clauses: Sequence[Clause] | None = None,
    json_path: Path | None = None,
    junit_path: Path | None = None,
    quiet: bool = False,
    console: Console | None = None,
) -> int:
    """Run ``clauses`` (default: all) against ``targets``, print the report, write the files.

    Returns the exit status: 0 if the report is ok, else 1. The files are written either way.
    """
    console = console if console is not None else Console()
    selected = list(clauses) if clauses is not None else select_clauses()
    report = asyncio.run(_run(targets, selected, console, quiet))
    if json_path is not None:
        report.write_json(json_path)
    if junit_path is not None:
        report.write_junit_xml(junit_path)
    console.print(summary_table(report, selected))
    console.print(_verdict(report))
    return 0 if report.ok else 1


async def _run(
    targets: Sequence[StorageTarget], clauses: list[Clause], console: Console, quiet: bool
) -> Report:
    report = Report()
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

            def advance(_backend: str, result: ClauseResult) -> None:
                progress.update(task, advance=1)

            backend = await avalidate_target(target, clauses=clauses, progress=advance)
            report.backends.append(backend)
            for renderable in backend_report(backend, quiet=quiet):
                progress.console.print(renderable)
    return report


def backend_report(backend: BackendReport, *, quiet: bool = False) -> list[Table | Text]:
    """One backend's results as a table (only the failures when ``quiet``) and a summary line."""
    rendered: list[Table | Text] = []
    shown = backend.failures if quiet else backend.results
    if shown:
        capabilities = ", ".join(backend.capabilities) or "none"
        rendered.append(Text.assemble((backend.backend, "bold"), f"  capabilities: {capabilities}"))
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
                Text(result.message.replace("\n", " ")),
            )
        rendered.append(table)
    for result in backend.results:
        if result.outcome in (Outcome.FAILED, Outcome.XFAILED):
            rendered.append(
                Text.assemble(
                    _outcome_text(result.outcome), " ", (result.clause_id, "bold"), f": {result.message}"
                )
            )
    rendered.append(_backend_line(backend))
    return rendered


def summary_table(report: Report, clauses: Sequence[Clause]) -> Table:
    """Families by backends: clauses passed of those run in each cell, then each backend's verdict."""
    families = [family for family in FAMILIES if any(c.family == family for c in clauses)]
    table = Table(title="Summary: passed / clauses", title_justify="left")
    table.add_column("Family", no_wrap=True)
    for backend in report.backends:
        table.add_column(Text(backend.backend), justify="center", no_wrap=True)
    for family in [*families, None]:
        cells: list[Text] = []
        for backend in report.backends:
            results = [r for r in backend.results if family is None or r.family == family]
            passed = sum(1 for r in results if r.outcome is Outcome.PASSED)
            cells.append(Text(_cell(backend, results, passed), style=_worst_style(results)))
        table.add_row(family or "total", *cells, end_section=family is None)
    table.add_row("result", *(_backend_verdict(backend) for backend in report.backends))
    return table


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
        epilog="Exit status: 0 all required clauses passed, 1 a clause failed, 2 usage error.",
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
    parser.add_argument("--list", action="store_true", help="print the clause catalogue and exit")
    parser.add_argument("--quiet", action="store_true", help="show only failures and the summary")
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    return parser


def _targets(urls: Sequence[str]) -> list[StorageTarget]:
    if not urls:
        return builtin_targets()
    targets: list[StorageTarget] = []
    for url in urls:
        try:
            targets.append(target_from_url(url))
        except StorageConfigurationError as exc:
            raise UsageError(str(exc)) from exc
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
        # What LangGraph itself does not guarantee is reported as a runner finding (an expected
        # failure with its reason), never as a pass or a storage failure.
        target.expected_failures = {**target.expected_failures, **LANGGRAPH_DEVIATIONS}


def _backend_line(backend: BackendReport) -> Text:
    counts = ", ".join(f"{backend.count(outcome)} {outcome.value}" for outcome in Outcome)
    seconds = sum(r.duration for r in backend.results)
    line = Text(f"{backend.backend}: ")
    if backend.error:
        return line.append(f"ERROR {backend.error}", style="bold red")
    line.append(f"{counts} in {seconds:.2f} s  ")
    return line.append_text(_backend_verdict(backend))


def _cell(backend: BackendReport, results: Sequence[ClauseResult], passed: int) -> str:
    if backend.error:
        return "-"
    notes = [
        f"{n} {outcome.value}"
        for outcome in (Outcome.SKIPPED, Outcome.XFAILED, Outcome.FAILED)
        if (n := sum(1 for r in results if r.outcome is outcome))
    ]
    return f"{passed}/{len(results)}" + (f" ({', '.join(notes)})" if notes else "")


def _outcome_text(outcome: Outcome) -> Text:
    return Text(outcome.value, style=OUTCOME_STYLES[outcome])


def _backend_verdict(backend: BackendReport) -> Text:
    if backend.error:
        return Text("ERROR", style="bold red")
    return Text("OK", style="bold green") if backend.ok else Text("FAILED", style="bold red")


def _worst_style(results: Sequence[ClauseResult]) -> str:
    outcomes = {r.outcome for r in results}
    for outcome in (Outcome.FAILED, Outcome.XFAILED, Outcome.SKIPPED):
        if outcome in outcomes:
            return OUTCOME_STYLES[outcome]
    return OUTCOME_STYLES[Outcome.PASSED] if outcomes else "dim"


def _verdict(report: Report) -> Text:
    summary = ", ".join(f"{count} {outcome}" for outcome, count in report.summary.items())
    failing = [b.backend for b in report.backends if not b.ok]
    if not failing:
        return Text(f"Every backend conforms. Clauses: {summary}.", style="bold green")
    return Text(f"Does not conform: {', '.join(failing)}. Clauses: {summary}.", style="bold red")


if __name__ == "__main__":
    sys.exit(main())
