"""``checkpoint-storages``: verify and inspect a storage from a shell.

* ``checkpoint-storages verify URL [--workflow NAME] [--anchor WORKFLOW=TOKEN] [--json]
  [--structure-only]``: scan for dangling links, cycles, orphaned nested records, undecodable
  bodies, types the codec does not allow and signature changes (storages.verify); with
  ``?integrity_key_env=NAME`` in the URL, for tampered records and broken chains too, and with
  ``--anchor``, for workflows whose store went back before the anchor.
  Exit status 0 when nothing is found, 1 when something is, 2 for a usage or connection error.
* ``checkpoint-storages inspect URL``: the workflows, with counts.
  ``inspect URL WORKFLOW``: that workflow's lineage tree.
  ``inspect URL --checkpoint ID``: one checkpoint's fields.
  Exit status 0, 1 when the checkpoint shown cannot be loaded, 2 for a usage or connection error
  (an unknown workflow or checkpoint included).
  ``inspect URL THREAD`` / ``--thread THREAD``: a LangGraph thread, subgraphs under their parent.
  ``--html OUT`` writes the lineage as a self-contained HTML graph instead.
* ``checkpoint-storages diff URL ID_A ID_B``: what changed between two checkpoints, path by path.
* ``checkpoint-storages copy SRC_URL DST_URL [--workflow NAME ...] [--dry-run]``: copy checkpoints
  with their order, nested records, tombstones and pending writes (storages.copying), then verify
  the destination; ``import-maf DIR DST_URL``: import a MAF FileCheckpointStorage directory
  (storages.maf_import). Exit status 0, 1 for a conflict, a refused file, a tombstone not
  recreated or a verify finding, 2 for a usage or connection error.
* ``checkpoint-storages backends``: the registered backends (built-in and third-party, with what
  each needs installed) and any entry point that was refused; exit status 1 when one was.

``--allowed-modules`` / ``--allowed-checkpoint-types`` (the storage URL's options) and
``--allow-type module:qualname`` let the codec decode what the application's codec does; without
them such checkpoints are reported as ``type_not_allowed`` (intact data, not damage): a warning,
exit 0, unless ``--strict``. ``verify --structure-only`` constructs no value at all, so it checks
an application's store from a process that cannot import the application's types.
verify and inspect only read: a SQLite URL naming a file that does not exist is an error, not a
new empty store (for copy, only as the source).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .cli_arguments import PROG, build_parser
from .codec import CheckpointCodec
from .copy_render import copy_progress, render_copy
from .copying import CopyReport, copy_store
from .engine import CheckpointStore
from .errors import CheckpointNotFoundError, CheckpointStorageError, MissingDependencyError
from .inspection import (
    LineageTree,
    build_lineage,
    build_thread_lineage,
    describe_checkpoint,
    list_workflow_summaries,
    render_checkpoint,
    render_lineage_line,
    render_lineage_title,
    render_workflows,
    stream_lineage,
    thread_workflows,
)
from .inspection.diff import diff_checkpoints
from .inspection.page import write_diff_html, write_lineage_html
from .inspection.render import render_diff
from .maf_import import import_maf_directory
from .memory import InMemoryCheckpointStorage
from .redaction import redact_text, redact_url
from .registry import RegisteredBackend, registry
from .terminal import EXIT_BROKEN_PIPE, json_dumps, plain, printable, silence_stdout
from .terminal import console as terminal_console
from .urls import open_storage
from .verify import FindingKind, VerifyReport, describe_storage, verify

EXIT_OK = 0
EXIT_FOUND = 1
"""verify found problems; inspect showed a checkpoint that cannot be loaded."""
EXIT_ERROR = 2
"""Usage error, unknown workflow or checkpoint, or the storage could not be used."""
EXIT_CLOSED_PIPE = EXIT_BROKEN_PIPE
"""The reader of the output went away (``... | head``); nothing more is printed."""


class UsageError(Exception):
    """A request that cannot be carried out; reported in one line with exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``checkpoint-storages`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits for --help and its own usage errors
        return exit_.code if isinstance(exit_.code, int) else EXIT_ERROR
    console = terminal_console()
    try:
        if args.command == "verify":
            status = asyncio.run(_verify(args, console))
        elif args.command == "backends":
            status = _backends(args, console)
        elif args.command == "copy":
            status = asyncio.run(_copy(args, console))
        elif args.command == "import-maf":
            if not Path(args.directory).is_dir():
                raise UsageError(f"{args.directory}: no such directory")
            status = asyncio.run(_import_maf(args, console))
        elif args.command == "diff":
            status = asyncio.run(_diff(args, console))
        else:
            status = asyncio.run(_inspect(args, console))
        # What is still buffered is written here, so a closed pipe is caught below rather than
        # reported by the interpreter's last flush at exit.
        sys.stdout.flush()
        return status
    except (UsageError, CheckpointStorageError, ValueError) as exc:
        # The message may quote stored ids or a driver's text: one inert line, no credentials.
        print(f"{PROG}: error: {printable(redact_text(str(exc)))}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        silence_stdout()
        return EXIT_CLOSED_PIPE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


# ---------------------------------------------------------------------- verify


async def _verify(args: argparse.Namespace, console: Console) -> int:
    async with _open(args) as storage:
        with Progress(
            TextColumn("[bold]verify"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=args.json or not console.is_terminal,  # a bar only on a terminal
        ) as progress:
            task = progress.add_task("verify", total=None)
            report = await verify(
                storage,
                workflow_name=args.workflow,
                progress=lambda done, known: progress.update(task, completed=done, total=known),
                anchors=_anchors(args.anchor),
                structure_only=args.structure_only,
            )
    if args.workflow is not None and report.records_checked == 0 and report.ok:
        raise UsageError(f"no records of workflow {args.workflow!r} in {report.storage}")
    refused = len(report.of_kind(FindingKind.TYPE_NOT_ALLOWED))
    failing = len(report.findings) - (0 if args.strict else refused)
    if args.json:
        print(json_dumps({**report.to_dict(), "strict": args.strict, "failed": failing > 0}))
    else:
        if report.findings:
            console.print(findings_table(report))
        console.print(verdict(report))
    if refused and not args.json:
        _warn_refused(console, args, refused)
    return EXIT_FOUND if failing else EXIT_OK


def _anchors(given: list[str] | None) -> dict[str, str]:
    """``--anchor WORKFLOW=TOKEN`` options as a mapping (a token never contains '=')."""
    anchors: dict[str, str] = {}
    for item in given or []:
        workflow, equals, token = item.rpartition("=")
        if not equals or not workflow or not token:
            raise UsageError(f"--anchor takes WORKFLOW=TOKEN (a token from head_anchor), got {item!r}")
        anchors[workflow] = token
    return anchors


def findings_table(report: VerifyReport) -> Table:
    count = len(report.findings)
    title = plain(f"{printable(report.storage)}: {count} finding{'' if count == 1 else 's'}")
    table = Table(title=title, title_justify="left")
    # Every column folds rather than cuts, so an 80-column log keeps each one readable.
    table.add_column("Kind", style="bold red", overflow="fold", min_width=10)
    table.add_column("Checkpoints", overflow="fold", min_width=11)
    table.add_column("Message", ratio=1, overflow="fold", min_width=20)
    for finding in report.findings:
        ids = Text("\n".join(printable(checkpoint_id) for checkpoint_id in finding.checkpoint_ids))
        table.add_row(plain(finding.kind.value), ids, plain(finding.message))
    return table


def verdict(report: VerifyReport) -> Text:
    scope = "" if report.workflow_name is None else f" of workflow {report.workflow_name!r}"
    checked = f"{report.records_checked} record{'' if report.records_checked == 1 else 's'}{scope}"
    if report.ok:
        return plain(f"{report.storage}: no problems found in {checked}.", style="bold green")
    counts = ", ".join(f"{n} {kind.value}" for kind in FindingKind if (n := len(report.of_kind(kind))))
    return plain(f"{report.storage}: {counts} in {checked}.", style="bold red")


# ---------------------------------------------------------------------- inspect


async def _inspect(args: argparse.Namespace, console: Console) -> int:
    chosen = [
        name
        for name, given in (
            ("a WORKFLOW", args.workflow),
            ("--checkpoint", args.checkpoint),
            ("--thread", args.thread),
        )
        if given is not None
    ]
    if len(chosen) > 1:
        raise UsageError(
            f"give one of a WORKFLOW, --checkpoint ID or --thread THREAD, "
            f"not both {chosen[0]} and {chosen[1]}"
        )
    async with _open(args) as storage:
        if args.checkpoint is not None:
            try:
                view = await describe_checkpoint(storage, args.checkpoint)
            except CheckpointNotFoundError as exc:
                raise UsageError(f"{exc} in {describe_storage(storage)}") from exc
            _show(console, args.json, render_checkpoint(view), view.to_dict())
            if view.refused_type is not None:
                _warn_refused(console, args, 1)
                return EXIT_FOUND if args.strict else EXIT_OK
            return EXIT_OK if view.error is None else EXIT_FOUND
        if args.workflow is not None or args.thread is not None:
            tree = await _lineage(storage, args.workflow, args.thread)
            if args.html is not None:
                await write_lineage_html(storage, tree, Path(args.html), title=describe_storage(storage))
                console.print(plain(f"wrote {args.html}"))
                return EXIT_OK
            await _print_lineage(console, args.json, storage, tree)
            return EXIT_OK
        if args.html is not None:
            raise UsageError("--html draws one workflow or thread: give a WORKFLOW or --thread THREAD")
        summaries = await list_workflow_summaries(storage)
        _show(
            console,
            args.json,
            render_workflows(summaries, describe_storage(storage)),
            {"workflows": [summary.to_dict() for summary in summaries]},
        )
        return EXIT_OK


async def _lineage(storage: CheckpointStore, workflow: str | None, thread: str | None) -> LineageTree:
    """The tree of a workflow or of a LangGraph thread; a WORKFLOW that names no workflow but a
    LangGraph thread draws the thread."""
    if workflow is not None:
        tree = await build_lineage(storage, workflow)
        if tree.roots:
            return tree
        thread = workflow
    assert thread is not None
    if await thread_workflows(storage, thread):
        return await build_thread_lineage(storage, thread)
    what = f"workflow {workflow!r}" if workflow is not None else f"LangGraph thread {thread!r}"
    raise UsageError(f"no records of {what} in {describe_storage(storage)}")


async def _print_lineage(
    console: Console, as_json: bool, storage: CheckpointStore, tree: LineageTree
) -> None:
    """Line by line as each is read: memory holds the index, never the output."""
    lines = stream_lineage(storage, tree)
    if as_json:
        header = json_dumps(tree.header())
        print(header[: header.rindex("}")].rstrip() + ',\n  "nodes": [')
        separator = ""
        async for line in lines:
            print(separator + "    " + json_dumps(line.to_dict()).replace("\n", "\n    "), end="")
            separator = ",\n"
        print("\n  ]\n}")
        return
    console.print(render_lineage_title(tree))
    async for line in lines:
        console.print(render_lineage_line(line, tree.workflow_name))


def _warn_refused(console: Console, args: argparse.Namespace, count: int) -> None:
    """A refused type is intact data judged by another policy than the application's: a warning."""
    noun = "checkpoint holds" if count == 1 else "checkpoints hold"
    message = (
        f"warning: {count} {noun} a type this codec does not allow (the data is intact); judge "
        "the store with the application's policy: --allowed-modules / --allowed-checkpoint-types "
        "as in its storage URL" + ("" if args.strict else ", or --strict to fail on it")
    )
    terminal_console(stderr=True).print(plain(message, style="yellow"))


async def _diff(args: argparse.Namespace, console: Console) -> int:
    async with _open(args) as storage:
        try:
            diff = await diff_checkpoints(storage, args.old, args.new)
        except CheckpointNotFoundError as exc:
            raise UsageError(f"{exc} in {describe_storage(storage)}") from exc
        if args.html is not None:
            write_diff_html(diff, Path(args.html), title=describe_storage(storage))
            console.print(plain(f"wrote {args.html}"))
            return EXIT_OK
    _show(console, args.json, render_diff(diff), diff.to_dict())
    return EXIT_OK


def _show(console: Console, as_json: bool, renderable: RenderableType, data: object) -> None:
    if as_json:
        print(json_dumps(data))
    else:
        console.print(renderable)


# ---------------------------------------------------------------------- backends


def _backends(args: argparse.Namespace, console: Console) -> int:
    backends = registry()
    rows = [_backend_row(backend) for backend in backends.backends]
    problems = [str(problem) for problem in backends.problems]
    if args.json:
        print(json_dumps({"backends": rows, "problems": problems}))
    else:
        table = Table(title="Storage backends", title_justify="left")
        for column in ("Backend", "Schemes", "Installed", "Origin", "Summary"):
            table.add_column(column, overflow="fold", min_width=min(len(column), 9))
        for row in rows:
            installed = (
                Text("yes", style="green") if row["missing"] is None else plain(row["missing"], "yellow")
            )
            schemes = ", ".join(f"{scheme}://" for scheme in row["schemes"])
            table.add_row(
                plain(row["name"]), plain(schemes), installed, plain(row["origin"]), plain(row["summary"])
            )
        console.print(table)
        for problem in problems:
            console.print(plain(f"refused: {problem}", style="bold red"))
    return EXIT_FOUND if problems else EXIT_OK


def _backend_row(backend: RegisteredBackend) -> dict[str, Any]:
    try:
        backend.check_installed()
        missing = None
    except MissingDependencyError as exc:
        missing = str(exc)
    spec = backend.spec
    return {
        "name": spec.name,
        "schemes": list(spec.schemes),
        "summary": spec.summary,
        "extra": spec.extra,
        "missing": missing,
        "origin": backend.origin,
        "server_url_env": spec.server_url_env,
    }


# ---------------------------------------------------------------------- copy


async def _copy(args: argparse.Namespace, console: Console) -> int:
    source = _open(args)
    destination, stand_in = _open_destination(args)
    async with source, destination:
        with copy_progress(console, PROG, "copy", quiet=args.json) as progress:
            report = await copy_store(
                source, destination, workflows=args.workflow, dry_run=args.dry_run, progress=progress
            )
    if stand_in:
        report.destination = redact_url(args.destination)
    return _show_copy(console, args, report, "copy")


async def _import_maf(args: argparse.Namespace, console: Console) -> int:
    destination, stand_in = _open_destination(args)
    async with destination:
        with copy_progress(console, PROG, "import-maf", quiet=args.json) as progress:
            report = await import_maf_directory(
                args.directory,
                destination,
                allowed_checkpoint_types=args.allow_type or (),
                dry_run=args.dry_run,
                progress=progress,
            )
    if stand_in:
        report.destination = redact_url(args.destination)
    return _show_copy(console, args, report, "import-maf")


def _show_copy(console: Console, args: argparse.Namespace, report: CopyReport, verb: str) -> int:
    if args.json:
        print(json_dumps(report.to_dict()))
    else:
        for verify_report in report.verify_reports:
            if verify_report.findings:
                console.print(findings_table(verify_report))
        title = f"{'dry run: ' if args.dry_run else ''}{verb} {report.source} -> {report.destination}"
        console.print(render_copy(report, title=title))
    return EXIT_OK if report.ok else EXIT_FOUND


def _open_destination(args: argparse.Namespace) -> tuple[CheckpointStore, bool]:
    """The destination, and whether it is an empty stand-in for a SQLite file a dry run must not
    create (the copy would start from an empty store)."""
    codec = CheckpointCodec(allowed_types=args.allow_type or ())
    storage = open_storage(args.destination, codec=codec)
    path = getattr(storage, "path", None)
    if args.dry_run and isinstance(path, Path) and not path.exists():
        return InMemoryCheckpointStorage(codec=codec), True
    return storage, False


# ---------------------------------------------------------------------- shared


def _open(args: argparse.Namespace) -> CheckpointStore:
    # The application's own policy, given as its storage URL gives it (comma-separated lists).
    codec = CheckpointCodec(
        allowed_types=[*(args.allow_type or ()), *_comma_list(args.allowed_checkpoint_types)],
        allowed_modules=_comma_list(args.allowed_modules),
    )
    storage = open_storage(args.url, codec=codec)
    # The commands only read; opening a SQLite URL that names no file would create an empty store.
    path = getattr(storage, "path", None)
    if isinstance(path, Path) and not path.exists():
        raise UsageError(f"{args.url}: no such file {path}")
    # A storage that can open read-only (SQLite: mode=ro, or immutable=1 if the URL says so)
    # does, so a file on read-only media, or in a directory this user may not write, is read.
    read_only_handle = getattr(storage, "read_only_handle", None)
    return read_only_handle() if callable(read_only_handle) else storage


def _comma_list(given: list[str] | None) -> list[str]:
    return [item.strip() for value in given or () for item in value.split(",") if item.strip()]


if __name__ == "__main__":
    sys.exit(main())
