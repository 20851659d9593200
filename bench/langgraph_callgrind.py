"""Instructions per LangGraph saver call under callgrind: load-independent per-operation figures.

``python -m bench.langgraph_callgrind [--backends memory,sqlite] [--reps N] [--supersteps N]``
starts, for each backend and for each side (StorageSaver, the native saver), one Python under
``valgrind --tool=callgrind`` that records the saver calls one run of the bench's graph makes
(bench/langgraph_workload.py), warms the saver up, then runs one phase per operation: ``reps``
fresh threads each getting the run's calls of that operation (aput, aput_writes, aget_tuple),
or, on ``reps`` threads stored beforehand, their latest checkpoint and their root history.

Only the phases are counted: each runs inside ``functools.reduce`` over two items (so the
function runs once; nothing else in the process calls reduce once the phases start), and
callgrind collects only inside it (``--toggle-collect``) and writes one
profile per phase (``--dump-after``). Instruction counts do not depend on the machine's load,
so the ratios can be compared between runs; they count CPU work only (SQLite's fsync is a
system call and does not show). They count the event loop's thread only: callgrind's toggle is
per thread, so on SQLite the statements that run on aiosqlite's worker thread are counted on
neither side (both savers run their SQL there; the wall-clock bench and its round-trip column
cover that part).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PHASES = ("aput", "aput_writes", "aget_tuple", "aget_tuple_latest", "alist")
STORAGE_PHASES = ("storage.save", "storage.put_writes")
"""StorageSaver's side only: the storage calls its aput and aput_writes make, made directly with
the very arguments StorageSaver built (captured beforehand), so what StorageSaver adds over the
storage call is the difference between ``aput`` and ``storage.save`` (and between the writes). On
an engine storage, the writes' call is put_writes's field-wise twin ``put_task_writes``."""
SIDES = ("ours", "native")
_TOTALS = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)


def _inner(backend: str, side: str, reps: int, supersteps: int, directory: Path) -> dict[str, int]:
    """Run the phases (under valgrind); returns the calls each phase made."""
    from bench.langgraph_bench import PAIRS
    from bench.langgraph_workload import _on_thread, record_calls, replay

    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    calls = run(record_calls(supersteps))
    opened = PAIRS[backend][0 if side == "ours" else 1](directory)
    saver = run(opened.__aenter__())
    counts: dict[str, int] = {}

    async def put_all(thread_id: str, operations: tuple[str, ...]) -> None:
        for call in calls:
            if call.operation in operations:
                await getattr(saver, call.operation)(_on_thread(call.config, thread_id), *call.arguments)

    async def read(operation: str, thread_id: str) -> None:
        root = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        found = (
            [item async for item in saver.alist(root)]
            if operation == "alist"
            else await saver.aget_tuple(root)
        )
        if not found:
            raise RuntimeError(f"{operation} found nothing on a stored thread")

    async def captured(thread_id: str) -> tuple[list[Any], list[tuple[Any, ...]]]:
        """The storage calls StorageSaver makes for one thread's puts, recorded, not made."""
        saves: list[Any] = []
        batches: list[tuple[Any, ...]] = []
        storage = saver.storage

        async def save(checkpoint: Any) -> str:
            saves.append(checkpoint)
            return str(checkpoint.checkpoint_id)

        async def put_writes(checkpoint_id: str, writes: Any, *, workflow_name: str) -> None:
            batches.append((checkpoint_id, writes, workflow_name))

        async def put_task_writes(*arguments: Any) -> None:
            batches.append(arguments)

        # StorageSaver hands an engine storage's put_writes the task's writes as fields.
        storage.save, storage.put_writes, storage.put_task_writes = save, put_writes, put_task_writes
        try:
            await put_all(thread_id, ("aput", "aput_writes"))
        finally:
            del storage.save, storage.put_writes, storage.put_task_writes
        return saves, batches

    try:
        for _ in range(2):  # warm up: schema, connection, every code path once
            run(replay(saver, calls))
        stored = [f"stored-{uuid.uuid4().hex}" for _ in range(reps)]
        for thread_id in stored:
            run(put_all(thread_id, ("aput", "aput_writes")))
        phases = list(PHASES)
        direct: list[tuple[list[Any], list[tuple[Any, ...]]]] = []
        if side == "ours":
            phases += STORAGE_PHASES
            direct = [run(captured(f"direct-{uuid.uuid4().hex}")) for _ in range(reps)]

        async def phase(operation: str) -> None:
            if operation in STORAGE_PHASES:
                for saves, batches in direct:
                    if operation == "storage.save":
                        for checkpoint in saves:
                            await saver.storage.save(checkpoint)
                    else:
                        for batch in batches:
                            if len(batch) == 3:
                                checkpoint_id, writes, workflow_name = batch
                                await saver.storage.put_writes(
                                    checkpoint_id, writes, workflow_name=workflow_name
                                )
                            else:
                                await saver.storage.put_task_writes(*batch)
            elif operation in ("aget_tuple_latest", "alist"):
                for thread_id in stored:
                    await read(operation, thread_id)
            else:
                for _ in range(reps):
                    await put_all(f"phase-{uuid.uuid4().hex}", (operation,))

        for operation in phases:
            if operation in STORAGE_PHASES:
                counts[operation] = sum(len(item[0 if operation == "storage.save" else 1]) for item in direct)
            elif operation in ("aget_tuple_latest", "alist"):
                counts[operation] = reps
            else:
                counts[operation] = sum(c.operation == operation for c in calls) * reps
            _counted(run, phase(operation))
    finally:
        run(opened.__aexit__(None, None, None))
        loop.close()
    return counts


