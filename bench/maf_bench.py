"""Real MAF workflows checkpointing to each backend, next to MAF's own storages.

Two figures per storage:

* **100-superstep run**: one ``WorkflowBuilder(checkpoint_storage=...)`` workflow whose executor
  sends itself a message 100 times, so MAF saves 101 checkpoints (the entry one and one per
  superstep). Timed end to end; the same workflow without a storage gives the runner's own cost,
  and the difference divided by 101 is what one checkpoint costs inside a real run.
* **Resume from latest at 1,000 stored**: the workflow name holds 1,000 checkpoints (ten runs of
  99 supersteps); timed is what a service does to pick a run up again: ``get_latest`` and
  ``workflow.run(checkpoint_id=..., checkpoint_storage=...)`` on a new workflow instance.

Every run is checked: the number of checkpoints saved (MAF only logs a failed save), and that the
resumed executor holds the restored state. Subjects are visited in turn within each round, so
load from elsewhere on the machine falls on all of them alike.

Standalone: ``python -m bench.maf_bench [--json PATH] [--markdown PATH]`` (the markdown file's MAF
section is replaced, the rest kept); ``python -m bench.run --maf-only`` does the same.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import _gc_paused
from bench.report import TableData, fmt_ratio, fmt_us
from bench.subjects import _temp_dir

SUPERSTEPS = 100
STORED = 1_000
POPULATE_SUPERSTEPS = 99
"""Each populating run saves 100 checkpoints; ten of them make exactly STORED."""
SECTION_START = "<!-- maf-bench:start -->"
SECTION_END = "<!-- maf-bench:end -->"


# ---------------------------------------------------------------- the workflow


def _workflow(name: str, supersteps: int, storage: Any) -> tuple[Any, Any]:
    from bench.maf_workload import loop_workflow

    return loop_workflow(name, supersteps, storage)


# ---------------------------------------------------------------- subjects


@dataclass
class _Subject:
    key: str
    label: str
    storage: Any
    cleanup: Callable[[], Awaitable[None]]


async def _ours(
    key: str, label: str, url: str, cleanup: Callable[[], Awaitable[None]] | None = None
) -> _Subject:
    from storages import open_storage

    storage = open_storage(url)
    await storage.__aenter__()

    async def close() -> None:
        await storage.aclose()
        if cleanup is not None:
            await cleanup()

    return _Subject(key, label, storage, close)


async def _subjects(skipped: dict[str, str]) -> list[_Subject]:
    from agent_framework import FileCheckpointStorage
    from agent_framework import InMemoryCheckpointStorage as MafMemory

    directory = _temp_dir("maf")

    async def remove_directory() -> None:
        shutil.rmtree(directory, ignore_errors=True)

    async def nothing() -> None:
        return None

    found = [
        await _ours("ours-memory", "ours InMemoryCheckpointStorage", "memory://"),
        await _ours("ours-sqlite", "ours SQLiteCheckpointStorage", f"sqlite:///{directory}/maf.db"),
    ]
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"bench-maf-{uuid.uuid4().hex[:8]}"
    try:
        from redis.asyncio import Redis

        from storages.redis import delete_prefix

        probe = Redis.from_url(redis_url)
        await probe.ping()

        async def drop_keys() -> None:
            await delete_prefix(probe, prefix)
            await probe.aclose()

        found.append(
            await _ours(
                "ours-redis", "ours RedisCheckpointStorage", f"{redis_url}?prefix={prefix}", drop_keys
            )
        )
    except Exception as exc:  # a benchmark reports what it could not measure, and goes on
        skipped["ours-redis"] = f"{type(exc).__name__}: {exc}"
    try:
        from moto.server import ThreadedMotoServer

        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
        server.start()
        host, port = server.get_host_and_port()

        async def stop_server() -> None:
            server.stop()

        url = f"s3://bench-maf/ck?endpoint_url=http://{host}:{port}&region=us-east-1&create_bucket=true"
        found.append(
            await _ours("ours-s3", "ours S3CheckpointStorage (moto server, loopback HTTP)", url, stop_server)
        )
    except Exception as exc:
        skipped["ours-s3"] = f"{type(exc).__name__}: {exc}"
    found.append(_Subject("maf-memory", "MAF InMemoryCheckpointStorage", MafMemory(), nothing))
    found.append(
        _Subject(
            "maf-file",
            "MAF FileCheckpointStorage",
            FileCheckpointStorage(directory / "maf-file"),
            remove_directory,
        )
    )
    return found


# ---------------------------------------------------------------- measuring


async def _timed_run(name: str, supersteps: int, storage: Any) -> float:
    before = 0 if storage is None else len(await storage.list_checkpoint_ids(workflow_name=name))
    workflow, loop = _workflow(name, supersteps, storage)
    with _gc_paused():
        started = time.perf_counter()
        result = await workflow.run(0)
        elapsed = time.perf_counter() - started
    if result.get_outputs() != [supersteps] or loop.count != supersteps:
        raise AssertionError(f"{name}: the workflow did not run {supersteps} supersteps")
    if storage is not None:
        saved = len(await storage.list_checkpoint_ids(workflow_name=name)) - before
        if saved != supersteps + 1:
            raise AssertionError(f"{name}: {saved} checkpoints saved, expected {supersteps + 1}")
    return elapsed


async def _timed_resume(name: str, storage: Any) -> float:
    workflow, loop = _workflow(name, POPULATE_SUPERSTEPS, None)
    with _gc_paused():
        started = time.perf_counter()
        latest = await storage.get_latest(workflow_name=name)
        await workflow.run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage)
        elapsed = time.perf_counter() - started
    if loop.count != POPULATE_SUPERSTEPS or len(loop.notes) != 40:
        raise AssertionError(f"{name}: the resumed executor does not hold the restored state")
    return elapsed


async def run_maf(
    *, repeats: int = 5, resumes: int = 10, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Both measurements on every subject; every sample is kept."""
    # MAF warns about the loop's self-edge on every build; the benchmark's graph is deliberate.
    logging.getLogger("agent_framework._workflows._validation").setLevel(logging.ERROR)
    skipped: dict[str, str] = {}
    environment = _environment()
    subjects = await _subjects(skipped)
    runs: dict[str, list[float]] = {"none": [], **{s.key: [] for s in subjects}}
    resume: dict[str, list[float]] = {s.key: [] for s in subjects}
    populate: dict[str, float] = {}
    try:
        for round_ in range(repeats):
            log(f"100-superstep runs, round {round_ + 1} of {repeats}")
            runs["none"].append(await _timed_run(f"run-{round_}", SUPERSTEPS, None))
            for subject in subjects:
                runs[subject.key].append(await _timed_run(f"run-{round_}", SUPERSTEPS, subject.storage))
        for subject in subjects:
            log(f"populating {subject.label} with {STORED:,} checkpoints")
            started = time.perf_counter()
            for _ in range(STORED // (POPULATE_SUPERSTEPS + 1)):
                await _timed_run("resume", POPULATE_SUPERSTEPS, subject.storage)
            populate[subject.key] = time.perf_counter() - started
            stored = len(await subject.storage.list_checkpoint_ids(workflow_name="resume"))
            if stored != STORED:
                raise AssertionError(f"{subject.label}: {stored} checkpoints stored, expected {STORED}")
        for round_ in range(resumes):
            log(f"resume from latest, round {round_ + 1} of {resumes}")
            for subject in subjects:
                resume[subject.key].append(await _timed_resume("resume", subject.storage))
    finally:
        for subject in subjects:
            await subject.cleanup()
    environment["load_average_at_end"] = _load_average()
    return {
        "environment": environment,
        "supersteps": SUPERSTEPS,
        "stored": STORED,
        "labels": {s.key: s.label for s in subjects},
        "runs_seconds": runs,
        "resume_seconds": resume,
        "populate_seconds": populate,
        "skipped": skipped,
    }


def _load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def _environment() -> dict[str, Any]:
    """What the figures depend on besides the code: when, how busy, which CPUs, which versions."""
    import datetime as dt
    import importlib.metadata
    import platform

    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "python": platform.python_version(),
        "nproc": os.cpu_count(),
        "affinity": affinity,
        "agent_framework_core": importlib.metadata.version("agent-framework-core"),
        "load_average_at_start": _load_average(),
    }


