"""PostgreSQL: our storage against a raw INSERT of the same bytes and LangGraph's AsyncPostgresSaver,
on the same server, interleaved in one run.

``python -m bench.postgres_bench [--url postgresql://127.0.0.1:5432/postgres] [--quick]`` (prints
the tables), or part of ``python -m bench.run`` (``--postgres-url``; skipped when unreachable).

* Ours: ``PostgresCheckpointStorage`` (one statement per save, load and get_latest).
* Raw floor: the exact bytes our codec produces, one autocommit ``INSERT`` per save into a table
  with a primary key and a (workflow, sequence) index; load by primary key; latest through the
  index.
* LangGraph: ``StorageSaver`` over our storage against ``AsyncPostgresSaver`` (its own tables,
  one connection), on the same checkpoints: ``aput``, ``aget_tuple`` of a given id (load) and
  of the thread's newest (latest).
* Sizes: each store filled to 10, then to 100,000 (10,000 with ``--quick``) checkpoints of one
  workflow or thread (filled with ``synchronous_commit=off`` for speed; every timed operation
  commits durably); timed saves go on top. Ancestry: a 1,000-deep chain walked in one query.

Everything lives in a scratch database, created here and dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row

from storages.codec import CheckpointCodec
from storages.contract import WorkflowCheckpoint
from storages.postgres import PostgresCheckpointStorage
from storages.runners.langgraph import StorageSaver

from .measure import AsyncCase, Budget, ratio, time_async
from .postgres_drivers import scratch_database
from .workload import WORKFLOW_NAME, numbered, template

DEFAULT_URL = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
SMALL, LARGE, QUICK_LARGE = 10, 100_000, 10_000
DEPTH = 1_000
FILL_CONCURRENCY = 20
SAVE_TARGET = 1.5
"""Our save may cost at most this many times the raw INSERT of the same bytes."""
FLAT_TARGET = 1.5
"""get_latest at the large size may cost at most this many times get_latest at 10."""
_FAST_FILL = "options=-csynchronous_commit%3Doff"
_THREAD = "bench-thread"

_CODEC = CheckpointCodec()
_BASE = template(WorkflowCheckpoint)


def _checkpoint(index: int, series: str = "main") -> Any:
    return numbered(_BASE, index, series)


def _with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


class _Raw:
    """The floor: one INSERT of the encoded bytes per save, no checks, no function."""

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self.connection = connection
        self.sequence = itertools.count(1)

    async def setup(self) -> None:
        await self.connection.execute(
            "CREATE TABLE raw (checkpoint_id text PRIMARY KEY, workflow_name text NOT NULL, "
            "sequence bigint NOT NULL, body bytea NOT NULL)"
        )
        await self.connection.execute("CREATE INDEX raw_by_sequence ON raw (workflow_name, sequence)")

    async def save(self, item: tuple[str, bytes]) -> None:
        await self.connection.execute(
            "INSERT INTO raw VALUES (%s, %s, %s, %s)", (item[0], WORKFLOW_NAME, next(self.sequence), item[1])
        )

    async def fill(self, items: list[tuple[str, bytes]]) -> None:
        async with self.connection.transaction(), self.connection.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO raw VALUES (%s, %s, %s, %s)",
                [(i, WORKFLOW_NAME, next(self.sequence), body) for i, body in items],
            )

    async def load(self, checkpoint_id: str) -> None:
        cursor = await self.connection.execute(
            "SELECT body FROM raw WHERE checkpoint_id = %s", (checkpoint_id,)
        )
        assert await cursor.fetchone() is not None

    async def latest(self, _: object) -> None:
        cursor = await self.connection.execute(
            "SELECT body FROM raw WHERE workflow_name = %s ORDER BY sequence DESC LIMIT 1", (WORKFLOW_NAME,)
        )
        assert await cursor.fetchone() is not None


def _raw_item(index: int, series: str) -> tuple[str, bytes]:
    checkpoint = _checkpoint(index, series)
    return checkpoint.checkpoint_id, _CODEC.encode_checkpoint(checkpoint)


def _lg_id(index: int) -> str:
    return str(uuid.UUID(int=index))  # sortable: LangGraph's savers take the max id as the newest


def _lg_item(index: int) -> tuple[dict[str, Any], Any, dict[str, Any], dict[str, Any]]:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = _lg_id(index)
    checkpoint["channel_values"] = {"messages": [f"message {index} " * 8] * 8, "count": index}
    checkpoint["channel_versions"] = {"messages": index, "count": index}
    config = {"configurable": {"thread_id": _THREAD, "checkpoint_ns": ""}}
    return config, checkpoint, {"source": "loop", "step": index}, {"messages": index, "count": index}


def _lg_ops(saver: Any) -> tuple[Callable[[Any], Awaitable[Any]], ...]:
    async def put(item: tuple[Any, ...]) -> None:
        await saver.aput(*item)

    async def load(checkpoint_id: str) -> None:
        config = {"configurable": {"thread_id": _THREAD, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
        assert await saver.aget_tuple(config) is not None

    async def latest(_: object) -> None:
        assert (
            await saver.aget_tuple({"configurable": {"thread_id": _THREAD, "checkpoint_ns": ""}}) is not None
        )

    return put, load, latest


async def _fill(save: Callable[[Any], Awaitable[Any]], items: list[Any]) -> None:
    body, last = items[:-1], items[-1]
    for start in range(0, len(body), FILL_CONCURRENCY):
        await asyncio.gather(*(save(item) for item in body[start : start + FILL_CONCURRENCY]))
    await save(last)  # alone, so it is the newest


async def run_postgres(url: str, budget: Budget, *, large: int = LARGE) -> dict[str, Any]:
    """Every PostgreSQL figure, as a JSON-ready dict."""
    async with scratch_database(url, "bench") as database:
        results = await _run(database, url, budget, large)
    results["database"] = database.rsplit("/", 1)[1]  # dropped by now
    return results


async def _run(database: str, url: str, budget: Budget, large: int) -> dict[str, Any]:
    ours = PostgresCheckpointStorage.from_url(_with_query(database, "schema=ours"))
    ours_filler = PostgresCheckpointStorage.from_url(_with_query(database, f"schema=ours&{_FAST_FILL}"))
    lg_storage = PostgresCheckpointStorage.from_url(_with_query(database, "schema=lg"))
    lg_filler_storage = PostgresCheckpointStorage.from_url(_with_query(database, f"schema=lg&{_FAST_FILL}"))
    ours_lg, ours_lg_filler = StorageSaver(lg_storage), StorageSaver(lg_filler_storage)
    raw_connection = await psycopg.AsyncConnection.connect(database, autocommit=True)
    raw = _Raw(raw_connection)
    await raw.setup()
    theirs_connection = await psycopg.AsyncConnection.connect(database, autocommit=True, row_factory=dict_row)
    theirs_fill_connection = await psycopg.AsyncConnection.connect(
        _with_query(database, _FAST_FILL), autocommit=True, row_factory=dict_row
    )
    theirs, theirs_filler = AsyncPostgresSaver(theirs_connection), AsyncPostgresSaver(theirs_fill_connection)
    await theirs.setup()
    results: dict[str, Any] = {"sizes": {"small": SMALL, "large": large}, "operations": {}}
    try:
        server = await (await raw_connection.execute("SHOW server_version")).fetchone()
        sync = await (await raw_connection.execute("SHOW synchronous_commit")).fetchone()
        results["server"] = {
            "version": server[0] if server else "?",
            "synchronous_commit": sync[0] if sync else "?",
        }
        stored = 0
        for size in (SMALL, large):
            fresh = range(stored, size)
            await _fill(ours_filler.save, [_checkpoint(i) for i in fresh])
            await raw.fill([_raw_item(i, "main") for i in fresh])
            await _fill(_lg_ops(ours_lg_filler)[0], [_lg_item(i) for i in fresh])
            await _fill(_lg_ops(theirs_filler)[0], [_lg_item(i) for i in fresh])
            stored = size
            results["operations"][str(size)] = await _time(size, large, ours, raw, ours_lg, theirs, budget)
        results["ancestry"] = await _ancestry(ours, ours_filler, budget)
    finally:
        for storage in (ours, ours_filler, lg_storage, lg_filler_storage):
            await storage.aclose()
        for connection in (raw_connection, theirs_connection, theirs_fill_connection):
            await connection.close()
    results["ratios"] = derive(results)
    return results


async def _time(
    size: int, large: int, ours: Any, raw: _Raw, ours_lg: Any, theirs: Any, budget: Budget
) -> dict[str, Any]:
    rng = random.Random(size)
    counter = itertools.count(10 * large + 10 * size)

    def stored_ids(n: int) -> list[str]:
        return [_checkpoint(rng.randrange(size)).checkpoint_id for _ in range(n)]

    def stored_lg_ids(n: int) -> list[str]:
        return [_lg_id(rng.randrange(size)) for _ in range(n)]

    def nothing(n: int) -> list[None]:
        return [None] * n

    async def ours_latest(_: object) -> None:
        assert await ours.get_latest(workflow_name=WORKFLOW_NAME) is not None

    cases = {
        "ours/save": AsyncCase(ours.save, lambda n: [_checkpoint(next(counter), "timed") for _ in range(n)]),
        "raw/save": AsyncCase(raw.save, lambda n: [_raw_item(next(counter), "timed") for _ in range(n)]),
        "ours/load": AsyncCase(ours.load, stored_ids),
        "raw/load": AsyncCase(raw.load, stored_ids),
        "ours/latest": AsyncCase(ours_latest, nothing),
        "raw/latest": AsyncCase(raw.latest, nothing),
    }
    for name, saver in (("ours-lg", ours_lg), ("theirs-lg", theirs)):
        put, load, latest = _lg_ops(saver)
        # New ids above every stored one, so a timed put never changes which is the newest much.
        cases[f"{name}/save"] = AsyncCase(put, lambda n: [_lg_item(next(counter)) for _ in range(n)])
        cases[f"{name}/load"] = AsyncCase(load, stored_lg_ids)
        cases[f"{name}/latest"] = AsyncCase(latest, nothing)
    measured = await time_async(cases, budget)
    return {key: m.to_json() for key, m in measured.items()}


async def _ancestry(ours: Any, filler: Any, budget: Budget) -> dict[str, Any]:
    previous = None
    newest = ""
    for index in range(DEPTH):
        checkpoint = _checkpoint(index, "chain")
        checkpoint.workflow_name = "chain"
        checkpoint.previous_checkpoint_id = previous
        previous = newest = await filler.save(checkpoint)

    async def walk_ids(_: object) -> None:
        assert len((await ours.walk_ancestry_ids(newest)).items) == DEPTH

    async def walk(_: object) -> None:
        assert len((await ours.walk_ancestry(newest)).items) == DEPTH

    cases = {"walk_ancestry_ids": AsyncCase(walk_ids, lambda n: [None] * n)}
    cases["walk_ancestry"] = AsyncCase(walk, lambda n: [None] * n)
    measured = await time_async(cases, budget)
    return {"depth": DEPTH, **{key: m.to_json() for key, m in measured.items()}}


def derive(results: dict[str, Any]) -> dict[str, float]:
    ops = results["operations"]
    small, large = (str(results["sizes"][k]) for k in ("small", "large"))

    def median(size: str, key: str) -> float:
        return float(ops[size][key]["median_us"])

    ratios: dict[str, float] = {}
    for size in (small, large):
        for op in ("save", "load", "latest"):
            ratios[f"{op}@{size} ours/raw"] = ratio(median(size, f"ours/{op}"), median(size, f"raw/{op}"))
            ratios[f"{op}@{size} lg ours/theirs"] = ratio(
                median(size, f"ours-lg/{op}"), median(size, f"theirs-lg/{op}")
            )
    ratios["latest flatness ours"] = ratio(median(large, "ours/latest"), median(small, "ours/latest"))
    ratios["latest flatness theirs"] = ratio(
        median(large, "theirs-lg/latest"), median(small, "theirs-lg/latest")
    )
    return ratios


def markdown(results: dict[str, Any]) -> str:
    small, large = results["sizes"]["small"], results["sizes"]["large"]
    ops, r = results["operations"], results["ratios"]
    server = results.get("server", {})
    lines = [
        "## PostgreSQL",
        "",
        f"PostgreSQL {server.get('version')} (synchronous_commit {server.get('synchronous_commit')}), a "
        "scratch database of the run; `bench/postgres_bench.py` describes the method. µs per operation "
        "(median); ratios below 1 mean ours is faster.",
        "",
        "| subject | "
        + " | ".join(f"{op} @{n:,}" for op in ("save", "load", "latest") for n in (small, large))
        + " |",
        "|---|" + "---:|" * 6,
    ]
    for key, label in (
        ("ours", "ours PostgresCheckpointStorage"),
        ("raw", "raw INSERT / SELECT of the same bytes"),
        ("ours-lg", "StorageSaver over ours (aput / aget_tuple)"),
        ("theirs-lg", "AsyncPostgresSaver (aput / aget_tuple)"),
    ):
        cells = [
            f"{ops[str(n)][f'{key}/{op}']['median_us']:.0f}"
            for op in ("save", "load", "latest")
            for n in (small, large)
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| ratio | value | target |", "|---|---:|---|"]
    for size in (small, large):
        lines.append(
            f"| save ours ÷ raw INSERT @{size:,} | {r[f'save@{size} ours/raw']:.2f} | ≤ {SAVE_TARGET} |"
        )
    for size in (small, large):
        for op in ("save", "load", "latest"):
            value = _ratio_text(r[f"{op}@{size} lg ours/theirs"])
            lines.append(f"| {op}: StorageSaver ÷ AsyncPostgresSaver @{size:,} | {value} | ≤ 1 |")
    flat = r["latest flatness ours"]
    lines.append(f"| get_latest flatness ours (@{large:,} ÷ @{small}) | {flat:.2f} | ≤ {FLAT_TARGET} |")
    lines.append(f"| aget_tuple latest flatness AsyncPostgresSaver | {r['latest flatness theirs']:.2f} | |")
    walk = results["ancestry"]
    lines += [
        "",
        f"Ancestry of a {walk['depth']:,}-deep chain, one recursive query: walk_ancestry_ids "
        f"{walk['walk_ancestry_ids']['median_us']:.0f} µs, walk_ancestry (bodies decoded) "
        f"{walk['walk_ancestry']['median_us']:.0f} µs.",
    ]
    return "\n".join(lines) + "\n"


def _ratio_text(value: float) -> str:
    """Two decimals, or three significant digits below 0.01: AsyncPostgresSaver's reads at
    100,000 stored are hundreds of times ours, and "0.00" would hide by how much."""
    return f"{value:.2f}" if value >= 0.01 else f"{value:.3g}"


def postgres_arguments(parser: argparse.ArgumentParser) -> None:
    """``bench.run``'s options for this section."""
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_URL,
        help="the server of the PostgreSQL section (default: $POSTGRES_URL or %(default)s)",
    )
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL section")


