"""``diff``: what changed between two checkpoints, path by path.

Both checkpoints are loaded through the storage (its codec and allow-list); a LangGraph
checkpoint is compared through LangGraph's serializer (channel values, metadata, interrupts,
pending writes) when the ``langgraph`` extra is installed. Values are walked without recursion
and with bounds, since a store's data is hostile: at most :data:`MAX_DEPTH` levels (deeper values
are compared whole) and :data:`MAX_CHANGES` changes (the rest counted, not listed).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

from ...contract import Capability, CheckpointID, CheckpointStorage
from ..verify import require_capabilities
from .threads import langgraph_fields, resolve_checkpoint_id
from .values import json_value
from .views import abbreviate_value

MAX_DEPTH = 32
MAX_CHANGES = 1000

MAF_SECTIONS = ("state", "messages", "pending_request_info_events", "metadata")
"""What a diff compares in a checkpoint, besides its index fields."""
HEADER_FIELDS = (
    "workflow_name",
    "graph_signature_hash",
    "previous_checkpoint_id",
    "iteration_count",
    "timestamp",
)


class ChangeKind(str, enum.Enum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"

    def __str__(self) -> str:
        return self.value


_MISSING = object()


@dataclass(frozen=True, slots=True)
class Change:
    path: str
    """Where, from the section down: ``state.counter``, ``messages.executor[2]``."""
    kind: ChangeKind
    old: str | None
    """The old value, abbreviated for display (None when added)."""
    new: str | None
    old_value: Any = None
    """The old value itself (None when added)."""
    new_value: Any = None

    def to_dict(self) -> dict[str, Any]:
        """For scripts: the values as JSON data (storages.tools.inspection.values), not abbreviated;
        ``old`` is null for an added path, ``new`` for a removed one."""
        return {
            "path": self.path,
            "kind": self.kind.value,
            "old": None if self.kind is ChangeKind.ADDED else json_value(self.old_value),
            "new": None if self.kind is ChangeKind.REMOVED else json_value(self.new_value),
        }


@dataclass(slots=True)
class CheckpointDiff:
    old_id: CheckpointID
    new_id: CheckpointID
    changes: list[Change] = field(default_factory=list)
    omitted: int = 0
    """Changes found beyond MAX_CHANGES, not listed."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "old": self.old_id,
            "new": self.new_id,
            "changes": [change.to_dict() for change in self.changes],
            "omitted": self.omitted,
        }


async def checkpoint_sections(storage: CheckpointStorage, checkpoint_id: CheckpointID) -> dict[str, Any]:
    """What a diff compares of one checkpoint: its header fields and its sections (LangGraph's
    decoded ones for a LangGraph record). Raises what ``load`` raises."""
    checkpoint = await storage.load(checkpoint_id)
    sections: dict[str, Any] = {name: getattr(checkpoint, name, None) for name in HEADER_FIELDS}
    info = (
        await storage.checkpoint_info(checkpoint_id) if Capability.INSPECT in storage.capabilities else None
    )
    decoded = [] if info is None else await langgraph_fields(storage, info, checkpoint)
    if decoded:
        sections.update((name, value) for name, value in decoded if name not in ("langgraph_checkpoint_id",))
        sections.pop("timestamp", None)  # LangGraph's own ts is in its checkpoint; ours copies it
    else:
        sections.update((name, getattr(checkpoint, name, None)) for name in MAF_SECTIONS)
    return sections


def diff_sections(
    old_id: CheckpointID, old: dict[str, Any], new_id: CheckpointID, new: dict[str, Any]
) -> CheckpointDiff:
    """Every path whose value differs between two checkpoints' sections."""
    result = CheckpointDiff(old_id, new_id)
    pending: list[tuple[str, Any, Any, int]] = [
        (name, old.get(name, _MISSING), new.get(name, _MISSING), 0) for name in reversed(_keys(old, new))
    ]
    while pending:
        path, before, after, depth = pending.pop()
        before_items, after_items = _items(before), _items(after)
        if before_items is not None and after_items is not None and depth < MAX_DEPTH:
            before_map, after_map = dict(before_items), dict(after_items)
            for key in reversed(_keys(before_map, after_map)):
                pending.append(
                    (path + key, before_map.get(key, _MISSING), after_map.get(key, _MISSING), depth + 1)
                )
            continue
        if before is _MISSING and after is _MISSING:
            continue
        if before is not _MISSING and after is not _MISSING and _same(before, after):
            continue
        if len(result.changes) >= MAX_CHANGES:
            result.omitted += 1
            continue
        kind = (
            ChangeKind.ADDED
            if before is _MISSING
            else ChangeKind.REMOVED
            if after is _MISSING
            else ChangeKind.CHANGED
        )
        result.changes.append(
            Change(
                path,
                kind,
                None if before is _MISSING else abbreviate_value(before),
                None if after is _MISSING else abbreviate_value(after),
                None if before is _MISSING else before,
                None if after is _MISSING else after,
            )
        )
    return result


async def diff_checkpoints(storage: CheckpointStorage, old_id: str, new_id: str) -> CheckpointDiff:
    """What changed from checkpoint ``old_id`` to ``new_id`` (stored ids, or LangGraph's ids)."""
    require_capabilities(storage, "diff", (Capability.INSPECT,))
    old_id = await resolve_checkpoint_id(storage, old_id)
    new_id = await resolve_checkpoint_id(storage, new_id)
    old = await checkpoint_sections(storage, old_id)
    new = await checkpoint_sections(storage, new_id)
    return diff_sections(old_id, old, new_id, new)


def _keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [*old, *(key for key in new if key not in old)]


def _items(value: Any) -> list[tuple[str, Any]] | None:
    """A container's entries as (path suffix, value), or None for a value compared whole."""
    if isinstance(value, dict):
        return [(_key_path(key), item) for key, item in value.items()]
    if isinstance(value, (list, tuple)):
        return [(f"[{index}]", item) for index, item in enumerate(value)]
    if _is_checkpoint(value):
        return None  # an embedded checkpoint is compared by id
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f".{item.name}", getattr(value, item.name, None)) for item in dataclasses.fields(value)]
    return None


def _key_path(key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f".{key}"
    return f"[{key!r}]"


def _is_checkpoint(value: Any) -> bool:
    return hasattr(value, "checkpoint_id") and hasattr(value, "graph_signature_hash")


def _same(before: Any, after: Any) -> bool:
    if _is_checkpoint(before) or _is_checkpoint(after):
        return getattr(before, "checkpoint_id", None) == getattr(after, "checkpoint_id", None)
    if type(before) is not type(after):
        return False
    try:
        return bool(before == after)
    except Exception:  # a value whose == raises: compared by what is shown of it
        return abbreviate_value(before) == abbreviate_value(after)


__all__ = [
    "HEADER_FIELDS",
    "MAF_SECTIONS",
    "MAX_CHANGES",
    "MAX_DEPTH",
    "Change",
    "ChangeKind",
    "CheckpointDiff",
    "checkpoint_sections",
    "diff_checkpoints",
    "diff_sections",
]
