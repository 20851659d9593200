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


RUNNERS_START = "<!-- runners-bench:start -->"
RUNNERS_END = "<!-- runners-bench:end -->"
RUNNERS_HEADING = (
    "## CrewAI and Burr: our adapters against the runners' own persisters (`bench.runners_bench`)"
)

BEFORE_AFTER_START = "<!-- before-after:start -->"
BEFORE_AFTER_END = "<!-- before-after:end -->"
BEFORE_AFTER_HEADING = "## Instructions per operation before and after a change (`bench.before_after`)"

CODEC_ROWS_START = "<!-- codec-rows:start -->"
CODEC_ROWS_END = "<!-- codec-rows:end -->"
CODEC_ROWS_HEADING = "## Codec rows: ours against msgspec, orjson and JsonPlusSerializer (`bench.codec_rows`)"

KEPT_SECTIONS: tuple[tuple[str, str, str], ...] = (
    (LANGGRAPH_START, LANGGRAPH_END, LANGGRAPH_HEADING),
    (RUNNERS_START, RUNNERS_END, RUNNERS_HEADING),
    (BEFORE_AFTER_START, BEFORE_AFTER_END, BEFORE_AFTER_HEADING),
    (CODEC_ROWS_START, CODEC_ROWS_END, CODEC_ROWS_HEADING),
)
"""(start, end, heading) of every section another command writes into docs/benchmarks.md."""


def kept_section(document: str, start: str = LANGGRAPH_START, end: str = LANGGRAPH_END) -> str:
    """The section of ``document`` between ``start`` and ``end``, markers included ("" if none)."""
    first, last = document.find(start), document.find(end)
    if first == -1 or last == -1 or last < first:
        return ""
    return document[first : last + len(end)] + "\n"


def with_kept_sections(previous: str, generated: str) -> str:
    """``generated`` with the sections other commands wrote into ``previous`` appended."""
    for start, end, heading in KEPT_SECTIONS:
        kept = kept_section(previous, start, end)
        if kept and not kept_section(generated, start, end):
            generated = generated.rstrip("\n") + "\n\n" + heading + "\n\n" + kept
    return generated


def replace_section(document: str, body: str, start: str, end: str, heading: str) -> str:
    """``document`` with the section between ``start`` and ``end`` holding ``body`` (appended under
    ``heading`` when the document has no such section)."""
    section = f"{start}\n{body.rstrip(chr(10))}\n{end}"
    first, last = document.find(start), document.find(end)
    if first != -1 and last > first:
        return document[:first] + section + document[last + len(end) :]
    return document.rstrip("\n") + "\n\n" + heading + "\n\n" + section + "\n"
