"""The storage's Lua scripts, one typed call each (storages/redis/script_calls.py says how a
call becomes the script's text and arguments), and the script texts the connection loads."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .script_calls import Encoded, Key, Rest, Rows, ScriptCall, binding, script_text


@dataclass(frozen=True, slots=True)
class SavedRecord:
    """One record of a general save, as the script reads it."""

    id: str
    workflow: str
    previous: str | None
    signature: str
    body: bytes
    digest: str
    container: str | None
    position: int
    sequence: int | None
    """Taken by the client on a cluster (nested records); None: the script takes the next."""


@dataclass(frozen=True, slots=True)
class Save(ScriptCall):
    script = "save"
    libraries = ("keys", "lineage", "families")
    counter: Key
    """The home's sequence counter: routes the call to the home's slot."""
    home: str
    fenced: bool
    expected: str | None
    records: Rows[SavedRecord]


@dataclass(frozen=True, slots=True)
class SaveOne(ScriptCall):
    script = "save_one"
    libraries = ("keys", "lineage", "families")
    pointer: Key
    record: Key
    counter: Key
    top: Key
    signature_index: Key
    workflow: str
    id: str
    body: bytes
    digest: str
    signature: str
    previous: str | None
    fenced: bool
    expected: str | None
    stage: str | None = None
    """The key a transaction wrote a large body to just before this call (plain Redis): renamed
    into place whole, never copied through Lua; ``body`` is then empty. None: ``body`` is it."""

    def encode(self) -> tuple[list[str], list[Encoded]]:
        # The commonest save's call, encoded directly as the generic walk would (a fifth of the
        # client's work on a save was that walk); any other type takes the walk, which refuses it.
        previous, expected, fenced, stage = self.previous, self.expected, self.fenced, self.stage
        if (
            type(self.workflow) is str
            and type(self.id) is str
            and type(self.body) is bytes
            and type(self.digest) is str
            and type(self.signature) is str
            and (previous is None or type(previous) is str)
            and type(fenced) is bool
            and (expected is None or type(expected) is str)
            and (stage is None or type(stage) is str)
        ):
            keys = [self.pointer, self.record, self.counter, self.top, self.signature_index]
            args: list[Encoded] = [
                self.workflow,
                self.id,
                self.body,
                self.digest,
                self.signature,
                "" if previous is None else previous,
                "1" if fenced else "0",
                "" if expected is None else expected,
                "" if stage is None else stage,
            ]
            return keys, args
        return ScriptCall.encode(self)


@dataclass(frozen=True, slots=True)
class Claim(ScriptCall):
    script = "claim"
    pointer: Key
    home: str
    take_over: bool


@dataclass(frozen=True, slots=True)
class UnlinkIf(ScriptCall):
    script = "unlink_if"
    pointer: Key
    home: str


@dataclass(frozen=True, slots=True)
class Load(ScriptCall):
    script = "load"
    libraries = ("keys", "nested")
    route: Key
    id: str
    given_home: str | None
    inline_limit: int
    """The largest body the script returns (plain Redis); a larger one with nothing nested
    comes back as ``{home, size}``, for the client to read without Lua. 0: any size."""

    def encode(self) -> tuple[list[str], list[Encoded]]:
        # Every load encodes these four: what the generic encode gives for them, without its
        # walk over the fields; any other type takes that walk, which refuses it.
        route, checkpoint_id, home, limit = self.route, self.id, self.given_home, self.inline_limit
        if (
            type(route) is str
            and type(checkpoint_id) is str
            and (home is None or type(home) is str)
            and type(limit) is int
        ):
            return [route], [checkpoint_id, "" if home is None else home, str(limit)]
        return ScriptCall.encode(self)


@dataclass(frozen=True, slots=True)
class Read(ScriptCall):
    script = "read"
    libraries = ("keys", "nested")
    route: Key
    id: str
    given_home: str | None
    what: str
    """``info``, ``children`` or ``nested``."""


@dataclass(frozen=True, slots=True)
class Fetch(ScriptCall):
    script = "fetch"
    route: Key
    home: str
    what: str
    """``body`` or ``info``."""
    ids: Rest


@dataclass(frozen=True, slots=True)
class Latest(ScriptCall):
    script = "latest"
    libraries = ("keys", "lineage", "nested")
    index: Key
    home_tag: str
    """``RedisKeys.tag`` of the index's workflow, the prefix of its record keys."""

    def encode(self) -> tuple[list[str], list[Encoded]]:
        # Every latest encodes these two (LangGraph asks for a new namespace's latest at each
        # subgraph step): without the generic walk; any other type takes it, which refuses it.
        index, home_tag = self.index, self.home_tag
        if type(index) is str and type(home_tag) is str:
            return [index], [home_tag]
        return ScriptCall.encode(self)


@dataclass(frozen=True, slots=True)
class ListIds(ScriptCall):
    script = "list_ids"
    index: Key
    home: str
    with_scores: bool


@dataclass(frozen=True, slots=True)
class Page(ScriptCall):
    script = "page"
    index: Key
    home: str
    after: str
    limit: int


@dataclass(frozen=True, slots=True)
class Remove(ScriptCall):
    script = "remove"
    libraries = ("keys", "lineage", "families")
    route: Key
    id: str
    given_home: str | None


@dataclass(frozen=True, slots=True)
class Prune(ScriptCall):
    script = "prune"
    libraries = ("keys", "lineage", "families")
    top: Key
    workflow: str
    keep: int


@dataclass(frozen=True, slots=True)
class DeleteWorkflow(ScriptCall):
    script = "delete_workflow"
    libraries = ("keys", "lineage", "families")
    top: Key
    workflow: str


@dataclass(frozen=True, slots=True)
class ListAdd(ScriptCall):
    script = "list_add"
    index: Key
    """The prefix's workflow index (``RedisKeys.workflows``)."""
    complete: bool
    names: Rest


@dataclass(frozen=True, slots=True)
class Walk(ScriptCall):
    script = "walk"
    libraries = ("keys", "nested")
    route: Key
    start: str
    given_home: str | None
    depth: int
    with_bodies: bool


@dataclass(frozen=True, slots=True)
class Overwrite(ScriptCall):
    script = "overwrite"
    route: Key
    id: str
    given_home: str | None
    body: bytes


CALLS: tuple[type[ScriptCall], ...] = (
    Save,
    SaveOne,
    Claim,
    UnlinkIf,
    Load,
    Read,
    Fetch,
    Latest,
    ListIds,
    Page,
    Remove,
    Prune,
    DeleteWorkflow,
    ListAdd,
    Walk,
    Overwrite,
)
SCRIPTS: dict[str, str] = {call.script: script_text(call) for call in CALLS}
"""Script name -> the text the server runs."""


def script_sha(name: str) -> str:
    """SHA1 of one of the storage's scripts (``save``, ``walk``, ...), as sent with EVALSHA."""
    # Redis names scripts by their SHA1; nothing here relies on it being hard to collide.
    return hashlib.sha1(SCRIPTS[name].encode(), usedforsecurity=False).hexdigest()


__all__ = [
    "CALLS",
    "SCRIPTS",
    "Encoded",
    "Key",
    "Rest",
    "Rows",
    "ScriptCall",
    "binding",
    "script_sha",
    "script_text",
]
