"""The durability family passes a store that keeps data across handles and catches ones that lose it."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from conformance import BackendReport, Outcome, StorageTarget, all_clauses
from storages.backend import Backend, CheckpointRecord, InsertResult, StoredBody
from storages.contract import Capability
from storages.engine import CheckpointStore
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .support import caught_only_by, failed

FAMILY = "durability"


def run_family(storage_class: Any, *, rebuildable: bool = True, **target: Any) -> BackendReport:
    """The family against a store of ``storage_class``; the kit rebuilds it from its "settings"
    (a new object on the same disk, as a restarted process would open the same file)."""
    if isinstance(storage_class, type) and issubclass(storage_class, RowStorage):
        backend_class = storage_class
        backend = backend_class()
        root: Any = CheckpointStore(backend)
        if rebuildable:
            target["reopen"] = lambda: CheckpointStore(backend_class(backend.disk))
    else:
        root = storage_class()
        if rebuildable:
            target["reopen"] = storage_class
    subject = StorageTarget(name=storage_class.__name__, factory=root.new_handle, **target)
    return support.run_family(FAMILY, subject)


@dataclass
class _Row:
    sequence: int
    record: CheckpointRecord


@dataclass
class _Disk:
    """Stands for a database file: every handle opened on it sees the same rows."""

    rows: list[_Row] = field(default_factory=list)
    next_sequence: int = 1


class RowStorage(Backend):
    """A correct durable store: rows with a per-store sequence, shared by every handle."""

    capabilities = frozenset({Capability.DURABLE, Capability.SHARED})

    def __init__(self, disk: _Disk | None = None) -> None:
        self.disk = disk if disk is not None else _Disk()

    def new_handle(self) -> Self:
        return type(self)(self.disk)

    def _allocate_sequence(self) -> int:
        sequence = self.disk.next_sequence
        self.disk.next_sequence += 1
        return sequence

    def _visible(self) -> list[_Row]:
        return sorted(self.disk.rows, key=lambda row: row.sequence)

    def _find(self, checkpoint_id: str) -> _Row | None:
        return next((row for row in self._visible() if row.record.checkpoint_id == checkpoint_id), None)

    def _workflow(self, workflow_name: str, signature: str | None) -> list[_Row]:
        return [
            row
            for row in self._visible()
            if row.record.workflow_name == workflow_name
            and (signature is None or row.record.graph_signature_hash == signature)
        ]

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        existing = self._find(record.checkpoint_id)
        if existing is not None:
            return InsertResult.of_stored_digest(existing.record.digest, record)
        self.disk.rows.append(_Row(self._allocate_sequence(), record))
        return InsertResult.INSERTED

    async def load(self, checkpoint_id: str) -> StoredBody | None:
        row = self._find(checkpoint_id)
        return None if row is None else StoredBody(checkpoint_id, row.record.body)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self._workflow(workflow_name, graph_signature_hash)
        return StoredBody(rows[-1].record.checkpoint_id, rows[-1].record.body) if rows else None

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [
            StoredBody(r.record.checkpoint_id, r.record.body)
            for r in self._workflow(workflow_name, graph_signature_hash)
        ]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[str]:
        return [r.record.checkpoint_id for r in self._workflow(workflow_name, graph_signature_hash)]

    async def remove(self, checkpoint_id: str) -> bool:
        row = self._find(checkpoint_id)
        if row is None:
            return False
        self.disk.rows.remove(row)
        return True


class ForgetsOnReopen(InMemoryCheckpointStorage):
    """Declares durable, but every new handle starts from an empty store."""

    capabilities = frozenset({Capability.DURABLE, Capability.SIGNATURE_FILTER})

    def new_handle(self) -> Self:
        return type(self)()


class SequenceRestarts(RowStorage):
    """Keeps rows, but each handle numbers its saves from 1 again (a counter held in memory)."""

    def __init__(self, disk: _Disk | None = None) -> None:
        super().__init__(disk)
        self._counter = itertools.count(1)

    def _allocate_sequence(self) -> int:
        return next(self._counter)


class DeletesInMemoryOnly(RowStorage):
    """Deletes hide rows from this handle only; they come back on reopening."""

    def __init__(self, disk: _Disk | None = None) -> None:
        super().__init__(disk)
        self._hidden: set[str] = set()

    def _visible(self) -> list[_Row]:
        return [row for row in super()._visible() if row.record.checkpoint_id not in self._hidden]

    async def remove(self, checkpoint_id: str) -> bool:
        if self._find(checkpoint_id) is None:
            return False
        self._hidden.add(checkpoint_id)
        return True


class ForgetsWhatExists(RowStorage):
    """Checks for an existing id in a per-handle cache, so after reopening it writes a second row."""

    def __init__(self, disk: _Disk | None = None) -> None:
        super().__init__(disk)
        self._known: dict[str, str] = {}

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        if record.checkpoint_id in self._known:
            return self._known[record.checkpoint_id]
        self._known[record.checkpoint_id] = record.digest
        self.disk.rows.append(_Row(self._allocate_sequence(), record))
        return None


PROCESSES = "durability.across_processes"
"""Skipped below: these targets name no process opener (tests/kit/test_durability_processes.py)."""

COUNTER = "durability.counter_survives_reopen"
"""Skipped below: it reads sequences through ``inspect``, which these row storages do not declare."""

RAW = "durability.raw_writes_survive_reopen"
"""Skipped below: it writes bodies through ``raw_access``, which these row storages do not declare."""


def test_in_memory_storage_skips_every_durability_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage, rebuildable=False)
    assert len(backend.results) == len([c for c in all_clauses() if c.family == FAMILY])
    assert all(r.outcome is Outcome.SKIPPED for r in backend.results)
    assert all("durable" in r.message for r in backend.results)


def test_durable_is_unverified_without_a_way_to_rebuild_the_store() -> None:
    # Handles of one in-memory store share its memory: new_handle() proves nothing about a store
    # that outlives its process, so without reopen or process_opener the declaration is unverified.
    declared = MemoryBackend.capabilities | {Capability.DURABLE}
    backend = run_family(InMemoryCheckpointStorage, rebuildable=False, capabilities=declared)
    assert {r.outcome for r in backend.results} == {Outcome.SKIPPED}
    assert all("unverified" in r.message for r in backend.results if r.clause_id != PROCESSES)
    required = run_family(
        InMemoryCheckpointStorage,
        rebuildable=False,
        capabilities=declared,
        required_capabilities=frozenset({Capability.DURABLE}),
    )
    assert "durability.survives_reopen" in failed(required)
    assert "unverified" in required.result("durability.survives_reopen").message


def test_a_memory_store_declared_durable_fails_when_rebuilt() -> None:
    # Built anew from its settings, an in-memory store is empty: declaring durable is caught.
    declared = MemoryBackend.capabilities | {Capability.DURABLE}
    backend = run_family(InMemoryCheckpointStorage, capabilities=declared)
    assert "durability.survives_reopen" in failed(backend)


def test_a_durable_store_passes() -> None:
    correct = run_family(RowStorage)
    assert all(
        r.outcome is Outcome.PASSED for r in correct.results if r.clause_id not in {PROCESSES, COUNTER, RAW}
    ), correct.failures
    assert correct.result(COUNTER).outcome is Outcome.SKIPPED
    assert correct.result(RAW).outcome is Outcome.SKIPPED


def test_losing_everything_on_reopen_is_caught() -> None:
    backend = run_family(ForgetsOnReopen)
    assert failed(backend) == {r.clause_id for r in backend.results} - {PROCESSES, COUNTER, RAW}
    assert "No checkpoint found" in backend.result("durability.survives_reopen").message


def test_a_sequence_restarting_after_reopen_is_caught() -> None:
    backend = run_family(SequenceRestarts)
    assert "durability.sequence_continues" in failed(backend)
    assert "did the sequence restart" in backend.result("durability.sequence_continues").message
    assert backend.result("durability.survives_reopen").outcome is Outcome.PASSED


def test_deletes_that_do_not_persist_are_caught() -> None:
    backend = run_family(DeletesInMemoryOnly)
    caught_only_by(backend, "durability.deletes_persist", "after deleting it and reopening")


def test_forgetting_existing_ids_after_reopen_is_caught() -> None:
    backend = run_family(ForgetsWhatExists)
    caught_only_by(backend, "durability.immutable_after_reopen", "re-saving an equal checkpoint")
