"""The Redis key layout: the one place a key name is spelled. :class:`RedisKeys` builds the names
for the client, and :func:`lua_layout` writes the Lua functions that build the same names for the
scripts (sent ahead of every script that uses them, storages/redis/script_calls.py), from the
same suffixes below; nothing else in the package spells a key (tests/test_redis_scripts.py
checks both).

``P`` is the prefix; ids, workflow names and signatures go through :func:`escape`, which writes
``%``, ``{``, ``}`` and ``:`` as ``%XX``, so no input can end a hash tag early, add a level to a
key, or produce another key's name::

    P:{W}:seq          workflow W's sequence counter (INCR; never goes back)
    P:{W}:top          sorted set: W's top-level ids, score = sequence
    P:{W}:sig:S        sorted set: W's top-level ids saved with graph signature S
    P:{W}:next         sorted set (score 0): "esc(previous):esc(S):<seq, 16 hex>:id" for each
                       top-level record with a previous id (latest through the lineage, and
                       the head's rivals; a root's rivals are the roots before it in top),
                       and each range's marker "esc(previous):esc(S):" alone (the save
                       learns from it whether the range had a record)
    P:{W}:nested       sorted set: records named W nested in any checkpoint, as "home:id"
    P:{W}:tombs        set: ids pruned from W
    P:{H}:r:ID         hash: one record stored in home H (body, digest, index fields; r,
                       where a top-level record's rivals may be, should it be the head: 1 when
                       saved after a sibling, 0 on a root; an unmarked head has none)
    P:{H}:stage:ID     hash: a large body on its way into P:{H}:r:ID, written and consumed
                       by one MULTI (save_one renames it into place); 60 s TTL as a net
    P:{H}:k:ID         list: the direct children of a record, in the order met
    P:{H}:f:ID         list: every record nested, at any depth, in top-level record ID
    P:{ID}:loc         string: the home of record ID (load() only has an id)
    P:{ID}:pruned      string: the workflow ID was pruned from (walks report PRUNED)
    P:workflows        sorted set: every workflow name with a top, nested or tombs key

The part in braces is the cluster hash tag: every key of one workflow sits in one slot. A
record's *home* is the workflow of the top-level checkpoint it was saved with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..contract import CheckpointID

# The part after a key's hash tag, per kind (the table above).
SEQUENCE, TOP, NEXT, NESTED, TOMBS = "seq", "top", "next", "nested", "tombs"
SIGNATURE, RECORD, STAGE, CHILDREN, FAMILY = "sig", "r", "stage", "k", "f"
LOCATION, PRUNED = "loc", "pruned"
WORKFLOWS = "workflows"
ESCAPED = "%:{}"
"""The characters :func:`escape` writes as ``%XX``."""

_UNESCAPE = re.compile(r"%([0-9A-F]{2})")
GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")
WORKFLOW_KINDS = (TOP, NESTED, TOMBS)
"""The per-workflow keys that put a name in the workflow index."""


def escape(text: str) -> str:
    """``%``, ``{``, ``}`` and ``:`` as ``%XX``: what the key layout puts ids and names through."""
    # Four plain searches first, as the Lua esc() does: most names need no escaping, and a save
    # builds seven escaped names (a pattern substitution each was about 4,000 instructions).
    # A name that does (every LangGraph workflow name holds ':') takes four C replaces, "%"
    # first so no escape is escaped again: a pattern with a Python callback per match cost more.
    if "%" in text or "{" in text or "}" in text or ":" in text:
        return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D").replace(":", "%3A")
    return text


def unescape(text: str) -> str:
    return _UNESCAPE.sub(lambda match: chr(int(match.group(1), 16)), text)


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """Key names of one prefix; the Lua scripts build the same names (:func:`lua_layout`)."""

    prefix: str

    def tag(self, workflow_name: str) -> str:
        return f"{self.prefix}:{{{escape(workflow_name)}}}"

    @staticmethod
    def under(tag: str, kind: str) -> str:
        """A per-workflow key (``SEQUENCE``, ``TOP``, ``NEXT``, ``NESTED``, ``TOMBS``) of the
        workflow whose :meth:`tag` is ``tag``."""
        return f"{tag}:{kind}"

    def sequence(self, workflow_name: str) -> str:
        return self.under(self.tag(workflow_name), SEQUENCE)

    def top(self, workflow_name: str) -> str:
        return self.under(self.tag(workflow_name), TOP)

    def signature(self, workflow_name: str, signature: str) -> str:
        return self.signature_under(self.tag(workflow_name), signature)

    @staticmethod
    def signature_under(tag: str, signature: str) -> str:
        return f"{tag}:{SIGNATURE}:{escape(signature)}"

    @staticmethod
    def signature_pattern(tag: str) -> str:
        """SCAN pattern of every signature index of the workflow whose :meth:`tag` is ``tag``."""
        return GLOB_SPECIAL.sub(r"\\\1", f"{tag}:{SIGNATURE}:") + "*"

    def index(self, workflow_name: str, signature: str | None) -> str:
        """The sorted set listing and latest read: top-level, or one signature's."""
        return self.index_under(self.tag(workflow_name), signature)

    @classmethod
    def index_under(cls, tag: str, signature: str | None) -> str:
        """:meth:`index` for a workflow whose :meth:`tag` is already built."""
        return f"{tag}:{TOP}" if signature is None else cls.signature_under(tag, signature)

    def nested(self, workflow_name: str) -> str:
        return self.under(self.tag(workflow_name), NESTED)

    def tombstones(self, workflow_name: str) -> str:
        return self.under(self.tag(workflow_name), TOMBS)

    def record(self, home: str, checkpoint_id: CheckpointID) -> str:
        return self.record_under(self.tag(home), checkpoint_id)

    @staticmethod
    def record_under(tag: str, checkpoint_id: CheckpointID) -> str:
        """:meth:`record` for a home whose :meth:`tag` is already built."""
        return f"{tag}:{RECORD}:{escape(checkpoint_id)}"

    @staticmethod
    def children_under(tag: str, checkpoint_id: CheckpointID) -> str:
        """The list of a record's direct children, in the home whose :meth:`tag` is ``tag``."""
        return f"{tag}:{CHILDREN}:{escape(checkpoint_id)}"

    @staticmethod
    def stage_under(tag: str, checkpoint_id: CheckpointID) -> str:
        """Where a save's transaction puts a large body for save_one to rename into place."""
        return f"{tag}:{STAGE}:{escape(checkpoint_id)}"

    def location(self, checkpoint_id: CheckpointID) -> str:
        return f"{self.tag(checkpoint_id)}:{LOCATION}"

    def written_by_save(self, workflow_name: str, checkpoint_id: CheckpointID, signature: str) -> list[str]:
        """The keys a one-record save writes: location, record, sequence, top, signature."""
        return [
            self.location(checkpoint_id),
            self.record(workflow_name, checkpoint_id),
            self.sequence(workflow_name),
            self.top(workflow_name),
            self.signature(workflow_name, signature),
        ]

    def pruned(self, checkpoint_id: CheckpointID) -> str:
        return f"{self.tag(checkpoint_id)}:{PRUNED}"

    @property
    def workflows(self) -> str:
        """The prefix's workflow index (storages/redis/workflows.py); outside every hash tag."""
        return f"{self.prefix}:{WORKFLOWS}"

    def tagged_pattern(self) -> str:
        """SCAN pattern of every key of this prefix under a hash tag (all but :attr:`workflows`)."""
        return GLOB_SPECIAL.sub(r"\\\1", self.prefix) + ":{*"

    def listing_pattern(self) -> str:
        """SCAN pattern matching (among others) every ``top``, ``nested`` and ``tombs`` key."""
        initials = "".join(sorted({kind[0] for kind in WORKFLOW_KINDS}))
        return GLOB_SPECIAL.sub(r"\\\1", self.prefix) + f":{{*}}:[{initials}]*"

    def listed_workflow(self, key: str) -> tuple[str, str] | None:
        """(workflow name, kind) of a ``top``, ``nested`` or ``tombs`` key of this prefix, else None."""
        head, _, kind = key.rpartition("}:")
        start = f"{self.prefix}:{{"
        if kind not in WORKFLOW_KINDS or not head.startswith(start):
            return None
        return unescape(head[len(start) :]), kind


