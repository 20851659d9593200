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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from storages.redaction import redact_text, redact_url

REPORT_FORMAT = "checkpoint-conformance/2"
"""The JSON report's ``format``. Version 2: a clause that did not apply is ``not_applicable`` in
every field (version 1 said ``skipped`` in outcomes and the summary), and results carry
``traceback``."""


class Outcome(str, enum.Enum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_APPLICABLE = "not_applicable"
    """Not applicable: the storage does not declare a capability the clause requires (or the
    target has no fault injector for it, or gives the kit no way to check). JUnit XML and pytest
    report it as skipped, the one word CI tools know; everywhere else it is ``not_applicable``."""
    SKIPPED = "not_applicable"
    """The former name of :attr:`NOT_APPLICABLE` (an alias: the same member)."""
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
    traceback: str = ""
    """Where an unexpected exception (not a clause's own verdict) was raised, in Python's words;
    empty otherwise."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", redact_text(self.message))
        object.__setattr__(self, "traceback", redact_text(self.traceback))

    def to_dict(self) -> dict[str, Any]:
        return {
            "clause": self.clause_id,
            "family": self.family,
            "guarantee": self.guarantee,
            "outcome": self.outcome.value,
            "duration": round(self.duration, 6),
            "message": self.message,
            "traceback": self.traceback,
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
    expiry_capabilities: list[str] | None = None
    """What the store the expiry family runs on declares, where the target has one of its own
    (``StorageTarget.expiry_factory``); None where the family runs on the main store."""
    leftovers: list[str] = field(default_factory=list)
    """Workflows the kit created and could not delete afterwards."""
    storage_type: str = ""
    """Module and class of the storage under test."""
    storage_package: str = ""
    """``distribution version`` of the package the storage class comes from, when installed."""
    started_at: str = ""
    finished_at: str = ""

    def __post_init__(self) -> None:
        self.backend = redact_text(self.backend)  # a name may hold a URL among other words
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
        return self.count(Outcome.NOT_APPLICABLE)

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
                sum(1 for r in results if r.outcome is Outcome.NOT_APPLICABLE),
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
            "expiry_capabilities": self.expiry_capabilities,
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


@dataclass(frozen=True, slots=True)
class NotRun:
    """A registered backend the run did not check, and why (the no-argument run names each one)."""

    backend: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"backend": self.backend, "reason": self.reason}


@dataclass(slots=True)
class Report:
    backends: list[BackendReport] = field(default_factory=list)
    started_at: str = field(default_factory=lambda: now())
    finished_at: str = ""
    not_run: list[NotRun] = field(default_factory=list)
    """Registered backends this run did not check (no URL, no embedded default, no server)."""

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
        from storages.version import installed_version

        return {
            "format": REPORT_FORMAT,
            "kit_version": installed_version(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "summary": self.summary,
            "ok": self.ok,
            "backends": [b.to_dict() for b in self.backends],
            "not_run": [n.to_dict() for n in self.not_run],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    def to_junit_xml(self) -> str:
        """The report as JUnit XML: one suite per backend, one case per clause. A clause that did
        not apply, failed as declared or is a runner finding is ``skipped`` (what CI tools know);
        a backend that could not be opened or reached is one ``error`` case of its suite."""
        suites = ET.Element("testsuites", name="checkpoint-conformance")
        totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
        for backend in self.backends:
            # Classnames are stable across runs and free of credentials and temporary paths:
            # the backend's name without password, query or directories, dotted with the family.
            suite_class = junit_classname(backend.backend)
            suite = ET.SubElement(
                suites,
                "testsuite",
                name=backend.backend,
                time=f"{sum(r.duration for r in backend.results):.6f}",
                timestamp=backend.started_at,
            )
            counts = dict.fromkeys(totals, 0)
            if backend.error:
                case = ET.SubElement(suite, "testcase", classname=suite_class, name="open")
                ET.SubElement(case, "error", message=backend.error[:500]).text = backend.error
                counts["tests"] += 1
                counts["errors"] += 1
            if backend.missing_capabilities:
                case = ET.SubElement(suite, "testcase", classname=suite_class, name="required_capabilities")
                text = "required but not declared: " + ", ".join(backend.missing_capabilities)
                ET.SubElement(case, "failure", message=text).text = text
                counts["tests"] += 1
                counts["failures"] += 1
            for r in backend.results:
                case = ET.SubElement(
                    suite,
                    "testcase",
                    classname=f"{suite_class}.{r.family}",
                    name=r.clause_id,
                    time=f"{r.duration:.6f}",
                )
                counts["tests"] += 1
                if r.outcome is Outcome.FAILED:
                    text = f"{r.message}\n\n{r.traceback}" if r.traceback else r.message
                    ET.SubElement(case, "failure", message=r.message[:500]).text = text
                    counts["failures"] += 1
                elif r.outcome in (Outcome.NOT_APPLICABLE, Outcome.XFAILED, Outcome.FINDING):
                    ET.SubElement(case, "skipped", message=f"{r.outcome.value}: {r.message}"[:500])
                    counts["skipped"] += 1
            for name, count in counts.items():
                suite.set(name, str(count))
                totals[name] += count
        for name, count in totals.items():
            suites.set(name, str(count))
        ET.indent(suites)
        return ET.tostring(suites, encoding="unicode", xml_declaration=True)

    def write_junit_xml(self, path: str | Path) -> None:
        Path(path).write_text(self.to_junit_xml() + "\n", encoding="utf-8")


_NOT_CLASSNAME = re.compile(r"[^A-Za-z0-9_]+")


def junit_classname(backend: str) -> str:
    """A stable, credential-free JUnit classname for a backend name or URL: its scheme, host, port
    and the last segment of its path (a file, a database, a key prefix's last part), without
    user, password, query or directories, as dotted identifier parts. A temporary directory (a
    SQLite file under /tmp) never enters it, so the same store has the same classname every run."""
    from urllib.parse import urlsplit

    name = redact_url(backend)
    if "://" in name:
        try:
            parts = urlsplit(name)
            host = parts.hostname or ""
            name = f"{parts.scheme} {host} {parts.port or ''} {_last_segment(parts.path)}"
        except ValueError:
            name = _last_segment(name.split("?", 1)[0])
    else:
        name = " ".join(_last_segment(word) for word in name.split())
    cleaned = ".".join(p for p in _NOT_CLASSNAME.sub(" ", name).split() if p)
    return f"conformance.{cleaned or 'storage'}"


def _last_segment(path: str) -> str:
    """``/tmp/pytest-7/run/ck.db`` -> ``ck.db``; a word without a slash is itself."""
    segments = [segment for segment in re.split(r"[/\\]", path) if segment]
    return segments[-1] if segments else ""


def now() -> str:
    """The current UTC time, ISO 8601 with seconds."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _summary(backends: list[BackendReport]) -> dict[str, int]:
    counts = {outcome.value: 0 for outcome in Outcome}
    for backend in backends:
        for r in backend.results:
            counts[r.outcome.value] += 1
    return counts


__all__ = [
    "REPORT_FORMAT",
    "BackendReport",
    "ClauseResult",
    "FamilyCoverage",
    "NotRun",
    "Outcome",
    "Report",
    "junit_classname",
]
