"""docs/backends.md's worked example (examples/dict_storage.py) passes the kit: every clause its
capabilities make applicable, and nothing it leaves out is skipped for another reason."""

from __future__ import annotations

import pytest

from conformance import Outcome, StorageTarget, validate
from conformance.selection import applicable_clauses
from examples.dict_storage import DictBackend, DictCheckpointStorage, FencedDictBackend


@pytest.mark.memory
def test_the_worked_example_passes_every_applicable_clause() -> None:
    root = DictCheckpointStorage()
    (backend,) = validate(StorageTarget("dict", root.new_handle)).backends
    assert not backend.error, backend.error
    assert not backend.failures, [(r.clause_id, r.message) for r in backend.failures]
    applicable = {c.id for c in applicable_clauses(FencedDictBackend.capabilities)}
    assert any(clause_id.startswith("fencing.") for clause_id in applicable)
    passed = {r.clause_id for r in backend.results if r.outcome is Outcome.PASSED}
    assert passed == applicable


@pytest.mark.memory
@pytest.mark.parametrize("backend_class", [DictBackend, FencedDictBackend])
def test_the_example_declares_only_what_it_implements(backend_class: type[DictBackend]) -> None:
    from storages.backend import implemented_capabilities

    declared_operations = {
        c for c in backend_class.capabilities if c.value not in ("shared", "signature_filter")
    }
    assert declared_operations <= implemented_capabilities(backend_class)
