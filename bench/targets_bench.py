"""Issue 15's targets for the codec, memory and SQLite, each measured next to its peer in one run.

Every ratio is our median time over the peer's (or the raw floor's) median for the same job,
timed interleaved (bench/measure.py), so load from elsewhere falls on both sides alike; for the
codec, bench/callgrind_codec.py gives the load-independent instruction counts.

* Codec: encode+decode of the benchmark checkpoint (bench/workload.py) by our CheckpointCodec,
  plain msgspec of the same dataclass (``msgspec.msgpack.encode`` and a typed ``Decoder``), and
  LangGraph's JsonPlusSerializer (``dumps_typed``/``loads_typed``).
* Memory save: ``InMemoryCheckpointStorage.save`` of the checkpoint against LangGraph's
  ``InMemorySaver.aput`` of a checkpoint whose channels hold the same messages, state and
  metadata.
* Memory and SQLite reads, each side holding the same chain of ``HISTORY`` checkpoints in one
  workflow (one thread): ``load`` of a stored id against ``aget_tuple`` with that checkpoint id,
  ``get_latest`` against ``aget_tuple`` without one, and ``list_checkpoints`` (every body
  decoded) against ``alist`` of the thread (every tuple deserialised).
* SQLite save: ours against ``AsyncSqliteSaver.aput`` (langgraph-checkpoint-sqlite; both WAL,
  synchronous=FULL), and against a raw single autocommit INSERT of our exact body into a
  primary-key-only table on one aiosqlite connection, at FULL and at NORMAL (each side at the
  same setting).
* S3 save: the requests one save sends (counted by a botocore hook on moto's HTTP server in this
  process, bench/s3_costs.py), against the bound of 4; not a time, so machine load cannot move it.
* 32 concurrent writers on one file: saves per second of 32 tasks sharing one handle, of 32
  handles (one per task), and of the raw INSERT from 32 tasks on one connection.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from storages.codec import CheckpointCodec
from storages.contract import WorkflowCheckpoint
from storages.memory import InMemoryCheckpointStorage
from storages.sqlite import SQLiteCheckpointStorage

from . import sqlite_counts
from .measure import AsyncCase, Budget, Measurement, ratio, time_async, time_sync
from .workload import numbered, template

TARGETS: dict[str, tuple[str, float]] = {
    "codec_vs_msgspec": ("Codec encode+decode ÷ plain msgspec of the same data", 1.5),
    "codec_vs_jsonplus": ("Codec encode+decode ÷ LangGraph JsonPlusSerializer", 1.0),
    "memory_save_vs_inmemorysaver": ("Memory save ÷ LangGraph InMemorySaver.aput", 1.0),
    "memory_load_vs_inmemorysaver": ("Memory load ÷ InMemorySaver.aget_tuple by id", 1.0),
    "memory_latest_vs_inmemorysaver": ("Memory get_latest ÷ InMemorySaver.aget_tuple (latest)", 1.0),
    "memory_list_vs_inmemorysaver": ("Memory list_checkpoints ÷ InMemorySaver.alist", 1.0),
    "sqlite_save_vs_asyncsqlitesaver": ("SQLite save ÷ AsyncSqliteSaver.aput (WAL, synchronous=FULL)", 1.0),
    "sqlite_load_vs_asyncsqlitesaver": ("SQLite load ÷ AsyncSqliteSaver.aget_tuple by id", 1.0),
    "sqlite_latest_vs_asyncsqlitesaver": ("SQLite get_latest ÷ AsyncSqliteSaver.aget_tuple (latest)", 1.0),
    "sqlite_list_vs_asyncsqlitesaver": ("SQLite list_checkpoints ÷ AsyncSqliteSaver.alist", 1.0),
    "sqlite_save_vs_raw_full": ("SQLite save ÷ raw single INSERT (synchronous=FULL)", 1.5),
    "sqlite_save_vs_raw_normal": ("SQLite save ÷ raw single INSERT (synchronous=NORMAL)", 1.5),
    "sqlite_32_writers_vs_raw": ("SQLite 32-writer throughput ÷ raw INSERT throughput (shared handle)", 0.8),
    "s3_save_requests": ("S3 save: requests per save", 4.0),
}
"""Key -> (what is compared, the issue's bound). FLOORS are floors (ours must be at least the
bound), the others ceilings; COUNTS are counts, not ratios."""
FLOORS = frozenset({"sqlite_32_writers_vs_raw"})
COUNTS = frozenset({"s3_save_requests"})
WRITERS = 32
HISTORY = 10
"""Checkpoints each side holds for the read targets."""
READS = ("load", "latest", "list")
READS_WORKFLOW = "bench-targets-reads"
_counter = itertools.count()


def _unique(base: WorkflowCheckpoint) -> WorkflowCheckpoint:
    return replace(base, checkpoint_id=f"target-{next(_counter):09d}-{uuid.uuid4().hex[:8]}")


def run_codec_targets(budget: Budget) -> dict[str, Measurement]:
    import msgspec
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    checkpoint = template(WorkflowCheckpoint)
    codec = CheckpointCodec()
    body = codec.encode_checkpoint(checkpoint)
    encoder = msgspec.msgpack.Encoder()
    decoder = msgspec.msgpack.Decoder(WorkflowCheckpoint)
    serde = JsonPlusSerializer(allowed_msgpack_modules=[("storages.contract", "WorkflowCheckpoint")])
    if codec.decode_checkpoint(body, checkpoint_id="x") != checkpoint:
        raise AssertionError("our codec did not round-trip the target checkpoint")
    if serde.loads_typed(serde.dumps_typed(checkpoint)).checkpoint_id != checkpoint.checkpoint_id:
        raise AssertionError("JsonPlusSerializer did not round-trip the target checkpoint")
    return time_sync(
        {
            "ours": lambda: codec.decode_checkpoint(codec.encode_checkpoint(checkpoint), checkpoint_id="x"),
            "msgspec": lambda: decoder.decode(encoder.encode(checkpoint)),
            "jsonplus": lambda: serde.loads_typed(serde.dumps_typed(checkpoint)),
        },
        budget,
    )


def _langgraph_job(base: WorkflowCheckpoint) -> tuple[dict[str, Any], dict[str, Any]]:
    """A LangGraph checkpoint carrying the same data in three channels, and its new versions."""
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint: dict[str, Any] = dict(empty_checkpoint())
    checkpoint["channel_values"] = {"messages": base.messages, "state": base.state, "metadata": base.metadata}
    versions = {name: 1 for name in checkpoint["channel_values"]}
    checkpoint["channel_versions"] = versions
    return checkpoint, versions


def _langgraph_put(saver: Any, base: WorkflowCheckpoint) -> Callable[[Any], Awaitable[Any]]:
    from langgraph.checkpoint.base.id import uuid6

    job, versions = _langgraph_job(base)
    config = {"configurable": {"thread_id": "bench-targets", "checkpoint_ns": ""}}

    async def put(_: Any) -> Any:
        return await saver.aput(config, {**job, "id": str(uuid6())}, {"step": 1}, versions)

    return put


def _saves(base: WorkflowCheckpoint) -> Callable[[int], list[WorkflowCheckpoint]]:
    return lambda n: [_unique(base) for _ in range(n)]


@asynccontextmanager
async def _raw_sqlite(path: Path, synchronous: str) -> AsyncIterator[Any]:
    import aiosqlite

    connection = await aiosqlite.connect(path, isolation_level=None)
    try:
        await connection.execute("PRAGMA journal_mode = WAL")
        await connection.execute(f"PRAGMA synchronous = {synchronous}")
        await connection.execute("PRAGMA busy_timeout = 5000")
        await connection.execute("CREATE TABLE IF NOT EXISTS raw (id TEXT PRIMARY KEY, body BLOB NOT NULL)")
        yield connection
    finally:
        await connection.close()


def _raw_insert(connection: Any, body: bytes) -> Callable[[Any], Awaitable[Any]]:
    async def insert(_: Any) -> Any:
        return await connection.execute(
            "INSERT INTO raw (id, body) VALUES (?, ?)", (f"raw-{next(_counter):09d}", body)
        )

    return insert


Reads = dict[str, Callable[[Any], Awaitable[Any]]]
"""The timed reads of one side, by name (READS)."""


def _history(base: WorkflowCheckpoint) -> list[WorkflowCheckpoint]:
    """A chain in a workflow of its own: the save targets add to ``base``'s workflow meanwhile."""
    reads = replace(base, workflow_name=READS_WORKFLOW)
    return [numbered(reads, index, "reads") for index in range(HISTORY)]


