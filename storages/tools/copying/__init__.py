"""Copy checkpoints from one storage to another: ``checkpoint-storages copy`` and :func:`copy_store`.

Everything goes through the public contract, so any pair of storages works (built-in or not),
and the destination seals what it stores when it has an integrity key. What a copy keeps:

* every checkpoint with its id, fields, previous link and graph signature, and the records nested
  in it (saving a container stores its nested records, with their ids, under it);
* commit order: checkpoints are saved so that every workflow's records (nested ones included)
  reach the destination in their source sequence order; absolute sequence numbers are not kept;
* pending writes, per checkpoint, in the order ``list_writes`` gives them;
* prune tombstones: the only public way to make one is to prune, so each tombstone id is first
  saved as a placeholder checkpoint (the oldest of its workflow), and once the workflow's
  checkpoints are copied, ``prune`` keeps exactly those and leaves the placeholders as
  tombstones (on a keyed destination, with their signed receipts).

A copy is idempotent and resumable: a checkpoint is immutable, so saving one the destination
already holds with equal content does nothing, and one it holds with other content is reported as
a conflict (nothing is overwritten). A rerun after an interruption therefore completes the copy
without duplicates, in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...contract import (
    Capability,
    CheckpointID,
    CheckpointInfo,
    CheckpointStorage,
    PendingWrite,
    WorkflowCheckpoint,
)
from ...errors import CheckpointConflictError, CheckpointNotFoundError
from ..verify import REQUIRED_CAPABILITIES as VERIFY_CAPABILITIES
from ..verify import describe_storage, verify
from .plan import (
    CopyUnit,
    commit_order,
    needed_for,
    require,
    source_tombstones,
    source_writes,
    units_of,
)
from .report import CopyProblem, CopyProgress, CopyReport, WorkflowCopy

PLACEHOLDER_SIGNATURE = "checkpoint-storages:tombstone"
"""The graph signature of a tombstone's placeholder, saved then pruned by a copy."""

PLACEHOLDER_TIMESTAMP = "1970-01-01T00:00:00+00:00"
"""Every placeholder's timestamp: fixed, so a rerun saves an equal placeholder (a no-op)."""

SOURCE_CAPABILITIES = (Capability.INSPECT, Capability.LIST_WORKFLOWS)
"""A source must list its records (with their sequence and container) and its workflows."""

DESTINATION_CAPABILITIES = (Capability.INSPECT,)
"""A destination must say what it already holds, so a rerun can tell copied from conflicting."""


