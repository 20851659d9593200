"""The head and its rivals (docs/contract.md, "Latest") on S3.

Every top-level record this release saves continuing another has a group key, written in the
round trip of its record (before its order key, the commit point): ``w/E(workflow)/s/E(previous)/``
followed by the name of its order key. Its order key name ends with its group
(``.c.E(previous)``), so the newest order key alone says which group to list. A group key counts
only once the order key it names exists: a save that crashed before its commit point leaves one
that names nothing. A root has no group key; its order key ends in ``.r``, so the order keys
alone say which records are roots of which signature.

The head is the newest order key of the workflow (of a signature, if given), then, while
committed group keys of the same signature list the current record as previous id, the newest
one not visited yet. The rivals of a head continuing another are the other committed records of
its group with its signature that no committed record of their signature continues. A root head
is the newest order key of its signature (the walk only moves to records continuing another);
its rivals are the leaf roots of its signature committed right before it
(storages.backend.rivals_of): the order keys listed after its own, newest first, taken while
each is a root of its signature whose successors (its group, listed) hold no committed record of
its signature, up to the first that is not one, at most :data:`RIVALS_LIMIT`.

So get_latest lists, in the round trip that reads the newest record, the group of that record
(its successors) and the group it is in (its siblings): in the common case the first holds
nothing and the second only itself, and that costs two requests, no round trip. A root is in no
group; that round trip lists the order key committed right before it instead (the probe; a
listing of the workflow's order keys by signature has it already, and lists that one's
successors when it is a root of the root's signature). Only a record saved before the
one it continues costs more (one HEAD per successor and one LIST per step on), and only rivals
cost more: siblings a HEAD and a LIST each, roots up to :data:`RIVALS_LIMIT` order keys in one
LIST and a LIST each; then their bodies.

An earlier release wrote such keys (``.s``) only for checkpoints saved out of lineage order, and
its order keys do not say which records are roots: its checkpoints are followed through the keys
it wrote, and never rival.
"""

from __future__ import annotations

from collections.abc import Sequence
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


@dataclass(frozen=True, slots=True)
class Before:
    """The order keys a listing gave right after an entry's, newest first: the top-level records
    committed right before it (any signature)."""

    keys: Sequence[str]
    more: bool
    """Order keys older than these exist, or may: not listed yet."""


UNLISTED = Before((), True)
"""Nothing listed after the entry yet."""


@dataclass(frozen=True, slots=True)
class Probe:
    """The root committed right before a root head, with its successors as listed."""

    entry: OrderEntry
    successors: list[OrderEntry]


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
    protocol: CommitProtocol,
    workflow_name: str,
    found: Head,
    operation: str,
    before: Before = UNLISTED,
    probe: Probe | None = None,
) -> list[OrderEntry]:
    """The head's rivals (storages.backend.rivals_of) as order entries, in ascending sequence:
    a root's by :func:`root_rivals` (``before`` and ``probe`` as it takes them), any other's
    by :func:`siblings`."""
    if found.entry.root:
        return await root_rivals(protocol, workflow_name, found.entry, before, probe, operation)
    return await siblings(protocol, workflow_name, found, operation)


async def siblings(
    protocol: CommitProtocol, workflow_name: str, found: Head, operation: str
) -> list[OrderEntry]:
    """The rivals of a head continuing another, in ascending sequence: the committed records of
    its group with its signature, saved by this release, that no committed record of their
    signature continues; the :data:`RIVALS_LIMIT` newest. No request unless its group lists
    another record of its signature."""
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


def _may_rival(candidate: OrderEntry, head: OrderEntry) -> bool:
    """A root of the head's signature saved by this release: the head's rival if it is a leaf."""
    return candidate.root and candidate.tag == head.tag


