"""The contract, implemented once: :class:`CheckpointStore` is a storage over the backend it holds.

It validates, encodes through the codec, gates operations by capability, reports corruption and
keeps the lifecycle; the backend (storages/backend.py) stores and reads. Its parts: the codec, a
sealer only when it has a key (sealing.py), the reader (reading.py), and the collaborators for
pending writes, prune receipts and the operations beyond MAF's six (extensions.py).
docs/backends.md is the guide to writing a backend.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterable, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Final, Generic, Self

from typing_extensions import TypeVar

from ..backend import RIVALS_LIMIT, Backend, CheckedIds, check_backend, resume_point
from ..codec import CheckpointCodec, TypeRef
from ..codec.overrides import body_codec
from ..contract import (
    UNFENCED,
    AncestryWalk,
    Capability,
    CheckpointID,
    CheckpointInfo,
    PendingWrite,
    Unfenced,
    validate_identifier,
)
from ..errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    GraphSignatureMismatchError,
    StorageConfigurationError,
    StorageUnavailableError,
)
from ..fencing import FencedStorage
from ..integrity import IntegrityKeyInput, IntegrityKeyProvider, Seal, as_provider
from ..records import CheckpointRecord, InsertResult, Leftover, StoredBody, as_asked, listed_ids
from ..save_order import SaveOrder, handed
from .encoding import plain_records, record_drafts
from .extensions import Extensions
from .lifecycle import Lifecycle
from .parts import HandleParts
from .reading import Reader, ReadRaced
from .receipts import PruneReceipts
from .resaves import Resaves
from .sealing import Chain, Sealer
from .validation import as_list
from .walk import DEFAULT_MAX_DEPTH
from .writes import PendingWritesLog

READ_RACE_RETRIES = 8
"""Times get_latest and list_checkpoints read again when a container they read was deleted before
its nested records were read (the backend read them in a second round trip)."""

_NO_CHAIN: Final[Chain] = MappingProxyType({})

BackendT = TypeVar("BackendT", bound=Backend, default=Backend, covariant=True)


class CheckpointStore(Generic[BackendT]):
    """A checkpoint storage: the contract (storages/contract.py) over a :class:`Backend`.

    ``allowed_checkpoint_types`` ("module:qualname" strings or classes, as MAF's
    FileCheckpointStorage takes them) and ``allowed_modules`` extend the codec's allow-list (a
    given ``codec`` is extended in place); see storages/allowlist.py. ``integrity_key`` (bytes or
    a key provider) makes the storage sign every record and verify every read; see
    docs/integrity.md. A backend's own storage class (SQLiteCheckpointStorage, ...) only builds
    its backend and passes it here.
    """

    sealer_type: ClassVar[type[Sealer]] = Sealer
    """What a keyed handle seals and verifies with. A test hook: the kit's tamper mutants weaken
    one step of it each (docs/backends.md, "Test hooks"); a storage keeps the default."""

    receipts_type: ClassVar[type[PruneReceipts]] = PruneReceipts
    """What a keyed handle writes prune receipts with, and checks a tombstone against: a walk
    and :meth:`check_prune_receipt` ask the same one. A test hook like :attr:`sealer_type`."""

    def __init__(
        self,
        backend: BackendT,
        *,
        codec: CheckpointCodec | None = None,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
    ) -> None:
        check_backend(backend)
        if codec is None:
            codec = CheckpointCodec()
        try:
            codec.allow(types=as_list(allowed_checkpoint_types), modules=as_list(allowed_modules))
        except (ValueError, TypeError) as exc:
            raise StorageConfigurationError(f"{type(self).__name__}: {exc}") from None
        self._backend = backend
        self._codec = codec
        self._bodies = body_codec(codec)
        """The codec as this handle calls it for bodies: how to call its overrides is decided here,
        once (storages/codec/overrides.py)."""
        self._lifecycle = Lifecycle(backend)
        self._save_order = SaveOrder()
        self._assemble(None if integrity_key is None else as_provider(integrity_key))

    def _assemble(self, provider: IntegrityKeyProvider | None) -> None:
        """Build the parts every operation shares (again when the key changes before first use)."""
        backend = self._backend
        sealer = None if provider is None else self.sealer_type(provider, backend)
        self._sealer = sealer
        # Saves go straight to a backend that commits them in call order; a seal may await a
        # read of the store first, so keyed saves take their turn like any other.
        self._inserts_ordered = backend.orders_inserts and sealer is None
        self._capabilities = frozenset(backend.capabilities)
        self._nested = Capability.NESTED in self._capabilities
        self._reader = Reader(backend, self._codec, self._bodies, sealer)
        self._sealed_frames = sealer is not None
        """A keyed handle frames its bodies for their seals and reads them as sealed."""
        parts = HandleParts(
            backend, self._codec, self._bodies, self._lifecycle, self._reader, sealer, self._capabilities
        )
        self._parts = parts
        self._receipts = self.receipts_type(parts)
        self._writes = PendingWritesLog(parts)
        self._resaves = Resaves(backend, self._codec, self._bodies, self._reader, self._sealed_frames)
        self._extensions = Extensions(parts, self._receipts, self._writes)

    @property
    def backend(self) -> BackendT:
        """The backend this storage holds (its own settings: prefix, path, ...)."""
        return self._backend

    @property
    def capabilities(self) -> frozenset[Capability]:
        """What this storage supports: its backend's declaration, which every operation
        enforces (a storage built on another backend declares through that backend)."""
        return self._capabilities

    @property
    def ttl(self) -> float | None:
        """Seconds a checkpoint lives after its save (capability ``ttl``), or None."""
        return self._backend.ttl

    @property
    def codec(self) -> CheckpointCodec:
        return self._codec

    def describe(self) -> str:
        """A short human name for messages and reports, e.g. ``sqlite:///path.db``."""
        return self._backend.describe()

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
            self._parts.require(Capability.FENCING, "save(expected_latest_id=...)")
            if expected_latest_id is not None:
                validate_identifier(expected_latest_id, "expected_latest_id")
        # The snapshot and the place in the workflow's commit order are both taken at the call,
        # before the first await (save_order.py says why the order matters). A backend that keeps
        # the order itself needs no turn.
        drafts = record_drafts(self._bodies, checkpoint, nested=self._nested, sealed=self._sealed_frames)
        if self._inserts_ordered:
            key, turn, holding = None, None, False
        else:
            key, turn = self._save_order.take(drafts[0][1])
            holding = turn is None
        try:
            await self._lifecycle.ensure("save")
            if turn is not None:
                try:
                    await turn
                finally:
                    holding = handed(turn)
            sealer = self._sealer
            if sealer is None:
                records, chain = plain_records(drafts), _NO_CHAIN
            else:
                records, chain = await sealer.seal(drafts)
            if expected_latest_id is not UNFENCED:
                return await self._resaves.insert_fenced(records, expected_latest_id, chain, sealer)
            result = await self._backend.insert(records)
            if result is InsertResult.INSERTED:
                if chain:
                    sealer.remember(chain)  # type: ignore[union-attr]  # a chain comes from the sealer
            elif result is InsertResult.DIFFERENT_BODY or len(records) > 1:
                await self._resaves.check(records, result)
            return records[0].checkpoint_id
        finally:
            if holding:
                self._save_order.hand_on(key)  # type: ignore[arg-type]  # holding: a key was taken

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
        parsed = (
            None
            if anchor is None
            else self._required_sealer("reading with an anchor").parsed_anchor(anchor, None)
        )
        await self._lifecycle.ensure("load")
        stored = as_asked(await self._backend.load(checkpoint_id), checkpoint_id)
        if stored is None:
            raise CheckpointNotFoundError(checkpoint_id)
        try:
            (checkpoint,) = await self._reader.decode_all([stored])
        except ReadRaced:
            raise CheckpointNotFoundError(checkpoint_id) from None  # deleted while being read
        if parsed is not None:
            await self._required_sealer("load").check_anchor_head_stored(parsed, stored)
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
        self._parts.check_listing("list_checkpoints", workflow_name, graph_signature_hash, include_nested)
        await self._lifecycle.ensure("list_checkpoints")
        for _ in range(READ_RACE_RETRIES):
            stored = await self._backend.list_bodies(
                workflow_name, graph_signature_hash, include_nested=include_nested
            )
            try:
                return await self._reader.decode_all(stored, workflow_name, graph_signature_hash)
            except ReadRaced:
                continue  # a container was deleted while being read: read the listing again
        raise StorageUnavailableError("list_checkpoints", f"workflow {workflow_name!r} kept changing")

    async def list_checkpoint_ids(
        self,
        *,
        workflow_name: str,
        graph_signature_hash: str | None = None,
        include_nested: bool = False,
    ) -> list[CheckpointID]:
        """Ids of every checkpoint of ``workflow_name``, oldest first; decodes no bodies."""
        self._parts.check_listing("list_checkpoint_ids", workflow_name, graph_signature_hash, include_nested)
        await self._lifecycle.ensure("list_checkpoint_ids")
        ids = await self._backend.list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        if type(ids) is CheckedIds:
            return list(ids)
        return listed_ids(ids, f"the index of workflow {workflow_name!r}")

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one checkpoint and the checkpoints nested in it; True if it existed.

        A nested record raises NestedCheckpointDeletionError: it goes with its container.
        """
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._parts.ready("delete")
        if self._sealer is not None:
            self._sealer.forget()  # a deleted id may be saved again with other content
        return await self._backend.remove(checkpoint_id)

    async def get_latest(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, anchor: str | None = None
    ) -> Any | None:
        """The checkpoint a run of ``workflow_name`` resumes from, or None: the head (the
        newest commit, through its lineage) or, of the head and its rivals (checkpoints that
        continue the same one and that none continues: parallel steps), the newest timestamp.

        With an ``anchor`` (from head_anchor), raises CheckpointTamperedError if the store went back
        before it: the anchored checkpoint is no longer the newest nor an ancestor of the newest.
        """
        self._parts.check_listing("get_latest", workflow_name, graph_signature_hash, False)
        sealer = None if anchor is None else self._required_sealer("reading with an anchor")
        parsed = None if sealer is None or anchor is None else sealer.parsed_anchor(anchor, workflow_name)
        await self._lifecycle.ensure("get_latest")
        backend = self._backend
        for _ in range(READ_RACE_RETRIES):
            stored = await backend.latest(workflow_name, graph_signature_hash)
            if sealer is not None and parsed is not None:
                head = stored if graph_signature_hash is None else await backend.latest(workflow_name, None)
                await sealer.check_anchor_latest(parsed, head)
            if stored is None:
                return None
            try:
                candidates = await self._reader.decode_all(
                    [*stored.rivals, stored], workflow_name, graph_signature_hash
                )
            except ReadRaced:
                continue  # the latest was deleted while being read: the one before it is latest now
            return candidates[0] if len(candidates) == 1 else resume_point(_checked_rivals(candidates))
        raise StorageUnavailableError("get_latest", f"workflow {workflow_name!r} kept changing")

    async def latest_id(
        self, *, workflow_name: str, graph_signature_hash: str | None = None
    ) -> CheckpointID | None:
        """The id of the workflow's head (or None), from the index: what a fenced save must
        expect, and what get_latest returns unless a rival has a newer timestamp. No body is
        decoded, so a damaged head is still named."""
        self._parts.check_listing("latest_id", workflow_name, graph_signature_hash, False)
        await self._lifecycle.ensure("latest_id")
        stored = await self._backend.latest(workflow_name, graph_signature_hash)
        return None if stored is None else stored.checkpoint_id

    def records_for(self, checkpoint: Any) -> list[CheckpointRecord]:
        """The records an unkeyed save of ``checkpoint`` hands the backend (the checkpoint, then
        with ``nested`` each one embedded in it). A test and bench hook: tests drive a backend's
        insert with exactly what a save sends."""
        return plain_records(record_drafts(self._bodies, checkpoint, nested=self._nested, sealed=False))

    # ------------------------------------------------------------------ lifecycle

    def new_handle(self) -> Self:
        """An independent handle on the same store with the same settings, codec and keys (close
        it separately). Works on a closed handle too: it reuses settings, not connections."""
        return self.over(self._backend.new_handle())

    def over(self, backend: BackendT) -> Self:  # type: ignore[misc]  # BackendT is read-only here
        """A handle of this storage's class over ``backend`` (another backend on the same store,
        say a read-only one), with this handle's codec and keys. The handle is a shallow copy of
        this one (``copy.copy``: a subclass's own attributes come along, and its ``__copy__``
        decides otherwise), with the engine's parts built anew, so the two share no connection,
        lock or open state."""
        handle = copy.copy(self)
        CheckpointStore.__init__(handle, backend, codec=self._codec, integrity_key=self.integrity_keys)
        return handle

    def fenced(self) -> FencedStorage:
        """A per-run handle on this storage that fences every save continuing a checkpoint; pass
        it to a runner that cannot give ``expected_latest_id`` itself (MAF's ``checkpoint_storage``).
        See :class:`~storages.fencing.FencedStorage`."""
        return FencedStorage(self)

    async def aclose(self) -> None:
        """Release connections; idempotent. Later operations raise StorageClosedError."""
        await self._lifecycle.close()

    async def __aenter__(self) -> Self:
        await self._lifecycle.ensure("open")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ integrity

    @property
    def integrity_enabled(self) -> bool:
        """True when this handle signs what it saves and verifies what it reads."""
        return self._sealer is not None

    @property
    def integrity_keys(self) -> IntegrityKeyProvider | None:
        """The keys this handle signs and verifies with (None without a key)."""
        return None if self._sealer is None else self._sealer.provider

    def with_integrity_key(self, integrity_key: IntegrityKeyInput | None) -> Self:
        """A new handle on the same store that signs and verifies with ``integrity_key`` (None: a
        handle without a key, which reads and writes plain bodies as a storage without one does)."""
        handle = self.new_handle()
        handle.configure_integrity(integrity_key)
        return handle

    def configure_integrity(self, integrity_key: IntegrityKeyInput | None) -> None:
        """Set this handle's keys before its first use (open_storage does, from URL options)."""
        if self._lifecycle.connected:
            raise StorageConfigurationError(f"{self.describe()}: set the integrity key before first use")
        self._assemble(None if integrity_key is None else as_provider(integrity_key))

    async def head_anchor(self, *, workflow_name: str) -> str:
        """A signed token naming the newest checkpoint of ``workflow_name`` (or that it has none).

        Keep it outside the store and pass it to get_latest/load/verify: they then refuse a store
        that went back before it (a truncated history, a restored old snapshot).
        """
        validate_identifier(workflow_name, "workflow_name")
        sealer = self._required_sealer("head_anchor")
        await self._parts.ready("head_anchor")
        return await sealer.head_anchor(workflow_name, self._reader.decode_all)

    def open_sealed(self, checkpoint_id: CheckpointID, raw: bytes) -> tuple[Seal | None, bytes]:
        """Verify stored bytes as a read does and return their seal and codec body (for verify).

        Raises CheckpointTamperedError; an unsigned body returns no seal in migration mode only,
        after its frame is checked (CheckpointCorruptedError if damaged). Either body decodes
        with ``sealed=True``.
        """
        stored, seal = self._required_sealer("open_sealed").open(StoredBody(checkpoint_id, raw))
        return seal, stored.body

    async def prune_receipt_stored(self, pruned_id: CheckpointID, signed_after: bytes) -> bool:
        """Whether anything is stored where the receipt for pruning ``pruned_id`` would be
        (see PruneReceipts.prune_receipt_stored)."""
        return await self._receipts.prune_receipt_stored(pruned_id, signed_after)

    async def check_prune_receipt(self, pruned_id: CheckpointID, signed_after: bytes) -> None:
        """CheckpointTamperedError unless this key signed a receipt for pruning ``pruned_id``
        (see PruneReceipts.check_prune_receipt)."""
        await self._receipts.check_prune_receipt(pruned_id, signed_after)

    def _required_sealer(self, operation: str) -> Sealer:
        if self._sealer is None:
            raise StorageConfigurationError(
                f"{self.describe()}: {operation} needs an integrity key (integrity_key= or the URL "
                "option integrity_key_env=NAME)"
            )
        return self._sealer

    # ------------------------------------------------------------------ beyond MAF's six

    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[Any]:
        """Checkpoints from ``checkpoint_id`` back to its root, newest first; the result's ``end``
        says why the walk stopped. It never loops and never skips a record."""
        return await self._extensions.walk_ancestry(checkpoint_id, max_depth)

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[CheckpointID]:
        """Ids from ``checkpoint_id`` back to its root, newest first; decodes no bodies."""
        return await self._extensions.walk_ancestry_ids(checkpoint_id, max_depth)

    async def list_nested(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        """Ids of the checkpoints embedded directly in ``checkpoint_id``, in the order met."""
        return await self._extensions.list_nested(checkpoint_id)

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        """Delete all but the newest ``keep_last`` checkpoints of a workflow (with their nested
        records), leaving a tombstone for each; returns how many were deleted."""
        return await self._extensions.prune(workflow_name, keep_last)

    async def delete_workflow(self, *, workflow_name: str) -> int:
        """Delete every checkpoint of a workflow, their nested records and the workflow's
        tombstones; returns how many checkpoints were deleted."""
        return await self._extensions.delete_workflow(workflow_name)

    async def list_workflows(self) -> list[str]:
        """Names of every workflow with a stored top-level checkpoint, sorted."""
        return await self._extensions.list_workflows()

    async def checkpoint_info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        """The index entry of one stored record (nested ones too), or None."""
        return await self._extensions.checkpoint_info(checkpoint_id)

    async def list_records(self, *, workflow_name: str | None = None) -> list[CheckpointInfo]:
        """Index entries of every stored record (or one workflow's), nested ones included, in
        workflow then sequence order. Decodes no bodies."""
        return await self._extensions.list_records(workflow_name)

    def iter_records(self, *, page_size: int = 1_000) -> AsyncIterator[CheckpointInfo]:
        """Index entries of every stored record, nested ones included, in no stated order,
        read ``page_size`` at a time (SQLite, PostgreSQL; other backends read it whole)."""
        return self._extensions.iter_records(page_size)

    async def list_tombstones(self, *, workflow_name: str | None = None) -> list[CheckpointID]:
        """Ids pruned from the storage (or from one workflow), sorted."""
        return await self._extensions.list_tombstones(workflow_name)

    async def list_leftovers(self, *, workflow_name: str | None = None) -> list[Leftover]:
        """What faults left in the store (or one workflow) that no operation clears by itself:
        index entries without their record, records without their index entry, stage keys past
        their life (:class:`~storages.records.Leftover`). ``verify`` reports them."""
        return await self._extensions.list_leftovers(workflow_name)

    async def repair_leftover(self, leftover: Leftover) -> str | None:
        """Remove one leftover that is safe to remove (``leftover.repairable``), checking first
        that it still is one; returns what was done, or None. ``verify --repair`` calls it."""
        return await self._extensions.repair_leftover(leftover)

    async def read_raw_body(self, checkpoint_id: CheckpointID) -> bytes | None:
        """The stored bytes of a checkpoint, or None; for verify tooling and the kit."""
        return await self._extensions.read_raw_body(checkpoint_id)

    async def write_raw_body(self, checkpoint_id: CheckpointID, body: bytes) -> None:
        """Overwrite the stored bytes of an existing checkpoint, bypassing the codec (repair
        tools and the kit's corruption clauses; never needed in normal use)."""
        await self._extensions.write_raw_body(checkpoint_id, body)

    async def put_writes(
        self, checkpoint_id: CheckpointID, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None:
        """Store writes made against checkpoint ``checkpoint_id`` of ``workflow_name``, all or
        none. Per (task_id, index) the first write stored is kept, except at a negative index (a
        special channel), where the latest replaces it; repeating a call changes nothing."""
        await self._writes.put_writes(checkpoint_id, writes, workflow_name=workflow_name)

    async def put_task_writes(
        self,
        checkpoint_id: CheckpointID,
        task_id: str,
        task_path: str,
        writes: list[tuple[int, str, Any]],
        workflow_name: str,
    ) -> None:
        """:meth:`put_writes` of one task's ``(index, channel, value)`` writes, without building
        the PendingWrites (LangGraph's StorageSaver makes every call this way)."""
        await self._writes.put_task_writes(checkpoint_id, task_id, task_path, writes, workflow_name)

    async def list_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> list[PendingWrite]:
        """The writes stored against a checkpoint, one per (task_id, index), in the order their
        (task_id, index) was first stored."""
        return await self._writes.list_writes(checkpoint_id, workflow_name=workflow_name)

    async def list_workflow_writes(self, *, workflow_name: str) -> dict[CheckpointID, list[PendingWrite]]:
        """Every checkpoint's writes in a workflow, read at once (checkpoint id -> its writes)."""
        return await self._writes.list_workflow_writes(workflow_name=workflow_name)

    async def delete_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> int:
        """Delete every write stored against a checkpoint; returns how many batches were deleted."""
        return await self._writes.delete_writes(checkpoint_id, workflow_name=workflow_name)


def _checked_rivals(candidates: list[Any]) -> list[Any]:
    """The head (last) and its rivals as a backend read them: more than RIVALS_LIMIT, or a rival
    that does not continue the head's previous checkpoint under its signature (is not a root, for
    a root head), is the store's error, named, never a resume point."""
    head = candidates[-1]
    if len(candidates) - 1 > RIVALS_LIMIT:
        raise CheckpointCorruptedError(
            head.checkpoint_id, f"the store read {len(candidates) - 1} rivals with it, over {RIVALS_LIMIT}"
        )
    for rival in candidates[:-1]:
        if (
            rival.previous_checkpoint_id != head.previous_checkpoint_id
            or rival.graph_signature_hash != head.graph_signature_hash
        ):
            previous = head.previous_checkpoint_id
            continues = "a root" if previous is None else f"a successor of {previous!r}"
            raise CheckpointCorruptedError(
                rival.checkpoint_id,
                f"read as a rival of {head.checkpoint_id!r}, but it is not {continues} "
                "under its graph signature",
            )
    return candidates