async def run_postgres_section(
    args: argparse.Namespace, budget: Budget, results: dict[str, Any], console: Any
) -> None:
    """Run the section for ``bench.run`` into ``results["postgres"]``; skipped when unreachable."""
    if args.no_postgres:
        results["postgres_skipped"] = "--no-postgres given"
        return
    large = QUICK_LARGE if args.quick else LARGE
    with console.status(f"PostgreSQL: filling {large:,} checkpoints and timing"):
        try:
            results["postgres"] = await run_postgres(args.postgres_url, budget, large=large)
        except psycopg.OperationalError as exc:
            results["postgres_skipped"] = f"server unreachable: {type(exc).__name__}"
            console.print(f"[yellow]Skipping the PostgreSQL section: {results['postgres_skipped']}[/]")
            return
    console.print(markdown(results["postgres"]))


def postgres_section(results: dict[str, Any]) -> list[str]:
    """The section's markdown lines for ``docs/benchmarks.md``."""
    if "postgres" in results:
        return [*markdown(results["postgres"]).splitlines(), ""]
    if "postgres_skipped" in results:
        return ["## PostgreSQL", "", f"Not measured: {results['postgres_skipped']}.", ""]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_LARGE:,} instead of {LARGE:,}; fewer repeats"
    )
    parser.add_argument("--json", help="write every number as JSON to this path")
    args = parser.parse_args(argv)
    budget = Budget(repeats=3, batch_seconds=0.1) if args.quick else Budget(repeats=7, batch_seconds=0.3)
    results = asyncio.run(run_postgres(args.url, budget, large=QUICK_LARGE if args.quick else LARGE))
    print(markdown(results))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
