"""Instructions a key adds to a save and a load (valgrind's callgrind): figures machine load cannot blur.

``python -m bench.integrity_callgrind [--calls N]``. Each subject runs in a fresh interpreter
under ``valgrind --tool=callgrind`` twice, with N calls and with none (``PYTHONHASHSEED=0``); the
difference divided by N is one call's instructions. Subjects: save and load of the benchmark
checkpoint (bench/workload.py) on the in-memory storage and on SQLite (a file in a temporary
directory), without a key and with one. Saves form one chain, as a runner's do; loads cycle over
200 records the same handle saved beforehand; first loads read each of those records once
through another handle, which never saw them (a keyed in-memory handle checks a bytes object it
already verified or sealed by identity, not by a second MAC: docs/integrity.md; on SQLite every
read builds new bytes, so every load is a first load and there is no such row).

The whole program is counted, every thread included (callgrind's total, not a toggled function):
a SQLite operation runs its queries on aiosqlite's worker thread, and those instructions belong
to the operation. SQLite's own work (a commit's journal writes, the page cache) is in the
figures too, with and without a key alike; the file system calls themselves are not counted.

Valgrind hides the CPU's SHA extensions from the program, so the seal's SHA-256 counts several
times what it costs natively on a CPU that has them (docs/integrity.md gives both figures).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
from pathlib import Path

from bench.callgrind_codec import instructions_per_call

REPO_ROOT = Path(__file__).resolve().parent.parent
_SETUP = """
import asyncio, itertools, warnings
warnings.simplefilter("ignore")
from bench.workload import numbered, template
from storages.contract import WorkflowCheckpoint
from storages.integrity import IntegrityKeys
KEYS = {{"plain": None, "keyed": IntegrityKeys(b"bench-integrity-key-0123456789ab")}}
if {backend!r} == "memory":
    from storages.memory import InMemoryCheckpointStorage
    storage = InMemoryCheckpointStorage(integrity_key=KEYS[{variant!r}])
else:
    import atexit, shutil, tempfile
    from pathlib import Path
    from storages.sqlite import SQLiteCheckpointStorage
    directory = tempfile.mkdtemp(prefix="callgrind-integrity-sqlite-")
    atexit.register(shutil.rmtree, directory, True)
    storage = SQLiteCheckpointStorage(Path(directory) / "bench.db", integrity_key=KEYS[{variant!r}])
loop = asyncio.new_event_loop()
base = template(WorkflowCheckpoint)
counter = itertools.count()
def save():
    loop.run_until_complete(storage.save(numbered(base, next(counter), "callgrind")))
ids = [loop.run_until_complete(storage.save(numbered(base, index, "preload"))) for index in range(200)]
loads = itertools.cycle(ids)
def load():
    loop.run_until_complete(storage.load(next(loads)))
reader, firsts = storage.new_handle(), iter(ids)
def first_load():
    global reader, firsts
    checkpoint_id = next(firsts, None)
    if checkpoint_id is None:  # every record read once: a new handle has read none of them
        reader, firsts = storage.new_handle(), iter(ids)
        checkpoint_id = next(firsts)
    loop.run_until_complete(reader.load(checkpoint_id))
save(); load(); first_load()
"""

MEMORY_OPERATIONS = ("save", "load", "first_load")
SQLITE_OPERATIONS = ("sqlite_save", "sqlite_load")
SUBJECTS = tuple(
    f"{operation}/{variant}"
    for operation in (*MEMORY_OPERATIONS, *SQLITE_OPERATIONS)
    for variant in ("plain", "keyed")
)


def script_for(subject: str, calls: int) -> str:
    """The program measured for ``subject`` ("save/keyed", "sqlite_load/plain", ...): set-up,
    then ``calls`` calls."""
    operation, variant = subject.split("/")
    backend, _, call = (
        operation.rpartition("_") if operation.startswith("sqlite_") else ("memory", "", operation)
    )
    setup = _SETUP.format(variant=variant, backend=backend)
    return f"{setup}\nfor _ in range({calls}):\n    {call}()\n"


def measure(calls: int, subjects: tuple[str, ...] = SUBJECTS) -> dict[str, float]:
    """Instructions per call of each subject."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed")
    with tempfile.TemporaryDirectory(prefix="callgrind-integrity-") as directory:
        return {
            subject: instructions_per_call(
                functools.partial(script_for, subject),
                calls,
                Path(directory) / f"callgrind.{subject.replace('/', '.')}",
                warm_up=1,
            )
            for subject in subjects
        }


def table(counts: dict[str, float]) -> str:
    lines = ["| storage | operation | without a key | with a key | overhead |", "|---|---|---:|---:|---:|"]
    for operation in (*MEMORY_OPERATIONS, *SQLITE_OPERATIONS):
        if f"{operation}/plain" not in counts or f"{operation}/keyed" not in counts:
            continue
        plain, keyed = counts[f"{operation}/plain"], counts[f"{operation}/keyed"]
        overhead = (keyed / plain - 1) * 100
        storage, _, call = (
            operation.rpartition("_") if operation.startswith("sqlite_") else ("memory", "", operation)
        )
        label = call.replace("_", " ")
        lines.append(
            f"| {storage} | {label} | {plain / 1000:,.0f} k | {keyed / 1000:,.0f} k | {overhead:+.1f}% |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.integrity_callgrind", description=__doc__)
    parser.add_argument("--calls", type=int, default=400, help="measured calls per subject")
    parser.add_argument("--only", choices=SUBJECTS, action="append", help="measure only these subjects")
    args = parser.parse_args(argv)
    counts = measure(args.calls, tuple(args.only or SUBJECTS))
    if args.only:
        print("\n".join(f"{subject}: {count:,.0f}" for subject, count in counts.items()))
    else:
        print(table(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
