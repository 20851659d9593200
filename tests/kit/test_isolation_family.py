"""The isolation family passes a correct storage and catches storages that alias objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from conformance import BackendReport, Outcome, StorageTarget, select_clauses, validate
from storages.contract import CheckpointID
from storages.memory import InMemoryCheckpointStorage

from . import support
from .double import ReadsThrough
from .support import failed

FAMILY = "isolation"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


READ_CLAUSES = {
    "isolation.loaded_is_caller_owned",
    "isolation.listed_are_caller_owned",
    "isolation.latest_is_caller_owned",
    "isolation.reads_are_distinct",
}


# ---------------------------------------------------------------- mutants, one defect each
# The in-memory storage keeps encoded bytes, so aliasing has to be added on purpose: each mutant
# keeps decoded objects around, as a storage that "optimises" reads would.


class ServesTheSavedObject(ReadsThrough):
    """Stores the encoded body, but answers reads with the very object the caller saved."""

    def saved(self) -> dict[CheckpointID, Any]:
        return self.__dict__.setdefault("saved_objects", {})  # per handle

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        checkpoint_id: CheckpointID = await super().save(checkpoint, **options)
        self.saved().setdefault(checkpoint_id, checkpoint)
        return checkpoint_id

    def returned(self, checkpoint: Any) -> Any:
        return self.saved().get(checkpoint.checkpoint_id, checkpoint)


class CachesDecodedObjects(ReadsThrough):
    """Decodes each body once and hands the same object to every later read."""

    def returned(self, checkpoint: Any) -> Any:
        decoded: dict[CheckpointID, Any] = self.__dict__.setdefault("decoded", {})  # per handle
        return decoded.setdefault(checkpoint.checkpoint_id, checkpoint)


class ShallowCopiesOfCache(CachesDecodedObjects):
    """Returns copy.copy of the cached object: a new checkpoint whose dicts are shared."""

    def returned(self, checkpoint: Any) -> Any:
        return copy.copy(super().returned(checkpoint))


# ---------------------------------------------------------------- tests


def test_in_memory_storage_passes_every_isolation_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert {r.clause_id: r.outcome for r in backend.results} == {
        c.id: Outcome.PASSED for c in select_clauses([FAMILY])
    }
    assert len(backend.results) >= 5


def test_serving_the_saved_object_fails_save_snapshots_and_every_read_clause() -> None:
    backend = run_family(ServesTheSavedObject)
    assert failed(backend) == {"isolation.save_snapshots", *READ_CLAUSES}
    assert "after the caller changed the saved object" in backend.result("isolation.save_snapshots").message


def test_caching_decoded_objects_fails_every_read_clause_but_not_save_snapshots() -> None:
    # The cache is filled from the encoded snapshot, so what was saved is right; what is read is shared.
    backend = run_family(CachesDecodedObjects)
    assert failed(backend) == READ_CLAUSES
    assert "same checkpoint object" in backend.result("isolation.reads_are_distinct").message


def test_shallow_copies_fail_on_shared_nested_containers() -> None:
    """A fresh top-level object is not enough: nested dicts and lists must be copies too."""
    backend = run_family(ShallowCopiesOfCache)
    assert failed(backend) == READ_CLAUSES
    message = backend.result("isolation.reads_are_distinct").message
    assert "container state" in message
    assert "checkpoint object" not in message


@pytest.mark.maf
def test_maf_in_memory_storage_passes_isolation() -> None:
    """MAF 1.23's in-memory storage deep-copies on save and on every read."""
    agent_framework = pytest.importorskip("agent_framework")
    target = StorageTarget(
        name="agent_framework.InMemoryCheckpointStorage",
        factory=agent_framework.InMemoryCheckpointStorage,
        checkpoint_class=agent_framework.WorkflowCheckpoint,
    )
    backend = validate(target, clauses=[FAMILY]).backends[0]
    assert backend.results
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures
