"""What the engine and a backend hand each other: records to store, bodies read back, what an
ancestry read reached, why a fenced insert wrote nothing; and the checks a read makes against
the index (a body read back is hostile until it agrees with what it was found under)."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

from .contract import MAX_ID_LENGTH, CheckpointID, CheckpointInfo, WorkflowCheckpoint, validate_identifier
from .errors import CheckpointConflictError, CheckpointCorruptedError, InvalidCheckpointIdError


class CheckpointRecord:
    """What a backend stores for one checkpoint: the encoded body plus the index fields read from
    it, so listing, ordering and filtering never decode bodies. Immutable."""

    __slots__ = (
        "_digest",
        "body",
        "checkpoint_id",
        "container_id",
        "graph_signature_hash",
        "position",
        "previous_checkpoint_id",
        "root_id",
        "workflow_name",
    )

    checkpoint_id: CheckpointID
    workflow_name: str
    previous_checkpoint_id: CheckpointID | None
    graph_signature_hash: str
    body: bytes
    container_id: CheckpointID | None
    """For a nested record: the checkpoint whose body refers to it."""
    root_id: CheckpointID | None
    """For a nested record: the top-level checkpoint it was saved with (its container's root)."""
    position: int
    """Place in its save: 0 for the checkpoint saved, then 1, 2, ... for nested records in the
    order they were met; list_nested returns a container's children in this order."""

    def __init__(
        self,
        checkpoint_id: CheckpointID,
        workflow_name: str,
        previous_checkpoint_id: CheckpointID | None,
        graph_signature_hash: str,
        body: bytes,
        digest: str = "",
        container_id: CheckpointID | None = None,
        root_id: CheckpointID | None = None,
        position: int = 0,
    ) -> None:
        # The slots' own setters: __setattr__ refuses every assignment after this one, and every
        # save and write batch builds a record.
        _set_id(self, checkpoint_id)
        _set_workflow(self, workflow_name)
        _set_previous(self, previous_checkpoint_id)
        _set_signature(self, graph_signature_hash)
        _set_body(self, body)
        _set_digest(self, digest)
        _set_container(self, container_id)
        _set_root(self, root_id)
        _set_position(self, position)

    @property
    def digest(self) -> str:
        """Hex digest of ``body`` (a keyed save's is taken from its MAC). Computed on first use: a
        backend that compares stored bytes never pays for it."""
        digest: str = _get_digest(self)
        if not digest:
            digest = body_digest(self.body)
            _set_digest(self, digest)
        return digest

    def replaced(self, **changes: Any) -> CheckpointRecord:
        """A copy with ``changes`` (field names as the constructor takes them); a new body gets
        its own digest unless one is given."""
        fields: dict[str, Any] = {
            "checkpoint_id": self.checkpoint_id,
            "workflow_name": self.workflow_name,
            "previous_checkpoint_id": self.previous_checkpoint_id,
            "graph_signature_hash": self.graph_signature_hash,
            "body": self.body,
            "digest": "" if "body" in changes else _get_digest(self),
            "container_id": self.container_id,
            "root_id": self.root_id,
            "position": self.position,
        }
        fields.update(changes)
        return CheckpointRecord(**fields)

    def __reduce__(self) -> tuple[type[CheckpointRecord], tuple[object, ...]]:
        return (CheckpointRecord, (*self._fields()[:5], _get_digest(self), *self._fields()[5:]))

    @property
    def known_digest(self) -> str:
        """The digest given or already computed (a keyed save's MAC digest), else "": for a
        backend that records a digest it never compares with, without computing one."""
        return _get_digest(self)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"CheckpointRecord is immutable: cannot assign {name!r}")

    def __repr__(self) -> str:
        return (
            f"CheckpointRecord({self.checkpoint_id!r}, workflow={self.workflow_name!r}, "
            f"previous={self.previous_checkpoint_id!r}, container={self.container_id!r}, "
            f"position={self.position}, {len(self.body)} bytes)"
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not CheckpointRecord:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def _fields(self) -> tuple[object, ...]:
        return (
            self.checkpoint_id,
            self.workflow_name,
            self.previous_checkpoint_id,
            self.graph_signature_hash,
            self.body,
            self.container_id,
            self.root_id,
            self.position,
        )

    @property
    def nested(self) -> bool:
        return self.container_id is not None

    def index_entry(self) -> IndexEntry:
        """What a read of this record checks its decoded body against."""
        return IndexEntry(self.workflow_name, self.previous_checkpoint_id, self.graph_signature_hash)

    def info(self, sequence: int) -> CheckpointInfo:
        """The record's index entry as ``checkpoint_info`` reports it, at its backend sequence."""
        return CheckpointInfo(
            checkpoint_id=self.checkpoint_id,
            workflow_name=self.workflow_name,
            previous_checkpoint_id=self.previous_checkpoint_id,
            graph_signature_hash=self.graph_signature_hash,
            container_id=self.container_id,
            sequence=sequence,
            size=len(self.body),
        )


_slot = vars(CheckpointRecord)
_set_id = _slot["checkpoint_id"].__set__
_set_workflow = _slot["workflow_name"].__set__
_set_previous = _slot["previous_checkpoint_id"].__set__
_set_signature = _slot["graph_signature_hash"].__set__
_set_body = _slot["body"].__set__
_set_digest = _slot["_digest"].__set__
_set_container = _slot["container_id"].__set__
_set_root = _slot["root_id"].__set__
_set_position = _slot["position"].__set__
_get_digest: Callable[[CheckpointRecord], str] = vars(CheckpointRecord)["_digest"].__get__


class InsertResult(enum.Enum):
    """What a backend's insert found under the checkpoint's id."""

    INSERTED = "inserted"
    """The id was free: every record is stored now."""
    SAME_BODY = "same body"
    """The id is stored with the same body (bytes or digest): nothing was written."""
    DIFFERENT_BODY = "different body"
    """The id is stored with another body: nothing was written; the engine compares decoded
    contents (equal content may encode differently) before calling it a conflict."""

    @classmethod
    def of_stored_digest(cls, stored_digest: str | None, record: CheckpointRecord) -> InsertResult:
        """The result for a backend that keeps digests: ``stored_digest`` is what it holds under
        the record's id (None: nothing was stored there, so the insert happened)."""
        if stored_digest is None:
            return cls.INSERTED
        return cls.SAME_BODY if stored_digest == record.digest else cls.DIFFERENT_BODY


RecordDraft = tuple[
    CheckpointID, str, CheckpointID | None, str, bytes, CheckpointID | None, CheckpointID | None, int
]
"""A record before its digest or seal: checkpoint id, workflow name, previous id, graph signature,
codec body, container id, root id, position (CheckpointRecord's fields without the digest). A
plain tuple: a save builds one per record, and a frozen dataclass costs several times more."""


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What a backend's index says of a record. A read checks the decoded body against it: a body
    that disagrees (moved from another record, or rewritten with a recomputed checksum) is
    reported as corrupted, never returned."""

    workflow_name: str
    previous_checkpoint_id: CheckpointID | None
    graph_signature_hash: str


@dataclass(frozen=True, slots=True)
class StoredBody:
    """A body read back from the backend with the id it is stored under."""

    checkpoint_id: CheckpointID
    body: bytes
    nested: Mapping[CheckpointID, bytes] | None = None
    """Bodies of the records nested in it, when the backend read them in the same round trip;
    None means they are fetched with ``Backend.nested_bodies`` if the body refers to any."""
    entry: IndexEntry | None = None
    """The index entry the body was found under, when the backend read it in the same round trip."""
    rivals: Sequence[StoredBody] = ()
    """From :meth:`Backend.latest` only: the head's rivals (:func:`~storages.backend.rivals_of`),
    read in the same atomic read, in ascending sequence. The engine resumes from the one of the
    head and its rivals with the newest timestamp (docs/contract.md, "Latest")."""


@dataclass(frozen=True, slots=True)
class WalkRecords:
    """What a backend's ancestry primitive read, in one round trip, for the base to assemble."""

    links: Mapping[CheckpointID, CheckpointID | None]
    """id -> previous id of every record the walk reached: at most ``max_depth`` records along the
    chain from the start (a backend may stop early only at a root, a cycle or a missing id)."""
    bodies: Mapping[CheckpointID, bytes]
    """With bodies: the body of every reached record and of every record nested in them."""
    tombstones: frozenset[CheckpointID]
    """Which previous ids that were not reached are tombstones of pruned records."""


@dataclass(frozen=True, slots=True)
class FenceCheck:
    """Why a fenced insert wrote nothing: what the backend found at the moment of the check."""

    latest_id: CheckpointID | None
    """The workflow's latest top-level checkpoint (commit order), or None if it has none."""
    existing: InsertResult | None
    """SAME_BODY or DIFFERENT_BODY when the checkpoint's id is already stored, else None (the
    insert was refused because ``latest_id`` is not the expected one)."""

    @classmethod
    def after_insert(cls, latest_id: CheckpointID | None, result: InsertResult) -> FenceCheck | None:
        """What ``insert_fenced`` returns once the fence let the save through to the backend's
        one write (the one ``insert`` makes): None if it wrote, else the verdict on the stored
        id with the latest."""
        return None if result is InsertResult.INSERTED else cls(latest_id, result)


class LeftoverKind(str, enum.Enum):
    """What a fault (a request whose answer was lost, a crash between requests, a key deleted
    behind the storage's back) can leave in a store that no operation will clear by itself."""

    INDEX_WITHOUT_RECORD = "index_without_record"
    """An index entry (an order key, a sorted-set member) whose record is gone: the reads that
    reach it raise CheckpointCorruptedError naming it."""
    RECORD_WITHOUT_INDEX = "record_without_index"
    """A record no index entry lists: no read returns it (a save that never committed)."""
    STAGE_PAST_LIFE = "stage_past_life"
    """A key a multi-request save stages a body in, older than any save can take to commit it."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Leftover:
    """One leftover a backend found (:meth:`storages.backend.Backend.leftovers`)."""

    kind: LeftoverKind
    key: str
    """Where it is in the store (a key or a row), never a credential."""
    checkpoint_id: CheckpointID | None
    workflow_name: str | None
    detail: str
    """What it is and what repairing it does, or why it is not repaired."""
    repairable: bool
    """True when :meth:`~storages.backend.Backend.repair_leftover` may remove it: nothing that
    is or may become a checkpoint is lost by doing so."""


WRITES_LOG_PREFIX = "\x1fwrites\x1f"
"""The start of a pending-writes log's workflow name: the engine's log of ``workflow_name`` is
``WRITES_LOG_PREFIX + workflow_name``."""
RECEIPTS_LOG_PREFIX = "\x1fpruned\x1f"
"""The start of a prune-receipts log's workflow name (a keyed prune's signed receipts)."""


def is_engine_log_name(workflow_name: str) -> bool:
    """Whether a workflow name is one of the engine's own logs (pending writes, prune receipts).

    The engine keeps them through the same primitives as checkpoints, as records of workflows no
    caller can name (a control character starts them), with the owning checkpoint's id in the
    graph-signature column (:func:`filed_under`). A backend stores them like any record; the
    engine leaves them out of ``list_workflows``, ``list_records`` and ``iter_records``, and a
    backend's own tooling (a report, a migration, a quota) tells them apart with this."""
    return workflow_name.startswith((WRITES_LOG_PREFIX, RECEIPTS_LOG_PREFIX))


