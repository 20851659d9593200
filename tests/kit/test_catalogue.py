"""The clause registry is well formed and docs/conformance.md is generated from it."""

from __future__ import annotations

import difflib
from collections import Counter
from pathlib import Path

import pytest

from conformance import FAMILIES, all_clauses
from conformance.catalogue import main, render_catalogue

CATALOGUE = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"


def test_docs_catalogue_is_up_to_date() -> None:
    current = CATALOGUE.read_text(encoding="utf-8") if CATALOGUE.exists() else ""
    rendered = render_catalogue()
    if current != rendered:
        diff = difflib.unified_diff(
            current.splitlines(),
            rendered.splitlines(),
            "docs/conformance.md",
            "render_catalogue()",
            lineterm="",
        )
        pytest.fail(
            "docs/conformance.md is stale; run `python -m conformance.catalogue` from the repository root\n"
            + "\n".join(list(diff)[:30]),
            pytrace=False,
        )


def test_rendering_is_deterministic() -> None:
    assert render_catalogue() == render_catalogue()


def test_catalogue_lists_every_clause_and_family() -> None:
    rendered = render_catalogue()
    for clause in all_clauses():
        assert f"| `{clause.id}` | {clause.guarantee.replace('|', chr(92) + '|')} |" in rendered
    for family, description in FAMILIES.items():
        assert f"\n## {family}\n\n{description}\n" in rendered


def test_clause_ids_are_unique() -> None:
    duplicated = [clause_id for clause_id, n in Counter(c.id for c in all_clauses()).items() if n > 1]
    assert not duplicated


def test_clause_ids_are_family_dot_name() -> None:
    for clause in all_clauses():
        assert clause.family in FAMILIES, clause.id
        assert clause.id == f"{clause.family}.{clause.name}"
        assert clause.name, clause.id


def test_guarantees_are_one_line() -> None:
    for clause in all_clauses():
        assert clause.guarantee.strip() == clause.guarantee, clause.id
        assert clause.guarantee, clause.id
        assert "\n" not in clause.guarantee, clause.id


def test_every_family_has_a_clause() -> None:
    families_with_clauses = {c.family for c in all_clauses()}
    empty = [family for family in FAMILIES if family not in families_with_clauses]
    assert not empty, f"families without clauses: {empty}"


def test_check_reports_a_stale_file(tmp_path: Path) -> None:
    output = tmp_path / "conformance.md"
    output.write_text("old\n", encoding="utf-8")
    assert main(["--check", "--output", str(output)]) == 1
    assert main(["--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8") == render_catalogue()
    assert main(["--check", "--output", str(output)]) == 0


def test_check_reports_a_missing_file(tmp_path: Path) -> None:
    assert main(["--check", "--output", str(tmp_path / "missing.md")]) == 1
