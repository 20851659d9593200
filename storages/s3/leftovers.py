"""What a fault can leave in an S3 store that no operation clears by itself, and its repair.

* An order key whose record is gone (``index_without_record``): a delete removes order keys
  before records, so no operation of this storage leaves one; a record deleted behind the
  storage's back does. The reads that reach it raise CheckpointCorruptedError naming it (a
  workflow's listings and latest stop there). Repair: raise the workflow's sequence floor to the
  entry's sequence (later saves still number above it), then delete the order key and its
  group key. The checkpoint is lost either way; the workflow reads again.
* A record with no order key (``record_without_index``): a save that never committed (a crash,
  a fenced save refused after a lost answer), or one still between its requests. No read returns
  it; not repaired here, since a save in flight would lose its record: ``delete`` of its id
  removes it once no save of it is running.
"""

from __future__ import annotations

from ..records import Leftover, LeftoverKind
from .client import gather
from .commit import CommitProtocol
from .layout import OrderEntry, unescape_component


async def find(protocol: CommitProtocol, workflow_name: str | None) -> list[Leftover]:
    keys = protocol.keys
    if workflow_name is not None:
        prefixes = [keys.workflow_prefix(workflow_name)]
    else:
        prefixes = [keys.workflows_prefix()]
    found: list[Leftover] = []
    order_keys = [key for prefix in prefixes for key in await protocol.client.list_keys("verify", prefix)]
    entries: list[tuple[str, OrderEntry]] = []
    for key in order_keys:
        parts = key[len(keys.workflows_prefix()) :].split("/")
        if len(parts) == 3 and parts[1] in ("t", "n"):
            entry = keys.parse_order_key(key, parts[1] == "n")
            if entry is not None:
                entries.append((parts[0], entry))
    stored = await gather(protocol.read_entry(entry, "verify") for _, entry in entries)
    listed: set[str] = set()
    for (escaped_workflow, entry), item in zip(entries, stored, strict=True):
        if item is not None:
            listed.add(keys.record_key(item.header.checkpoint_id))
            continue
        if not await protocol.client.exists("verify", entry.key):
            continue  # deleted since the listing
        named = entry.checkpoint_id
        record = await protocol.client.get("verify", keys.hashed_record_key(entry.escaped_id))
        missing = record is None
        found.append(
            Leftover(
                LeftoverKind.INDEX_WITHOUT_RECORD,
                entry.key,
                named if named is not None else entry.escaped_id,
                unescape_component(escaped_workflow),
                (
                    f"order key of sequence {entry.sequence} whose record is missing: the workflow's "
                    "listings and latest raise here; repair removes the order key (the checkpoint "
                    "is lost either way)"
                    if missing
                    else f"order key of sequence {entry.sequence} whose record holds another "
                    "sequence (saved again since): not repaired, delete the id and save it again"
                ),
                missing,
            )
        )
    if workflow_name is None:
        records_prefix = keys.record_key("x")[:-1]
        for key in await protocol.client.list_keys("verify", records_prefix):
            if key in listed:
                continue
            escaped = key[len(records_prefix) :]
            checkpoint_id = unescape_component(escaped)
            item = await protocol.read(checkpoint_id, "verify") if checkpoint_id is not None else None
            if item is None or await protocol.visible(item.header, "verify"):
                continue
            found.append(
                Leftover(
                    LeftoverKind.RECORD_WITHOUT_INDEX,
                    key,
                    item.header.checkpoint_id,
                    item.header.workflow_name,
                    "record with no order key: a save that never committed (or one still running); "
                    "no read returns it; not repaired (a save in flight would lose it): delete the "
                    "id to remove it",
                    False,
                )
            )
    return found


async def repair(protocol: CommitProtocol, leftover: Leftover) -> str | None:
    if leftover.kind is not LeftoverKind.INDEX_WITHOUT_RECORD or leftover.workflow_name is None:
        return None
    keys = protocol.keys
    nested = leftover.key.rsplit("/", 2)[-2] == "n"
    entry = keys.parse_order_key(leftover.key, nested)
    if entry is None or not await protocol.client.exists("verify", entry.key):
        return None
    if await protocol.client.get("verify", keys.hashed_record_key(entry.escaped_id)) is not None:
        return None  # its record is back (saved again): nothing to repair
    workflow = leftover.workflow_name
    await protocol.raise_pointer(workflow, entry.sequence, "verify")
    doomed = [entry.key]
    group_key = keys.group_key_of_order(workflow, entry)
    if group_key is not None:
        doomed.append(group_key)
    elif entry.successor:
        name = "/" + entry.key.rpartition("/")[2]
        successors = await protocol.client.list_keys("verify", keys.successors_prefix(workflow))
        doomed += [key for key in successors if key.endswith(name)]
    await protocol.client.delete_keys("verify", doomed)
    return (
        f"removed {len(doomed)} key(s) of lost checkpoint {leftover.checkpoint_id!r} (workflow "
        f"{workflow!r}): {', '.join(doomed)}; the sequence floor is at least {entry.sequence}"
    )


__all__ = ["find", "repair"]
