"""Pending writes (capability ``pending_writes``), built on the core primitives alone: each
``put_writes`` call is one record in an internal workflow (the log), whose id is derived from its
content, so the call is as atomic as ``_insert`` and a retry is an idempotent re-insert."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import ormsgpack

from ..contract import (
    CHECKPOINT_VERSION,
    Capability,
    CheckpointID,
    PendingWrite,
    WorkflowCheckpoint,
    is_plain_identifier,
    validate_identifier,
)
from ..errors import CheckpointCorruptedError
from ..records import WRITES_LOG_PREFIX, CheckpointRecord, filed_under
from .parts import HandleParts
from .validation import checked_writes


class PendingWritesLog:
    """put_writes / list_writes / delete_writes, and what prune and delete_workflow owe the log."""

    __slots__ = ("_parts",)

    def __init__(self, parts: HandleParts) -> None:
        self._parts = parts

    async def put_writes(
        self, checkpoint_id: CheckpointID, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None:
        """Store writes made against checkpoint ``checkpoint_id`` of ``workflow_name``, all or none.

        Per (task_id, index), the first write stored is kept, except at a negative index (a
        special channel), where the latest replaces it; repeating a call changes nothing.
        """
        if Capability.PENDING_WRITES not in self._parts.capabilities:
            self._parts.require(Capability.PENDING_WRITES, "put_writes")
        # validate_identifier decides whatever is not plainly valid (validation.check_fields).
        validate_identifier(checkpoint_id, "checkpoint_id")
        validate_identifier(workflow_name, "workflow_name")
        batch: list[PendingWrite] = list(writes)
        # A plainly valid, plain batch (LangGraph's every one) is checked, keyed and given its
        # rows in one pass; any other is checked by checked_writes (which raises at a bad write).
        plain_rows = _plain_rows(batch, check=True) if batch else None
        if plain_rows is None:
            batch = checked_writes(batch)
        await self._parts.lifecycle.ensure("put_writes")
        if not batch:
            return
        # One record per call is what makes the call atomic on every backend: each primitive
        # is. Its id is derived from its content, so a retried call is an idempotent re-insert.
        if plain_rows is None:
            plain_rows = _plain_rows(batch)
        if plain_rows is None:
            log = writes_log_name(workflow_name)
            rows = _batch_rows(batch)
            draft = _writes_batch(log, checkpoint_id, "", batch, rows)
            batch_id = _writes_batch_id(
                log, checkpoint_id, "body:" + _batch_body_digest(self._parts.codec.encode_checkpoint(draft))
            )
            body = self._parts.codec.encode_checkpoint_fields(
                WorkflowCheckpoint, _writes_batch_fields(log, checkpoint_id, batch_id, rows)
            )
            record = CheckpointRecord(batch_id, log, None, checkpoint_id, body)
        else:
            record = self._plain_batch_record(checkpoint_id, workflow_name, *plain_rows)
        # An existing id means this very batch is stored already (or an equal one encoded
        # differently): the reading rule makes either harmless, so there is nothing to compare.
        # A keyed handle signs it like any record (a root: no chain link, no round trip).
        sealer = self._parts.sealer
        if sealer is not None:
            (record,) = await sealer.seal_records([record])
        await self._parts.backend.insert((record,))

    async def put_task_writes(
        self,
        checkpoint_id: CheckpointID,
        task_id: str,
        task_path: str,
        writes: list[tuple[int, str, Any]],
        workflow_name: str,
    ) -> None:
        """``put_writes(checkpoint_id, [PendingWrite(task_id, index, channel, value, task_path)
        for index, channel, value in writes], workflow_name=workflow_name)``: the same batch, under
        the same id, without building the PendingWrites (StorageSaver's every call: one task's
        writes). Anything that is not plainly valid and plain goes through put_writes, whose
        checks decide (and raise)."""
        plain_rows = _plain_task_rows(task_id, task_path, writes)
        if (
            plain_rows is None
            or Capability.PENDING_WRITES not in self._parts.capabilities
            or not is_plain_identifier(checkpoint_id)
            or not is_plain_identifier(workflow_name)
        ):
            batch = [
                PendingWrite(task_id, index, channel, value, task_path) for index, channel, value in writes
            ]
            await self.put_writes(checkpoint_id, batch, workflow_name=workflow_name)
            return
        await self._parts.lifecycle.ensure("put_writes")
        record = self._plain_batch_record(checkpoint_id, workflow_name, *plain_rows)
        sealer = self._parts.sealer
        if sealer is not None:
            (record,) = await sealer.seal_records([record])
        await self._parts.backend.insert((record,))

    def _plain_batch_record(
        self, checkpoint_id: CheckpointID, workflow_name: str, packed: bytes, rows: list[list[Any]]
    ) -> CheckpointRecord:
        """The record of a plain batch (:func:`_plain_rows`), before any seal."""
        log = writes_log_name(workflow_name)
        batch_id = _plain_batch_id(log, checkpoint_id, packed)
        # A plain batch's exact types are checked: its bin values are all bytes. The fields, not
        # a WorkflowCheckpoint built to be read back: the same body.
        body = self._parts.codec.encode_checkpoint_fields(
            WorkflowCheckpoint,
            _writes_batch_fields(log, checkpoint_id, batch_id, rows),
            bin_from_bytes_only=True,
        )
        # Positional (a keyword call costs a third more): the batch's id, the log, no previous
        # id, the owner in the graph-signature column (filed_under), the body and its digest.
        return CheckpointRecord(batch_id, log, None, checkpoint_id, body)

    async def list_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> list[PendingWrite]:
        """The writes stored against a checkpoint, one per (task_id, index), in the order their
        (task_id, index) was first stored."""
        if Capability.PENDING_WRITES not in self._parts.capabilities:
            self._parts.require(Capability.PENDING_WRITES, "list_writes")
        validate_identifier(checkpoint_id, "checkpoint_id")
        validate_identifier(workflow_name, "workflow_name")
        await self._parts.lifecycle.ensure("list_writes")
        log = writes_log_name(workflow_name)
        sealer = self._parts.sealer
        merged: dict[tuple[str, int], PendingWrite] = {}
        for stored in await self._parts.backend.list_bodies(log, checkpoint_id, include_nested=False):
            if sealer is not None:
                stored = sealer.open(stored)[0]
            _merge(merged, _batch_writes(self._parts.reader.decode(stored, log, None, checkpoint_id)))
        return list(merged.values())

    async def list_workflow_writes(self, *, workflow_name: str) -> dict[CheckpointID, list[PendingWrite]]:
        """Every checkpoint's writes in a workflow, read at once: checkpoint id -> what
        :meth:`list_writes` returns for it (checkpoints without writes are absent). One read of
        the workflow's log instead of one per checkpoint, for a caller listing a whole history."""
        if Capability.PENDING_WRITES not in self._parts.capabilities:
            self._parts.require(Capability.PENDING_WRITES, "list_workflow_writes")
        validate_identifier(workflow_name, "workflow_name")
        await self._parts.lifecycle.ensure("list_workflow_writes")
        log = writes_log_name(workflow_name)
        sealer = self._parts.sealer
        merged: dict[CheckpointID, dict[tuple[str, int], PendingWrite]] = {}
        for stored in await self._parts.backend.list_bodies(log, None, include_nested=False):
            if sealer is not None:
                stored = sealer.open(stored)[0]
            # The owner the body names; _decode checks it against the index entry where there is one.
            batch = self._parts.reader.decode(stored, log)
            _merge(merged.setdefault(filed_under(batch), {}), _batch_writes(batch))
        return {owner: list(writes.values()) for owner, writes in merged.items()}

    async def delete_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> int:
        """Delete every write stored against a checkpoint; returns how many batches were deleted."""
        self._parts.require(Capability.PENDING_WRITES, "delete_writes")
        validate_identifier(checkpoint_id, "checkpoint_id")
        validate_identifier(workflow_name, "workflow_name")
        await self._parts.ready("delete_writes")
        removed = 0
        for batch_id in await self._parts.backend.list_ids(
            writes_log_name(workflow_name), checkpoint_id, include_nested=False
        ):
            removed += await self._parts.backend.remove(batch_id)
        return removed

    async def drop_writes_of_pruned(self, workflow_name: str) -> None:
        # The log is read before the survivors: a checkpoint saved meanwhile is a survivor, and
        # a batch stored meanwhile is not in the snapshot, so neither loses its writes.
        log = writes_log_name(workflow_name)
        batches = await self._parts.backend.list_bodies(log, None, include_nested=False)
        if not batches:
            return
        # Every checkpoint of the workflow still stored keeps its writes, an embedded one too
        # (its container was kept): only writes of records no longer stored are dropped.
        survivors = set(await self._parts.backend.list_ids(workflow_name, None, include_nested=True))
        sealer = self._parts.sealer
        for stored in batches:
            opened = stored if sealer is None else sealer.open(stored)[0]
            owner = filed_under(self._parts.reader.decode(opened, log))
            if owner not in survivors:
                await self._parts.backend.remove(stored.checkpoint_id)


