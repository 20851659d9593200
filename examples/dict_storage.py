"""The worked example of docs/backends.md: a complete storage in one small module.

Records live in dicts shared by every handle from ``new_handle()``; a lock makes each primitive
one atomic step, as a transaction or a script would on a real backend. It declares
``signature_filter``, ``ancestry``, ``list_workflows``, ``raw_access`` and ``shared``, and
passes every conformance clause those capabilities make applicable (tests/test_examples_backend.py
runs the kit on it, and the README's pytest snippet uses it as ``MyStorage``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from storages.backend import CheckpointRecord, InsertResult, StoredBody, WalkRecords
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


class DictCheckpointStorage(CheckpointStore):
    """Checkpoints in process memory, in a handful of primitives."""

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,  # _latest/_list/_list_ids honour graph_signature_hash
            Capability.ANCESTRY,  # _walk
            Capability.LIST_WORKFLOWS,  # _workflow_names
            Capability.RAW_ACCESS,  # _overwrite_body
            Capability.SHARED,  # new_handle() reaches the same Tables
        }
    )

    def __init__(self, *, tables: Tables | None = None, **options: Any) -> None:
        super().__init__(**options)  # codec=, allowed_checkpoint_types=, integrity_key=, ...
        self._tables = tables if tables is not None else Tables()

    def _handle_overrides(self) -> Mapping[str, Any]:
        # The engine's new_handle() rebuilds this class from its constructor arguments; only the
        # store itself must be the same object rather than a fresh one.
        return {"tables": self._tables}

    # ---------------------------------------------------------------- core primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        tables = self._tables
        with tables.lock:
            existing = tables.records.get(record.checkpoint_id)
            if existing is not None:
                return existing[1].digest  # the engine compares it: a no-op or a conflict
            sequence = tables.sequences.get(record.workflow_name, 0) + 1
            tables.sequences[record.workflow_name] = sequence
            tables.records[record.checkpoint_id] = (sequence, record)
        return None

    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        with self._tables.lock:
            found = self._tables.records.get(checkpoint_id)
        return None if found is None else found[1].body

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        # Optional: returning the index entry lets the engine check the body against it.
        with self._tables.lock:
            found = self._tables.records.get(checkpoint_id)
        return None if found is None else _stored(found[1])

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self._rows(workflow_name, graph_signature_hash)
        return _stored(rows[-1]) if rows else None

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [_stored(record) for record in self._rows(workflow_name, graph_signature_hash)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return [record.checkpoint_id for record in self._rows(workflow_name, graph_signature_hash)]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self._tables.lock:
            return self._tables.records.pop(checkpoint_id, None) is not None

    # ---------------------------------------------------------------- one per capability

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        with self._tables.lock:  # one atomic read, as one recursive query would be
            current: CheckpointID | None = checkpoint_id
            while current is not None and current not in links and len(links) < max_depth:
                found = self._tables.records.get(current)
                if found is None:
                    break  # a dangling link: the engine reports MISSING (this store never prunes)
                record = found[1]
                links[current] = record.previous_checkpoint_id
                if with_bodies:
                    bodies[current] = record.body
                current = record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset())

    async def workflow_names(self) -> list[str]:
        with self._tables.lock:
            return sorted({record.workflow_name for _, record in self._tables.records.values()})

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        tables = self._tables
        with tables.lock:
            found = tables.records.get(checkpoint_id)
            if found is None:
                return False
            sequence, old = found
            # The stored digest stays: it records what was saved, so a re-save still compares.
            tables.records[checkpoint_id] = (sequence, _with_body(old, body))
        return True

    # ---------------------------------------------------------------- helpers

    def _rows(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointRecord]:
        with self._tables.lock:
            rows = [
                (sequence, record)
                for sequence, record in self._tables.records.values()
                if record.workflow_name == workflow_name
                and graph_signature_hash in (None, record.graph_signature_hash)
            ]
        rows.sort(key=lambda row: row[0])
        return [record for _, record in rows]


def _stored(record: CheckpointRecord) -> StoredBody:
    return StoredBody(record.checkpoint_id, record.body, entry=record.index_entry())


def _with_body(record: CheckpointRecord, body: bytes) -> CheckpointRecord:
    return CheckpointRecord(
        record.checkpoint_id,
        record.workflow_name,
        record.previous_checkpoint_id,
        record.graph_signature_hash,
        body,
        record.digest,
    )
