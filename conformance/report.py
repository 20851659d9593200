"""Reports: per backend and clause outcomes, as JSON, JUnit XML, or rich tables.

Every string a report holds that can carry a storage URL or a driver's error message is
redacted (:mod:`storages.redaction`) when it enters the report, so no output format can leak a
password: the console, the JSON and the JUnit XML are all rendered from the same redacted text.
"""

from __future__ import annotations

import enum
import json
import platform
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from storages.redaction import redact_text, redact_url


class Outcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    """Not applicable: the storage does not declare a capability the clause requires (or the
    target has no fault injector for it)."""
    XFAILED = "xfailed"
    """Failed as the target declared it would (a known deviation)."""
    FINDING = "finding"
    """The runner driving the storage, not the storage, broke the guarantee (for example MAF's
    dangling link when a sub-workflow has a storage of its own). Reported, not held against the
    storage: it does not fail the run."""

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
    leftovers: tuple[str, ...] = ()
    """Workflows the clause created that the kit could not delete afterwards."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", redact_text(self.message))

    def to_dict(self) -> dict[str, Any]:
        return {
            "clause": self.clause_id,
            "family": self.family,
            "guarantee": self.guarantee,
            "outcome": self.outcome.value,
            "duration": round(self.duration, 6),
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class FamilyCoverage:
    """How much of one family applied to a backend and how it went."""

    family: str
    clauses: int
    passed: int
    failed: int
    not_applicable: int
    xfailed: int
    findings: int

    @property
    def applicable(self) -> int:
        return self.clauses - self.not_applicable

    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "clauses": self.clauses,
            "applicable": self.applicable,
            "passed": self.passed,
            "failed": self.failed,
            "not_applicable": self.not_applicable,
            "xfailed": self.xfailed,
            "findings": self.findings,
        }


@dataclass(slots=True)
class BackendReport:
    backend: str
    """The target's name; a URL is stored redacted."""
    capabilities: list[str]
    results: list[ClauseResult] = field(default_factory=list)
    error: str = ""
    """Set when the target could not be opened or reached at all; every clause then counts as failed."""
    unreachable: bool = False
    """The storage opened but its backend did not answer the kit's one connectivity check."""
    missing_capabilities: list[str] = field(default_factory=list)
    """Capabilities the run required (``--require``) that the storage does not declare."""
    leftovers: list[str] = field(default_factory=list)
    """Workflows the kit created and could not delete afterwards."""
    storage_type: str = ""
    """Module and class of the storage under test."""
    storage_package: str = ""
    """``distribution version`` of the package the storage class comes from, when installed."""
    started_at: str = ""
    finished_at: str = ""

    def __post_init__(self) -> None:
        self.backend = redact_url(self.backend)
        self.error = redact_text(self.error)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    @property
    def ok(self) -> bool:
        return not self.error and not self.missing_capabilities and self.count(Outcome.FAILED) == 0

    @property
    def failures(self) -> list[ClauseResult]:
        return [r for r in self.results if r.outcome is Outcome.FAILED]

    @property
    def findings(self) -> list[ClauseResult]:
        return [r for r in self.results if r.outcome is Outcome.FINDING]

    @property
    def not_applicable(self) -> int:
        return self.count(Outcome.SKIPPED)

    def coverage(self) -> list[FamilyCoverage]:
        """One entry per family that has results, in result order."""
        families: dict[str, list[ClauseResult]] = {}
        for r in self.results:
            families.setdefault(r.family, []).append(r)
        return [
            FamilyCoverage(
                family,
                len(results),
                sum(1 for r in results if r.outcome is Outcome.PASSED),
                sum(1 for r in results if r.outcome is Outcome.FAILED),
                sum(1 for r in results if r.outcome is Outcome.SKIPPED),
                sum(1 for r in results if r.outcome is Outcome.XFAILED),
                sum(1 for r in results if r.outcome is Outcome.FINDING),
            )
            for family, results in families.items()
        ]

    def result(self, clause_id: str) -> ClauseResult:
        for r in self.results:
            if r.clause_id == clause_id:
                return r
        raise KeyError(clause_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "storage_type": self.storage_type,
            "storage_package": self.storage_package,
            "capabilities": self.capabilities,
            "missing_capabilities": self.missing_capabilities,
            "ok": self.ok,
            "error": self.error,
            "unreachable": self.unreachable,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "summary": _summary([self]),
            "not_applicable": {"clauses": self.not_applicable, "of": len(self.results)},
            "coverage": [c.to_dict() for c in self.coverage()],
            "leftovers": self.leftovers,
            "results": [r.to_dict() for r in self.results],
        }