# ---------------------------------------------------------------- reporting


def maf_table(results: dict[str, Any]) -> TableData:
    checkpoints = results["supersteps"] + 1
    baseline = statistics.median(results["runs_seconds"]["none"])
    resume_ours = statistics.median(results["resume_seconds"].get("ours-memory", [float("nan")]))
    table = TableData(
        title=f"4. MAF workflows: a {results['supersteps']}-superstep run, and resume from latest at "
        f"{results['stored']:,} stored",
        columns=[
            "storage",
            f"{results['supersteps']}-superstep run ms",
            "per checkpoint µs",
            f"resume @{results['stored']:,} ms",
            "resume ÷ ours memory",
        ],
        caption=(
            f"Per checkpoint: (run with the storage minus run without, {baseline * 1000:.1f} ms) ÷ "
            f"{checkpoints} checkpoints. Resume: get_latest + "
            "workflow.run(checkpoint_id=..., checkpoint_storage=...)."
        ),
    )
    table.rows.append(["no storage (MAF runner alone)", f"{baseline * 1000:.1f}", "-", "-", "-"])
    for key, label in results["labels"].items():
        run = statistics.median(results["runs_seconds"][key])
        resumed = statistics.median(results["resume_seconds"][key])
        table.rows.append(
            [
                label,
                f"{run * 1000:,.1f}",
                fmt_us((run - baseline) / checkpoints * 1e6),
                f"{resumed * 1000:.2f}",
                fmt_ratio(resumed / resume_ours),
            ]
        )
    return table


