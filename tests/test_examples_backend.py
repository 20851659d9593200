"""docs/backends.md's worked example (examples/dict_storage.py) passes the kit: every clause its
capabilities make applicable, and nothing it leaves out is skipped for another reason."""

from __future__ import annotations

import pytest

from conformance import Outcome, StorageTarget, validate
from conformance.selection import applicable_clauses
from examples.dict_storage import DictBackend, DictCheckpointStorage

RUNNER_FINDINGS = {"runner.stale_run_cannot_clobber_successor"}
"""Without ``fencing`` the runner's stale run clobbers latest: the kit's finding, not a failure."""


@pytest.mark.memory
def test_the_worked_example_passes_every_applicable_clause() -> None:
    root = DictCheckpointStorage()
    (backend,) = validate(StorageTarget("dict", root.new_handle)).backends
    assert not backend.error, backend.error
    assert not backend.failures, [(r.clause_id, r.message) for r in backend.failures]
    applicable = {c.id for c in applicable_clauses(DictBackend.capabilities)}
    outcomes = {r.clause_id: r.outcome for r in backend.results}
    passed = {clause_id for clause_id, outcome in outcomes.items() if outcome is Outcome.PASSED}
    assert passed == applicable - RUNNER_FINDINGS
    assert {outcomes[c] for c in RUNNER_FINDINGS} == {Outcome.FINDING}


@pytest.mark.memory
def test_the_example_declares_only_what_it_implements() -> None:
    from storages.backend import implemented_capabilities

    declared_operations = {
        c for c in DictBackend.capabilities if c.value not in ("shared", "signature_filter")
    }
    assert declared_operations <= implemented_capabilities(DictBackend)