def prefix_under(prefix: str, part: str) -> str:
    """A prefix of its own inside ``prefix``: none of its keys is one of ``prefix``'s (those
    continue ``prefix`` with ``:{`` or ``:workflows``), and none is scanned as one."""
    return f"{prefix}:{part}"


def nested_member(home: str, checkpoint_id: CheckpointID) -> str:
    """A member of a name's nested index: where the record lives, and its id."""
    return f"{escape(home)}:{escape(checkpoint_id)}"


def split_member(member: str) -> tuple[str, CheckpointID]:
    home, _, checkpoint_id = member.partition(":")
    return unescape(home), unescape(checkpoint_id)


# The Lua functions lua_layout() writes, by the part of the name they are given: a workflow's tag
# (per-workflow keys), a tag and an id or signature (escaped), or an id alone (its own tag).
_LUA_UNDER_TAG = {"seqkey": SEQUENCE, "topkey": TOP, "nextkey": NEXT, "nestedkey": NESTED, "tombskey": TOMBS}
_LUA_UNDER_TAG_NAMED = {
    "sigkey": SIGNATURE,
    "rkey": RECORD,
    "kkey": CHILDREN,
    "fkey": FAMILY,
    "stagekey": STAGE,
}
_LUA_OF_ID = {"lockey": LOCATION, "prunedkey": PRUNED}


