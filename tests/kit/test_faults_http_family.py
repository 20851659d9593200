"""The HTTP fault clauses pass a storage that retries and writes whole checkpoints, and catch
storages that give up at once, leak untyped errors, trust a conflict, or leave half a save.

The subjects are in-memory storages that play an object store's requests: every primitive is
one "request" that consumes the injected faults the way an HTTP request would, retried up to a
budget. The real S3 backend runs the same clauses in tests/test_s3.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import ClassVar, Self

from conformance import BackendReport, Outcome, StorageTarget, select_clauses
from conformance.faults import Fault, FaultInjector, SimulatedCrash
from storages.backend import CheckpointRecord, InsertResult, StoredBody
from storages.contract import CheckpointID
from storages.errors import StorageUnavailableError
from storages.memory import InMemoryCheckpointStorage

from . import support
from .double import Backing, DoubleBackend, storage_of
from .support import failed

TRANSIENT_RETRIED = "faults.transient_errors_retried"
TRANSIENT_EXHAUSTED = "faults.transient_errors_exhausted"
CONFLICTS_RETRIED = "faults.conditional_conflicts_retried"
CONFLICTS_EXHAUSTED = "faults.conditional_conflicts_exhausted"
CRASH = "faults.crash_between_writes"
CRASH_NESTED = "faults.crash_between_nested_writes"
OURS = (TRANSIENT_RETRIED, TRANSIENT_EXHAUSTED, CONFLICTS_RETRIED, CONFLICTS_EXHAUSTED, CRASH, CRASH_NESTED)


class MemoryHttpInjector(FaultInjector):
    """Counts of pending faults that :class:`RequestingMemory` consumes."""

    faults = frozenset({Fault.TRANSIENT_ERRORS, Fault.CONDITIONAL_CONFLICTS, Fault.CRASH_BETWEEN_WRITES})

    def __init__(self) -> None:
        self.transient = 0
        self.conflicts = 0
        self.crash_armed = False
        self.injected = 0

    @asynccontextmanager
    async def transient_errors(self, count: int) -> AsyncIterator[None]:
        self.transient = count
        try:
            yield
        finally:
            self.transient = 0

    @asynccontextmanager
    async def conditional_conflicts(self, count: int) -> AsyncIterator[None]:
        self.conflicts = count
        try:
            yield
        finally:
            self.conflicts = 0

    @asynccontextmanager
    async def crash_between_writes(self) -> AsyncIterator[None]:
        self.crash_armed = True
        try:
            yield
        finally:
            self.crash_armed = False


class RequestingMemory(DoubleBackend):
    """Correct: each primitive retries injected faults up to BUDGET times, then raises a typed
    error; a crash strikes after the (atomic, whole) write."""

    BUDGET: ClassVar[int] = 5

    def __init__(self, injector: MemoryHttpInjector, backing: Backing | None = None) -> None:
        super().__init__(backing)
        self.injector = injector

    def new_handle(self) -> Self:
        return type(self)(self.injector, self.backing)

    def request(self, operation: str, *, conditional: bool = False) -> bool:
        """Play one request; True once it goes through. Raises past the budget."""
        injector = self.injector
        for _ in range(self.BUDGET + 1):
            if injector.transient > 0:
                injector.transient -= 1
                injector.injected += 1
                continue
            if conditional and injector.conflicts > 0:
                injector.conflicts -= 1
                injector.injected += 1
                if not self.retry_conflicts():
                    return False
                continue
            return True
        raise self.exhausted(operation)

    def retry_conflicts(self) -> bool:
        return True

    def exhausted(self, operation: str) -> Exception:
        return StorageUnavailableError(operation, "memory:// request failed past the retry budget")

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        if not self.request("save", conditional=True):
            return InsertResult.INSERTED  # believed the write landed
        if self.injector.crash_armed:
            self.injector.crash_armed = False
            self.injector.injected += 1
            return await self.crash(records)
        return await super().insert(records)

    async def crash(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await super().insert(records)
        raise SimulatedCrash("injected after the write")

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        self.request("load")
        return await super().load(checkpoint_id)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        self.request("get_latest")
        return await super().latest(workflow_name, graph_signature_hash)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        self.request("list_checkpoints")
        return await super().list_bodies(workflow_name, graph_signature_hash, include_nested=include_nested)

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        self.request("list_checkpoint_ids")
        return await super().list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)


class GivesUpAtOnce(RequestingMemory):
    """No retries: the first 500 or 409 fails the operation."""

    BUDGET = 0


class LeaksUntypedErrors(RequestingMemory):
    """Past the budget, raises the transport's own error instead of StorageUnavailableError."""

    def exhausted(self, operation: str) -> Exception:
        return ConnectionError(f"HTTP 503 during {operation}")


