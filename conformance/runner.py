"""Running clauses against targets: ``validate()`` and ``avalidate()``.

**The watchdog** (conformance/watchdog.py): a target's clauses run on an event loop of their own,
on a daemon thread, so a storage that blocks the loop fails its clause instead of hanging the run.

**Fail fast.** Before the first clause the kit opens one handle and makes one read; a storage
whose backend cannot be reached (:class:`~storages.errors.StorageUnavailableError`, ``OSError``,
a timeout) is reported as unreachable with the driver's error, and no clause runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from storages.contract import Capability
from storages.errors import InvalidCheckpointError, StorageUnavailableError
from storages.redaction import redact_text

from .bounded import OPERATION_TIMEOUT, OperationWatch
from .clause import Clause, ClauseFailure, ClauseNotApplicable, RunnerFinding
from .context import ClauseContext
from .report import BackendReport, ClauseResult, Outcome, Report, now
from .selection import select_clauses
from .target import StorageFactory, StorageTarget
from .watchdog import CLEANUP_TIMEOUT, ClauseLoop, abandoned_loops, watchdog_message

ProgressCallback = Callable[[str, ClauseResult], None]
T = TypeVar("T")

WATCHDOG_GRACE = 5.0
"""Seconds past a clause's timeout before the watchdog gives up on the clause's event loop."""
CONNECTIVITY_TIMEOUT = 30.0
"""Seconds the one connectivity check before the first clause may take."""


class ConformanceUsageError(RuntimeError):
    """The kit was called in a way that cannot work; the message says what to do instead."""


async def run_clause(
    clause: Clause, target: StorageTarget, watch: OperationWatch | None = None
) -> ClauseResult:
    """Run one clause on a fresh handle of ``target`` in the running loop; never raises.
    ``watch``: the bound on the storage's calls, shared by the clauses of one run so that a
    storage marked stuck by one fails the later ones at once (None: a watch for this clause)."""
    if watch is None:
        watch = operation_watch(target)
    target = target.for_family(clause.family)
    result, created = await _run_clause(clause, target, watch)
    if created and target.remove_workflows:
        leftovers = await _remove_workflows(target, created, watch)
        result = dataclasses.replace(result, leftovers=leftovers)
    return result


def operation_watch(target: StorageTarget) -> OperationWatch:
    """The bound on each storage call of a run against ``target`` (see conformance/bounded.py)."""
    return OperationWatch(target.operation_timeout * target.timeout_factor)


async def _run_clause(
    clause: Clause, target: StorageTarget, watch: OperationWatch
) -> tuple[ClauseResult, list[str]]:
    """The clause's result, and the workflows it created (for the caller to delete)."""
    started = time.perf_counter()
    if watch.stuck:
        return _result(clause, Outcome.FAILED, started, _not_run(watch)), []
    seconds = max(target.operation_timeout, clause.operation_timeout or 0.0) * target.timeout_factor
    watch.begin(clause.id, seconds)
    try:
        fresh = target.fresh_store is not None and await watch.run("a fresh store", target.fresh_store())
        storage = await watch.run("the target's factory", target.open())
    except Exception as exc:
        message = f"could not open the storage: {_describe(exc)}"
        return _result(clause, Outcome.FAILED, started, message, _traceback(exc)), []
    context = ClauseContext(target, storage, target.declared_capabilities(storage), watch)
    result = await _judge(clause, target, context, started)
    if watch.stuck:
        return result, context.created_workflows  # closing a stuck storage's handles would hang
    try:
        await context.close_handles()
    except Exception as exc:  # a failing close is a finding, not a crash of the kit
        result = _result(
            clause, Outcome.FAILED, started, f"aclose() raised {_describe(exc)}", _traceback(exc)
        )
    if watch.stuck:
        result = _result(clause, Outcome.FAILED, started, _stuck_here(watch))
    # On a store of its own, nothing the clause wrote is where a later clause runs.
    return result, [] if fresh else context.created_workflows


def _stuck_here(watch: OperationWatch) -> str:
    return (
        f"{watch.stuck}: the storage is marked stuck, and the clauses after this one fail without "
        "running (each would wait for it too)"
    )


def _not_run(watch: OperationWatch) -> str:
    return f"not run: the storage is stuck since {watch.stuck_in or 'an earlier call'}, where {watch.stuck}"


