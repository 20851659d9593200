"""Instructions per call of each kept second path against its backend's general path (callgrind).

A second path for an operation stays only where it pays more than 20% on a named workload
(docs/backends.md, "One path per operation"). Each backend that keeps one has a test hook,
``backend.general_path``, that sends the operation down the general path; this bench measures
both in one run, each subject in a fresh interpreter under ``valgrind --tool=callgrind`` with N
calls and with none (bench/callgrind_codec.py's method), so machine load cannot blur them.

* postgres/save: ``PostgresCheckpointStorage.save`` of the benchmark checkpoint (bench/workload.py),
  ``save_one`` against ``save_family`` (client instructions; a scratch schema, dropped after).
* memory/list_ids@N: ``InMemoryCheckpointStorage.list_checkpoint_ids`` of an N-checkpoint
  workflow, the copy of the workflow's keys against the general walk of its entries.

``python -m bench.paths_callgrind [--calls N] [--url URL] [--only NAME]``
"""

from __future__ import annotations

import argparse
import functools
import shutil
import tempfile
from pathlib import Path

from .callgrind_codec import instructions_per_call
from .postgres_bench import DEFAULT_URL

_COMMON = """
import asyncio, dataclasses, itertools, uuid, warnings
warnings.simplefilter("ignore")
from bench.workload import template
from storages.contract import WorkflowCheckpoint
checkpoint = template(WorkflowCheckpoint)
loop = asyncio.new_event_loop()
run = loop.run_until_complete
ids = itertools.count()
def fresh():
    return dataclasses.replace(checkpoint, checkpoint_id=f"c{next(ids)}")
"""

_POSTGRES = """
import psycopg
from storages.postgres import PostgresCheckpointStorage
schema = "paths_" + uuid.uuid4().hex[:12]
storage = PostgresCheckpointStorage.from_url({url!r} + ("&" if "?" in {url!r} else "?") + "schema=" + schema)
storage.backend.general_path = {general}
for _ in range(10):
    run(storage.save(fresh()))
"""
_POSTGRES_CLOSE = """
run(storage.aclose())
with psycopg.connect({url!r}, autocommit=True) as connection:
    connection.execute(f'DROP SCHEMA "{{schema}}" CASCADE')
"""

_MEMORY = """
from storages.memory import InMemoryCheckpointStorage
storage = InMemoryCheckpointStorage()
storage.backend.general_path = {general}
for _ in range({stored}):
    run(storage.save(fresh()))
run(storage.list_checkpoint_ids(workflow_name=checkpoint.workflow_name))
"""

SUBJECTS = ("postgres/save", "memory/list_ids@10", "memory/list_ids@1000")


def _script(name: str, general: bool, calls: int, url: str) -> str:
    if name == "postgres/save":
        setup = _POSTGRES.format(url=url, general=general)
        call, close = "run(storage.save(fresh()))", _POSTGRES_CLOSE.format(url=url)
    else:
        setup = _MEMORY.format(general=general, stored=int(name.partition("@")[2]))
        call, close = "run(storage.list_checkpoint_ids(workflow_name=checkpoint.workflow_name))", ""
    return f"{_COMMON}\n{setup}\nfor _ in range({calls}):\n    {call}\n{close}"


def measure(calls: int, url: str = DEFAULT_URL, only: str | None = None) -> dict[str, dict[str, float]]:
    """Instructions per call of each subject, by path: {subject: {"second": n, "general": n}}."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed")
    found: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="callgrind-paths-") as directory:
        for name in SUBJECTS:
            if only is not None and not name.startswith(only):
                continue
            found[name] = {}
            for label, general in (("second", False), ("general", True)):
                found[name][label] = instructions_per_call(
                    functools.partial(_script, name, general, url=url),
                    calls,
                    Path(directory) / f"{name.replace('/', '-')}.{label}",
                )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.paths_callgrind", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--calls", type=int, default=200, help="calls per subject (default 200)")
    parser.add_argument("--url", default=DEFAULT_URL, help="the PostgreSQL server (a scratch schema)")
    parser.add_argument("--only", default=None, help="subjects whose name starts with this")
    args = parser.parse_args(argv)
    for name, counts in measure(args.calls, args.url, args.only).items():
        second, general = counts["second"], counts["general"]
        print(
            f"{name:22} second path {second:12,.0f}  general path {general:12,.0f}  "
            f"general ÷ second {general / second:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