_WRITES_BATCH_TIMESTAMP = "1970-01-01T00:00:00+00:00"
"""Every write batch carries this timestamp, so equal batches encode to equal bodies."""


def writes_log_name(workflow_name: str) -> str:
    """The internal workflow holding ``workflow_name``'s pending writes, one record per batch,
    indexed by the owning checkpoint's id in the graph-signature column."""
    return WRITES_LOG_PREFIX + workflow_name


def is_writes_log_name(name: str) -> bool:
    return name.startswith(WRITES_LOG_PREFIX)


def _batch_body_digest(body: bytes) -> str:
    """BLAKE2b-128 of a batch's body, part of its id. Frozen, unlike records.body_digest: the id
    must come out the same for a call retried under another release, or the retry would store
    its batch twice."""
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def _writes_batch_id(log: str, owner_id: CheckpointID, content_key: str) -> CheckpointID:
    key = "\x00".join((log, owner_id, content_key)).encode("utf-8", "surrogatepass")
    return f"\x1fw\x1f{hashlib.blake2b(key, digest_size=16).hexdigest()}"


def _plain_batch_id(log: str, owner_id: CheckpointID, packed: bytes) -> CheckpointID:
    """The id of a plain batch whose rows msgpack packs to ``packed`` (:func:`_plain_rows`).

    One digest over the names and the packed rows, where the codec's path digests its body first
    and then the names with that digest: a plain batch's two digests were a fifth of a LangGraph
    put_writes. The "rows:" part keeps the two domains apart (an owner id is printable, so the
    NULs split the input one way only)."""
    key = "\x00".join((log, owner_id, "rows:")).encode("utf-8", "surrogatepass")
    return f"\x1fw\x1f{hashlib.blake2b(key + packed, digest_size=16).hexdigest()}"


