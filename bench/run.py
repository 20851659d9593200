"""Run the benchmark suite: ``python -m bench.run [--quick] [--json PATH] [--markdown PATH]``.

Performance is reported as ratios measured in one run: against the raw backend (the floor) and
against MAF's own storages. Nothing here asserts wall-clock limits; the numbers go to the console
(rich tables), to JSON (every sample) and to markdown (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python bench/run.py``: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.ancestry_bench import ancestry_table, run_ancestry
from bench.codec_bench import run_codec
from bench.maf_bench import maf_arguments, maf_only, maf_section, run_maf_section
from bench.measure import TIMES, Budget
from bench.postgres_bench import postgres_arguments, postgres_section, run_postgres_section
from bench.redis_bench import redis_arguments, redis_section, run_redis_section
from bench.report import all_tables, conclusions, targets_table
from bench.sections import kept_section, with_kept_sections
from bench.storage_bench import Sizes, run_storages
from bench.subjects import sqlite_settings, sqlite_unavailable_reason, subjects
from bench.tails_bench import FULL as TAILS_FULL
from bench.tails_bench import QUICK as TAILS_QUICK
from bench.tails_bench import TAILS_END, TAILS_START, replace_section, run_tails, tails_section
from bench.tails_bench import markdown_table as tails_table
from bench.targets_bench import run_targets

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "msgspec",
    "ormsgpack",
    "aiosqlite",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "agent-framework-core",
    "rich",
    "checkpoint-storages",
)

FULL = (Sizes(small=10, large=10_000), Budget(repeats=15, batch_seconds=0.03))
QUICK = (Sizes(small=10, large=1_000), Budget(repeats=7, batch_seconds=0.02))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Benchmark our codec and storages against raw backends and MAF's own storages.",
    )
    parser.add_argument("--quick", action="store_true", help="1,000 instead of 10,000 stored; fewer repeats")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every number (all samples) as JSON")
    parser.add_argument(
        "--markdown", type=Path, metavar="PATH", help="write the report (e.g. docs/benchmarks.md)"
    )
    parser.add_argument("--no-sqlite", action="store_true", help="skip our SQLite storage and its raw floor")
    parser.add_argument(
        "--no-targets", action="store_true", help="skip the issue 15 targets section (bench/targets_bench.py)"
    )
    parser.add_argument(
        "--no-tails", action="store_true", help="skip the issue 29 tails section (bench/tails_bench.py)"
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="add codec instruction counts (valgrind; several minutes) to the targets table",
    )
    parser.add_argument(
        "--s3",
        action="store_true",
        help="run only the S3 section (bench/s3_bench.py, moto server); --quick, --json, --markdown apply",
    )
    maf_arguments(parser)
    redis_arguments(parser)
    postgres_arguments(parser)
    parser.add_argument(
        "--affinity",
        metavar="CPUS",
        type=_cpu_list,
        help="pin the run (and every thread it starts) to these CPUs, e.g. 1 or 0,1; see docs/benchmarks.md",
    )
    return parser.parse_args(argv)


def _cpu_list(text: str) -> set[int]:
    try:
        cpus = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CPU numbers like 1 or 0,1, got {text!r}") from None
    if not cpus:
        raise argparse.ArgumentTypeError("give at least one CPU")
    return cpus


def invocation(argv: list[str]) -> str:
    launcher = "python -m bench.run" if __package__ else "python bench/run.py"
    return " ".join([launcher, *(shlex.quote(arg) for arg in argv)])


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_revision() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head} with uncommitted changes" if dirty else head


def environment(argv: list[str], quick: bool) -> dict[str, Any]:
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "command": invocation(argv),
        "date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "nproc": os.cpu_count(),
        "affinity": affinity,
        "packages": {package: _version(package) for package in PACKAGES},
        "revision": _git_revision(),
        "mode": "quick" if quick else "full",
        "load_average_at_start": _load_average(),
    }


def _load_average() -> list[float] | None:
    """Other work on the machine skews figures; the load average says how busy it was."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


