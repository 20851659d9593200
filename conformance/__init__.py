"""The checkpoint storage conformance kit.

Three ways in, one set of clauses:

* pytest: subclass :class:`conformance.pytest_plugin.CheckpointStorageConformance` and provide a
  ``storage`` fixture;
* Python: ``conformance.validate(factory)`` returns a :class:`Report`;
* CLI: ``checkpoint-conformance [URL ...]`` with ``--json`` and ``--junit-xml``.

Importing the kit starts nothing and touches no files or servers.
"""

from __future__ import annotations

from .clause import (
    FAMILIES,
    Clause,
    ClauseFailure,
    RunnerFinding,
    clause,
    ensure,
    ensure_equal,
    ensure_runner,
    fail,
)
from .context import ClauseContext
from .report import BackendReport, ClauseResult, Outcome, Report
from .runner import ConformanceUsageError, avalidate, avalidate_target, run_clause, validate
from .scenario import ChildStorageMode, GraphChange, RunnerProfile, RunObservation, Scenario, ScenarioRunner
from .selection import all_clauses, select_clauses
from .target import StorageTarget, target_from_url

__all__ = [
    "FAMILIES",
    "BackendReport",
    "Clause",
    "ClauseContext",
    "ClauseFailure",
    "ClauseResult",
    "ChildStorageMode",
    "ConformanceUsageError",
    "GraphChange",
    "Outcome",
    "Report",
    "RunObservation",
    "RunnerFinding",
    "RunnerProfile",
    "Scenario",
    "ScenarioRunner",
    "StorageTarget",
    "all_clauses",
    "avalidate",
    "avalidate_target",
    "clause",
    "ensure",
    "ensure_equal",
    "ensure_runner",
    "fail",
    "run_clause",
    "select_clauses",
    "target_from_url",
    "validate",
]
