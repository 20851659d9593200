"""``inspect --html`` and ``diff --html``: one self-contained page (inline CSS and JS, nothing
fetched) that draws a lineage as a graph, or a diff across the whole page.

The layout is computed here, in Python: one row per drawn checkpoint (in the terminal tree's
order), one lane per indentation level, an edge from each checkpoint to the one it hangs under
(previous link, container or subgraph parent), and a tombstone node before a checkpoint that
continues from a pruned one. Each node says what a person picks a checkpoint by: its step, the
nodes it runs next (LangGraph) or the executors that sent its messages (MAF), a wait on a person
(an interrupt, a pending request), the branch of a fork it is on; a damaged body is drawn as such
with its cause (a checksum mismatch is not a codec refusal). The page's script draws only the
rows in view (an SVG rebuilt on scroll), so 10,000 checkpoints stay usable. Clicking a node shows
its fields, each value abbreviated and expandable to the whole of it (as JSON), and what changed
against its parent; ``#select=ID`` in the page's address selects one on load.

Everything from the store reaches the page as JSON data inside a script element (``<`` escaped)
and is shown with ``textContent``: no stored string is ever markup.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ...contract import CheckpointID, CheckpointInfo, CheckpointStorage
from ...errors import CheckpointCorruptedError, CheckpointStorageError, CheckpointTypeNotAllowedError
from ..verify import abbreviate_signature
from .diff import Change, CheckpointDiff, checkpoint_sections, diff_sections
from .lineage import LineageEntry, LineageStart, LineageTree, Relation, stream_lineage
from .peek import BodyFields
from .render import short_timestamp
from .threads import langgraph_place, shown_id
from .values import json_value
from .views import abbreviate_value

_IN_INDEX = frozenset(
    {"workflow_name", "previous_checkpoint_id", "graph_signature_hash", "timestamp", "iteration_count"}
)
"""Sections already shown from the index or the body's peeked fields."""

_SECTION_CACHE = 64
"""Decoded checkpoints kept for diffing against their parent (a parent is nearly always a few
rows above its child in drawing order)."""

FULL_VALUE_LIMIT = 64 * 1024
"""Longest whole value (its JSON text) a field or a change carries for expanding, in characters."""
PAGE_VALUE_BUDGET = 16 * 1024 * 1024
"""Characters of whole values one page carries at most; past it, values are abbreviated only
(``inspect --checkpoint ID --json`` has them all)."""


@dataclass(slots=True)
class _Budget:
    left: int = PAGE_VALUE_BUDGET

    def whole(self, value: Any, shown: str) -> str | None:
        """``value`` as indented JSON to expand ``shown`` into, or None for a value ``shown``
        whole (a number, a short string, an empty container)."""
        if not _says_more(value, shown):
            return None
        text = json.dumps(json_value(value), indent=1, ensure_ascii=False)
        if len(text) > FULL_VALUE_LIMIT or len(text) > self.left:
            return (
                f"(too large for this page: {len(text):,} characters of JSON; inspect --checkpoint ID --json)"
            )
        self.left -= len(text)
        return text


def _says_more(value: Any, shown: str) -> bool:
    if value is None or isinstance(value, (bool, int, float)):
        return False
    if isinstance(value, str):
        return repr(value) != shown
    return not (isinstance(value, (dict, list, tuple, set, frozenset)) and not value)


@dataclass(frozen=True, slots=True)
class _Body:
    """What loading a checkpoint gave: its sections, or why it could not be loaded."""

    sections: dict[str, Any] | None
    damaged: str | None = None
    """The body cannot be read: the cause (a checksum mismatch, a bad frame, a codec error)."""
    refused_type: str | None = None
    """The body is intact but names a type this codec does not build."""


async def lineage_page_data(storage: CheckpointStorage, tree: LineageTree, *, title: str) -> dict[str, Any]:
    """The page's data: nodes with their row, lane, parent, fields and diff against the parent."""
    nodes: list[dict[str, Any]] = []
    index: dict[CheckpointID, int] = {}
    cache: OrderedDict[CheckpointID, _Body] = OrderedDict()
    budget = _Budget()
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
        body = await _load(storage, info.checkpoint_id, cache)
        compared_with = info.previous_checkpoint_id if entry.relation is not Relation.NESTED else None
        diff = None
        if body.sections is not None and compared_with is not None and tree.record(compared_with) is not None:
            previous = await _load(storage, compared_with, cache)
            if previous.sections is not None:
                diff = diff_sections(compared_with, previous.sections, info.checkpoint_id, body.sections)
        fields = line.fields or BodyFields()
        damaged = fields.error or body.damaged
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
                ("damaged", damaged is not None),
                ("refused", damaged is None and body.refused_type is not None),
                ("interrupt", fields.interrupt == "waiting" or fields.waiting > 0),
            )
            if present
        ]
        node = {
            "row": row,
            "lane": entry.level,
            "id": info.checkpoint_id,
            "name": shown_id(info.checkpoint_id, info.workflow_name),
            "label": _label(entry, info, fields),
            "kind": "checkpoint",
            "flags": flags,
            "parent": None if parent is None else index.get(parent),
            "relation": None if entry.relation is None else entry.relation.value,
            "fields": _fields(info, entry, fields, body, damaged, budget),
            "diff": None if diff is None else _diff_data(diff, budget),
        }
        index[info.checkpoint_id] = len(nodes)
        nodes.append(node)
        row += 1
    return {
        "mode": "lineage",
        "title": title,
        "workflow": tree.workflow_name,
        "rows": row,
        "nodes": nodes,
        "forks": tree.forks,
        "checkpoints": tree.checkpoints,
        "nested": tree.nested_count,
        "pruned": tree.pruned,
    }


