"""``inspect --html`` and ``diff --html``: one self-contained page (inline CSS and JS, nothing
fetched) that draws a lineage as a graph.

The layout is computed here, in Python: one row per drawn checkpoint (in the terminal tree's
order), one lane per indentation level, an edge from each checkpoint to the one it hangs under
(previous link, container or subgraph parent), and a tombstone node before a checkpoint that
continues from a pruned one. The page's script draws only the rows in view (an SVG rebuilt on
scroll), so 10,000 checkpoints stay usable. Clicking a node shows its fields and what changed
against its parent; ``#select=ID`` in the page's address selects one on load.

Everything from the store reaches the page as JSON data inside a script element (``<`` escaped)
and is shown with ``textContent``: no stored string is ever markup.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from importlib import resources
from pathlib import Path
from typing import Any

from ..contract import CheckpointID, CheckpointStorage
from ..errors import CheckpointStorageError
from ..verify import abbreviate_signature
from .diff import CheckpointDiff, checkpoint_sections, diff_sections
from .lineage import LineageStart, LineageTree, Relation, stream_lineage
from .render import short_timestamp
from .threads import langgraph_place, shown_id
from .views import abbreviate_value

_IN_INDEX = frozenset(
    {"workflow_name", "previous_checkpoint_id", "graph_signature_hash", "timestamp", "iteration_count"}
)
"""Sections already shown from the index or the body's peeked fields."""

_SECTION_CACHE = 64
"""Decoded checkpoints kept for diffing against their parent (a parent is nearly always a few
rows above its child in drawing order)."""


async def lineage_page_data(storage: CheckpointStorage, tree: LineageTree, *, title: str) -> dict[str, Any]:
    """The page's data: nodes with their row, lane, parent, fields and diff against the parent."""
    nodes: list[dict[str, Any]] = []
    index: dict[CheckpointID, int] = {}
    cache: OrderedDict[CheckpointID, dict[str, Any] | None] = OrderedDict()
    row = 0
    async for line in stream_lineage(storage, tree):
        entry = line.entry
        info = entry.info
        if info is None:
            continue
        if entry.start is LineageStart.PRUNED and info.previous_checkpoint_id is not None:
            nodes.append(
                {
                    "row": row,
                    "lane": entry.level,
                    "id": info.previous_checkpoint_id,
                    "label": f"pruned {info.previous_checkpoint_id}",
                    "kind": "tombstone",
                    "parent": None,
                }
            )
            index.setdefault(info.previous_checkpoint_id, len(nodes) - 1)
            row += 1
        parent = entry.parent_id
        if parent is None and entry.start is LineageStart.PRUNED:
            parent = info.previous_checkpoint_id
        sections = await _sections(storage, info.checkpoint_id, cache)
        compared_with = info.previous_checkpoint_id if entry.relation is not Relation.NESTED else None
        diff = None
        if sections is not None and compared_with is not None and tree.record(compared_with) is not None:
            previous = await _sections(storage, compared_with, cache)
            if previous is not None:
                diff = diff_sections(compared_with, previous, info.checkpoint_id, sections)
        place = langgraph_place(info.workflow_name)
        flags = [
            name
            for name, present in (
                ("latest", entry.latest),
                ("signature-changed", entry.signature_changed),
                ("nested", entry.relation is Relation.NESTED or info.nested),
                ("subgraph", entry.relation is Relation.SUBGRAPH),
                ("missing", entry.start is LineageStart.MISSING),
                ("cycle", entry.start is LineageStart.CYCLE),
                ("root", entry.start is LineageStart.ROOT),
                ("after-pruned", entry.start is LineageStart.PRUNED),
            )
            if present
        ]
        fields = line.fields
        node = {
            "row": row,
            "lane": entry.level,
            "id": info.checkpoint_id,
            "label": shown_id(info.checkpoint_id, info.workflow_name),
            "kind": "checkpoint",
            "flags": flags,
            "parent": None if parent is None else index.get(parent),
            "relation": None if entry.relation is None else entry.relation.value,
            "fields": _fields(info, fields, place, sections),
            "diff": None if diff is None else _diff_data(diff),
        }
        index[info.checkpoint_id] = len(nodes)
        nodes.append(node)
        row += 1
    return {
        "title": title,
        "workflow": tree.workflow_name,
        "rows": row,
        "nodes": nodes,
        "forks": tree.forks,
        "checkpoints": tree.checkpoints,
        "nested": tree.nested_count,
        "pruned": tree.pruned,
    }


