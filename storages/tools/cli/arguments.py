"""The command line of ``checkpoint-storages``: every command, its arguments and their help, the
options that cannot go together, and the exit statuses each command returns.

Kept apart from storages/tools/cli/main.py, which carries the commands out: this is what ``--help`` shows,
read and changed on its own. :data:`EXIT_STATUSES` is the one table of exit statuses: each
command's ``--help`` prints its rows and docs/tooling.md shows :func:`exit_status_table`
(tests/test_cli_contract.py holds the two, and the commands' behaviour, to it).
"""

from __future__ import annotations

import argparse
from typing import Final

from ...urls import supported_schemes
from ...version import installed_version

PROG = "checkpoint-storages"

EXIT_OK: Final = 0
EXIT_FOUND: Final = 1
"""Done, and something is wrong in what was read or written."""
EXIT_ERROR: Final = 2
"""Not done: the request cannot be carried out."""
EXIT_NOTHING: Final = 3
"""Nothing there: the store, or what was named in it, holds no checkpoint."""
EXIT_INTERRUPTED: Final = 130
EXIT_CLOSED_PIPE: Final = 141

COMMANDS: Final = ("verify", "inspect", "diff", "copy", "import-maf", "backends")

_NOT_DONE = (
    "not done: a usage error (conflicting options included), a URL or option its backend refuses, "
    "a missing extra, a storage that cannot be reached or lacks a capability the command needs, "
    "an output file that cannot be written"
)
_SHARED = {
    EXIT_ERROR: _NOT_DONE,
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_CLOSED_PIPE: "the reader of the output went away (a pipe into head, say); nothing more is printed",
}
_NO_STORE = (
    "the store does not exist (a SQLite file, a PostgreSQL schema, an S3 bucket) or holds no checkpoint"
)

EXIT_STATUSES: Final[dict[str, dict[int, str]]] = {
    "verify": {
        EXIT_OK: "nothing found (a refused type only warns), or, with --repair, nothing left",
        EXIT_FOUND: "something found (a refused type too, with --strict), or, with --repair, left",
        **_SHARED,
        EXIT_NOTHING: f"{_NO_STORE}, or --workflow names none",
    },
    "inspect": {
        EXIT_OK: "shown",
        EXIT_FOUND: "the checkpoint shown cannot be loaded (or holds a refused type, with --strict), "
        "or a listing names a checkpoint whose record is gone",
        **_SHARED,
        EXIT_NOTHING: f"{_NO_STORE}, or the WORKFLOW, --thread or --checkpoint names none",
    },
    "diff": {
        EXIT_OK: "shown",
        **_SHARED,
        EXIT_NOTHING: f"{_NO_STORE}, or ID_A or ID_B names none",
    },
    "copy": {
        EXIT_OK: "copied (or, with --dry-run, would copy) and the destination verified",
        EXIT_FOUND: "a conflict, a tombstone not recreated, or a verify finding in the destination",
        **_SHARED,
        EXIT_NOTHING: "the source does not exist or holds no checkpoint, or a --workflow names none "
        "(nothing is written)",
    },
    "import-maf": {
        EXIT_OK: "imported (or, with --dry-run, would import) and the destination verified",
        EXIT_FOUND: "a file MAF refuses (when it refuses every file, nothing is written), a "
        "conflict, or a verify finding in the destination",
        **_SHARED,
        EXIT_NOTHING: "the directory holds no checkpoint file (nothing is written)",
    },
    "backends": {
        EXIT_OK: "every entry point registered",
        EXIT_FOUND: "a third-party entry point was refused",
        **_SHARED,
    },
}
"""Exit status -> what it means, for every command: the one table of them."""


def exit_status_epilog(command: str) -> str:
    """What ``COMMAND --help`` says of its exit statuses."""
    rows = sorted(EXIT_STATUSES[command].items())
    said = "; ".join(f"{status} {meaning}" for status, meaning in rows)
    return f"Exit status: {said}."