async def _judge(
    clause: Clause, target: StorageTarget, context: ClauseContext, started: float
) -> ClauseResult:
    missing = clause.requires - context.capabilities
    injectable = target.faults.faults if target.faults is not None else frozenset()
    not_injectable = sorted(f.value for f in clause.injects - injectable)
    if missing & target.required_capabilities:
        names = ", ".join(sorted(c.value for c in missing & target.required_capabilities))
        message = f"needs capability {names}, which the run requires but the storage does not declare"
        return _result(clause, Outcome.FAILED, started, message)
    if missing:
        names = ", ".join(sorted(c.value for c in missing))
        return _result(clause, Outcome.NOT_APPLICABLE, started, f"needs undeclared capability {names}")
    if not_injectable:
        return _result(
            clause, Outcome.NOT_APPLICABLE, started, f"needs a fault injector for {', '.join(not_injectable)}"
        )
    outcome, message, where = await _outcome(clause, context, clause.timeout * target.timeout_factor)
    reason = target.expected_failures.get(clause.id)
    if reason is not None and outcome is not Outcome.NOT_APPLICABLE:
        if outcome in (Outcome.FAILED, Outcome.FINDING):
            outcome, message = Outcome.XFAILED, f"known deviation ({reason}): {message}"
        else:
            outcome = Outcome.FAILED
            message = f"declared as a known deviation ({reason}) but passed; remove it from expected_failures"
    finding = target.runner_findings.get(clause.id)
    if finding is not None and outcome in (Outcome.PASSED, Outcome.FAILED):
        if outcome is Outcome.FAILED:
            outcome, message = Outcome.FINDING, f"runner finding ({finding}): {message}"
        else:
            outcome = Outcome.FAILED
            message = f"declared as a runner finding ({finding}) but passed; remove it from runner_findings"
    return _result(clause, outcome, started, message, where)


async def _outcome(clause: Clause, context: ClauseContext, seconds: float) -> tuple[Outcome, str, str]:
    """The clause's outcome, its message, and the traceback of an unexpected exception (a
    clause's own verdicts need none: their message says what broke)."""
    outcome = await _verdict(clause, context, seconds)
    if context.watch.stuck and context.watch.stuck_in == clause.id:
        # Whatever the clause made of the stuck call (it may have caught the error), the call
        # did not return: that is the finding.
        return Outcome.FAILED, _stuck_here(context.watch), ""
    return outcome


async def _verdict(clause: Clause, context: ClauseContext, seconds: float) -> tuple[Outcome, str, str]:
    try:
        await asyncio.wait_for(clause.function(context), timeout=seconds)
    except RunnerFinding as exc:
        return Outcome.FINDING, str(exc), ""
    except ClauseFailure as exc:
        return Outcome.FAILED, str(exc), ""
    except ClauseNotApplicable as exc:
        return Outcome.NOT_APPLICABLE, str(exc), ""
    except TimeoutError:
        return Outcome.FAILED, f"timed out after {seconds:g} s", ""
    except Exception as exc:
        return Outcome.FAILED, f"unexpected {_describe(exc)}", _traceback(exc)
    return Outcome.PASSED, "", ""


async def _remove_workflows(
    target: StorageTarget, names: Sequence[str], watch: OperationWatch
) -> tuple[str, ...]:
    """Delete the workflows a clause created, on a handle of their own; returns those left behind
    (all of them once the storage is stuck)."""
    left: list[str] = []
    if watch.stuck:
        return tuple(names)
    try:
        storage = watch.bound(await watch.run("the target's factory", target.open()))
    except Exception:
        return tuple(names)
    try:
        prune = Capability.PRUNE in target.declared_capabilities(storage)
        for name in names:
            try:
                if prune:
                    await storage.delete_workflow(workflow_name=name)
                else:
                    for checkpoint_id in await storage.list_checkpoint_ids(workflow_name=name):
                        await storage.delete(checkpoint_id)
            except InvalidCheckpointError:
                pass  # a name the storage refuses (the identifiers clauses try some) holds nothing
            except Exception:  # a clause may have broken the store on purpose; report, go on
                left.append(name)
    finally:
        close = getattr(storage, "aclose", None)
        if close is not None and not watch.stuck:
            with contextlib.suppress(Exception):
                await close()
    return tuple(left)


def _result(clause: Clause, outcome: Outcome, started: float, message: str, where: str = "") -> ClauseResult:
    return ClauseResult(
        clause.id,
        clause.family,
        clause.guarantee,
        outcome,
        time.perf_counter() - started,
        message,
        traceback=where,
    )


