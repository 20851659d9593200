"""Instructions per save, load, get_latest and list, this checkout against another, in one run.

``python -m bench.before_after --base PATH [--calls N] [--server-calls N] [--redis-url URL]
[--postgres-url URL] [--markdown FILE]``.
``PATH`` is another checkout (``git worktree add --detach /tmp/base <commit>``); each count is
valgrind's callgrind over the same programs with that checkout's ``storages/`` first on the path,
then this one's, so a change's cost is read off one table that machine load cannot blur:

* memory: ``bench.callgrind_codec``'s storage rows (the benchmark checkpoint, 10 stored);
* SQLite: ``bench.sqlite_callgrind`` (a file store in a temporary directory);
* Redis: ``bench.redis_callgrind`` (this process's side; the server is another process);
* PostgreSQL and S3: ``bench.server_callgrind`` (this process's side, every thread included;
  the PostgreSQL server at ``--postgres-url``, moto's HTTP server in a process of its own),
  ``--server-calls`` calls each, since a boto3 request costs callgrind tens of milliseconds.

``--markdown FILE`` replaces the section between this module's markers in ``FILE``
(docs/benchmarks.md keeps it when ``bench.run`` regenerates the rest).
"""

from __future__ import annotations

import argparse
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import callgrind_codec, redis_callgrind, server_callgrind, sqlite_callgrind
from .postgres_bench import DEFAULT_URL as POSTGRES_URL
from .sections import BEFORE_AFTER_END, BEFORE_AFTER_HEADING, BEFORE_AFTER_START, replace_section

OPERATIONS = ("save", "load", "latest", "list")
REDIS_OPERATIONS = {"save": "save", "load": "load", "latest": "latest", "list": "list"}
SQLITE_OPERATIONS = {"save": "ours/save", "load": "ours/load", "latest": "ours/latest"}

SERVER_BACKENDS = {"postgres": "PostgreSQL", "s3": "S3"}

Counts = dict[str, dict[str, float]]
"""Backend -> operation -> instructions per call."""


@dataclass(frozen=True)
class Settings:
    calls: int
    server_calls: int
    redis_url: str
    postgres_url: str


def measure(tree: str, settings: Settings, progress: Callable[[str], None]) -> Counts:
    """Instructions per call of every operation, with ``tree``'s storages ("" for this checkout)."""
    label = tree or "this checkout"
    progress(f"memory ({label})")
    calls = settings.calls
    memory = callgrind_codec.measure(
        calls, names=[f"memory-ours/{operation}" for operation in OPERATIONS], tree=tree
    )
    progress(f"SQLite ({label})")
    sqlite = sqlite_callgrind.measure(calls, tree)
    counts: Counts = {
        "memory": {operation: memory[f"memory-ours/{operation}"] for operation in OPERATIONS},
        "SQLite": {operation: sqlite[name] for operation, name in SQLITE_OPERATIONS.items()},
        "Redis": {},
    }
    for operation, op in REDIS_OPERATIONS.items():
        progress(f"Redis {operation} ({label})")
        counts["Redis"][operation] = redis_callgrind.per_operation(
            settings.redis_url, op, calls // 2, tree=tree
        )
    for backend, name in SERVER_BACKENDS.items():
        progress(f"{name} ({label})")
        counts[name] = server_callgrind.measure(
            settings.server_calls, tree=tree, url=settings.postgres_url, only=backend
        )[backend]
    return counts


def table(base: Counts, head: Counts, base_name: str) -> str:
    lines = [
        f"| backend | operation | {base_name} | this checkout | change |",
        "|---|---|---:|---:|---:|",
    ]
    for backend, operations in head.items():
        for operation, after in operations.items():
            before = base[backend][operation]
            lines.append(
                f"| {backend} | {operation} | {before:,.0f} | {after:,.0f} | {after / before - 1:+.1%} |"
            )
    return "\n".join(lines) + "\n"


def _revision(tree: str) -> str:
    done = subprocess.run(
        ["git", "-C", tree or str(callgrind_codec.REPO_ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or os.path.basename(tree)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.before_after", description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="another checkout to compare with (its storages/)")
    parser.add_argument("--calls", type=int, default=200, help="calls per subject (default 200)")
    parser.add_argument(
        "--server-calls", type=int, default=20, help="calls per PostgreSQL and S3 subject (default 20)"
    )
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", redis_callgrind.DEFAULT_URL))
    parser.add_argument("--postgres-url", default=POSTGRES_URL, help="a scratch schema per program")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="write the table's section into FILE")
    args = parser.parse_args(argv)
    base_tree = str(Path(args.base).resolve())

    def progress(step: str) -> None:
        print(f"measuring {step}...", flush=True)

    settings = Settings(args.calls, args.server_calls, args.redis_url, args.postgres_url)
    base = measure(base_tree, settings, progress)
    head = measure("", settings, progress)
    base_name, head_name = _revision(base_tree), _revision("")
    rendered = table(base, head, f"before ({base_name})")
    print(rendered)
    if args.markdown is not None:
        section = (
            f"Produced by `python -m bench.before_after --base <checkout of {base_name}> --calls "
            f"{args.calls} --server-calls {args.server_calls} --markdown {args.markdown}` on {head_name}: "
            "instructions per call "
            "(callgrind, the client's side), the same programs with each checkout's storages.\n\n" + rendered
        )
        document = args.markdown.read_text(encoding="utf-8") if args.markdown.exists() else ""
        args.markdown.write_text(
            replace_section(document, section, BEFORE_AFTER_START, BEFORE_AFTER_END, BEFORE_AFTER_HEADING),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
