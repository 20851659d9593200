"""The kit's model-based tier: generated programs checked against a reference model of the contract.

Example clauses check the scenarios their authors imagined; this tier generates the ones nobody
did. :mod:`.spec` is the contract as a small model (written from docs/contract.md, sharing no code
with the engine or any backend), :mod:`.program` draws operation programs from a seed,
:mod:`.execute` runs each op on the model and on the storage and compares every observable, and
:mod:`.check` adds concurrent rounds judged for linearizability, shrinking, and a runnable
reproducer. The clauses are in :mod:`conformance.clauses.model`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_SEED = 20261203
"""The seed when none is given: a default run is the same run every time (``--model-seed``)."""

DEFAULT_OPERATIONS = 1200
"""Operations the family generates by default, shared among its clauses (``--model-budget``)."""

DEFAULT_SECONDS = 12.0
"""By default the generated programs also stop after this many seconds in all, long history
included (a slow store, such as the embedded S3 over HTTP at ~50 ms a call, runs a prefix of the
same programs; memory, SQLite and Redis run them whole well within it). An explicit budget has no
time cap unless it is one: CI runs the whole programs on every backend."""


@dataclass(frozen=True, slots=True)
class Budget:
    """How much the family generates: ``operations``, or as many as fit in ``seconds``."""

    operations: int
    seconds: float | None = None

    def share(self, fraction: float) -> Budget:
        seconds = None if self.seconds is None else self.seconds * fraction
        return Budget(max(int(self.operations * fraction), 1), seconds)


_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|seconds|ops|operations)?\s*$")


def parse_budget(text: str | None) -> Budget:
    """``"600"`` or ``"600ops"``: operations; ``"20s"``: seconds (with a large operation cap).
    Raises ValueError naming the option for anything else."""
    if text is None or text == "":
        return Budget(DEFAULT_OPERATIONS, DEFAULT_SECONDS)
    match = _BUDGET.match(str(text))
    if match is None:
        raise ValueError(f"--model-budget {text!r}: give a number of operations (600) or seconds (20s)")
    number, unit = float(match.group(1)), match.group(2)
    if unit in ("s", "sec", "seconds"):
        if number <= 0:
            raise ValueError(f"--model-budget {text!r}: the seconds must be positive")
        return Budget(operations=1_000_000, seconds=number)
    if number < 1 or number != int(number):
        raise ValueError(f"--model-budget {text!r}: the operations must be a whole number >= 1")
    return Budget(int(number))


__all__ = ["DEFAULT_OPERATIONS", "DEFAULT_SECONDS", "DEFAULT_SEED", "Budget", "parse_budget"]
