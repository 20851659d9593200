"""The storage's Lua scripts, one typed call each (storages/redis/script_calls.py says how a
call becomes the script's text and arguments), and the script texts the connection loads."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..records import CheckpointRecord
from .script_calls import Encoded, Key, Rest, Rows, ScriptCall, binding, script_text


@dataclass(slots=True)
class SavedRecord:
    """One record of a save, as the save scripts read it: the one definition of what a record
    sends (:meth:`of`), and of what it writes (``record_fields`` in scripts/keys.lua). Not
    frozen: a frozen dataclass sets each field through ``object.__setattr__``, about 50 ns a
    field, and every save makes one per record."""

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

    @classmethod
    def of(
        cls, record: CheckpointRecord, sequence: int | None = None, *, staged: bool = False
    ) -> SavedRecord:
        """``record`` as a save script reads it; ``staged``: without its body, which the save's
        transaction writes to a key of its own (SaveOne.stage)."""
        return cls(
            record.checkpoint_id,
            record.workflow_name,
            record.previous_checkpoint_id,
            record.graph_signature_hash,
            b"" if staged else record.body,
            record.digest,
            record.container_id,
            record.position,
            sequence,
        )


@dataclass(frozen=True, slots=True)
class Save(ScriptCall):
    script = "save"
    libraries = ("keys", "lineage")
    counter: Key
    """The home's sequence counter: routes the call to the home's slot."""
    home: str
    fenced: bool
    expected: str | None
    records: Rows[SavedRecord]


@dataclass(frozen=True, slots=True)
class SaveOne(ScriptCall):
    script = "save_one"
    libraries = ("keys", "lineage")
    pointer: Key
    record: Key
    counter: Key
    top: Key
    signature_index: Key
    fenced: bool
    expected: str | None
    stage: str | None
    """The key a transaction wrote a large body to just before this call (plain Redis): renamed
    into place whole, never copied through Lua; the record's body is then empty. None: the
    record's body is it."""
    saved: Rows[SavedRecord]
    """The one top-level record, nothing nested in it."""


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


@dataclass(frozen=True, slots=True)
class LatestHead(ScriptCall):
    script = "latest_head"
    libraries = ("keys", "lineage")
    index: Key
    """The workflow's top index."""
    home_tag: str
    """``RedisKeys.tag`` of the workflow."""


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


@dataclass(frozen=True, slots=True)
class UnindexLost(ScriptCall):
    script = "unindex_lost"
    libraries = ("keys", "lineage")
    record: Key
    """The lost record's key: routes the call to its workflow's slot."""
    home_tag: str
    """``RedisKeys.tag`` of the workflow."""
    id: str
    workflow: str
    signature_indexes: Rest
    """The workflow's signature indexes (found by SCAN)."""


CALLS: tuple[type[ScriptCall], ...] = (
    Save,
    SaveOne,
    Claim,
    UnlinkIf,
    Load,
    Read,
    Fetch,
    Latest,
    LatestHead,
    ListIds,
    Page,
    Remove,
    Prune,
    DeleteWorkflow,
    ListAdd,
    Walk,
    Overwrite,
    UnindexLost,
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
