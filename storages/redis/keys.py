"""Key names of one prefix, as the Lua scripts build them (scripts/keys.lua).

``P`` is the prefix; ids, workflow names and signatures go through :func:`escape`, which writes
``%``, ``{``, ``}`` and ``:`` as ``%XX``, so no input can end a hash tag early, add a level to a
key, or produce another key's name::

    P:{W}:seq          workflow W's sequence counter (INCR; never goes back)
    P:{W}:top          sorted set: W's top-level ids, score = sequence
    P:{W}:sig:S        sorted set: W's top-level ids saved with graph signature S
    P:{W}:next         sorted set (score 0): "esc(previous):esc(S):<seq, 16 hex>:id" for each
                       top-level record with a previous id (latest through the lineage, and
                       the head's rivals; roots never rival), and each range's marker
                       "esc(previous):esc(S):" alone (the save learns from it whether the
                       range had a record)
    P:{W}:nested       sorted set: records named W nested in any checkpoint, as "home:id"
    P:{W}:tombs        set: ids pruned from W
    P:{H}:r:ID         hash: one record stored in home H (body, digest, index fields; r=1
                       on a top-level record saved after a sibling: only it can have rivals)
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

_UNESCAPE = re.compile(r"%([0-9A-F]{2})")
GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")
WORKFLOW_KINDS = ("top", "nested", "tombs")
"""The per-workflow keys that put a name in the workflow index."""


def escape(text: str) -> str:
    """``%``, ``{``, ``}`` and ``:`` as ``%XX``: what the key layout puts ids and names through."""
    # Four plain searches first, as keys.lua does: most names need no escaping, and a save
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
    """Key names of one prefix; the Lua scripts build the same names."""

    prefix: str

    def tag(self, workflow_name: str) -> str:
        return f"{self.prefix}:{{{escape(workflow_name)}}}"

    def sequence(self, workflow_name: str) -> str:
        return self.tag(workflow_name) + ":seq"

    def top(self, workflow_name: str) -> str:
        return self.tag(workflow_name) + ":top"

    def signature(self, workflow_name: str, signature: str) -> str:
        return f"{self.tag(workflow_name)}:sig:{escape(signature)}"

    def index(self, workflow_name: str, signature: str | None) -> str:
        """The sorted set listing and latest read: top-level, or one signature's."""
        return self.index_under(self.tag(workflow_name), signature)

    @staticmethod
    def index_under(tag: str, signature: str | None) -> str:
        """:meth:`index` for a workflow whose :meth:`tag` is already built."""
        return tag + ":top" if signature is None else f"{tag}:sig:{escape(signature)}"

    def nested(self, workflow_name: str) -> str:
        return self.tag(workflow_name) + ":nested"

    def tombstones(self, workflow_name: str) -> str:
        return self.tag(workflow_name) + ":tombs"

    def record(self, home: str, checkpoint_id: CheckpointID) -> str:
        return self.record_under(self.tag(home), checkpoint_id)

    @staticmethod
    def record_under(tag: str, checkpoint_id: CheckpointID) -> str:
        """:meth:`record` for a home whose :meth:`tag` is already built."""
        return f"{tag}:r:{escape(checkpoint_id)}"

    @staticmethod
    def stage_under(tag: str, checkpoint_id: CheckpointID) -> str:
        """Where a save's transaction puts a large body for save_one to rename into place."""
        return f"{tag}:stage:{escape(checkpoint_id)}"

    def location(self, checkpoint_id: CheckpointID) -> str:
        return self.tag(checkpoint_id) + ":loc"

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
        return self.tag(checkpoint_id) + ":pruned"

    @property
    def workflows(self) -> str:
        """The prefix's workflow index (storages/redis/workflows.py); outside every hash tag."""
        return f"{self.prefix}:workflows"

    def listing_pattern(self) -> str:
        """SCAN pattern matching (among others) every ``top``, ``nested`` and ``tombs`` key."""
        return GLOB_SPECIAL.sub(r"\\\1", self.prefix) + ":{*}:[nt]*"

    def listed_workflow(self, key: str) -> tuple[str, str] | None:
        """(workflow name, kind) of a ``top``, ``nested`` or ``tombs`` key of this prefix, else None."""
        head, _, kind = key.rpartition("}:")
        start = f"{self.prefix}:{{"
        if kind not in WORKFLOW_KINDS or not head.startswith(start):
            return None
        return unescape(head[len(start) :]), kind


def nested_member(home: str, checkpoint_id: CheckpointID) -> str:
    """A member of a name's nested index: where the record lives, and its id."""
    return f"{escape(home)}:{escape(checkpoint_id)}"


def split_member(member: str) -> tuple[str, CheckpointID]:
    home, _, checkpoint_id = member.partition(":")
    return unescape(home), unescape(checkpoint_id)
