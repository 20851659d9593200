"""The capabilities family checks declarations both ways and catches storages that fake them."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from conformance import BackendReport, Outcome, all_clauses
from storages.backend import StoredBody
from storages.contract import OPERATION_CAPABILITIES, AncestryEnd, AncestryWalk, Capability, CheckpointInfo
from storages.engine import CheckpointStore
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .support import caught_only_by, failed

FAMILY = "capabilities"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


MEMORY_CAPABILITIES = MemoryBackend.capabilities


class HollowExtensions(InMemoryCheckpointStorage):
    """Declares ancestry and list_workflows but answers with nothing."""

    capabilities = MEMORY_CAPABILITIES | {Capability.ANCESTRY}

    async def walk_ancestry(self, checkpoint_id: str, *, max_depth: int = 100) -> AncestryWalk[Any]:
        return AncestryWalk((), AncestryEnd.ROOT, None)

    async def walk_ancestry_ids(self, checkpoint_id: str, *, max_depth: int = 100) -> AncestryWalk[str]:
        return AncestryWalk((), AncestryEnd.ROOT, None)

    async def list_workflows(self) -> list[str]:
        return []


class IgnoresSignatureFilter(InMemoryCheckpointStorage):
    """Does not declare signature_filter, yet accepts graph_signature_hash= and ignores it."""

    capabilities = MEMORY_CAPABILITIES - {Capability.SIGNATURE_FILTER}

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        return await super().get_latest(workflow_name=workflow_name)

    async def list_checkpoints(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, include_nested: bool = False
    ) -> list[Any]:
        return await super().list_checkpoints(workflow_name=workflow_name, include_nested=include_nested)

    async def list_checkpoint_ids(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, include_nested: bool = False
    ) -> list[str]:
        return await super().list_checkpoint_ids(workflow_name=workflow_name, include_nested=include_nested)


class SilentPrune(InMemoryCheckpointStorage):
    """Does not declare prune, yet prune() and delete_workflow() quietly return 0."""

    capabilities = MEMORY_CAPABILITIES - {Capability.PRUNE}

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        return 0

    async def delete_workflow(self, *, workflow_name: str) -> int:
        return 0


class UndeclaredRawAccess(InMemoryCheckpointStorage):
    """Serves raw bodies without declaring raw_access."""

    capabilities = MEMORY_CAPABILITIES - {Capability.RAW_ACCESS}

    async def read_raw_body(self, checkpoint_id: str) -> bytes | None:
        return await self._get(checkpoint_id)


class UndeclaredInspect(InMemoryCheckpointStorage):
    """Describes records without declaring inspect."""

    capabilities = MEMORY_CAPABILITIES - {Capability.INSPECT}

    async def checkpoint_info(self, checkpoint_id: str) -> CheckpointInfo | None:
        return await self.info(checkpoint_id)


class HollowInspectBackend(MemoryBackend):
    """Declares inspect but describes every record as top-level with no previous id."""

    async def info(self, checkpoint_id: str) -> CheckpointInfo | None:
        info = await super().info(checkpoint_id)
        return None if info is None else dataclasses.replace(info, previous_checkpoint_id=None)


def HollowInspect() -> CheckpointStore[MemoryBackend]:
    return CheckpointStore(HollowInspectBackend())


class MisPagingBackend(MemoryBackend):
    """Pages its index for a streaming read (records_after), each page resuming ``resume``
    records past the last page's last id, where 1 would be right."""

    resume = 1

    async def records_after(self, after: str | None, limit: int) -> list[CheckpointInfo]:
        ordered = sorted(await self.records(None), key=lambda info: info.checkpoint_id)
        ids = [info.checkpoint_id for info in ordered]
        start = 0 if after is None else ids.index(after) + self.resume
        return ordered[start : start + limit]


class SkippingPagesBackend(MisPagingBackend):
    resume = 2  # one record too far


def SkippingPages() -> CheckpointStore[MemoryBackend]:
    return CheckpointStore(SkippingPagesBackend())


class RepeatingPagesBackend(MisPagingBackend):
    resume = 0  # at the last page's last record, not after it


def RepeatingPages() -> CheckpointStore[MemoryBackend]:
    return CheckpointStore(RepeatingPagesBackend())