async def root_rivals(
    protocol: CommitProtocol,
    workflow_name: str,
    head: OrderEntry,
    before: Before,
    probe: Probe | None,
    operation: str,
) -> list[OrderEntry]:
    """The rivals of a root head, in ascending sequence: the leaf roots of its signature
    committed right before it. ``before``: the order keys listed after the head's; more are
    listed (newest first, never more than the run can still take) only while every one listed
    is a leaf root of the head's signature and the run has room. ``probe``: the successors of the first of
    them, if read with the head. One LIST of its successors per candidate, concurrent, and a
    HEAD per successor of its signature (is it committed); reads only, safe to resend."""
    order_prefix = protocol.keys.order_prefix(workflow_name, False)
    listed = {} if probe is None else {probe.entry.key: probe.successors}
    keys, more, after = before.keys, before.more, head.key
    run: list[OrderEntry] = []  # newest first
    while True:
        room = RIVALS_LIMIT - len(run)
        taken = keys[:room]
        more = more or len(keys) > room
        entries = [entry for key in taken if (entry := protocol.keys.parse_order_key(key, False)) is not None]
        candidates: list[OrderEntry] = []
        for entry in entries:
            if not _may_rival(entry, head):
                break
            candidates.append(entry)
        leaves = await gather(
            _leaf_root(protocol, workflow_name, entry, listed.get(entry.key), operation)
            for entry in candidates
        )
        for entry, leaf in zip(candidates, leaves, strict=True):
            if not leaf:
                return run[::-1]
            run.append(entry)
        if len(candidates) < len(entries) or not more or len(run) >= RIVALS_LIMIT:
            return run[::-1]
        after = taken[-1] if taken else after
        keys, more = await protocol.client.list_page(operation, order_prefix, after, RIVALS_LIMIT - len(run))


async def _leaf_root(
    protocol: CommitProtocol,
    workflow_name: str,
    root: OrderEntry,
    listed: list[OrderEntry] | None,
    operation: str,
) -> bool:
    """No committed record of its signature continues ``root`` (``listed``: its successors, if
    read)."""
    if listed is None:
        listed = await successors(protocol, workflow_name, root.escaped_id, operation)
    keys = protocol.keys
    continuations = [keys.order_key_of_successor(workflow_name, e) for e in listed if e.tag == root.tag]
    return not any(await gather(protocol.client.exists(operation, key) for key in continuations))


@dataclass(frozen=True, slots=True)
class Latest:
    """The head's record and its rivals' records, in ascending sequence."""

    head: Stored
    rivals: list[Stored]


async def latest_record(
    protocol: CommitProtocol, workflow_name: str, newest: OrderEntry, operation: str, before: Before
) -> Latest | None:
    """The head's record and its rivals', from the workflow's newest entry (of the signature
    read) and the order keys its listing gave after it (``before``): its record, its successors
    and its group are read in one round trip. For a root, the same round trip reads the probe:
    the order key committed right before it if its listing stopped at the root, else, when that
    key is a root of its signature, that root's successors (is it a leaf, so a rival). None if
    the head's record was deleted since (the caller reads again). A rival deleted since is left
    out, as if read a moment later."""
    order_prefix = protocol.keys.order_prefix(workflow_name, False)
    list_prior = newest.root and not before.keys and before.more
    prior = protocol.keys.parse_order_key(before.keys[0], False) if newest.root and before.keys else None
    probed = prior if prior is not None and _may_rival(prior, newest) else None
    read = await gather(
        [
            protocol.read_entry(newest, operation, lost_is_error=True),
            successors(protocol, workflow_name, newest.escaped_id, operation),
            _group_of(protocol, workflow_name, newest, operation),
            *([protocol.client.list_page(operation, order_prefix, newest.key, 1)] if list_prior else []),
            *([] if probed is None else [successors(protocol, workflow_name, probed.escaped_id, operation)]),
        ]
    )
    stored: Stored | None = read[0]
    listed: list[OrderEntry] = read[1]
    found = Head(newest, read[2])
    if list_prior:  # then no key was listed before, so none was probed: read[3] is this listing
        before = Before(*read[3])
    probe = None if probed is None else Probe(probed, read[3])
    if any(entry.tag == newest.tag for entry in listed):
        found = await _walk(protocol, workflow_name, found, listed, operation)
        if found.entry is not newest:
            stored = await protocol.read_entry(found.entry, operation, lost_is_error=True)
    if stored is None:
        return None
    chosen = await rivals(protocol, workflow_name, found, operation, before, probe)
    if not chosen:
        return Latest(stored, [])
    read_rivals = await gather(protocol.read_entry(entry, operation, lost_is_error=True) for entry in chosen)
    signature = stored.header.graph_signature_hash
    return Latest(
        stored,
        [item for item in read_rivals if item is not None and item.header.graph_signature_hash == signature],
    )