async def _sections(
    storage: CheckpointStorage,
    checkpoint_id: CheckpointID,
    cache: OrderedDict[CheckpointID, dict[str, Any] | None],
) -> dict[str, Any] | None:
    if checkpoint_id in cache:
        cache.move_to_end(checkpoint_id)
        return cache[checkpoint_id]
    try:
        sections: dict[str, Any] | None = await checkpoint_sections(storage, checkpoint_id)
    except (CheckpointStorageError, ValueError):
        sections = None  # unreadable or refused: shown by its missing fields
    cache[checkpoint_id] = sections
    if len(cache) > _SECTION_CACHE:
        cache.popitem(last=False)
    return sections


def _fields(
    info: Any, body: Any, place: tuple[str, str] | None, sections: dict[str, Any] | None
) -> list[list[str]]:
    shown = [
        ["checkpoint_id", info.checkpoint_id],
        ["workflow_name", info.workflow_name],
        ["previous_checkpoint_id", str(info.previous_checkpoint_id)],
        ["graph_signature_hash", abbreviate_signature(info.graph_signature_hash, 16)],
        ["sequence", str(info.sequence)],
        ["size", f"{info.size} bytes"],
    ]
    if info.container_id is not None:
        shown.append(["container", info.container_id])
    if place is not None:
        shown += [["thread_id", place[0]], ["checkpoint_ns", place[1]]]
    if body is not None:
        if body.timestamp is not None:
            shown.append(["timestamp", short_timestamp(body.timestamp)])
        if body.iteration_count is not None:
            shown.append(["iteration_count", str(body.iteration_count)])
        if body.error is not None:
            shown.append(["body", f"unreadable: {body.error}"])
    if sections is None:
        shown.append(["body", "cannot be loaded with this codec"])
    else:
        shown += [
            [name, abbreviate_value(value)]
            for name, value in sections.items()
            if name
            not in (
                "workflow_name",
                "previous_checkpoint_id",
                "graph_signature_hash",
                "timestamp",
                "iteration_count",
            )
        ]
    return shown


def _diff_data(diff: CheckpointDiff) -> dict[str, Any]:
    return {
        "against": diff.old_id,
        "changes": [[change.path, change.kind.value, change.old, change.new] for change in diff.changes],
        "omitted": diff.omitted,
    }


def page(data: dict[str, Any]) -> str:
    """The HTML page for ``data`` (from :func:`lineage_page_data`, or a diff's)."""
    payload = json.dumps(data, ensure_ascii=True).replace("<", "\\u003c").replace(">", "\\u003e")
    payload = payload.replace("&", "\\u0026")
    template = resources.files(__package__).joinpath("lineage_page.html").read_text(encoding="utf-8")
    return template.replace("__DATA__", payload)


async def write_lineage_html(storage: CheckpointStorage, tree: LineageTree, out: Path, *, title: str) -> None:
    """Write the lineage page to ``out``; the page is built in memory (it is one file)."""
    text = page(await lineage_page_data(storage, tree, title=title))
    await asyncio.to_thread(out.write_text, text, encoding="utf-8")


def write_diff_html(diff: CheckpointDiff, out: Path, *, title: str) -> None:
    data = {
        "title": title,
        "workflow": f"diff {diff.old_id} -> {diff.new_id}",
        "rows": 0,
        "nodes": [],
        "forks": 0,
        "checkpoints": 0,
        "nested": 0,
        "pruned": 0,
        "diff": _diff_data(diff),
    }
    out.write_text(page(data), encoding="utf-8")


__all__ = ["lineage_page_data", "page", "write_diff_html", "write_lineage_html"]
