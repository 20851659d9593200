"""The shared engine every built-in backend subclasses.

:class:`BaseCheckpointStorage` implements the public contract once: validation, encoding through
the codec, copy semantics, immutability, capability gating, corruption reporting and lifecycle.
A backend supplies a handful of storage primitives (the ``_``-prefixed abstract methods), each
one round trip to its backend. Backend authors outside this project can subclass it too.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from typing_extensions import Self

from .codec import CheckpointCodec
from .contract import (
    CHECKPOINT_FIELDS,
    AncestryWalk,
    Capability,
    CheckpointID,
    validate_identifier,
)
from .errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    GraphSignatureMismatchError,
    InvalidCheckpointError,
    StorageClosedError,
    UnsupportedOperationError,
)

DEFAULT_MAX_DEPTH = 100_000
"""Ancestry walks stop here unless asked otherwise; deeper chains report DEPTH_LIMIT."""


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


@dataclass(frozen=True, slots=True)
class StoredBody:
    """A body read back from the backend with the id it is stored under."""

    checkpoint_id: CheckpointID
    body: bytes


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

    def __init__(self, *, codec: CheckpointCodec | None = None) -> None:
        self._codec = codec if codec is not None else CheckpointCodec()
        self._closed = False
        self._opened = False
        self._open_lock: asyncio.Lock | None = None

    @property
    def codec(self) -> CheckpointCodec:
        return self._codec

    def describe(self) -> str:
        """A short human name for messages and reports, e.g. ``sqlite:///path.db``."""
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.describe()}>"

    # ------------------------------------------------------------------ MAF's six methods

    async def save(self, checkpoint: Any) -> CheckpointID:
        """Store a snapshot of ``checkpoint`` and return its id.

        Saving an id that exists is a no-op when the content is equal and raises
        CheckpointConflictError when it differs.
        """
        await self._ready("save")
        record = self._record_for(checkpoint)
        existing_digest = await self._insert(record)
        if existing_digest is not None and existing_digest != record.digest:
            await self._check_same_content(record)
        return record.checkpoint_id

    async def load(
        self, checkpoint_id: CheckpointID, *, expected_graph_signature_hash: str | None = None
    ) -> Any:
        """Return the checkpoint stored under ``checkpoint_id``.

        Raises CheckpointNotFoundError if there is none, CheckpointCorruptedError if its body
        cannot be decoded, GraphSignatureMismatchError if ``expected_graph_signature_hash`` is
        given and differs.
        """
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("load")
        body = await self._get(checkpoint_id)
        if body is None:
            raise CheckpointNotFoundError(checkpoint_id)
        checkpoint = self._decode(StoredBody(checkpoint_id, body))
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
        """Every checkpoint of ``workflow_name``, oldest first (commit order)."""
        self._check_listing("list_checkpoints", workflow_name, graph_signature_hash, include_nested)
        await self._ready("list_checkpoints")
        stored = await self._list(workflow_name, graph_signature_hash)
        return [self._decode(item, workflow_name) for item in stored]

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
        return await self._list_ids(workflow_name, graph_signature_hash)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one checkpoint; True if it existed."""
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("delete")
        return await self._remove(checkpoint_id)

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any | None:
        """The checkpoint of ``workflow_name`` saved last (commit order), or None."""
        self._check_listing("get_latest", workflow_name, graph_signature_hash, False)
        await self._ready("get_latest")
        stored = await self._latest(workflow_name, graph_signature_hash)
        return None if stored is None else self._decode(stored, workflow_name)

    # ------------------------------------------------------------------ extensions

    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[Any]:
        """Checkpoints from ``checkpoint_id`` back to its root, newest first."""
        self._require(Capability.ANCESTRY, "walk_ancestry")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("walk_ancestry")
        walk, bodies = await self._walk(checkpoint_id, max_depth, with_bodies=True)
        items = tuple(self._decode(item) for item in bodies)
        return AncestryWalk(items, walk.end, walk.end_id)

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[CheckpointID]:
        """Ids from ``checkpoint_id`` back to its root, newest first; decodes no bodies."""
        self._require(Capability.ANCESTRY, "walk_ancestry_ids")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("walk_ancestry_ids")
        walk, _ = await self._walk(checkpoint_id, max_depth, with_bodies=False)
        return walk

    async def list_nested(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        """Ids of the checkpoints embedded in ``checkpoint_id``."""
        self._require(Capability.NESTED, "list_nested")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._ready("list_nested")
        return await self._nested_ids(checkpoint_id)

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        """Delete all but the newest ``keep_last`` checkpoints of a workflow; returns how many."""
        self._require(Capability.PRUNE, "prune")
        validate_identifier(workflow_name, "workflow_name")
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
            raise InvalidCheckpointError(
                f"keep_last must be an int >= 0, got {keep_last!r}", field="keep_last"
            )
        await self._ready("prune")
        return await self._prune(workflow_name, keep_last)

    async def delete_workflow(self, *, workflow_name: str) -> int:
        """Delete every checkpoint of a workflow; returns how many."""
        self._require(Capability.PRUNE, "delete_workflow")
        validate_identifier(workflow_name, "workflow_name")
        await self._ready("delete_workflow")
        return await self._delete_workflow(workflow_name)

    async def list_workflows(self) -> list[str]:
        """Names of every workflow with a stored checkpoint, sorted."""
        self._require(Capability.LIST_WORKFLOWS, "list_workflows")
        await self._ready("list_workflows")
        return sorted(await self._workflow_names())

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

    # ------------------------------------------------------------------ lifecycle

    @abc.abstractmethod
    def new_handle(self) -> Self:
        """An independent handle on the same backend with the same settings (close it separately).

        Works on a closed handle too: it reuses settings, not connections.
        """

    async def aclose(self) -> None:
        """Release connections; idempotent. Later operations raise StorageClosedError."""
        if self._closed:
            return
        self._closed = True
        if self._opened:
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

    @abc.abstractmethod
    async def _insert(self, record: CheckpointRecord) -> str | None:
        """Insert ``record`` with the workflow's next sequence number unless its id exists.

        Returns None if inserted, else the digest stored under that id (nothing is written).
        """

    @abc.abstractmethod
    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        """The body stored under ``checkpoint_id``, or None."""

    @abc.abstractmethod
    async def _latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        """The body with the highest sequence in the workflow (optionally of one signature)."""

    @abc.abstractmethod
    async def _list(self, workflow_name: str, graph_signature_hash: str | None) -> Sequence[StoredBody]:
        """Bodies of the workflow in ascending sequence."""

    @abc.abstractmethod
    async def _list_ids(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointID]:
        """Ids of the workflow in ascending sequence."""

    @abc.abstractmethod
    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one record; True if it existed."""

    async def _overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        """Replace a stored body and its digest; False if the id is absent."""
        raise NotImplementedError

    async def _workflow_names(self) -> list[str]:
        raise NotImplementedError

    async def _walk(
        self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool
    ) -> tuple[AncestryWalk[CheckpointID], list[StoredBody]]:
        raise NotImplementedError

    async def _nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        raise NotImplementedError

    async def _prune(self, workflow_name: str, keep_last: int) -> int:
        raise NotImplementedError

    async def _delete_workflow(self, workflow_name: str) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------------ shared machinery

    async def _ready(self, operation: str) -> None:
        if self._closed:
            raise StorageClosedError(self.describe(), operation)
        if self._opened:
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if not self._opened:
                await self._open()
                self._opened = True

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

    def _record_for(self, checkpoint: Any) -> CheckpointRecord:
        missing = next((name for name in CHECKPOINT_FIELDS if not hasattr(checkpoint, name)), None)
        if missing is not None:
            raise InvalidCheckpointError(
                f"{type(checkpoint).__name__} is not a checkpoint: missing field {missing!r}", field=missing
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
        body = self._codec.encode_checkpoint(checkpoint)
        return CheckpointRecord(
            checkpoint_id=checkpoint_id,
            workflow_name=workflow_name,
            previous_checkpoint_id=previous_id,
            graph_signature_hash=signature,
            body=body,
            digest=body_digest(body),
        )

    def _decode(self, stored: StoredBody, workflow_name: str | None = None) -> Any:
        checkpoint = self._codec.decode_checkpoint(stored.body, checkpoint_id=stored.checkpoint_id)
        if checkpoint.checkpoint_id != stored.checkpoint_id:
            raise CheckpointCorruptedError(
                stored.checkpoint_id, f"the stored body belongs to checkpoint {checkpoint.checkpoint_id!r}"
            )
        if workflow_name is not None and checkpoint.workflow_name != workflow_name:
            raise CheckpointCorruptedError(
                stored.checkpoint_id,
                f"indexed under workflow {workflow_name!r} but its body says {checkpoint.workflow_name!r}",
            )
        return checkpoint

    async def _check_same_content(self, record: CheckpointRecord) -> None:
        # Digests differ; equal content may still encode differently (set order varies between
        # processes), so compare decoded values before calling it a conflict.
        stored = await self._get(record.checkpoint_id)
        if stored is None:
            # Deleted between the insert attempt and now; the caller may simply retry.
            raise CheckpointConflictError(record.checkpoint_id)
        existing = self._decode(StoredBody(record.checkpoint_id, stored))
        incoming = self._codec.decode_checkpoint(record.body, checkpoint_id=record.checkpoint_id)
        if type(existing) is not type(incoming) or existing != incoming:
            raise CheckpointConflictError(record.checkpoint_id)


def _expect_field(
    checkpoint_id: str, name: str, value: object, expected: type[Any], *, got_bool: bool = False
) -> None:
    if got_bool or not isinstance(value, expected):
        raise InvalidCheckpointError(
            f"Checkpoint {checkpoint_id!r}: field {name} must be {expected.__name__}, "
            f"not {type(value).__name__}",
            field=name,
        )


__all__ = ["DEFAULT_MAX_DEPTH", "BaseCheckpointStorage", "CheckpointRecord", "StoredBody", "body_digest"]
