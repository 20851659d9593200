"""The issue 15 targets section and the callgrind script, on a tiny budget: a broken bench must
fail here, not on the next full run."""

from __future__ import annotations

import math

import pytest

from bench.callgrind_codec import SUBJECTS, ratios, table
from bench.measure import TIMES, Budget
from bench.report import callgrind_target_rows, targets_table
from bench.targets_bench import FLOORS, TARGETS, run_targets, target_met


@pytest.mark.sqlite
async def test_every_target_is_measured_next_to_its_peer_and_reported() -> None:
    results = await run_targets(Budget(repeats=1, batch_seconds=0.001, max_batch=3), saves_each=1, rounds=1)
    assert set(results["measured"]) == set(TARGETS)
    for key, value in results["measured"].items():
        assert math.isfinite(value), key
        assert value > 0, key
    assert set(results["medians_us"]) == {
        "codec/ours",
        "codec/msgspec",
        "codec/jsonplus",
        "memory/ours",
        "memory/inmemorysaver",
        "sqlite/ours-full",
        "sqlite/ours-normal",
        "sqlite/asyncsqlitesaver",
        "sqlite/raw-full",
        "sqlite/raw-normal",
    } | {
        f"{backend}/{side}-{read}"
        for backend in ("memory", "sqlite")
        for side in ("ours", "peer")
        for read in ("load", "latest", "list")
    }
    assert results["measured"]["s3_save_requests"] == results["s3_costs"]["rows"]["save"]["total"]
    assert set(results["writers"]["saves_per_second"]) == {"ours-shared", "ours-handles", "raw-shared"}
    rendered = targets_table(results).to_markdown()
    for label, _ in TARGETS.values():
        assert label in rendered
    assert rendered.count("\n| ") == len(TARGETS)  # a row per target below the header


def test_target_verdicts_read_ceilings_and_floors_the_right_way_round() -> None:
    ceiling = "codec_vs_msgspec"
    (floor,) = FLOORS
    assert target_met(ceiling, 1.5)
    assert not target_met(ceiling, 1.51)
    assert target_met(floor, 0.8)
    assert not target_met(floor, 0.79)


def test_the_callgrind_table_compares_ours_with_both_peers() -> None:
    counts = {name: 100.0 for name in SUBJECTS} | {"ours/encode": 150.0, "ours/decode": 150.0}
    counts["memory-ours/latest"] = 120.0
    found = ratios(counts)
    assert found == {
        "ours_over_msgspec": 1.5,
        "ours_over_jsonplus": 1.5,
        "memory_save_over_inmemorysaver": 1.0,
        "memory_load_over_inmemorysaver": 1.0,
        "memory_latest_over_inmemorysaver": 1.2,
        "memory_list_over_inmemorysaver": 1.0,
    }
    rendered = table(counts)
    assert "| ours | 150 | 150 | 300 |" in rendered
    assert "ours ÷ plain msgspec 1.50" in rendered
    assert "memory ours ÷ InMemorySaver: save 1.00, load 1.00, latest 1.20, list 1.00." in rendered
    times = TIMES
    rows = {row[0]: row[1:4] for row in callgrind_target_rows(found)}
    latest = rows["Memory get_latest instructions ÷ InMemorySaver (callgrind)"]
    assert latest == [f"≤ 1{times}", f"1.20{times}", f"missed by 1.20{times}"]
    save = rows["Memory save instructions ÷ InMemorySaver (callgrind)"]
    assert save == [f"≤ 1{times}", f"1.00{times}", "met"]
    codec = rows["Codec encode+decode instructions ÷ plain msgspec (callgrind)"]
    assert codec == [f"≤ 1.5{times}", f"1.50{times}", "met"]
    assert len(rows) == 6


def test_the_callgrind_programs_run() -> None:
    """Without valgrind: every program it would measure must run (a broken setup fails here)."""
    import subprocess
    import sys

    from bench.callgrind_codec import _SETUP, REPO_ROOT

    for name, (setup, call) in SUBJECTS.items():
        script = f"{_SETUP}\n{setup}\nfor _ in range(2):\n    {call}\n"
        assert subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT).returncode == 0, name
