"""bench.codec_rows on a tiny budget: every row of every subject is measured and reported, and the
programs its callgrind counts run; a broken bench must fail here, not on the next full run."""

from __future__ import annotations

import math
import subprocess
import sys

from bench.callgrind_codec import REPO_ROOT
from bench.codec_rows import (
    END,
    PEERS,
    SHAPES,
    SIZES,
    START,
    SUBJECTS,
    callgrind_script,
    replace_section,
    run,
    section,
    tables,
)


def test_every_codec_row_is_timed_against_every_peer_and_tabled() -> None:
    results = run(calls=1, rounds=1, callgrind=False)
    labels = [f"{size} {shape}" for size, _ in SIZES for shape, _ in SHAPES]
    assert list(results["rows"]) == labels
    for label, row in results["rows"].items():
        timed = row["timed"]
        assert set(timed["us"]) == set(SUBJECTS), label
        assert all(math.isfinite(value) and value > 0 for value in timed["us"].values()), label
        for peer in PEERS:
            assert timed["ratios"][peer] == timed["us"]["ours"] / timed["us"][peer], (label, peer)
        assert "counted" not in row
    rendered = tables(results)
    assert rendered.count("\n| ") == 1 + len(labels)  # the header and a line per row
    assert "Instructions" not in rendered
    counted = {"instructions": {subject: 2000.0 for subject in SUBJECTS}, "ratios": dict.fromkeys(PEERS, 1.0)}
    results["rows"]["1 MB text"]["counted"] = counted
    assert "| 1 MB text | 2 k | 2 k (1.00\N{MULTIPLICATION SIGN})" in tables(results)


def test_the_programs_callgrind_counts_run() -> None:
    # Without valgrind: each subject's program, on the small row, must run and check its result
    # (one interpreter for all four: the programs share nothing but their imports).
    programs = "\n".join(callgrind_script(subject, "blob", 1_000, 2) for subject in SUBJECTS)
    subprocess.run([sys.executable, "-c", programs], cwd=REPO_ROOT, check=True, timeout=120)


def test_the_section_is_replaced_in_place() -> None:
    results = {"settings": {"calls": 1, "rounds": 1, "callgrind": False}, "rows": {}}
    document = replace_section("# Benchmarks\n\nbefore\n", section(results, "python -m bench.codec_rows"))
    assert document.count(START) == 1
    again = replace_section(document + "\nafter\n", section(results, "python -m bench.codec_rows --calls 9"))
    assert again.count(START) == again.count(END) == 1
    assert "--calls 9" in again
    assert again.endswith("\nafter\n")