async def _our_reads(storage: Any, base: WorkflowCheckpoint) -> Reads:
    """``load``, ``get_latest`` and ``list_checkpoints`` over a chain of HISTORY saved checkpoints,
    each checked once against what was saved (a read that returned nothing would time nothing)."""
    chain = _history(base)
    for checkpoint in chain:
        await storage.save(checkpoint)
    ids = [checkpoint.checkpoint_id for checkpoint in chain]
    workflow = READS_WORKFLOW
    if await storage.load(ids[3]) != chain[3]:
        raise AssertionError("our storage did not load back what it saved")
    latest = await storage.get_latest(workflow_name=workflow)
    if latest is None or latest.checkpoint_id != ids[-1]:
        raise AssertionError("our storage's latest is not the last save")
    if len(await storage.list_checkpoints(workflow_name=workflow)) != HISTORY:
        raise AssertionError("our storage did not list every save")
    turn = itertools.count()

    async def load(_: Any) -> Any:
        return await storage.load(ids[next(turn) % HISTORY])

    async def get_latest(_: Any) -> Any:
        return await storage.get_latest(workflow_name=workflow)

    async def list_all(_: Any) -> Any:
        return await storage.list_checkpoints(workflow_name=workflow)

    return {"load": load, "latest": get_latest, "list": list_all}


