"""Clauses: one guarantee each, with a stable id, grouped into families.

A clause is an async function taking a :class:`ClauseContext`. It proves its guarantee or raises
:class:`ClauseFailure` (through :func:`ensure` and friends) with a message that says what broke.
Clause modules register themselves with :func:`clause` when :mod:`conformance.clauses` is imported
(:mod:`conformance.selection` does, and selects among them).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from storages.contract import Capability

from .faults import Fault
from .verdicts import (
    ClauseFailure,
    ClauseNotApplicable,
    RunnerFinding,
    ensure,
    ensure_equal,
    ensure_runner,
    fail,
    not_applicable,
)

if TYPE_CHECKING:
    from .context import ClauseContext

ClauseFunction = Callable[["ClauseContext"], Awaitable[None]]
F = TypeVar("F", bound=ClauseFunction)

DEFAULT_TIMEOUT = 30.0
"""Seconds a clause may take before it fails as timed out."""

_ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")


FAMILIES: dict[str, str] = {
    "contract": "MAF's six-method protocol behaves as MAF's runner expects.",
    "isolation": "Objects handed in and out are copies; the store never aliases caller state.",
    "ordering": "Latest is the newest commit through its lineage; timestamps rank rivals only.",
    "fidelity": "Every value the codec supports comes back equal and of the same type.",
    "identifiers": "Hostile ids and names are stored safely or refused with a typed error.",
    "corruption": "Damaged bodies raise CheckpointCorruptedError naming the id; nothing is skipped.",
    "durability": "Checkpoints survive closing every handle and opening a new one.",
    "concurrency": "Many tasks and several handles on one backend lose and duplicate nothing.",
    "capabilities": "Declared capabilities work; undeclared operations raise UnsupportedOperationError.",
    "nested": "Embedded (sub-workflow) checkpoints are stored once, faithfully, and addressable by id.",
    "signature": "Graph signatures are kept byte for byte, filter latest and listing, and are enforced.",
    "ancestry": "Ancestry walks reach the root through forks and nested records and report every break.",
    "retention": "Prune and delete_workflow remove what they say, leave tombstones, and orphan nothing.",
    "writes": "Pending writes land whole, once per (task, index), and go with their checkpoint.",
    "runner": "A runner with a sub-workflow restores, rejects changed graphs, and keeps chains whole.",
    "faults": "Injected crashes, cuts and server errors lose no acknowledged checkpoint and leave no half.",
    "tamper": "With an integrity key, every at-rest edit is refused by reads, walks or an anchor.",
    "fencing": "A stale writer can never move a workflow's latest off the branch that superseded it.",
    "lifecycle": "Closed handles raise StorageClosedError, close quietly, leave no threads, show no secrets.",
    "expiry": "A declared time to live expires checkpoints entirely after it, and not before.",
    "scale": "Latest stays constant-cost, nothing is dropped as history grows, a walk is one round trip.",
    "model": "Generated programs answer exactly as the contract's reference model does, also concurrently.",
}
"""Family name -> what the family proves, in catalogue order."""


@dataclass(frozen=True, slots=True)
class Clause:
    """One checkable guarantee."""

    id: str
    guarantee: str
    function: ClauseFunction = field(repr=False, compare=False)
    requires: frozenset[Capability] = frozenset()
    timeout: float = DEFAULT_TIMEOUT
    injects: frozenset[Fault] = frozenset()
    """Faults the target's injector must support, for the ``faults`` family."""
    operation_timeout: float | None = None
    """Seconds one storage call of this clause may take, where that is more than the target's
    ``operation_timeout`` (a save across a server restart); None: the target's."""

    @property
    def family(self) -> str:
        return self.id.partition(".")[0]

    @property
    def name(self) -> str:
        return self.id.partition(".")[2]


_REGISTRY: dict[str, Clause] = {}


def clause(
    clause_id: str,
    guarantee: str,
    *,
    requires: Iterable[Capability] = (),
    timeout: float = DEFAULT_TIMEOUT,
    injects: Iterable[Fault] = (),
    operation_timeout: float | None = None,
) -> Callable[[F], F]:
    """Register the decorated coroutine function as clause ``clause_id`` ("family.name")."""
    if not _ID_PATTERN.match(clause_id):
        raise ValueError(f"clause id {clause_id!r} is not 'family.name' in lower snake case")
    family = clause_id.partition(".")[0]
    if family not in FAMILIES:
        raise ValueError(f"clause {clause_id!r} names unknown family {family!r}")
    if "\n" in guarantee or not guarantee.strip():
        raise ValueError(f"clause {clause_id!r}: the guarantee must be one non-empty line")

    def register(function: F) -> F:
        if clause_id in _REGISTRY:
            raise ValueError(f"clause id {clause_id!r} is registered twice")
        _REGISTRY[clause_id] = Clause(
            clause_id,
            guarantee.strip(),
            function,
            frozenset(requires),
            timeout,
            frozenset(injects),
            operation_timeout,
        )
        return function

    return register


def registered_clauses() -> list[Clause]:
    """The clauses registered so far, in catalogue order (family order, then definition order).

    ``conformance.selection.all_clauses`` is the full list: it imports every clause module first."""
    order = {family: index for index, family in enumerate(FAMILIES)}
    return sorted(_REGISTRY.values(), key=lambda c: order[c.family])


__all__ = [
    "DEFAULT_TIMEOUT",
    "FAMILIES",
    "Clause",
    "ClauseFailure",
    "RunnerFinding",
    "ClauseNotApplicable",
    "clause",
    "ensure",
    "ensure_equal",
    "ensure_runner",
    "fail",
    "not_applicable",
    "registered_clauses",
]