def _lua_text(text: str) -> str:
    """A Lua string literal of ``text`` (the layout's own characters only)."""
    assert not set(text) & set("'\\\n"), text
    return f"'{text}'"


def lua_layout() -> str:
    """The Lua functions that build this module's key names, ahead of every script that uses
    them: ``esc`` (as :func:`escape`) and ``unescaped(s)`` (whether ``esc`` leaves ``s`` as it
    is), ``tag(w)``, ``topkey(h)`` and the other per-workflow keys of a tag ``h`` (and
    ``nextkey_beside(top)``, a top index's successor index), ``rkey(h, id)``
    and the other keys of a name under a tag, ``rprefix(h)`` (a record key before its escaped
    id), ``lockey(id)``, ``prunedkey(id)``, ``workflowskey()`` and ``nmember(home, id)``. ``P``
    is the prefix, a common input of every script."""
    searches = " or ".join(f"find(s, {_lua_text(char)}, 1, true)" for char in ESCAPED)
    pattern = "[" + "".join("%%" if char == "%" else char for char in ESCAPED) + "]"
    lines = [
        "-- Generated by storages/redis/keys.py (lua_layout), the key layout's one definition.",
        "local function escape_char(c) return string.format('%%%02X', string.byte(c)) end",
        "-- Four plain searches (memchr) cost the server less than one search for the character",
        "-- class; esc() has them inline, as every script building a key calls it (a function more",
        "-- is a closure more the server builds on every call).",
        "local function esc(s)",
        "  local find = string.find",
        f"  if not ({searches}) then return s end",
        f"  return (string.gsub(s, {_lua_text(pattern)}, escape_char))",
        "end",
        "-- Whether esc() leaves s as it is.",
        "local function unescaped(s)",
        "  local find = string.find",
        f"  return not ({searches})",
        "end",
        "local function tag(w) return P .. ':{' .. esc(w) .. '}' end",
    ]
    lines += [
        f"local function {name}(h) return h .. {_lua_text(':' + kind)} end"
        for name, kind in _LUA_UNDER_TAG.items()
    ]
    lines += [
        f"local function {name}(h, s) return h .. {_lua_text(':' + kind + ':')} .. esc(s) end"
        for name, kind in _LUA_UNDER_TAG_NAMED.items()
    ]
    lines.append(f"local function rprefix(h) return h .. {_lua_text(':' + RECORD + ':')} end")
    # The successor index from its workflow's top index, beside it: no escaping, no key sent.
    beside = f"string.sub(top, 1, -{len(TOP) + 2}) .. {_lua_text(':' + NEXT)}"
    lines.append(f"local function nextkey_beside(top) return {beside} end")
    lines += [
        f"local function {name}(id) return tag(id) .. {_lua_text(':' + kind)} end"
        for name, kind in _LUA_OF_ID.items()
    ]
    lines.append(f"local function workflowskey() return P .. {_lua_text(':' + WORKFLOWS)} end")
    lines.append("local function nmember(home, id) return esc(home) .. ':' .. esc(id) end")
    return "\n".join(lines) + "\n"
