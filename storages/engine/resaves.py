"""A save of an id already stored: a no-op when the content is the same, CheckpointConflictError
when it differs. Bodies are compared first (the backend's insert said whether the top body is
the same, by its bytes or their digest): one body is one value. A different body may still hold
the same value (set order varies between processes, a release may write a value another way),
so the decoded contents are compared next, as the codec stores them (``codec.same_value``), never
by ``==``: ``True`` over ``1``, ``1.0`` over ``1`` or a list over a tuple is a conflict, a NaN
re-saved is not. A container's body holds only its children's ids, so its nested records are
compared too: a changed child under the same id must still conflict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..backend import Backend
from ..codec import CheckpointCodec
from ..codec.overrides import BodyCodec
from ..contract import CheckpointID
from ..errors import CheckpointConflictError, StaleWriterError
from ..records import CheckpointRecord, InsertResult, as_asked
from .reading import Reader, ReadRaced
from .sealing import Chain, Sealer, unsealed_own


class Resaves:
    """Decides a save that found its id stored (a cold path: a retry, or a runner saving again)."""

    __slots__ = ("_backend", "_bodies", "_codec", "_reader", "_sealed")

    def __init__(
        self, backend: Backend, codec: CheckpointCodec, bodies: BodyCodec, reader: Reader, sealed: bool
    ) -> None:
        """``bodies``: ``codec`` as the handle calls it; ``sealed``: the handle is keyed, so its
        own records are framed for their seals."""
        self._backend = backend
        self._codec = codec
        self._bodies = bodies
        self._reader = reader
        self._sealed = sealed

    async def insert_fenced(
        self,
        records: list[CheckpointRecord],
        expected_latest_id: CheckpointID | None,
        chain: Chain,
        sealer: Sealer | None,
    ) -> CheckpointID:
        """A fenced save (``save(expected_latest_id=...)``): stored only if the workflow's latest is
        ``expected_latest_id``; a retry of a fenced save that succeeded returns its id."""
        top = records[0]
        check = await self._backend.insert_fenced(records, expected_latest_id)
        if check is None:
            if chain and sealer is not None:
                sealer.remember(chain)
            return top.checkpoint_id
        if check.existing is None:
            raise StaleWriterError(top.workflow_name, top.checkpoint_id, expected_latest_id, check.latest_id)
        await self.check(records, check.existing)
        if check.latest_id == top.checkpoint_id:
            return top.checkpoint_id  # a retry of a save that succeeded: it is the latest
        raise StaleWriterError(
            top.workflow_name, top.checkpoint_id, expected_latest_id, check.latest_id, already_stored=True
        )

    async def check(self, records: Sequence[CheckpointRecord], stored: InsertResult) -> None:
        """Raise CheckpointConflictError unless ``records`` hold what is stored under their id."""
        if stored is InsertResult.SAME_BODY and await self._same_nested_bodies(records):
            return
        await self._check_same_content(records)

    async def _same_nested_bodies(self, records: Sequence[CheckpointRecord]) -> bool:
        """True unless the incoming nested records differ from the stored ones byte for byte."""
        if len(records) == 1:
            return True
        stored = await self._backend.nested_bodies([records[0].checkpoint_id])
        return all(stored.get(record.checkpoint_id) == record.body for record in records[1:])

    async def _check_same_content(self, records: Sequence[CheckpointRecord]) -> None:
        top = records[0]
        stored = as_asked(await self._backend.load(top.checkpoint_id), top.checkpoint_id)
        if stored is None:
            # Deleted between the insert attempt and now; the caller may simply retry.
            raise CheckpointConflictError(top.checkpoint_id)
        try:
            (existing,) = await self._reader.decode_all([stored])
        except ReadRaced:
            raise CheckpointConflictError(top.checkpoint_id) from None
        incoming_nested: Mapping[CheckpointID, bytes] | None = {
            record.checkpoint_id: unsealed_own(record.body) for record in records[1:]
        } or None
        top_body = unsealed_own(top.body)
        # This handle's own records, built just now: on a keyed handle, framed for their seals.
        incoming = self._bodies.decode_checkpoint(
            top_body, checkpoint_id=top.checkpoint_id, nested=incoming_nested, sealed=self._sealed
        )
        if not self._codec.same_value(existing, incoming):
            raise CheckpointConflictError(top.checkpoint_id)