def maf_markdown(results: dict[str, Any], command: str) -> str:
    table = maf_table(results)
    resumes = len(next(iter(results["resume_seconds"].values())))
    lines = [
        SECTION_START,
        f"## {table.title}",
        "",
        "Produced by `" + command + "` (see `bench/maf_bench.py`); figures are medians of "
        f"{len(results['runs_seconds']['none'])} runs and {resumes} resumes, subjects interleaved within "
        "each round.",
        "",
        _environment_line(results.get("environment")),
        "",
        f"A real MAF workflow (agent-framework-core) whose executor messages itself {results['supersteps']} "
        f"times, so MAF saves {results['supersteps'] + 1} checkpoints per run (each checked), with about "
        "1.5 KB of executor state and one in-flight message per checkpoint. For the resume column the "
        f"workflow name holds {results['stored']:,} checkpoints (ten runs of {POPULATE_SUPERSTEPS} "
        "supersteps); a new workflow instance finds the latest and restores it. Redis is the local server "
        "at `REDIS_URL`; S3 is moto's server in the same process over loopback HTTP, so its figures measure "
        "the HTTP round trips, not AWS.",
        "",
        table.to_markdown(),
        "",
    ]
    if results["skipped"]:
        lines += [f"Not measured: {key} ({reason})." for key, reason in results["skipped"].items()] + [""]
    lines.append(SECTION_END)
    return "\n".join(lines) + "\n"


def _environment_line(environment: dict[str, Any] | None) -> str:
    if not environment:
        return ""
    affinity = environment.get("affinity")
    pinned = (
        "unpinned"
        if affinity is None or len(affinity) == environment["nproc"]
        else f"pinned to CPU {', '.join(map(str, affinity))} (moto's server thread and aiosqlite's "
        "thread included; the Redis server is another process)"
    )

    def load(value: list[float] | None) -> str:
        return "unknown" if value is None else " / ".join(f"{item:.2f}" for item in value)

    return (
        f"Run {environment['date']}, Python {environment['python']}, agent-framework-core "
        f"{environment['agent_framework_core']}, {environment['nproc']} CPUs, {pinned}. Load average "
        f"(1, 5, 15 min) at start {load(environment['load_average_at_start'])}, at end "
        f"{load(environment.get('load_average_at_end'))}: other work on the machine slows every row alike "
        "(the subjects are interleaved), so compare rows, not absolute times."
    )


def replace_section(document: str, section: str) -> str:
    """``document`` with its MAF section replaced by ``section`` (appended if it has none)."""
    start, end = document.find(SECTION_START), document.find(SECTION_END)
    if start == -1 or end == -1:
        return document.rstrip("\n") + "\n\n" + section
    return document[:start] + section + document[end + len(SECTION_END) :].lstrip("\n")


def maf_arguments(parser: argparse.ArgumentParser) -> None:
    """``bench.run``'s options for this section."""
    parser.add_argument("--no-maf", action="store_true", help="skip the MAF workflow section")
    parser.add_argument(
        "--maf-only",
        action="store_true",
        help="run only the MAF workflow section (bench/maf_bench.py); with --markdown, replace just that "
        "section of the file",
    )


async def run_maf_section(args: argparse.Namespace, results: dict[str, Any], console: Any) -> None:
    """Run the section for ``bench.run`` into ``results["maf"]`` and print its table."""
    if args.no_maf:
        results["maf_skipped"] = "--no-maf given"
        return
    results["maf"] = await run_maf(log=console.log)
    console.print(maf_table(results["maf"]).to_rich())


def maf_section(results: dict[str, Any]) -> list[str]:
    """The section's markdown lines for ``docs/benchmarks.md`` (between markers, so that
    ``--maf-only`` can replace it alone)."""
    if "maf" in results:
        return [*maf_markdown(results["maf"], results["environment"]["command"]).splitlines(), ""]
    if "maf_skipped" in results:
        return [
            SECTION_START,
            "## MAF workflows",
            "",
            f"Not measured: {results['maf_skipped']}.",
            SECTION_END,
            "",
        ]
    return []


def maf_only(json_path: Path | None, markdown_path: Path | None, command: str) -> int:
    """Run this section alone; write its samples as JSON and replace its part of the markdown."""
    from rich.console import Console

    console = Console() if sys.stdout.isatty() else Console(width=150)
    results = asyncio.run(run_maf(log=console.log))
    console.print(maf_table(results).to_rich())
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2) + "\n")
    if markdown_path is not None:
        existing = markdown_path.read_text() if markdown_path.exists() else "# Benchmarks\n"
        markdown_path.write_text(replace_section(existing, maf_markdown(results, command)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.maf_bench", description="MAF workflows per backend."
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every sample as JSON")
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="replace the MAF section of this file")
    arguments = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(arguments)
    return maf_only(args.json, args.markdown, " ".join(["python -m bench.maf_bench", *arguments]))


if __name__ == "__main__":
    raise SystemExit(main())
