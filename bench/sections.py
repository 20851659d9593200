"""Sections that a bench command other than ``bench.run`` writes into a shared markdown file.

``bench.langgraph_bench --markdown PATH`` replaces its section between these markers; ``bench.run
--markdown PATH`` regenerates the rest of the file and keeps such a section as it found it, so
docs/benchmarks.md carries both commands' tables, each stating the command and run it came from.
"""

from __future__ import annotations

LANGGRAPH_START = "<!-- langgraph-bench:start -->"
LANGGRAPH_END = "<!-- langgraph-bench:end -->"
LANGGRAPH_HEADING = "## LangGraph: StorageSaver against LangGraph's own savers (`bench.langgraph_bench`)"
"""What ``bench.run`` puts above the kept section (the section itself starts with its command)."""


def kept_section(document: str, start: str = LANGGRAPH_START, end: str = LANGGRAPH_END) -> str:
    """The section of ``document`` between ``start`` and ``end``, markers included ("" if none)."""
    first, last = document.find(start), document.find(end)
    if first == -1 or last == -1 or last < first:
        return ""
    return document[first : last + len(end)] + "\n"


def with_kept_sections(previous: str, generated: str) -> str:
    """``generated`` with the sections other commands wrote into ``previous`` appended."""
    kept = kept_section(previous)
    if not kept or kept_section(generated):
        return generated
    return generated.rstrip("\n") + "\n\n" + LANGGRAPH_HEADING + "\n\n" + kept