class TrustsConflicts(RequestingMemory):
    """Takes a 409/412 on its create-only write to mean "already stored" and reports success."""

    def retry_conflicts(self) -> bool:
        return False


class HalfWrittenOnCrash(RequestingMemory):
    """Dies after writing the body but before indexing it: loadable by id, never listed."""

    async def crash(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        state = self._read()
        state.unindexed[self._key(records[0].checkpoint_id)] = records[0].body
        self._commit(state)
        raise SimulatedCrash("injected after the body, before the index")


class NestedFirstVisible(RequestingMemory):
    """Dies after storing the nested records (visible, loadable) but before their container."""

    async def crash(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        if len(records) > 1:
            state = self._read()
            for record in records[1:]:
                state.unindexed[self._key(record.checkpoint_id)] = record.body
            self._commit(state)
        raise SimulatedCrash("injected after the nested records")


def run_family(storage_class: type[RequestingMemory]) -> BackendReport:
    injector = MemoryHttpInjector()
    root = storage_of(storage_class(injector))
    target = StorageTarget(name=storage_class.__name__, factory=root.new_handle, faults=injector)
    backend = support.run_family("faults", target)
    assert injector.injected > 0  # the clauses really injected faults into this subject
    return backend


def outcomes(backend: BackendReport) -> dict[str, Outcome]:
    return {clause_id: backend.result(clause_id).outcome for clause_id in OURS}


def test_the_clauses_are_registered_in_the_faults_family() -> None:
    ids = [c.id for c in select_clauses(["faults"])]
    assert set(OURS) <= set(ids)


def test_without_an_injector_the_http_fault_clauses_are_skipped() -> None:
    backend = support.run_family("faults", InMemoryCheckpointStorage)
    assert outcomes(backend) == dict.fromkeys(OURS, Outcome.SKIPPED)
    assert all("fault injector" in backend.result(c).message for c in OURS)


def test_a_storage_that_retries_and_writes_whole_checkpoints_passes() -> None:
    backend = run_family(RequestingMemory)
    assert outcomes(backend) == dict.fromkeys(OURS, Outcome.PASSED), backend.failures


def test_giving_up_at_the_first_fault_is_caught() -> None:
    backend = run_family(GivesUpAtOnce)
    assert failed(backend) & set(OURS) == {TRANSIENT_RETRIED, CONFLICTS_RETRIED}
    assert "raised StorageUnavailableError" in backend.result(TRANSIENT_RETRIED).message


def test_untyped_errors_past_the_budget_are_caught() -> None:
    backend = run_family(LeaksUntypedErrors)
    assert failed(backend) & set(OURS) == {TRANSIENT_EXHAUSTED, CONFLICTS_EXHAUSTED}
    assert "raised ConnectionError" in backend.result(TRANSIENT_EXHAUSTED).message


def test_treating_a_conflict_as_success_is_caught() -> None:
    backend = run_family(TrustsConflicts)
    assert failed(backend) & set(OURS) == {CONFLICTS_RETRIED, CONFLICTS_EXHAUSTED}
    assert "returned as if it had succeeded" in backend.result(CONFLICTS_EXHAUSTED).message


def test_a_half_written_checkpoint_after_a_crash_is_caught() -> None:
    backend = run_family(HalfWrittenOnCrash)
    assert failed(backend) & set(OURS) == {CRASH, CRASH_NESTED}
    assert "after the crash" in backend.result(CRASH).message


def test_nested_records_visible_without_their_container_are_caught() -> None:
    backend = run_family(NestedFirstVisible)
    assert failed(backend) & set(OURS) == {CRASH_NESTED}
    assert "embedded checkpoint" in backend.result(CRASH_NESTED).message
