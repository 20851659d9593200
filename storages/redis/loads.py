"""``load``, the read by id alone: the load script, or, for a record whose home the handle
remembers (and for a large body the script only located), one transaction of plain commands.
Like every read it never writes and never answers with anything but the record asked for."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from collections import OrderedDict
from typing import Any

from ..backend import StoredBody
from ..contract import CheckpointID
from .client import RedisConnection
from .commit import SlotSpan
from .replies import body_pairs, index_entry, lost_record, no_body, text
from .scripts import Load

REMEMBERED_HOMES = 16_384
"""Ids whose home a handle remembers for load's transaction (about 100 bytes each); the oldest
noted is dropped first. A load of an id not remembered runs the load script."""

INLINE_BODY_LIMIT = 64 * 1024
"""The largest body the load script returns itself on plain Redis, once a handle has met a
larger one. A larger one (with nothing nested) the script only locates, and one transaction of
plain commands reads it: moving a body into Lua and back costs the server about 2 ms a
megabyte, a second round trip far less (docs/redis.md, "load")."""

_NOT_STORED = object()
"""What :meth:`Loads._load_at` returns for an id without a location pointer."""


class LoadPath(enum.Enum):
    """The ways a load reaches the server (:meth:`Loads.path` picks one)."""

    SCRIPT = "the load script"
    """Any load, on plain Redis or a cluster: pointer, record and nested bodies in one script."""
    REMEMBERED = "a transaction at the remembered home"
    """Plain Redis, an id whose home the handle remembers: one MULTI of plain commands
    (:meth:`Loads._load_at`), the script if that cannot answer."""
    LOCATED = "the load script, then for a large body a transaction"
    """Plain Redis, a handle that has met a body over INLINE_BODY_LIMIT: the script answers a
    larger one with nothing nested by its home, and the transaction reads it."""


# The members as module globals: on Python 3.11 ``LoadPath.SCRIPT`` is a descriptor call, about
# 400 ns, and a load would pay it twice.
_SCRIPT, _REMEMBERED, _LOCATED = LoadPath.SCRIPT, LoadPath.REMEMBERED, LoadPath.LOCATED


class Loads:
    """``load``: one record by its id, with the homes this handle remembers."""

    def __init__(self, connection: RedisConnection, span: SlotSpan) -> None:
        self.connection = connection
        self.keys = connection.keys
        self.span = span
        self.homes: OrderedDict[CheckpointID, str] = OrderedDict()
        """Id -> home of records this handle saved or read (plain Redis only); an OrderedDict,
        whose oldest entry goes in O(1) once it is full (a plain dict's scans deleted slots)."""
        self.large_bodies = False
        """Whether this handle has saved or read a body over INLINE_BODY_LIMIT. Until it has,
        the load script is not asked to measure bodies: that one more call is about 3% of the
        script's server work (python -m bench.redis_server_callgrind), which every load of a
        store holding no large body would pay for nothing."""
        self.script_only = False
        """True: every load takes the load script (LoadPath.SCRIPT), for the tests that compare
        the paths and the bench rows that measure what the others save."""

    def note_body(self, size: int) -> None:
        """A body of ``size`` bytes was saved or read through this handle."""
        if size > INLINE_BODY_LIMIT:
            self.large_bodies = True

    def remember(self, checkpoint_id: CheckpointID, home: str) -> None:
        """Note where a record this handle saved or read lives, for :meth:`load`'s transaction."""
        if not self.span.locates_by_pointer_key:
            return  # a cluster: the transaction could not check the pointer, see load()
        homes = self.homes
        if len(homes) >= REMEMBERED_HOMES and checkpoint_id not in homes:
            homes.popitem(last=False)  # the oldest noted
        homes[checkpoint_id] = home

    def forget(self, checkpoint_id: CheckpointID) -> None:
        self.homes.pop(checkpoint_id, None)

    def path(self, checkpoint_id: CheckpointID) -> tuple[LoadPath, str | None]:
        """How ``checkpoint_id`` is loaded, and the home a transaction reads it from: the one
        place the choice is made (docs/redis.md, "One path per operation", has the figures).
        Every path answers as the script would (tests/test_redis_paths.py)."""
        if self.script_only or not self.span.locates_by_pointer_key:
            return _SCRIPT, None
        home = self.homes.get(checkpoint_id)
        if home is not None:
            return _REMEMBERED, home
        return (_LOCATED if self.large_bodies else _SCRIPT), None

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        path, home = self.path(checkpoint_id)
        if home is not None:
            stored = await self._load_at(checkpoint_id, home)
            if isinstance(stored, StoredBody):
                return stored
            if stored is _NOT_STORED:
                self.forget(checkpoint_id)
                return None
            path = _LOCATED if self.large_bodies else _SCRIPT
        # The script returns the nested bodies with the body and the index fields the decoded
        # body is checked against: one round trip, one consistent snapshot.
        if self.span.locates_by_pointer_key:
            # Plain Redis: the script follows the pointer, so no locate step (and no coroutine).
            limit = INLINE_BODY_LIMIT if path is _LOCATED else 0
            call = Load(
                route=self.keys.location(checkpoint_id), id=checkpoint_id, given_home=None, inline_limit=limit
            )
        else:
            located = await self.span.locate("load", checkpoint_id)
            if located is None:
                return None
            call = Load(route=located.route, id=checkpoint_id, given_home=located.given_home, inline_limit=0)
        reply = await self.connection.run("load", call)
        if reply is not None and len(reply) == 2:
            # {home, size}: a large body with nothing nested, read without Lua; if that cannot
            # answer, the script does, whatever the body's size.
            stored = await self._load_located(checkpoint_id, reply[0])
            if isinstance(stored, StoredBody):
                return stored
            if stored is _NOT_STORED:
                return None
            reply = await self.connection.run("load", dataclasses.replace(call, inline_limit=0))
        if reply is None:
            self.forget(checkpoint_id)
            return None
        if len(reply) == 1:
            raise lost_record(checkpoint_id, text(reply[0], f"the location pointer of {checkpoint_id!r}"))
        body, workflow_name, previous_id, signature, home_name = reply[:5]
        if body is None:
            raise no_body(checkpoint_id)
        self.note_body(len(body))
        nested = body_pairs(reply, 5) if len(reply) > 5 else None
        if nested is None:
            # Records with others nested in them stay with the script, which reads those too; a
            # pointer that is not a name this storage writes (a hostile store) is not remembered.
            with contextlib.suppress(UnicodeDecodeError):
                self.remember(checkpoint_id, home_name.decode())
        return StoredBody(
            checkpoint_id, body, nested, index_entry(checkpoint_id, workflow_name, previous_id, signature)
        )

    async def _load_located(self, checkpoint_id: CheckpointID, pointer: Any) -> StoredBody | object | None:
        """A large body the load script located at ``pointer`` (its home), read by
        :meth:`_load_at`'s transaction; None when the script must answer after all: the record
        moved or went between the two, or the pointer is not a name this storage writes."""
        if type(pointer) is not bytes:
            return None
        try:
            home = pointer.decode()
        except UnicodeDecodeError:
            return None
        stored = await self._load_at(checkpoint_id, home)
        if isinstance(stored, StoredBody):
            self.remember(checkpoint_id, home)
        elif stored is _NOT_STORED:
            self.forget(checkpoint_id)
        return stored

    async def _load_at(self, checkpoint_id: CheckpointID, home: str) -> StoredBody | object | None:
        """The record from ``home`` by one MULTI/EXEC of plain commands, which costs the server
        a quarter of the load script or less; None when the script must answer instead, and
        ``_NOT_STORED`` when the id has no location pointer: the script's own first test, so it
        would answer "not stored" from the same snapshot (a record deleted through another
        handle costs one round trip, not two).

        The transaction reads the id's location pointer too and the answer counts only if it
        still names ``home``: then the keys read are the ones the script would have read, in one
        atomic snapshot, so the answer is the script's. A record deleted, moved to another home
        by a delete and a save through another handle, expired, or with records nested in it
        (their bodies need the script's walk) falls back to the script, which stays the truth.
        Plain Redis only: on a cluster the pointer is in another slot than the record.
        """
        keys = self.keys
        tag = keys.tag(home)
        commands = (
            ("GET", keys.location(checkpoint_id)),
            ("HMGET", keys.record_under(tag, checkpoint_id), "b", "w", "p", "s"),
            ("EXISTS", keys.children_under(tag, checkpoint_id)),
        )
        reply = await self.connection.transaction("load", commands)
        if reply is None or len(reply) != 3 or not isinstance(reply[1], list) or len(reply[1]) != 4:
            return None  # not the replies of those commands: the script answers
        pointer, fields, has_children = reply
        if pointer is None:
            return _NOT_STORED
        body, workflow_name, previous_id, signature = fields
        if body is None or has_children or pointer != home.encode():
            return None
        return StoredBody(
            checkpoint_id, body, None, index_entry(checkpoint_id, workflow_name, previous_id, signature)
        )
