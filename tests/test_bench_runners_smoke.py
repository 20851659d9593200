"""Smoke tests of bench/runners_bench.py: each pair runs end to end, tiny, and renders its row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.runners_bench import END, START, main


@pytest.mark.parametrize(
    ("pairs", "labels"),
    [
        pytest.param(
            "crewai-sqlite,burr-sqlite", ["CrewAI, SQLite", "Burr, SQLite"], marks=pytest.mark.sqlite
        ),
        pytest.param("burr-redis", ["Burr, Redis"], marks=pytest.mark.redis),
    ],
)
def test_the_runners_bench_measures_each_pair(pairs: str, labels: list[str], tmp_path: Path) -> None:
    document, figures = tmp_path / "benchmarks.md", tmp_path / "results.json"
    document.write_text("# Benchmarks\n", encoding="utf-8")
    argv = [
        "--rounds",
        "2",
        "--ops",
        "2",
        "--pairs",
        pairs,
        "--markdown",
        str(document),
        "--json",
        str(figures),
    ]
    assert main(argv) == 0
    results = json.loads(figures.read_text(encoding="utf-8"))
    assert list(results["pairs"]) == labels
    for row in results["pairs"].values():
        assert row["save_ratio"] > 0
        assert row["load_ratio"] > 0
    text = document.read_text(encoding="utf-8")
    assert text.count(START) == text.count(END) == 1
    assert main(argv) == 0  # a second run replaces its section
    assert document.read_text(encoding="utf-8").count(START) == 1
