"""The shared engine every built-in backend subclasses.

:class:`BaseCheckpointStorage` implements the public contract once: validation, encoding through
the codec, copy semantics, immutability, capability gating, corruption reporting and lifecycle.
A backend supplies a handful of storage primitives (the ``_``-prefixed abstract methods), each
one round trip to its backend. Backend authors outside this project can subclass it too.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import functools
import hashlib
import hmac
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from typing_extensions import Self

from .codec import CheckpointCodec, TypeRef
from .contract import (
    CHECKPOINT_FIELDS,
    UNFENCED,
    AncestryEnd,
    AncestryWalk,
    Capability,
    CheckpointID,
    CheckpointInfo,
    PendingWrite,
    Unfenced,
    WorkflowCheckpoint,
    validate_identifier,
)
from .errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointTamperedError,
    GraphSignatureMismatchError,
    InvalidCheckpointError,
    StaleWriterError,
    StorageClosedError,
    StorageConfigurationError,
    UnsupportedOperationError,
)
from .fencing import FencedStorage
from .integrity import (
    Anchor,
    IntegrityKeyInput,
    IntegrityKeyProvider,
    Link,
    Seal,
    TamperKind,
    accepts_unsigned,
    anchor_token,
    as_provider,
    is_sealed,
    open_sealed,
    read_anchor,
    record_mac,
    seal_header,
    sealed_digest,
    split_sealed,
)

DEFAULT_MAX_DEPTH = 100_000
"""Ancestry walks stop here unless asked otherwise; deeper chains report DEPTH_LIMIT."""

_LINK_CACHE_SIZE = 4096
"""How many records' MACs a keyed handle remembers, so chaining a save onto the checkpoint it
just saved or read costs no round trip."""

_LARGEST_BACKEND_INT = 2**63 - 1
"""max_depth and keep_last are clamped to this before they reach a primitive: a larger int means
"no limit" all the same, and would overflow a 64-bit database integer (SQLite's, for one)."""


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """What a backend stores for one checkpoint: the encoded body plus the index fields read from
    it, so listing, ordering and filtering never decode bodies."""

    checkpoint_id: CheckpointID
    workflow_name: str
    previous_checkpoint_id: CheckpointID | None
    graph_signature_hash: str
    body: bytes
    digest: str
    """Hex digest of ``body``; an idempotent re-save is recognised by it without fetching bodies."""
    container_id: CheckpointID | None = None
    """For a nested record: the checkpoint whose body refers to it."""
    root_id: CheckpointID | None = None
    """For a nested record: the top-level checkpoint it was saved with (its container's root)."""
    position: int = 0
    """Place in its save: 0 for the checkpoint saved, then 1, 2, ... for nested records in the
    order they were met; list_nested returns a container's children in this order."""

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
    None means they are fetched with ``_nested_bodies`` if the body refers to any."""
    entry: IndexEntry | None = None
    """The index entry the body was found under, when the backend read it in the same round trip."""


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
    existing_digest: str | None
    """The digest stored under the checkpoint's id when that id already exists, else None (the
    insert was refused because ``latest_id`` is not the expected one)."""


def body_digest(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=16).hexdigest()


_DICT_FIELDS = ("messages", "state", "pending_request_info_events", "metadata")


class BaseCheckpointStorage(abc.ABC):
    """Implements the contract on top of a backend's primitives.

    Subclasses set :attr:`capabilities` and implement the abstract primitives. Each primitive
    must be atomic on its backend; the base adds no locking of its own.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    """What this backend supports; see :class:`~storages.contract.Capability`."""

    def __init__(
        self,
        *,
        codec: CheckpointCodec | None = None,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
    ) -> None:
        """``allowed_checkpoint_types`` ("module:qualname" strings or classes, as MAF's
        FileCheckpointStorage takes them) and ``allowed_modules`` extend the codec's allow-list
        (a given ``codec`` is extended in place); see storages/allowlist.py. ``integrity_key``
        (bytes or a key provider) makes the storage sign every record and verify every read;
        see storages/integrity.py and docs/integrity.md."""
        if codec is None:
            codec = self._default_codec()
        try:
            codec.allow(types=_as_list(allowed_checkpoint_types), modules=_as_list(allowed_modules))
        except (ValueError, TypeError) as exc:
            raise StorageConfigurationError(f"{type(self).__name__}: {exc}") from None
        self._codec = codec
        self._closed = False
        self._opened = False
        self._open_lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        """The event loop the backend's loop-bound resources belong to (None before opening)."""
        self._integrity: IntegrityKeyProvider | None = None
        self._chain_macs: dict[CheckpointID, tuple[bytes, int]] = {}
        """id -> (MAC, chain height) of records this handle signed or verified."""
        if integrity_key is not None:
            self._integrity = as_provider(integrity_key)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A backend's new_handle() rebuilds the storage from its own settings; the integrity keys
        # ride along here so that no backend, built-in or third-party, can drop them.
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("new_handle")
        if own is not None and not getattr(own, "_carries_integrity", False):
            cls.new_handle = _carrying_integrity(own)  # type: ignore[method-assign]

    @classmethod
    def _default_codec(cls) -> CheckpointCodec:
        """The codec of a storage built without one; stores whose bytes leave the process (every
        durable one) trust no type they were not told about, so any process reads alike."""
        return CheckpointCodec()

    @property
    def codec(self) -> CheckpointCodec:
        return self._codec

    def describe(self) -> str:
        """A short human name for messages and reports, e.g. ``sqlite:///path.db``."""
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.describe()}>"

    # ------------------------------------------------------------------ MAF's six methods

    async def save(
        self, checkpoint: Any, *, expected_latest_id: CheckpointID | Unfenced | None = UNFENCED
    ) -> CheckpointID:
        """Store a snapshot of ``checkpoint`` and return its id.

        Saving an id that exists is a no-op when the content is equal and raises
        CheckpointConflictError when it differs.

        With ``expected_latest_id`` (capability ``fencing``), the checkpoint is stored only if the
        workflow's latest is that id (None: the workflow has no checkpoint yet), checked
        atomically with the write; otherwise StaleWriterError names the expected and the actual
        latest and nothing is stored. A repeated fenced save of a checkpoint that is already the
        latest returns its id, so a retry after an ambiguous failure is harmless.
        """
        if expected_latest_id is not UNFENCED:
            return await self._save_fenced(checkpoint, expected_latest_id)
        await self._ready("save")
        records, chain = await self._signed(self._records_for(checkpoint))
        top = records[0]
        existing_digest = await (self._insert(top) if len(records) == 1 else self._insert_family(records))
        if existing_digest is not None and (
            existing_digest != top.digest or not await self._same_nested_bodies(records)
        ):
            await self._check_same_content(records)
        if existing_digest is None:
            self._remember_chain(chain)
        return top.checkpoint_id

    async def _save_fenced(self, checkpoint: Any, expected_latest_id: CheckpointID | None) -> CheckpointID:
        self._require(Capability.FENCING, "save(expected_latest_id=...)")
        if expected_latest_id is not None:
            validate_identifier(expected_latest_id, "expected_latest_id")
        await self._ready("save")
        records, chain = await self._signed(self._records_for(checkpoint))
        top = records[0]
        check = await self._insert_fenced(records, expected_latest_id)
        if check is None:
            self._remember_chain(chain)
            return top.checkpoint_id
        if check.existing_digest is None:
            raise StaleWriterError(top.workflow_name, top.checkpoint_id, expected_latest_id, check.latest_id)
        if check.existing_digest != top.digest or not await self._same_nested_bodies(records):
            await self._check_same_content(records)
        if check.latest_id == top.checkpoint_id:
            return top.checkpoint_id  # a retry of a save that succeeded: it is the latest
        raise StaleWriterError(
            top.workflow_name, top.checkpoint_id, expected_latest_id, check.latest_id, already_stored=True
        )

    async def load(
        self,
        checkpoint_id: CheckpointID,
        *,
        expected_graph_signature_hash: str | None = None,
        anchor: str | None = None,
    ) -> Any:
        """Return the checkpoint stored under ``checkpoint_id``.

        Raises CheckpointNotFoundError if there is none, CheckpointCorruptedError if its body
        cannot be decoded, GraphSignatureMismatchError if ``expected_graph_signature_hash`` is
        given and differs. With an ``anchor`` (from head_anchor), CheckpointTamperedError if the
        store went back before it.
        """
        validate_identifier(checkpoint_id, "checkpoint_id")
        parsed = None if anchor is None else self._parsed_anchor(anchor, None)
        await self._ready("load")
        stored = await self._load(checkpoint_id)
        if stored is None:
            raise CheckpointNotFoundError(checkpoint_id)
        (checkpoint,) = await self._decode_all([stored])
        if parsed is not None:
            await self._check_anchor_head_stored(parsed, stored)
        if (
            expected_graph_signature_hash is not None
            and checkpoint.graph_signature_hash != expected_graph_signature_hash
        ):
            raise GraphSignatureMismatchError(
                checkpoint_id, expected_graph_signature_hash, checkpoint.graph_signature_hash
            )
        return checkpoint

    async def list_checkpoints(
        self,
        *,
        workflow_name: str,
        graph_signature_hash: str | None = None,
        include_nested: bool = False,
    ) -> list[Any]:
        """Every checkpoint of ``workflow_name``, oldest first (commit order).

        Nested records of that workflow name are left out unless ``include_nested`` is true.
        """
        self._check_listing("list_checkpoints", workflow_name, graph_signature_hash, include_nested)
        await self._ready("list_checkpoints")
        if include_nested:
            stored = await self._list(workflow_name, graph_signature_hash, include_nested=True)
        else:
            stored = await self._list(workflow_name, graph_signature_hash)
        return await self._decode_all(stored, workflow_name, graph_signature_hash)

    async def list_checkpoint_ids(
        self,
        *,
        workflow_name: str,
        graph_signature_hash: str | None = None,
        include_nested: bool = False,
    ) -> list[CheckpointID]:
        """Ids of every checkpoint of ``workflow_name``, oldest first; decodes no bodies."""
        self._check_listing("list_checkpoint_ids", workflow_name, graph_signature_hash, include_nested)
        await self._ready("list_checkpoint_ids")
        if include_nested:
            return await self._list_ids(workflow_name, graph_signature_hash, include_nested=True)
        return await self._list_ids(workflow_name, graph_signature_hash)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one checkpoint and the checkpoints nested in it; True if it existed.

        A nested record raises NestedCheckpointDeletionError: it goes with its container.
        """
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("delete")
        self._chain_macs.clear()  # a deleted id may be saved again with other content
        return await self._remove(checkpoint_id)

    async def get_latest(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, anchor: str | None = None
    ) -> Any | None:
        """The checkpoint of ``workflow_name`` saved last (commit order), or None.

        With an ``anchor`` (from head_anchor), raises CheckpointTamperedError if the store went back
        before it: the anchored checkpoint is no longer the newest nor an ancestor of the newest.
        """
        self._check_listing("get_latest", workflow_name, graph_signature_hash, False)
        parsed = None if anchor is None else self._parsed_anchor(anchor, workflow_name)
        await self._ready("get_latest")
        stored = await self._latest(workflow_name, graph_signature_hash)
        if parsed is not None:
            head = stored if graph_signature_hash is None else await self._latest(workflow_name, None)
            await self._check_anchor_latest(parsed, head)
        if stored is None:
            return None
        (checkpoint,) = await self._decode_all([stored], workflow_name, graph_signature_hash)
        return checkpoint

    # ------------------------------------------------------------------ extensions

    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[Any]:
        """Checkpoints from ``checkpoint_id`` back to its root, newest first.

        The result's ``end`` says why the walk stopped; it never loops and never skips a record.
        """
        self._require(Capability.ANCESTRY, "walk_ancestry")
        validate_identifier(checkpoint_id, "checkpoint_id")
        _check_max_depth(max_depth)
        await self._ready("walk_ancestry")
        records = await self._walk(checkpoint_id, min(max_depth, _LARGEST_BACKEND_INT), with_bodies=True)
        ids = _assemble_walk(checkpoint_id, records, max_depth)
        seals: dict[CheckpointID, Seal | None] = {}
        if self._integrity is not None:
            records, seals = self._opened_walk(records)
        items: list[Any] = []
        for item_id in ids.items:
            body = records.bodies.get(item_id)
            if body is None:
                raise CheckpointCorruptedError(item_id, "the ancestry walk reached it but read no body")
            item = self._decode(StoredBody(item_id, body), None, records.bodies)
            indexed_previous = records.links[item_id]
            if item.previous_checkpoint_id != indexed_previous:
                reason = (
                    f"indexed with previous id {indexed_previous!r} but its body says "
                    f"{item.previous_checkpoint_id!r}"
                )
                if self._integrity is not None:
                    raise CheckpointTamperedError(item_id, TamperKind.INDEX_MISMATCH, reason)
                raise CheckpointCorruptedError(item_id, reason)
            items.append(item)
        if self._integrity is not None:
            _check_walk_chain(ids, records.links, seals)
        return AncestryWalk(tuple(items), ids.end, ids.end_id)

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[CheckpointID]:
        """Ids from ``checkpoint_id`` back to its root, newest first; decodes no bodies."""
        self._require(Capability.ANCESTRY, "walk_ancestry_ids")
        validate_identifier(checkpoint_id, "checkpoint_id")
        _check_max_depth(max_depth)
        await self._ready("walk_ancestry_ids")
        records = await self._walk(checkpoint_id, min(max_depth, _LARGEST_BACKEND_INT), with_bodies=False)
        return _assemble_walk(checkpoint_id, records, max_depth)

    async def list_nested(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        """Ids of the checkpoints embedded directly in ``checkpoint_id``, in the order met."""
        self._require(Capability.NESTED, "list_nested")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("list_nested")
        nested = await self._nested_ids(checkpoint_id)
        if nested is None:
            raise CheckpointNotFoundError(checkpoint_id)
        return nested

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        """Delete all but the newest ``keep_last`` checkpoints of a workflow (with their nested
        records), leaving a tombstone for each deleted id; returns how many were deleted."""
        self._require(Capability.PRUNE, "prune")
        validate_identifier(workflow_name, "workflow_name")
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
            raise InvalidCheckpointError(
                f"keep_last must be an int >= 0, got {keep_last!r}", field="keep_last"
            )
        await self._ready("prune")
        self._chain_macs.clear()
        pruned = await self._prune(workflow_name, min(keep_last, _LARGEST_BACKEND_INT))
        if Capability.PENDING_WRITES in self.capabilities:
            await self._drop_writes_of_pruned(workflow_name)
        return pruned

    async def delete_workflow(self, *, workflow_name: str) -> int:
        """Delete every checkpoint of a workflow, their nested records and the workflow's
        tombstones; returns how many checkpoints were deleted."""
        self._require(Capability.PRUNE, "delete_workflow")
        validate_identifier(workflow_name, "workflow_name")
        await self._ready("delete_workflow")
        self._chain_macs.clear()
        if Capability.PENDING_WRITES in self.capabilities:
            # Writes first: an interrupted delete leaves checkpoints without writes (their tasks
            # run again), never writes that a reused id would pick up.
            await self._delete_workflow(writes_log_name(workflow_name))
        return await self._delete_workflow(workflow_name)

    async def list_workflows(self) -> list[str]:
        """Names of every workflow with a stored checkpoint, sorted."""
        self._require(Capability.LIST_WORKFLOWS, "list_workflows")
        await self._ready("list_workflows")
        return sorted(name for name in await self._workflow_names() if not is_writes_log_name(name))

    async def checkpoint_info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        """The index entry of one stored record (nested ones too), or None."""
        self._require(Capability.INSPECT, "checkpoint_info")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("checkpoint_info")
        return await self._info(checkpoint_id)

    async def list_records(self, *, workflow_name: str | None = None) -> list[CheckpointInfo]:
        """Index entries of every stored record (or one workflow's), nested ones included, in
        workflow then sequence order. Decodes no bodies."""
        self._require(Capability.INSPECT, "list_records")
        if workflow_name is not None:
            validate_identifier(workflow_name, "workflow_name")
        await self._ready("list_records")
        records = [
            info for info in await self._records(workflow_name) if not is_writes_log_name(info.workflow_name)
        ]
        return sorted(records, key=lambda info: (info.workflow_name, info.sequence))

    async def list_tombstones(self, *, workflow_name: str | None = None) -> list[CheckpointID]:
        """Ids pruned from the storage (or from one workflow), sorted."""
        self._require(Capability.INSPECT, "list_tombstones")
        if workflow_name is not None:
            validate_identifier(workflow_name, "workflow_name")
        await self._ready("list_tombstones")
        return sorted(await self._tombstones(workflow_name))

    async def read_raw_body(self, checkpoint_id: CheckpointID) -> bytes | None:
        """The stored bytes of a checkpoint, or None; for verify tooling and the kit."""
        self._require(Capability.RAW_ACCESS, "read_raw_body")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("read_raw_body")
        return await self._get(checkpoint_id)

    async def write_raw_body(self, checkpoint_id: CheckpointID, body: bytes) -> None:
        """Overwrite the stored bytes of an existing checkpoint, bypassing the codec.

        For repair tools and for the kit's corruption clauses; never needed in normal use.
        """
        self._require(Capability.RAW_ACCESS, "write_raw_body")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("write_raw_body")
        raw = bytes(body)
        if not await self._overwrite_body(checkpoint_id, raw, body_digest(raw)):
            raise CheckpointNotFoundError(checkpoint_id)

    # ------------------------------------------------------------------ pending writes

    async def put_writes(
        self, checkpoint_id: CheckpointID, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None:
        """Store writes made against checkpoint ``checkpoint_id`` of ``workflow_name``, all or none.

        Per (task_id, index), the first write stored is kept, except at a negative index (a
        special channel), where the latest replaces it; repeating a call changes nothing.
        """
        self._require(Capability.PENDING_WRITES, "put_writes")
        validate_identifier(checkpoint_id, "checkpoint_id")
        validate_identifier(workflow_name, "workflow_name")
        batch = [_checked_write(write, position) for position, write in enumerate(writes)]
        await self._ready("put_writes")
        if not batch:
            return
        # One record per call is what makes the call atomic on every backend: each primitive
        # is. Its id is derived from its content, so a retried call is an idempotent re-insert.
        log = writes_log_name(workflow_name)
        draft = _writes_batch(log, checkpoint_id, "", batch)
        batch_id = _writes_batch_id(log, checkpoint_id, body_digest(self._codec.encode_checkpoint(draft)))
        body = self._codec.encode_checkpoint(_writes_batch(log, checkpoint_id, batch_id, batch))
        record = CheckpointRecord(
            checkpoint_id=batch_id,
            workflow_name=log,
            previous_checkpoint_id=None,
            graph_signature_hash=checkpoint_id,
            body=body,
            digest=body_digest(body),
        )
        # An existing id means this very batch is stored already (or an equal one encoded
        # differently): the reading rule makes either harmless, so there is nothing to compare.
        # A keyed handle signs it like any record (a root: no chain link, no round trip).
        (signed,), _ = await self._signed([record])
        await self._insert(signed)

    async def list_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> list[PendingWrite]:
        """The writes stored against a checkpoint, one per (task_id, index), in the order their
        (task_id, index) was first stored."""
        self._require(Capability.PENDING_WRITES, "list_writes")
        validate_identifier(checkpoint_id, "checkpoint_id")
        validate_identifier(workflow_name, "workflow_name")
        await self._ready("list_writes")
        log = writes_log_name(workflow_name)
        merged: dict[tuple[str, int], PendingWrite] = {}
        for stored in await self._list(log, checkpoint_id):
            if self._integrity is not None:
                stored = self._opened_body(stored)[0]
            batch = self._decode(stored, log, None, checkpoint_id)
            for write in _batch_writes(batch):
                key = (write.task_id, write.index)
                if key not in merged or write.replaces_earlier:
                    merged[key] = write
        return list(merged.values())

    async def delete_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> int:
        """Delete every write stored against a checkpoint; returns how many batches were deleted."""
        self._require(Capability.PENDING_WRITES, "delete_writes")
        validate_identifier(checkpoint_id, "checkpoint_id")
        validate_identifier(workflow_name, "workflow_name")
        await self._ready("delete_writes")
        removed = 0
        for batch_id in await self._list_ids(writes_log_name(workflow_name), checkpoint_id):
            removed += await self._remove(batch_id)
        return removed

    async def _drop_writes_of_pruned(self, workflow_name: str) -> None:
        # The log is read before the survivors: a checkpoint saved meanwhile is a survivor, and
        # a batch stored meanwhile is not in the snapshot, so neither loses its writes.
        log = writes_log_name(workflow_name)
        batches = await self._list(log, None)
        if not batches:
            return
        survivors = set(await self._list_ids(workflow_name, None))
        for stored in batches:
            opened = stored if self._integrity is None else self._opened_body(stored)[0]
            owner = self._decode(opened, log).graph_signature_hash
            if owner not in survivors:
                await self._remove(stored.checkpoint_id)

    # ------------------------------------------------------------------ lifecycle

    @abc.abstractmethod
    def new_handle(self) -> Self:
        """An independent handle on the same backend with the same settings (close it separately).

        Works on a closed handle too: it reuses settings, not connections.
        """

    def fenced(self) -> FencedStorage:
        """A per-run handle on this storage that fences every save continuing a checkpoint; pass
        it to a runner that cannot give ``expected_latest_id`` itself (MAF's ``checkpoint_storage``).
        See :class:`~storages.fencing.FencedStorage`."""
        return FencedStorage(self)

    async def aclose(self) -> None:
        """Release connections; idempotent. Later operations raise StorageClosedError."""
        if self._closed:
            return
        self._closed = True
        if self._opened:
            if self._loop is not asyncio.get_running_loop():
                await self._follow_loop()  # closing from a new loop closes what is bound to it
            await self._close()

    async def __aenter__(self) -> Self:
        await self._ready("open")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ backend primitives

    async def _open(self) -> None:  # noqa: B027 - optional hook
        """Connect and prepare the backend; called once, lazily, before the first operation."""

    async def _close(self) -> None:  # noqa: B027 - optional hook
        """Release what _open acquired."""

    async def _follow_loop(self) -> None:  # noqa: B027 - optional hook
        """The storage is used from an event loop other than the one it was opened on: replace
        what is bound to the old loop (connections, asyncio locks) without awaiting on it, since
        the old loop is usually closed. Backends holding nothing loop-bound need nothing here."""

    @abc.abstractmethod
    async def _insert(self, record: CheckpointRecord) -> str | None:
        """Insert ``record`` with the workflow's next sequence number unless its id exists.

        Returns None if inserted, else the digest stored under that id (nothing is written).
        Backends with nested records usually forward to ``_insert_family((record,))``.
        """

    async def _insert_family(self, records: Sequence[CheckpointRecord]) -> str | None:
        """Insert a checkpoint (``records[0]``) and its nested records, all or nothing.

        If the checkpoint's id exists, write nothing and return its stored digest. If a nested
        record's id exists, write nothing and raise CheckpointConflictError naming it. Otherwise
        insert every record, each with the next sequence number of its own workflow name, and
        return None. Needed by backends that declare ``nested``.
        """
        raise NotImplementedError

    async def _insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        """``_insert_family`` behind a fence, all in one atomic step: if the checkpoint's id
        exists, write nothing and return the latest and the stored digest; else if the workflow's
        latest top-level record is not ``expected_latest_id``, write nothing and return the
        latest; else insert as ``_insert_family`` does and return None. Needed by ``fencing``."""
        raise NotImplementedError

    @abc.abstractmethod
    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        """The body stored under ``checkpoint_id``, or None."""

    async def _load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        """The body stored under ``checkpoint_id`` for decoding, or None. A backend that can read
        the nested records' bodies in the same round trip returns them in ``StoredBody.nested``."""
        body = await self._get(checkpoint_id)
        return None if body is None else StoredBody(checkpoint_id, body)

    @abc.abstractmethod
    async def _latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        """The body with the highest sequence in the workflow (optionally of one signature)."""

    @abc.abstractmethod
    async def _list(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        """Bodies of the workflow in ascending sequence (top-level records unless include_nested)."""

    @abc.abstractmethod
    async def _list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        """Ids of the workflow in ascending sequence (top-level records unless include_nested)."""

    @abc.abstractmethod
    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one record and every record nested in it, atomically; True if it existed.

        A nested record is not deleted: raise NestedCheckpointDeletionError naming its container.
        """

    async def _nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        """Bodies of every record nested, at any depth, in the given records (more is harmless)."""
        raise NotImplementedError

    async def _overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        """Replace a stored body and its digest; False if the id is absent."""
        raise NotImplementedError

    async def _workflow_names(self) -> list[str]:
        raise NotImplementedError

    async def _walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        """The records an ancestry walk from ``checkpoint_id`` reaches, in one round trip.

        ``links`` is empty if ``checkpoint_id`` is not stored. See :class:`WalkRecords`.
        """
        raise NotImplementedError

    async def _nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        """Direct children of a record by position, or None if the record does not exist."""
        raise NotImplementedError

    async def _prune(self, workflow_name: str, keep_last: int) -> int:
        """Delete all but the newest ``keep_last`` top-level records of the workflow, with their
        nested records, and tombstone every deleted id, atomically; return the top-level count."""
        raise NotImplementedError

    async def _delete_workflow(self, workflow_name: str) -> int:
        """Delete the workflow's top-level records, their nested records and the workflow's
        tombstones; return the top-level count."""
        raise NotImplementedError

    async def _info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        raise NotImplementedError

    async def _records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        raise NotImplementedError

    async def _tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        raise NotImplementedError

    # ------------------------------------------------------------------ shared machinery

    async def _ready(self, operation: str) -> None:
        if self._closed:
            raise StorageClosedError(self.describe(), operation)
        loop = asyncio.get_running_loop()
        if self._opened and self._loop is loop:
            return
        if self._open_lock is None or self._loop is not loop:
            # An asyncio lock belongs to the loop it first waited on; each loop gets its own.
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if not self._opened:
                await self._open()
                self._opened = True
            elif self._loop is not loop:
                # A second asyncio.run(), say: the loop of the first is gone, and so is whatever
                # the backend had bound to it.
                await self._follow_loop()
            self._loop = loop

    def _require(self, capability: Capability, operation: str) -> None:
        if capability not in self.capabilities:
            raise UnsupportedOperationError(self.describe(), operation, capability.value)

    def _check_listing(
        self, operation: str, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> None:
        validate_identifier(workflow_name, "workflow_name")
        if graph_signature_hash is not None:
            self._require(Capability.SIGNATURE_FILTER, f"{operation}(graph_signature_hash=...)")
            if not isinstance(graph_signature_hash, str):
                raise InvalidCheckpointError(
                    f"graph_signature_hash must be a str, not {type(graph_signature_hash).__name__}",
                    field="graph_signature_hash",
                )
        if include_nested:
            self._require(Capability.NESTED, f"{operation}(include_nested=True)")

    def _records_for(self, checkpoint: Any) -> list[CheckpointRecord]:
        """The records a save writes: the checkpoint, then (with ``nested``) each embedded one."""
        if Capability.NESTED not in self.capabilities:
            return [self._record_for(checkpoint)]
        self._check_fields(checkpoint)
        nodes = self._codec.encode_checkpoint_tree(checkpoint)
        top_id = checkpoint.checkpoint_id
        records: list[CheckpointRecord] = []
        for position, node in enumerate(nodes):
            nested = node.checkpoint
            if position:
                self._check_fields(nested, embedded_in=node.container_id)
            records.append(
                CheckpointRecord(
                    checkpoint_id=nested.checkpoint_id,
                    workflow_name=nested.workflow_name,
                    previous_checkpoint_id=nested.previous_checkpoint_id,
                    graph_signature_hash=nested.graph_signature_hash,
                    body=node.body,
                    digest=self._plain_digest(node.body),
                    container_id=node.container_id,
                    root_id=top_id if position else None,
                    position=position,
                )
            )
        return records

    def _record_for(self, checkpoint: Any) -> CheckpointRecord:
        """The one record of a checkpoint, embedded checkpoints inline."""
        self._check_fields(checkpoint)
        body = self._codec.encode_checkpoint(checkpoint)
        return CheckpointRecord(
            checkpoint_id=checkpoint.checkpoint_id,
            workflow_name=checkpoint.workflow_name,
            previous_checkpoint_id=checkpoint.previous_checkpoint_id,
            graph_signature_hash=checkpoint.graph_signature_hash,
            body=body,
            digest=self._plain_digest(body),
        )

    def _check_fields(self, checkpoint: Any, *, embedded_in: CheckpointID | None = None) -> None:
        where = "" if embedded_in is None else f" (embedded in checkpoint {embedded_in!r})"
        missing = next((name for name in CHECKPOINT_FIELDS if not hasattr(checkpoint, name)), None)
        if missing is not None:
            raise InvalidCheckpointError(
                f"{type(checkpoint).__name__}{where} is not a checkpoint: missing field {missing!r}",
                field=missing,
            )
        workflow_name = checkpoint.workflow_name
        checkpoint_id = checkpoint.checkpoint_id
        previous_id = checkpoint.previous_checkpoint_id
        signature = checkpoint.graph_signature_hash
        validate_identifier(workflow_name, "workflow_name")
        validate_identifier(checkpoint_id, "checkpoint_id")
        if previous_id is not None:
            validate_identifier(previous_id, "previous_checkpoint_id")
        _expect_field(checkpoint_id, "graph_signature_hash", signature, str)
        _expect_field(checkpoint_id, "timestamp", checkpoint.timestamp, str)
        _expect_field(checkpoint_id, "version", checkpoint.version, str)
        iteration_count = checkpoint.iteration_count
        if isinstance(iteration_count, bool) or not isinstance(iteration_count, int):
            _expect_field(checkpoint_id, "iteration_count", iteration_count, int, got_bool=True)
        for name in _DICT_FIELDS:
            _expect_field(checkpoint_id, name, getattr(checkpoint, name), dict)

    async def _decode_all(
        self,
        stored: Sequence[StoredBody],
        workflow_name: str | None = None,
        graph_signature_hash: str | None = None,
    ) -> list[Any]:
        """Decode bodies, first fetching (in one call) the nested records any of them refer to
        and the backend did not already read with it; each is checked against what it was
        found by (the workflow, the signature asked for, its index entry)."""
        if self._integrity is not None:
            stored = [self._opened_body(item)[0] for item in stored]
        has_refs = self._codec.has_nested_refs
        containers = [item for item in stored if has_refs(item.body)]
        if not containers:
            return [self._decode(item, workflow_name, None, graph_signature_hash) for item in stored]
        unread = [item.checkpoint_id for item in containers if item.nested is None]
        fetched = await self._nested_bodies(unread) if unread else {}
        if fetched and self._integrity is not None:
            fetched = self._opened_bodies(fetched)
        return [
            self._decode(
                item, workflow_name, fetched if item.nested is None else item.nested, graph_signature_hash
            )
            if has_refs(item.body)
            else self._decode(item, workflow_name, None, graph_signature_hash)
            for item in stored
        ]

    def _decode(
        self,
        stored: StoredBody,
        workflow_name: str | None = None,
        nested: Mapping[CheckpointID, bytes] | None = None,
        graph_signature_hash: str | None = None,
    ) -> Any:
        checkpoint = self._codec.decode_checkpoint(
            stored.body, checkpoint_id=stored.checkpoint_id, nested=nested
        )
        try:
            _check_against_index(stored, checkpoint, workflow_name, graph_signature_hash)
        except CheckpointCorruptedError as exc:
            if self._integrity is None:
                raise
            # The body is authentic (its MAC held) but is listed under fields it does not have.
            raise CheckpointTamperedError(exc.checkpoint_id, TamperKind.INDEX_MISMATCH, exc.reason) from None
        return checkpoint

    async def _same_nested_bodies(self, records: Sequence[CheckpointRecord]) -> bool:
        """True unless the incoming nested records differ from the stored ones byte for byte."""
        # A container's body holds only its children's ids, so an equal container digest says
        # nothing about the children: a changed child under the same id must still conflict.
        if len(records) == 1:
            return True
        stored = await self._nested_bodies([records[0].checkpoint_id])
        return all(stored.get(record.checkpoint_id) == record.body for record in records[1:])

    async def _check_same_content(self, records: Sequence[CheckpointRecord]) -> None:
        # Digests differ; equal content may still encode differently (set order varies between
        # processes), so compare decoded values before calling it a conflict.
        top = records[0]
        stored = await self._load(top.checkpoint_id)
        if stored is None:
            # Deleted between the insert attempt and now; the caller may simply retry.
            raise CheckpointConflictError(top.checkpoint_id)
        (existing,) = await self._decode_all([stored])
        incoming_nested = {record.checkpoint_id: _unsealed_own(record.body) for record in records[1:]}
        incoming = self._codec.decode_checkpoint(
            _unsealed_own(top.body), checkpoint_id=top.checkpoint_id, nested=incoming_nested or None
        )
        if type(existing) is not type(incoming) or existing != incoming:
            raise CheckpointConflictError(top.checkpoint_id)

    # ------------------------------------------------------------------ integrity (docs/integrity.md)
    # Everything tamper evidence adds lives in this block; a storage without a key never enters it.

    @property
    def integrity_enabled(self) -> bool:
        """True when this handle signs what it saves and verifies what it reads."""
        return self._integrity is not None

    def with_integrity_key(self, integrity_key: IntegrityKeyInput | None) -> Self:
        """A new handle on the same store that signs and verifies with ``integrity_key`` (None: a
        handle without a key, which reads and writes plain bodies as a storage without one does)."""
        handle = self.new_handle()
        handle.configure_integrity(integrity_key)
        return handle

    def configure_integrity(self, integrity_key: IntegrityKeyInput | None) -> None:
        """Set this handle's keys before its first use (open_storage does, from URL options)."""
        if self._opened:
            raise StorageConfigurationError(f"{self.describe()}: set the integrity key before first use")
        self._integrity = None if integrity_key is None else as_provider(integrity_key)
        self._chain_macs.clear()

    async def head_anchor(self, *, workflow_name: str) -> str:
        """A signed token naming the newest checkpoint of ``workflow_name`` (or that it has none).

        Keep it outside the store and pass it to get_latest/load/verify: they then refuse a store
        that went back before it (a truncated history, a restored old snapshot).
        """
        validate_identifier(workflow_name, "workflow_name")
        provider = self._required_integrity("head_anchor")
        await self._ready("head_anchor")
        stored = await self._latest(workflow_name, None)
        key_id, key = provider.signing_key()
        if stored is None:
            return anchor_token(key_id, key, workflow_name, None, 0, b"")
        await self._decode_all([stored], workflow_name)  # the anchored record must verify
        seal = self._opened_body(stored)[1]
        if seal is None:
            raise CheckpointTamperedError(
                stored.checkpoint_id, TamperKind.UNSIGNED, "an unsigned record cannot be anchored"
            )
        return anchor_token(key_id, key, workflow_name, stored.checkpoint_id, seal.height, seal.mac)

    def open_sealed(self, checkpoint_id: CheckpointID, raw: bytes) -> tuple[Seal | None, bytes]:
        """Verify stored bytes as a read does and return their seal and codec body (for verify).

        Raises CheckpointTamperedError; an unsigned body returns no seal in migration mode only.
        """
        stored, seal = self._opened_body(StoredBody(checkpoint_id, raw))
        return seal, stored.body

    def _plain_digest(self, body: bytes) -> str:
        """A new record's digest: a keyed save replaces it with one taken from the MAC
        (sealed_digest), so hashing the body here would be work thrown away."""
        return body_digest(body) if self._integrity is None else ""

    def _required_integrity(self, operation: str) -> IntegrityKeyProvider:
        if self._integrity is None:
            raise StorageConfigurationError(
                f"{self.describe()}: {operation} needs an integrity key (integrity_key= or the URL "
                "option integrity_key_env=NAME)"
            )
        return self._integrity

    def _integrity_mac(self, key: bytes, checkpoint_id: CheckpointID, header: bytes, body: bytes) -> bytes:
        """The MAC a record is signed and checked with; see storages.integrity.record_mac."""
        return record_mac(key, checkpoint_id, header, body)

    def _verifying_key(self, key_id: str) -> bytes | None:
        assert self._integrity is not None
        return self._integrity.verifying_key(key_id)

    async def _chain_link(
        self, record: CheckpointRecord, family: Mapping[CheckpointID, tuple[bytes, int]]
    ) -> tuple[Link, bytes, int]:
        """How a record chains onto its predecessor: the link kind, the predecessor's MAC and
        this record's height. Costs a round trip only when the predecessor is not remembered."""
        previous_id = record.previous_checkpoint_id
        if previous_id is None:
            return Link.ROOT, b"", 0
        known = family.get(previous_id) or self._chain_macs.get(previous_id)
        if known is None:
            raw = await self._get(previous_id)
            seal = None if raw is None else self._opened_body(StoredBody(previous_id, raw))[1]
            if seal is None:
                return Link.ABSENT, b"", 0
            known = (seal.mac, seal.height)
        return Link.PRESENT, known[0], known[1] + 1

    async def _signed(
        self, records: list[CheckpointRecord]
    ) -> tuple[list[CheckpointRecord], Mapping[CheckpointID, tuple[bytes, int]]]:
        """The records a save writes, sealed when this handle has a key (else unchanged), and
        each sealed record's (MAC, height), to remember once the save is stored."""
        if self._integrity is None:
            return records, {}
        key_id, key = self._integrity.signing_key()
        family: dict[CheckpointID, tuple[bytes, int]] = {}
        signed: list[CheckpointRecord] = []
        for record in records:
            link_kind, link, height = await self._chain_link(record, family)
            header = seal_header(
                key_id,
                link_kind,
                link,
                height,
                record.container_id,
                record.position,
                record.previous_checkpoint_id,
            )
            mac = self._integrity_mac(key, record.checkpoint_id, header, record.body)
            signed.append(
                CheckpointRecord(
                    checkpoint_id=record.checkpoint_id,
                    workflow_name=record.workflow_name,
                    previous_checkpoint_id=record.previous_checkpoint_id,
                    graph_signature_hash=record.graph_signature_hash,
                    body=b"".join((header, mac, record.body)),
                    digest=sealed_digest(mac),
                    container_id=record.container_id,
                    root_id=record.root_id,
                    position=record.position,
                )
            )
            family[record.checkpoint_id] = (mac, height)
        return signed, family

    def _remember_chain(self, chain: Mapping[CheckpointID, tuple[bytes, int]]) -> None:
        for checkpoint_id, (mac, height) in chain.items():
            self._remember(checkpoint_id, mac, height)

    def _remember(self, checkpoint_id: CheckpointID, mac: bytes, height: int) -> None:
        macs = self._chain_macs
        macs[checkpoint_id] = (mac, height)
        if len(macs) > _LINK_CACHE_SIZE:
            del macs[next(iter(macs))]  # the oldest entry: a plain dict keeps insertion order

    def _opened_body(self, stored: StoredBody) -> tuple[StoredBody, Seal | None]:
        """``stored`` with its seal verified and removed (and its nested bodies'), and the seal."""
        provider = self._integrity
        assert provider is not None
        checkpoint_id = stored.checkpoint_id
        nested = stored.nested
        if nested:
            nested = self._opened_bodies(nested)
        raw = stored.body
        if not is_sealed(raw):
            if accepts_unsigned(provider):
                return dataclasses.replace(stored, nested=nested), None
            raise CheckpointTamperedError(
                checkpoint_id,
                TamperKind.UNSIGNED,
                "it has no seal, and this storage reads only signed records (accept_unsigned=True "
                "on IntegrityKeys is the migration mode for bodies written before the key)",
            )
        seal, body = open_sealed(checkpoint_id, raw, self._verifying_key, self._integrity_mac)
        self._remember(checkpoint_id, seal.mac, seal.height)
        return StoredBody(checkpoint_id, body, nested, stored.entry), seal

    def _opened_bodies(self, bodies: Mapping[CheckpointID, bytes]) -> dict[CheckpointID, bytes]:
        return {
            checkpoint_id: self._opened_body(StoredBody(checkpoint_id, body))[0].body
            for checkpoint_id, body in bodies.items()
        }

    def _opened_walk(self, records: WalkRecords) -> tuple[WalkRecords, dict[CheckpointID, Seal | None]]:
        seals: dict[CheckpointID, Seal | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        for checkpoint_id, raw in records.bodies.items():
            opened, seals[checkpoint_id] = self._opened_body(StoredBody(checkpoint_id, raw))
            bodies[checkpoint_id] = opened.body
        return dataclasses.replace(records, bodies=bodies), seals

    def _parsed_anchor(self, anchor: str, workflow_name: str | None) -> Anchor:
        parsed = read_anchor(anchor, self._required_integrity("reading with an anchor"))
        if workflow_name is not None and parsed.workflow_name != workflow_name:
            raise InvalidCheckpointError(
                f"the anchor is for workflow {parsed.workflow_name!r}, not {workflow_name!r}", field="anchor"
            )
        return parsed

    async def _check_anchor_latest(self, anchor: Anchor, head: StoredBody | None) -> None:
        """The workflow's newest record must be the anchored one or continue from it."""
        if anchor.head_id is None:
            return
        if head is None:
            raise _went_back(anchor, f"workflow {anchor.workflow_name!r} has no checkpoint now")
        seal = self._opened_body(head)[1]
        current_id = head.checkpoint_id
        while True:
            if current_id == anchor.head_id:
                if seal is None or not hmac.compare_digest(seal.mac, anchor.mac):
                    raise _went_back(anchor, "the record stored under its id is not the one anchored")
                return
            if seal is None or seal.height <= anchor.height or seal.link_kind is not Link.PRESENT:
                raise _went_back(
                    anchor,
                    f"the newest checkpoint is {head.checkpoint_id!r}, which does not continue from it",
                )
            previous_id = seal.previous_id
            assert previous_id is not None  # a PRESENT link always names its predecessor
            raw = await self._get(previous_id)
            if raw is None:
                raise _went_back(
                    anchor,
                    f"the newest checkpoint {head.checkpoint_id!r} cannot be followed back to it "
                    f"({previous_id!r} is gone)",
                )
            link = seal.link
            seal = self._opened_body(StoredBody(previous_id, raw))[1]
            if seal is None or not hmac.compare_digest(seal.mac, link):
                raise CheckpointTamperedError(
                    previous_id,
                    TamperKind.CHAIN_BROKEN,
                    "it is not the record its successor was signed after",
                )
            current_id = previous_id

    async def _check_anchor_head_stored(self, anchor: Anchor, loaded: StoredBody) -> None:
        """The anchored record must still be stored as anchored."""
        if anchor.head_id is None:
            return
        if loaded.checkpoint_id == anchor.head_id:
            head: StoredBody | None = loaded
        else:
            raw = await self._get(anchor.head_id)
            head = None if raw is None else StoredBody(anchor.head_id, raw)
        if head is None:
            raise _went_back(anchor, "it is no longer stored")
        seal = self._opened_body(head)[1]
        if seal is None or not hmac.compare_digest(seal.mac, anchor.mac):
            raise _went_back(anchor, "the record stored under its id is not the one anchored")


def _carrying_integrity(new_handle: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(new_handle)
    def carrying(self: BaseCheckpointStorage, *args: Any, **kwargs: Any) -> Any:
        handle = new_handle(self, *args, **kwargs)
        if isinstance(handle, BaseCheckpointStorage) and handle._integrity is None:
            handle._integrity = self._integrity
        return handle

    carrying._carries_integrity = True  # type: ignore[attr-defined]
    return carrying


def _unsealed_own(body: bytes) -> bytes:
    """The codec body inside bytes this handle just sealed (or ``body`` if it is not sealed)."""
    return split_sealed("", body)[1].body if is_sealed(body) else body


def _went_back(anchor: Anchor, why: str) -> CheckpointTamperedError:
    assert anchor.head_id is not None
    return CheckpointTamperedError(
        anchor.head_id,
        TamperKind.ROLLED_BACK,
        f"the store went back before the anchor of workflow {anchor.workflow_name!r}, which names "
        f"this checkpoint (chain height {anchor.height}) as its newest: {why}",
    )


def _check_walk_chain(
    walk: AncestryWalk[CheckpointID],
    links: Mapping[CheckpointID, CheckpointID | None],
    seals: Mapping[CheckpointID, Seal | None],
) -> None:
    """Each step of a walk must go to the record the step's start was signed after.

    A predecessor that is gone ends the walk ``missing``, as on a storage without a key: the
    contract lets the application delete a checkpoint, so verify, not the walk, reports that a
    record was signed after one that is gone (``chain_broken``). A predecessor that is there but
    is not the record signed after raises."""
    items = walk.items
    for index, item_id in enumerate(items):
        seal = seals.get(item_id)
        if seal is None or seal.link_kind is not Link.PRESENT:
            continue
        if index + 1 < len(items):
            previous = seals.get(items[index + 1])
            if previous is None or not hmac.compare_digest(previous.mac, seal.link):
                raise CheckpointTamperedError(
                    item_id,
                    TamperKind.CHAIN_BROKEN,
                    f"its predecessor {links[item_id]!r} is not the record it was signed after",
                )


def _check_against_index(
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


_WRITES_LOG_PREFIX = "\x1fwrites\x1f"
"""Starts the name of a workflow's pending-writes log. A control character can never start a
workflow name a caller chooses (validate_identifier refuses it), so no log shadows a workflow."""

_WRITES_BATCH_TIMESTAMP = "1970-01-01T00:00:00+00:00"
"""Every write batch carries this timestamp, so equal batches encode to equal bodies."""


def writes_log_name(workflow_name: str) -> str:
    """The internal workflow holding ``workflow_name``'s pending writes, one record per batch,
    indexed by the owning checkpoint's id in the graph-signature column."""
    return _WRITES_LOG_PREFIX + workflow_name


def is_writes_log_name(name: str) -> bool:
    return name.startswith(_WRITES_LOG_PREFIX)


def _writes_batch_id(log: str, owner_id: CheckpointID, content_digest: str) -> CheckpointID:
    key = "\x00".join((log, owner_id, content_digest)).encode("utf-8", "surrogatepass")
    return f"\x1fw\x1f{hashlib.blake2b(key, digest_size=16).hexdigest()}"


def _writes_batch(
    log: str, owner_id: CheckpointID, batch_id: CheckpointID, writes: Sequence[PendingWrite]
) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=log,
        graph_signature_hash=owner_id,
        checkpoint_id=batch_id or owner_id,
        timestamp=_WRITES_BATCH_TIMESTAMP,
        state={
            "writes": [
                [write.task_id, write.index, write.channel, write.value, write.task_path] for write in writes
            ]
        },
    )


def _batch_writes(batch: Any) -> list[PendingWrite]:
    rows = batch.state.get("writes") if isinstance(batch.state, dict) else None
    if not isinstance(rows, list):
        raise CheckpointCorruptedError(batch.checkpoint_id, "a pending-writes batch without its writes")
    writes: list[PendingWrite] = []
    for row in rows:
        if not (isinstance(row, (list, tuple)) and len(row) == 5):
            raise CheckpointCorruptedError(batch.checkpoint_id, f"a malformed pending write {row!r:.80}")
        task_id, index, channel, value, task_path = row
        if not (
            isinstance(task_id, str)
            and isinstance(index, int)
            and isinstance(channel, str)
            and isinstance(task_path, str)
        ):
            raise CheckpointCorruptedError(batch.checkpoint_id, f"a malformed pending write {row!r:.80}")
        writes.append(PendingWrite(task_id, index, channel, value, task_path))
    return writes


def _checked_write(write: object, position: int) -> PendingWrite:
    if not isinstance(write, PendingWrite):
        raise InvalidCheckpointError(
            f"writes[{position}] must be a PendingWrite, not {type(write).__name__}", field="writes"
        )
    validate_identifier(write.task_id, "task_id")
    if isinstance(write.index, bool) or not isinstance(write.index, int):
        raise InvalidCheckpointError(
            f"writes[{position}].index must be an int, not {type(write.index).__name__}", field="index"
        )
    if not isinstance(write.channel, str) or not write.channel:
        raise InvalidCheckpointError(f"writes[{position}].channel must be a non-empty str", field="channel")
    if not isinstance(write.task_path, str):
        raise InvalidCheckpointError(f"writes[{position}].task_path must be a str", field="task_path")
    return write


def _as_list(refs: Iterable[Any]) -> list[Any]:
    # One "a:B,c:D" string (as a URL option arrives) is a list of its comma-separated items.
    if isinstance(refs, str):
        return [item.strip() for item in refs.split(",") if item.strip()]
    return list(refs)


def _check_max_depth(max_depth: object) -> None:
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise InvalidCheckpointError(f"max_depth must be an int >= 1, got {max_depth!r}", field="max_depth")


def _assemble_walk(start: CheckpointID, records: WalkRecords, max_depth: int) -> AncestryWalk[CheckpointID]:
    """Follow previous ids through what the backend read, deciding why the walk ends."""
    links = records.links
    if start not in links:
        raise CheckpointNotFoundError(start)
    items: list[CheckpointID] = []
    visited: set[CheckpointID] = set()
    current = start
    while True:
        items.append(current)
        visited.add(current)
        previous = links[current]
        if previous is None:
            return AncestryWalk(tuple(items), AncestryEnd.ROOT, current)
        if len(items) >= max_depth:
            return AncestryWalk(tuple(items), AncestryEnd.DEPTH_LIMIT, current)
        if previous in visited:
            return AncestryWalk(tuple(items), AncestryEnd.CYCLE, previous)
        if previous not in links:
            end = AncestryEnd.PRUNED if previous in records.tombstones else AncestryEnd.MISSING
            return AncestryWalk(tuple(items), end, previous)
        current = previous


def _expect_field(
    checkpoint_id: str, name: str, value: object, expected: type[Any], *, got_bool: bool = False
) -> None:
    if got_bool or not isinstance(value, expected):
        raise InvalidCheckpointError(
            f"Checkpoint {checkpoint_id!r}: field {name} must be {expected.__name__}, "
            f"not {type(value).__name__}",
            field=name,
        )


__all__ = [
    "DEFAULT_MAX_DEPTH",
    "BaseCheckpointStorage",
    "CheckpointRecord",
    "FenceCheck",
    "IndexEntry",
    "StoredBody",
    "WalkRecords",
    "body_digest",
    "is_writes_log_name",
    "writes_log_name",
]