async def _load(
    storage: CheckpointStorage, checkpoint_id: CheckpointID, cache: OrderedDict[CheckpointID, _Body]
) -> _Body:
    if checkpoint_id in cache:
        cache.move_to_end(checkpoint_id)
        return cache[checkpoint_id]
    try:
        body = _Body(await checkpoint_sections(storage, checkpoint_id))
    except CheckpointTypeNotAllowedError as exc:
        body = _Body(None, refused_type=exc.type_key)
    except CheckpointCorruptedError as exc:
        body = _Body(None, damaged=exc.reason)
    except (CheckpointStorageError, ValueError) as exc:
        body = _Body(None, damaged=str(exc))
    cache[checkpoint_id] = body
    if len(cache) > _SECTION_CACHE:
        cache.popitem(last=False)
    return body


def _label(entry: LineageEntry, info: CheckpointInfo, fields: BodyFields) -> str:
    """The node's line beside the graph: its id, then what a person picks a checkpoint by."""
    parts = [shown_id(info.checkpoint_id, info.workflow_name)]
    if fields.step is not None:
        parts.append(f"step {fields.step}")
    if fields.nodes:
        parts.append(f"{fields.nodes_role} {', '.join(fields.nodes)}")
    if fields.waiting:
        parts.append(f"waiting on {fields.waiting} request{'' if fields.waiting == 1 else 's'}")
    if fields.interrupt == "waiting":
        parts.append("interrupt waiting")
    elif fields.interrupt == "answered":
        parts.append("interrupt answered")
    if fields.timestamp is not None:
        parts.append(short_timestamp(fields.timestamp))
    if entry.branch is not None and entry.branch_start:
        parts.append(f"branch {entry.branch}")
    return "  ".join(parts)


def _fields(
    info: CheckpointInfo,
    entry: LineageEntry,
    fields: BodyFields,
    body: _Body,
    damaged: str | None,
    budget: _Budget,
) -> list[list[str | None]]:
    """The node's fields: ``[name, value shown, whole value or None]``."""
    signature = abbreviate_signature(info.graph_signature_hash, 16)
    shown: list[list[str | None]] = [
        ["checkpoint_id", info.checkpoint_id, None],
        ["workflow_name", info.workflow_name, None],
        ["previous_checkpoint_id", str(info.previous_checkpoint_id), None],
        [
            "graph_signature_hash",
            signature,
            None if signature == info.graph_signature_hash else info.graph_signature_hash,
        ],
        ["sequence", str(info.sequence), None],
        ["size", f"{info.size} bytes", None],
    ]
    if info.container_id is not None:
        shown.append(["container", info.container_id, None])
    place = langgraph_place(info.workflow_name)
    sections = body.sections
    if place is not None and (sections is None or "thread_id" not in sections):
        shown += [["thread_id", place[0], None], ["checkpoint_ns", place[1], None]]
    if fields.step is not None:
        shown.append(["step", str(fields.step), None])
    if fields.source is not None:
        shown.append(["source", fields.source, None])
    if fields.nodes:
        role = "next nodes" if fields.nodes_role == "next" else "messages from"
        shown.append([role, ", ".join(fields.nodes), None])
    if fields.waiting:
        shown.append(["waiting on", f"{fields.waiting} pending request(s)", None])
    if fields.interrupt is not None:
        shown.append(["interrupt", fields.interrupt, None])
    if entry.branch is not None:
        shown.append(["branch", entry.branch, None])
    if fields.timestamp is not None:
        moment = short_timestamp(fields.timestamp)
        shown.append(["timestamp", moment, None if moment == fields.timestamp else fields.timestamp])
    if fields.iteration_count is not None:
        shown.append(["iteration_count", str(fields.iteration_count), None])
    if damaged is not None:
        shown.append(["body", f"damaged: {damaged}", None])
    elif body.refused_type is not None:
        shown.append(
            ["body", f"intact, but holds {body.refused_type}, which this codec does not build", None]
        )
    if sections is not None:
        for name, value in sections.items():
            if name in _IN_INDEX:
                continue
            short = abbreviate_value(value)
            shown.append([name, short, budget.whole(value, short)])
    return shown


def _diff_data(diff: CheckpointDiff, budget: _Budget) -> dict[str, Any]:
    return {
        "against": diff.old_id,
        "changes": [_change_row(change, budget) for change in diff.changes],
        "omitted": diff.omitted,
    }


def _change_row(change: Change, budget: _Budget) -> list[str | None]:
    """``[path, kind, old shown, new shown, old whole, new whole]``."""
    old_whole = None if change.old is None else budget.whole(change.old_value, change.old)
    new_whole = None if change.new is None else budget.whole(change.new_value, change.new)
    return [change.path, change.kind.value, change.old, change.new, old_whole, new_whole]


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
    """Write the diff as a page of its own: the changes across the whole page, no graph."""
    data = {
        "mode": "diff",
        "title": title,
        "workflow": f"diff {diff.old_id} -> {diff.new_id}",
        "rows": 0,
        "nodes": [],
        "forks": 0,
        "checkpoints": 0,
        "nested": 0,
        "pruned": 0,
        "diff": _diff_data(diff, _Budget()),
    }
    out.write_text(page(data), encoding="utf-8")


__all__ = [
    "FULL_VALUE_LIMIT",
    "PAGE_VALUE_BUDGET",
    "lineage_page_data",
    "page",
    "write_diff_html",
    "write_lineage_html",
]