async def _langgraph_reads(
    saver: Any, base: WorkflowCheckpoint
) -> dict[str, Callable[[Any], Awaitable[Any]]]:
    """The same three reads through a LangGraph saver holding the same data in one thread."""
    from langgraph.checkpoint.base.id import uuid6

    job, versions = _langgraph_job(base)
    thread = {"configurable": {"thread_id": f"bench-reads-{uuid.uuid4().hex[:8]}", "checkpoint_ns": ""}}
    config: Any = thread
    configs = []
    for step in range(HISTORY):
        config = await saver.aput(config, {**job, "id": str(uuid6())}, {"step": step}, versions)
        configs.append(config)
    newest = await saver.aget_tuple(thread)
    if (
        newest is None
        or newest.config["configurable"]["checkpoint_id"] != configs[-1]["configurable"]["checkpoint_id"]
    ):
        raise AssertionError("the LangGraph saver's latest is not its last put")
    if len([item async for item in saver.alist(thread)]) != HISTORY:
        raise AssertionError("the LangGraph saver did not list every put")
    turn = itertools.count()

    async def load(_: Any) -> Any:
        return await saver.aget_tuple(configs[next(turn) % HISTORY])

    async def get_latest(_: Any) -> Any:
        return await saver.aget_tuple(thread)

    async def list_all(_: Any) -> Any:
        return [item async for item in saver.alist(thread)]

    return {"load": load, "latest": get_latest, "list": list_all}