async def copy_store(
    source: CheckpointStorage,
    destination: CheckpointStorage,
    *,
    workflows: Iterable[str] | None = None,
    dry_run: bool = False,
    progress: CopyProgress | None = None,
    verify_destination: bool = True,
) -> CopyReport:
    """Copy every checkpoint of ``source`` (or of the named ``workflows``, with the records nested
    in them) into ``destination``; see the module docstring for what is kept.

    A dry run reads both storages and writes nothing; its report says what a copy would store.
    A checkpoint the source cannot load (damaged, or of a type its codec does not allow) stops the
    copy with that error, so the order of what was copied stays the source's; fix it (e.g. allow
    the type) and run again.
    """
    require(source, SOURCE_CAPABILITIES)
    require(destination, DESTINATION_CAPABILITIES)
    report = CopyReport(describe_storage(source), describe_storage(destination), dry_run)
    wanted = None if workflows is None else set(workflows)

    records = await source.list_records()
    units, orphans = units_of(records)
    if wanted is not None:
        units = [unit for unit in units if unit.top.workflow_name in wanted]
    names = sorted({r.workflow_name for unit in units for r in unit.family} | set(wanted or ()))
    if wanted is None:
        names = sorted(set(names) | set(await source.list_workflows()))
    stats = {name: WorkflowCopy(name) for name in names}
    for unit in units:
        for record in unit.family:
            counted = stats[record.workflow_name]
            if record.nested:
                counted.nested += 1
            else:
                counted.checkpoints += 1
            counted.bytes += record.size
    for orphan in orphans:
        if wanted is None or orphan.workflow_name in wanted:
            report.problems.append(
                CopyProblem(
                    "orphaned_nested",
                    orphan.checkpoint_id,
                    orphan.workflow_name,
                    f"nested checkpoint {orphan.checkpoint_id!r} is not copied: its container "
                    f"{orphan.container_id!r} is not stored in the source",
                )
            )

    ordered, report.order_preserved = commit_order(units)
    present = {info.checkpoint_id: info for info in await destination.list_records()}
    live_ids = {record.checkpoint_id for record in records}

    tombstones = await source_tombstones(source, names, live_ids, stats, report)
    writes = await source_writes(source, names, units, stats)
    if tombstones or any(writes.values()):
        require(destination, needed_for(tombstones, writes))

    placeholders = await _plant_placeholders(destination, tombstones, present, dry_run, report)
    total = len(ordered)
    if progress is not None:
        progress(0, total)
    for done, unit in enumerate(ordered, start=1):
        copied = await _copy_unit(source, destination, unit, present, stats, dry_run, report)
        for record in unit.family:
            batch = writes.get(record.workflow_name, {}).pop(record.checkpoint_id, None)
            if batch and copied:  # a conflicting checkpoint's writes would land on other content
                await _copy_writes(destination, record.workflow_name, record.checkpoint_id, batch, dry_run)
        if progress is not None:
            progress(done, total)
    for workflow_name, leftover in writes.items():  # writes against checkpoints not stored
        for checkpoint_id, batch in leftover.items():
            await _copy_writes(destination, workflow_name, checkpoint_id, batch, dry_run)
    if not dry_run:
        await _prune_placeholders(destination, placeholders, report)
        if verify_destination and all(c in destination.capabilities for c in VERIFY_CAPABILITIES):
            if wanted is None:
                report.verify_reports.append(await verify(destination))
            else:
                for name in sorted(wanted):
                    report.verify_reports.append(await verify(destination, workflow_name=name))
    report.workflows = [stats[name] for name in names]
    return report


# ---------------------------------------------------------------------- writing


def placeholder(workflow_name: str, checkpoint_id: CheckpointID) -> WorkflowCheckpoint:
    """What a copy saves, then prunes, to leave a tombstone for ``checkpoint_id``."""
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash=PLACEHOLDER_SIGNATURE,
        checkpoint_id=checkpoint_id,
        timestamp=PLACEHOLDER_TIMESTAMP,
        metadata={"checkpoint_storages_copy": "placeholder of a pruned checkpoint"},
    )


async def _plant_placeholders(
    destination: CheckpointStorage,
    tombstones: Mapping[str, list[CheckpointID]],
    present: Mapping[CheckpointID, CheckpointInfo],
    dry_run: bool,
    report: CopyReport,
) -> dict[str, list[CheckpointID]]:
    """Save the placeholders of the tombstones the destination lacks; returns, per workflow, the
    placeholders to prune once its checkpoints are copied."""
    planted: dict[str, list[CheckpointID]] = {}
    for name, ids in tombstones.items():
        have = set(await destination.list_tombstones(workflow_name=name))
        missing = [tombstone for tombstone in ids if tombstone not in have]
        # A rerun finds the placeholders an interrupted run planted and did not prune yet.
        planted_before = [tombstone for tombstone in missing if tombstone in present]
        absent = [tombstone for tombstone in missing if tombstone not in present]
        # Pruning keeps the newest: the placeholders must be the oldest checkpoints of the
        # workflow, so they are planted only where the workflow holds nothing else yet.
        others = [
            info.checkpoint_id
            for info in present.values()
            if info.workflow_name == name and not info.nested and info.checkpoint_id not in missing
        ]
        if absent and others:
            report.problems.extend(
                CopyProblem(
                    "tombstone_not_recreated",
                    tombstone,
                    name,
                    f"the tombstone of {tombstone!r} is not recreated: workflow {name!r} already "
                    f"held {len(others)} checkpoint(s) in the destination, which a prune leaving "
                    "this tombstone would take too",
                )
                for tombstone in absent
            )
            absent = []
        if not dry_run:
            for tombstone in absent:
                await destination.save(placeholder(name, tombstone))
        if planted_before or absent:
            planted[name] = planted_before + absent
    return planted


