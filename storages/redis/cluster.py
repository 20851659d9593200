"""Redis Cluster: the cross-slot half of every write, done by the client.

A script may touch only keys of its own slot, and a checkpoint's keys span several: its
location pointer sits in the id's slot, a nested record's entry in its own name's nested index
in that name's slot. So what crosses slots moves here, each step idempotent and invisible on its
own:

* before a save's script: claim each id's location pointer (a pointer naming a record that no
  longer exists is stale and taken over); for nested records take their sequence numbers from
  their own names' counters and add them to those names' nested indexes. A crash before the
  script leaves only pointers and index entries naming records that do not exist, which every
  read treats as "not found", and the next save of the id takes them over.
* after a delete, prune or delete_workflow script: remove the other slots' pointers and nested
  index entries, and write (or remove) the pruned markers walks read. A crash before that
  leaves stale pointers, which read as not found.
* id-addressed reads and writes read the location pointer first (two round trips).
* the workflow index (storages/redis/workflows.py) is in its own slot: a save adds its names
  before its script, a removal that empties a workflow drops its name after.

Two saves of one id under two different workflows racing on a cluster may both succeed; the
pointer names the later one. On plain Redis the save script refuses the second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..backend import CheckpointRecord
from ..contract import CheckpointID
from ..records import index_text
from .commit import BeforeSave, Located, SlotSpan
from .keys import nested_member
from .replies import text
from .scripts import Claim, UnlinkIf


class ClusterSlotSpan(SlotSpan):
    """The client's half of every write on a Redis Cluster."""

    one_record_script = False
    locates_by_pointer_key = False

    async def locate(self, operation: str, checkpoint_id: CheckpointID) -> Located | None:
        home = await self.connection.call(
            operation, self.connection.client.get(self.keys.location(checkpoint_id))
        )
        if home is None:
            return None
        home_name = index_text(home, checkpoint_id, "location pointer")
        return Located(self.keys.record(home_name, checkpoint_id), home_name)

    async def before_save(self, records: Sequence[CheckpointRecord], home: str) -> BeforeSave:
        """Location pointers, nested sequences and nested index entries, each idempotent, and the
        names in the workflow index; or what the save script would answer, when a claim finds
        an id already stored."""
        if len(records) > 1:
            claimed = await self._claim(records, home)
            if claimed[0] is None:
                await self.list_workflows_of([home, *(record.workflow_name for record in records[1:])])
            return claimed
        # A lone record: its name goes in the index while its pointer is claimed, not after.
        claimed, _ = await asyncio.gather(self._claim(records, home), self.list_workflows_of([home]))
        result: BeforeSave = claimed
        return result

    async def list_workflows_of(self, names: list[str]) -> None:
        """Put ``names`` in the workflow index (a test hook patches it to race a delete)."""
        # Before the script, so a crash between leaves only a name whose workflow has nothing
        # (filtered out on read), never a stored workflow missing from the index.
        if not await self.index.add("save", names):
            await self.index.complete("save")

    async def after_save(self, home: str, *, created: bool) -> None:
        if created:
            # A removal that emptied home may have dropped the name after this save added it.
            await self.index.add("save", [home])

    async def _claim(self, records: Sequence[CheckpointRecord], home: str) -> BeforeSave:
        connection, keys, client = self.connection, self.keys, self.connection.client
        for index, record in enumerate(records):
            location = keys.location(record.checkpoint_id)
            other = await connection.run("save", Claim(pointer=location, home=home, take_over=False))
            if other is None:
                continue
            other_home = index_text(other, record.checkpoint_id, "location pointer")
            digest = await connection.call(
                "save", client.hget(keys.record(other_home, record.checkpoint_id), "d")
            )
            if digest is not None:
                if index == 0:
                    return ("exists", digest), []
                return ("conflict", record.checkpoint_id), []
            # A stale pointer: take it over.
            await connection.run("save", Claim(pointer=location, home=home, take_over=True))
        sequences: list[int | None] = [None] * len(records)
        ttl_ms = connection.settings.ttl_ms
        for index, record in enumerate(records[1:], start=1):
            counter = keys.sequence(record.workflow_name)
            sequence = int(await connection.call("save", client.incr(counter)))
            sequences[index] = sequence
            nested_index = keys.nested(record.workflow_name)
            member = nested_member(home, record.checkpoint_id)
            await connection.call("save", client.zadd(nested_index, {member: sequence}, nx=True))
            if connection.settings.ttl is not None:
                await connection.call("save", client.pexpire(nested_index, int(ttl_ms)))
                await connection.call("save", client.pexpire(counter, int(ttl_ms)))
        return None, sequences

    async def after_removal(
        self, operation: str, removed: list[tuple[str, CheckpointID]], *, pruned_from: str | None
    ) -> None:
        if not removed:
            return
        # The first removed record is top-level, so its workflow is the home of them all.
        home = removed[0][0] if pruned_from is None else pruned_from
        await self._cleaned(operation, removed, pruned_from=pruned_from)
        if pruned_from is not None and self.connection.settings.ttl is not None:
            await self.index.add(operation, [pruned_from])  # its tombstones live as long as its entry
        await self.index.unlist_emptied(operation, [home, *(workflow for workflow, _ in removed)])

    async def _cleaned(
        self, operation: str, removed: list[tuple[str, CheckpointID]], *, pruned_from: str | None
    ) -> None:
        """The removed records' pointers and nested index entries, and the pruned markers."""
        connection, keys, client = self.connection, self.keys, self.connection.client
        home = removed[0][0] if pruned_from is None else pruned_from
        for workflow_name, checkpoint_id in removed:
            await connection.run(operation, UnlinkIf(pointer=keys.location(checkpoint_id), home=home))
            member = nested_member(home, checkpoint_id)
            await connection.call(operation, client.zrem(keys.nested(workflow_name), member))
            if pruned_from is not None:
                pruned = keys.pruned(checkpoint_id)
                await connection.call(operation, client.set(pruned, pruned_from))
                if connection.settings.ttl is not None:
                    await connection.call(operation, client.pexpire(pruned, int(connection.settings.ttl_ms)))

    async def after_workflow_deleted(self, workflow_name: str, tombstones: Sequence[Any]) -> None:
        for pruned in tombstones:
            call = UnlinkIf(pointer=self.keys.pruned(text(pruned)), home=workflow_name)
            await self.connection.run("delete_workflow", call)
        await self.index.unlist_emptied("delete_workflow", [workflow_name])
