"""Reports: per backend and clause outcomes, as JSON, JUnit XML, or rich tables."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET


class Outcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    """The storage does not declare a capability the clause requires."""
    XFAILED = "xfailed"
    """Failed as the target declared it would (a known deviation)."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ClauseResult:
    clause_id: str
    family: str
    guarantee: str
    outcome: Outcome
    duration: float
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "clause": self.clause_id,
            "family": self.family,
            "guarantee": self.guarantee,
            "outcome": self.outcome.value,
            "duration": round(self.duration, 6),
            "message": self.message,
        }


@dataclass(slots=True)
class BackendReport:
    backend: str
    capabilities: list[str]
    results: list[ClauseResult] = field(default_factory=list)
    error: str = ""
    """Set when the target could not be opened at all; every clause then counts as failed."""

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    @property
    def ok(self) -> bool:
        return not self.error and self.count(Outcome.FAILED) == 0

    @property
    def failures(self) -> list[ClauseResult]:
        return [r for r in self.results if r.outcome is Outcome.FAILED]

    def result(self, clause_id: str) -> ClauseResult:
        for r in self.results:
            if r.clause_id == clause_id:
                return r
        raise KeyError(clause_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "capabilities": self.capabilities,
            "ok": self.ok,
            "error": self.error,
            "summary": _summary([self]),
            "results": [r.to_dict() for r in self.results],
        }


@dataclass(slots=True)
class Report:
    backends: list[BackendReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every clause of every backend passed, was skipped or failed as expected."""
        return bool(self.backends) and all(b.ok for b in self.backends)

    @property
    def summary(self) -> dict[str, int]:
        return _summary(self.backends)

    def backend(self, name: str) -> BackendReport:
        for b in self.backends:
            if b.backend == name:
                return b
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "ok": self.ok, "backends": [b.to_dict() for b in self.backends]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    def to_junit_xml(self) -> str:
        summary = self.summary
        suites = ET.Element(
            "testsuites",
            name="checkpoint-conformance",
            tests=str(sum(summary.values())),
            failures=str(summary["failed"]),
            skipped=str(summary["skipped"] + summary["xfailed"]),
        )
        for backend in self.backends:
            suite = ET.SubElement(
                suites,
                "testsuite",
                name=backend.backend,
                tests=str(len(backend.results)),
                failures=str(backend.count(Outcome.FAILED)),
                skipped=str(backend.count(Outcome.SKIPPED) + backend.count(Outcome.XFAILED)),
                time=f"{sum(r.duration for r in backend.results):.6f}",
            )
            if backend.error:
                case = ET.SubElement(suite, "testcase", classname=backend.backend, name="open")
                ET.SubElement(case, "error", message=backend.error)
            for r in backend.results:
                case = ET.SubElement(
                    suite,
                    "testcase",
                    classname=f"{backend.backend}.{r.family}",
                    name=r.clause_id,
                    time=f"{r.duration:.6f}",
                )
                if r.outcome is Outcome.FAILED:
                    ET.SubElement(case, "failure", message=r.message[:500]).text = r.message
                elif r.outcome in (Outcome.SKIPPED, Outcome.XFAILED):
                    ET.SubElement(case, "skipped", message=f"{r.outcome.value}: {r.message}"[:500])
        ET.indent(suites)
        return ET.tostring(suites, encoding="unicode", xml_declaration=True)

    def write_junit_xml(self, path: str | Path) -> None:
        Path(path).write_text(self.to_junit_xml() + "\n", encoding="utf-8")


def _summary(backends: list[BackendReport]) -> dict[str, int]:
    counts = {outcome.value: 0 for outcome in Outcome}
    for backend in backends:
        for r in backend.results:
            counts[r.outcome.value] += 1
    return counts


__all__ = ["BackendReport", "ClauseResult", "Outcome", "Report"]