async def _copy_unit(
    source: CheckpointStorage,
    destination: CheckpointStorage,
    unit: CopyUnit,
    present: Mapping[CheckpointID, CheckpointInfo],
    stats: Mapping[str, WorkflowCopy],
    dry_run: bool,
    report: CopyReport,
) -> bool:
    """Save one unit; False when the destination holds its id with other content (reported)."""
    top = unit.top
    checkpoint = await source.load(top.checkpoint_id)
    try:
        if dry_run:
            if top.checkpoint_id in present:
                await _check_equal(destination, checkpoint)
        else:
            await destination.save(checkpoint)
    except CheckpointConflictError as exc:
        report.problems.append(
            CopyProblem(
                "conflict",
                exc.checkpoint_id if isinstance(exc.checkpoint_id, str) else top.checkpoint_id,
                top.workflow_name,
                f"not copied (nor its pending writes): {exc}; the destination keeps what it holds",
            )
        )
        return False
    for record in unit.family:
        counted = stats[record.workflow_name]
        if record.checkpoint_id in present:
            counted.present += 1
        else:
            counted.written += 1
    return True


async def _check_equal(destination: CheckpointStorage, checkpoint: Any) -> None:
    """What a save of ``checkpoint`` would find, without saving: equal, or a conflict."""
    try:
        held = await destination.load(checkpoint.checkpoint_id)
    except CheckpointNotFoundError:  # deleted since it was listed: a save would store it
        return
    if type(held) is not type(checkpoint):
        raise CheckpointConflictError(checkpoint.checkpoint_id)
    if held == checkpoint:
        return
    # Values without an equality of their own (MAF's WorkflowEvent) compare by their encoding.
    codec = getattr(destination, "codec", None)
    if codec is None or codec.encode_checkpoint(held) != codec.encode_checkpoint(checkpoint):
        raise CheckpointConflictError(checkpoint.checkpoint_id)


async def _copy_writes(
    destination: CheckpointStorage,
    workflow_name: str,
    checkpoint_id: CheckpointID,
    writes: list[PendingWrite],
    dry_run: bool,
) -> None:
    # One call per checkpoint: atomic, and repeating it changes nothing (first write per key
    # kept, special channels replaced by the same value), so a rerun stores no duplicate.
    if not dry_run:
        await destination.put_writes(checkpoint_id, writes, workflow_name=workflow_name)


async def _prune_placeholders(
    destination: CheckpointStorage, planted: Mapping[str, list[CheckpointID]], report: CopyReport
) -> None:
    for name, ids in planted.items():
        held = await destination.list_checkpoint_ids(workflow_name=name)
        placeholders = set(ids)
        oldest = held[: len(ids)]
        if set(oldest) != placeholders:  # someone else wrote the workflow meanwhile
            report.problems.extend(
                CopyProblem(
                    "tombstone_not_recreated",
                    tombstone,
                    name,
                    f"the placeholder of pruned checkpoint {tombstone!r} is not the oldest checkpoint "
                    f"of workflow {name!r} in the destination, so it was not pruned; delete it by hand",
                )
                for tombstone in ids
            )
            continue
        await destination.prune(workflow_name=name, keep_last=len(held) - len(ids))


__all__ = [
    "CopyProblem",
    "CopyProgress",
    "CopyReport",
    "WorkflowCopy",
    "copy_store",
    "placeholder",
]
