"""What one PostgreSQL save makes the server do, in counts machine load cannot blur.

``python -m bench.postgres_counts [--url postgresql://127.0.0.1:5432/postgres] [--saves 300]``

Each save of the bench checkpoint runs under ``EXPLAIN (ANALYZE, BUFFERS, WAL)``, which counts
the WAL records and bytes it wrote and the shared buffers it touched, the statements a plpgsql
function runs included; the means over ``--saves`` saves (after 20 untimed ones) are printed.
Three subjects on the same records, in a scratch database created here and dropped at the end:

* the raw INSERT of bench/postgres_bench.py (a primary key and a ``(workflow_name, sequence)``
  index);
* schema version 1's ``save_family``, called as version-1 code called it (text arrays), on a
  schema built from ``MIGRATIONS[0]``: the save before the version-2 changes;
* this code's save statement (``save_one``) on a schema at the current version.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
from typing import Any

import psycopg

from storages.postgres import MIGRATIONS, PostgresCheckpointStorage
from storages.postgres.commit import _SAVE, _SAVE_ONE
from storages.postgres.schema import CREATE_SCHEMA, CREATE_SCHEMA_VERSION, RECORD_VERSION, render

from .postgres_bench import DEFAULT_URL, _checkpoint, _with_query
from .postgres_drivers import scratch_database

WARM_UP = 20
SUBJECTS = ("raw INSERT", "version 1 save_family", "version 2 save_one")
_COUNTS = {
    "wal_records": r"WAL: records=(\d+)",
    "wal_bytes": r"WAL:.*?bytes=(\d+)",
    "full_page_images": r"WAL:.*?fpi=(\d+)",
    "buffers_hit": r"shared hit=(\d+)",
    "buffers_dirtied": r"dirtied=(\d+)",
}


def _counts(plan: list[str]) -> dict[str, int]:
    text = "\n".join(plan).split("Planning")[0]  # the top node's totals come first
    found: dict[str, int] = {}
    for name, pattern in _COUNTS.items():
        match = re.search(pattern, text)
        found[name] = int(match.group(1)) if match else 0
    return found


async def measure(url: str, saves: int) -> dict[str, dict[str, float]]:
    """Mean counts per save of each subject."""
    async with scratch_database(url, "counts") as database:
        connection = await psycopg.AsyncConnection.connect(database, autocommit=True)
        storage = PostgresCheckpointStorage.from_url(_with_query(database, "schema=v2"))
        try:
            async with connection.transaction():
                await connection.execute(render(CREATE_SCHEMA, "v1"))
                await connection.execute(render(CREATE_SCHEMA_VERSION, "v1"))
                for statement in MIGRATIONS[0]:
                    await connection.execute(render(statement, "v1"))
                await connection.execute(render(RECORD_VERSION, "v1"), (1,))
            await storage.get_latest(workflow_name="open")  # creates and migrates schema v2
            await connection.execute(
                "CREATE TABLE raw (checkpoint_id text PRIMARY KEY, workflow_name text NOT NULL, "
                "sequence bigint NOT NULL, body bytea NOT NULL)"
            )
            await connection.execute("CREATE INDEX raw_by_sequence ON raw (workflow_name, sequence)")
            version_1, version_2 = render(_SAVE, "v1"), render(_SAVE_ONE, "v2")
            samples: dict[str, list[dict[str, int]]] = {subject: [] for subject in SUBJECTS}
            for index in range(WARM_UP + saves):
                (r,) = storage.records_for(_checkpoint(index))
                statements: dict[str, tuple[str, Any]] = {
                    "raw INSERT": (
                        "INSERT INTO raw VALUES (%s, %s, %s, %s)",
                        (r.checkpoint_id, r.workflow_name, index, r.body),
                    ),
                    "version 1 save_family": (
                        version_1.replace("%b", "%s"),  # version 1 sent text arrays
                        (
                            [r.checkpoint_id],
                            [r.workflow_name],
                            [r.previous_checkpoint_id],
                            [r.graph_signature_hash],
                            [r.digest],
                            [r.body],
                            [None],
                            [None],
                            [0],
                            False,
                            None,
                        ),
                    ),
                    "version 2 save_one": (
                        version_2,
                        (
                            r.checkpoint_id,
                            r.workflow_name,
                            r.previous_checkpoint_id,
                            r.graph_signature_hash,
                            r.digest,
                            r.body,
                            False,
                            None,
                        ),
                    ),
                }
                for subject, (query, parameters) in statements.items():
                    cursor = await connection.execute(
                        "EXPLAIN (ANALYZE, BUFFERS, WAL, TIMING OFF, COSTS OFF) " + query, parameters
                    )
                    if index >= WARM_UP:
                        samples[subject].append(_counts([str(row[0]) for row in await cursor.fetchall()]))
        finally:
            await storage.aclose()
            await connection.close()
    return {
        subject: {name: statistics.mean(sample[name] for sample in rows) for name in _COUNTS}
        for subject, rows in samples.items()
    }


def table(counts: dict[str, dict[str, float]]) -> str:
    lines = [
        "| per save | WAL records | WAL bytes | full-page images | shared buffers hit | dirtied |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for subject, c in counts.items():
        lines.append(
            f"| {subject} | {c['wal_records']:.2f} | {c['wal_bytes']:.0f} | {c['full_page_images']:.2f} "
            f"| {c['buffers_hit']:.1f} | {c['buffers_dirtied']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--saves", type=int, default=300)
    args = parser.parse_args(argv)
    print(table(asyncio.run(measure(args.url, args.saves))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
