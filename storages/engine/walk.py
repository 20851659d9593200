"""Ancestry walk assembly: the engine follows previous ids through what one ``_walk`` read, and
decides why the walk ends; with integrity keys it also checks each step against the seals."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from ..contract import AncestryEnd, AncestryWalk, CheckpointID
from ..errors import CheckpointNotFoundError, CheckpointTamperedError, InvalidCheckpointError
from ..integrity import Link, Seal, TamperKind
from ..records import WalkRecords

DEFAULT_MAX_DEPTH = 100_000
"""Ancestry walks stop here unless asked otherwise; deeper chains report DEPTH_LIMIT."""

LARGEST_BACKEND_INT = 2**63 - 1
"""max_depth and keep_last are clamped to this before they reach a primitive: a larger int means
"no limit" all the same, and would overflow a 64-bit database integer (SQLite's, for one)."""


def check_max_depth(max_depth: object) -> None:
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise InvalidCheckpointError(f"max_depth must be an int >= 1, got {max_depth!r}", field="max_depth")


def assemble_walk(start: CheckpointID, records: WalkRecords, max_depth: int) -> AncestryWalk[CheckpointID]:
    """Follow previous ids through what the backend read, deciding why the walk ends."""
    links = records.links
    if start not in links:
        raise CheckpointNotFoundError(start)
    items: list[CheckpointID] = []
    visited: set[CheckpointID] = set()
    current = start
    while True:
        items.append(current)
        visited.add(current)
        previous = links[current]
        if previous is None:
            return AncestryWalk(tuple(items), AncestryEnd.ROOT, current)
        if len(items) >= max_depth:
            return AncestryWalk(tuple(items), AncestryEnd.DEPTH_LIMIT, current)
        if previous in visited:
            return AncestryWalk(tuple(items), AncestryEnd.CYCLE, previous)
        if previous not in links:
            end = AncestryEnd.PRUNED if previous in records.tombstones else AncestryEnd.MISSING
            return AncestryWalk(tuple(items), end, previous)
        current = previous


def check_walk_chain(
    walk: AncestryWalk[CheckpointID],
    links: Mapping[CheckpointID, CheckpointID | None],
    seals: Mapping[CheckpointID, Seal | None],
) -> None:
    """Each step of a walk must go to the record the step's start was signed after.

    A predecessor that is gone ends the walk ``missing``, as on a storage without a key: the
    contract lets the application delete a checkpoint, so verify, not the walk, reports that a
    record was signed after one that is gone (``chain_broken``). A predecessor that is there but
    is not the record signed after raises."""
    items = walk.items
    for index, item_id in enumerate(items):
        seal = seals.get(item_id)
        if seal is None or seal.link_kind is not Link.PRESENT:
            continue
        if index + 1 < len(items):
            previous = seals.get(items[index + 1])
            if previous is None or not hmac.compare_digest(previous.mac, seal.link):
                raise CheckpointTamperedError(
                    item_id,
                    TamperKind.CHAIN_BROKEN,
                    f"its predecessor {links[item_id]!r} is not the record it was signed after",
                )
