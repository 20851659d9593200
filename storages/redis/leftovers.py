"""What a fault can leave in a Redis store that no operation clears by itself, and its repair.

Every save, delete and prune is one script, so the storage itself leaves no half-written state;
stage keys (a large body on its way in) carry a 60 s TTL. What remains is a record lost behind the
storage's back (deleted by hand, evicted under the eviction opt-out) whose id is still indexed:
``index_without_record``. The reads that reach it raise CheckpointCorruptedError naming it, and a
fenced save compares against it, so the workflow stops there until the checkpoint is saved again
or the entry is removed. With a TTL a record gone is expired, not lost: not reported.

Repair removes the entry in one script that first checks the record is still absent (a save of
the id in between restores it, and is left alone): the id from the workflow's index, its
per-signature indexes and its successor index (a range's marker, which names no id, stays: the
next save in the range is then marked, and its reads look for rivals that are not there), and on
plain Redis its location pointer.
"""

from __future__ import annotations

from typing import Any

from ..records import Leftover, LeftoverKind, stored_id
from .keys import TOP, escape
from .scripts import UnindexLost


async def find(backend: Any, workflow_name: str | None) -> list[Leftover]:
    if backend.ttl is not None:
        return []
    connection, keys = backend.connection, backend.keys
    if workflow_name is not None:
        names = [workflow_name]
    else:
        names = await backend.span.index.names("verify", ("top",))
    found: list[Leftover] = []
    for name in names:
        top = keys.under(keys.tag(name), TOP)
        members = await connection.call("verify", connection.client.zrange(top, 0, -1))
        ids = [stored_id(member) for member in members]
        if not ids:
            continue
        client = connection.client
        pipeline = client.pipeline() if backend.cluster else client.pipeline(transaction=False)
        for checkpoint_id in ids:
            pipeline.exists(keys.record(name, checkpoint_id))
        present = await connection.call("verify", pipeline.execute())
        found += [
            Leftover(
                LeftoverKind.INDEX_WITHOUT_RECORD,
                top,
                checkpoint_id,
                name,
                "indexed but its record is gone (no TTL explains it): the workflow's reads raise "
                "here; repair removes the index entry (the checkpoint is lost either way)",
                True,
            )
            for checkpoint_id, count in zip(ids, present, strict=True)
            if not count
        ]
    return found


async def repair(backend: Any, leftover: Leftover) -> str | None:
    if (
        leftover.kind is not LeftoverKind.INDEX_WITHOUT_RECORD
        or leftover.workflow_name is None
        or leftover.checkpoint_id is None
    ):
        return None
    connection, keys = backend.connection, backend.keys
    name, checkpoint_id = leftover.workflow_name, leftover.checkpoint_id
    tag = keys.tag(name)
    signatures = [key async for key in connection.client.scan_iter(match=keys.signature_pattern(tag))]
    call = UnindexLost(
        record=keys.record_under(tag, checkpoint_id),
        home_tag=tag,
        id=checkpoint_id,
        workflow=name,
        signature_indexes=[
            key.decode(errors="replace") if isinstance(key, bytes) else key for key in signatures
        ],
    )
    removed = await connection.run("verify", call)
    if not removed:
        return None
    return f"removed lost checkpoint {checkpoint_id!r} from the index of workflow {name!r} ({escape(name)})"


__all__ = ["find", "repair"]