def _describe(exc: BaseException) -> str:
    return redact_text(f"{type(exc).__name__}: {exc}")


def _traceback(exc: BaseException) -> str:
    """``exc``'s traceback as Python prints it (chained causes included), redacted."""
    return redact_text("".join(traceback.format_exception(exc)).rstrip())


def _is_unavailable(exc: BaseException) -> bool:
    return isinstance(exc, (StorageUnavailableError, OSError, asyncio.TimeoutError))


# ---------------------------------------------------------------------- targets and runs


@dataclasses.dataclass(frozen=True, slots=True)
class _Probe:
    capabilities: frozenset[Capability] = frozenset()
    storage_type: str = ""
    error: str = ""
    unreachable: bool = False


async def _probe(target: StorageTarget) -> _Probe:
    """Open one handle and make one read: what the storage declares, and whether it answers."""
    try:
        if target.prepare is not None:
            await target.prepare()
        storage = await target.open()
    except Exception as exc:
        if _is_unavailable(exc):
            return _Probe(error=f"could not reach the storage: {_describe(exc)}", unreachable=True)
        return _Probe(error=f"could not open the storage: {_describe(exc)}")
    storage_type = f"{type(storage).__module__}.{type(storage).__qualname__}"
    try:
        capabilities = target.declared_capabilities(storage)
        try:
            await storage.get_latest(workflow_name=f"ck-connectivity-{uuid.uuid4().hex[:8]}")
        except Exception as exc:
            if _is_unavailable(exc):
                return _Probe(
                    capabilities, storage_type, f"could not reach the storage: {_describe(exc)}", True
                )
            # Anything else is a defect the clauses will report, one by one.
        return _Probe(capabilities, storage_type)
    except Exception as exc:
        return _Probe(error=f"could not open the storage: {_describe(exc)}")
    finally:
        close = getattr(storage, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):  # the lifecycle clauses judge aclose()
                await close()


def _package_of(storage_type: str) -> str:
    """``distribution version`` of the installed package a module belongs to, or ""."""
    import importlib.metadata

    top = storage_type.partition(".")[0]
    if top in ("storages", "conformance"):
        distributions: list[str] = ["checkpoint-storages"]
    else:
        distributions = _distributions().get(top, [])
    for distribution in distributions:
        try:
            return f"{distribution} {importlib.metadata.version(distribution)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


@functools.lru_cache(maxsize=1)
def _distributions() -> Mapping[str, list[str]]:
    """Top-level module -> distributions providing it; scanning them takes a while, so once."""
    import importlib.metadata

    try:
        return importlib.metadata.packages_distributions()
    except Exception:
        return {}


async def avalidate_target(
    target: StorageTarget,
    *,
    clauses: Sequence[Clause] | None = None,
    progress: ProgressCallback | None = None,
    required_capabilities: Iterable[Capability | str] = (),
) -> BackendReport:
    """Run ``clauses`` (default: all) against one target, each on the watchdog's clause loop."""
    selected = list(clauses) if clauses is not None else select_clauses()
    required = target.required_capabilities | {Capability(c) for c in required_capabilities}
    if required != target.required_capabilities:
        target = dataclasses.replace(target, required_capabilities=frozenset(required))
    started_at = now()
    loop = ClauseLoop()
    try:
        patience = CONNECTIVITY_TIMEOUT * target.timeout_factor
        try:
            probe = await loop.call(_probe(target), patience)
        except TimeoutError:
            if not loop.responsive():
                loop.abandon()
                loop = ClauseLoop()
            silence = f"could not reach the storage: no answer within {patience:g} s"
            probe = _Probe(error=silence, unreachable=True)
        report = BackendReport(
            target.name,
            sorted(c.value for c in probe.capabilities),
            error=probe.error,
            unreachable=probe.unreachable,
            storage_type=probe.storage_type,
            storage_package=_package_of(probe.storage_type) if probe.storage_type else "",
            started_at=started_at,
        )
        if probe.error:
            report.finished_at = now()
            return report
        report.missing_capabilities = sorted(c.value for c in required - probe.capabilities)
        if target.expiry_factory is not None:
            expiry_store = await loop.call(_probe(target.for_family("expiry")), patience)
            if not expiry_store.error:
                report.expiry_capabilities = sorted(c.value for c in expiry_store.capabilities)
        watch = operation_watch(target)
        for clause in selected:
            deadline = (clause.timeout + WATCHDOG_GRACE) * target.timeout_factor
            started = time.perf_counter()
            on = target.for_family(clause.family)
            try:
                result, created = await loop.call(_run_clause(clause, on, watch), deadline)
            except TimeoutError:
                blocked = not loop.responsive()
                loop.abandon()
                loop = ClauseLoop()
                result = _result(clause, Outcome.FAILED, started, watchdog_message(deadline, blocked))
                created = []  # unknown: the clause's context is stuck on the abandoned loop
            if created and target.remove_workflows:
                # Watched on its own: a slow cleanup must not eat into the clause's deadline.
                try:
                    watch.begin(f"the cleanup after {clause.id}", operation_watch(target).seconds)
                    cleanup = _remove_workflows(on, created, watch)
                    leftovers = await loop.call(cleanup, CLEANUP_TIMEOUT)
                except TimeoutError:
                    leftovers = tuple(created)
                    if not loop.responsive():
                        loop.abandon()
                        loop = ClauseLoop()
                result = dataclasses.replace(result, leftovers=leftovers)
            report.results.append(result)
            report.leftovers.extend(result.leftovers)
            if progress is not None:
                progress(report.backend, result)
        report.finished_at = now()
        return report
    finally:
        await _finish_target(loop, target)