async def run_storage_targets(budget: Budget, directory: Path) -> dict[str, Measurement]:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    base = template(WorkflowCheckpoint)
    body = CheckpointCodec().encode_checkpoint(base)
    one = lambda n: [None] * n  # noqa: E731 - the peers make their own unique ids
    async with AsyncExitStack() as stack:
        memory = await stack.enter_async_context(InMemoryCheckpointStorage())
        ours_full = await stack.enter_async_context(SQLiteCheckpointStorage(directory / "ours-full.db"))
        ours_normal = await stack.enter_async_context(
            SQLiteCheckpointStorage(directory / "ours-normal.db", synchronous="normal")
        )
        native = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(directory / "lg.db")))
        await native.setup()
        raw_full = await stack.enter_async_context(_raw_sqlite(directory / "raw-full.db", "FULL"))
        raw_normal = await stack.enter_async_context(_raw_sqlite(directory / "raw-normal.db", "NORMAL"))
        in_memory_saver = InMemorySaver()
        read_cases: dict[str, AsyncCase] = {}
        for prefix, ours, peer in (
            ("memory", await _our_reads(memory, base), await _langgraph_reads(in_memory_saver, base)),
            ("sqlite", await _our_reads(ours_full, base), await _langgraph_reads(native, base)),
        ):
            for read in READS:
                read_cases[f"{prefix}/ours-{read}"] = AsyncCase(ours[read], one)
                read_cases[f"{prefix}/peer-{read}"] = AsyncCase(peer[read], one)
        cases = read_cases | {
            "memory/ours": AsyncCase(memory.save, _saves(base)),
            "memory/inmemorysaver": AsyncCase(_langgraph_put(in_memory_saver, base), one),
            "sqlite/ours-full": AsyncCase(ours_full.save, _saves(base)),
            "sqlite/ours-normal": AsyncCase(ours_normal.save, _saves(base)),
            "sqlite/asyncsqlitesaver": AsyncCase(_langgraph_put(native, base), one),
            "sqlite/raw-full": AsyncCase(_raw_insert(raw_full, body), one),
            "sqlite/raw-normal": AsyncCase(_raw_insert(raw_normal, body), one),
        }
        return await time_async(cases, budget)


async def count_s3_save_requests() -> dict[str, Any]:
    """The requests one save (and each other operation) sends, counted on moto's HTTP server."""
    from conformance.s3_moto import RequestCounter, make_client, start_server
    from storages.s3 import S3CheckpointStorage

    from .s3_costs import count_operations

    endpoint, stop = start_server()
    try:
        client = make_client(endpoint)
        client.create_bucket(Bucket="bench-targets")
        counter = RequestCounter()
        counter.attach(client)
        async with S3CheckpointStorage("bench-targets", "costs", client=client) as storage:
            costs = await count_operations(storage, counter, template(WorkflowCheckpoint), WorkflowCheckpoint)
        client.close()
    finally:
        stop()
    return costs


async def _throughput(writers: list[Callable[[], Awaitable[Any]]], saves_each: int) -> float:
    """Saves per second of every writer saving ``saves_each`` times at once."""

    async def writer(save: Callable[[], Awaitable[Any]]) -> None:
        for _ in range(saves_each):
            await save()

    started = time.perf_counter()
    await asyncio.gather(*(writer(save) for save in writers))
    return len(writers) * saves_each / (time.perf_counter() - started)


async def run_concurrency_targets(saves_each: int, rounds: int, directory: Path) -> dict[str, list[float]]:
    """Saves per second, one sample per round, rounds interleaved across the three setups."""
    base = template(WorkflowCheckpoint)
    body = CheckpointCodec().encode_checkpoint(base)
    samples: dict[str, list[float]] = {"ours-shared": [], "ours-handles": [], "raw-shared": []}
    async with AsyncExitStack() as stack:
        shared = await stack.enter_async_context(SQLiteCheckpointStorage(directory / "writers.db"))
        handles = [await stack.enter_async_context(shared.new_handle()) for _ in range(WRITERS)]
        raw = await stack.enter_async_context(_raw_sqlite(directory / "raw-writers.db", "FULL"))
        insert = _raw_insert(raw, body)

        def ours(storage: SQLiteCheckpointStorage) -> Callable[[], Awaitable[Any]]:
            return lambda: storage.save(_unique(base))

        setups: dict[str, list[Callable[[], Awaitable[Any]]]] = {
            "ours-shared": [ours(shared) for _ in range(WRITERS)],
            "ours-handles": [ours(handle) for handle in handles],
            "raw-shared": [lambda: insert(None) for _ in range(WRITERS)],
        }
        for writers in setups.values():  # warm-up
            await _throughput(writers, 1)
        for _ in range(rounds):
            for name, writers in setups.items():
                samples[name].append(await _throughput(writers, saves_each))
    return samples