async def run_all(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    sizes, budget = QUICK if args.quick else FULL
    results: dict[str, Any] = {"environment": environment(sys.argv[1:], args.quick)}
    results["budget"] = {"repeats": budget.repeats, "batch_seconds": budget.batch_seconds}
    with console.status("Section 1: codec"):
        results["codec"] = run_codec(budget)
    console.print(all_tables(results)[0].to_rich())
    missing_peers = [name for name in ("langgraph", "aiosqlite") if importlib.util.find_spec(name) is None]
    if missing_peers and not args.no_targets:
        console.print(
            f"[yellow]Skipping the issue 15 targets: {', '.join(missing_peers)} missing "
            "(pip install -e '.[bench]')[/]"
        )
    elif not args.no_targets:
        with console.status("Issue 15 targets: codec, memory, SQLite, S3 against their peers"):
            results["targets"] = await run_targets(
                budget, saves_each=5 if args.quick else 20, rounds=3 if args.quick else 7
            )
            if args.callgrind:
                from bench.callgrind_codec import measure, ratios

                counts = await asyncio.to_thread(measure, 50 if args.quick else 200)
                results["targets"]["callgrind"] = {"instructions": counts, "ratios": ratios(counts)}
        console.print(targets_table(results["targets"]).to_rich())

    if not args.no_tails and not missing_peers and importlib.util.find_spec("agent_framework") is not None:
        with console.status("Issue 29 tails: big payloads, long histories, large stores, reads then writes"):
            results["tails"] = await run_tails(
                TAILS_QUICK if args.quick else TAILS_FULL,
                budget,
                redis_url=None if args.no_redis else args.redis_url,
                s3=True,
            )
        console.print(tails_table(results["tails"]))

    skipped = {"ours-sqlite": "--no-sqlite given"} if args.no_sqlite else {}
    if not args.no_sqlite and (reason := sqlite_unavailable_reason()) is not None:
        skipped = {"ours-sqlite": reason}
        console.print(f"[yellow]Skipping our SQLite storage and its raw floor: {reason}[/]")
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        results["storages"] = await run_storages(
            subjects(include_sqlite=not skipped), sizes, budget, progress
        )
    results["storages"]["skipped"] = skipped
    if not skipped:
        results["storages"]["sqlite_settings"] = await sqlite_settings()
    for table in all_tables(results)[1:]:
        console.print(table.to_rich())
    with progress:
        results["ancestry"] = await run_ancestry(budget, progress)
    console.print(ancestry_table(results["ancestry"]).to_rich())
    await run_maf_section(args, results, console)
    await run_redis_section(args, budget, results, console)
    await run_postgres_section(args, budget, results, console)
    return results


def markdown(results: dict[str, Any], json_path: Path | None = None) -> str:
    env = results["environment"]
    storages = results["storages"]
    small, large = storages["sizes"]["small"], storages["sizes"]["large"]
    packages = ", ".join(f"{name} {version}" for name, version in env["packages"].items())
    lines = [
        "# Benchmarks",
        "",
        "Produced by this exact command, from the repository root:",
        "",
        "```sh",
        env["command"],
        "```",
        "",
        f"- Date: {env['date']} ({env['mode']} run, {results['seconds']:.0f} s)",
        f"- Python: {env['python']}",
        f"- Machine: {env['nproc']} CPUs ({env['cpu']}), {env['platform']}; {_fmt_affinity(env)}",
        f"- Packages: {packages}",
        f"- Revision: {env['revision']}",
        f"- Load average (1, 5, 15 min) at start {_fmt_load(env['load_average_at_start'])}, at end "
        f"{_fmt_load(env['load_average_at_end'])}: other work on the machine during the run shows here.",
        "",
        "## What is measured",
        "",
        "One checkpoint shape throughout: a state of 40 small executor dicts plus a plan, three "
        "messages, metadata, two datetimes and two tuples (`bench/workload.py`). Encoded by MAF's "
        f"encoder as compact JSON it is {results['codec']['rows']['maf-json']['body_bytes']:,} bytes.",
        "",
        "- **Codec**: our `CheckpointCodec.encode_checkpoint` / `decode_checkpoint` against MAF's "
        "`encode_checkpoint_value` + `json.dumps` and `json.loads` + `decode_checkpoint_value(allowed_types="
        "frozenset())` + `WorkflowCheckpoint.from_dict`. A second MAF row does what `FileCheckpointStorage` "
        "does per checkpoint: indented JSON, and a validating decode on save.",
        f"- **Storages**: `save`, `load` and `get_latest` with {small:,} and {large:,} checkpoints stored in "
        "one workflow. Ours get our `WorkflowCheckpoint`, MAF's get MAF's, with equal content and a unique "
        "id each. The raw floors store the exact bytes our codec produces: a dict put/get for memory; for "
        "SQLite, one autocommit aiosqlite statement per operation (`INSERT`, `SELECT` by primary key, "
        "`SELECT ... ORDER BY rowid DESC LIMIT 1`) on a WAL file with the same pragmas as our storage. "
        f"`save @{small:,}` is timed on fresh stores; `save @{large:,}` over the saves made while the "
        f"store held its last 10 % (populated in batches of {storages['sizes']['populate_chunk']:,}).",
        *_durability_lines(storages.get("sqlite_settings")),
        _affinity_line(env),
        "- Every figure is the median of several samples; each sample times a batch of calls "
        "(garbage collector paused, as `timeit` does). Samples are interleaved: each round times every "
        "codec, or every storage, once, so load from elsewhere on the machine falls on all of them "
        "alike. Stores are checked after populating (latest id, a load), so no figure comes from a "
        "store that silently did nothing. All samples are in the JSON output"
        + (f" (`{json_path}`)." if json_path else "."),
        "",
        "## How to read",
        "",
        "Absolute microseconds depend on the machine; compare rows of one run. Ratios are the point: "
        '"ours ÷ raw" is our cost in multiples of the bare backend operation '
        f"(1{TIMES} would be no overhead at "
        "all; ours also encodes on save and decodes on every read, the raw floor only moves bytes), and "
        '"MAF ÷ ours" is how many times faster ours is than MAF\'s storage for the same job (below 1 means '
        f"slower). Flatness is get_latest at {large:,} stored divided by get_latest at {small:,}.",
        "",
    ]
    if storages["skipped"]:
        lines += [f"Not measured: {key} ({reason})." for key, reason in storages["skipped"].items()] + [""]
    if "targets" in results:
        table = targets_table(results["targets"])
        lines += [
            f"## {table.title}",
            "",
            "Peers in the same run (`pip install -e '.[bench]'`): plain msgspec and LangGraph's "
            "JsonPlusSerializer for the codec, InMemorySaver for memory, AsyncSqliteSaver and a raw "
            "single INSERT of our exact body for SQLite, moto's HTTP server (requests counted) for S3 "
            "(`bench/targets_bench.py` says exactly what each side does).",
            "",
            table.to_markdown(),
            "",
        ]
    if "tails" in results:
        lines += tails_section(results["tails"])
    for table in all_tables(results):
        lines += [f"## {table.title}", "", table.to_markdown(), ""]
    if "ancestry" in results:
        lines += [
            f"## {ancestry_table(results['ancestry']).title}",
            "",
            f"A chain of {results['ancestry']['depth']:,} checkpoints of the benchmark shape, chained by "
            "previous id. `walk_ancestry_ids` returns the ids only (no body decoded); `walk_ancestry` "
            "decodes every checkpoint; the last column walks the same chain the way a caller without a "
            "walk must: `load`, read `previous_checkpoint_id`, repeat, keeping what it loaded as the "
            "walk does. MAF's storages have no walk.",
            "",
            ancestry_table(results["ancestry"]).to_markdown(),
            "",
        ]
    lines += redis_section(results)
    lines += postgres_section(results)
    lines += maf_section(results)
    lines += ["## Conclusions from this run", ""]
    lines += [f"- {statement}" for statement in conclusions(results)]
    return "\n".join(lines) + "\n"


def _fmt_affinity(env: dict[str, Any]) -> str:
    affinity = env.get("affinity")
    if affinity is None or len(affinity) == env["nproc"]:
        return "the run could use every CPU"
    return f"the run was pinned to CPU {', '.join(str(cpu) for cpu in affinity)} (`--affinity`)"


def _fmt_load(load: list[float] | None) -> str:
    return "unknown" if load is None else " / ".join(f"{value:.2f}" for value in load)


def _affinity_line(env: dict[str, Any]) -> str:
    hand_offs = (
        "every aiosqlite call and every `asyncio.to_thread` call hands work to another thread and back. "
        f"Unpinned on this {env['nproc']}-CPU virtual machine, the cost of that hand-off changed from batch "
        "to batch with where the scheduler put the threads (in unpinned runs during development, the same "
        "raw aiosqlite read took either about 24 µs or about 65 µs), which made medians of aiosqlite "
        "operations swing by 2 to 3 times between runs. "
    )
    affinity = env.get("affinity")
    if affinity is None or len(affinity) == env["nproc"]:
        return f"- Threads: {hand_offs}This run was not pinned (see `--affinity`), so expect that spread."
    return (
        f"- Pinning: {hand_offs}Pinned to one CPU, the hand-off is a plain context switch and the figures "
        "repeat from run to run. Our SQLite save is one aiosqlite call (its whole transaction runs on "
        "the connection's thread), as is the raw floor's; MAF's FileCheckpointStorage makes one "
        "`to_thread` call per operation."
    )


_SYNCHRONOUS = {"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}


def _durability_lines(settings: dict[str, str] | None) -> list[str]:
    """What each durable subject waits for on save: the figures depend on it."""
    if not settings:
        return []
    synchronous = settings.get("synchronous", "?")
    waits = (
        "so every commit waits for the WAL file to reach the disk (fsync)"
        if synchronous in ("2", "3")
        else "so commits do not wait for the disk"
    )
    return [
        "- Durability: our SQLite storage's connection runs with "
        f"journal_mode={settings.get('journal_mode')}, "
        f"synchronous={synchronous} ({_SYNCHRONOUS.get(synchronous, 'unknown')}), "
        f"busy_timeout={settings.get('busy_timeout')} ms, {waits}; the raw aiosqlite floor copies these "
        "settings from it. MAF's FileCheckpointStorage writes a temporary file and renames it over the "
        "target, and calls no fsync."
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.s3:
        from bench.s3_bench import main as s3_main

        options = ["--quick"] if args.quick else []
        options += ["--markdown", str(args.markdown)] if args.markdown else []
        return s3_main(options + (["--json", str(args.json)] if args.json else []))
    if args.affinity is not None:
        # Before anything starts a thread: aiosqlite and to_thread workers inherit it.
        os.sched_setaffinity(0, args.affinity)
    if args.maf_only:
        return maf_only(args.json, args.markdown, invocation(sys.argv[1:] if argv is None else argv))
    # Piped output (CI logs, tee) gets a width that fits the tables instead of rich's 80 columns.
    console = Console() if sys.stdout.isatty() else Console(width=150)
    started = time.perf_counter()
    results = asyncio.run(run_all(args, console))
    results["seconds"] = time.perf_counter() - started
    results["environment"]["load_average_at_end"] = _load_average()
    console.rule("Conclusions")
    for statement in conclusions(results):
        console.print(f"• {statement}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        console.print(f"JSON written to {args.json}")
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        previous = args.markdown.read_text(encoding="utf-8") if args.markdown.exists() else ""
        document = with_kept_sections(previous, markdown(results, args.json))
        if "tails" not in results and (tails := kept_section(previous, TAILS_START, TAILS_END)):
            document = replace_section(document, tails)  # --no-tails keeps the last one
        args.markdown.write_text(document, encoding="utf-8")
        console.print(f"Markdown written to {args.markdown}")
    console.print(f"Total {results['seconds']:.0f} s")
    leftover = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if leftover:
        # Every store was closed; a live non-daemon thread is a leaked connection, and it would
        # keep the interpreter from exiting. Fail loudly instead of hanging.
        console.print(f"[red]Threads still running after every store was closed: {', '.join(leftover)}[/]")
        sys.stdout.flush()
        os._exit(1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
