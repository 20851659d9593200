"""The read primitives: each one script (plus the location lookup on a cluster), never writing.

Reads never answer with something other than what was asked for: an index entry whose record
is gone and which expiry does not explain (no TTL, or a record newer than one still stored) was
lost, evicted or deleted behind the storage's back, and ``get_latest`` and listing raise
:class:`~storages.errors.CheckpointCorruptedError` naming it instead of answering with an older
checkpoint or a shorter list.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ..backend import StoredBody, WalkRecords, info_from_index
from ..contract import CheckpointID, CheckpointInfo
from ..errors import CheckpointCorruptedError
from ..records import index_text
from .client import RedisConnection
from .commit import SlotSpan
from .keys import split_member
from .replies import body_pairs, decoded_ids, no_body, optional_text, text
from .scripts import Fetch, Latest, ListIds, Page, Read, Walk

PAGE_SIZE = 500
"""list_checkpoints reads bodies in pages of this many, one script call per page (a page of
bodies is about a megabyte); list_checkpoint_ids reads the whole index in one call."""


class Reads:
    def __init__(self, connection: RedisConnection, span: SlotSpan) -> None:
        self.connection = connection
        self.keys = connection.keys
        self.span = span

    async def read(self, operation: str, checkpoint_id: CheckpointID, what: str) -> Any:
        located = await self.span.locate(operation, checkpoint_id)
        if located is None:
            return None
        call = Read(route=located.route, id=checkpoint_id, given_home=located.given_home, what=what)
        return await self.connection.run(operation, call)

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        found: dict[CheckpointID, bytes] = {}
        for container_id in checkpoint_ids:
            found.update(body_pairs(await self.read("load", container_id, "nested") or []))
        return found

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        reply = await self.read("list_nested", checkpoint_id, "children")
        if reply is None:
            return None
        try:
            return list(map(bytes.decode, reply[0]))
        except UnicodeDecodeError:  # the container is the record the store damaged
            return [index_text(child, checkpoint_id, "nested id") for child in reply[0]]

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        reply = await self.read("checkpoint_info", checkpoint_id, "info")
        return None if reply is None else info_from_index(checkpoint_id, *reply)

    async def latest(self, workflow_name: str, signature: str | None) -> StoredBody | None:
        tag = self.keys.tag(workflow_name)
        call = Latest(index=self.keys.index_under(tag, signature), home_tag=tag)
        reply = await self.connection.run("get_latest", call)
        if reply is None:
            return None
        if len(reply) == 1:
            where = _index_name(workflow_name, signature)
            raise lost_entry("get_latest", workflow_name, signature, text(reply[0], where), 1)
        try:
            latest_id = reply[0].decode()
        except UnicodeDecodeError:  # the index is only named, at some cost, when it is damaged
            latest_id = text(reply[0], _index_name(workflow_name, signature))
        if reply[1] is None:
            raise no_body(latest_id)
        # The head's rivals, when it has any, come last: the only element past its id, body and
        # nested (id, body) pairs that makes the reply's length odd.
        rivals = _rivals(reply.pop(), _index_name(workflow_name, signature)) if len(reply) % 2 else ()
        nested = body_pairs(reply, 2, f"the nested records of {latest_id!r}") if len(reply) > 2 else None
        return StoredBody(latest_id, reply[1], nested, rivals=rivals)

    async def list_ids(
        self, workflow_name: str, signature: str | None, include_nested: bool
    ) -> list[CheckpointID]:
        operation = "list_checkpoint_ids"
        index = self.keys.index(workflow_name, signature)
        settings = self.connection.settings
        if (
            not include_nested
            and settings.ttl is None
            and not settings.allow_evicting_policy
            and self.span.locates_by_pointer_key
        ):
            # Records that cannot expire or be evicted are lost only when deleted behind the
            # storage's back, and the read that needs one reports it (load, get_latest,
            # list_checkpoints: CheckpointCorruptedError naming it). Checking every entry here
            # cost ten times the ZRANGE on the server (docs/redis.md), for that case alone.
            # Plain Redis only: on a cluster a load cannot tell a lost record from one whose
            # save is between its steps, so the listing checks.
            listed = await self.connection.call(operation, self.connection.client.zrange(index, 0, -1))
            return decoded_ids(listed, _index_name(workflow_name, signature))
        call = ListIds(index=index, home=workflow_name, with_scores=include_nested)
        entries, lost, first_lost = await self.connection.run(operation, call)
        if not lost and not include_nested:
            try:
                return list(map(bytes.decode, entries))
            except UnicodeDecodeError:  # the index is only named, at some cost, when it is damaged
                pass
        where = _index_name(workflow_name, signature)
        if lost:
            raise lost_entry(operation, workflow_name, signature, text(first_lost, where), int(lost))
        if not include_nested:
            return decoded_ids(entries, where)
        rows: list[tuple[float, CheckpointID, bytes | None]] = [
            (float(entries[i + 1]), text(entries[i], where), None) for i in range(0, len(entries), 2)
        ]
        rows += await self._nested_rows(operation, workflow_name, signature, with_bodies=False)
        rows.sort(key=lambda row: row[0])
        return [checkpoint_id for _, checkpoint_id, _ in rows]

    async def list_bodies(
        self, workflow_name: str, signature: str | None, include_nested: bool
    ) -> list[StoredBody]:
        """(sequence, id, body) of the workflow's records in sequence order, read page by page."""
        operation = "list_checkpoints"
        index = self.keys.index(workflow_name, signature)
        rows: list[tuple[float, CheckpointID, bytes | None]] = []
        gone: list[tuple[float, CheckpointID]] = []
        after = "-inf"
        where = _index_name(workflow_name, signature)
        while True:
            call = Page(index=index, home=workflow_name, after=after, limit=PAGE_SIZE)
            flat, last, flat_gone, bodiless = await self.connection.run(operation, call)
            if bodiless is not None:
                raise no_body(text(bodiless, where))
            for position in range(0, len(flat), 3):
                rows.append(
                    (float(flat[position + 1]), text(flat[position], where), bytes(flat[position + 2]))
                )
            for position in range(0, len(flat_gone), 2):
                gone.append((float(flat_gone[position + 1]), text(flat_gone[position], where)))
            if last is None:
                break
            after = text(last, where)
        if gone:
            # With a TTL, records expire oldest first, so entries older than every record still
            # stored are expired ones; any other entry without its record is a lost checkpoint.
            oldest_stored = rows[0][0] if rows else float("inf")
            lost = gone if self.connection.settings.ttl is None else [e for e in gone if e[0] > oldest_stored]
            if lost:
                raise lost_entry(operation, workflow_name, signature, lost[0][1], len(lost))
        if include_nested:
            rows += await self._nested_rows(operation, workflow_name, signature, with_bodies=True)
            rows.sort(key=lambda row: row[0])
        return [StoredBody(checkpoint_id, body) for _, checkpoint_id, body in rows if body is not None]

    async def _nested_rows(
        self, operation: str, workflow_name: str, signature: str | None, *, with_bodies: bool
    ) -> list[tuple[float, CheckpointID, bytes | None]]:
        """(sequence, id, body) of the records named ``workflow_name`` nested in any checkpoint."""
        client = self.connection.client
        members = await self.connection.call(
            operation, client.zrange(self.keys.nested(workflow_name), 0, -1, withscores=True)
        )
        by_home: dict[str, list[tuple[CheckpointID, float]]] = {}
        where = f"the nested index of workflow {workflow_name!r}"
        for member, score in members:
            home, checkpoint_id = split_member(text(member, where))
            by_home.setdefault(home, []).append((checkpoint_id, float(score)))
        rows: list[tuple[float, CheckpointID, bytes | None]] = []
        for home, entries in by_home.items():
            replies = await self.fetch(
                operation, home, [checkpoint_id for checkpoint_id, _ in entries], "body"
            )
            for (checkpoint_id, score), reply in zip(entries, replies, strict=True):
                if reply is None:
                    continue  # a pointer to a record that expired or was never completed
                if reply[0] is None:
                    raise no_body(checkpoint_id)
                body, record_signature = (
                    bytes(reply[0]),
                    index_text(reply[1], checkpoint_id, "graph signature"),
                )
                if signature is None or record_signature == signature:
                    rows.append((score, checkpoint_id, body if with_bodies else None))
        return rows

    async def fetch(
        self, operation: str, home: str, checkpoint_ids: list[CheckpointID], what: str
    ) -> list[Any]:
        replies: list[Any] = []
        for start in range(0, len(checkpoint_ids), PAGE_SIZE):
            call = Fetch(
                route=self.keys.top(home), home=home, what=what, ids=checkpoint_ids[start : start + PAGE_SIZE]
            )
            replies += await self.connection.run(operation, call)
        return replies

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        operation = "walk_ancestry" if with_bodies else "walk_ancestry_ids"
        client = self.connection.client
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        start: CheckpointID | None = checkpoint_id
        while start is not None and len(links) < max_depth:
            located = await self.span.locate(operation, start)
            reply = None
            if located is not None:
                call = Walk(
                    route=located.route,
                    start=start,
                    given_home=located.given_home,
                    depth=max_depth - len(links),
                    with_bodies=with_bodies,
                )
                reply = await self.connection.run(operation, call)
            if reply is None or (not reply[0] and optional_text(reply[3]) == start):
                # Cluster only: no pointer for this id, or a pointer whose record is gone
                # (expired, or a save that never completed).
                if await self.connection.call(operation, client.exists(self.keys.pruned(start))):
                    tombstones.add(start)
                break
            flat_links, flat_bodies, flat_tombstones, unresolved = reply
            where = f"the ancestry of {start!r}"
            for position in range(0, len(flat_links), 2):
                links[text(flat_links[position], where)] = _previous_id(flat_links, position)
            bodies.update(body_pairs(flat_bodies, 0, where))
            tombstones.update(text(item, where) for item in flat_tombstones)
            # On a cluster the chain may continue in another workflow's slot: one more call there.
            start = optional_text(unresolved, where)
            if start is not None and start in links:
                break
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        operation = "list_records"
        if workflow_name is not None:
            names = [workflow_name]
        else:
            names = await self.span.index.names(operation, ("top", "nested"))
        client = self.connection.client
        infos: list[CheckpointInfo] = []
        for name in names:
            top = await self.connection.call(operation, client.zrange(self.keys.top(name), 0, -1))
            by_home: dict[str, list[CheckpointID]] = {name: decoded_ids(top, _index_name(name, None))}
            nested_index = f"the nested index of workflow {name!r}"
            for member in await self.connection.call(operation, client.zrange(self.keys.nested(name), 0, -1)):
                home, checkpoint_id = split_member(text(member, nested_index))
                by_home.setdefault(home, []).append(checkpoint_id)
            for home, ids in by_home.items():
                replies = await self.fetch(operation, home, ids, "info")
                infos += [
                    info_from_index(i, *reply)
                    for i, reply in zip(ids, replies, strict=True)
                    if reply is not None
                ]
        return infos

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        operation = "list_tombstones"
        names = (
            [workflow_name]
            if workflow_name is not None
            else await self.span.index.names(operation, ("tombs",))
        )
        found: set[CheckpointID] = set()
        for name in names:
            members = await self.connection.call(
                operation, self.connection.client.smembers(self.keys.tombstones(name))
            )
            found.update(decoded_ids(list(members), f"the tombstones of workflow {name!r}"))
        return found


