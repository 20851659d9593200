"""The issue 29 tails section on a tiny budget: a broken bench must fail here, not on the next
full run."""

from __future__ import annotations

import math

import pytest

from bench.measure import TIMES, Budget
from bench.tails_bench import (
    READ_POSITIONS,
    SERVER_ROWS,
    TAILS,
    markdown_table,
    redis_rows,
    replace_section,
    run_tails,
    s3_save_row,
    tails_section,
)


@pytest.mark.sqlite
async def test_every_tail_is_measured_next_to_its_floor_or_peer_and_reported() -> None:
    settings = {"history": (20,), "large": 200, "calls": 2, "rounds": 1}
    results = await run_tails(settings, Budget(repeats=1, batch_seconds=0.001, max_batch=3))
    expected = {f"sqlite_save_after_{position}@20" for position in READ_POSITIONS}
    expected |= {key for key in TAILS if not key.startswith(("sqlite_save_after_", *SERVER_ROWS))}
    assert set(results["rows"]) == expected
    assert set(results["not_run"]) == {"redis", "s3"}
    for key, row in results["rows"].items():
        assert math.isfinite(row["ratio"]), key
        assert row["ratio"] > 0, key
        assert row["ours_us"] > 0, key
        assert row["other_us"] > 0, key
    table = markdown_table(results)
    server_rows = [key for key in TAILS if key.startswith(SERVER_ROWS)]
    # A row per figure below the header, and each server row named as not run, with why.
    assert table.count("\n| ") == len(expected) + len(server_rows)
    assert table.count("| not run: ") == len(server_rows)
    assert (
        "SQLite save after list_checkpoints \N{DIVISION SIGN} raw INSERT after a SELECT of all, 20 history"
        in table
    )


@pytest.mark.redis
async def test_the_redis_rows_are_measured_on_the_server_and_leave_nothing_behind() -> None:
    import redis_servers
    from redis.asyncio import Redis

    url = redis_servers.redis_url()
    rows = await redis_rows(url, 30, 2, 1)
    assert set(rows) == {key for key in TAILS if key.startswith("redis_")}
    for key, row in rows.items():
        assert min(row.ratio, row.ours_us, row.other_us) > 0, key
    client = Redis.from_url(url)
    try:
        assert [key async for key in client.scan_iter(match="bench-tails-*")] == []
    finally:
        await client.aclose()


@pytest.mark.s3
async def test_the_s3_row_is_measured_on_a_moto_server() -> None:
    row = await s3_save_row(2, 1)
    assert min(row.ratio, row.ours_us, row.other_us) > 0


def test_a_server_row_that_could_not_run_says_why() -> None:
    results = {"rows": {}, "not_run": {"redis": "the Redis server could not be used: ConnectionError"}}
    table = markdown_table(results)
    redis_keys = [key for key in TAILS if key.startswith("redis_")]
    assert table.count("not run: the Redis server could not be used: ConnectionError") == len(redis_keys)
    assert "S3" not in table


def test_the_section_replaces_its_previous_version_in_place() -> None:
    results = {
        "settings": {"history": [20], "calls": 2, "rounds": 1},
        "rows": {
            "memory_load_flat": {"ratio": 1.0, "quartiles": [1.0, 1.0], "ours_us": 2.0, "other_us": 2.0}
        },
    }
    section = "\n".join(tails_section(results, "python -m bench.tails_bench"))
    document = replace_section("# Benchmarks\n\nbefore\n", section)
    assert document.startswith("# Benchmarks\n\nbefore\n\n<!-- tails-bench:start -->")
    again = replace_section(document + "\nafter\n", section.replace(f"1.00{TIMES}", f"2.00{TIMES}"))
    assert again.count("<!-- tails-bench:start -->") == 1
    assert f"2.00{TIMES}" in again
    assert f"1.00{TIMES}" not in again
    assert again.endswith("\nafter\n")
