"""S3 key layout and record framing: where each object lives and what a record object holds.

``P`` is the prefix, ``E(x)`` the escaped id or name (:func:`escape_component`)::

    P r/E(id)                            the record: a JSON header line, then the encoded body
    P w/E(workflow)/t/R(seq).S.E(id)     order key of a top-level checkpoint (empty object)
    P w/E(workflow)/n/R(seq).S.E(id)     order key of a nested record (same sequence space)
    P w/E(workflow)/t/R(seq).S.E(id).c.E(prev)  order key of a top-level checkpoint that continues
                                         E(prev) (saved by this release: it names its group)
    P w/E(workflow)/t/R(seq).S.E(id).r   order key of a top-level root saved by this release (it
                                         has no group key; roots rival only the leaf roots
                                         committed right before them: storages/s3/lineage.py)
    P w/E(workflow)/s/E(prev)/R(seq).S.E(id).c  group key of a checkpoint continuing E(prev),
                                         written before its order key, the commit point: the
                                         group of one previous id lists its successors (latest
                                         through the lineage) and siblings (rivals)
    P w/E(workflow)/s/E(prev)/R(seq).S.E(id).s  successor key of a checkpoint an earlier release
                                         saved out of lineage order (its order key ends in
                                         ``.s``); an earlier release's checkpoints saved in order
                                         have no key in any group, its order keys have no ending
                                         (roots too), and they never rival
    P w/E(workflow)/head                 pointer: {"seq": a sequence floor, "id": a fenced writer}
    P w/E(workflow)/x/E(id)              tombstone of a pruned id, listed per workflow
    P x/E(id)                            the same tombstone, found by id during ancestry walks

``R(seq)`` is ``10**19 - 1 - seq``, zero-padded to 19 digits, so the newest checkpoint sorts
first: get_latest is one ``ListObjectsV2(MaxKeys=1)`` plus one GET, whatever the history length.
``S`` is a 24-hex-digit hash of the graph signature, so signature filters need no bodies.
Pure functions and values: nothing here sends a request.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from ..backend import IndexEntry, StoredBody
from ..contract import CheckpointID, CheckpointInfo
from ..errors import CheckpointCorruptedError

SEQUENCE_DIGITS = 19
MAX_SEQUENCE = 10**SEQUENCE_DIGITS - 1
HASHED = "!"
"""First character of an escaped component too long to keep: a hash, not reversible."""
_SAFE = frozenset(string.ascii_letters + string.digits + "_-")
_MAX_ESCAPED = 300
"""Escaped ids longer than this are replaced by a hash (S3 keys are limited to 1,024 bytes)."""


def escape_component(text: str) -> str:
    """A key-safe, reversible spelling of an id or name: ``[A-Za-z0-9_-]`` stay, every other
    character becomes %XX of its UTF-8 bytes (so ``/``, ``.``, ``..`` and unicode cannot form path
    segments), and the caller always ends it with a separator outside that set, so ``wf1`` is
    never a prefix of ``wf10``. Very long results become ``!`` + a hash (not reversible)."""
    escaped = "".join(char if char in _SAFE else _percent(char) for char in text)
    if len(escaped) > _MAX_ESCAPED:
        return HASHED + hashlib.blake2b(text.encode("utf-8"), digest_size=20).hexdigest()
    return escaped


def _percent(char: str) -> str:
    # Not urllib's quote: it leaves ".", "~" and "-" alone, and "." must never reach a key.
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))


def unescape_component(escaped: str) -> str | None:
    """The text :func:`escape_component` escaped, or None for a hashed one; CheckpointCorruptedError
    naming the escaped text if its bytes are not UTF-8 (a key planted in a hostile store)."""
    if escaped.startswith(HASHED):
        return None
    try:
        # Strict: unquote's default replaces bytes that are not UTF-8 with U+FFFD, which would
        # hand on an id or name that is not the one the key spells.
        return unquote(escaped, errors="strict")
    except UnicodeDecodeError:
        raise CheckpointCorruptedError(
            escaped, "an S3 key spells it, and its %XX bytes are not UTF-8 text (no key this storage writes)"
        ) from None


def signature_tag(graph_signature_hash: str) -> str:
    return hashlib.blake2b(graph_signature_hash.encode("utf-8"), digest_size=12).hexdigest()


@dataclass(frozen=True, slots=True)
class OrderEntry:
    """One order key, parsed: which record, at which sequence, in which listing."""

    key: str
    sequence: int
    tag: str
    escaped_id: str
    nested: bool
    mark: str = ""
    """How its name ends: "" (an earlier release's checkpoint), :data:`SUCCESSOR_MARK`,
    :data:`CONTINUES_MARK` or :data:`ROOT_MARK` (see KeyLayout)."""
    group: str | None = None
    """The group its record's group key is in (the escaped previous id), when the key says so:
    an order key of a checkpoint continuing another saved by this release, or any group key."""

    @property
    def checkpoint_id(self) -> str | None:
        return unescape_component(self.escaped_id)

    @property
    def successor(self) -> bool:
        """Its record has a key in a group (the one of its previous id)."""
        return self.mark in (SUCCESSOR_MARK, CONTINUES_MARK)

    @property
    def rivals(self) -> bool:
        """Its record can rival its siblings: it continues another and was saved with its group
        named (by this release). An earlier release's checkpoints are not all in a group, so none
        rival."""
        return self.mark == CONTINUES_MARK

    @property
    def root(self) -> bool:
        """A root saved by this release: it can rival the leaf roots committed right before it,
        and be one of them (an earlier release's order keys do not say which are roots, so its
        roots never rival)."""
        return self.mark == ROOT_MARK


@dataclass(frozen=True, slots=True)
class Member:
    """A record written by one save, as the checkpoint's header lists it."""

    checkpoint_id: CheckpointID
    workflow_name: str
    sequence: int
    tag: str
    successor: bool = False
    """A top-level record an earlier release saved with a successor key (order key name ends in
    ``.s``)."""
    group: str | None = None
    """A top-level record continuing another, saved by this release: the group its group key is
    in (the escaped previous id), which its order key name ends with."""
    root: bool = False
    """A top-level root saved by this release (order key name ends in ``.r``)."""


@dataclass(frozen=True, slots=True)
class Header:
    """The first line of a record object: every index field, so no read needs a listing."""

    checkpoint_id: CheckpointID
    workflow_name: str
    sequence: int
    previous_checkpoint_id: CheckpointID | None
    graph_signature_hash: str
    digest: str
    container_id: CheckpointID | None
    root_id: CheckpointID | None
    children: tuple[CheckpointID, ...]
    """Directly nested records, by position."""
    descendants: tuple[CheckpointID, ...]
    """Nested records at any depth."""
    members: tuple[Member, ...]
    """For a top-level checkpoint: every nested record saved with it."""
    successor: bool = False
    """Saved by an earlier release with a successor key (its parent was not, at its save, the
    workflow's newest checkpoint with a lineage complete to the root)."""
    grouped: bool = False
    """A top-level record saved by this release, whose order key says what it is
    (storages/s3/lineage.py): continuing another, it has a key in the group of its previous id
    and its order key names that group; a root has no group key and its order key ends in
    ``.r``."""

    @property
    def member(self) -> Member:
        return Member(
            self.checkpoint_id,
            self.workflow_name,
            self.sequence,
            signature_tag(self.graph_signature_hash),
            self.successor,
            self.group,
            self.grouped and not self.nested and self.previous_checkpoint_id is None,
        )

    @property
    def group(self) -> str | None:
        """The group of a top-level record continuing another, saved by this release (None for
        any other: a root is in no group)."""
        if not self.grouped or self.nested or self.previous_checkpoint_id is None:
            return None
        return escape_component(self.previous_checkpoint_id)

    @property
    def nested(self) -> bool:
        return self.container_id is not None

    def encode(self) -> bytes:
        return json.dumps(
            {
                "id": self.checkpoint_id,
                "workflow": self.workflow_name,
                "seq": self.sequence,
                "previous": self.previous_checkpoint_id,
                "signature": self.graph_signature_hash,
                "digest": self.digest,
                "container": self.container_id,
                "root": self.root_id,
                "children": list(self.children),
                "descendants": list(self.descendants),
                "members": [[m.checkpoint_id, m.workflow_name, m.sequence, m.tag] for m in self.members],
                **({"successor": True} if self.successor else {}),
                **({"grouped": True} if self.grouped else {}),
            },
            separators=(",", ":"),
            ensure_ascii=True,
        ).encode("ascii")

    @classmethod
    def decode(cls, checkpoint_id: CheckpointID, raw: bytes) -> Header:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise TypeError(f"it is a JSON {type(data).__name__}, not an object")
            return cls(
                _field(data, "id", str),
                _field(data, "workflow", str),
                _sequence(data["seq"], "seq"),
                _field(data, "previous", str, optional=True),
                _field(data, "signature", str),
                _field(data, "digest", str),
                _field(data, "container", str, optional=True),
                _field(data, "root", str, optional=True),
                _ids(data, "children"),
                _ids(data, "descendants"),
                tuple(_member(item) for item in _field(data, "members", list)),
                data.get("successor", False) is True,
                data.get("grouped", False) is True,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorruptedError(
                checkpoint_id, f"the S3 record header is unreadable: {exc}"
            ) from exc


# A header is read from the store, which is hostile: every field must have the type this storage
# writes (json.loads gives any type anywhere; str(5) or tuple("ab") would pass a wrong one on).


def _field(data: dict[str, Any], name: str, kind: type[Any], *, optional: bool = False) -> Any:
    value = data[name]
    if (value is None and optional) or (type(value) is kind):
        return value
    raise TypeError(f"field {name!r} is {type(value).__name__}, not {kind.__name__}")


def _sequence(value: object, name: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_SEQUENCE:
        raise ValueError(f"field {name!r} is {value!r:.40}, not a sequence number")
    return value


def _ids(data: dict[str, Any], name: str) -> tuple[CheckpointID, ...]:
    values = _field(data, name, list)
    if not all(type(value) is str for value in values):
        raise TypeError(f"field {name!r} holds a value that is not a str")
    return tuple(values)


def _member(item: object) -> Member:
    if type(item) is not list or len(item) != 4:
        raise TypeError(f"a member is {item!r:.60}, not [id, workflow, seq, tag]")
    checkpoint_id, workflow_name, sequence, tag = item
    if not (type(checkpoint_id) is str and type(workflow_name) is str and type(tag) is str):
        raise TypeError(f"a member is {item!r:.60}, not [id, workflow, seq, tag]")
    return Member(checkpoint_id, workflow_name, _sequence(sequence, "members"), tag)


@dataclass(frozen=True, slots=True)
class Stored:
    """A record object as read: header, body and the ETag it was read at."""

    header: Header
    body: bytes
    etag: str

    def info(self) -> CheckpointInfo:
        header = self.header
        return CheckpointInfo(
            checkpoint_id=header.checkpoint_id,
            workflow_name=header.workflow_name,
            previous_checkpoint_id=header.previous_checkpoint_id,
            graph_signature_hash=header.graph_signature_hash,
            container_id=header.container_id,
            sequence=header.sequence,
            size=len(self.body),
        )

    def stored_body(self) -> StoredBody:
        """The body with the index entry its header gives, for the read to check it against."""
        header = self.header
        entry = IndexEntry(header.workflow_name, header.previous_checkpoint_id, header.graph_signature_hash)
        return StoredBody(header.checkpoint_id, self.body, entry=entry)


@dataclass(frozen=True, slots=True)
class Pointer:
    """A workflow's pointer as read: a sequence floor, the fenced writer that set it (None when
    a nested save, delete or prune raised it), its ETag."""

    sequence: int
    checkpoint_id: CheckpointID | None
    etag: str

    @staticmethod
    def encode(sequence: int, checkpoint_id: CheckpointID | None) -> bytes:
        return json.dumps({"seq": sequence, "id": checkpoint_id}).encode("utf-8")


def frame(header: Header, body: bytes) -> bytes:
    return header.encode() + b"\n" + body


def reverse(sequence: int) -> str:
    return f"{MAX_SEQUENCE - sequence:0{SEQUENCE_DIGITS}d}"


SUCCESSOR_MARK = "s"
"""Ends the order key name (``.s``) of a record an earlier release saved with a successor key."""
CONTINUES_MARK = "c"
"""Ends the group key name (``.c``) of a record continuing another, and its order key name
(``.c.E(previous id)``)."""
ROOT_MARK = "r"
"""Ends the order key name (``.r``) of a root saved by this release (it has no group key)."""


def _mark(member: Member) -> str:
    if member.group is not None:
        return CONTINUES_MARK
    if member.root:
        return ROOT_MARK
    return SUCCESSOR_MARK if member.successor else ""


def group_name(member: Member) -> str:
    """The last part of a group key: R(seq).S.E(id), then ``.c`` or ``.s``; with ``.r`` or no
    ending, the last part of the order key of a record in no group."""
    mark = _mark(member)
    return f"{reverse(member.sequence)}.{member.tag}.{escape_component(member.checkpoint_id)}" + (
        f".{mark}" if mark else ""
    )


def order_name(member: Member) -> str:
    """The last part of an order key: the group key name, and for a record continuing another
    (``.c``) the escaped previous id, so that the order key alone names its group."""
    name = group_name(member)
    return f"{name}.{member.group}" if _mark(member) == CONTINUES_MARK else name


class KeyLayout:
    """The keys of one prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def record_key(self, checkpoint_id: CheckpointID) -> str:
        return f"{self.prefix}r/{escape_component(checkpoint_id)}"

    def hashed_record_key(self, escaped_id: str) -> str:
        return f"{self.prefix}r/{escaped_id}"

    def workflows_prefix(self) -> str:
        return f"{self.prefix}w/"

    def workflow_prefix(self, workflow_name: str) -> str:
        return f"{self.prefix}w/{escape_component(workflow_name)}/"

    def order_prefix(self, workflow_name: str, nested: bool) -> str:
        return self.workflow_prefix(workflow_name) + ("n/" if nested else "t/")

    def order_key(self, member: Member, nested: bool) -> str:
        return self.order_prefix(member.workflow_name, nested) + order_name(member)

    def successors_prefix(self, workflow_name: str) -> str:
        return self.workflow_prefix(workflow_name) + "s/"

    def successor_prefix(self, workflow_name: str, escaped_previous_id: str) -> str:
        """Where the successor keys of one (escaped) previous id are listed, newest first."""
        return f"{self.successors_prefix(workflow_name)}{escaped_previous_id}/"

    def successor_key(self, header: Header) -> str | None:
        """The group key of a top-level record saved with one (None for any other): in the group
        of its previous id, named so that it names the order key that commits it."""
        if header.nested:
            return None
        group = header.group
        if group is None:
            if not header.successor or header.previous_checkpoint_id is None:
                return None
            group = escape_component(header.previous_checkpoint_id)
        return self.successor_prefix(header.workflow_name, group) + group_name(header.member)

    def group_key_of_order(self, workflow_name: str, entry: OrderEntry) -> str | None:
        """The group key of a top-level order entry that names its group (None for any other)."""
        if entry.group is None or entry.nested:
            return None
        name = f"{reverse(entry.sequence)}.{entry.tag}.{entry.escaped_id}.{entry.mark}"
        return self.successor_prefix(workflow_name, entry.group) + name

    def order_key_of_successor(self, workflow_name: str, successor: OrderEntry) -> str:
        """The top-level order key a group key names."""
        name = successor.key.rpartition("/")[2]
        if successor.mark == CONTINUES_MARK:
            name = f"{name}.{successor.group}"
        return self.order_prefix(workflow_name, False) + name

    def header_order_key(self, header: Header) -> str:
        return self.order_key(header.member, header.nested)

    def pointer_key(self, workflow_name: str) -> str:
        return self.workflow_prefix(workflow_name) + "head"

    def tombstone_prefix(self, workflow_name: str | None) -> str:
        return f"{self.prefix}x/" if workflow_name is None else self.workflow_prefix(workflow_name) + "x/"

    def tombstone_keys(self, workflow_name: str, checkpoint_id: CheckpointID) -> tuple[str, str]:
        escaped = escape_component(checkpoint_id)
        return f"{self.tombstone_prefix(workflow_name)}{escaped}", f"{self.tombstone_prefix(None)}{escaped}"

    @staticmethod
    def parse_order_key(key: str, nested: bool) -> OrderEntry | None:
        """The order entry a key under an order prefix names; None for a folder marker (a key
        ending in ``/``, which S3 consoles create and which holds nothing). Any other key no save
        writes is a damaged or planted index entry: CheckpointCorruptedError naming it, never
        skipped (a listing that left it out would look complete)."""
        name = key.rpartition("/")[2]
        if not name:
            return None
        return _parse_name(key, name, nested, in_group=None)

    @staticmethod
    def parse_group_key(key: str) -> OrderEntry | None:
        """The entry a key in a group (``s/<group>/``) names, its group filled in; None for a
        folder marker; CheckpointCorruptedError for a key no save writes."""
        rest, _, name = key.rpartition("/")
        if not name:
            return None
        return _parse_name(key, name, False, in_group=rest.rpartition("/")[2])


def _parse_name(key: str, name: str, nested: bool, in_group: str | None) -> OrderEntry:
    """Parse R(seq).S.E(id) and its ending: an order key's (``in_group`` None) is nothing, ``.s``,
    ``.r`` or ``.c.E(previous id)`` (nested ones: nothing); a group key's is ``.s`` or ``.c``."""
    parts = name.split(".")
    reversed_sequence, tag, escaped_id = [*parts, "", ""][:3]
    ending = parts[3:]
    mark = ending[0] if ending else ""
    group: str | None
    if in_group is not None:
        well_formed = len(ending) == 1 and mark in (SUCCESSOR_MARK, CONTINUES_MARK)
        group = in_group
    elif mark == CONTINUES_MARK:
        well_formed = len(ending) == 2 and bool(ending[1]) and not nested
        group = ending[1] if well_formed else None
    else:
        well_formed = not ending or (len(ending) == 1 and mark in (SUCCESSOR_MARK, ROOT_MARK) and not nested)
        group = None
    if (
        not well_formed
        or len(reversed_sequence) != SEQUENCE_DIGITS
        or not reversed_sequence.isascii()
        or not reversed_sequence.isdigit()
        or not tag
        or not escaped_id
    ):
        raise CheckpointCorruptedError(
            name[:256],
            f"the S3 {'order' if in_group is None else 'group'} key {key[:300]!r} is not one a save "
            "writes (sequence.tag.id, then .s, .r or .c[.previous id])",
        )
    return OrderEntry(key, MAX_SEQUENCE - int(reversed_sequence), tag, escaped_id, nested, mark, group)


__all__ = [
    "HASHED",
    "Header",
    "KeyLayout",
    "Member",
    "OrderEntry",
    "Pointer",
    "ROOT_MARK",
    "Stored",
    "escape_component",
    "frame",
    "signature_tag",
    "unescape_component",
]
