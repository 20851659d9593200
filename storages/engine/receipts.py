"""Signed prune receipts (docs/integrity.md): what lets a keyed storage tell its own prunes from a
deletion that also wrote a tombstone.

Tombstones live in each backend's index, unsigned, so anyone who can write the store can write one.
A keyed storage's prune therefore first writes, for every record it is about to prune (nested
ones too), a receipt: an ordinary record, sealed like any other, in an internal workflow beside
the pruned one, whose body names the workflow, the pruned id, its chain height, its container and
position, and its MAC. The receipt's id is derived from the pruned id and that MAC, so the record
signed after the pruned one (whose seal holds the same MAC) names its receipt: a walk or verify
that meets a tombstone reads one record by id. Every backend stores receipts with the primitives
it already has: no backend stores anything new.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence

from ..codec import CheckpointCodec
from ..contract import AncestryEnd, AncestryWalk, Capability, CheckpointID, WorkflowCheckpoint
from ..errors import CheckpointCorruptedError, CheckpointTamperedError, StorageConfigurationError
from ..integrity import Link, Seal, TamperKind, is_sealed, parse_seal
from ..records import RECEIPTS_LOG_PREFIX, CheckpointRecord, StoredBody, as_asked
from .parts import HandleParts
from .sealing import Sealer

_RECEIPT_TIMESTAMP = "1970-01-01T00:00:00+00:00"
"""Every receipt carries this timestamp, so a receipt written twice encodes to the same body."""

_WRITES_AT_ONCE = 64
"""Receipts inserted concurrently: a backend that groups commits (SQLite) writes them together."""


def receipts_log_name(workflow_name: str) -> str:
    """The internal workflow holding the receipts of ``workflow_name``'s prunes."""
    return RECEIPTS_LOG_PREFIX + workflow_name


def is_receipts_log_name(name: str) -> bool:
    return name.startswith(RECEIPTS_LOG_PREFIX)


def receipt_id(pruned_id: CheckpointID, mac: bytes) -> CheckpointID:
    """The id of the receipt for the record stored under ``pruned_id`` with ``mac``: a record
    saved again under a pruned id has another MAC, so each of its prunes has its own receipt."""
    key = pruned_id.encode("utf-8", "surrogatepass") + b"\x00" + mac
    return f"\x1fp\x1f{hashlib.blake2b(key, digest_size=16).hexdigest()}"


