"""``checkpoint-conformance [URL ...]``: run the kit from a shell or CI.

With no URL it checks each configured server (a backend's ``server_url_env``, e.g.
``CHECKPOINT_POSTGRESQL_URL``), then every registered backend (storages/registry.py) on its
embedded default, and names each backend it could not check and what that one needs. A URL
run writes under a run prefix of its own where the backend has one (Redis ``prefix=``, the S3 key
prefix) and deletes every workflow it created unless ``--keep``; point it at a scratch namespace
all the same.

Exit status: 0 when every clause passed, was not applicable, failed as declared or was a runner
finding (a defect of the runner, not of the storage); 1 when a clause failed, a backend could not
be opened or a ``--require``'d capability is not declared; 2 for a usage error (a URL its
backend refuses, whatever the backend raises) or a backend that did not answer the connectivity
check (nothing else runs then; configured servers are checked first).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from storages.contract import Capability
from storages.errors import MissingDependencyError, StorageConfigurationError
from storages.redaction import redact_text, scrubbed_output, url_secrets
from storages.tools.terminal import EXIT_BROKEN_PIPE, silence_stdout
from storages.tools.terminal import console as terminal_console
from storages.urls import supported_schemes
from storages.version import installed_version

from .adapter_runners import ADAPTER_RUNNERS, use_adapter_runner
from .bounded import OPERATION_TIMEOUT
from .builtin import builtin_targets, not_run_backends, unavailable_target
from .clause import FAMILIES, Clause
from .model import DEFAULT_OPERATIONS, DEFAULT_SECONDS, DEFAULT_SEED, parse_budget
from .report import ClauseResult, NotRun, Report, now
from .runner import abandoned_loops, avalidate_target, capabilities_from_names
from .selection import select_clauses
from .tables import (
    OUTCOME_LABELS,
    OUTCOME_STYLES,
    backend_report,
    catalogue_table,
    family_line,
    summary_table,
    verdict_lines,
)
from .target import (
    CHECKPOINT_CLASS_CHOICES,
    StorageTarget,
    new_run_prefix,
    target_from_url,
    with_checkpoint_class,
)

PROG = "checkpoint-conformance"


class UsageError(Exception):
    """A mistake in the command line; reported in one line with exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``checkpoint-conformance`` console script; returns the exit status.

    Every message is redacted where it is made; as a last net, what reaches stdout and stderr has
    the secrets of the URLs given masked (a parser may quote a piece of a URL, as an S3 bucket
    name ``KEY:SECRET@bucket``, that no URL pattern recognises)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    secrets = frozenset().union(*(url_secrets(arg) for arg in arguments if "://" in arg or "@" in arg))
    with scrubbed_output(secrets):
        return _guarded_main(arguments)