_PLAIN_VALUE_ATOMS = frozenset({str, bytes, int, float, bool, type(None)})
"""Value types whose msgpack form tells them apart (str from bytes, bool from int, ...) and that
the codec stores as themselves, so equal msgpack means equal stored content."""

_PLAIN_FIELD_TYPES = (str, int, str, str)
"""Exact types of a write's task_id, index, channel and task_path on the codec-free path."""


def _plain_rows_key(writes: Sequence[PendingWrite]) -> bytes | None:
    """The content key of :func:`_plain_rows` (its packed rows), or None."""
    plain = _plain_rows(writes)
    return None if plain is None else plain[0]


def _plain_rows(writes: Sequence[Any], *, check: bool = False) -> tuple[bytes, list[list[Any]]] | None:
    """The batch's content packed without the codec, when every field is a plain atom and
    every value an atom or a list of atoms (LangGraph's ``[type, bytes]`` pairs), with the batch's
    body rows (:func:`_batch_rows`), built in the same pass; else None.

    It names the batch (:func:`_plain_batch_id`) as a digest of its encoded body would (distinct
    content, distinct key), for one encode instead of two. Exact types only: a subclass (a str
    subclass, an IntEnum, a tuple) may be encoded otherwise by the codec while msgpack would not
    tell it apart.

    ``check``: ``writes`` are not checked yet; None also when any write is not plainly what
    ``checked_writes`` accepts (an exact PendingWrite, a plainly valid task id, a non-empty
    channel), so that its checks decide. A batch this passes, checked_writes would pass too."""
    atoms = _PLAIN_VALUE_ATOMS
    key_rows: list[tuple[Any, ...]] = []
    body_rows: list[list[Any]] = []
    checked_task_id: Any = None
    for write in writes:
        if check and type(write) is not PendingWrite:
            return None
        task_id, index, channel, task_path, value = (
            write.task_id,
            write.index,
            write.channel,
            write.task_path,
            write.value,
        )
        if (type(task_id), type(index), type(channel), type(task_path)) != _PLAIN_FIELD_TYPES:
            return None
        if check:
            # A call's writes are one task's: its id is checked once (as checked_writes does).
            if task_id is not checked_task_id:
                if not is_plain_identifier(task_id):
                    return None
                checked_task_id = task_id
            if not channel:
                return None
        if not _is_plain_value(value, atoms):
            return None
        key_rows.append((task_id, index, channel, task_path, value))
        body_rows.append([task_id, index, channel, value, task_path])
    return _packed_rows(key_rows, body_rows)