@dataclass(slots=True)
class Report:
    backends: list[BackendReport] = field(default_factory=list)
    started_at: str = field(default_factory=lambda: now())
    finished_at: str = ""

    @property
    def ok(self) -> bool:
        """True when every clause of every backend passed, was not applicable, failed as expected
        or was a runner finding, and every required capability is declared."""
        return bool(self.backends) and all(b.ok for b in self.backends)

    @property
    def unreachable(self) -> bool:
        return any(b.unreachable for b in self.backends)

    @property
    def summary(self) -> dict[str, int]:
        return _summary(self.backends)

    def backend(self, name: str) -> BackendReport:
        for b in self.backends:
            if b.backend == name:
                return b
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        from storages import installed_version

        return {
            "kit_version": installed_version(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "summary": self.summary,
            "ok": self.ok,
            "backends": [b.to_dict() for b in self.backends],
        }

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
            skipped=str(summary["skipped"] + summary["xfailed"] + summary["finding"]),
        )
        for backend in self.backends:
            # Classnames are stable across runs and free of credentials: the backend's name
            # without password, query or run-specific parts, dotted with the family.
            suite_class = junit_classname(backend.backend)
            suite = ET.SubElement(
                suites,
                "testsuite",
                name=backend.backend,
                tests=str(len(backend.results)),
                failures=str(backend.count(Outcome.FAILED)),
                skipped=str(
                    backend.count(Outcome.SKIPPED)
                    + backend.count(Outcome.XFAILED)
                    + backend.count(Outcome.FINDING)
                ),
                time=f"{sum(r.duration for r in backend.results):.6f}",
                timestamp=backend.started_at,
            )
            if backend.error:
                case = ET.SubElement(suite, "testcase", classname=suite_class, name="open")
                ET.SubElement(case, "error", message=backend.error)
            if backend.missing_capabilities:
                case = ET.SubElement(suite, "testcase", classname=suite_class, name="required_capabilities")
                text = "required but not declared: " + ", ".join(backend.missing_capabilities)
                ET.SubElement(case, "failure", message=text).text = text
            for r in backend.results:
                case = ET.SubElement(
                    suite,
                    "testcase",
                    classname=f"{suite_class}.{r.family}",
                    name=r.clause_id,
                    time=f"{r.duration:.6f}",
                )
                if r.outcome is Outcome.FAILED:
                    ET.SubElement(case, "failure", message=r.message[:500]).text = r.message
                elif r.outcome in (Outcome.SKIPPED, Outcome.XFAILED, Outcome.FINDING):
                    ET.SubElement(case, "skipped", message=f"{r.outcome.value}: {r.message}"[:500])
        ET.indent(suites)
        return ET.tostring(suites, encoding="unicode", xml_declaration=True)

    def write_junit_xml(self, path: str | Path) -> None:
        Path(path).write_text(self.to_junit_xml() + "\n", encoding="utf-8")


_NOT_CLASSNAME = re.compile(r"[^A-Za-z0-9_]+")


def junit_classname(backend: str) -> str:
    """A stable, credential-free JUnit classname for a backend name or URL: its scheme, host and
    path, without user, password or query, as dotted identifier parts."""
    from urllib.parse import urlsplit

    name = redact_url(backend)
    if "://" in name:
        try:
            parts = urlsplit(name)
            host = parts.hostname or ""
            name = f"{parts.scheme} {host} {parts.port or ''} {parts.path}"
        except ValueError:
            name = name.split("?", 1)[0]
    cleaned = ".".join(p for p in _NOT_CLASSNAME.sub(" ", name).split() if p)
    return f"conformance.{cleaned or 'storage'}"


def now() -> str:
    """The current UTC time, ISO 8601 with seconds."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _summary(backends: list[BackendReport]) -> dict[str, int]:
    counts = {outcome.value: 0 for outcome in Outcome}
    for backend in backends:
        for r in backend.results:
            counts[r.outcome.value] += 1
    return counts


__all__ = ["BackendReport", "ClauseResult", "FamilyCoverage", "Outcome", "Report", "junit_classname"]
