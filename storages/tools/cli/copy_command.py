"""``checkpoint-storages copy`` and ``import-maf``: a source is checked to hold something before
the destination is opened (a copy or an import of nothing creates nothing), the copy or import
runs with a progress display, and the report is shown (storages.tools.copying.render) with the fixes of
refused types in the command line's words."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from rich.console import Console

from ...contract import Capability
from ...engine import CheckpointStore
from ...memory import InMemoryCheckpointStorage
from ...redaction import redact_url
from ...urls import open_storage
from ..copying import CopyReport, copy_store
from ..copying.maf_import import import_maf_directory
from ..copying.render import copy_progress, render_copy
from ..terminal import json_dumps
from ..verify import describe_storage
from ..verify.render import findings_table, type_advice
from .arguments import EXIT_FOUND, EXIT_OK, PROG
from .common import NothingThere, UsageError, codec_of, holds_nothing, open_read_only, policy_of


async def copy_command(args: argparse.Namespace, console: Console) -> int:
    async with open_read_only(args) as source:
        # Checked before the destination is opened: a copy of nothing creates nothing.
        await _require_something_to_copy(source, args.workflow)
        destination, stand_in = _open_destination(args)
        async with destination:
            with copy_progress(console, PROG, "copy", quiet=args.json) as progress:
                report = await copy_store(
                    source, destination, workflows=args.workflow, dry_run=args.dry_run, progress=progress
                )
    if stand_in:
        report.destination = redact_url(args.destination)
    return _show_copy(console, args, report, "copy")


async def _require_something_to_copy(source: CheckpointStore, wanted: list[str] | None) -> None:
    name = describe_storage(source)
    if Capability.LIST_WORKFLOWS not in source.capabilities:
        return  # copy_store refuses it, naming the capability
    present = set(await source.list_workflows())
    if not present:
        raise NothingThere(holds_nothing(name) + ": nothing to copy")
    for workflow in wanted or ():
        if workflow not in present:
            raise NothingThere(f"no records of workflow {workflow!r} in {name}: nothing to copy")
        tombstones = (
            await source.list_tombstones(workflow_name=workflow)
            if Capability.PRUNE in source.capabilities
            else []
        )
        if not tombstones and not await source.list_checkpoint_ids(workflow_name=workflow):
            raise NothingThere(
                f"workflow {workflow!r} has no checkpoint of its own in {name}: its records are nested "
                "in other workflows' checkpoints and are copied with them (copy those workflows)"
            )


async def import_maf_command(args: argparse.Namespace, console: Console) -> int:
    files = await asyncio.to_thread(_checkpoint_files, Path(args.directory))
    if files is None:
        raise UsageError(f"{args.directory}: no such directory")
    if not files:
        raise NothingThere(f"{args.directory} holds no MAF checkpoint file (<checkpoint_id>.json)")
    destination, stand_in = _open_destination(args)
    try:  # opened by its first operation: an import that reads nothing importable creates nothing
        with copy_progress(console, PROG, "import-maf", quiet=args.json) as progress:
            report = await import_maf_directory(
                args.directory,
                destination,
                allowed_checkpoint_types=args.allow_type or (),
                dry_run=args.dry_run,
                progress=progress,
            )
    finally:
        await destination.aclose()
    if stand_in:
        report.destination = redact_url(args.destination)
    return _show_copy(console, args, report, "import-maf")


def _checkpoint_files(directory: Path) -> list[Path] | None:
    """The directory's ``*.json`` files, or None when it is not a directory."""
    return sorted(directory.glob("*.json")) if directory.is_dir() else None


def _show_copy(console: Console, args: argparse.Namespace, report: CopyReport, verb: str) -> int:
    policy = policy_of(args)
    if args.json:
        print(json_dumps(report.to_dict()))
    else:
        for verify_report in report.verify_reports:
            if verify_report.findings:
                console.print(findings_table(verify_report, policy))
        title = f"{'dry run: ' if args.dry_run else ''}{verb} {report.source} -> {report.destination}"
        console.print(render_copy(report, title=title, advise=lambda key: type_advice(key, policy)))
    return EXIT_OK if report.ok else EXIT_FOUND


def _open_destination(args: argparse.Namespace) -> tuple[CheckpointStore, bool]:
    """The destination, and whether it is an empty stand-in for a SQLite file a dry run must not
    create (the copy would start from an empty store)."""
    storage = open_storage(args.destination, codec=codec_of(args))
    path = getattr(storage, "path", None)
    if args.dry_run and isinstance(path, Path) and not path.exists():
        return InMemoryCheckpointStorage(codec=codec_of(args)), True
    return storage, False


__all__ = ["copy_command", "import_maf_command"]
