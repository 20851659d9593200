"""The S3 backend: the primitives (storages/backend.py) over the S3 parts.

:mod:`.config` validates the options, :mod:`.client` sends the requests, :mod:`.commit` (and
:mod:`.fence` for fenced saves) decides how writes become visible; this module wires them into
the primitives and answers the reads. The key layout is in
:mod:`.layout`, the protocol and its crash points in :mod:`.commit`, figures in docs/s3.md.

Reads: load is a GET of the record plus a HEAD of its order key (the visibility check: a record
without its order key, left by a crashed save, reads as absent as it does in listings); latest is
one one-item LIST, then one GET and two LISTs together (the newest record, its successors and its
siblings: storages/s3/lineage.py; a root has no siblings, and lists the order key committed right
before it instead), more only where there are rivals; ancestry walks cost one GET
per step, sequential because each step reveals the next id (the nested records of a step are
fetched concurrently).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Self

from ..backend import Backend, CheckpointRecord, FenceCheck, InsertResult, Leftover, StoredBody, WalkRecords
from ..contract import Capability, CheckpointID, CheckpointInfo
from ..errors import CheckpointCorruptedError, InvalidCheckpointIdError
from . import leftovers, lineage
from .client import LIST_PAGE, S3Client, gather
from .commit import CommitProtocol
from .config import S3Settings
from .fence import insert_fenced
from .layout import KeyLayout, OrderEntry, signature_tag, unescape_component


class S3Backend(Backend):
    """Checkpoints in an S3 bucket under a prefix. Handles on one bucket/prefix share one store.

    The first handle to open on a store checks that it enforces conditional writes (docs/s3.md)
    and refuses one that does not with
    :class:`~storages.errors.ConditionalWritesNotEnforcedError`. ``unsafe_single_writer=True``
    skips that check, emulates the conditions by reading first (correct for one writing process
    only) and withdraws the ``fencing`` capability; ``describe()`` says so.
    """

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,
            Capability.ANCESTRY,
            Capability.NESTED,
            Capability.PRUNE,
            Capability.LIST_WORKFLOWS,
            Capability.RAW_ACCESS,
            Capability.INSPECT,
            Capability.PENDING_WRITES,
            Capability.SHARED,
            Capability.DURABLE,
            Capability.FENCING,
        }
    )

    def __init__(self, settings: S3Settings) -> None:
        self._settings = settings
        if settings.unsafe_single_writer:
            # Fencing needs a compare-and-swap the store decides; a read-then-write is not one.
            self.capabilities = type(self).capabilities - {Capability.FENCING}
        self._keys = KeyLayout(settings.prefix)
        self._client = S3Client(settings)
        self._protocol = CommitProtocol(settings, self._client, self._keys)

    def new_handle(self) -> Self:
        # The first handle created the bucket, or said why not.
        return type(self)(dataclasses.replace(self._settings, create_bucket=False))

    @property
    def settings(self) -> S3Settings:
        return self._settings

    @property
    def bucket(self) -> str:
        return self._settings.bucket

    @property
    def prefix(self) -> str:
        return self._settings.prefix

    @property
    def client(self) -> S3Client:
        """The handle's S3 client (requests, retries, error translation). A test hook."""
        return self._client

    @property
    def protocol(self) -> CommitProtocol:
        """The commit protocol (how writes become visible). A test hook."""
        return self._protocol

    @property
    def keys(self) -> KeyLayout:
        return self._keys

    def describe(self) -> str:
        return self._settings.describe()

    # ------------------------------------------------------------------ lifecycle

    async def open(self, operation: str) -> None:
        await self._client.open()

    async def close(self) -> None:
        await self._client.close()

    # ------------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return InsertResult.of_stored_digest(await self._protocol.insert(records), records[0])

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await insert_fenced(self._protocol, records, expected_latest_id, self._latest_id)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self._protocol.remove(checkpoint_id)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self._protocol.overwrite_body(checkpoint_id, body)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        protected: set[str] = set()
        if keep_last > 0:
            newest = await self._protocol.top_head(workflow_name, "prune")
            if newest is not None:
                head = await lineage.head(self._protocol, workflow_name, newest, "prune")
                rivals = await lineage.rivals(self._protocol, workflow_name, head, "prune", lineage.UNLISTED)
                protected = {head.entry.key, *(rival.key for rival in rivals)}
        return await self._protocol.prune(workflow_name, keep_last, protected)

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self._protocol.delete_workflow(workflow_name)

    # ------------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        stored = await self._protocol.read(checkpoint_id, "load")
        if stored is None or not await self._protocol.visible(stored.header, "load"):
            return None
        return stored.stored_body()

    async def _latest_id(self, workflow_name: str) -> CheckpointID | None:
        latest = await self.latest(workflow_name, None)
        return None if latest is None else latest.checkpoint_id

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        prefix = self._keys.order_prefix(workflow_name, False)
        tag = None if graph_signature_hash is None else signature_tag(graph_signature_hash)
        start_after: str | None = None
        while True:
            # Unfiltered: the first key is the answer, one item suffices (a root's probe lists the
            # one before it with its record: storages/s3/lineage.py). Filtered: a page at a time.
            page, more = await self._client.list_page(
                "get_latest", prefix, start_after, 1 if tag is None else LIST_PAGE
            )
            for index, key in enumerate(page):
                start_after = key
                entry = self._keys.parse_order_key(key, False)
                if entry is None or (tag is not None and entry.tag != tag):
                    continue
                before = lineage.Before(page[index + 1 :], more)
                found = await lineage.latest_record(
                    self._protocol, workflow_name, entry, "get_latest", before
                )
                if found is not None and (
                    graph_signature_hash is None
                    or found.head.header.graph_signature_hash == graph_signature_hash
                ):
                    stored = found.head.stored_body()
                    if not found.rivals:
                        return stored
                    return dataclasses.replace(stored, rivals=[rival.stored_body() for rival in found.rivals])
            if not more:
                return None

    async def _listing(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool, operation: str
    ) -> list[OrderEntry]:
        """Order entries oldest first, optionally with nested ones and of one signature. (Order keys
        name the reversed sequence first: ascending names are newest first, so sort by name and
        reverse.)"""
        listings = await gather(
            self._protocol.entries(workflow_name, nested=nested, operation=operation)
            for nested in ((False, True) if include_nested else (False,))
        )
        entries: list[OrderEntry] = sorted(
            (entry for listing in listings for entry in listing),
            key=lambda e: e.key.rpartition("/")[2],
            reverse=True,
        )
        if graph_signature_hash is not None:
            tag = signature_tag(graph_signature_hash)
            entries = [entry for entry in entries if entry.tag == tag]
        return entries

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        entries = await self._listing(workflow_name, graph_signature_hash, include_nested, "list_checkpoints")
        stored = await gather(
            self._protocol.read_entry(entry, "list_checkpoints", lost_is_error=True) for entry in entries
        )
        return [
            item.stored_body()
            for item in stored
            # None: deleted since the listing, as if the listing had come a moment later.
            if item is not None
            and (graph_signature_hash is None or item.header.graph_signature_hash == graph_signature_hash)
        ]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        entries = await self._listing(
            workflow_name, graph_signature_hash, include_nested, "list_checkpoint_ids"
        )
        ids: list[CheckpointID] = []
        for entry in entries:
            checkpoint_id = entry.checkpoint_id
            if checkpoint_id is None:  # a hashed (very long) id: the record knows it
                stored = await self._protocol.read_entry(entry, "list_checkpoint_ids", lost_is_error=True)
                if stored is None:
                    continue
                checkpoint_id = stored.header.checkpoint_id
            ids.append(checkpoint_id)
        return ids

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        read = self._protocol.read
        containers = await gather(read(i, "load") for i in checkpoint_ids)
        wanted = list(dict.fromkeys(d for c in containers if c is not None for d in c.header.descendants))
        found = await gather(read(i, "load") for i in wanted)
        return {item.header.checkpoint_id: item.body for item in found if item is not None}

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        protocol = self._protocol
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            stored = await protocol.read(current, "walk_ancestry")
            if (
                stored is not None
                and current == checkpoint_id
                and not await protocol.visible(stored.header, "walk_ancestry")
            ):
                stored = None
            if stored is None:
                if await self._client.exists("walk_ancestry", self._keys.tombstone_keys("", current)[1]):
                    tombstones.add(current)
                break
            header = stored.header
            links[current] = header.previous_checkpoint_id
            if with_bodies:
                bodies[current] = stored.body
                nested = await gather(protocol.read(i, "walk_ancestry") for i in header.descendants)
                bodies.update((n.header.checkpoint_id, n.body) for n in nested if n is not None)
            current = header.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        stored = await self._protocol.read(checkpoint_id, "list_nested")
        if stored is None or not await self._protocol.visible(stored.header, "list_nested"):
            return None
        return list(stored.header.children)

    async def workflow_names(self) -> list[str]:
        prefix = self._keys.workflows_prefix()
        escaped = await self._client.common_prefixes("list_workflows", prefix)
        names: list[str] = []

        async def check(escaped_name: str) -> None:
            key = await self._client.first_key("list_workflows", f"{prefix}{escaped_name}/t/")
            if key is None:
                return
            try:
                name = unescape_component(escaped_name)
            except CheckpointCorruptedError:
                raise InvalidCheckpointIdError(
                    "workflow_name",
                    escaped_name,
                    "is not UTF-8 text: the S3 key of a workflow spells bytes that are not, a name no "
                    "storage writes (a damaged or hostile store)",
                ) from None
            if name is None:
                entry = self._keys.parse_order_key(key, False)
                stored = None if entry is None else await self._protocol.read_entry(entry, "list_workflows")
                if stored is None:
                    return
                name = stored.header.workflow_name
            names.append(name)

        await gather(check(name) for name in escaped)
        return names

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        stored = await self._protocol.read(checkpoint_id, "checkpoint_info")
        if stored is None or not await self._protocol.visible(stored.header, "checkpoint_info"):
            return None
        return stored.info()

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        if workflow_name is not None:
            entries = await self._listing(workflow_name, None, True, "list_records")
        else:
            entries = []
            for key in await self._client.list_keys("list_records", self._keys.workflows_prefix()):
                kind = key.rsplit("/", 2)[-2] if key.count("/") >= 2 else ""
                if kind in ("t", "n"):
                    entry = self._keys.parse_order_key(key, kind == "n")
                    if entry is not None:
                        entries.append(entry)
        stored = await gather(self._protocol.read_entry(entry, "list_records") for entry in entries)
        return [item.info() for item in stored if item is not None]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        prefix = self._keys.tombstone_prefix(workflow_name)
        keys = await self._client.list_keys("list_tombstones", prefix)
        ids: list[CheckpointID] = []
        for key in keys:
            checkpoint_id = unescape_component(key[len(prefix) :])
            if checkpoint_id is not None:
                ids.append(checkpoint_id)
        return ids

    # ------------------------------------------------------------------ after faults

    async def leftovers(self, workflow_name: str | None) -> Sequence[Leftover]:
        return await leftovers.find(self._protocol, workflow_name)

    async def repair_leftover(self, leftover: Leftover) -> str | None:
        return await leftovers.repair(self._protocol, leftover)


__all__ = ["S3Backend"]