def filed_under(record: WorkflowCheckpoint | CheckpointRecord) -> str:
    """The id an internal log's record (a pending-writes batch, a prune receipt) belongs to.

    A log keeps it in the graph-signature column: every backend already indexes that column per
    workflow (latest and listing by signature), so a log lists its records by owner with no column
    or index of its own, and no caller's workflow is ever a log (a log's name starts with a
    control character, which validate_identifier refuses). Read it through this name; a log record
    is built with ``graph_signature_hash=<owner>`` and a ``filed_under`` comment."""
    return record.graph_signature_hash


def body_digest(body: bytes | bytearray | memoryview) -> str:
    """The digest a backend keeps beside an unkeyed body, 32 hex digits: XXH3-128.

    It only tells a re-save of the same bytes (SAME_BODY) from another body under the id; a
    mismatch is never a verdict on its own (the engine compares decoded contents before it calls
    a save a conflict). So it needs no resistance to a crafted collision, only to accidents
    (128 bits), and it must be cheap on large bodies: XXH3 costs about 34 µs a megabyte here,
    BLAKE2b 1,330 µs, more than the codec's whole round trip of that
    megabyte. A digest written by an earlier release simply does not match one of
    this release: that re-save is settled by the decoded comparison, as equal content encoded
    differently always was. Tamper evidence is the integrity key's MAC (a keyed record's digest
    is taken from its MAC), never this."""
    return xxhash.xxh3_128_hexdigest(body)


