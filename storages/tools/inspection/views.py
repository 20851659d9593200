"""What ``inspect`` shows, as data: workflow summaries, lineage trees and one checkpoint's fields,
built from the index (see the package's docstring); :mod:`storages.tools.inspection.render` draws them."""

from __future__ import annotations

import dataclasses
import reprlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ...backend import latest_record, rivals_of
from ...contract import Capability, CheckpointID, CheckpointInfo, CheckpointStorage
from ...errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    CheckpointTypeNotAllowedError,
)
from ..verify import require_capabilities
from .runner_records import runner_fields
from .threads import langgraph_fields, langgraph_place, resolve_checkpoint_id
from .values import json_value

VALUE_WIDTH = 100
"""Longest abbreviated value shown in the one-checkpoint view, in characters."""


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    workflow_name: str
    checkpoints: int
    nested: int
    pruned: int
    latest_id: CheckpointID | None
    signatures: int
    """Distinct graph signatures among its records."""
    thread_id: str | None = None
    """For a LangGraph workflow: its thread."""
    checkpoint_ns: str | None = None
    """For a LangGraph workflow: its namespace ("" for the root graph)."""
    listed_without_record: tuple[CheckpointID, ...] = ()
    """Ids the workflow's listing names whose record is gone (a fault or a hand edit: its reads
    raise; ``verify`` reports them and ``verify --repair`` removes them). Counted in
    ``checkpoints``, as ``list_checkpoint_ids`` counts them."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow_name": self.workflow_name,
            "thread_id": self.thread_id,
            "checkpoint_ns": self.checkpoint_ns,
            "checkpoints": self.checkpoints,
            "nested": self.nested,
            "pruned": self.pruned,
            "latest_id": self.latest_id,
            "signatures": self.signatures,
            "listed_without_record": list(self.listed_without_record),
        }


@dataclass(frozen=True, slots=True)
class CheckpointView:
    """One checkpoint: its index entry, its neighbours, and its decoded fields."""

    info: CheckpointInfo
    previous_status: str | None
    """None without a previous id, else "stored", "pruned" or "missing"."""
    container: CheckpointInfo | None
    nested_ids: tuple[CheckpointID, ...]
    values: tuple[tuple[str, Any], ...]
    """Decoded fields other than the index ones, as decoded; empty if it cannot be loaded."""
    error: str | None
    """Why the body could not be loaded, if it could not."""
    refused_type: str | None = None
    """The ``module:qualname`` of a type the codec does not allow, when the body is intact but
    names one (:attr:`refused_message` says what the codec said)."""
    refused_message: str | None = None

    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        """The decoded fields abbreviated for display (a dict's size first)."""
        return tuple((name, _count(value) + abbreviate_value(value)) for name, value in self.values)

    def to_dict(self) -> dict[str, Any]:
        """The view for scripts: the index entry and every decoded field as JSON data
        (storages.tools.inspection.values), not its abbreviation."""
        return {
            **dataclasses.asdict(self.info),
            "previous_status": self.previous_status,
            "nested_ids": list(self.nested_ids),
            "fields": {name: json_value(value) for name, value in self.values},
            "error": self.error,
            "refused_type": self.refused_type,
            "refused_message": self.refused_message,
        }


# ---------------------------------------------------------------------- building


async def _latest_id(storage: CheckpointStorage, name: str, top: list[CheckpointInfo]) -> CheckpointID | None:
    """The latest by the index (the head), or, when the head has rivals, which only their
    timestamps decide between, get_latest's answer; the head still if that read fails (the
    damage is reported elsewhere)."""
    head = latest_record(top)
    if head is None or not rivals_of(top, head):
        return None if head is None else head.checkpoint_id
    try:
        latest = await storage.get_latest(workflow_name=name)
    except CheckpointStorageError:
        return head.checkpoint_id
    return head.checkpoint_id if latest is None else str(latest.checkpoint_id)


async def list_workflow_summaries(storage: CheckpointStorage) -> list[WorkflowSummary]:
    """One summary per workflow name with a stored record, sorted by name."""
    require_capabilities(storage, "inspect", (Capability.INSPECT,))
    by_workflow: dict[str, list[CheckpointInfo]] = defaultdict(list)
    for info in await storage.list_records():
        by_workflow[info.workflow_name].append(info)
    summaries: list[WorkflowSummary] = []
    for name in sorted(by_workflow):
        records = by_workflow[name]
        top = sorted((info for info in records if not info.nested), key=lambda info: info.sequence)
        recorded = {info.checkpoint_id for info in top}
        lost = tuple(i for i in await storage.list_checkpoint_ids(workflow_name=name) if i not in recorded)
        latest_id = await _latest_id(storage, name, top)
        place = langgraph_place(name)
        summaries.append(
            WorkflowSummary(
                workflow_name=name,
                checkpoints=len(top) + len(lost),
                nested=len(records) - len(top),
                pruned=len(await storage.list_tombstones(workflow_name=name)),
                latest_id=latest_id,
                listed_without_record=lost,
                signatures=len({info.graph_signature_hash for info in records}),
                thread_id=None if place is None else place[0],
                checkpoint_ns=None if place is None else place[1],
            )
        )
    return summaries


async def describe_checkpoint(storage: CheckpointStorage, checkpoint_id: CheckpointID) -> CheckpointView:
    """One checkpoint's index entry, neighbours and fields; raises CheckpointNotFoundError.

    ``checkpoint_id`` may be LangGraph's own id of a LangGraph checkpoint (unique in the store).
    """
    require_capabilities(storage, "inspect", (Capability.INSPECT,))
    checkpoint_id = await resolve_checkpoint_id(storage, checkpoint_id)
    info = await storage.checkpoint_info(checkpoint_id)
    if info is None:
        raise CheckpointNotFoundError(checkpoint_id)
    previous_status: str | None = None
    if info.previous_checkpoint_id is not None:
        if await storage.checkpoint_info(info.previous_checkpoint_id) is not None:
            previous_status = "stored"
        elif info.previous_checkpoint_id in await storage.list_tombstones():
            previous_status = "pruned"
        else:
            previous_status = "missing"
    container = None if info.container_id is None else await storage.checkpoint_info(info.container_id)
    nested_ids: list[CheckpointID] = []
    if Capability.NESTED in getattr(storage, "capabilities", frozenset()):
        nested_ids = await storage.list_nested(checkpoint_id)
    error: str | None = None
    refused: CheckpointTypeNotAllowedError | None = None
    shown: list[tuple[str, Any]] = []
    try:
        checkpoint = await storage.load(checkpoint_id)
    except CheckpointTypeNotAllowedError as exc:
        refused = exc
    except CheckpointCorruptedError as exc:
        error = exc.reason
    else:
        for name in ("timestamp", "iteration_count", "version"):
            shown.append((name, getattr(checkpoint, name)))
        decoded = await langgraph_fields(storage, info, checkpoint) or runner_fields(info, checkpoint)
        names = ("messages", "state", "pending_request_info_events", "metadata")
        # A LangGraph record's own fields are empty or serialized bytes: its decoded ones instead;
        # a CrewAI or Burr record's, in its runner's terms.
        shown += decoded or [(name, getattr(checkpoint, name)) for name in names]
    return CheckpointView(
        info,
        previous_status,
        container,
        tuple(nested_ids),
        tuple(shown),
        error,
        refused_type=None if refused is None else refused.type_key,
        refused_message=None if refused is None else refused.message,
    )


class _ShortRepr(reprlib.Repr):
    """reprlib with room for a line of context, showing embedded checkpoints by id only."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxdict = 6
        self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = 6
        self.maxstring = 40
        self.maxother = 40

    def repr1(self, x: Any, level: int) -> str:
        if hasattr(x, "checkpoint_id") and hasattr(x, "graph_signature_hash"):
            return f"<checkpoint {x.checkpoint_id!r}>"
        return super().repr1(x, level)


_SHORT_REPR = _ShortRepr()


def abbreviate_value(value: Any, width: int = VALUE_WIDTH) -> str:
    """A one-line repr of at most ``width`` characters."""
    text = _SHORT_REPR.repr(value).replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _count(value: Any) -> str:
    if not isinstance(value, dict) or not value:
        return ""
    return f"{len(value)} key{'' if len(value) == 1 else 's'}: "


__all__ = [
    "VALUE_WIDTH",
    "CheckpointView",
    "WorkflowSummary",
    "abbreviate_value",
    "describe_checkpoint",
    "list_workflow_summaries",
]