class ListsEmbeddedNamesBackend(MemoryBackend):
    """Lists the workflow of every stored record, embedded ones included."""

    async def workflow_names(self) -> list[str]:
        return sorted({r.workflow_name for r in await self.records(None)})


def ListsEmbeddedNames() -> CheckpointStore[MemoryBackend]:
    return CheckpointStore(ListsEmbeddedNamesBackend())


class RawWritesReadAsBytearrayBackend(MemoryBackend):
    """Hands a body written raw back as a bytearray (equal to the bytes, but not bytes)."""

    def __init__(self, store: Any = None) -> None:
        super().__init__(store)
        self.rewritten: set[str] = set()

    async def overwrite_body(self, checkpoint_id: str, body: bytes, digest: str) -> bool:
        self.rewritten.add(checkpoint_id)
        return await super().overwrite_body(checkpoint_id, body, digest)

    async def load(self, checkpoint_id: str) -> StoredBody | None:
        stored = await super().load(checkpoint_id)
        if stored is None or checkpoint_id not in self.rewritten:
            return stored
        return dataclasses.replace(stored, body=bytearray(stored.body))  # type: ignore[arg-type]


def RawWritesReadAsBytearray() -> CheckpointStore[MemoryBackend]:
    return CheckpointStore(RawWritesReadAsBytearrayBackend())


class UndeclaredTtl(InMemoryCheckpointStorage):
    """Expires checkpoints after a minute without declaring ttl."""

    ttl = 60


class DeclaredTtl(InMemoryCheckpointStorage):
    capabilities = MEMORY_CAPABILITIES | {Capability.TTL}
    ttl: Any = dt.timedelta(minutes=5)


class NegativeTtl(DeclaredTtl):
    ttl = -5


class TtlWithoutAttribute(InMemoryCheckpointStorage):
    """Declares ttl but has no ttl attribute to show (as a storage written without the engine)."""

    capabilities = MEMORY_CAPABILITIES | {Capability.TTL}

    @property
    def ttl(self) -> float | None:
        raise AttributeError("ttl")


class ListedCapabilities(InMemoryCheckpointStorage):
    """Declares its capabilities as a list, which the protocol does not allow."""

    capabilities = sorted(MEMORY_CAPABILITIES)  # type: ignore[assignment]


class StrayCapability(InMemoryCheckpointStorage):
    capabilities = frozenset({*MEMORY_CAPABILITIES, "teleport"})  # type: ignore[arg-type]


class MafOnlyStorage:
    """A third-party storage with only MAF's six methods, no capabilities and no extension keywords."""

    def __init__(self) -> None:
        self._inner = InMemoryCheckpointStorage()

    async def save(self, checkpoint: Any) -> str:
        return await self._inner.save(checkpoint)

    async def load(self, checkpoint_id: str) -> Any:
        return await self._inner.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return await self._inner.list_checkpoints(workflow_name=workflow_name)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return await self._inner.list_checkpoint_ids(workflow_name=workflow_name)

    async def delete(self, checkpoint_id: str) -> bool:
        return await self._inner.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> Any:
        return await self._inner.get_latest(workflow_name=workflow_name)


def test_every_operation_capability_has_a_clause() -> None:
    ids = {c.id for c in all_clauses() if c.family == FAMILY}
    assert {f"capabilities.{capability.value}" for capability in OPERATION_CAPABILITIES} <= ids
    assert "capabilities.declared_members" in ids


def test_in_memory_storage_passes_every_capabilities_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert len(backend.results) == len([c for c in all_clauses() if c.family == FAMILY])
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures


def test_a_storage_with_only_mafs_methods_passes() -> None:
    # A missing method or keyword is an honest refusal.
    backend = run_family(MafOnlyStorage)
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures


def test_declared_but_hollow_extensions_are_caught() -> None:
    backend = run_family(HollowExtensions)
    assert failed(backend) == {"capabilities.ancestry", "capabilities.list_workflows"}
    assert "walk_ancestry_ids" in backend.result("capabilities.ancestry").message
    assert "list_workflows() lacks" in backend.result("capabilities.list_workflows").message


def test_an_ignored_signature_filter_is_caught() -> None:
    backend = run_family(IgnoresSignatureFilter)
    assert failed(backend) == {"capabilities.signature_filter"}
    message = backend.result("capabilities.signature_filter").message
    assert "get_latest(" in message
    assert "must raise UnsupportedOperationError" in message


