"""Redis: client-side instructions per operation, counted with valgrind's callgrind.

``python -m bench.redis_callgrind [--url redis://...] [--tree PATH]``: ``--tree`` measures another
checkout's ``storages/`` (bench/before_after.py). Wall-clock
ratios on a loaded machine blur; instruction counts do not depend on the load. Each operation is
run ``N`` times in a child process under ``valgrind --tool=callgrind --collect-atstart=no
--toggle-collect=functools_reduce``: the timed calls run inside one ``functools.reduce`` call
(a C function nothing else in the child calls), so callgrind counts them and not the setup;
the count divided by ``N`` is what one operation costs this process (the Redis server is another
process: its time is not in these figures, see ``INFO commandstats``).

Pairs: ``load`` against ``get_decode`` (GET + our decode of the same bytes), ``load_by_script``
(a load of an id whose home the handle does not remember: the load script) and ``latest`` (the
latest of the stored workflow: the latest script) against the same, ``save`` (save_one) and
``save_by_script`` (the same saves through the general save script, ``commits.general_only``)
against ``raw_save_encode`` (our encode + a pipelined SET+ZADD), ``list`` against ``zrange`` (ZRANGE of the
same index, ids decoded), at ``STORED`` checkpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import subprocess
import sys
import uuid
from typing import Any

DEFAULT_URL = "redis://127.0.0.1:6379/0"
STORED = 200
RUNS = 100
PAIRS = (
    ("load", "get_decode"),
    ("load_by_script", "get_decode"),
    ("latest", "get_decode"),
    ("save", "raw_save_encode"),
    ("save_by_script", "raw_save_encode"),
    ("list", "zrange"),
)


def _child(url: str, op: str, n: int, stored: int = STORED, tree: str = "") -> None:
    """Set up, run ``op`` ``n`` times inside functools.reduce (what callgrind collects), clean up."""
    if tree:  # before anything imports storages
        sys.path.insert(0, tree)
    loop = asyncio.new_event_loop()
    try:
        timed, cleanup = loop.run_until_complete(_prepared(url, op, n, stored))
        try:
            functools.reduce(lambda _, __: loop.run_until_complete(timed()), [None], None)
        finally:
            loop.run_until_complete(cleanup())
    finally:
        loop.close()


async def _prepared(url: str, op: str, n: int, stored: int) -> tuple[Any, Any]:
    from redis.asyncio import Redis

    from storages.codec import CheckpointCodec
    from storages.contract import WorkflowCheckpoint
    from storages.redis import RedisCheckpointStorage, delete_prefix

    from .workload import WORKFLOW_NAME, numbered, template

    prefix = f"bench-cg-{uuid.uuid4().hex[:8]}"
    client = Redis.from_url(url)
    storage = RedisCheckpointStorage.from_url(url + ("&" if "?" in url else "?") + f"prefix={prefix}")
    codec = CheckpointCodec()
    base = template(WorkflowCheckpoint)
    raw_body_key, raw_index = f"{prefix}:{{raw}}:body", f"{prefix}:{{raw}}:index"
    for start in range(0, stored, 50):
        batch = [numbered(base, index) for index in range(start, min(stored, start + 50))]
        await asyncio.gather(*(storage.save(checkpoint) for checkpoint in batch))
    stored_id = numbered(base, stored // 2).checkpoint_id
    await client.set(raw_body_key, codec.encode_checkpoint(numbered(base, 0)))
    pending = [numbered(base, 10 * stored + index, "timed") for index in range(n + 1)]
    storage.backend.commits.general_only = op == "save_by_script"

    async def once(index: int) -> Any:
        if op == "load":
            return await storage.load(stored_id)
        if op == "load_by_script":
            storage.backend.loads.homes.clear()  # as a handle that neither saved nor read the id
            return await storage.load(stored_id)
        if op == "get_decode":
            return codec.decode_checkpoint(await client.get(raw_body_key), checkpoint_id="x")
        if op in ("save", "save_by_script"):
            return await storage.save(pending[index])
        if op == "raw_save_encode":
            checkpoint = pending[index]
            pipe = client.pipeline(transaction=False)
            pipe.set(f"{prefix}:{{raw}}:b:{checkpoint.checkpoint_id}", codec.encode_checkpoint(checkpoint))
            pipe.zadd(raw_index, {checkpoint.checkpoint_id: index})
            return await pipe.execute()
        if op == "latest":
            return await storage.get_latest(workflow_name=WORKFLOW_NAME)
        if op == "list":
            return await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
        if op == "zrange":
            return [member.decode() for member in await client.zrange(storage.keys.top(WORKFLOW_NAME), 0, -1)]
        raise SystemExit(f"unknown operation {op!r}")

    await once(n)  # warm-up: connections, script cache

    async def timed() -> None:
        for index in range(n):
            await once(index)

    async def cleanup() -> None:
        await storage.aclose()
        await delete_prefix(client, prefix)
        await client.aclose()

    return timed, cleanup


def _instructions(url: str, op: str, n: int, tree: str = "") -> int:
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        "--collect-atstart=no",
        "--toggle-collect=functools_reduce",
        sys.executable,
        "-m",
        "bench.redis_callgrind",
        "--child",
        op,
        str(n),
        "--url",
        url,
        *(["--tree", tree] if tree else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind reported no count for {op}: {done.stderr[-500:]}")
    return int(found.group(1))


def per_operation(url: str, op: str, runs: int = RUNS, tree: str = "") -> int:
    """Instructions one ``op`` costs this process."""
    return _instructions(url, op, runs, tree) // runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.redis_callgrind", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--url", default=os.environ.get("REDIS_URL", DEFAULT_URL))
    parser.add_argument("--tree", default="", help="a checkout whose storages/ to measure instead")
    parser.add_argument("--child", nargs=2, metavar=("OP", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.url, args.child[0], int(args.child[1]), tree=args.tree)
        return 0
    print("| ours | instructions | floor | instructions | ours ÷ floor |")
    print("|---|---:|---|---:|---:|")
    for ours, floor in PAIRS:
        mine = per_operation(args.url, ours, tree=args.tree)
        theirs = per_operation(args.url, floor, tree=args.tree)
        print(f"| {ours} | {mine:,} | {floor} | {theirs:,} | {mine / theirs:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
