"""What a read returns: bodies decoded through the codec (opened first on a keyed handle), the
nested records they refer to fetched in one call, and each checked against what it was found
by (its workflow, the signature asked for, its index entry). A body read back is hostile until
it agrees."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..backend import Backend
from ..codec import CheckpointCodec
from ..codec.overrides import BodyCodec
from ..contract import Capability, CheckpointID
from ..errors import CheckpointCorruptedError, CheckpointTamperedError
from ..integrity import TamperKind
from ..records import StoredBody, check_against_index
from .sealing import Sealer


class ReadRaced(Exception):
    """A container read by one round trip was deleted before the next read its nested records."""


class Reader:
    """Decodes what a backend returned, for one handle."""

    __slots__ = ("_backend", "_bodies", "_codec", "_nested", "_sealed", "sealer")

    def __init__(
        self, backend: Backend, codec: CheckpointCodec, bodies: BodyCodec, sealer: Sealer | None
    ) -> None:
        """``bodies``: ``codec`` as the handle calls it (overrides.body_codec)."""
        self._backend = backend
        self._codec = codec
        self._bodies = bodies
        self._nested = Capability.NESTED in backend.capabilities
        self.sealer = sealer
        self._sealed = sealer is not None
        """A keyed handle decodes opened bodies with ``sealed=True``: their seal was verified."""

    async def decode_all(
        self,
        stored: Sequence[StoredBody],
        workflow_name: str | None = None,
        graph_signature_hash: str | None = None,
    ) -> list[Any]:
        """Decode bodies as read (opened first on a keyed handle), fetching in one call the nested
        records any of them refer to that the backend did not read with it. Raises ReadRaced
        when a container was deleted between its read and its nested records' read."""
        if self.sealer is not None:
            opener = self.sealer.open
            stored = [opener(item)[0] for item in stored]
        return await self.decode_opened(stored, workflow_name, graph_signature_hash)

    async def decode_opened(
        self,
        stored: Sequence[StoredBody],
        workflow_name: str | None = None,
        graph_signature_hash: str | None = None,
    ) -> list[Any]:
        """:meth:`decode_all` of bodies already opened (on a keyed handle)."""
        has_refs = self._codec.has_nested_refs
        containers = [item for item in stored if has_refs(item.body)]
        if not containers:
            return [self.decode(item, workflow_name, None, graph_signature_hash) for item in stored]
        unread = [item.checkpoint_id for item in containers if item.nested is None]
        # Without ``nested`` no body may refer to another record: one that seems to is damaged,
        # and decoding it against no nested bodies reports it so.
        fetch = bool(unread) and self._nested
        fetched: Mapping[CheckpointID, bytes] = await self._backend.nested_bodies(unread) if fetch else {}
        if fetched and self.sealer is not None:
            fetched = self.sealer.open_bodies(fetched)
        try:
            return [
                self.decode(
                    item, workflow_name, fetched if item.nested is None else item.nested, graph_signature_hash
                )
                if has_refs(item.body)
                else self.decode(item, workflow_name, None, graph_signature_hash)
                for item in stored
            ]
        except CheckpointCorruptedError:
            # Nested records read in a second round trip: a container deleted in between (with
            # them) is a read that raced a delete, not a damaged store. Only a container still
            # stored is reported as corrupted.
            if fetch and any([await self._backend.load(checkpoint_id) is None for checkpoint_id in unread]):
                raise ReadRaced from None
            raise

    def decode(
        self,
        stored: StoredBody,
        workflow_name: str | None = None,
        nested: Mapping[CheckpointID, bytes] | None = None,
        graph_signature_hash: str | None = None,
    ) -> Any:
        """Decode one body; on a keyed handle ``stored`` (and ``nested``) must be opened: a
        verified seal's body, or an unsigned body whose frame the sealer checked."""
        checkpoint = self._bodies.decode_checkpoint(
            stored.body, checkpoint_id=stored.checkpoint_id, nested=nested, sealed=self._sealed
        )
        try:
            check_against_index(stored, checkpoint, workflow_name, graph_signature_hash)
        except CheckpointCorruptedError as exc:
            if self.sealer is None:
                raise
            # The body is authentic (its MAC held) but is listed under fields it does not have.
            raise CheckpointTamperedError(exc.checkpoint_id, TamperKind.INDEX_MISMATCH, exc.reason) from None
        return checkpoint
