"""The worked example of docs/backends.md: a complete storage in one small module.

``DictBackend`` implements the primitives (storages/backend.py) over dicts shared by every handle
from ``new_handle()``; a lock makes each primitive one atomic step, as a transaction or a script
would on a real backend. It declares ``signature_filter``, ``ancestry``, ``list_workflows``,
``raw_access`` and ``shared``; ``FencedDictBackend`` adds ``fencing``, whose fenced save makes the
same one write as a plain save (``DictBackend._insert``). ``DictCheckpointStorage`` is the engine
over the fenced one, with the constructor a user calls, and passes every conformance clause its
capabilities make applicable (tests/test_examples_backend.py runs the kit on it, and the README's
pytest snippet uses it as ``MyStorage``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self

from storages.backend import (
    Backend,
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    latest_record,
    rivals_of,
)
from storages.contract import Capability, CheckpointID
from storages.engine import CheckpointStore


@dataclass
class Tables:
    """The store: what a database would keep in tables."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    records: dict[CheckpointID, tuple[int, CheckpointRecord]] = field(default_factory=dict)
    """id -> (sequence, record); the sequence is per workflow and never reused."""
    sequences: dict[str, int] = field(default_factory=dict)
    """workflow name -> last sequence handed out (kept after deletes: latest stays commit order)."""


class DictBackend(Backend):
    """Checkpoints in process memory, in a handful of primitives."""

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,  # latest/list_bodies/list_ids honour graph_signature_hash
            Capability.ANCESTRY,  # walk
            Capability.LIST_WORKFLOWS,  # workflow_names
            Capability.RAW_ACCESS,  # overwrite_body
            Capability.SHARED,  # new_handle() reaches the same Tables
        }
    )

    def __init__(self, tables: Tables | None = None) -> None:
        self.tables = tables if tables is not None else Tables()

    def describe(self) -> str:
        return "dict://"

    def new_handle(self) -> Self:
        return type(self)(self.tables)  # another handle on the same store

    # ---------------------------------------------------------------- core primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self.tables.lock:
            return self._insert(records[0])  # no ``nested``: a save is one record

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        # The index entry with the body lets the engine check the body against it.
        with self.tables.lock:
            found = self.tables.records.get(checkpoint_id)
        return None if found is None else _stored(found[1])

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        # The newest commit resolved through the lineage (a checkpoint saved after one naming it
        # as previous is not the latest): latest_record applies the rule to the workflow's rows.
        rows = self._rows(workflow_name, None)
        head = latest_record(rows, graph_signature_hash)
        if head is None:
            return None
        # Checkpoints continuing the head's previous one that nothing continues (parallel steps)
        # are its rivals: the engine resumes from the newest timestamp among them.
        return replace(_stored(head), rivals=[_stored(rival) for rival in rivals_of(rows, head)])

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [_stored(record) for record in self._rows(workflow_name, graph_signature_hash)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return [record.checkpoint_id for record in self._rows(workflow_name, graph_signature_hash)]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.tables.lock:
            return self.tables.records.pop(checkpoint_id, None) is not None

    # ---------------------------------------------------------------- one per capability

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        with self.tables.lock:  # one atomic read, as one recursive query would be
            current: CheckpointID | None = checkpoint_id
            while current is not None and current not in links and len(links) < max_depth:
                found = self.tables.records.get(current)
                if found is None:
                    break  # a dangling link: the engine reports MISSING (this store never prunes)
                record = found[1]
                links[current] = record.previous_checkpoint_id
                if with_bodies:
                    bodies[current] = record.body
                current = record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset())

    async def workflow_names(self) -> list[str]:
        with self.tables.lock:
            return sorted({record.workflow_name for _, record in self.tables.records.values()})

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        tables = self.tables
        with tables.lock:
            found = tables.records.get(checkpoint_id)
            if found is None:
                return False
            sequence, old = found
            # The stored digest stays: it records what was saved, so a re-save still compares.
            tables.records[checkpoint_id] = (sequence, _with_body(old, body))
        return True

    # ---------------------------------------------------------------- helpers

    def _insert(self, record: CheckpointRecord) -> InsertResult:
        """The one write of a save, plain or fenced (lock held): a change to what a save stores
        (a field, the numbering, the duplicate check) is made here once."""
        tables = self.tables
        existing = tables.records.get(record.checkpoint_id)
        if existing is not None:
            # Same body: a no-op; another body: the engine compares contents, then conflicts.
            return InsertResult.of_stored_digest(existing[1].digest, record)
        sequence = tables.sequences.get(record.workflow_name, 0) + 1
        tables.sequences[record.workflow_name] = sequence
        tables.records[record.checkpoint_id] = (sequence, record)
        return InsertResult.INSERTED

    def _rows(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointRecord]:
        with self.tables.lock:
            return self._rows_held(workflow_name, graph_signature_hash)

    def _rows_held(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointRecord]:
        """The workflow's records in ascending sequence (lock held)."""
        rows = [
            (sequence, record)
            for sequence, record in self.tables.records.values()
            if record.workflow_name == workflow_name
            and graph_signature_hash in (None, record.graph_signature_hash)
        ]
        rows.sort(key=lambda row: row[0])
        return [record for _, record in rows]


class FencedDictBackend(DictBackend):
    """:class:`DictBackend` with ``fencing``: the fence decides, in the same atomic step, whether
    a save reaches the one write ``insert`` makes; nothing of the save is written twice."""

    capabilities = DictBackend.capabilities | {Capability.FENCING}

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        with self.tables.lock:  # the check and the write in one step, as one transaction would be
            head = latest_record(self._rows_held(record.workflow_name, None))
            latest = None if head is None else head.checkpoint_id
            # A stored id goes on to the write, which compares it and writes nothing: the engine
            # tells a retry of a save that won from a stale writer.
            if latest != expected_latest_id and record.checkpoint_id not in self.tables.records:
                return FenceCheck(latest, None)
            return FenceCheck.after_insert(latest, self._insert(record))


def _stored(record: CheckpointRecord) -> StoredBody:
    return StoredBody(record.checkpoint_id, record.body, entry=record.index_entry())


def _with_body(record: CheckpointRecord, body: bytes) -> CheckpointRecord:
    return record.replaced(body=body, digest=record.digest)


class DictCheckpointStorage(CheckpointStore[FencedDictBackend]):
    """The storage users construct: the engine over a fresh :class:`FencedDictBackend` (or
    ``tables``)."""

    def __init__(self, *, tables: Tables | None = None, **options: Any) -> None:
        super().__init__(FencedDictBackend(tables), **options)  # codec=, allowed_checkpoint_types=, ...
