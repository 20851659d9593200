"""The S3 commit protocol: how a save becomes visible atomically, how sequences stay monotonic,
and how partial saves, deletes and prunes are recovered.

S3 has no transactions and no server-side counter, only create-only writes (``IfNoneMatch="*"``),
compare-and-swap writes (``IfMatch=etag``), strong read-after-write consistency and listings in
ascending key order. Everything below is built from those four facts.

A save (one checkpoint with its nested records), each step one round trip of concurrent requests:

1. **High-water mark** of each workflow it writes: GET the pointer, LIST (one item) the head of
   ``t/``. The new sequence is one more than the larger.
2. **Records**, create-only: the nested records, then the checkpoint's own, with its group key
   if it continues another (storages/s3/lineage.py; a root has none: its order key ends in
   ``.r``). The record key is the id, so this is where a duplicate id is caught (two writers,
   one wins).
3. **Pointer floors**, only for workflows that receive nested records: the pointer is moved
   (compare-and-swap, only forward) to the highest nested sequence. Top-level order keys need no
   floor: the ``t/`` head already says how far they went.
4. **Order keys**, create-only: the nested records', then the checkpoint's own, **the commit
   point.** A record is visible (loadable, listed, latest) only once its order key exists.

A plain save is therefore 1 GET + 1 LIST + 3 PUT in 3 round trips for a checkpoint continuing
another (the group key is the third PUT, in the round trip of the record), 1 GET + 1 LIST + 2 PUT
for a root. Every sequence a committed
record holds is at most max(pointer, ``t/`` head) of its workflow, because nested records raise
the pointer before their order keys exist; so a save that starts after another returned gets a
higher number.

Deleting or pruning the newest records would let the ``t/`` head go back: delete, prune and
delete_workflow raise each affected workflow's pointer to the highest sequence they remove
*before* removing any order key, then remove the order keys (the records stop being visible),
then the records. A crash anywhere leaves a higher floor (harmless), or unlisted records that read
as not found (garbage, removed by deleting the id again).

Crash points of a save: after step 2 the records are invisible and a retried save finds them,
checks the digest and finishes steps 3 and 4 at the recorded sequence; after step 3 the floor is
merely high; after step 4 the checkpoint is committed. A retried save adopts the nested records an
earlier attempt at the same checkpoint left; stale ones with other content are replaced only on
its last tries, so a concurrent save of the same container id can store its container first.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..backend import CheckpointRecord
from ..contract import CheckpointID
from ..errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    NestedCheckpointDeletionError,
    StorageUnavailableError,
)
from .client import S3Client, backoff, gather
from .config import S3Settings
from .layout import (
    HASHED,
    Header,
    KeyLayout,
    Member,
    OrderEntry,
    Pointer,
    Stored,
    escape_component,
    frame,
    signature_tag,
)
from .precondition import CONDITION_FAILED, CREATE_ONLY

UNREAD: object = object()
"""A pointer not read yet (None means read and absent)."""
KnownPointers = Mapping[str, Pointer | None]
"""Pointers already read, by workflow name."""


class CommitProtocol:
    """Reads and writes of records as the protocol defines them, over one handle's client."""

    def __init__(self, settings: S3Settings, client: S3Client, layout: KeyLayout) -> None:
        self.settings = settings
        self.client = client
        self.keys = layout

    # ------------------------------------------------------------------ reading records

    async def read(self, checkpoint_id: CheckpointID, operation: str) -> Stored | None:
        key = self.keys.record_key(checkpoint_id)
        found = await self.client.get(operation, key)
        if found is None:
            return None
        raw, etag = found
        head, newline, body = raw.partition(b"\n")
        if not newline:
            raise CheckpointCorruptedError(checkpoint_id, f"the S3 object {key} has no record header")
        header = Header.decode(checkpoint_id, head)
        if header.checkpoint_id != checkpoint_id and escape_component(checkpoint_id)[0] != HASHED:
            raise CheckpointCorruptedError(
                checkpoint_id, f"the S3 object {key} holds checkpoint {header.checkpoint_id!r}"
            )
        return Stored(header, body, etag)

    async def read_entry(
        self, entry: OrderEntry, operation: str, *, lost_is_error: bool = False
    ) -> Stored | None:
        """The record an order key names, or None if it was deleted (or re-saved) since.

        A delete removes the order key before the record, so an order key that is still there
        while its record is missing (or is another save's) was not left by a delete: the record
        was lost behind the storage's back. With ``lost_is_error`` (the reads that return
        checkpoints) that raises rather than act as if the checkpoint never existed: a get_latest
        would otherwise return an older one. Maintenance (prune, inspect) skips it.
        """
        checkpoint_id = entry.checkpoint_id
        if checkpoint_id is None:
            stored = await self._read_hashed(entry.escaped_id, operation)
        else:
            stored = await self.read(checkpoint_id, operation)
        if stored is not None and stored.header.sequence == entry.sequence:
            return stored
        if lost_is_error and await self.client.exists(operation, entry.key):
            named = checkpoint_id if checkpoint_id is not None else entry.escaped_id
            found = "is missing" if stored is None else f"holds sequence {stored.header.sequence}"
            raise CheckpointCorruptedError(
                named, f"its order key {entry.key!r} is listed but its record {found}; nothing was deleted"
            )
        return None

    async def _read_hashed(self, escaped_id: str, operation: str) -> Stored | None:
        found = await self.client.get(operation, self.keys.hashed_record_key(escaped_id))
        if found is None:
            return None
        head, _, body = found[0].partition(b"\n")
        return Stored(Header.decode(escaped_id, head), body, found[1])

    async def visible(self, header: Header, operation: str) -> bool:
        """Committed: its order key exists (a crashed save's record has none)."""
        return await self.client.exists(operation, self.keys.header_order_key(header))

    async def read_pointer(self, workflow_name: str, operation: str) -> Pointer | None:
        key = self.keys.pointer_key(workflow_name)
        found = await self.client.get(operation, key)
        if found is None:
            return None
        raw, etag = found
        try:
            data = json.loads(raw)
            checkpoint_id = data.get("id")
            return Pointer(int(data["seq"]), checkpoint_id if isinstance(checkpoint_id, str) else None, etag)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageUnavailableError(
                operation, f"{self.settings.describe()}: pointer {key} is unreadable: {exc}"
            ) from exc

    async def top_head(self, workflow_name: str, operation: str) -> OrderEntry | None:
        """The newest top-level order key of a workflow (one one-item LIST)."""
        key = await self.client.first_key(operation, self.keys.order_prefix(workflow_name, False))
        return None if key is None else self.keys.parse_order_key(key, False)

    async def high_water(self, workflow_name: str, operation: str) -> Mark:
        """The highest sequence a workflow has used, max(pointer, ``t/`` head), with the pointer and
        the head."""
        pointer, head = await gather(
            [self.read_pointer(workflow_name, operation), self.top_head(workflow_name, operation)]
        )
        return Mark(
            max(0 if pointer is None else pointer.sequence, 0 if head is None else head.sequence),
            pointer,
            head,
        )

    # ------------------------------------------------------------------ saving

    async def insert(self, records: Sequence[CheckpointRecord]) -> str | None:
        """A plain save: None if it was written, else the digest stored under the top id."""
        top = records[0]
        retries = self.settings.conflict_retries
        for attempt in range(retries + 1):
            written = await self.write_records(records, attempt)
            if written is None:
                continue  # a nested record changed under the save, or is being saved: try again
            if written.created:
                await self.commit(written.headers[0], "save", written.pointers)
                return None
            existing = await self.read(top.checkpoint_id, "save")
            if existing is None:
                continue  # deleted between the write and the read: try again
            # Same id stored, maybe left half-saved by a crash or still being saved by a concurrent
            # writer: finish its commit (idempotent: its order keys are fixed by its header).
            if not await self.visible(existing.header, "save"):
                await self.finish(existing.header, "save")
            return existing.header.digest
        raise StorageUnavailableError(
            "save",
            f"{self.settings.describe()}: {self.keys.record_key(top.checkpoint_id)} kept changing "
            "under the save",
        )

    async def write_records(
        self, records: Sequence[CheckpointRecord], attempt: int, known: Mapping[str, Mark] | None = None
    ) -> Written | None:
        """Steps 1 and 2 of every save, plain or fenced (fence.py): number the records (``known``:
        high-water marks already read, by workflow name), create the nested records, adopting
        those an earlier attempt left, then the checkpoint's own record with its group key. None,
        after a backoff, if a nested record changed under the save (try again)."""
        top = records[0]
        headers, pointers = await self.headers_for(records, known)
        nested = await self.settle_nested(
            top, headers[1:], records[1:], may_replace=attempt >= self.settings.conflict_retries - 1
        )
        if nested is None:
            await backoff(attempt)
            return None
        # Records adopted from an earlier attempt keep the sequences they were written with.
        headers[0] = dataclasses.replace(headers[0], members=tuple(h.member for h in nested))
        created = await self.create_record(headers[0], top.body, "save")
        return Written(headers, pointers, created)

    async def headers_for(
        self, records: Sequence[CheckpointRecord], known: Mapping[str, Mark] | None = None
    ) -> tuple[list[Header], dict[str, Pointer | None]]:
        """Headers for a save, each record with the next sequence numbers of its workflow, and the
        pointers as read (so raising them needs no second read unless another save moved them).
        ``known`` gives high-water marks already read, by workflow name."""
        names = list(dict.fromkeys(record.workflow_name for record in records))
        known = known or {}
        unread = [name for name in names if name not in known]
        read = dict(zip(unread, await gather(self.high_water(name, "save") for name in unread), strict=True))
        marks = {name: known[name] if name in known else read[name] for name in names}
        next_sequence = {name: mark.sequence + 1 for name, mark in marks.items()}
        pointers = {name: mark.pointer for name, mark in marks.items()}
        sequences: list[int] = []
        for record in records:
            sequences.append(next_sequence[record.workflow_name])
            next_sequence[record.workflow_name] += 1
        children: dict[CheckpointID, list[CheckpointID]] = {r.checkpoint_id: [] for r in records}
        for record in records[1:]:
            assert record.container_id is not None
            children[record.container_id].append(record.checkpoint_id)

        def descendants(checkpoint_id: CheckpointID) -> list[CheckpointID]:
            found: list[CheckpointID] = []
            for child in children[checkpoint_id]:
                found.append(child)
                found.extend(descendants(child))
            return found

        members = tuple(
            Member(r.checkpoint_id, r.workflow_name, s, signature_tag(r.graph_signature_hash))
            for r, s in zip(records[1:], sequences[1:], strict=True)
        )
        headers = [
            Header(
                record.checkpoint_id,
                record.workflow_name,
                sequence,
                record.previous_checkpoint_id,
                record.graph_signature_hash,
                record.digest,
                record.container_id,
                record.root_id,
                tuple(children[record.checkpoint_id]),
                tuple(descendants(record.checkpoint_id)),
                members if position == 0 else (),
                False,
                # The checkpoint's order key says what it is: a root (``.r``), or continuing
                # another, with a group key (storages/s3/lineage.py).
                position == 0,
            )
            for position, (record, sequence) in enumerate(zip(records, sequences, strict=True))
        ]
        return headers, pointers

    async def settle_nested(
        self,
        top: CheckpointRecord,
        headers: Sequence[Header],
        records: Sequence[CheckpointRecord],
        *,
        may_replace: bool,
    ) -> list[Header] | None:
        """Create the nested records of a save, adopting those an earlier attempt at the same
        checkpoint left (a crash, or a concurrent identical save); returns their headers as stored,
        or None if one changed under the save.

        A nested record of this checkpoint with other content, whose container is not stored, is
        either a concurrent save's (its container is about to be written, and the container's
        create-only write will decide) or a crashed attempt's: it is replaced only on the last
        tries (``may_replace``), so a concurrent writer has had time to finish."""
        created = await gather(
            self.client.create("save", self.keys.record_key(h.checkpoint_id), frame(h, r.body))
            for h, r in zip(headers, records, strict=True)
        )
        written = [
            self.keys.record_key(h.checkpoint_id) for h, made in zip(headers, created, strict=True) if made
        ]
        settled: list[Header] = []
        for header, record, made in zip(headers, records, created, strict=True):
            if made:
                settled.append(header)
                continue
            existing = await self.read(header.checkpoint_id, "save")
            if existing is None:
                return None
            if existing.header.root_id != top.checkpoint_id:
                await self.client.delete_keys("save", written)
                raise CheckpointConflictError(
                    header.checkpoint_id,
                    f"embedded in checkpoint {header.container_id!r}, but a record with this "
                    "id is already stored; an embedded checkpoint needs an id of its own",
                )
            if existing.header.digest != header.digest and not await self.client.exists(
                "save", self.keys.record_key(top.checkpoint_id)
            ):
                if not may_replace:
                    return None
                # Left by a crashed attempt with other content that nothing refers to: replace it.
                key = self.keys.record_key(header.checkpoint_id)
                try:
                    await self.client.put("save", key, frame(header, record.body), {"IfMatch": existing.etag})
                except CONDITION_FAILED:
                    return None
                settled.append(header)
            else:
                settled.append(existing.header)
        return settled

    async def create_record(self, header: Header, body: bytes, operation: str) -> bool:
        """Step 2 for the checkpoint's own record: create it (False if its id is stored) and, in
        the same round trip, write its group key (storages/s3/lineage.py). A group key written
        for a record that turned out to be stored already is removed again unless that record's
        own save wrote the same one."""
        record_key = self.keys.record_key(header.checkpoint_id)
        successor_key = self.keys.successor_key(header)
        if successor_key is None:
            return await self.client.create(operation, record_key, frame(header, body))
        created, _ = await gather(
            [
                self.client.create(operation, record_key, frame(header, body)),
                self.client.put(operation, successor_key, b""),
            ]
        )
        if not created:
            existing = await self.read(header.checkpoint_id, operation)
            if existing is None or self.keys.successor_key(existing.header) != successor_key:
                await self.client.delete_keys(operation, [successor_key])
        return bool(created)

    async def finish(self, header: Header, operation: str) -> None:
        """Commit a record an earlier attempt left uncommitted: its group key first (that
        attempt may have stopped before writing it), then steps 3 and 4."""
        successor_key = self.keys.successor_key(header)
        if successor_key is not None:
            await self.client.put(operation, successor_key, b"")
        await self.commit(header, operation)

    async def commit(self, header: Header, operation: str, pointers: KnownPointers | None = None) -> None:
        """Steps 3 and 4 of a save: floors for the nested records' workflows, their order keys,
        then the checkpoint's order key (the commit point)."""
        if header.members:
            known = pointers or {}
            await gather(
                self.raise_pointer(name, sequence, operation, known.get(name, UNREAD))
                for name, sequence in highest(header.members).items()
            )
            await gather(
                self.client.create(operation, self.keys.order_key(m, True), b"") for m in header.members
            )
        await self.client.create(operation, self.keys.order_key(header.member, False), b"")

    async def raise_pointer(
        self, workflow_name: str, sequence: int, operation: str, known: Pointer | object | None = UNREAD
    ) -> None:
        """Move a workflow's pointer forward to ``sequence`` (never backwards), by compare-and-swap.
        The fenced writer it named is dropped: only a fenced swap names one."""
        key = self.keys.pointer_key(workflow_name)
        retries = self.settings.conflict_retries
        for attempt in range(retries + 1):
            if attempt == 0 and known is not UNREAD:
                current = known if isinstance(known, Pointer) else None
            else:
                current = await self.read_pointer(workflow_name, operation)
            if current is not None and current.sequence >= sequence:
                return
            condition = CREATE_ONLY if current is None else {"IfMatch": current.etag}
            try:
                await self.client.put(operation, key, Pointer.encode(sequence, None), condition)
                return
            except CONDITION_FAILED:
                await backoff(attempt)
        raise StorageUnavailableError(
            operation,
            f"{self.settings.describe()}: pointer {key} could not be advanced after {retries} retries",
        )

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes) -> bool:
        key = self.keys.record_key(checkpoint_id)
        for attempt in range(self.settings.conflict_retries + 1):
            stored = await self.read(checkpoint_id, "write_raw_body")
            if stored is None or not await self.visible(stored.header, "write_raw_body"):
                return False
            # The digest is kept: it records what was saved, so a re-save still compares contents.
            try:
                await self.client.put(
                    "write_raw_body", key, frame(stored.header, body), {"IfMatch": stored.etag}
                )
                return True
            except CONDITION_FAILED:
                await backoff(attempt)
        raise StorageUnavailableError("write_raw_body", f"{self.settings.describe()}: {key} kept changing")

    # ------------------------------------------------------------------ removing

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        stored = await self.read(checkpoint_id, "delete")
        if stored is None:
            return False
        header = stored.header
        if header.container_id is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, header.container_id)
        visible, _ = await gather([self.visible(header, "delete"), self.raise_floors("delete", [header])])
        await self.drop_families("delete", [header])
        return bool(visible)

    async def raise_floors(
        self, operation: str, headers: Sequence[Header], kept: Mapping[str, int] | None = None
    ) -> None:
        """Before records are removed: raise each workflow's pointer to the highest sequence
        removed there, so the next save still numbers above them. ``kept`` names workflows whose
        newest kept sequence is above what they remove (no floor needed there)."""
        removed = highest(m for h in headers for m in (h.member, *h.members))
        await gather(
            self.raise_pointer(name, sequence, operation)
            for name, sequence in removed.items()
            if (kept or {}).get(name, 0) <= sequence  # a kept head above it is floor enough
        )

    async def drop_families(self, operation: str, headers: Sequence[Header]) -> None:
        """Order keys first (the records stop being visible) with the group keys, then the
        records."""
        order_keys = [self.keys.order_key(h.member, False) for h in headers]
        order_keys += [self.keys.order_key(m, True) for h in headers for m in h.members]
        order_keys += [key for h in headers if (key := self.keys.successor_key(h)) is not None]
        await self.client.delete_keys(operation, order_keys)
        records = [self.keys.record_key(h.checkpoint_id) for h in headers]
        records += [self.keys.record_key(m.checkpoint_id) for h in headers for m in h.members]
        await self.client.delete_keys(operation, records)

    async def entries(self, workflow_name: str, *, nested: bool, operation: str) -> list[OrderEntry]:
        """Order entries of one listing, newest first."""
        keys = await self.client.list_keys(operation, self.keys.order_prefix(workflow_name, nested))
        return [entry for key in keys if (entry := self.keys.parse_order_key(key, nested)) is not None]

    async def headers_of(self, entries: Sequence[OrderEntry], operation: str) -> list[Header]:
        stored = await gather(self.read_entry(entry, operation) for entry in entries)
        return [item.header for item in stored if item is not None]

    async def prune(self, workflow_name: str, keep_last: int, protected: Collection[str] = ()) -> int:
        """Delete all but ``keep_last`` top-level records (everything with 0): the ones whose
        order keys are ``protected`` (the head and its rivals, as read before) wherever they are
        in the order, and the ``keep_last - 1`` others with the highest sequences."""
        entries = await self.entries(workflow_name, nested=False, operation="prune")  # newest first
        if keep_last <= 0:
            doomed = entries
        else:
            doomed = [entry for entry in entries if entry.key not in protected][keep_last - 1 :]
        gone = {entry.key for entry in doomed}
        headers = await self.headers_of(doomed, "prune")
        tombstones = {checkpoint_id for h in headers for checkpoint_id in (h.checkpoint_id, *h.descendants)}
        body = json.dumps({"workflow": workflow_name}).encode("utf-8")
        kept_sequences = [entry.sequence for entry in entries if entry.key not in gone]
        kept = {workflow_name: max(kept_sequences)} if kept_sequences else {}
        # Tombstones first: a crash part-way leaves tombstones of live records, never a pruned
        # ancestor that a walk reports as a dangling link. Pruning again finishes the job.
        await gather(
            [
                self.raise_floors("prune", headers, kept),
                *(
                    self.client.put("prune", key, body)
                    for checkpoint_id in tombstones
                    for key in self.keys.tombstone_keys(workflow_name, checkpoint_id)
                ),
            ]
        )
        await self.drop_families("prune", headers)
        return len(headers)

    async def delete_workflow(self, workflow_name: str) -> int:
        entries = await self.entries(workflow_name, nested=False, operation="delete_workflow")
        headers = await self.headers_of(entries, "delete_workflow")
        # The pointer stays, raised: a later save must get a higher sequence than anything before.
        await self.raise_floors("delete_workflow", headers)
        await self.drop_families("delete_workflow", headers)
        tombstone_prefix = self.keys.tombstone_prefix(workflow_name)
        keys, successor_keys = await gather(
            [
                self.client.list_keys("delete_workflow", tombstone_prefix),
                # What drop_families did not name: those of saves that never committed.
                self.client.list_keys("delete_workflow", self.keys.successors_prefix(workflow_name)),
            ]
        )
        global_keys = [self.keys.tombstone_prefix(None) + key[len(tombstone_prefix) :] for key in keys]
        await self.client.delete_keys("delete_workflow", [*keys, *global_keys, *successor_keys])
        return len(headers)


@dataclass(frozen=True, slots=True)
class Written:
    """What steps 1 and 2 of a save wrote (:meth:`CommitProtocol.write_records`)."""

    headers: list[Header]
    """The records' headers, the checkpoint's first, whose members are the nested records as
    settled (one adopted from an earlier attempt keeps the sequence it was written with)."""
    pointers: dict[str, Pointer | None]
    """The pointers read for the sequences, by workflow name (raising them needs no second read
    unless another save moved them)."""
    created: bool
    """False: the checkpoint's id was stored already, and its record was left as it was."""


@dataclass(frozen=True, slots=True)
class Mark:
    """What a save reads of a workflow first: its high-water mark, its pointer, its ``t/`` head."""

    sequence: int
    pointer: Pointer | None
    head: OrderEntry | None


def highest(members: Iterable[Member]) -> dict[str, int]:
    """The highest sequence of each workflow among ``members``."""
    found: dict[str, int] = {}
    for member in members:
        found[member.workflow_name] = max(found.get(member.workflow_name, 0), member.sequence)
    return found


__all__ = ["UNREAD", "CommitProtocol", "KnownPointers", "Mark", "Written", "highest"]
