"""The issue 29 tails section on a tiny budget: a broken bench must fail here, not on the next
full run."""

from __future__ import annotations

import math

import pytest

from bench.measure import Budget
from bench.report import TIMES
from bench.tails_bench import READ_POSITIONS, TAILS, markdown_table, replace_section, run_tails, tails_section


@pytest.mark.sqlite
async def test_every_tail_is_measured_next_to_its_floor_or_peer_and_reported() -> None:
    settings = {"history": (20,), "large": 200, "calls": 2, "rounds": 1}
    results = await run_tails(settings, Budget(repeats=1, batch_seconds=0.001, max_batch=3))
    expected = {f"sqlite_save_after_{position}@20" for position in READ_POSITIONS}
    expected |= {key for key in TAILS if not key.startswith("sqlite_save_after_")}
    assert set(results["rows"]) == expected
    for key, row in results["rows"].items():
        assert math.isfinite(row["ratio"]), key
        assert row["ratio"] > 0, key
        assert row["ours_us"] > 0, key
        assert row["other_us"] > 0, key
    table = markdown_table(results)
    assert table.count("\n| ") == len(expected)  # a row per figure below the header
    assert (
        "SQLite save after list_checkpoints \N{DIVISION SIGN} raw INSERT after a SELECT of all, 20 history"
        in table
    )


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