def test_undeclared_operations_that_return_quietly_are_caught() -> None:
    prune = run_family(SilentPrune)
    assert failed(prune) == {"capabilities.prune"}
    assert "returned 0" in prune.result("capabilities.prune").message
    raw = run_family(UndeclaredRawAccess)
    assert failed(raw) == {"capabilities.raw_access"}
    assert "read_raw_body" in raw.result("capabilities.raw_access").message
    inspect = run_family(UndeclaredInspect)
    assert failed(inspect) == {"capabilities.inspect"}
    assert "checkpoint_info" in inspect.result("capabilities.inspect").message


def test_inspect_describing_the_wrong_previous_id_is_caught() -> None:
    backend = run_family(HollowInspect)
    caught_only_by(backend, "capabilities.inspect", "previous id")


def test_a_streamed_index_that_skips_records_is_caught() -> None:
    caught_only_by(run_family(SkippingPages), "capabilities.inspect", "skip records")


def test_a_streamed_index_that_repeats_records_is_caught() -> None:
    caught_only_by(run_family(RepeatingPages), "capabilities.inspect", "more than once")


def test_a_workflow_only_embedded_checkpoints_carry_listed_is_caught() -> None:
    caught_only_by(
        run_family(ListsEmbeddedNames), "capabilities.list_workflows", "whose only checkpoint is embedded"
    )


def test_raw_bodies_read_back_as_a_bytearray_are_caught() -> None:
    backend = run_family(RawWritesReadAsBytearray)
    assert "capabilities.raw_access" in failed(backend), backend.failures
    assert "returned bytearray" in backend.result("capabilities.raw_access").message


def test_the_targets_declaration_is_what_counts() -> None:
    # A target declaring list_workflows absent, on a storage that still serves it, fails the clause.
    backend = run_family(
        InMemoryCheckpointStorage, capabilities=MEMORY_CAPABILITIES - {Capability.LIST_WORKFLOWS}
    )
    caught_only_by(backend, "capabilities.list_workflows", "is not declared")


@pytest.mark.parametrize(
    ("storage_class", "outcome"),
    [
        (UndeclaredTtl, Outcome.FAILED),
        (DeclaredTtl, Outcome.PASSED),
        (NegativeTtl, Outcome.FAILED),
        (TtlWithoutAttribute, Outcome.FAILED),
    ],
)
def test_ttl_declarations_match_the_configured_ttl(storage_class: type[Any], outcome: Outcome) -> None:
    backend = run_family(storage_class)
    assert backend.result("capabilities.ttl").outcome is outcome, backend.result("capabilities.ttl").message


def test_capabilities_that_are_not_a_set_of_capabilities_are_caught() -> None:
    listed = run_family(ListedCapabilities)
    assert failed(listed) == {"capabilities.declared_members"}
    assert "capabilities is a list" in listed.result("capabilities.declared_members").message
    # Stray values stop the runner from reading the declaration, so the target states it.
    stray = run_family(StrayCapability, capabilities=MEMORY_CAPABILITIES)
    assert failed(stray) == {"capabilities.declared_members"}
    assert "teleport" in stray.result("capabilities.declared_members").message


class IgnoresUndeclaredFence(InMemoryCheckpointStorage):
    """Does not declare fencing, yet accepts expected_latest_id= and saves without checking it."""

    capabilities = MEMORY_CAPABILITIES - {Capability.FENCING}

    async def save(self, checkpoint: Any, *, expected_latest_id: Any = None) -> str:
        return await super().save(checkpoint)


class HollowFence(InMemoryCheckpointStorage):
    """Declares fencing but ignores the expected latest."""

    async def save(self, checkpoint: Any, *, expected_latest_id: Any = None) -> str:
        return await super().save(checkpoint)


def test_an_ignored_or_hollow_fence_is_caught() -> None:
    ignored = run_family(IgnoresUndeclaredFence)
    assert failed(ignored) == {"capabilities.fencing"}
    assert "must raise UnsupportedOperationError" in ignored.result("capabilities.fencing").message
    hollow = run_family(HollowFence)
    assert failed(hollow) == {"capabilities.fencing"}
    assert "it must raise StaleWriterError" in hollow.result("capabilities.fencing").message