def _guarded_main(argv: Sequence[str]) -> int:
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
        clauses = select_clauses(args.clause or (["runner"] if args.runner != "reference" else None))
        if args.list:
            console.print(catalogue_table(clauses))
            return 0
        required = capabilities_from_names(
            name for value in args.require or () for name in value.split(",") if name.strip()
        )
        if args.checkpoint_class == "both":
            # Twice over, each from its own targets: a run closes its target's storage at the end.
            targets = [
                *_targets(args),
                *with_checkpoint_class(_targets(args), "maf"),
            ]
        else:
            targets = with_checkpoint_class(_targets(args), args.checkpoint_class)
        _use_runner(targets, args.runner, args.child_storage)
        targets = _with_model_settings(targets, args.model_seed, args.model_budget)
        if args.operation_timeout is not None:
            if not args.operation_timeout > 0:
                raise UsageError(
                    "--operation-timeout must be a positive number of seconds, "
                    f"not {args.operation_timeout:g}"
                )
            targets = [dataclasses.replace(t, operation_timeout=args.operation_timeout) for t in targets]
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
            verbose=args.verbose,
            console=console,
            required_capabilities=required,
            not_run=() if args.urls else not_run_backends(),
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
    verbose: bool = False,
    console: Console | None = None,
    required_capabilities: frozenset[Capability] = frozenset(),
    not_run: Sequence[NotRun] = (),
) -> int:
    """Run ``clauses`` (default: all) against ``targets``, print the report, write the files.

    ``verbose`` prints each unexpected exception's traceback; ``not_run`` names the registered
    backends the run leaves out, and why (the no-argument run's, see
    :func:`~conformance.builtin.not_run_backends`).

    Returns the exit status: 0 if the report is ok, 2 if a backend was unreachable (the run
    stops there), else 1. The files are written either way.
    """
    console = console if console is not None else Console()
    selected = list(clauses) if clauses is not None else select_clauses()
    report = asyncio.run(_run(targets, selected, console, quiet, verbose, required_capabilities))
    report.not_run = list(not_run)
    if json_path is not None:
        report.write_json(json_path)
    if junit_path is not None:
        report.write_junit_xml(junit_path)
    for backend in report.backends:
        if backend.unreachable:
            # One line: a driver's message may span several (libpq's hint does).
            print(f"{PROG}: error: {backend.backend}: {' '.join(backend.error.split())}", file=sys.stderr)
            return 2
    console.print(summary_table(report, selected))
    console.print(Text("Cells: passed/applicable clauses; n/a: not applicable.", style="dim"))
    for line in verdict_lines(report):
        console.print(line)
    for left_out in report.not_run:
        console.print(Text(f"Not run: {left_out.backend}: {left_out.reason}", style="yellow"))
    return 0 if report.ok else 1


