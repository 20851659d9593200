"""Fenced saves on S3 (``save(..., expected_latest_id=X)``): the commit point moves.

The same steps as a save, plus one compare-and-swap of the workflow's pointer (``IfMatch`` the
ETag read with the check) between creating the record and its order key. That swap is the commit
point: of fenced writers that checked the same latest, one moves the pointer and the others get
412, re-check and are refused. A pointer naming a record above the listing's head is a fenced
save that has not created its order key yet (or crashed before it); the next fenced save finishes
that commit before checking. Only a fenced swap names a writer in the pointer: a floor raised by
a nested save, a delete or a prune names none, so it can never roll a stale record forward.

A swap refused on botocore's resend of a request whose answer was lost may have been applied:
the pointer (and, if it has moved on, this record's order key) is read back before the records
are removed (:func:`swap_pointer`); records whose swap may have been applied are never removed.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..backend import CheckpointRecord, FenceCheck, InsertResult
from ..contract import CheckpointID
from ..errors import StorageUnavailableError
from . import lineage
from .client import backoff, gather
from .commit import CommitProtocol, Mark
from .layout import OrderEntry, Pointer, escape_component, frame
from .precondition import CONDITION_FAILED, CREATE_ONLY

LatestLookup = Callable[[str], Awaitable[CheckpointID | None]]
"""The full latest lookup (get_latest's), for a head whose record is gone."""


@dataclass(frozen=True, slots=True)
class FenceView:
    """What a fenced save reads first, in one round trip: the workflow's high-water mark, its
    pointer, and the head of its top-level listing."""

    mark: int
    pointer: Pointer | None
    head: OrderEntry | None
    successors_of_expected: list[OrderEntry] | None = None
    """The successor keys of the expected latest, read in the same round trip (None: not read):
    when the head is the expected latest, they say at once whether it is the latest."""


async def insert_fenced(
    protocol: CommitProtocol,
    records: Sequence[CheckpointRecord],
    expected_latest_id: CheckpointID | None,
    latest: LatestLookup,
) -> FenceCheck | None:
    top = records[0]
    workflow = top.workflow_name
    retries = protocol.settings.conflict_retries
    for attempt in range(retries + 1):
        view = await fence_view(protocol, workflow, expected_latest_id)
        current = await fenced_latest(protocol, workflow, view, expected_latest_id, latest)
        if current == top.checkpoint_id:
            stored = await protocol.read(top.checkpoint_id, "save")
            if stored is not None:
                return FenceCheck(current, InsertResult.of_stored_digest(stored.header.digest, top))
            continue  # deleted since: check again
        if current != expected_latest_id:
            stored = await protocol.read(top.checkpoint_id, "save")
            visible = stored is not None and await protocol.visible(stored.header, "save")
            existing = (
                InsertResult.of_stored_digest(stored.header.digest, top)
                if stored is not None and visible
                else None
            )
            return FenceCheck(current, existing)
        written = await protocol.write_records(
            records, attempt, known={workflow: Mark(view.mark, view.pointer, view.head)}
        )
        if written is None:
            continue
        headers, pointers = written.headers, written.pointers
        key = protocol.keys.record_key(top.checkpoint_id)
        if not written.created:
            stored = await protocol.read(top.checkpoint_id, "save")
            if stored is None:
                continue
            if await protocol.visible(stored.header, "save") or stored.header.digest != top.digest:
                return FenceCheck(current, InsertResult.of_stored_digest(stored.header.digest, top))
            # An earlier attempt at this save that never committed: rewrite it with this
            # attempt's sequence, with the group key naming this attempt's order key (the
            # create above removed it, as the stored record named another), then commit it.
            # The earlier attempt's group key names an order key no save will write: removed.
            try:
                await protocol.client.put("save", key, frame(headers[0], top.body), {"IfMatch": stored.etag})
            except CONDITION_FAILED:
                await backoff(attempt)
                continue
            group_key = protocol.keys.successor_key(headers[0])
            stale_group_key = protocol.keys.successor_key(stored.header)
            await gather(
                [
                    *([] if group_key is None else [protocol.client.put("save", group_key, b"")]),
                    *(
                        [protocol.client.delete_keys("save", [stale_group_key])]
                        if stale_group_key is not None and stale_group_key != group_key
                        else []
                    ),
                ]
            )
        sequence = max(
            m.sequence for m in (headers[0].member, *headers[0].members) if m.workflow_name == workflow
        )
        swapped = await swap_pointer(protocol, workflow, view.pointer, sequence, top.checkpoint_id)
        if swapped is Swap.UNKNOWN and await protocol.visible(headers[0], "save"):
            # The swap was applied and its answer lost, and a later fenced save has committed this
            # record since (its order key exists): the save is done.
            return None
        if swapped is Swap.LOST:
            # Another writer committed since the check: this attempt's records never became
            # visible; remove them (and the successor key naming its order key) and check again.
            successor_key = protocol.keys.successor_key(headers[0])
            await protocol.client.delete_keys(
                "save",
                [
                    key,
                    *(protocol.keys.record_key(m.checkpoint_id) for m in headers[0].members),
                    *([] if successor_key is None else [successor_key]),
                ],
            )
        if swapped is not Swap.APPLIED:
            # UNKNOWN and not committed: the swap may have been applied and a fenced save that
            # read the pointer may be committing this record now, so the records stay (invisible
            # until committed; the next attempt rewrites them, and verify reports any left).
            await backoff(attempt)
            continue
        # The swap already covers this workflow's nested records: no floor to raise there.
        pointers[workflow] = Pointer(sequence, top.checkpoint_id, "")
        await protocol.commit(headers[0], "save", pointers)
        return None
    raise StorageUnavailableError(
        "save",
        f"{protocol.settings.describe()}: the pointer of workflow {workflow!r} kept moving under a "
        "fenced save",
    )


async def fence_view(
    protocol: CommitProtocol, workflow_name: str, expected_latest_id: CheckpointID | None = None
) -> FenceView:
    if expected_latest_id is None:
        pointer, head = await gather(
            [protocol.read_pointer(workflow_name, "save"), protocol.top_head(workflow_name, "save")]
        )
        listed = None
    else:
        pointer, head, listed = await gather(
            [
                protocol.read_pointer(workflow_name, "save"),
                protocol.top_head(workflow_name, "save"),
                lineage.successors(protocol, workflow_name, escape_component(expected_latest_id), "save"),
            ]
        )
    mark = max(0 if pointer is None else pointer.sequence, 0 if head is None else head.sequence)
    return FenceView(mark, pointer, head, listed)


async def fenced_latest(
    protocol: CommitProtocol,
    workflow_name: str,
    view: FenceView,
    expected_latest_id: CheckpointID | None,
    latest: LatestLookup,
) -> CheckpointID | None:
    """The workflow's latest as a fenced save must see it, rolling forward a fenced commit
    whose pointer swap is done but whose order key is not; then through the lineage
    (storages/s3/lineage.py). A head naming the expected id is taken as read (a delete removes
    order keys before records, so a listed head has its record), and its successor keys were
    read with it; any other head is checked against its record first."""
    head_sequence = 0 if view.head is None else view.head.sequence
    pointer = view.pointer
    newest = view.head
    if pointer is not None and pointer.checkpoint_id is not None and pointer.sequence > head_sequence:
        stored = await protocol.read(pointer.checkpoint_id, "save")
        if (
            stored is not None
            and stored.header.workflow_name == workflow_name
            and stored.header.container_id is None
            and stored.header.sequence > head_sequence
        ):
            await protocol.finish(stored.header, "save")
            newest = protocol.keys.parse_order_key(protocol.keys.header_order_key(stored.header), False)
    if newest is None:
        return None
    if (
        newest is view.head
        and newest.checkpoint_id is not None
        and newest.checkpoint_id == expected_latest_id
    ):
        listed = view.successors_of_expected
    elif newest is not view.head or (
        newest.checkpoint_id is not None and await protocol.read_entry(newest, "save") is not None
    ):
        listed = None
    else:
        # The head names a record deleted (or hashed) since: ask the full latest lookup.
        return await latest(workflow_name)
    return (await lineage.tip(protocol, workflow_name, newest, "save", listed)).checkpoint_id


class Swap(enum.Enum):
    """What became of a pointer swap."""

    APPLIED = "applied"
    LOST = "lost"
    """Not applied: another writer moved the pointer first."""
    UNKNOWN = "unknown"
    """Refused on a resend and the pointer has moved past it since: the first send may have been
    applied, then superseded."""


async def swap_pointer(
    protocol: CommitProtocol,
    workflow_name: str,
    seen: Pointer | None,
    sequence: int,
    checkpoint_id: CheckpointID,
) -> Swap:
    """Move the pointer from the state ``seen`` to (sequence, id).

    A refusal of a resent request (botocore retries a PUT whose answer was lost) may answer this
    writer's own applied swap, so the pointer is read back before another writer is said to have
    won. Only the refused path pays that read. Pointer sequences only grow (every swap and floor
    moves them forward), so a pointer at or below ``sequence`` that names another writer proves
    this swap was never applied."""
    key = protocol.keys.pointer_key(workflow_name)
    condition = CREATE_ONLY if seen is None else {"IfMatch": seen.etag}
    try:
        await protocol.client.put("save", key, Pointer.encode(sequence, checkpoint_id), condition)
    except CONDITION_FAILED as refused:
        if not refused.resent:
            return Swap.LOST
        current = await protocol.read_pointer(workflow_name, "save")
        if current is not None and current.sequence == sequence and current.checkpoint_id == checkpoint_id:
            return Swap.APPLIED
        if current is None or current.sequence <= sequence:
            return Swap.LOST
        return Swap.UNKNOWN
    return Swap.APPLIED


__all__ = ["FenceView", "Swap", "fence_view", "fenced_latest", "insert_fenced", "swap_pointer"]
