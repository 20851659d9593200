"""The in-memory backend through the kit's public pytest base class, as an outside author runs it.

Only the clauses its declared capabilities make applicable are collected (a skip fails the run
under CHECKPOINT_FORBID_SKIPS); :func:`test_the_left_out_clauses_are_exactly_the_inapplicable`
pins what is left out, so a clause can neither disappear nor skip unnoticed.
"""

from __future__ import annotations

import pytest

from conformance.pytest_plugin import CheckpointStorageConformance
from conformance.selection import all_clauses, applicable_clauses
from storages.contract import OPERATION_CAPABILITIES, Capability
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

DECLARED = MemoryBackend.capabilities

MEMORY_CLAUSES = [c.id for c in applicable_clauses(DECLARED)]


@pytest.mark.memory
class TestInMemoryConformance(CheckpointStorageConformance):
    clauses = MEMORY_CLAUSES
    required_capabilities = DECLARED & OPERATION_CAPABILITIES
    model_budget = "6000"  # CI runs the model family five times the default

    def make_storage(self) -> InMemoryCheckpointStorage:
        return InMemoryCheckpointStorage()


@pytest.mark.memory
def test_the_left_out_clauses_are_exactly_the_inapplicable() -> None:
    left_out = {c.id: c for c in all_clauses() if c.id not in MEMORY_CLAUSES}
    for clause_id, found in left_out.items():
        undeclared = found.requires - DECLARED
        assert undeclared or found.injects, clause_id
        assert undeclared <= {Capability.DURABLE, Capability.TTL}, (clause_id, undeclared)
    assert len(MEMORY_CLAUSES) > len(all_clauses()) * 3 // 4