def nested_id_conflict(
    records: Sequence[CheckpointRecord], checkpoint_id: CheckpointID
) -> CheckpointConflictError:
    """The error ``Backend.insert`` raises when a nested record's id is already stored (the whole
    family is then left unwritten): names the id and the container it was embedded in."""
    container = next((r.container_id for r in records if r.checkpoint_id == checkpoint_id), None)
    return CheckpointConflictError(
        checkpoint_id,
        f"embedded in checkpoint {container!r}, but a record with this id is already stored; "
        "an embedded checkpoint needs an id of its own",
    )


def info_from_index(
    checkpoint_id: object,
    workflow_name: object,
    previous_checkpoint_id: object,
    graph_signature_hash: object,
    container_id: object,
    sequence: object,
    size: object,
) -> CheckpointInfo:
    """A CheckpointInfo from index fields as a driver returns them (str or UTF-8 bytes, ints as
    int, str or bytes); a value of any other shape is a corrupted index entry, never a crash."""
    record_id = index_text(checkpoint_id, checkpoint_id, "checkpoint id")
    previous = (
        None
        if previous_checkpoint_id is None
        else index_text(previous_checkpoint_id, record_id, "previous id")
    )
    container = None if container_id is None else index_text(container_id, record_id, "container id")
    return CheckpointInfo(
        checkpoint_id=record_id,
        workflow_name=index_text(workflow_name, record_id, "workflow name"),
        previous_checkpoint_id=previous,
        graph_signature_hash=index_text(graph_signature_hash, record_id, "graph signature"),
        container_id=container,
        sequence=_count(sequence, record_id, "sequence"),
        size=_count(size, record_id, "size"),
    )