def _counted(run: Callable[[Coroutine[Any, Any, None]], None], phase: Coroutine[Any, Any, None]) -> None:
    """Run ``phase`` to completion inside the one C function callgrind collects in (module doc)."""
    functools.reduce(lambda _, __: run(phase), (None, None))


def _run_inner(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="langgraph-callgrind-") as directory:
        counts = _inner(args.backend, args.side, args.reps, args.supersteps, Path(directory))
    print("COUNTS " + " ".join(f"{name}={count}" for name, count in counts.items()))
    return 0


def measure(backend: str, side: str, reps: int, supersteps: int, workdir: Path) -> dict[str, float]:
    """Instructions per call of each phase, for one saver, from one valgrind run."""
    prefix = workdir / f"callgrind.{backend}.{side}"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        "--toggle-collect=functools_reduce",
        "--dump-after=functools_reduce",
        f"--callgrind-out-file={prefix}.out",
        sys.executable,
        "-m",
        "bench.langgraph_callgrind",
        "--inner",
        "--backend",
        backend,
        "--side",
        side,
        "--reps",
        str(reps),
        "--supersteps",
        str(supersteps),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    counts_line = next((line for line in done.stdout.splitlines() if line.startswith("COUNTS ")), None)
    if done.returncode != 0 or counts_line is None:
        raise RuntimeError(
            f"callgrind run for {backend}/{side} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
        )
    counts = dict(item.split("=") for item in counts_line.split()[1:])
    phases = [*PHASES, *STORAGE_PHASES] if side == "ours" else list(PHASES)
    dumps = sorted(workdir.glob(f"{prefix.name}.out.*"), key=lambda path: int(path.suffix[1:]))
    if len(dumps) != len(phases):
        raise RuntimeError(f"expected {len(phases)} callgrind dumps for {backend}/{side}, found {len(dumps)}")
    result: dict[str, float] = {}
    for operation, dump in zip(phases, dumps, strict=True):
        totals = _TOTALS.search(dump.read_text(encoding="utf-8", errors="replace"))
        if totals is None:
            raise RuntimeError(f"no totals line in {dump}")
        result[operation] = int(totals.group(1)) / int(counts[operation])
    return result


def table(measured: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| backend | operation | StorageSaver (instructions per call) | native | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for backend, sides in measured.items():
        for operation in PHASES:
            ours, native = sides["ours"][operation], sides["native"][operation]
            lines.append(f"| {backend} | `{operation}` | {ours:,.0f} | {native:,.0f} | {ours / native:.2f} |")
        for operation in STORAGE_PHASES:
            direct = sides["ours"][operation]
            lines.append(f"| {backend} | `{operation}` (what StorageSaver calls) | {direct:,.0f} | - | - |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.langgraph_callgrind", description=__doc__)
    parser.add_argument("--backends", default="memory,sqlite")
    parser.add_argument("--sides", default=",".join(SIDES), help="comma-separated subset of: ours,native")
    parser.add_argument("--reps", type=int, default=5, help="fresh threads per phase")
    parser.add_argument("--supersteps", type=int, default=10)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        return _run_inner(args)
    sides = [side for side in args.sides.split(",") if side]
    measured: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="langgraph-callgrind-") as workdir:
        for backend in [name for name in args.backends.split(",") if name]:
            measured[backend] = {
                side: measure(backend, side, args.reps, args.supersteps, Path(workdir)) for side in sides
            }
            for side in sides:
                print(backend, side, " ".join(f"{k}={v:,.0f}" for k, v in measured[backend][side].items()))
    if set(sides) == set(SIDES):
        print(table(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