async def _run(
    targets: Sequence[StorageTarget],
    clauses: list[Clause],
    console: Console,
    quiet: bool,
    verbose: bool,
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
            for renderable in backend_report(backend, quiet=quiet, verbose=verbose):
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
            self._console.print(family_line(backend, result.family, results, seconds))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Check checkpoint storages against the conformance clauses. With no URL, every registered "
            "backend is checked on its embedded default, and on its server where one is configured "
            "(e.g. CHECKPOINT_POSTGRESQL_URL)."
        ),
        epilog="Exit status: 0 conforms (runner findings do not count against the storage), 1 a clause "
        "failed or a required capability is missing, 2 usage error or unreachable storage.",
    )
    schemes = ", ".join(f"{scheme}://" for scheme in supported_schemes())
    parser.add_argument(
        "urls", nargs="*", metavar="URL", help=f"storage URL, e.g. sqlite:///ck.db; schemes: {schemes}"
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
        choices=("reference", "maf", "langgraph", *ADAPTER_RUNNERS),
        default="reference",
        help="what drives the runner clauses: the reference driver, real Agent Framework workflows (maf), "
        "real LangGraph graphs over StorageSaver (langgraph), real CrewAI flows (crewai) or real Burr "
        "applications (burr); a real runner runs only the runner family unless --clause is given",
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
        "--expiry-url",
        metavar="URL",
        help="with one URL: a store of the same backend whose records live a few seconds (e.g. "
        "?ttl=1), where the expiry family runs, so one run judges a ttl backend whole",
    )
    parser.add_argument(
        "--checkpoint-class",
        choices=CHECKPOINT_CLASS_CHOICES,
        default="project",
        help="the class clauses build checkpoints with: storages.WorkflowCheckpoint (project), "
        "agent_framework.WorkflowCheckpoint (maf), or each target once with each (both); "
        "contract.maf_checkpoint_class_round_trips checks MAF's class in every run where it is installed",
    )
    parser.add_argument(
        "--model-seed",
        type=int,
        metavar="N",
        help=f"seed of the model family's generated programs (default {DEFAULT_SEED}); the same seed "
        "draws the same programs, so a failure's seed reproduces it",
    )
    parser.add_argument(
        "--model-budget",
        metavar="OPS|SECONDS",
        help=f"how much the model family generates: operations (default {DEFAULT_OPERATIONS}, within "
        f"{DEFAULT_SECONDS:g} s) or seconds with an s (30s); CI runs a larger budget",
    )
    parser.add_argument(
        "--operation-timeout",
        type=float,
        metavar="SECONDS",
        help=f"seconds one storage call may take (default {OPERATION_TIMEOUT:g}); the first call that does "
        "not return in time fails its clause, and the clauses after it fail without running",
    )
    parser.add_argument("--list", action="store_true", help="print the clause catalogue and exit")
    parser.add_argument("--quiet", action="store_true", help="show only failures and the summary")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print the traceback of each unexpected exception a clause met (the JSON and JUnit "
        "reports always carry it)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    return parser


def _with_model_settings(
    targets: Sequence[StorageTarget], seed: int | None, budget: str | None
) -> list[StorageTarget]:
    """The targets with the model family's seed and budget; a malformed budget is a usage error."""
    if budget is not None:
        try:
            parse_budget(budget)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
    return [dataclasses.replace(t, model_seed=seed, model_budget=budget) for t in targets]


def _targets(args: argparse.Namespace) -> list[StorageTarget]:
    """The targets of the URLs given (``--keep``, ``--expiry-url``), or the built-in ones."""
    urls: Sequence[str] = args.urls
    keep: bool = args.keep
    expiry_url: str | None = args.expiry_url
    if expiry_url is not None and len(urls) != 1:
        raise UsageError(
            "--expiry-url names the short-ttl store of one storage: give exactly one URL with it, "
            f"not {len(urls)}"
        )
    if not urls:
        return builtin_targets()  # embedded backends are thrown away whole after the run
    targets: list[StorageTarget] = []
    run_prefix = new_run_prefix()
    for url in urls:
        try:
            targets.append(
                target_from_url(url, run_prefix=run_prefix, remove_workflows=not keep, expiry_url=expiry_url)
            )
        except StorageConfigurationError as exc:
            raise UsageError(redact_text(str(exc))) from exc
        except MissingDependencyError as exc:
            # Not a usage error: the URL is right, the environment lacks an extra. Report it.
            targets.append(unavailable_target(url, exc))
        except Exception as exc:
            # A third-party from_url may refuse an option with any exception (a TypeError from
            # its constructor, an error type of its own): still the URL's fault, said in one line.
            refusal = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise UsageError(
                redact_text(f"storage URL {url!r}: {_backend_of(url)} refused it: {refusal}")
            ) from exc
    return targets


def _backend_of(url: str) -> str:
    """``backend 'mine' (entry point ...)``: who opened ``url``, for an error message."""
    from urllib.parse import urlsplit

    from storages.registry import registry

    try:
        backend = registry().for_scheme(urlsplit(url).scheme.lower())
    except Exception:
        backend = None
    return "its backend" if backend is None else f"backend {backend.spec.name!r} ({backend.origin})"


def _use_runner(targets: Sequence[StorageTarget], runner: str, child_storage: str) -> None:
    if runner == "reference":
        if child_storage != "shared":
            raise UsageError("--child-storage needs --runner maf")
        return
    if runner == "langgraph":
        _use_langgraph(targets, child_storage)
        return
    if runner in ADAPTER_RUNNERS:
        if child_storage != "shared":
            raise UsageError(
                f"--child-storage separate needs --runner maf: {runner} children use the parent's adapter"
            )
        try:
            use_adapter_runner(targets, runner)
        except MissingDependencyError as exc:
            raise UsageError(str(exc)) from exc
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


__all__ = [
    "OUTCOME_LABELS",
    "OUTCOME_STYLES",
    "PROG",
    "UsageError",
    "backend_report",
    "catalogue_table",
    "console_main",
    "exit_process",
    "main",
    "run",
    "summary_table",
]


if __name__ == "__main__":
    console_main()
