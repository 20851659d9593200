"""The prefix's workflow index, ``P:workflows``: how listings find workflow names without SCAN.

SCAN is not restricted by ACL key patterns: a user allowed only ``~A:*`` who SCANs with
``MATCH B:*`` is given B's key names. So listings read the index, a key of the prefix, which the
server refuses to a user without access to it; they SCAN only for a store written before the
index existed (see below), and only after that read was allowed.

What it holds: a sorted set of every workflow name with a top-level index, a nested index or
tombstones (``WORKFLOW_KINDS``), scored with when its keys expire (+inf without a TTL), plus the
member ``''`` once it is *complete*, listing every such workflow.

Who keeps it:

* plain Redis: the write scripts, atomically with what they write (scripts/keys.lua ``listed``,
  scripts/families.lua ``unlist_emptied``); a save pays one ``ZADD`` in its script (with a TTL,
  ``TIME`` and ``PEXPIRE`` too), no round trip; a name new to the index also tests that it is
  complete;
* a cluster: the index is in its own slot, which the scripts cannot reach, so the client adds a
  saved workflow's name before its script (at the same time as the id's pointer claim, so no
  longer wait), and again after it when the script says the workflow was empty before; a removal
  that empties a workflow removes the name, then looks again and adds it back if a save came in
  between. Whatever a crash leaves (a name whose workflow has nothing) is filtered out on read.

Reads never trust it alone: a listing keeps the names whose keys of the kinds asked for exist
(one ``EXISTS`` each, pipelined), so names of expired workflows, or left by a crash, are not
listed. An index that is not complete (a store written before it existed) is completed by the
next save, once: a SCAN for this prefix's keys, its names added with the mark. Until then a
listing adds the names SCAN finds, after reading the index (so a user without access to the
prefix is refused before any SCAN).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .client import RedisConnection
from .keys import WORKFLOW_KINDS
from .replies import workflow_name
from .scripts import ListAdd

_CHUNK = 1000
"""Names checked per pipelined batch of EXISTS, and added per ListAdd call."""


class WorkflowIndex:
    """The workflow index of one connection's prefix."""

    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection
        self.keys = connection.keys

    async def names(self, operation: str, kinds: Sequence[str]) -> list[str]:
        """Sorted names of the workflows with a key of one of ``kinds`` (``top``, ``nested``,
        ``tombs``)."""
        connection, keys = self.connection, self.keys
        members = await connection.call(operation, connection.client.zrange(keys.workflows, 0, -1))
        where = f"the workflow index {keys.workflows!r}"
        names = {workflow_name(member, f"{where} (member {member!r})") for member in members if member != b""}
        if b"" not in members:
            names.update(await self.scanned(operation))
        listed = sorted(names)
        present: list[str] = []
        for start in range(0, len(listed), _CHUNK):
            chunk = listed[start : start + _CHUNK]
            pipeline = self._pipeline()
            for name in chunk:
                tag = keys.tag(name)
                pipeline.exists(*(keys.under(tag, kind) for kind in kinds))
            counts = await connection.call(operation, pipeline.execute())
            present += [name for name, count in zip(chunk, counts, strict=True) if count]
        return present

    def _pipeline(self) -> Any:
        client = self.connection.client
        return client.pipeline() if self.connection.cluster else client.pipeline(transaction=False)

    async def scanned(self, operation: str) -> set[str]:
        """Names of the workflows with a key of any kind the index lists, found with SCAN (a
        store written before the index existed)."""
        keys, found = self.keys, set()

        async def scan() -> None:
            async for key in self.connection.client.scan_iter(match=keys.listing_pattern(), count=1000):
                listed = keys.listed_workflow(workflow_name(key, f"the key {key!r}"))
                if listed is not None:
                    found.add(listed[0])

        await self.connection.call(operation, scan())
        return found

    async def add(self, operation: str, names: Iterable[str], *, complete: bool = False) -> bool:
        """Add ``names`` (and with ``complete``, the mark); whether the index is complete."""
        listed = list(dict.fromkeys(names))
        marked = False
        for start in range(0, max(len(listed), 1), _CHUNK):
            last = start + _CHUNK >= len(listed)
            call = ListAdd(
                index=self.keys.workflows, complete=complete and last, names=listed[start : start + _CHUNK]
            )
            marked = bool(await self.connection.run(operation, call))
        return marked

    async def complete(self, operation: str) -> None:
        """Make the index complete: every workflow SCAN finds under the prefix, then the mark."""
        await self.add(operation, sorted(await self.scanned(operation)), complete=True)

    async def unlist_emptied(self, operation: str, names: Iterable[str]) -> None:
        """A cluster, after a removal: drop the names whose workflows have nothing left. The name
        goes first and the keys are looked at again after, so a save that came in between (it
        added the name before its script) is listed again."""
        connection, client = self.connection, self.connection.client
        for name in dict.fromkeys(names):
            tag = self.keys.tag(name)
            workflow_keys = [self.keys.under(tag, kind) for kind in WORKFLOW_KINDS]
            if await connection.call(operation, client.exists(*workflow_keys)):
                continue
            await connection.call(operation, client.zrem(self.keys.workflows, name))
            if await connection.call(operation, client.exists(*workflow_keys)):
                await self.add(operation, [name])