def index_text(value: object, checkpoint_id: object, what: str) -> str:
    """One text field of a record's index entry as a driver returned it (str or UTF-8 bytes);
    anything else is CheckpointCorruptedError naming the record and the field."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            pass
    raise CheckpointCorruptedError(
        str(checkpoint_id)[:256], f"its index entry has a malformed {what} {value!r:.80}"
    )


def stored_id(value: object) -> CheckpointID:
    """An id column as a driver returned it: a str, or CheckpointCorruptedError naming it. SQLite
    keeps any value in any column and a PostgreSQL ``SQL_ASCII`` database hands text over as
    bytes: UTF-8 bytes are the text they spell, anything else names the record it cannot."""
    return value if type(value) is str else index_text(value, value, "checkpoint id")


def stored_ids(rows: Sequence[Sequence[object]]) -> list[CheckpointID]:
    """The first column of ``rows`` as ids (see :func:`stored_id`), checked at C speed when every
    one is a str already (the one case a store this storage wrote holds)."""
    found = [row[0] for row in rows]
    if not set(map(type, found)) <= {str}:
        return [stored_id(value) for value in found]
    return found  # type: ignore[return-value]  # every one a str


_REFUSED_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""Exactly the characters validate_identifier refuses: Unicode's Cc (controls) and Cs
(surrogates) categories, as one character class, so a whole listing is checked in one C scan."""

_ASCII_CONTROLS = bytes(range(0x20)) + b"\x7f"
"""The characters of _REFUSED_CHARACTERS an ASCII str can hold: deleting them from its bytes (a
table lookup per byte) changes its length if it holds any, several times faster than the scan."""


def listed_ids(ids: list[CheckpointID], index: str) -> list[CheckpointID]:
    """Ids a backend listed, checked against the rules every id was saved under (non-empty str,
    at most MAX_ID_LENGTH characters, no control or surrogate character): an id no save could have
    written is a corrupted ``index`` (named), reported here rather than listed for a later load
    to refuse. Valid listings, the only kind a store this storage wrote holds, cost three C
    passes."""
    try:
        joined = "".join(ids)
        valid = (
            max(map(len, ids), default=1) <= MAX_ID_LENGTH
            and "" not in ids
            and (
                len(joined.encode().translate(None, _ASCII_CONTROLS)) == len(joined)
                if joined.isascii()  # a flag of the str: no scan
                else _REFUSED_CHARACTERS.search(joined) is None
            )
        )
    except TypeError:  # a value that is not a str: named below
        valid = False
    if valid:
        return ids
    for value in ids:
        try:
            validate_identifier(value, "checkpoint id")
        except InvalidCheckpointIdError as error:
            shown = value[:MAX_ID_LENGTH] if isinstance(value, str) else repr(value)[:80]
            raise CheckpointCorruptedError(shown, f"{index} lists it, and it {error.reason}") from None
    return ids


