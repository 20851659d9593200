"""The server fault clauses (kill -9 and restart, connection cut mid-save) pass a storage that keeps
acknowledged saves and writes whole checkpoints, and catch ones that do not.

The stores here are in memory; their injector plays the server: a "restart" keeps the store (or,
for a mutant, drops what a server without fsync would lose), and a "cut" makes the next save end
in a connection error after the storage did whatever its mutant does with the request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Self

from conformance import BackendReport, Outcome, StorageTarget
from conformance.faults import Fault, FaultInjector
from storages.backend import CheckpointRecord, InsertResult
from storages.contract import Capability, CheckpointID
from storages.errors import StorageUnavailableError
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .double import Backing, DoubleBackend, storage_of
from .support import failed

RESTART = "faults.server_restart_keeps_acknowledged"
CUT = "faults.connection_cut_whole_or_nothing"
OURS = (RESTART, CUT)


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family("faults", subject, **target)


@dataclass
class _Server:
    """What the injector and every handle of one store share."""

    cut_armed: bool = False
    cuts: int = 0
    acknowledged: list[CheckpointID] = field(default_factory=list)


class CutMemory(DoubleBackend):
    """Correct: a cut save reached the server, so it lands whole, then the client sees the cut
    as a typed error."""

    def __init__(self, backing: Backing | None = None, *, server: _Server | None = None) -> None:
        super().__init__(backing)
        self.server = server if server is not None else _Server()

    def new_handle(self) -> Self:
        return type(self)(self.backing, server=self.server)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        if not self.server.cut_armed:
            result = await super().insert(records)
            if result is InsertResult.INSERTED:
                self.server.acknowledged.append(records[0].checkpoint_id)
            return result
        self.server.cut_armed = False
        self.server.cuts += 1
        return await self._cut(records)

    async def _cut(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await super().insert(records)
        raise StorageUnavailableError("save", "connection reset by peer (injected)")


class HalfWrittenOnCut(CutMemory):
    """Writes the checkpoint but not its nested records when the connection drops."""

    async def _cut(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await DoubleBackend.insert(self, records[:1])
        raise StorageUnavailableError("save", "connection reset by peer (injected)")


class UntypedErrorOnCut(CutMemory):
    """Lets the socket error escape instead of a storage error."""

    async def _cut(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await DoubleBackend.insert(self, records)
        raise ConnectionResetError("connection reset by peer")


class AcknowledgesLostSave(CutMemory):
    """Swallows the cut and reports success although nothing was written."""

    async def _cut(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return InsertResult.INSERTED


class MemoryServerInjector(FaultInjector):
    faults = frozenset({Fault.SERVER_RESTART, Fault.CONNECTION_CUT})

    def __init__(self, root: CutMemory, *, restart_loses_last_save: bool = False) -> None:
        self.root = root
        self.restart_loses_last_save = restart_loses_last_save

    async def restart_server(self) -> None:
        if self.restart_loses_last_save and self.root.server.acknowledged:
            # As a server that acknowledged a write before it reached the disk.
            await self.root.remove(self.root.server.acknowledged[-1])

    @asynccontextmanager
    async def cut_connection_during_save(self) -> AsyncIterator[None]:
        self.root.server.cut_armed = True
        try:
            yield
        finally:
            self.root.server.cut_armed = False


def target(backend_class: type[CutMemory], **injector: Any) -> StorageTarget:
    root = backend_class()
    return StorageTarget(
        name=backend_class.__name__,
        factory=storage_of(root).new_handle,
        capabilities=DoubleBackend.capabilities | {Capability.DURABLE},
        faults=MemoryServerInjector(root, **injector),
    )


def outcomes(backend: BackendReport) -> dict[str, Outcome]:
    return {clause_id: backend.result(clause_id).outcome for clause_id in OURS}


def test_without_an_injector_the_server_fault_clauses_are_skipped() -> None:
    backend = run_family(InMemoryCheckpointStorage, capabilities=MemoryBackend.capabilities | {
        Capability.DURABLE
    })  # fmt: skip
    assert outcomes(backend) == {RESTART: Outcome.SKIPPED, CUT: Outcome.SKIPPED}
    assert all("fault injector" in backend.result(c).message for c in OURS)


def test_a_store_that_keeps_acknowledged_saves_and_writes_whole_checkpoints_passes() -> None:
    subject = target(CutMemory)
    backend = run_family(subject)
    assert outcomes(backend) == {RESTART: Outcome.PASSED, CUT: Outcome.PASSED}, backend.failures
    assert not failed(backend)
    assert subject.faults is not None
    assert isinstance(subject.faults, MemoryServerInjector)
    assert subject.faults.root.server.cuts == 1  # the cut clause really cut a save


def test_losing_an_acknowledged_save_on_restart_is_caught() -> None:
    backend = run_family(target(CutMemory, restart_loses_last_save=True))
    assert failed(backend) == {RESTART}
    assert "was lost by kill -9 and restart" in backend.result(RESTART).message


def test_nested_records_missing_after_a_cut_are_caught() -> None:
    backend = run_family(target(HalfWrittenOnCut))
    assert failed(backend) == {CUT}


def test_an_untyped_error_from_a_cut_is_caught() -> None:
    backend = run_family(target(UntypedErrorOnCut))
    assert failed(backend) == {CUT}
    assert "expected success or a typed storage error" in backend.result(CUT).message


def test_acknowledging_a_save_that_never_landed_is_caught() -> None:
    backend = run_family(target(AcknowledgesLostSave))
    assert failed(backend) == {CUT}
    assert "save() returned but checkpoint" in backend.result(CUT).message
