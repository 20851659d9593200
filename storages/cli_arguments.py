"""The command line of ``checkpoint-storages``: every command, its arguments and their help.

Kept apart from storages/cli.py, which carries the commands out: this is what ``--help`` shows,
read and changed on its own.
"""

from __future__ import annotations

import argparse

from .urls import supported_schemes
from .version import installed_version

PROG = "checkpoint-storages"


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command, with its help text (what ``--help`` shows)."""
    schemes = ", ".join(scheme + "://" for scheme in supported_schemes())
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Verify, inspect and copy checkpoint storages.",
        epilog=f"Storage URLs: {schemes} (e.g. sqlite:///checkpoints.db).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    verify_parser = commands.add_parser(
        "verify",
        help="report dangling links, cycles, orphans, undecodable bodies, refused types, signature changes",
        description=(
            "Scan a storage (or one workflow and the records nested in it) for dangling previous "
            "links, cycles, orphaned or missing nested records, undecodable bodies, bodies that "
            "disagree with the index, and graph signature changes along a chain."
        ),
        epilog="Exit status: 0 nothing found, 1 something found, 2 usage or connection error.",
    )
    verify_parser.add_argument("url", metavar="URL", help="storage URL")
    verify_parser.add_argument("--workflow", metavar="NAME", help="scan only this workflow")
    verify_parser.add_argument(
        "--anchor",
        action="append",
        metavar="WORKFLOW=TOKEN",
        help="report WORKFLOW if the store went back before this head_anchor() token (repeatable; "
        "the URL needs integrity_key_env=NAME)",
    )
    verify_parser.add_argument(
        "--structure-only",
        action="store_true",
        help="check framing, checksums, links, nesting and signatures without constructing any "
        "value, so the application's types are not needed",
    )
    _common_options(verify_parser, json_help="print the report as JSON")

    inspect_parser = commands.add_parser(
        "inspect",
        help="list workflows, draw a workflow's lineage tree, or show one checkpoint",
        description=(
            "With a URL only: the workflows and their counts. With a WORKFLOW: its checkpoints as a "
            "lineage tree (forks, nested records, signatures abbreviated). With --checkpoint: one "
            "checkpoint's fields."
        ),
        epilog="Exit status: 0 shown, 1 the checkpoint cannot be loaded, 2 usage or connection error.",
    )
    backends_parser = commands.add_parser(
        "backends",
        help="list the registered storage backends and any third-party entry point that was refused",
        description="The backends open_storage knows: built-in ones and those registered through the "
        "checkpoint_storages.backends entry-point group (docs/registry.md).",
        epilog="Exit status: 0 every entry point registered, 1 one was refused.",
    )
    backends_parser.add_argument("--json", action="store_true", help="print the list as JSON")

    copy_parser = commands.add_parser(
        "copy",
        help="copy every checkpoint (nested records, tombstones, pending writes) to another storage",
        description=(
            "Copy checkpoints from SRC_URL to DST_URL with their ids, commit order, previous links, "
            "nested records, signatures, prune tombstones and pending writes; the destination seals "
            "them if it has an integrity key. Rerunning after an interruption completes the copy "
            "without duplicates. The destination is verified at the end."
        ),
        epilog="Exit status: 0 copied, 1 a conflict, a tombstone not recreated or a verify finding, "
        "2 usage or connection error.",
    )
    copy_parser.add_argument("url", metavar="SRC_URL", help="the storage to copy from")
    copy_parser.add_argument("destination", metavar="DST_URL", help="the storage to copy into")
    copy_parser.add_argument(
        "--workflow", action="append", metavar="NAME", help="copy only this workflow (repeatable)"
    )
    copy_parser.add_argument("--dry-run", action="store_true", help="read both stores, write nothing")
    _common_options(copy_parser, json_help="print the report as JSON")

    import_parser = commands.add_parser(
        "import-maf",
        help="import a MAF FileCheckpointStorage directory into a storage",
        description=(
            "Save every <checkpoint_id>.json file of a MAF FileCheckpointStorage directory into "
            "DST_URL with its id, fields, previous link and embedded sub-workflow checkpoints. MAF "
            "decodes each file under its own allow-list (--allow-type adds to it, as its "
            "allowed_checkpoint_types does); a file it refuses is reported and not imported. The "
            "commit order is inferred: timestamps, each checkpoint after its previous one."
        ),
        epilog="Exit status: 0 imported, 1 a refused file, a conflict or a verify finding, "
        "2 usage or connection error.",
    )
    import_parser.add_argument("directory", metavar="DIR", help="the FileCheckpointStorage directory")
    import_parser.add_argument("destination", metavar="DST_URL", help="the storage to import into")
    import_parser.add_argument("--dry-run", action="store_true", help="read the files, write nothing")
    _common_options(import_parser, json_help="print the report as JSON")

    inspect_parser.add_argument("url", metavar="URL", help="storage URL")
    inspect_parser.add_argument("workflow", nargs="?", metavar="WORKFLOW", help="draw this workflow's tree")
    inspect_parser.add_argument(
        "--checkpoint", metavar="ID", help="show this checkpoint's fields (a stored id, or LangGraph's own)"
    )
    inspect_parser.add_argument(
        "--thread",
        metavar="THREAD",
        help="draw a LangGraph thread: every namespace, subgraphs under their parent",
    )
    inspect_parser.add_argument(
        "--html", metavar="OUT", help="write the lineage as a self-contained HTML page to OUT"
    )
    _common_options(inspect_parser, json_help="print the data as JSON instead of drawing it")

    diff_parser = commands.add_parser(
        "diff",
        help="what changed between two checkpoints (state, messages, pending events, metadata)",
        description="Load two checkpoints and list every path whose value differs, old -> new. "
        "LangGraph checkpoints are compared through LangGraph's serializer when it is installed.",
        epilog="Exit status: 0 shown, 2 usage or connection error (an unknown id included).",
    )
    diff_parser.add_argument("url", metavar="URL", help="storage URL")
    diff_parser.add_argument("old", metavar="ID_A", help="the checkpoint compared from")
    diff_parser.add_argument("new", metavar="ID_B", help="the checkpoint compared to")
    diff_parser.add_argument("--html", metavar="OUT", help="write the diff as a self-contained HTML page")
    _common_options(diff_parser, json_help="print the changes as JSON")
    return parser


def _common_options(parser: argparse.ArgumentParser, *, json_help: str) -> None:
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument(
        "--allow-type",
        action="append",
        metavar="MODULE:QUALNAME",
        help="a type the application's codec allows (repeatable), so its checkpoints decode",
    )
    parser.add_argument(
        "--allowed-checkpoint-types",
        action="append",
        metavar="MOD:CLS,...",
        help="the allowed_checkpoint_types of the application's storage URL (comma-separated)",
    )
    parser.add_argument(
        "--allowed-modules",
        action="append",
        metavar="MODULE,...",
        help="the allowed_modules of the application's storage URL (comma-separated)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail (exit 1) on a type the codec does not allow; without it that is a warning",
    )


__all__ = ["PROG", "build_parser"]
