"""Instructions per SQLite save and load, ours and a raw aiosqlite statement (valgrind's callgrind).

Figures machine load cannot blur, for comparing two versions of the SQLite backend (issue 28 moved
its connection from aiosqlite's thread onto one of its own). Each subject runs in a fresh
interpreter under ``valgrind --tool=callgrind`` twice, with N calls and with none; the difference
over N is its instructions per call, every thread included (the connection's thread runs SQLite
itself). Both sides use WAL with synchronous=NORMAL, so no call waits on an fsync.

* ours/save: ``SQLiteCheckpointStorage.save`` of the benchmark checkpoint (bench/workload.py).
* ours/load: ``load`` of a stored id. ours/latest: ``get_latest`` of a 10-checkpoint workflow.
* raw/insert: one aiosqlite ``execute`` of an INSERT of our exact body into a primary-key table.
* raw/select: one aiosqlite ``execute_fetchall`` of that body by its id.

``python -m bench.sqlite_callgrind [--calls N] [--tree PATH]``: ``--tree`` puts another checkout's
``storages`` first on the path (the version to compare against), the bench itself staying this one.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import tempfile
from pathlib import Path

from .callgrind_codec import instructions_per_call

_COMMON = """
import asyncio, sys, tempfile, pathlib
if {tree!r}:
    sys.path.insert(0, {tree!r})
from bench.workload import numbered, template
from storages.contract import WorkflowCheckpoint
from storages.codec import CheckpointCodec
loop = asyncio.new_event_loop()
run = loop.run_until_complete
directory = pathlib.Path(tempfile.mkdtemp())
base = template(WorkflowCheckpoint)
counter = iter(range(10**9))
"""

_OURS = """
from storages.sqlite import SQLiteCheckpointStorage
storage = SQLiteCheckpointStorage(directory / "ours.db", synchronous="normal")
run(storage.save(numbered(base, next(counter))))
stored = [numbered(base, next(counter)) for _ in range(10)]
for item in stored:
    run(storage.save(item))
"""

_RAW = """
import aiosqlite
body = CheckpointCodec().encode_checkpoint(base)
async def open_raw():
    connection = await aiosqlite.connect(directory / "raw.db", isolation_level=None)
    await connection.execute("PRAGMA journal_mode = WAL")
    await connection.execute("PRAGMA synchronous = NORMAL")
    await connection.execute("CREATE TABLE raw (id TEXT PRIMARY KEY, body BLOB NOT NULL)")
    await connection.execute("INSERT INTO raw VALUES ('stored', ?)", (body,))
    return connection
raw = run(open_raw())
"""

_CLOSE = """
for handle in ("storage", "raw"):
    if handle in globals():  # aiosqlite's thread is not a daemon: an open one never lets us exit
        run(globals()[handle].close() if handle == "raw" else globals()[handle].aclose())
"""

SUBJECTS: dict[str, tuple[str, str]] = {
    "ours/save": (_OURS, "run(storage.save(numbered(base, next(counter))))"),
    "ours/load": (_OURS, "run(storage.load(stored[3].checkpoint_id))"),
    "ours/latest": (_OURS, "run(storage.get_latest(workflow_name=base.workflow_name))"),
    "raw/insert": (_RAW, "run(raw.execute('INSERT INTO raw VALUES (?, ?)', (f'r{next(counter)}', body)))"),
    "raw/select": (_RAW, "run(raw.execute_fetchall('SELECT body FROM raw WHERE id = ?', ('stored',)))"),
}


def script_for(name: str, calls: int, tree: str = "") -> str:
    """The program callgrind runs for subject ``name`` with ``calls`` calls."""
    setup, call = SUBJECTS[name]
    loop = f"for _ in range({calls}):\n    {call}\n"
    return f"{_COMMON.format(tree=tree)}\n{setup}\n{loop}{_CLOSE}"


def measure(calls: int, tree: str = "") -> dict[str, float]:
    """Instructions per call of each subject."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed")
    counts: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="callgrind-sqlite-") as directory:
        for name in SUBJECTS:
            script = functools.partial(script_for, name, tree=tree)
            counts[name] = instructions_per_call(script, calls, Path(directory) / name.replace("/", "-"))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sqlite_callgrind", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--calls", type=int, default=200, help="calls per subject (default 200)")
    parser.add_argument("--tree", default="", help="a checkout whose storages/ to measure instead")
    args = parser.parse_args(argv)
    counts = measure(args.calls, args.tree)
    for name, value in counts.items():
        print(f"{name:12} {value:12,.0f} instructions per call")
    print(
        f"save ÷ raw insert {counts['ours/save'] / counts['raw/insert']:.2f}, "
        f"load ÷ raw select {counts['ours/load'] / counts['raw/select']:.2f}, "
        f"latest ÷ raw select {counts['ours/latest'] / counts['raw/select']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