async def _finish_target(loop: ClauseLoop, target: StorageTarget) -> None:
    """Run the target's cleanup and close the clause loop; the run may end with a clause still
    blocking it (an interrupted run), so cleanup then goes to a fresh loop."""
    if not loop.responsive():
        loop.abandon()
        loop = ClauseLoop()
    try:
        if target.cleanup is not None:
            await loop.call(target.cleanup(), CLEANUP_TIMEOUT)
    except TimeoutError:
        pass  # close() below abandons a loop that is still blocked
    finally:
        await loop.close()


def as_target(subject: StorageTarget | StorageFactory, name: str | None = None) -> StorageTarget:
    if isinstance(subject, StorageTarget):
        return subject
    label = name or getattr(subject, "__qualname__", None) or type(subject).__name__
    return StorageTarget(name=label, factory=subject)


async def avalidate(
    *subjects: StorageTarget | StorageFactory,
    clauses: Iterable[str] | None = None,
    progress: ProgressCallback | None = None,
    required_capabilities: Iterable[Capability | str] = (),
) -> Report:
    """Run the kit against each subject (a StorageTarget or a factory returning a storage).

    ``required_capabilities``: capabilities every subject must declare (see
    :attr:`StorageTarget.required_capabilities`).
    """
    selected = select_clauses(clauses)
    required = capabilities_from_names(required_capabilities)
    report = Report()
    for subject in subjects:
        report.backends.append(
            await avalidate_target(
                as_target(subject), clauses=selected, progress=progress, required_capabilities=required
            )
        )
    report.finished_at = now()
    return report


def validate(
    *subjects: StorageTarget | StorageFactory,
    clauses: Iterable[str] | None = None,
    progress: ProgressCallback | None = None,
    required_capabilities: Iterable[Capability | str] = (),
) -> Report:
    """Synchronous :func:`avalidate` for scripts and CI; inside an event loop, ``await avalidate(...)``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ConformanceUsageError(
            "validate() was called inside a running event loop (an async function, a notebook, "
            "pytest-asyncio); use `await avalidate(...)` there, with the same arguments"
        )
    required = capabilities_from_names(required_capabilities)
    return asyncio.run(
        avalidate(*subjects, clauses=clauses, progress=progress, required_capabilities=required)
    )


def capabilities_from_names(names: Iterable[Capability | str]) -> frozenset[Capability]:
    """Capabilities from names; an unknown name is a ValueError listing the known ones."""
    known = {c.value: c for c in Capability}
    result: set[Capability] = set()
    for name in names:
        value = name.value if isinstance(name, Capability) else str(name).strip()
        if value not in known:
            raise ValueError(f"unknown capability {value!r}; known: {', '.join(sorted(known))}")
        result.add(known[value])
    return frozenset(result)


__all__ = [
    "CLEANUP_TIMEOUT",
    "CONNECTIVITY_TIMEOUT",
    "OPERATION_TIMEOUT",
    "WATCHDOG_GRACE",
    "ConformanceUsageError",
    "abandoned_loops",
    "capabilities_from_names",
    "as_target",
    "operation_watch",
    "avalidate",
    "avalidate_target",
    "run_clause",
    "validate",
]