def _is_plain_value(value: Any, atoms: frozenset[object]) -> bool:
    """An atom, or a list of atoms (LangGraph's ``[type, bytes]`` pairs), by exact type."""
    if type(value) is list:
        return all(type(item) in atoms for item in value)
    return type(value) in atoms


def _packed_rows(
    key_rows: list[tuple[Any, ...]], body_rows: list[list[Any]]
) -> tuple[bytes, list[list[Any]]] | None:
    try:
        packed = ormsgpack.packb(key_rows)
    except (TypeError, ormsgpack.MsgpackEncodeError):
        return None  # an int beyond 64 bits, a lone surrogate: the codec's path decides
    return packed, body_rows


def _plain_task_rows(
    task_id: Any, task_path: Any, writes: list[tuple[int, str, Any]]
) -> tuple[bytes, list[list[Any]]] | None:
    """What ``_plain_rows([PendingWrite(task_id, index, channel, value, task_path) for index,
    channel, value in writes], check=True)`` returns (the same packed rows, so the same batch id),
    from the fields themselves; None where it would be None, and for no writes."""
    if not (writes and type(task_path) is str and is_plain_identifier(task_id)):
        return None
    atoms = _PLAIN_VALUE_ATOMS
    key_rows: list[tuple[Any, ...]] = []
    body_rows: list[list[Any]] = []
    for index, channel, value in writes:
        if type(index) is not int or type(channel) is not str or not channel:
            return None
        if not _is_plain_value(value, atoms):
            return None
        key_rows.append((task_id, index, channel, task_path, value))
        body_rows.append([task_id, index, channel, value, task_path])
    return _packed_rows(key_rows, body_rows)


def _batch_rows(writes: Sequence[PendingWrite]) -> list[list[Any]]:
    """A batch body's rows: task id, index, channel, value, task path."""
    return [[write.task_id, write.index, write.channel, write.value, write.task_path] for write in writes]


def _writes_batch(
    log: str,
    owner_id: CheckpointID,
    batch_id: CheckpointID,
    writes: Sequence[PendingWrite],
    rows: list[list[Any]] | None = None,
) -> WorkflowCheckpoint:
    """The batch as the record stored; ``rows``, when given, are ``_batch_rows(writes)``."""
    if rows is None:
        rows = _batch_rows(writes)
    # Positional, in field order (a keyword call with its default factories costs twice as much).
    return WorkflowCheckpoint(*_writes_batch_fields(log, owner_id, batch_id, rows))


def _writes_batch_fields(
    log: str, owner_id: CheckpointID, batch_id: CheckpointID, rows: list[list[Any]]
) -> tuple[Any, ...]:
    """The batch record's field values, in field order: the log, the owner in the signature
    (filed_under), no previous id, no messages, the rows as state, no events, iteration 0, no
    metadata."""
    return (
        log,
        owner_id,
        batch_id or owner_id,
        None,
        _WRITES_BATCH_TIMESTAMP,
        {},
        {"writes": rows},
        {},
        0,
        {},
        CHECKPOINT_VERSION,
    )


def _merge(merged: dict[tuple[str, int], PendingWrite], writes: list[PendingWrite]) -> None:
    """The reading rule: per (task_id, index) the first write kept, a special channel's latest."""
    for write in writes:
        key = (write.task_id, write.index)
        if key not in merged or write.replaces_earlier:
            merged[key] = write


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
