"""The head and its rivals (docs/contract.md, "Latest") on S3.

Every top-level record this release saves continuing another has a group key, written in the
round trip of its record (before its order key, the commit point): ``w/E(workflow)/s/E(previous)/``
followed by the name of its order key. Its order key name ends with its group
(``.c.E(previous)``), so the newest order key alone says which group to list. A group key counts
only once the order key it names exists: a save that crashed before its commit point leaves one
that names nothing. Roots never rival (storages.backend.rivals_of): a root has no group key, its
order key names no group, and a root head reads no rivals.

The head is the newest order key of the workflow (of a signature, if given), then, while
committed group keys of the same signature list the current record as previous id, the newest
one not visited yet. Its rivals are the other committed records of its group with its signature
that no committed record of their signature continues.

So get_latest lists, in the round trip that reads the newest record, the group of that record
(its successors) and the group it is in (its siblings; none for a root): in the common case the
first holds nothing and the second only itself, and that costs two requests (one for a root), no
round trip. Only a record
saved before the one it continues costs more (one HEAD per successor and one LIST per step on),
and only rivals cost more (a HEAD and a LIST each, then their bodies).

An earlier release wrote such keys (``.s``) only for checkpoints saved out of lineage order: its
checkpoints are followed through the keys it wrote, and never rival.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..backend import RIVALS_LIMIT
from .client import gather
from .commit import CommitProtocol
from .layout import OrderEntry, Stored


@dataclass(frozen=True, slots=True)
class Head:
    """The head's order entry, and the group keys of its group as listed (its own included;
    None when its order key names no group: a root, or saved by an earlier release)."""

    entry: OrderEntry
    group: list[OrderEntry] | None


async def successors(
    protocol: CommitProtocol, workflow_name: str, escaped_id: str, operation: str
) -> list[OrderEntry]:
    """The group keys listed under a record (by its escaped id), newest first, any signature."""
    return await group(protocol, workflow_name, escaped_id, operation)


async def group(protocol: CommitProtocol, workflow_name: str, name: str, operation: str) -> list[OrderEntry]:
    """The group keys of one group (an escaped previous id), newest first."""
    keys = await protocol.client.list_keys(operation, protocol.keys.successor_prefix(workflow_name, name))
    return [entry for key in keys if (entry := protocol.keys.parse_group_key(key)) is not None]


async def following(
    protocol: CommitProtocol,
    workflow_name: str,
    listed: list[OrderEntry],
    current: OrderEntry,
    visited: set[str],
    operation: str,
) -> OrderEntry | None:
    """The committed successor of ``current`` the walk moves to (the newest of its signature not
    visited), as its order entry, or None when there is none."""
    for successor in listed:
        if successor.tag != current.tag or successor.escaped_id in visited:
            continue
        order_key = protocol.keys.order_key_of_successor(workflow_name, successor)
        if await protocol.client.exists(operation, order_key):
            return protocol.keys.parse_order_key(order_key, False)
    return None


async def head(protocol: CommitProtocol, workflow_name: str, newest: OrderEntry, operation: str) -> Head:
    """The head, walking from ``newest``, whose successors and group are listed together."""
    listed, siblings = await gather(
        [
            successors(protocol, workflow_name, newest.escaped_id, operation),
            _group_of(protocol, workflow_name, newest, operation),
        ]
    )
    return await _walk(protocol, workflow_name, Head(newest, siblings), listed, operation)


async def tip(
    protocol: CommitProtocol,
    workflow_name: str,
    newest: OrderEntry,
    operation: str,
    listed: list[OrderEntry] | None = None,
) -> OrderEntry:
    """The head's entry alone, walking from ``newest``; ``listed``: newest's successors if read."""
    return (await _walk(protocol, workflow_name, Head(newest, None), listed, operation)).entry


async def _walk(
    protocol: CommitProtocol,
    workflow_name: str,
    current: Head,
    listed: list[OrderEntry] | None,
    operation: str,
) -> Head:
    """Where the walk from ``current`` ends (``listed``: its successors, if read). A record the
    walk moves to is in the group it was listed in."""
    visited = {current.entry.escaped_id}
    while True:
        if listed is None:
            listed = await successors(protocol, workflow_name, current.entry.escaped_id, operation)
        step = await following(protocol, workflow_name, listed, current.entry, visited, operation)
        if step is None:
            return current
        visited.add(step.escaped_id)
        current, listed = Head(step, listed), None


async def _group_of(
    protocol: CommitProtocol, workflow_name: str, entry: OrderEntry, operation: str
) -> list[OrderEntry] | None:
    if entry.group is None:
        return None
    return await group(protocol, workflow_name, entry.group, operation)


async def rivals(
    protocol: CommitProtocol, workflow_name: str, found: Head, operation: str
) -> list[OrderEntry]:
    """The head's rivals (storages.backend.rivals_of) as order entries, in ascending sequence:
    the committed records of its group with its signature, saved by this release, that no
    committed record of their signature continues; the :data:`RIVALS_LIMIT` newest. None for a
    root (it is in no group). No request unless its group lists another record of its
    signature."""
    if not found.entry.rivals or not found.group:
        return []
    candidates = [
        entry
        for entry in found.group
        if entry.rivals and entry.tag == found.entry.tag and entry.escaped_id != found.entry.escaped_id
    ]
    chosen: list[OrderEntry] = []
    for start in range(0, len(candidates), RIVALS_LIMIT):  # newest first
        checked = await gather(
            _leaf(protocol, workflow_name, entry, operation)
            for entry in candidates[start : start + RIVALS_LIMIT]
        )
        chosen += [entry for entry in checked if entry is not None]
        if len(chosen) >= RIVALS_LIMIT:
            break
    return chosen[:RIVALS_LIMIT][::-1]


async def _leaf(
    protocol: CommitProtocol, workflow_name: str, candidate: OrderEntry, operation: str
) -> OrderEntry | None:
    """The order entry of a group key's record if it is committed and none of its signature
    continues it (committed), else None."""
    order_key = protocol.keys.order_key_of_successor(workflow_name, candidate)
    committed, listed = await gather(
        [
            protocol.client.exists(operation, order_key),
            successors(protocol, workflow_name, candidate.escaped_id, operation),
        ]
    )
    if not committed:
        return None
    continuations = [
        protocol.keys.order_key_of_successor(workflow_name, entry)
        for entry in listed
        if entry.tag == candidate.tag
    ]
    if any(await gather(protocol.client.exists(operation, key) for key in continuations)):
        return None
    return protocol.keys.parse_order_key(order_key, False)


@dataclass(frozen=True, slots=True)
class Latest:
    """The head's record and its rivals' records, in ascending sequence."""

    head: Stored
    rivals: list[Stored]


async def latest_record(
    protocol: CommitProtocol, workflow_name: str, newest: OrderEntry, operation: str
) -> Latest | None:
    """The head's record and its rivals', from the workflow's newest entry: its record, its
    successors and its group are read in one round trip; None if the head's record was deleted
    since (the caller reads again). A rival deleted since is left out, as if read a moment
    later."""
    read = await gather(
        [
            protocol.read_entry(newest, operation, lost_is_error=True),
            successors(protocol, workflow_name, newest.escaped_id, operation),
            _group_of(protocol, workflow_name, newest, operation),
        ]
    )
    stored: Stored | None = read[0]
    listed: list[OrderEntry] = read[1]
    found = Head(newest, read[2])
    if any(entry.tag == newest.tag for entry in listed):
        found = await _walk(protocol, workflow_name, found, listed, operation)
        if found.entry is not newest:
            stored = await protocol.read_entry(found.entry, operation, lost_is_error=True)
    if stored is None:
        return None
    chosen = await rivals(protocol, workflow_name, found, operation)
    if not chosen:
        return Latest(stored, [])
    read_rivals = await gather(protocol.read_entry(entry, operation, lost_is_error=True) for entry in chosen)
    signature = stored.header.graph_signature_hash
    return Latest(
        stored,
        [item for item in read_rivals if item is not None and item.header.graph_signature_hash == signature],
    )
