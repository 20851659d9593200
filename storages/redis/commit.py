"""How a save, prune or delete is made atomic: one Lua script in the home workflow's slot.

On plain Redis the script does everything, location pointers and other names' nested indexes
included, so every write is exactly one atomic round trip. On a Redis Cluster a script may touch
only its own slot: :class:`SlotSpan` is the seam where the other slots' half goes, and
:mod:`storages.redis.cluster` fills it in (each step idempotent, and invisible to reads until the
script has run).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..backend import CheckpointRecord, FenceCheck, InsertResult, nested_id_conflict
from ..contract import CheckpointID
from ..errors import NestedCheckpointDeletionError
from ..records import index_text
from .client import NOT_RUN, RedisConnection
from .keys import SEQUENCE, TOP
from .replies import optional_id, pairs, text
from .scripts import (
    DeleteWorkflow,
    LatestHead,
    Overwrite,
    Prune,
    Remove,
    Save,
    SavedRecord,
    SaveOne,
)
from .workflows import WorkflowIndex

STAGED_BODY_MIN = 64 * 1024
"""Bodies from this size on are saved by a transaction that stages them (Commits.path)."""
_REMEMBERED_WORKFLOWS = 1024


BeforeSave = tuple[tuple[Any, ...] | None, list[int | None]]
"""What :meth:`SlotSpan.before_save` finds: the reply the save script would give, if it found
one first, and the sequence per record (None: for the script to take)."""


class SavePath(enum.Enum):
    """The ways a save reaches the server (:meth:`Commits.path` picks one)."""

    SCRIPT = "the save script"
    """Any save: a record and those nested in it, on plain Redis or a cluster."""
    ONE = "save_one"
    """One top-level record with nothing nested, on plain Redis: the script handed its key
    names, running only the commands that case needs."""
    STAGED = "a transaction staging the body, then save_one"
    """The same, with a body of STAGED_BODY_MIN bytes or more, on a pooled plain client."""


# The members as module globals: on Python 3.11 ``SavePath.SCRIPT`` is a descriptor call, about
# 400 ns, and a save would pay it three times.
_SCRIPT, _ONE, _STAGED = SavePath.SCRIPT, SavePath.ONE, SavePath.STAGED


def _stored_digest(reply: Any, records: Sequence[CheckpointRecord]) -> str:
    """The digest stored under the top id, from a refusing reply: save_one's bare digest, or
    save.lua's ``('exists', digest, ...)``; its ``('conflict', id)`` raises, naming the
    embedded id already stored."""
    if isinstance(reply, bytes):
        return index_text(reply, records[0].checkpoint_id, "digest")
    if text(reply[0]) == "conflict":
        raise nested_id_conflict(records, text(reply[1]))
    return index_text(reply[1], records[0].checkpoint_id, "digest")


@dataclass(frozen=True, slots=True)
class Located:
    """Where an id-addressed script is sent: the key that routes it, and the record's home when
    the client had to find it (a cluster) rather than the script."""

    route: str
    given_home: str | None


class SlotSpan:
    """The part of a write outside the home slot. On plain Redis there is none: the script
    reaches every key itself."""

    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection
        self.keys = connection.keys
        self.index = WorkflowIndex(connection)

    one_record_script = True
    """Whether a lone top-level record may use the lean save_one script (it writes the location
    pointer, which on a cluster lives in another slot)."""
    locates_by_pointer_key = True
    """Whether :meth:`locate` is always the id's location pointer key, found without I/O (plain
    Redis: the script follows the pointer), so a read may build it without awaiting locate."""

    async def locate(self, operation: str, checkpoint_id: CheckpointID) -> Located | None:
        """Where to send a script about ``checkpoint_id``; None if it is surely not stored."""
        return Located(self.keys.location(checkpoint_id), None)

    async def before_save(self, records: Sequence[CheckpointRecord], home: str) -> BeforeSave:
        """(what the save script would answer, if this half found it first: ``('exists',
        digest)`` for a top id stored under another workflow, ``('conflict', id)`` for an
        embedded id already stored; the sequence per record: None for the script to take)."""
        return None, [None] * len(records)

    async def after_save(self, home: str, *, created: bool) -> None:
        """Keep the workflow index after a save's script (a cluster; the script does it on plain
        Redis); ``created``: home had nothing stored before it."""

    async def after_removal(
        self, operation: str, removed: list[tuple[str, CheckpointID]], *, pruned_from: str | None
    ) -> None:
        """Clean what the removed records left in other slots."""

    async def after_workflow_deleted(self, workflow_name: str, tombstones: Sequence[Any]) -> None:
        """Clean the deleted workflow's pruned markers in other slots."""