def stored_body(checkpoint_id: object, value: object) -> bytes:
    """A body column as a driver returned it: bytes, or CheckpointCorruptedError naming the record
    (a SQLite BLOB column can hold text or a number)."""
    if type(value) is bytes:
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise CheckpointCorruptedError(
        str(checkpoint_id)[:256], f"its stored body is {type(value).__name__}, not bytes"
    )


def _count(value: object, checkpoint_id: str, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        try:
            number = int(index_text(value, checkpoint_id, what))
        except ValueError:
            number = -1
    if number < 0:
        raise CheckpointCorruptedError(checkpoint_id, f"its index entry has a malformed {what} {value!r:.80}")
    return number


def as_asked(stored: StoredBody | None, checkpoint_id: CheckpointID) -> StoredBody | None:
    """What a backend's ``load(checkpoint_id)`` returned, checked to be the record asked for: ids
    are compared exactly, so a backend that matched another one (a case variant, a trailing
    space, a normalised form of a stored id) raises CheckpointCorruptedError naming the id asked
    for, rather than handing back another record under it."""
    if stored is not None and stored.checkpoint_id != checkpoint_id:
        raise CheckpointCorruptedError(
            checkpoint_id,
            f"the backend answered a read of {checkpoint_id!r} with the record stored under "
            f"{stored.checkpoint_id!r} (ids are compared exactly, character for character)",
        )
    return stored


def check_against_index(
    stored: StoredBody, checkpoint: Any, workflow_name: str | None, graph_signature_hash: str | None
) -> None:
    """Raise CheckpointCorruptedError if a decoded body is not the record it was read as."""
    checkpoint_id = stored.checkpoint_id

    def disagree(what: str, indexed: object, in_body: object) -> CheckpointCorruptedError:
        return CheckpointCorruptedError(
            checkpoint_id, f"indexed with {what} {indexed!r} but its body says {in_body!r}"
        )

    if checkpoint.checkpoint_id != checkpoint_id:
        raise CheckpointCorruptedError(
            checkpoint_id, f"the stored body belongs to checkpoint {checkpoint.checkpoint_id!r}"
        )
    if workflow_name is not None and checkpoint.workflow_name != workflow_name:
        raise disagree("workflow", workflow_name, checkpoint.workflow_name)
    if graph_signature_hash is not None and checkpoint.graph_signature_hash != graph_signature_hash:
        raise disagree("graph signature", graph_signature_hash, checkpoint.graph_signature_hash)
    entry = stored.entry
    if entry is None:
        return
    if checkpoint.workflow_name != entry.workflow_name:
        raise disagree("workflow", entry.workflow_name, checkpoint.workflow_name)
    if checkpoint.previous_checkpoint_id != entry.previous_checkpoint_id:
        raise disagree("previous id", entry.previous_checkpoint_id, checkpoint.previous_checkpoint_id)
    if checkpoint.graph_signature_hash != entry.graph_signature_hash:
        raise disagree("graph signature", entry.graph_signature_hash, checkpoint.graph_signature_hash)


def stored_row(row: Sequence[object]) -> StoredBody:
    """A SQL row of (checkpoint_id, body, workflow_name, previous_checkpoint_id,
    graph_signature_hash, ...) as a StoredBody with its index entry; a value of the wrong kind
    raises CheckpointCorruptedError naming the record (SQLite and PostgreSQL share this)."""
    checkpoint_id, body, workflow_name, previous_id, signature = row[:5]
    if (
        type(checkpoint_id) is str
        and type(body) is bytes
        and type(workflow_name) is str
        and type(signature) is str
        and (previous_id is None or type(previous_id) is str)
    ):  # what the SQL backends write, checked without a call; anything else names its record below
        return StoredBody(checkpoint_id, body, entry=IndexEntry(workflow_name, previous_id, signature))
    record_id = stored_id(checkpoint_id)
    entry = IndexEntry(
        index_text(workflow_name, record_id, "workflow name"),
        None if previous_id is None else index_text(previous_id, record_id, "previous id"),
        index_text(signature, record_id, "graph signature"),
    )
    return StoredBody(record_id, stored_body(record_id, body), entry=entry)
