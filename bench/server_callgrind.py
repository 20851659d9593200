"""Instructions per PostgreSQL and S3 save, load, get_latest and list, this process's side
(valgrind's callgrind).

Each subject runs in a fresh interpreter under ``valgrind --tool=callgrind`` twice, with N calls and
with none; the difference over N is what one call costs the client, every thread included (boto3
calls run on the S3 storage's worker threads), with the cyclic garbage collector paused while the
calls run. The server is another process, so its work is not in these figures: PostgreSQL is the
server at ``--url`` (a scratch schema per program, dropped after); S3 is moto's HTTP server, started
once in a process of its own (a fresh bucket per program). The stored workflow holds 10 checkpoints
of the benchmark (bench/workload.py):

* save: ``save`` of a new checkpoint continuing the workflow;
* load: ``load`` of a stored id; latest: ``get_latest`` of the workflow;
* list: ``list_checkpoint_ids`` of the workflow.

``python -m bench.server_callgrind [--calls N] [--url URL] [--tree PATH] [--only postgres|s3]``:
``--tree`` puts another checkout's ``storages`` first on the path (bench/before_after.py).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .callgrind_codec import REPO_ROOT, instructions_per_call
from .postgres_bench import DEFAULT_URL

OPERATIONS = ("save", "load", "latest", "list")
BACKENDS = ("postgres", "s3")

_COMMON = """
import asyncio, gc, sys, uuid, warnings
if {tree!r}:
    sys.path.insert(0, {tree!r})
warnings.simplefilter("ignore")
from bench.workload import numbered, template
from storages.contract import WorkflowCheckpoint
loop = asyncio.new_event_loop()
run = loop.run_until_complete
base = template(WorkflowCheckpoint)
counter = iter(range(10**9))
stored = [numbered(base, next(counter)) for _ in range(10)]
"""
_STORED_IDS = range(10)

_OPEN = {
    "postgres": """
import psycopg
from storages.postgres import PostgresCheckpointStorage
schema = "callgrind_" + uuid.uuid4().hex[:12]
storage = PostgresCheckpointStorage({url!r}, schema=schema)
""",
    "s3": """
import boto3
from botocore.config import Config
from storages.s3 import S3CheckpointStorage
session = boto3.session.Session(
    region_name="us-east-1", aws_access_key_id="callgrind", aws_secret_access_key="callgrind"
)
client = session.client("s3", endpoint_url={endpoint!r}, config=Config(retries={{"max_attempts": 1}}))
bucket = "callgrind-" + uuid.uuid4().hex[:12]
client.create_bucket(Bucket=bucket)
storage = S3CheckpointStorage(bucket, client=client)
""",
}

_CLOSE = {
    "postgres": """
run(storage.aclose())
with psycopg.connect({url!r}, autocommit=True) as connection:
    connection.execute(f'DROP SCHEMA "{{schema}}" CASCADE')
""",
    "s3": "run(storage.aclose())\n",
}

_CALLS = {
    "save": "run(storage.save(numbered(base, next(counter))))",
    "load": "run(storage.load(stored[3].checkpoint_id))",
    "latest": "run(storage.get_latest(workflow_name=base.workflow_name))",
    "list": "run(storage.list_checkpoint_ids(workflow_name=base.workflow_name))",
}


def script_for(backend: str, operation: str, calls: int, *, tree: str, url: str, endpoint: str) -> str:
    """The program callgrind runs: open, store the workflow, make ``calls`` calls, close."""
    fill = "for item in stored:\n    run(storage.save(item))\n"
    # The collector paused while the calls run: a full collection of a heap holding boto3 costs
    # millions of instructions, and whether one falls inside N calls or not would move the count.
    timed = f"gc.disable()\nfor _ in range({calls}):\n    {_CALLS[operation]}\ngc.enable()\n"
    saved = calls if operation == "save" else 0
    # Outside what is counted (the same in both runs): a subject that stored nothing fails here.
    check = (
        "listed = run(storage.list_checkpoint_ids(workflow_name=base.workflow_name))\n"
        f"assert len(listed) == {len(_STORED_IDS) + saved}, listed\n"
    )
    parts = (
        _COMMON.format(tree=tree),
        _OPEN[backend].format(url=url, endpoint=endpoint),
        fill,
        timed,
        check,
        _CLOSE[backend].format(url=url),
    )
    return "\n".join(parts)


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's HTTP server in a process of its own (its work stays out of the counts); its URL."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from conformance.s3_moto import start_server; "
            "url, stop = start_server(); print(url, flush=True); sys.stdin.read(); stop()",
        ],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        endpoint = server.stdout.readline().strip()
        if not endpoint.startswith("http://"):
            raise RuntimeError("moto's server did not start")
        yield endpoint
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)


def measure(
    calls: int, *, tree: str = "", url: str = DEFAULT_URL, only: str | None = None
) -> dict[str, dict[str, float]]:
    """Instructions per call: {backend: {operation: n}}."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed")
    backends = [backend for backend in BACKENDS if only is None or backend == only]
    found: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="callgrind-servers-") as directory, moto_server() as endpoint:
        for backend in backends:
            found[backend] = {}
            for operation in OPERATIONS:
                found[backend][operation] = instructions_per_call(
                    functools.partial(script_for, backend, operation, tree=tree, url=url, endpoint=endpoint),
                    calls,
                    Path(directory) / f"{backend}-{operation}",
                )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.server_callgrind", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--calls", type=int, default=100, help="calls per subject (default 100)")
    parser.add_argument("--url", default=DEFAULT_URL, help="the PostgreSQL server (a scratch schema)")
    parser.add_argument("--tree", default="", help="a checkout whose storages/ to measure instead")
    parser.add_argument("--only", choices=BACKENDS, default=None, help="one backend")
    args = parser.parse_args(argv)
    for backend, counts in measure(args.calls, tree=args.tree, url=args.url, only=args.only).items():
        for operation, value in counts.items():
            print(f"{backend:9} {operation:7} {value:12,.0f} instructions per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
