"""``checkpoint-storages``: verify, inspect, diff and copy a storage from a shell.

* ``verify URL [--workflow NAME] [--anchor WORKFLOW=TOKEN] [--json] [--structure-only]``: scan
  for dangling links, cycles, orphaned nested records, undecodable bodies, types the codec does
  not allow and signature changes (storages.tools.verify); with ``?integrity_key_env=NAME`` in the URL,
  for tampered records and broken chains too, and with ``--anchor``, for workflows whose store
  went back before the anchor.
* ``inspect URL``: the workflows, with counts. ``inspect URL WORKFLOW``: that workflow's lineage
  tree (``--html OUT``: a page to click through). ``inspect URL --checkpoint ID``: one
  checkpoint's fields. ``inspect URL THREAD`` / ``--thread THREAD``: a LangGraph thread,
  subgraphs under their parent.
* ``diff URL ID_A ID_B``: what changed between two checkpoints, path by path.
* ``copy SRC_URL DST_URL [--workflow NAME ...] [--dry-run]``: copy checkpoints with their order,
  nested records, tombstones and pending writes (storages.tools.copying), then verify the
  destination; ``import-maf DIR DST_URL``: import a MAF FileCheckpointStorage directory
  (storages.tools.copying.maf_import).
* ``backends``: the registered backends and any entry point that was refused.

verify, inspect and diff only read, and so does copy of its source: every built-in backend is
opened through its ``read_only_handle()`` (SQLite ``mode=ro``, PostgreSQL read-only transactions,
S3 and Redis refusing every write), which creates nothing and refuses a store that does not
exist. Exit statuses are one table (storages.tools.cli.arguments.EXIT_STATUSES): 0 done, 1 something
wrong found, 2 not done, 3 nothing there (a store that does not exist or holds no checkpoint, or
a workflow, thread, checkpoint or directory that holds none). For 2 and 3, stdout holds nothing
and stderr one line.

No credential is printed: a URL is shown redacted, every message is redacted where it is made,
and every output stream masks the secrets of the URLs given (storages.redaction).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ...engine import CheckpointStore
from ...errors import (
    CheckpointNotFoundError,
    CheckpointStorageError,
    CheckpointTypeNotAllowedError,
    MissingDependencyError,
    StoreNotFoundError,
)
from ...redaction import redact_known, scrubbed_output, url_secrets
from ...registry import RegisteredBackend, registry
from ..inspection import (
    LineageTree,
    build_lineage,
    build_thread_lineage,
    describe_checkpoint,
    list_workflow_summaries,
    render_checkpoint,
    render_lineage_row,
    render_lineage_title,
    render_workflows,
    stream_lineage,
    thread_workflows,
)
from ..inspection.diff import diff_checkpoints
from ..inspection.page import write_diff_html, write_lineage_html
from ..inspection.render import render_diff
from ..terminal import console as terminal_console
from ..terminal import json_dumps, plain, printable, silence_stdout
from ..verify import FindingKind, describe_storage, repair, verify
from ..verify.render import TypePolicy, findings_table, type_advice, verdict
from .arguments import (
    EXIT_CLOSED_PIPE,
    EXIT_ERROR,
    EXIT_FOUND,
    EXIT_INTERRUPTED,
    EXIT_NOTHING,
    EXIT_OK,
    PROG,
    build_parser,
    option_conflict,
)
from .common import (
    NothingThere,
    UsageError,
    holds_nothing,
    not_found,
    open_read_only,
    open_writable,
    output_file,
    policy_of,
    use_app_dirs,
)
from .copy_command import copy_command, import_maf_command

__all__ = ["NothingThere", "UsageError", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``checkpoint-storages`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits for --help and its own usage errors
        return exit_.code if isinstance(exit_.code, int) else EXIT_ERROR
    secrets = frozenset().union(
        *(url_secrets(url) for url in (getattr(args, "url", None), getattr(args, "destination", None)) if url)
    )
    with scrubbed_output(secrets):
        return _run(args, secrets)


def _run(args: argparse.Namespace, secrets: frozenset[str]) -> int:
    console = terminal_console()
    try:
        conflict = option_conflict(args)
        if conflict is not None:
            raise UsageError(conflict)
        use_app_dirs(getattr(args, "app_dir", None))
        if args.command == "verify":
            status = asyncio.run(_verify(args, console))
        elif args.command == "backends":
            status = _backends(args, console)
        elif args.command == "copy":
            status = asyncio.run(copy_command(args, console))
        elif args.command == "import-maf":
            status = asyncio.run(import_maf_command(args, console))
        elif args.command == "diff":
            status = asyncio.run(_diff(args, console))
        else:
            status = asyncio.run(_inspect(args, console))
        # What is still buffered is written here, so a closed pipe is caught below rather than
        # reported by the interpreter's last flush at exit.
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        silence_stdout()
        return EXIT_CLOSED_PIPE
    except (NothingThere, StoreNotFoundError, CheckpointNotFoundError) as exc:
        _say(f"nothing there: {exc}", secrets)
        return EXIT_NOTHING
    except CheckpointTypeNotAllowedError as exc:
        advice = type_advice(exc.type_key, policy_of(args))
        which = "a checkpoint" if exc.checkpoint_id is None else f"checkpoint {exc.checkpoint_id!r}"
        _say(f"error: {which} holds {exc.type_key}, which this codec does not build (the data is "
             f"intact); {advice}", secrets)  # fmt: skip
        return EXIT_ERROR
    except (UsageError, CheckpointStorageError, ValueError, OSError) as exc:
        _say(f"error: {exc}", secrets)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _say(message: str, secrets: frozenset[str]) -> None:
    # The message may quote stored ids, a driver's text or a piece of the URL a parser refused:
    # one inert line, its credentials masked.
    print(f"{PROG}: {printable(redact_known(message, secrets))}", file=sys.stderr)


# ---------------------------------------------------------------------- verify


async def _verify(args: argparse.Namespace, console: Console) -> int:
    async with open_read_only(args) as storage:
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
    if report.records_checked == 0 and report.ok:
        if args.workflow is not None:
            raise NothingThere(f"no records of workflow {args.workflow!r} in {report.storage}")
        raise NothingThere(holds_nothing(report.storage))
    repaired: list[str] = []
    if args.repair and any(f.leftover is not None and f.leftover.repairable for f in report.findings):
        # The one writing path of verify: a handle that may write, opened only when there is
        # something to repair.
        async with open_writable(args) as writable:
            repaired = await repair(writable, report)
            report = await verify(
                writable,
                workflow_name=args.workflow,
                anchors=_anchors(args.anchor),
                structure_only=args.structure_only,
            )
        if not args.json:
            for line in repaired:
                console.print(plain(f"repaired: {line}"))
    refused = report.of_kind(FindingKind.TYPE_NOT_ALLOWED)
    failing = len(report.findings) - (0 if args.strict else len(refused))
    policy = policy_of(args)
    if args.json:
        extra = {"repaired": repaired} if args.repair else {}
        print(json_dumps({**report.to_dict(), "strict": args.strict, "failed": failing > 0, **extra}))
    else:
        if report.findings:
            console.print(findings_table(report, policy))
        console.print(verdict(report))
    if refused:
        types = sorted({finding.refused_type for finding in refused if finding.refused_type is not None})
        _warn_refused(args, len(refused), [] if not args.json else types, policy)
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


def _warn_refused(args: argparse.Namespace, count: int, types: list[str], policy: TypePolicy) -> None:
    """A refused type is intact data judged by another policy than the application's: a warning
    on stderr (the fix is in the table, or, with --json, here)."""
    noun = "checkpoint holds" if count == 1 else "checkpoints hold"
    outcome = "so the exit status is 1" if args.strict else "exit status 0 unless --strict"
    lines = [f"warning: {count} {noun} a type this codec does not build; the data is intact ({outcome})"]
    lines += [f"  {type_key}: {type_advice(type_key, policy)}" for type_key in types]
    terminal_console(stderr=True).print(plain("\n".join(lines), style="yellow", multiline=True))


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
    if args.html is not None and args.workflow is None and args.thread is None:
        raise UsageError("--html draws one workflow or thread: give a WORKFLOW or --thread THREAD")
    out = None if args.html is None else output_file(args.html)
    async with open_read_only(args) as storage:
        if args.checkpoint is not None:
            try:
                view = await describe_checkpoint(storage, args.checkpoint)
            except CheckpointNotFoundError as exc:
                raise await not_found(storage, str(exc)) from exc
            _show(console, args.json, render_checkpoint(view), view.to_dict())
            if view.refused_type is not None:
                _warn_refused(args, 1, [view.refused_type], policy_of(args))
                return EXIT_FOUND if args.strict else EXIT_OK
            return EXIT_OK if view.error is None else EXIT_FOUND
        if args.workflow is not None or args.thread is not None:
            tree = await _lineage(storage, args.workflow, args.thread)
            if out is not None:
                await write_lineage_html(storage, tree, out, title=describe_storage(storage))
                console.print(plain(f"wrote {out}"))
                return EXIT_OK
            await _print_lineage(console, args.json, storage, tree)
            return EXIT_OK
        summaries = await list_workflow_summaries(storage)
        if not summaries:
            raise NothingThere(holds_nothing(describe_storage(storage)))
        _show(
            console,
            args.json,
            render_workflows(summaries, describe_storage(storage)),
            {"storage": describe_storage(storage), "workflows": [summary.to_dict() for summary in summaries]},
        )
        return EXIT_FOUND if any(summary.listed_without_record for summary in summaries) else EXIT_OK


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
    raise await not_found(storage, f"no records of {what}")


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
        console.print(render_lineage_row(line, tree.workflow_name))


async def _diff(args: argparse.Namespace, console: Console) -> int:
    out = None if args.html is None else output_file(args.html)
    async with open_read_only(args) as storage:
        try:
            diff = await diff_checkpoints(storage, args.old, args.new)
        except CheckpointNotFoundError as exc:
            raise await not_found(storage, str(exc)) from exc
        if out is not None:
            await asyncio.to_thread(write_diff_html, diff, out, title=describe_storage(storage))
            console.print(plain(f"wrote {out}"))
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


if __name__ == "__main__":
    sys.exit(main())
