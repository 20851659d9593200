"""Every clause, and selections of them by id or family.

The first call imports :mod:`conformance.clauses`, whose modules register themselves with
:func:`conformance.clause.clause`; importing this module registers nothing (the pytest plugin
imports it and must stay free of side effects). Living apart from ``clause.py`` is what keeps
``clause`` -> ``clauses`` -> ``clause`` from being an import cycle."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .clause import FAMILIES, Clause, registered_clauses

if TYPE_CHECKING:
    from storages.contract import Capability

    from .faults import FaultInjector


def all_clauses() -> list[Clause]:
    """Every registered clause, in catalogue order (family order, then definition order)."""
    from . import clauses  # noqa: F401 - importing registers the clause modules

    return registered_clauses()


def select_clauses(patterns: Iterable[str] | None = None) -> list[Clause]:
    """Clauses whose id equals a pattern, or whose family does (``"ordering"``)."""
    selected = all_clauses()
    wanted = list(patterns or [])
    if not wanted:
        return selected
    known = {c.id for c in selected} | set(FAMILIES)
    unknown = [p for p in wanted if p not in known]
    if unknown:
        raise ValueError(
            f"unknown clause ids or families: {', '.join(unknown)}"
            + "".join(_suggestion(p, known) for p in unknown)
            + " (checkpoint-conformance --list shows every clause)"
        )
    return [c for c in selected if c.id in wanted or c.family in wanted]


def _suggestion(pattern: str, known: Iterable[str]) -> str:
    """``; did you mean 'x.y'?`` for the known id or family nearest to a mistyped ``pattern``."""
    nearest = difflib.get_close_matches(pattern, sorted(known), n=1, cutoff=0.6)
    return f"; {pattern!r}: did you mean {nearest[0]!r}?" if nearest else ""


def applicable_clauses(
    capabilities: Iterable[Capability],
    faults: FaultInjector | None = None,
    *,
    clauses: Iterable[Clause] | None = None,
) -> list[Clause]:
    """The clauses a storage with ``capabilities`` (and ``faults``, if any) can be checked by: none
    of them skips for an undeclared capability or a fault it cannot inject. Other skips (no
    round-trip counter, no second process) depend on the target and are not predicted here."""
    declared = frozenset(capabilities)
    injectable = faults.faults if faults is not None else frozenset()
    return [
        c
        for c in (all_clauses() if clauses is None else clauses)
        if c.requires <= declared and c.injects <= injectable
    ]


__all__ = ["all_clauses", "applicable_clauses", "select_clauses"]
