"""bench.run keeps the section bench.langgraph_bench wrote into docs/benchmarks.md (bench/sections.py)."""

from __future__ import annotations

from bench.sections import (
    LANGGRAPH_END,
    LANGGRAPH_HEADING,
    LANGGRAPH_START,
    kept_section,
    with_kept_sections,
)

SECTION = f"{LANGGRAPH_START}\n| table of the LangGraph run |\n{LANGGRAPH_END}\n"


def test_a_regenerated_report_keeps_the_langgraph_section_it_replaces() -> None:
    previous = "# Benchmarks\n\nold figures\n\n" + SECTION + "\nold tail\n"
    generated = "# Benchmarks\n\nnew figures\n"
    result = with_kept_sections(previous, generated)
    assert result.startswith(generated.rstrip("\n"))
    assert kept_section(result) == SECTION
    assert result.index(LANGGRAPH_HEADING) < result.index(LANGGRAPH_START)
    assert "old figures" not in result
    assert "old tail" not in result


def test_nothing_is_added_when_there_was_no_section_or_the_report_has_its_own() -> None:
    generated = "# Benchmarks\n\nnew figures\n"
    assert with_kept_sections("# Benchmarks\n\nold\n", generated) == generated
    own = generated + "\n" + SECTION.replace("LangGraph run", "new LangGraph run")
    assert with_kept_sections("old\n" + SECTION, own) == own


def test_a_section_missing_its_end_marker_is_not_kept() -> None:
    assert kept_section(f"{LANGGRAPH_START}\n| half a table |\n") == ""


def test_the_before_after_table_gives_each_change_against_the_base() -> None:
    from bench.before_after import table

    base = {"memory": {"save": 200.0, "load": 100.0}}
    head = {"memory": {"save": 210.0, "load": 99.0}}
    rendered = table(base, head, "before (abc)")
    assert "| memory | save | 200 | 210 | +5.0% |" in rendered
    assert "| memory | load | 100 | 99 | -1.0% |" in rendered
