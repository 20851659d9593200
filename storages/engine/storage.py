"""The storage template: :class:`BaseCheckpointStorage` implements the public contract once
(validation, encoding through the codec, copy semantics, immutability, capability gating,
corruption reporting, lifecycle) on top of a backend's primitives (engine/primitives.py).
docs/backends.md is the guide to writing a backend on it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Final

from typing_extensions import Self

from ..codec import CheckpointCodec, TypeRef
from ..codec.codec import decode_sealed, takes_sealed
from ..contract import (
    MAX_ID_LENGTH,
    UNFENCED,
    Capability,
    CheckpointID,
    Unfenced,
    validate_identifier,
)
from ..errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointTamperedError,
    GraphSignatureMismatchError,
    InvalidCheckpointError,
    StaleWriterError,
    StorageClosedError,
    StorageConfigurationError,
    StorageUnavailableError,
    UnsupportedOperationError,
)
from ..fencing import FencedStorage
from ..integrity import IntegrityKeyInput, IntegrityKeyProvider, TamperKind, as_provider
from .extensions import ExtensionOperations
from .handles import carrying_integrity, recording_settings, settings_of
from .primitives import set_current_operation
from .records import CheckpointRecord, RecordDraft, StoredBody, check_against_index, listed_ids
from .sealing import HeldRecord, unsealed_own
from .validation import as_list, check_fields

READ_RACE_RETRIES = 8
"""Times get_latest and list_checkpoints read again when a container they read was deleted before
its nested records were read (the backend read them in a second round trip)."""


class _ReadRaced(Exception):
    """A container read by one round trip was deleted before the next read its nested records."""


class BaseCheckpointStorage(ExtensionOperations):
    """Implements the contract on top of a backend's primitives.

    Subclasses set :attr:`capabilities` and implement the primitives (see
    :data:`~storages.engine.primitives.CAPABILITY_PRIMITIVES`). Each primitive must be atomic on
    its backend; the base adds no locking of its own.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    """What this backend supports; see :class:`~storages.contract.Capability`."""

    _engine_ready: ClassVar[bool] = True
    """True while the class keeps the engine's own ``_ready``: the hot operations then check an
    open handle inline (see :meth:`_is_ready`) instead of awaiting it. A backend that extends
    ``_ready`` (Redis checks its eviction policy there) is always awaited."""

    _engine_drafts: ClassVar[bool] = True
    """True while the class keeps the engine's own ``_records_for`` and ``_record_for``: a keyed
    save then seals the drafts directly (see :meth:`_save_records`)."""

    _index_holds_checked_ids: ClassVar[bool] = False
    """True for a backend whose index holds only ids that a save of this process checked
    (memory: nothing outside the process writes it), so its listings need no second check
    (``listed_ids``); every backend that reads its index from outside keeps it False."""

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
            codec.allow(types=as_list(allowed_checkpoint_types), modules=as_list(allowed_modules))
        except (ValueError, TypeError) as exc:
            raise StorageConfigurationError(f"{type(self).__name__}: {exc}") from None
        self._codec = codec
        self._seals_frames = takes_sealed(codec)
        """The codec frames keyed bodies for their seal (no CRC) and reads them given ``sealed``."""
        self._closed = False
        self._opened = False
        self._open_lock: asyncio.Lock | None = None
        self._open_lock_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        """The event loop the backend's loop-bound resources belong to (None before opening)."""
        self._integrity: IntegrityKeyProvider | None = None
        self._chain_macs: OrderedDict[CheckpointID, tuple[bytes, int]] = OrderedDict()
        """id -> (MAC, chain height) of records this handle signed or verified."""
        self._held_verified: OrderedDict[CheckpointID, HeldRecord] | None = (
            OrderedDict() if self._reads_held_bytes else None
        )
        self._held_bytes = 0
        if integrity_key is not None:
            self._integrity = as_provider(integrity_key)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._engine_ready = cls._ready is BaseCheckpointStorage._ready
        cls._engine_drafts = (
            cls._records_for is BaseCheckpointStorage._records_for
            and cls._record_for is BaseCheckpointStorage._record_for
        )
        cls._engine_chain = cls._chain_link is BaseCheckpointStorage._chain_link
        cls._engine_mac = cls._integrity_mac is BaseCheckpointStorage._integrity_mac
        if "_list_ids" in cls.__dict__ and "_index_holds_checked_ids" not in cls.__dict__:
            cls._index_holds_checked_ids = False  # a listing of its own is checked as any other
        own_init = cls.__dict__.get("__init__")
        if own_init is not None:
            cls.__init__ = recording_settings(own_init)  # type: ignore[method-assign]
        # A backend's own new_handle() rebuilds the storage from its own settings; the integrity
        # keys ride along here so that no backend, built-in or third-party, can drop them.
        own = cls.__dict__.get("new_handle")
        if own is not None and not getattr(own, "_carries_integrity", False):
            cls.new_handle = carrying_integrity(own)  # type: ignore[method-assign]

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
        if not self._is_ready("save"):
            await self._ready("save")
        if self._integrity is None:
            records, chain = self._records_for(checkpoint), _NO_CHAIN  # no coroutine: nothing to seal
        elif type(self)._engine_drafts:
            records, chain = await self._sealed(self._drafts_for(checkpoint))  # _save_records, in line
        else:
            records, chain = await self._save_records(checkpoint)
        top = records[0]
        existing_digest = await (self._insert(top) if len(records) == 1 else self._insert_family(records))
        if existing_digest is not None and (
            existing_digest != top.digest or not await self._same_nested_bodies(records)
        ):
            await self._check_same_content(records)
        if existing_digest is None and chain:
            self._remember_chain(chain)
        return top.checkpoint_id

    async def _save_fenced(self, checkpoint: Any, expected_latest_id: CheckpointID | None) -> CheckpointID:
        self._require(Capability.FENCING, "save(expected_latest_id=...)")
        if expected_latest_id is not None:
            validate_identifier(expected_latest_id, "expected_latest_id")
        await self._ready("save")
        records, chain = await self._save_records(checkpoint)
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
        if not self._is_ready("load"):
            await self._ready("load")
        stored = await self._load(checkpoint_id)
        if stored is None:
            raise CheckpointNotFoundError(checkpoint_id)
        opened = stored if self._integrity is None else self._opened_body(stored)[0]
        if not self._codec.has_nested_refs(opened.body):
            checkpoint = self._decode(opened)  # what _decode_all does for it, without its lists
        else:
            try:
                (checkpoint,) = await self._decode_opened([opened])
            except _ReadRaced:
                raise CheckpointNotFoundError(checkpoint_id) from None  # deleted while being read
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
        if (
            graph_signature_hash is not None
            or include_nested
            or not (
                type(workflow_name) is str
                and 0 < len(workflow_name) <= MAX_ID_LENGTH
                and workflow_name.isprintable()
            )
        ):
            self._check_listing(
                "list_checkpoints", workflow_name, graph_signature_hash, include_nested
            )  # plainly valid else
        if not self._is_ready("list_checkpoints"):
            await self._ready("list_checkpoints")
        for _ in range(READ_RACE_RETRIES):
            if include_nested:
                stored = await self._list(workflow_name, graph_signature_hash, include_nested=True)
            else:
                stored = await self._list(workflow_name, graph_signature_hash)
            try:
                return await self._decode_all(stored, workflow_name, graph_signature_hash)
            except _ReadRaced:
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
        self._check_listing("list_checkpoint_ids", workflow_name, graph_signature_hash, include_nested)
        await self._ready("list_checkpoint_ids")
        if include_nested:
            ids = await self._list_ids(workflow_name, graph_signature_hash, include_nested=True)
        else:
            ids = await self._list_ids(workflow_name, graph_signature_hash)
        if self._index_holds_checked_ids:
            return ids
        return listed_ids(ids, f"the index of workflow {workflow_name!r}")

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one checkpoint and the checkpoints nested in it; True if it existed.

        A nested record raises NestedCheckpointDeletionError: it goes with its container.
        """
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("delete")
        self._forget_chain()  # a deleted id may be saved again with other content
        return await self._remove(checkpoint_id)

    async def get_latest(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, anchor: str | None = None
    ) -> Any | None:
        """The checkpoint of ``workflow_name`` saved last (commit order), or None.

        With an ``anchor`` (from head_anchor), raises CheckpointTamperedError if the store went back
        before it: the anchored checkpoint is no longer the newest nor an ancestor of the newest.
        """
        if graph_signature_hash is not None or not (
            type(workflow_name) is str
            and 0 < len(workflow_name) <= MAX_ID_LENGTH
            and workflow_name.isprintable()
        ):
            self._check_listing(
                "get_latest", workflow_name, graph_signature_hash, False
            )  # plainly valid else
        parsed = None if anchor is None else self._parsed_anchor(anchor, workflow_name)
        if not self._is_ready("get_latest"):
            await self._ready("get_latest")
        for _ in range(READ_RACE_RETRIES):
            stored = await self._latest(workflow_name, graph_signature_hash)
            if parsed is not None:
                head = stored if graph_signature_hash is None else await self._latest(workflow_name, None)
                await self._check_anchor_latest(parsed, head)
            if stored is None:
                return None
            try:
                (checkpoint,) = await self._decode_all([stored], workflow_name, graph_signature_hash)
            except _ReadRaced:
                continue  # the latest was deleted while being read: the one before it is latest now
            return checkpoint
        raise StorageUnavailableError("get_latest", f"workflow {workflow_name!r} kept changing")

    # ------------------------------------------------------------------ lifecycle

    def new_handle(self) -> Self:
        """An independent handle on the same backend with the same settings (close it separately).

        Works on a closed handle too: it reuses settings, not connections. The default rebuilds
        the storage from the arguments it was constructed with, changed by
        :meth:`_handle_overrides`, with this handle's codec and integrity keys.
        """
        settings = settings_of(self)
        overrides: dict[str, Any] = {"codec": self._codec}
        overrides.update(self._handle_overrides())
        args, kwargs = settings.rebuilt(overrides)
        handle = type(self)(*args, **kwargs)
        handle._integrity = self._integrity
        return handle

    def _handle_overrides(self) -> Mapping[str, Any]:
        """Constructor arguments a new handle gets instead of the ones this handle was built with
        (by parameter name; names the constructor does not take are ignored)."""
        return {}

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

    # ------------------------------------------------------------------ shared machinery

    def _is_ready(self, operation: str) -> bool:
        """True when ``_ready(operation)`` would only name the operation (done here): the engine's
        own ``_ready``, an open handle, on the loop it is bound to. Else the caller awaits
        ``_ready``, which names it too and raises, opens or follows the loop as needed."""
        if (
            self._engine_ready
            and self._opened
            and not self._closed
            and self._loop is asyncio.get_running_loop()
        ):
            set_current_operation(operation)
            return True
        return False

    async def _ready(self, operation: str) -> None:
        set_current_operation(operation)  # names the operation in a translated driver error
        if self._closed:
            raise StorageClosedError(self.describe(), operation)
        loop = asyncio.get_running_loop()
        if self._opened and self._loop is loop:
            return
        if self._open_lock is None or self._open_lock_loop is not loop:
            # An asyncio lock belongs to the loop it first waited on; each loop gets its own. The
            # lock's loop is kept apart from _loop, which stays None until the first open ends, so
            # first operations started together share one lock and open once.
            self._open_lock = asyncio.Lock()
            self._open_lock_loop = loop
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

    async def _save_records(
        self, checkpoint: Any
    ) -> tuple[list[CheckpointRecord], Mapping[CheckpointID, tuple[bytes, int]]]:
        """The records a save writes (sealed on a keyed handle), and each sealed one's (MAC,
        chain height), to remember once the save is stored."""
        if self._integrity is None:
            return self._records_for(checkpoint), _NO_CHAIN
        if type(self)._engine_drafts:
            return await self._sealed(self._drafts_for(checkpoint))
        # A subclass decides what a save writes (a test double, a backend's own layout): its
        # records are sealed as they are, so a key never bypasses it.
        return await self._signed(self._records_for(checkpoint))

    def _records_for(self, checkpoint: Any) -> list[CheckpointRecord]:
        """The records a save writes: the checkpoint, then (with ``nested``) each embedded one."""
        if Capability.NESTED not in self.capabilities:
            return [self._record_for(checkpoint)]
        plain_digest = self._plain_digest
        if check_fields(checkpoint):
            # Flat (StorageSaver's every save): nothing can be embedded, so the plain encode
            # gives the tree's one body without its encoding state, and without the codec's
            # look for bin values that are not bytes.
            body = self._codec.encode_checkpoint(checkpoint, bin_from_bytes_only=True)
            nodes = None
        else:
            nodes = self._codec.encode_checkpoint_tree(checkpoint)
            body = nodes[0].body
        if nodes is None or len(nodes) == 1:
            # Nothing embedded (most saves): the one record, without a draft to unpack.
            return [
                CheckpointRecord(
                    checkpoint.checkpoint_id,
                    checkpoint.workflow_name,
                    checkpoint.previous_checkpoint_id,
                    checkpoint.graph_signature_hash,
                    body,
                    plain_digest(body),
                )
            ]
        records: list[CheckpointRecord] = []
        for draft in self._tree_drafts(checkpoint, nodes):
            checkpoint_id, workflow_name, previous_id, signature, body, container_id, root_id, position = (
                draft
            )
            records.append(
                CheckpointRecord(
                    checkpoint_id,
                    workflow_name,
                    previous_id,
                    signature,
                    body,
                    plain_digest(body),
                    container_id,
                    root_id,
                    position,
                )
            )
        return records

    def _drafts_for(self, checkpoint: Any) -> list[RecordDraft]:
        """What each record of a keyed save holds before its seal: the checkpoint, then (with
        ``nested``) each embedded one. Keyed saves seal these directly (sealing.py), so no record
        is built twice. Their bodies are framed for the seal: no CRC, the MAC covers them. A flat
        checkpoint (check_fields) embeds nothing, so it is one body on every backend."""
        flat = check_fields(checkpoint)
        sealed = self._seals_frames
        if flat or Capability.NESTED not in self.capabilities:
            body = (
                self._codec.encode_checkpoint(checkpoint, bin_from_bytes_only=flat, sealed=True)
                if sealed
                else self._codec.encode_checkpoint(checkpoint, bin_from_bytes_only=flat)
            )
            return [
                (
                    checkpoint.checkpoint_id,
                    checkpoint.workflow_name,
                    checkpoint.previous_checkpoint_id,
                    checkpoint.graph_signature_hash,
                    body,
                    None,
                    None,
                    0,
                )
            ]
        nodes = (
            self._codec.encode_checkpoint_tree(checkpoint, sealed=True)
            if sealed
            else self._codec.encode_checkpoint_tree(checkpoint)
        )
        if len(nodes) == 1:  # nothing embedded (most saves): the one draft, as _tree_drafts makes it
            return [
                (
                    checkpoint.checkpoint_id,
                    checkpoint.workflow_name,
                    checkpoint.previous_checkpoint_id,
                    checkpoint.graph_signature_hash,
                    nodes[0].body,
                    None,
                    None,
                    0,
                )
            ]
        return self._tree_drafts(checkpoint, nodes)

    @staticmethod
    def _tree_drafts(checkpoint: Any, nodes: Sequence[Any]) -> list[RecordDraft]:
        """The drafts of a checkpoint (fields checked) from its encoded tree, embedded ones checked."""
        top_id = checkpoint.checkpoint_id
        drafts: list[RecordDraft] = []
        for position, node in enumerate(nodes):
            nested = node.checkpoint
            if position:
                check_fields(nested, embedded_in=node.container_id)
            drafts.append(
                (
                    nested.checkpoint_id,
                    nested.workflow_name,
                    nested.previous_checkpoint_id,
                    nested.graph_signature_hash,
                    node.body,
                    node.container_id,
                    top_id if position else None,
                    position,
                )
            )
        return drafts

    def _record_for(self, checkpoint: Any) -> CheckpointRecord:
        """The one record of a checkpoint, embedded checkpoints inline."""
        body = self._codec.encode_checkpoint(checkpoint, bin_from_bytes_only=check_fields(checkpoint))
        # Positional, in field order (a keyword call costs a third more, on every save).
        return CheckpointRecord(
            checkpoint.checkpoint_id,
            checkpoint.workflow_name,
            checkpoint.previous_checkpoint_id,
            checkpoint.graph_signature_hash,
            body,
            self._plain_digest(body),
        )

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
        return await self._decode_opened(stored, workflow_name, graph_signature_hash)

    async def _decode_opened(
        self,
        stored: Sequence[StoredBody],
        workflow_name: str | None = None,
        graph_signature_hash: str | None = None,
    ) -> list[Any]:
        """_decode_all of bodies already opened (on a keyed handle: what _opened_body returned)."""
        has_refs = self._codec.has_nested_refs
        containers = [item for item in stored if has_refs(item.body)]
        if not containers:
            return [self._decode(item, workflow_name, None, graph_signature_hash) for item in stored]
        unread = [item.checkpoint_id for item in containers if item.nested is None]
        # Without ``nested`` no body may refer to another record: one that seems to is damaged,
        # and decoding it against no nested bodies reports it so.
        fetch = unread and Capability.NESTED in self.capabilities
        fetched = await self._nested_bodies(unread) if fetch else {}
        if fetched and self._integrity is not None:
            fetched = self._opened_bodies(fetched)
        try:
            return [
                self._decode(
                    item, workflow_name, fetched if item.nested is None else item.nested, graph_signature_hash
                )
                if has_refs(item.body)
                else self._decode(item, workflow_name, None, graph_signature_hash)
                for item in stored
            ]
        except CheckpointCorruptedError:
            # Nested records read in a second round trip: a container deleted in between (with
            # them) is a read that raced a delete, not a damaged store. Only a container still
            # stored is reported as corrupted.
            if fetch and any([await self._get(checkpoint_id) is None for checkpoint_id in unread]):
                raise _ReadRaced from None
            raise

    def _decode(
        self,
        stored: StoredBody,
        workflow_name: str | None = None,
        nested: Mapping[CheckpointID, bytes] | None = None,
        graph_signature_hash: str | None = None,
    ) -> Any:
        """Decode one body; on a keyed handle ``stored`` (and ``nested``) must be what
        _opened_body returned: a verified seal's body, or an unsigned body whose frame it checked."""
        if self._integrity is not None and self._seals_frames:
            checkpoint = self._codec.decode_checkpoint(
                stored.body, checkpoint_id=stored.checkpoint_id, nested=nested, sealed=True
            )
        else:
            checkpoint = self._codec.decode_checkpoint(
                stored.body, checkpoint_id=stored.checkpoint_id, nested=nested
            )
        try:
            check_against_index(stored, checkpoint, workflow_name, graph_signature_hash)
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
        incoming_nested = {record.checkpoint_id: unsealed_own(record.body) for record in records[1:]}
        top_body = unsealed_own(top.body)
        if self._integrity is None:
            incoming = self._codec.decode_checkpoint(
                top_body, checkpoint_id=top.checkpoint_id, nested=incoming_nested or None
            )
        else:  # this handle's own records, built just now: their bodies are framed for the seal
            incoming = decode_sealed(
                self._codec, top_body, checkpoint_id=top.checkpoint_id, nested=incoming_nested or None
            )
        if type(existing) is not type(incoming) or existing != incoming:
            raise CheckpointConflictError(top.checkpoint_id)


_NO_CHAIN: Final[Mapping[CheckpointID, tuple[bytes, int]]] = MappingProxyType({})