def lost_entry(
    operation: str, workflow_name: str, signature: str | None, checkpoint_id: CheckpointID, count: int
) -> CheckpointCorruptedError:
    """A checkpoint the index lists whose record is gone: evicted, or deleted behind our back.
    Reads report it rather than skip it, and never answer with an older checkpoint instead."""
    index = f"workflow {workflow_name!r}" + ("" if signature is None else f" (graph signature {signature!r})")
    others = "" if count == 1 else f" ({count - 1} more index entries have lost their records too)"
    instead = "fall back to an older checkpoint" if operation == "get_latest" else "skip lost checkpoints"
    return CheckpointCorruptedError(
        checkpoint_id,
        f"{index} lists it, but its record is gone from the server{others}: evicted by its "
        f"maxmemory-policy, or deleted outside this storage; {operation} does not {instead}",
    )


def _rivals(flat: Sequence[Any], where: str) -> tuple[StoredBody, ...]:
    """The head's rivals from the latest script's {id, body, {id, body, ... nested}, ...}, in
    ascending sequence, each with its nested bodies as the head has them."""
    rivals = []
    for position in range(0, len(flat), 3):
        rival_id, body, nested = text(flat[position], where), flat[position + 1], flat[position + 2]
        if body is None:
            raise no_body(rival_id)
        rivals.append(
            StoredBody(
                rival_id, bytes(body), body_pairs(nested, 0, f"the nested records of {rival_id!r}") or None
            )
        )
    return tuple(rivals)


def _index_name(workflow_name: str, signature: str | None) -> str:
    """How an error names the index a listing or latest read (an id it holds is not UTF-8)."""
    suffix = "" if signature is None else f" (graph signature {signature!r})"
    return f"the index of workflow {workflow_name!r}{suffix}"


def _previous_id(flat_links: Sequence[Any], position: int) -> CheckpointID | None:
    """The previous id of a walked link, its record named when it is not UTF-8."""
    previous = flat_links[position + 1]
    if previous is None:
        return None
    return index_text(previous, text(flat_links[position]), "previous id")
