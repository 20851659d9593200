"""Running one clause family against a (usually deliberately broken) storage, for the mutant tests."""

from __future__ import annotations

from typing import Any

from conformance import BackendReport, StorageTarget, select_clauses, validate
from conformance.six_methods import SixMethods
from storages.backend import Backend
from storages.engine import CheckpointStore


def run_family(family: str, subject: Any, **target: Any) -> BackendReport:
    """Every clause of ``family`` against ``subject`` (a StorageTarget, or a factory such as a
    storage class, or a backend class the engine is put over, with ``target`` as further
    StorageTarget fields)."""
    if isinstance(subject, type) and issubclass(subject, Backend):
        backend_class = subject

        def subject() -> CheckpointStore[Any]:
            return CheckpointStore(backend_class())

        subject.__name__ = backend_class.__name__
    if not isinstance(subject, StorageTarget):
        name = getattr(subject, "__name__", type(subject).__name__)
        subject = StorageTarget(name=name, factory=subject, **target)
    (backend,) = validate(subject, clauses=[family]).backends
    assert not backend.error, backend.error
    assert [r.clause_id for r in backend.results] == [c.id for c in select_clauses([family])]
    return backend


def failed(backend: BackendReport) -> set[str]:
    """Ids of the clauses that failed."""
    return {r.clause_id for r in backend.failures}


def caught_only_by(backend: BackendReport, clause_id: str, says: str) -> None:
    """A mutant's defect is caught by ``clause_id`` alone, and its message contains ``says``."""
    assert failed(backend) == {clause_id}, {r.clause_id: r.message for r in backend.failures}
    assert says in backend.result(clause_id).message


def caught_by_alone(name: str, target: Any, clause_id: str) -> None:
    """``target`` (a StorageTarget, or a factory) fails ``clause_id``, the one clause run."""
    (backend,) = validate(target, clauses=[clause_id]).backends
    assert not backend.error, backend.error
    assert [r.clause_id for r in backend.failures] == [clause_id], f"{name} got past {clause_id}"


def passes_the_whole_kit(target: Any) -> None:
    """``target`` passes every clause of the kit."""
    (backend,) = validate(target).backends
    assert not backend.error, backend.error
    assert backend.failures == [], [(r.clause_id, r.message) for r in backend.failures]


class SixMethodsOnly(SixMethods):
    """An honest storage with MAF's six methods and nothing else: no ``capabilities``, no
    ``aclose``, no ``async with`` (over a new in-memory storage, or ``inner`` to share one)."""

    def __init__(self, inner: Any | None = None) -> None:
        from storages.memory import InMemoryCheckpointStorage

        super().__init__(inner if inner is not None else InMemoryCheckpointStorage())
