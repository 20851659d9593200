"""Planning a copy: what a source holds, read once and put in an order the destination can take.

A source's records are grouped into units (a top-level checkpoint with its nested records: what
one save stores), ordered so that each workflow's commit order is kept, and read with its
tombstones and pending writes, before anything is written.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...contract import (
    Capability,
    CheckpointID,
    CheckpointInfo,
    CheckpointStorage,
    PendingWrite,
)
from ...errors import UnsupportedOperationError
from ..verify import describe_storage
from .report import CopyProblem, CopyReport, WorkflowCopy


@dataclass
class CopyUnit:
    """A top-level checkpoint and the records nested in it: what one save stores."""

    top: CheckpointInfo
    family: list[CheckpointInfo]
    """The top record first, then its nested records."""


def require(storage: CheckpointStorage, capabilities: Iterable[Capability]) -> None:
    for capability in capabilities:
        if capability not in storage.capabilities:
            raise UnsupportedOperationError(describe_storage(storage), "copy", capability.value)


def needed_for(tombstones: Mapping[str, list[CheckpointID]], writes: Mapping[str, Any]) -> list[Capability]:
    needed = [Capability.PRUNE] if any(tombstones.values()) else []
    if any(writes.values()):
        needed.append(Capability.PENDING_WRITES)
    return needed


def units_of(records: Sequence[CheckpointInfo]) -> tuple[list[CopyUnit], list[CheckpointInfo]]:
    """The save units (a top-level record with its nested family) and nested records whose
    container chain does not reach a stored top-level record."""
    by_id = {record.checkpoint_id: record for record in records}
    units: dict[CheckpointID, CopyUnit] = {}
    for record in records:
        if not record.nested:
            units[record.checkpoint_id] = CopyUnit(record, [record])
    orphans: list[CheckpointInfo] = []
    for record in records:
        if not record.nested:
            continue
        root = root_of(record, by_id)
        if root is None or root not in units:
            orphans.append(record)
        else:
            units[root].family.append(record)
    return list(units.values()), orphans


def root_of(record: CheckpointInfo, by_id: Mapping[CheckpointID, CheckpointInfo]) -> CheckpointID | None:
    seen: set[CheckpointID] = set()
    current = record
    while current.container_id is not None:
        if current.checkpoint_id in seen:  # a container loop: a damaged index
            return None
        seen.add(current.checkpoint_id)
        container = by_id.get(current.container_id)
        if container is None:
            return None
        current = container
    return current.checkpoint_id


def commit_order(units: Sequence[CopyUnit]) -> tuple[list[CopyUnit], bool]:
    """The units in an order that keeps every workflow's sequence order, and whether one exists.

    Sequences are per workflow name, and a unit holds records of several names (a container and
    its sub-workflow's records), so this is a topological sort: for each name, the unit of its
    n-th record goes before the unit of its (n+1)-th. Ties go to the smaller sequence of the
    top record, then the workflow name, so the order is deterministic.
    """
    unit_of: dict[CheckpointID, int] = {}
    for index, unit in enumerate(units):
        for record in unit.family:
            unit_of[record.checkpoint_id] = index
    by_name: dict[str, list[CheckpointInfo]] = defaultdict(list)
    for unit in units:
        for record in unit.family:
            by_name[record.workflow_name].append(record)
    successors: dict[int, set[int]] = defaultdict(set)
    blockers = [0] * len(units)
    for named in by_name.values():
        named.sort(key=lambda record: record.sequence)
        for earlier, later in itertools.pairwise(named):
            a, b = unit_of[earlier.checkpoint_id], unit_of[later.checkpoint_id]
            if a != b and b not in successors[a]:
                successors[a].add(b)
                blockers[b] += 1

    def key(index: int) -> tuple[int, str, str]:
        top = units[index].top
        return (top.sequence, top.workflow_name, top.checkpoint_id)

    ready = [(key(i), i) for i in range(len(units)) if blockers[i] == 0]
    heapq.heapify(ready)
    ordered: list[CopyUnit] = []
    while ready:
        _, index = heapq.heappop(ready)
        ordered.append(units[index])
        for after in successors[index]:
            blockers[after] -= 1
            if blockers[after] == 0:
                heapq.heappush(ready, (key(after), after))
    if len(ordered) == len(units):
        return ordered, True
    # Sequences that contradict each other: each workflow keeps its own order at least.
    done = {id(unit) for unit in ordered}
    rest = sorted(
        (u for u in units if id(u) not in done), key=lambda u: (u.top.workflow_name, u.top.sequence)
    )
    return ordered + rest, False


async def source_tombstones(
    source: CheckpointStorage,
    names: Sequence[str],
    live_ids: Collection[CheckpointID],
    stats: Mapping[str, WorkflowCopy],
    report: CopyReport,
) -> dict[str, list[CheckpointID]]:
    if Capability.PRUNE not in source.capabilities:
        return {}
    tombstones: dict[str, list[CheckpointID]] = {}
    for name in names:
        ids = await source.list_tombstones(workflow_name=name)
        stats[name].tombstones = len(ids)
        kept = []
        for tombstone in ids:
            if tombstone in live_ids:  # pruned, then saved again: the record is what reads find
                report.problems.append(
                    CopyProblem(
                        "tombstone_not_recreated",
                        tombstone,
                        name,
                        f"the tombstone of {tombstone!r} is not copied: the source also stores a "
                        "checkpoint with that id, which is copied instead",
                    )
                )
            else:
                kept.append(tombstone)
        if kept:
            tombstones[name] = kept
    return tombstones


async def source_writes(
    source: CheckpointStorage,
    names: Sequence[str],
    units: Sequence[CopyUnit],
    stats: Mapping[str, WorkflowCopy],
) -> dict[str, dict[CheckpointID, list[PendingWrite]]]:
    """Every workflow's pending writes, ``{workflow: {checkpoint id: writes}}``."""
    if Capability.PENDING_WRITES not in source.capabilities:
        return {}
    whole_workflow = getattr(source, "list_workflow_writes", None)
    writes: dict[str, dict[CheckpointID, list[PendingWrite]]] = {}
    ids_by_name: dict[str, list[CheckpointID]] = defaultdict(list)
    for unit in units:
        for record in unit.family:
            ids_by_name[record.workflow_name].append(record.checkpoint_id)
    for name in names:
        if whole_workflow is not None:
            found: dict[CheckpointID, list[PendingWrite]] = dict(await whole_workflow(workflow_name=name))
        else:  # a storage without the whole-workflow read: one read per checkpoint
            found = {}
            for checkpoint_id in ids_by_name[name]:
                if batch := await source.list_writes(checkpoint_id, workflow_name=name):
                    found[checkpoint_id] = batch
        stats[name].writes = sum(len(batch) for batch in found.values())
        if found:
            writes[name] = found
    return writes
