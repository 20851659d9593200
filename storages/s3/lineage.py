"""Latest through the lineage (docs/contract.md, "Latest") on S3.

Every top-level record with a previous id has a successor key, ``w/E(workflow)/s/E(previous)/``
followed by the name of its own order key, written in the same round trip as its record (before
its order key, the commit point). The latest is the newest order key of the workflow (of a
signature, if given), then, while committed successor keys of the same signature list the current
record, the newest one not visited yet. A successor key counts only once the order key it names
exists: a save that crashed before its commit point leaves a successor key naming nothing.

So get_latest lists the current record's successor keys in the round trip that reads its record;
in the common case that listing is empty and costs one request, no round trip. Only a record
saved before the one it continues costs more: one HEAD per successor and one LIST per step on.
"""

from __future__ import annotations

from .client import gather
from .commit import CommitProtocol
from .layout import OrderEntry, Stored


async def successors(
    protocol: CommitProtocol, workflow_name: str, escaped_id: str, operation: str
) -> list[OrderEntry]:
    """The successor keys listed under a record (by its escaped id), newest first, any signature."""
    keys = await protocol.client.list_keys(
        operation, protocol.keys.successor_prefix(workflow_name, escaped_id)
    )
    return [entry for key in keys if (entry := protocol.keys.parse_order_key(key, False)) is not None]


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


async def tip(
    protocol: CommitProtocol,
    workflow_name: str,
    newest: OrderEntry,
    operation: str,
    listed: list[OrderEntry] | None = None,
) -> OrderEntry:
    """The entry the walk from ``newest`` ends at; ``listed``: newest's successor keys if read."""
    current, visited = newest, {newest.escaped_id}
    while True:
        if listed is None:
            listed = await successors(protocol, workflow_name, current.escaped_id, operation)
        step = await following(protocol, workflow_name, listed, current, visited, operation)
        if step is None:
            return current
        visited.add(step.escaped_id)
        current, listed = step, None


async def latest_record(
    protocol: CommitProtocol, workflow_name: str, newest: OrderEntry, operation: str
) -> Stored | None:
    """The latest record from the workflow's newest entry: its record and its successor keys
    are read in one round trip; None if the record was deleted since (the caller reads again)."""
    read = await gather(
        [
            protocol.read_entry(newest, operation, lost_is_error=True),
            successors(protocol, workflow_name, newest.escaped_id, operation),
        ]
    )
    stored: Stored | None = read[0]
    listed: list[OrderEntry] = read[1]
    if not any(entry.tag == newest.tag for entry in listed):
        return stored
    end = await tip(protocol, workflow_name, newest, operation, listed)
    if end is newest:
        return stored
    return await protocol.read_entry(end, operation, lost_is_error=True)