def exit_status_table() -> str:
    """The exit statuses as docs/tooling.md shows them (Markdown): one row per status, the
    commands that return it, and what it means for each."""
    lines = ["| Status | Command | Meaning |", "|---|---|---|"]
    statuses = sorted({status for meanings in EXIT_STATUSES.values() for status in meanings})
    for status in statuses:
        by_meaning: dict[str, list[str]] = {}
        for command in COMMANDS:
            meaning = EXIT_STATUSES[command].get(status)
            if meaning is not None:
                by_meaning.setdefault(meaning, []).append(command)
        for meaning, commands in by_meaning.items():
            every = len(commands) == len(COMMANDS)
            who = "every command" if every else ", ".join(f"`{command}`" for command in commands)
            lines.append(f"| {status} | {who} | {meaning} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command, with its help text (what ``--help`` shows)."""
    schemes = ", ".join(scheme + "://" for scheme in supported_schemes())
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Verify, inspect and copy checkpoint storages.",
        epilog=f"Storage URLs: {schemes} (e.g. sqlite:///checkpoints.db). Exit statuses: 0 done, 1 "
        "something wrong found, 2 not done (usage, URL, connection), 3 nothing there; "
        "COMMAND --help says what each means for it.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    verify_parser = commands.add_parser(
        "verify",
        help="report dangling links, cycles, orphans, undecodable bodies, refused types, signature changes",
        description=(
            "Scan a storage (or one workflow and the records nested in it) for dangling previous "
            "links, cycles, orphaned or missing nested records, undecodable bodies, bodies that "
            "disagree with the index, and graph signature changes along a chain. It only reads: "
            "a store that does not exist is refused, never created."
        ),
        epilog=exit_status_epilog("verify"),
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
    verify_parser.add_argument("--json", action="store_true", help="print the report as JSON")
    verify_parser.add_argument(
        "--repair",
        action="store_true",
        help="remove what a fault left that is safe to remove (an index entry whose record is "
        "gone, a stage key past its life), say what was done, then verify again; the only "
        "option that writes",
    )
    _type_options(verify_parser)
    _strict_option(verify_parser)

    inspect_parser = commands.add_parser(
        "inspect",
        help="list workflows, draw a workflow's lineage tree, or show one checkpoint",
        description=(
            "With a URL only: the workflows and their counts. With a WORKFLOW: its checkpoints as a "
            "lineage tree (forks, nested records, node, step, interrupts). With --checkpoint: one "
            "checkpoint's fields. It only reads."
        ),
        epilog=exit_status_epilog("inspect"),
    )
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
    _output_options(
        inspect_parser,
        json_help="print the data as JSON instead of drawing it",
        html_help="write the lineage as a self-contained HTML page to OUT",
    )
    _type_options(inspect_parser)
    _strict_option(inspect_parser, what="with --checkpoint: ")

    diff_parser = commands.add_parser(
        "diff",
        help="what changed between two checkpoints (state, messages, pending events, metadata)",
        description="Load two checkpoints and list every path whose value differs, old -> new. "
        "LangGraph checkpoints are compared through LangGraph's serializer when it is installed. "
        "It only reads.",
        epilog=exit_status_epilog("diff"),
    )
    diff_parser.add_argument("url", metavar="URL", help="storage URL")
    diff_parser.add_argument("old", metavar="ID_A", help="the checkpoint compared from")
    diff_parser.add_argument("new", metavar="ID_B", help="the checkpoint compared to")
    _output_options(
        diff_parser,
        json_help="print the changes as JSON (with their values)",
        html_help="write the diff as a self-contained HTML page",
    )
    _type_options(diff_parser)

    backends_parser = commands.add_parser(
        "backends",
        help="list the registered storage backends and any third-party entry point that was refused",
        description="The backends open_storage knows: built-in ones and those registered through the "
        "checkpoint_storages.backends entry-point group (docs/registry.md).",
        epilog=exit_status_epilog("backends"),
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
        epilog=exit_status_epilog("copy"),
    )
    copy_parser.add_argument("url", metavar="SRC_URL", help="the storage to copy from")
    copy_parser.add_argument("destination", metavar="DST_URL", help="the storage to copy into")
    copy_parser.add_argument(
        "--workflow", action="append", metavar="NAME", help="copy only this workflow (repeatable)"
    )
    copy_parser.add_argument("--dry-run", action="store_true", help="read both stores, write nothing")
    copy_parser.add_argument("--json", action="store_true", help="print the report as JSON")
    _type_options(copy_parser)

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
        epilog=exit_status_epilog("import-maf"),
    )
    import_parser.add_argument("directory", metavar="DIR", help="the FileCheckpointStorage directory")
    import_parser.add_argument("destination", metavar="DST_URL", help="the storage to import into")
    import_parser.add_argument("--dry-run", action="store_true", help="read the files, write nothing")
    import_parser.add_argument("--json", action="store_true", help="print the report as JSON")
    # MAF allows types one by one, by their exact key: it has no allowed_modules.
    _type_options(import_parser, url_options=False)
    return parser


def _output_options(parser: argparse.ArgumentParser, *, json_help: str, html_help: str) -> None:
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help=json_help)
    output.add_argument("--html", metavar="OUT", help=html_help)


def _type_options(parser: argparse.ArgumentParser, *, url_options: bool = True) -> None:
    parser.add_argument(
        "--allow-type",
        action="append",
        metavar="MODULE:QUALNAME",
        help="a type the application's codec allows (repeatable), so its checkpoints decode",
    )
    if url_options:
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
        "--app-dir",
        action="append",
        metavar="DIR",
        help="a directory to import the application's modules from, as uvicorn's --app-dir "
        "(repeatable; put before the installed packages): the allowed types' modules must import",
    )


def _strict_option(parser: argparse.ArgumentParser, *, what: str = "") -> None:
    parser.add_argument(
        "--strict",
        action="store_true",
        help=f"{what}fail (exit 1) on a type the codec does not allow; without it that is a warning",
    )


def option_conflict(args: argparse.Namespace) -> str | None:
    """Why the options given cannot go together (one would be ignored), or None."""
    if args.command == "verify" and args.structure_only:
        given = _given(args, "allow_type", "allowed_checkpoint_types", "allowed_modules", "strict")
        if given:
            return (
                f"--structure-only constructs no value, so {given} would have no effect; give one "
                "or the other"
            )
    if args.command == "inspect":
        if args.html is not None and args.checkpoint is not None:
            return "--html draws a workflow or a thread, not one --checkpoint; give one or the other"
        if args.strict and args.checkpoint is None:
            return "--strict applies to --checkpoint ID (a lineage decodes no value); leave it out"
    return None


def _given(args: argparse.Namespace, *names: str) -> str:
    flags = [f"--{name.replace('_', '-')}" for name in names if getattr(args, name, None)]
    return " and ".join(flags)


__all__ = [
    "COMMANDS",
    "EXIT_CLOSED_PIPE",
    "EXIT_ERROR",
    "EXIT_FOUND",
    "EXIT_INTERRUPTED",
    "EXIT_NOTHING",
    "EXIT_OK",
    "EXIT_STATUSES",
    "PROG",
    "build_parser",
    "exit_status_epilog",
    "exit_status_table",
    "option_conflict",
]
