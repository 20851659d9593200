"""Redis: server-side instructions per operation, counted with valgrind's callgrind.

``python -m bench.redis_server_callgrind [--list-stored N]``. bench/redis_callgrind.py
counts the client's half; this counts the server's: a private ``redis-server`` (no persistence,
a free port) runs under ``valgrind --tool=callgrind``, and ``callgrind_control`` zeroes its
counters before ``RUNS`` calls of one operation and dumps them after, so the figure is what one
call costs the server, whatever else loads the machine. A Lua script's cost is here: building
key names, every ``redis.call``, and each string that crosses into Lua or back (a body included).

Pairs: ``load`` (both ways: the transaction a handle sends for an id whose home it remembers,
and the script for one it does not) against ``GET`` of the same bytes, ``get_latest`` of a
workflow with nothing stored (what LangGraph asks of each new subgraph namespace) against
``ZREVRANGE 0 0`` of the same empty index, ``save`` (both ways: save_one, and the general
save script it stands in for) against a pipelined ``SET`` + ``ZADD``,
``list_checkpoint_ids`` against ``ZRANGE 0 -1`` of the same index.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import os
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from redis.asyncio import Redis

from storages.codec import CheckpointCodec
from storages.contract import WorkflowCheckpoint
from storages.redis import RedisCheckpointStorage, delete_prefix

from .workload import WORKFLOW_NAME, numbered, template

LIST_STORED = 10_000
RUNS = 200
LIST_RUNS = 5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _server_under_callgrind(directory: str) -> Iterator[tuple[int, int]]:
    """(port, pid) of a private redis-server run by callgrind; stopped on exit."""
    port = _free_port()
    command = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={directory}/cg.%p",
        "redis-server",
        *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
    ]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.1)
        yield port, server.pid
    finally:
        server.terminate()
        server.wait(30)


def _zero(pid: int) -> None:
    # Blocking on purpose: nothing of ours is in flight while the server's counters are zeroed.
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)


def _dump(directory: str, pid: int) -> int:
    """Instructions since the last zeroing; the dump file is removed."""
    before = set(glob.glob(f"{directory}/cg.{pid}*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    new = sorted(set(glob.glob(f"{directory}/cg.{pid}*")) - before, key=os.path.getmtime)
    with open(new[-1]) as dump:
        found = re.search(r"^(?:summary|totals): (\d+)", dump.read(), re.MULTILINE)
    for path in new:
        os.remove(path)
    if found is None:
        raise RuntimeError(f"no instruction total in {new[-1]}")
    return int(found.group(1))


Counter = Callable[[Callable[[int], Awaitable[Any]], int], Awaitable[int]]
"""Runs an operation a number of times and returns what one run cost."""


def server_counter(directory: str, pid: int) -> Counter:
    async def count(operation: Callable[[int], Awaitable[Any]], runs: int) -> int:
        await operation(-1)  # warm-up: connection, script cache
        _zero(pid)
        for index in range(runs):
            await operation(index)
        return _dump(directory, pid) // runs

    return count


async def measure(url: str, prefix: str, count: Counter, list_stored: int) -> list[tuple[str, int]]:
    """(label, count) of each operation of the pairs, on a store of ``list_stored`` checkpoints
    under ``prefix`` (deleted afterwards)."""
    client = Redis.from_url(url)
    storage = RedisCheckpointStorage.from_url(url + f"?prefix={prefix}&allow_evicting_policy=true")
    codec, base = CheckpointCodec(), template(WorkflowCheckpoint)
    raw = f"{prefix}:{{raw}}"
    rows: list[tuple[str, int]] = []
    try:
        for start in range(0, list_stored, 100):
            batch = [numbered(base, index) for index in range(start, min(list_stored, start + 100))]
            await asyncio.gather(*(storage.save(checkpoint) for checkpoint in batch))
        top = storage.keys.top(WORKFLOW_NAME)

        async def listing(_: int) -> Any:
            return await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)

        async def zrange(_: int) -> Any:
            return await client.zrange(top, 0, -1)

        stored_id = numbered(base, list_stored // 2).checkpoint_id
        body = codec.encode_checkpoint(numbered(base, 0))
        await client.set(f"{raw}:body", body)

        async def load(_: int) -> Any:
            return await storage.load(stored_id)

        async def load_by_script(_: int) -> Any:
            # A handle that neither saved nor read the id runs the load script.
            storage.backend.loads.homes.clear()
            return await storage.load(stored_id)

        # LangGraph asks for each new subgraph namespace's latest before anything is stored.
        empty = [f"langgraph:thread-{index}:work%3A{index}" for index in range(RUNS + 1)]

        async def latest_empty(index: int) -> Any:
            return await storage.get_latest(workflow_name=empty[index])

        async def zrevrange_empty(index: int) -> Any:
            return await client.zrevrange(storage.keys.top(empty[index]), 0, 0)

        async def get(_: int) -> Any:
            return await client.get(f"{raw}:body")

        async def save(index: int) -> Any:
            return await storage.save(numbered(base, 10 * list_stored + 10 + index, "timed"))

        async def save_by_script(index: int) -> Any:
            storage.backend.commits.general_only = True
            try:
                return await storage.save(numbered(base, 10 * list_stored + 20 + RUNS + index, "timed"))
            finally:
                storage.backend.commits.general_only = False

        async def raw_save(index: int) -> Any:
            pipe = client.pipeline(transaction=False)
            pipe.set(f"{raw}:b:{index}", body)
            pipe.zadd(f"{raw}:z", {str(index): index})
            return await pipe.execute()

        rows.append((f"list_checkpoint_ids @{list_stored:,}", await count(listing, LIST_RUNS)))
        rows.append((f"ZRANGE 0 -1 @{list_stored:,}", await count(zrange, LIST_RUNS)))
        await storage.load(stored_id)
        rows.append(("load (home remembered: MULTI/EXEC)", await count(load, RUNS)))
        rows.append(("load (home not remembered: script)", await count(load_by_script, RUNS)))
        rows.append(("GET", await count(get, RUNS)))
        rows.append(("get_latest of an empty workflow (script)", await count(latest_empty, RUNS)))
        rows.append(("ZREVRANGE 0 0 of an empty index", await count(zrevrange_empty, RUNS)))
        rows.append(("save (save_one)", await count(save, RUNS)))
        rows.append(("save (the general save script)", await count(save_by_script, RUNS)))
        rows.append(("SET+ZADD (pipelined)", await count(raw_save, RUNS)))
    finally:
        await storage.aclose()
        await delete_prefix(client, prefix)
        await client.aclose()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.redis_server_callgrind", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--list-stored", type=int, default=LIST_STORED)
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="redis-cg-") as directory,
        _server_under_callgrind(directory) as (port, pid),
    ):
        url = f"redis://127.0.0.1:{port}/0"
        rows = asyncio.run(measure(url, "cg", server_counter(directory, pid), args.list_stored))
    print("| server work per call | instructions |")
    print("|---|---:|")
    for label, count in rows:
        print(f"| {label} | {count:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
