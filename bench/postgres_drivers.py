"""Which PostgreSQL driver: psycopg 3 against asyncpg, on our workload, interleaved in one run.

``python -m bench.postgres_drivers [--url postgresql://127.0.0.1:5432/postgres] [--quick]``

Both drivers run the same three statements on the same table in a scratch database (created
and dropped here): a save (one INSERT of a 4 KB body with its index fields, autocommit, so one
commit each), a load (SELECT the body by primary key) and a latest (SELECT the newest row of a
workflow through its index). Each driver uses one connection with its statements prepared
(psycopg after its first executions, asyncpg always); psycopg is also timed through a
psycopg_pool checkout per call, which is how the storage uses it. Figures are medians in µs and
the ratio psycopg ÷ asyncpg (above 1: asyncpg faster).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import psycopg
from psycopg_pool import AsyncConnectionPool

from .measure import AsyncCase, Budget, ratio, time_async

DEFAULT_URL = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BODY = os.urandom(4096)
PREFILL = 1_000

_TABLE = """
    CREATE TABLE drivers (
        checkpoint_id text PRIMARY KEY, workflow_name text NOT NULL, sequence bigint NOT NULL,
        body bytea NOT NULL
    )
"""
_INDEX = "CREATE INDEX drivers_by_sequence ON drivers (workflow_name, sequence)"
_INSERT_PSYCOPG = "INSERT INTO drivers VALUES (%s, %s, %s, %s)"
_INSERT_ASYNCPG = "INSERT INTO drivers VALUES ($1, $2, $3, $4)"
_LOAD_PSYCOPG = "SELECT body FROM drivers WHERE checkpoint_id = %s"
_LOAD_ASYNCPG = "SELECT body FROM drivers WHERE checkpoint_id = $1"
_LATEST_PSYCOPG = "SELECT body FROM drivers WHERE workflow_name = %s ORDER BY sequence DESC LIMIT 1"
_LATEST_ASYNCPG = "SELECT body FROM drivers WHERE workflow_name = $1 ORDER BY sequence DESC LIMIT 1"


@asynccontextmanager
async def scratch_database(url: str, label: str) -> AsyncIterator[str]:
    """A database of our own on the server at ``url``, dropped afterwards; yields its URL."""
    name = f"cs_{label}_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        await admin.execute(f'CREATE DATABASE "{name}"')
    head, _, _ = url.partition("?")
    database_url = head.rsplit("/", 1)[0] + "/" + name
    try:
        yield database_url
    finally:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def run(url: str, budget: Budget) -> dict[str, Any]:
    async with scratch_database(url, "drivers") as database:
        setup = await psycopg.AsyncConnection.connect(database, autocommit=True)
        await setup.execute(_TABLE)
        await setup.execute(_INDEX)
        async with setup.cursor() as cursor:
            await cursor.executemany(_INSERT_PSYCOPG, [(f"pre-{i}", "wf", i, BODY) for i in range(PREFILL)])
        await setup.close()
        sequence = itertools.count(PREFILL)
        connection = await psycopg.AsyncConnection.connect(database, autocommit=True)
        pool = AsyncConnectionPool(database, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False)
        await pool.open(wait=True)
        native = await asyncpg.connect(database)

        def new_rows(n: int) -> list[tuple[str, str, int, bytes]]:
            return [(f"id-{(s := next(sequence))}", "wf", s, BODY) for _ in range(n)]

        def known_ids(n: int) -> list[str]:
            return [f"pre-{i % PREFILL}" for i in range(n)]

        def workflow(n: int) -> list[str]:
            return ["wf"] * n

        async def psycopg_save(row: tuple[Any, ...]) -> None:
            await connection.execute(_INSERT_PSYCOPG, row)

        async def psycopg_load(checkpoint_id: str) -> None:
            assert (await (await connection.execute(_LOAD_PSYCOPG, (checkpoint_id,))).fetchone()) is not None

        async def psycopg_latest(name: str) -> None:
            assert (await (await connection.execute(_LATEST_PSYCOPG, (name,))).fetchone()) is not None

        async def pooled_load(checkpoint_id: str) -> None:
            async with pool.connection() as pooled:
                assert (await (await pooled.execute(_LOAD_PSYCOPG, (checkpoint_id,))).fetchone()) is not None

        async def asyncpg_save(row: tuple[Any, ...]) -> None:
            await native.execute(_INSERT_ASYNCPG, *row)

        async def asyncpg_load(checkpoint_id: str) -> None:
            assert await native.fetchrow(_LOAD_ASYNCPG, checkpoint_id) is not None

        async def asyncpg_latest(name: str) -> None:
            assert await native.fetchrow(_LATEST_ASYNCPG, name) is not None

        cases = {
            "psycopg/save": AsyncCase(psycopg_save, new_rows),
            "asyncpg/save": AsyncCase(asyncpg_save, new_rows),
            "psycopg/load": AsyncCase(psycopg_load, known_ids),
            "asyncpg/load": AsyncCase(asyncpg_load, known_ids),
            "psycopg-pool/load": AsyncCase(pooled_load, known_ids),
            "psycopg/latest": AsyncCase(psycopg_latest, workflow),
            "asyncpg/latest": AsyncCase(asyncpg_latest, workflow),
        }
        try:
            measured = await time_async(cases, budget)
        finally:
            await connection.close()
            await pool.close()
            await native.close()
    medians = {name: m.median_us for name, m in measured.items()}
    ratios = {
        f"{op} psycopg/asyncpg": ratio(medians[f"psycopg/{op}"], medians[f"asyncpg/{op}"])
        for op in ("save", "load", "latest")
    }
    ratios["load pool/direct"] = ratio(medians["psycopg-pool/load"], medians["psycopg/load"])
    return {"median_us": medians, "ratios": ratios}


def table(results: dict[str, Any]) -> str:
    medians, ratios = results["median_us"], results["ratios"]
    lines = ["| operation | psycopg 3 µs | asyncpg µs | psycopg ÷ asyncpg |", "|---|---:|---:|---:|"]
    for op in ("save", "load", "latest"):
        lines.append(
            f"| {op} | {medians[f'psycopg/{op}']:.0f} | {medians[f'asyncpg/{op}']:.0f} | "
            f"{ratios[f'{op} psycopg/asyncpg']:.2f} |"
        )
    lines.append(
        f"| load through a psycopg_pool checkout | {medians['psycopg-pool/load']:.0f} | | "
        f"{ratios['load pool/direct']:.2f} (÷ direct psycopg) |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", help="write the figures as JSON to this path")
    args = parser.parse_args(argv)
    budget = Budget(repeats=3, batch_seconds=0.05) if args.quick else Budget(repeats=9, batch_seconds=0.3)
    results = asyncio.run(run(args.url, budget))
    print(table(results))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