class PruneReceipts:
    """A keyed prune's receipts, and the check a walk or verify makes of a tombstone."""

    __slots__ = ("_parts",)

    def __init__(self, parts: HandleParts) -> None:
        self._parts = parts

    async def prune_receipt_stored(self, pruned_id: CheckpointID, signed_after: bytes) -> bool:
        """Whether anything is stored where the receipt for pruning ``pruned_id`` (with MAC
        ``signed_after``) would be, authentic or not: under a TTL, verify excuses a missing
        receipt as expired, never one that is there and does not vouch for the tombstone."""
        checkpoint_id = receipt_id(pruned_id, signed_after)
        return as_asked(await self._parts.backend.load(checkpoint_id), checkpoint_id) is not None

    async def check_prune_receipt(self, pruned_id: CheckpointID, signed_after: bytes) -> None:
        """Raise CheckpointTamperedError (``unreceipted_tombstone``) unless this storage's key
        signed a receipt for pruning the record stored under ``pruned_id`` with MAC
        ``signed_after`` (the MAC its successor's seal holds). Needs a key."""
        sealer = self._sealer("check_prune_receipt")
        checkpoint_id = receipt_id(pruned_id, signed_after)
        stored = as_asked(await self._parts.backend.load(checkpoint_id), checkpoint_id)
        if stored is None:
            raise _unreceipted(pruned_id, "no prune signed a receipt for it")
        try:
            opened, seal = sealer.open(StoredBody(checkpoint_id, stored.body))
            if seal is None:
                raise _unreceipted(pruned_id, "its receipt is not signed")
            receipt = self._parts.bodies.decode_checkpoint(
                opened.body, checkpoint_id=checkpoint_id, sealed=True
            )
        except CheckpointCorruptedError as exc:  # a CheckpointTamperedError too
            raise _unreceipted(pruned_id, f"its receipt is not authentic ({exc.reason})") from None
        state = receipt.state if isinstance(receipt.state, dict) else {}
        if state.get("pruned_id") != pruned_id or state.get("mac") != signed_after.hex():
            raise _unreceipted(pruned_id, "its receipt is for another record")

    async def receipted_prune(self, workflow_name: str, keep_last: int) -> int:
        """The backend's prune, on a keyed handle preceded by a receipt for every record it will
        prune. Receipts come first: a prune that fails after them leaves receipts for records the
        application asked to prune, never tombstones that look forged."""
        backend = self._parts.backend
        if self._parts.sealer is None:
            return await backend.prune(workflow_name, keep_last)
        stored = await backend.list_bodies(workflow_name, None, include_nested=False)
        doomed = len(stored) - min(keep_last, len(stored))
        await self._write_receipts(workflow_name, stored[:doomed], with_nested=True)
        pruned = await backend.prune(workflow_name, keep_last)
        if pruned > doomed:
            # Saves landed between the listing and the prune, which then went further back.
            survivors = set(await backend.list_ids(workflow_name, None, include_nested=False))
            further = [item for item in stored[doomed:] if item.checkpoint_id not in survivors]
            await self._write_receipts(workflow_name, further, with_nested=False)
        return pruned

    async def vouched_walk(
        self,
        walk: AncestryWalk[CheckpointID],
        seals: Mapping[CheckpointID, Seal | None],
    ) -> AncestryWalk[CheckpointID]:
        """A walk that the index says ends at a pruned record ends ``missing`` unless a receipt
        vouches for the prune of the record its last step was signed after."""
        if walk.end is not AncestryEnd.PRUNED or walk.end_id is None:
            return walk
        last = seals.get(walk.items[-1])
        if last is None or last.link_kind is not Link.PRESENT:
            return walk  # unsigned, or signed as a chain restart: no record of the chain is behind it
        try:
            await self.check_prune_receipt(walk.end_id, last.link)
        except CheckpointTamperedError:
            return AncestryWalk(walk.items, AncestryEnd.MISSING, walk.end_id)
        return walk

    async def _write_receipts(
        self, workflow_name: str, stored: Sequence[StoredBody], *, with_nested: bool
    ) -> None:
        bodies = {item.checkpoint_id: item.body for item in stored}
        if with_nested and Capability.NESTED in self._parts.capabilities:
            containers = [key for key, raw in bodies.items() if self._holds_nested_refs(key, raw)]
            if containers:
                bodies.update(await self._parts.backend.nested_bodies(containers))
        records = [
            _receipt(self._parts.codec, workflow_name, pruned_id, seal)
            for pruned_id, raw in bodies.items()
            if (seal := _seal_or_none(pruned_id, raw)) is not None
        ]
        if not records:
            return
        signed = await self._sealer("prune").seal_records(records)
        for start in range(0, len(signed), _WRITES_AT_ONCE):
            # An id already stored is this very receipt (its id names the record and its MAC).
            await asyncio.gather(
                *(self._parts.backend.insert((record,)) for record in signed[start : start + _WRITES_AT_ONCE])
            )

    def _sealer(self, operation: str) -> Sealer:
        sealer = self._parts.sealer
        if sealer is None:
            raise StorageConfigurationError(
                f"{self._parts.backend.describe()}: {operation} needs an integrity key (integrity_key= "
                "or the URL option integrity_key_env=NAME)"
            )
        return sealer

    def _holds_nested_refs(self, checkpoint_id: CheckpointID, raw: bytes) -> bool:
        try:
            body = raw[parse_seal(checkpoint_id, raw)[2] :] if is_sealed(raw) else raw
            return bool(self._parts.codec.has_nested_refs(body))
        except CheckpointCorruptedError:
            return False


def _seal_or_none(checkpoint_id: CheckpointID, raw: bytes) -> Seal | None:
    """The record's seal as stored, unchecked: a receipt vouches for the MAC a successor was
    signed after, so an edited seal only yields a receipt no successor names."""
    if not is_sealed(raw):
        return None  # unsigned (migration mode): no signed successor chains onto it
    try:
        return parse_seal(checkpoint_id, raw)[0]
    except CheckpointTamperedError:
        return None


def _receipt(
    codec: CheckpointCodec, workflow_name: str, pruned_id: CheckpointID, seal: Seal
) -> CheckpointRecord:
    log = receipts_log_name(workflow_name)
    checkpoint_id = receipt_id(pruned_id, seal.mac)
    receipt = WorkflowCheckpoint(
        workflow_name=log,
        graph_signature_hash=pruned_id,  # filed_under: the pruned record's id
        checkpoint_id=checkpoint_id,
        timestamp=_RECEIPT_TIMESTAMP,
        state={
            "workflow_name": workflow_name,
            "pruned_id": pruned_id,
            "height": seal.height,
            "container_id": seal.container_id,
            "position": seal.position,
            "mac": seal.mac.hex(),
        },
    )
    body = codec.encode_checkpoint(receipt)
    return CheckpointRecord(
        checkpoint_id=checkpoint_id,
        workflow_name=log,
        previous_checkpoint_id=None,
        graph_signature_hash=pruned_id,  # filed_under
        body=body,
    )


def _unreceipted(pruned_id: CheckpointID, why: str) -> CheckpointTamperedError:
    return CheckpointTamperedError(
        pruned_id,
        TamperKind.UNRECEIPTED_TOMBSTONE,
        f"it is tombstoned as pruned, but {why} (a deletion by a writer without the key, with a "
        "forged tombstone)",
    )


__all__ = ["PruneReceipts", "is_receipts_log_name", "receipt_id", "receipts_log_name"]