def storage_ratios(storage: dict[str, Measurement]) -> dict[str, float]:
    """The memory and SQLite targets (keys of :data:`TARGETS`) from one run_storage_targets."""

    def us(key: str) -> float:
        return float(storage[key].median_us)

    measured = {
        "memory_save_vs_inmemorysaver": ratio(us("memory/ours"), us("memory/inmemorysaver")),
        "sqlite_save_vs_asyncsqlitesaver": ratio(us("sqlite/ours-full"), us("sqlite/asyncsqlitesaver")),
        "sqlite_save_vs_raw_full": ratio(us("sqlite/ours-full"), us("sqlite/raw-full")),
        "sqlite_save_vs_raw_normal": ratio(us("sqlite/ours-normal"), us("sqlite/raw-normal")),
    }
    for prefix in ("memory", "sqlite"):
        peer = "inmemorysaver" if prefix == "memory" else "asyncsqlitesaver"
        for read in READS:
            measured[f"{prefix}_{read}_vs_{peer}"] = ratio(
                us(f"{prefix}/ours-{read}"), us(f"{prefix}/peer-{read}")
            )
    return measured


async def run_targets(budget: Budget, *, saves_each: int = 10, rounds: int = 5) -> dict[str, Any]:
    """Every target's measured ratio, with the medians it comes from (JSON-ready)."""
    import statistics

    codec = run_codec_targets(budget)
    directory = Path(tempfile.mkdtemp(prefix="bench-targets-"))
    try:
        storage = await run_storage_targets(budget, directory)
        writers = await run_concurrency_targets(saves_each, rounds, directory)
        counts = await sqlite_counts.measure(directory / "counts")
        s3_costs = await count_s3_save_requests()
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    def us(timings: dict[str, Measurement], key: str) -> float:
        return float(timings[key].median_us)

    throughput = {name: statistics.median(values) for name, values in writers.items()}
    measured = {
        "codec_vs_msgspec": ratio(us(codec, "ours"), us(codec, "msgspec")),
        "codec_vs_jsonplus": ratio(us(codec, "ours"), us(codec, "jsonplus")),
        **storage_ratios(storage),
        "sqlite_32_writers_vs_raw": ratio(throughput["ours-shared"], throughput["raw-shared"]),
        "s3_save_requests": float(s3_costs["rows"]["save"]["total"]),
    }
    return {
        "measured": measured,
        "medians_us": {f"codec/{key}": us(codec, key) for key in codec}
        | {key: us(storage, key) for key in storage},
        "writers": {
            "count": WRITERS,
            "saves_each": saves_each,
            "saves_per_second": throughput,
            "samples": writers,
        },
        "handles_over_shared": ratio(throughput["ours-handles"], throughput["ours-shared"]),
        "sqlite_counts": counts,
        "s3_costs": s3_costs,
    }


def target_met(key: str, value: float) -> bool:
    bound = TARGETS[key][1]
    return value >= bound if key in FLOORS else value <= bound


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.targets_bench``: the memory and SQLite rows alone (the full table comes
    from bench.run), each as ours ÷ peer and ours ÷ raw of one interleaved run, and the medians."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m bench.targets_bench", description=main.__doc__)
    parser.add_argument("--repeats", type=int, default=7, help="samples per operation (default 7)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        storage = asyncio.run(run_storage_targets(Budget(repeats=args.repeats), Path(directory)))

    for key, value in storage_ratios(storage).items():
        print(f"{TARGETS[key][0]:62} {value:6.2f}x")
    print(json.dumps({key: round(float(storage[key].median_us), 1) for key in sorted(storage)}))


if __name__ == "__main__":
    main()
