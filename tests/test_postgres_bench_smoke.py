"""The PostgreSQL bench sections on tiny sizes: a broken bench must fail here, not on the next
full run. Needs the server at 127.0.0.1:5432 (each run uses a scratch database it drops)."""

from __future__ import annotations

import math

import postgres_servers
import psycopg
import pytest

from bench import postgres_bench, postgres_counts, postgres_drivers
from bench.measure import Budget

pytestmark = pytest.mark.postgres

TINY = Budget(repeats=1, batch_seconds=0.001, max_batch=3)


async def test_the_postgres_section_times_every_subject_and_drops_its_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postgres_bench, "DEPTH", 5)
    results = await postgres_bench.run_postgres(postgres_servers.server_url(), TINY, large=25)
    for size in ("10", "25"):
        keys = set(results["operations"][size])
        assert keys == {
            f"{subject}/{op}"
            for subject in ("ours", "raw", "ours-lg", "theirs-lg")
            for op in ("save", "load", "latest")
        }
    assert all(math.isfinite(value) and value > 0 for value in results["ratios"].values())
    text = postgres_bench.markdown(results)
    assert "| AsyncPostgresSaver (aput / aget_tuple) |" in text
    assert "save ours ÷ raw INSERT @25" in text
    assert results["ancestry"]["depth"] == 5
    async with await psycopg.AsyncConnection.connect(postgres_servers.server_url(), autocommit=True) as admin:
        cursor = await admin.execute(
            "SELECT count(*) FROM pg_database WHERE datname = %s", (results["database"],)
        )
        row = await cursor.fetchone()
    assert results["database"].startswith("cs_bench_")
    assert row == (0,)  # the scratch database is gone


async def test_the_driver_bench_times_both_drivers_on_the_same_statements() -> None:
    results = await postgres_drivers.run(postgres_servers.server_url(), TINY)
    assert set(results["ratios"]) == {
        "save psycopg/asyncpg",
        "load psycopg/asyncpg",
        "latest psycopg/asyncpg",
        "load pool/direct",
    }
    assert "| load |" in postgres_drivers.table(results)


async def test_the_counts_bench_counts_every_subject_and_version_2_writes_less_than_version_1() -> None:
    counts = await postgres_counts.measure(postgres_servers.server_url(), 3)
    assert set(counts) == set(postgres_counts.SUBJECTS)
    assert all(c["wal_records"] >= 1 and c["wal_bytes"] > 0 for c in counts.values())
    # Version 2 adds one index entry (the signature index) to the raw INSERT's heap row and two;
    # version 1 also rewrote the counter row, a fourth index and a speculative insertion's record.
    # (Means of 3 saves: an index page split adds a record now and then, never 3.)
    records = {subject: c["wal_records"] for subject, c in counts.items()}
    assert records["raw INSERT"] < records["version 2 save_one"] < records["version 1 save_family"]
    assert "| version 2 save_one |" in postgres_counts.table(counts)
