"""The operations beyond MAF's six, each gated by its capability: ancestry walks, nested
listing, retention, workflow listing, inspection and raw access. Each validates its arguments,
then calls the capability's primitives (backend.py's ``CAPABILITY_PRIMITIVES``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ..backend import implements
from ..contract import AncestryWalk, Capability, CheckpointID, CheckpointInfo, validate_identifier
from ..errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointTamperedError,
    InvalidCheckpointError,
    InvalidCheckpointIdError,
)
from ..integrity import Seal, TamperKind
from ..records import Leftover, StoredBody, as_asked, body_digest, is_engine_log_name, listed_ids
from .parts import HandleParts
from .receipts import PruneReceipts, receipts_log_name
from .walk import LARGEST_BACKEND_INT, assemble_walk, check_max_depth, check_walk_chain
from .writes import PendingWritesLog, writes_log_name


def listed_workflow_name(name: object) -> str:
    """A workflow name the store lists, checked: a name no caller could have saved under (not
    UTF-8 text, empty, too long, a control character outside the engine's own logs) means a
    damaged or hostile store, and is reported rather than handed on to fail in a later call."""
    why = (
        "list_workflows read it from the store, which holds a name no storage writes "
        "(a damaged or hostile store)"
    )
    if isinstance(name, (bytes, bytearray, memoryview)):  # a driver's undecoded text (SQL_ASCII)
        raw = bytes(name)
        try:
            name = raw.decode()
        except UnicodeDecodeError:
            raise InvalidCheckpointIdError("workflow_name", raw, f"is not UTF-8 text: {why}") from None
    if isinstance(name, str) and is_engine_log_name(name):
        return name
    try:
        return validate_identifier(name, "workflow_name")
    except InvalidCheckpointIdError as exc:
        raise InvalidCheckpointIdError("workflow_name", name, f"{exc.reason}: {why}") from None


class Extensions:
    """walk_ancestry ... write_raw_body, on top of the backend's primitives. The storage checks
    nothing before it calls these: each validates its own arguments."""

    __slots__ = ("_parts", "_receipts", "_writes")

    def __init__(self, parts: HandleParts, receipts: PruneReceipts, writes: PendingWritesLog) -> None:
        self._parts = parts
        self._receipts = receipts
        self._writes = writes

    async def walk_ancestry(self, checkpoint_id: CheckpointID, max_depth: int) -> AncestryWalk[Any]:
        """Checkpoints from ``checkpoint_id`` back to its root, newest first.

        The result's ``end`` says why the walk stopped; it never loops and never skips a record.
        """
        self._parts.require(Capability.ANCESTRY, "walk_ancestry")
        validate_identifier(checkpoint_id, "checkpoint_id")
        check_max_depth(max_depth)
        await self._parts.ready("walk_ancestry")
        records = await self._parts.backend.walk(
            checkpoint_id, min(max_depth, LARGEST_BACKEND_INT), with_bodies=True
        )
        ids = assemble_walk(checkpoint_id, records, max_depth)
        seals: dict[CheckpointID, Seal | None] = {}
        sealer = self._parts.sealer
        if sealer is not None:
            records, seals = sealer.open_walk(records)
        items: list[Any] = []
        for item_id in ids.items:
            body = records.bodies.get(item_id)
            if body is None:
                raise CheckpointCorruptedError(item_id, "the ancestry walk reached it but read no body")
            item = self._parts.reader.decode(StoredBody(item_id, body), None, records.bodies)
            indexed_previous = records.links[item_id]
            if item.previous_checkpoint_id != indexed_previous:
                reason = (
                    f"indexed with previous id {indexed_previous!r} but its body says "
                    f"{item.previous_checkpoint_id!r}"
                )
                if sealer is not None:
                    raise CheckpointTamperedError(item_id, TamperKind.INDEX_MISMATCH, reason)
                raise CheckpointCorruptedError(item_id, reason)
            items.append(item)
        if sealer is not None:
            check_walk_chain(ids, records.links, seals)
            ids = await self._receipts.vouched_walk(ids, seals)
        return AncestryWalk(tuple(items), ids.end, ids.end_id)

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, max_depth: int
    ) -> AncestryWalk[CheckpointID]:
        """Ids from ``checkpoint_id`` back to its root, newest first; decodes no bodies."""
        self._parts.require(Capability.ANCESTRY, "walk_ancestry_ids")
        validate_identifier(checkpoint_id, "checkpoint_id")
        check_max_depth(max_depth)
        await self._parts.ready("walk_ancestry_ids")
        records = await self._parts.backend.walk(
            checkpoint_id, min(max_depth, LARGEST_BACKEND_INT), with_bodies=False
        )
        walk = assemble_walk(checkpoint_id, records, max_depth)
        listed_ids(list(walk.items), f"the ancestry of {checkpoint_id!r}")
        return walk

    async def list_nested(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        """Ids of the checkpoints embedded directly in ``checkpoint_id``, in the order met."""
        self._parts.require(Capability.NESTED, "list_nested")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._parts.ready("list_nested")
        nested = await self._parts.backend.nested_ids(checkpoint_id)
        if nested is None:
            raise CheckpointNotFoundError(checkpoint_id)
        return listed_ids(nested, f"the nested index of {checkpoint_id!r}")

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        """Delete all but the newest ``keep_last`` checkpoints of a workflow (with their nested
        records), leaving a tombstone for each deleted id; returns how many were deleted. A keyed
        handle first signs a receipt for each (engine/receipts.py), so that its tombstones are
        told from forged ones."""
        self._parts.require(Capability.PRUNE, "prune")
        validate_identifier(workflow_name, "workflow_name")
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
            raise InvalidCheckpointError(
                f"keep_last must be an int >= 0, got {keep_last!r}", field="keep_last"
            )
        await self._parts.ready("prune")
        self._forget_chain()
        pruned = await self._receipts.receipted_prune(workflow_name, min(keep_last, LARGEST_BACKEND_INT))
        if Capability.PENDING_WRITES in self._parts.capabilities:
            await self._writes.drop_writes_of_pruned(workflow_name)
        return pruned

    async def delete_workflow(self, workflow_name: str) -> int:
        """Delete every checkpoint of a workflow, their nested records and the workflow's
        tombstones; returns how many checkpoints were deleted."""
        self._parts.require(Capability.PRUNE, "delete_workflow")
        validate_identifier(workflow_name, "workflow_name")
        await self._parts.ready("delete_workflow")
        self._forget_chain()
        backend = self._parts.backend
        if Capability.PENDING_WRITES in self._parts.capabilities:
            # Writes first: an interrupted delete leaves checkpoints without writes (their tasks
            # run again), never writes that a reused id would pick up.
            await backend.delete_workflow(writes_log_name(workflow_name))
        deleted = await backend.delete_workflow(workflow_name)
        await backend.delete_workflow(
            receipts_log_name(workflow_name)
        )  # after: no tombstone outlives its receipt
        return deleted

    async def list_workflows(self) -> list[str]:
        """Names of every workflow with a stored top-level checkpoint, sorted."""
        self._parts.require(Capability.LIST_WORKFLOWS, "list_workflows")
        await self._parts.ready("list_workflows")
        names = [listed_workflow_name(name) for name in await self._parts.backend.workflow_names()]
        return sorted(name for name in names if not is_engine_log_name(name))

    async def checkpoint_info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        """The index entry of one stored record (nested ones too), or None."""
        self._parts.require(Capability.INSPECT, "checkpoint_info")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._parts.ready("checkpoint_info")
        info = await self._parts.backend.info(checkpoint_id)
        if info is not None and info.checkpoint_id != checkpoint_id:
            raise CheckpointCorruptedError(
                checkpoint_id,
                f"the backend answered checkpoint_info({checkpoint_id!r}) with the entry of "
                f"{info.checkpoint_id!r} (ids are compared exactly, character for character)",
            )
        return info

    async def list_records(self, workflow_name: str | None) -> list[CheckpointInfo]:
        """Index entries of every stored record (or one workflow's), nested ones included, in
        workflow then sequence order. Decodes no bodies."""
        self._parts.require(Capability.INSPECT, "list_records")
        if workflow_name is not None:
            validate_identifier(workflow_name, "workflow_name")
        await self._parts.ready("list_records")
        records = [
            info
            for info in await self._parts.backend.records(workflow_name)
            if not is_engine_log_name(info.workflow_name)
        ]
        return sorted(records, key=lambda info: (info.workflow_name, info.sequence))

    async def iter_records(self, page_size: int) -> AsyncIterator[CheckpointInfo]:
        """Index entries of every stored record, nested ones included, in no stated order, read
        ``page_size`` at a time where the backend pages its index (``records_after``)."""
        self._parts.require(Capability.INSPECT, "iter_records")
        if type(page_size) is not int or page_size < 1:
            raise InvalidCheckpointError(
                f"page_size must be an int >= 1, got {page_size!r}", field="page_size"
            )
        await self._parts.ready("iter_records")
        backend = self._parts.backend
        if not implements(type(backend), "records_after"):
            for info in await backend.records(None):
                if not is_engine_log_name(info.workflow_name):
                    yield info
            return
        after: CheckpointID | None = None
        page_ends: set[CheckpointID] = set()
        while True:
            page = await backend.records_after(after, page_size)
            for info in page:
                if not is_engine_log_name(info.workflow_name):
                    yield info
            if len(page) < page_size:
                return
            after = page[-1].checkpoint_id
            if after in page_ends:  # a page the read already had: it would never end
                raise CheckpointCorruptedError(after, "the index's pages do not advance past this id")
            page_ends.add(after)

    async def list_tombstones(self, workflow_name: str | None) -> list[CheckpointID]:
        """Ids pruned from the storage (or from one workflow), sorted."""
        self._parts.require(Capability.INSPECT, "list_tombstones")
        if workflow_name is not None:
            validate_identifier(workflow_name, "workflow_name")
        await self._parts.ready("list_tombstones")
        return sorted(await self._parts.backend.tombstones(workflow_name))

    async def list_leftovers(self, workflow_name: str | None) -> list[Leftover]:
        """What faults left in the store that no operation clears by itself (backends that find
        none report none)."""
        self._parts.require(Capability.INSPECT, "list_leftovers")
        if workflow_name is not None:
            validate_identifier(workflow_name, "workflow_name")
        await self._parts.ready("list_leftovers")
        return list(await self._parts.backend.leftovers(workflow_name))

    async def repair_leftover(self, leftover: Leftover) -> str | None:
        """Remove one repairable leftover; what was done, or None if there was nothing to do."""
        self._parts.require(Capability.INSPECT, "repair_leftover")
        if not leftover.repairable:
            return None
        await self._parts.ready("repair_leftover")
        return await self._parts.backend.repair_leftover(leftover)

    async def read_raw_body(self, checkpoint_id: CheckpointID) -> bytes | None:
        """The stored bytes of a checkpoint, or None; for verify tooling and the kit."""
        self._parts.require(Capability.RAW_ACCESS, "read_raw_body")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._parts.ready("read_raw_body")
        stored = as_asked(await self._parts.backend.load(checkpoint_id), checkpoint_id)
        return None if stored is None else stored.body

    async def write_raw_body(self, checkpoint_id: CheckpointID, body: bytes) -> None:
        """Overwrite the stored bytes of an existing checkpoint, bypassing the codec.

        For repair tools and for the kit's corruption clauses; never needed in normal use.
        """
        self._parts.require(Capability.RAW_ACCESS, "write_raw_body")
        validate_identifier(checkpoint_id, "checkpoint_id")
        await self._parts.ready("write_raw_body")
        raw = bytes(body)
        if not await self._parts.backend.overwrite_body(checkpoint_id, raw, body_digest(raw)):
            raise CheckpointNotFoundError(checkpoint_id)

    def _forget_chain(self) -> None:
        if self._parts.sealer is not None:
            self._parts.sealer.forget()