class Commits:
    """The storage's write primitives over one connection."""

    def __init__(self, connection: RedisConnection, span: SlotSpan) -> None:
        self.connection = connection
        self.keys = connection.keys
        self.span = span
        self._workflow_keys: dict[tuple[str, str], tuple[str, str, str, str]] = {}
        """(workflow, signature) -> its tag, counter, top and signature indexes: every save of a
        workflow names the same four, and building them was a quarter of a save's client
        work. Bounded: cleared when it reaches _REMEMBERED_WORKFLOWS entries."""
        self.general_only = False
        """True: every save takes the save script (SavePath.SCRIPT), for the tests that compare
        the paths and the bench rows that measure what the others save."""

    def path(self, records: Sequence[CheckpointRecord]) -> SavePath:
        """How ``records`` (a top-level record, then those nested in it) are saved: the one place
        the choice is made (docs/redis.md, "One path per operation", has the figures). Every
        path stores the same keys, values and TTLs (tests/test_redis_paths.py)."""
        if self.general_only or len(records) != 1 or not self.span.one_record_script:
            return _SCRIPT
        if len(records[0].body) >= STAGED_BODY_MIN and self.connection.transactions:
            return _STAGED
        return _ONE

    async def insert(self, records: Sequence[CheckpointRecord]) -> str | None:
        """Save a top-level record and those nested in it; None if written, else the digest
        already stored under the top id."""
        reply = await self._save(records, fenced=False, expected=None)
        return None if reply is None else _stored_digest(reply, records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        # The check runs inside the script that writes the checkpoint, in the workflow's slot, so
        # it is atomic on a cluster too. A refused cluster save may leave the location pointers
        # it claimed first; they name no record, so reads treat them as not found (as after a crash).
        reply = await self._save(records, fenced=True, expected=expected_latest_id)
        if reply is None:
            return None
        if text(reply[0]) == "stale":
            return FenceCheck(optional_id(reply[1]), None)
        stored = _stored_digest(reply, records)
        return FenceCheck(optional_id(reply[2]), InsertResult.of_stored_digest(stored, records[0]))

    async def _save(
        self, records: Sequence[CheckpointRecord], *, fenced: bool, expected: CheckpointID | None
    ) -> Any:
        """Send a save by its path: None if written, else the reply of the script that refused
        it (save_one's bare digest, or a tuple in save.lua's shape)."""
        path = self.path(records)
        if path is _SCRIPT:
            return await self._save_family(records, fenced=fenced, expected=expected)
        reply = await self._run_save_one(records[0], path, fenced=fenced, expected=expected)
        if type(reply) is int:  # written, and the workflow index is not complete yet
            await self.span.index.complete("save")
            return None
        return reply

    async def _run_save_one(
        self, record: CheckpointRecord, path: SavePath, *, fenced: bool, expected: CheckpointID | None
    ) -> Any:
        """save_one's reply. A staged save goes in by one transaction that writes the body to a
        key of its own for the script to rename into place, never through Lua (into a script
        and into the record from there costs the server about 2 ms a megabyte); if that
        transaction cannot be had, the plain call, which an id the transaction did store
        answers with its digest."""
        if path is _STAGED:
            call = self._save_one(record, fenced=fenced, expected=expected, staged=True)
            assert call.stage is not None
            reply = await self.connection.run_staged("save", call, call.stage, record.body)
            if reply is not NOT_RUN:
                return reply
        return await self.connection.run("save", self._save_one(record, fenced=fenced, expected=expected))

    def _save_one(
        self, record: CheckpointRecord, *, fenced: bool, expected: CheckpointID | None, staged: bool = False
    ) -> SaveOne:
        workflow_name, checkpoint_id = record.workflow_name, record.checkpoint_id
        keys = self.keys
        known = self._workflow_keys.get((workflow_name, record.graph_signature_hash))
        if known is None:
            tag = keys.tag(workflow_name)
            known = (
                tag,
                keys.under(tag, SEQUENCE),
                keys.under(tag, TOP),
                keys.signature_under(tag, record.graph_signature_hash),
            )
            if len(self._workflow_keys) >= _REMEMBERED_WORKFLOWS:
                self._workflow_keys.clear()
            self._workflow_keys[workflow_name, record.graph_signature_hash] = known
        tag, counter, top, signature_index = known
        return SaveOne(
            pointer=keys.location(checkpoint_id),
            record=keys.record_under(tag, checkpoint_id),
            counter=counter,
            top=top,
            signature_index=signature_index,
            fenced=fenced,
            expected=expected,
            stage=keys.stage_under(tag, checkpoint_id) if staged else None,
            saved=(SavedRecord.of(record, staged=staged),),
        )

    async def _save_family(
        self, records: Sequence[CheckpointRecord], *, fenced: bool, expected: CheckpointID | None
    ) -> Any:
        """None if written, else the general save script's reply, or the reply it would have
        given to what a cluster's claims found before it ran."""
        home = records[0].workflow_name
        found, sequences = await self.span.before_save(records, home)
        if found is not None:
            return await self._as_the_script_answers(found, records, fenced=fenced, expected=expected)
        rows = [SavedRecord.of(record, sequence) for record, sequence in zip(records, sequences, strict=True)]
        call = Save(
            counter=self.keys.sequence(home), home=home, fenced=fenced, expected=expected, records=rows
        )
        reply = await self.connection.run("save", call)
        if text(reply[0]) != "ok":
            return reply
        _, unindexed, created = reply
        if unindexed:
            await self.span.index.complete("save")
        await self.span.after_save(home, created=bool(created))
        return None

    async def _as_the_script_answers(
        self,
        found: tuple[Any, ...],
        records: Sequence[CheckpointRecord],
        *,
        fenced: bool,
        expected: CheckpointID | None,
    ) -> tuple[Any, ...]:
        """What save.lua would answer to what the claims found, in the script's order (the top
        id, then the fence, then the embedded ids: docs/contract.md, "Writer fencing"): a fenced
        save reads its workflow's head back, so a stale writer whose family collides is told it
        is stale, and a top id stored elsewhere comes with the head for the error message."""
        if not fenced:
            return found
        tag = self.keys.tag(records[0].workflow_name)
        call = LatestHead(index=self.keys.index_under(tag, None), home_tag=tag)
        head = await self.connection.run("save", call)
        if text(found[0]) == "exists":
            return (*found, head)
        latest = optional_id(head)
        if latest != expected and latest != records[0].checkpoint_id:
            return ("stale", head)
        return found

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        located = await self.span.locate("delete", checkpoint_id)
        if located is None:
            return False
        call = Remove(route=located.route, id=checkpoint_id, given_home=located.given_home)
        reply = await self.connection.run("delete", call)
        status = text(reply[0])
        if status == "missing":
            return False
        if status == "nested":
            raise NestedCheckpointDeletionError(checkpoint_id, text(reply[1]))
        await self.span.after_removal("delete", pairs(reply[1]), pruned_from=None)
        return True

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes) -> bool:
        located = await self.span.locate("write_raw_body", checkpoint_id)
        if located is None:
            return False
        call = Overwrite(route=located.route, id=checkpoint_id, given_home=located.given_home, body=body)
        return bool(await self.connection.run("write_raw_body", call))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        call = Prune(top=self.keys.top(workflow_name), workflow=workflow_name, keep=keep_last)
        count, removed = await self.connection.run("prune", call)
        await self.span.after_removal("prune", pairs(removed), pruned_from=workflow_name)
        return int(count)

    async def delete_workflow(self, workflow_name: str) -> int:
        call = DeleteWorkflow(top=self.keys.top(workflow_name), workflow=workflow_name)
        count, removed, tombstones = await self.connection.run("delete_workflow", call)
        await self.span.after_removal("delete_workflow", pairs(removed), pruned_from=None)
        await self.span.after_workflow_deleted(workflow_name, tombstones)
        return int(count)
