"""Running clauses against targets: ``validate()`` and ``avalidate()``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence

from .clause import Clause, ClauseFailure, ClauseNotApplicable, select_clauses
from .context import ClauseContext
from .report import BackendReport, ClauseResult, Outcome, Report
from .target import StorageFactory, StorageTarget

ProgressCallback = Callable[[str, ClauseResult], None]


async def run_clause(clause: Clause, target: StorageTarget) -> ClauseResult:
    """Run one clause on a fresh handle of ``target``; never raises."""
    started = time.perf_counter()
    try:
        storage = await target.open()
    except Exception as exc:
        return _result(clause, Outcome.FAILED, started, f"could not open the storage: {_describe(exc)}")
    context = ClauseContext(target, storage, target.declared_capabilities(storage))
    missing = sorted(c.value for c in clause.requires - context.capabilities)
    injectable = target.faults.faults if target.faults is not None else frozenset()
    not_injectable = sorted(f.value for f in clause.injects - injectable)
    try:
        if missing:
            return _result(
                clause, Outcome.SKIPPED, started, f"needs undeclared capability {', '.join(missing)}"
            )
        if not_injectable:
            return _result(
                clause, Outcome.SKIPPED, started, f"needs a fault injector for {', '.join(not_injectable)}"
            )
        outcome, message = await _outcome(clause, context)
    finally:
        try:
            await context.close_handles()
        except Exception as exc:  # a failing close is a finding, not a crash of the kit
            return _result(clause, Outcome.FAILED, started, f"aclose() raised {_describe(exc)}")
    reason = target.expected_failures.get(clause.id)
    if reason is not None and outcome is not Outcome.SKIPPED:
        if outcome is Outcome.FAILED:
            return _result(clause, Outcome.XFAILED, started, f"known deviation ({reason}): {message}")
        return _result(
            clause,
            Outcome.FAILED,
            started,
            f"declared as a known deviation ({reason}) but passed; remove it from expected_failures",
        )
    return _result(clause, outcome, started, message)


async def _outcome(clause: Clause, context: ClauseContext) -> tuple[Outcome, str]:
    try:
        await asyncio.wait_for(clause.function(context), timeout=clause.timeout)
    except ClauseFailure as exc:
        return Outcome.FAILED, str(exc)
    except ClauseNotApplicable as exc:
        return Outcome.SKIPPED, str(exc)
    except asyncio.TimeoutError:
        return Outcome.FAILED, f"timed out after {clause.timeout:g} s"
    except Exception as exc:
        return Outcome.FAILED, f"unexpected {_describe(exc)}"
    return Outcome.PASSED, ""


def _result(clause: Clause, outcome: Outcome, started: float, message: str) -> ClauseResult:
    return ClauseResult(
        clause.id, clause.family, clause.guarantee, outcome, time.perf_counter() - started, message
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def as_target(subject: StorageTarget | StorageFactory, name: str | None = None) -> StorageTarget:
    if isinstance(subject, StorageTarget):
        return subject
    label = name or getattr(subject, "__qualname__", None) or type(subject).__name__
    return StorageTarget(name=label, factory=subject)


async def avalidate_target(
    target: StorageTarget,
    *,
    clauses: Sequence[Clause] | None = None,
    progress: ProgressCallback | None = None,
) -> BackendReport:
    """Run ``clauses`` (default: all) against one target."""
    selected = list(clauses) if clauses is not None else select_clauses()
    try:
        probe = await target.open()
        capabilities = target.declared_capabilities(probe)
        close = getattr(probe, "aclose", None)
        if close is not None:
            await close()
    except Exception as exc:
        report = BackendReport(target.name, [], error=f"could not open the storage: {_describe(exc)}")
        if target.cleanup is not None:
            await target.cleanup()
        return report
    report = BackendReport(target.name, sorted(c.value for c in capabilities))
    try:
        for clause in selected:
            result = await run_clause(clause, target)
            report.results.append(result)
            if progress is not None:
                progress(target.name, result)
    finally:
        if target.cleanup is not None:
            await target.cleanup()
    return report


async def avalidate(
    *subjects: StorageTarget | StorageFactory,
    clauses: Iterable[str] | None = None,
    progress: ProgressCallback | None = None,
) -> Report:
    """Run the kit against each subject (a StorageTarget or a factory returning a storage)."""
    selected = select_clauses(clauses)
    report = Report()
    for subject in subjects:
        report.backends.append(
            await avalidate_target(as_target(subject), clauses=selected, progress=progress)
        )
    return report


def validate(
    *subjects: StorageTarget | StorageFactory,
    clauses: Iterable[str] | None = None,
    progress: ProgressCallback | None = None,
) -> Report:
    """Synchronous :func:`avalidate`, for scripts and CI; use ``avalidate`` inside an event loop."""
    return asyncio.run(avalidate(*subjects, clauses=clauses, progress=progress))


__all__ = ["as_target", "avalidate", "avalidate_target", "run_clause", "validate"]
