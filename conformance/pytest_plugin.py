"""pytest entry point of the kit: every clause becomes one test item of your test class.

Subclass :class:`CheckpointStorageConformance` (its name does not start with ``Test``, so the base
itself is never collected) and say how to build your storage, either with ``make_storage``::

    from conformance.pytest_plugin import CheckpointStorageConformance

    class TestMyStorage(CheckpointStorageConformance):
        expected_failures = {"ordering.latest_ignores_older_timestamp": "issue #12"}

        def make_storage(self):
            return MyStorage(...)   # not opened: the kit opens it, and closes it after the clause

or, when the storage needs async set-up, with your own ``storage`` fixture (under pytest-asyncio's
strict mode decorate it with ``@pytest_asyncio.fixture``)::

        @pytest_asyncio.fixture
        async def storage(self):
            async with MyStorage(...) as storage:
                yield storage

Items are named ``test_clause[<clause id>]``. Each runs on a fresh ``storage`` (keep the fixture
function-scoped; put servers in a wider-scoped fixture it uses). The kit closes that handle when
the clause ends, so ``aclose()`` must be idempotent; second handles and reopening use the
storage's ``new_handle()``.

The clause test is a coroutine. With pytest-asyncio (auto or strict mode) it runs in
pytest-asyncio's loop, the same one your async fixtures use: the kit marks it ``asyncio``
unless you already did (mark the class ``pytest.mark.asyncio(loop_scope=...)`` to choose the
loop). In strict mode write async fixtures with ``@pytest_asyncio.fixture``. Without
pytest-asyncio this plugin runs it with ``asyncio.run`` (the fixture must then be synchronous).

Set ``required_capabilities`` to fail (not skip) the clauses that need a capability the storage
does not declare. A runner finding (see :class:`~conformance.report.Outcome`) is reported as an
xfail. Clause timeouts are cooperative here: the clause runs in the fixture's event loop, so a
storage that blocks that loop is stopped by pytest-timeout, not by the kit's watchdog. A storage
call that does not return within ``operation_timeout`` fails its clause and marks the class's
storage stuck for the rest of the session: every later clause of the class fails at once ("not
run: the storage is stuck since ..."), so a storage that hangs everything costs one bound, not
one per test.

Options: ``--conformance-clause ID_OR_FAMILY`` (repeatable) narrows every conformance class.
Importing this module has no side effects: no I/O, no storages, not even clause registration.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import pytest

from storages.contract import Capability, WorkflowCheckpoint

from .bounded import OPERATION_TIMEOUT, OperationWatch
from .clause import Clause
from .faults import FaultInjector
from .report import ClauseResult, Outcome
from .runner import capabilities_from_names, operation_watch, run_clause
from .scenario import RunnerProfile
from .selection import select_clauses
from .target import StorageTarget

CLAUSE_ARGUMENT = "conformance_clause"


class CheckpointStorageConformance:
    """Base class of a storage's conformance tests; subclasses provide a ``storage`` fixture."""

    expected_failures: ClassVar[Mapping[str, str]] = {}
    """Clause id -> reason. Such a clause xfails when it fails and fails the test when it passes."""
    checkpoint_class: ClassVar[type[Any]] = WorkflowCheckpoint
    """The class clauses build checkpoints with (``agent_framework.WorkflowCheckpoint`` for MAF's)."""
    clauses: ClassVar[Sequence[str] | None] = None
    """Clause ids or family names to run; None runs every clause."""
    capabilities: ClassVar[frozenset[Capability] | None] = None
    """Overrides the storage's declared ``capabilities``."""
    faults: ClassVar[FaultInjector | None] = None
    """Breaks the backend on purpose for the ``faults`` family; without one those clauses skip."""
    runner: ClassVar[RunnerProfile | None] = None
    """The runner the ``runner`` family drives; None is the kit's reference scenario driver."""
    required_capabilities: ClassVar[Iterable[Capability | str]] = ()
    """Capabilities the storage must declare: a clause needing one that is not declared fails
    instead of being skipped as not applicable."""
    process_opener: ClassVar[str | None] = None
    """How another process opens the same store (a URL or ``"module:function"``); see StorageTarget."""
    round_trips: ClassVar[Callable[[Any], int] | None] = None
    """Counts a handle's backend round trips, for the ``scale`` family; see StorageTarget."""
    model_seed: ClassVar[int | None] = None
    """Seed of the ``model`` family's generated programs (None: the kit's default seed)."""
    model_budget: ClassVar[str | None] = None
    """How much the ``model`` family generates: operations ("900") or seconds ("30s")."""
    operation_timeout: ClassVar[float] = OPERATION_TIMEOUT
    """Seconds one storage call may take: a call that does not return in time fails its clause
    ("did not return within N s") instead of the clause waiting out its whole timeout."""

    def reopen_storage(self) -> Any:
        """A new storage on the same store as ``make_storage()``/the fixture's, built from its
        settings (as a restarted process would). Define it for a durable storage: the kit proves
        ``durable`` with it (or with ``process_opener``); without either, ``durable`` is unverified."""
        raise NotImplementedError

    def make_expiring_storage(self) -> Any:
        """A new, unopened storage of the same backend whose records live a second (``ttl=1``), in
        a namespace of its own. Define it for a storage with a time to live: the ``expiry`` family
        runs on it, and every other clause on ``make_storage()``/the fixture's storage, whose
        records must outlive a clause (see StorageTarget.expiry_factory)."""
        raise NotImplementedError

    def make_storage(self) -> Any:
        """A new, unopened storage on a fresh store; override this or the ``storage`` fixture."""
        raise NotImplementedError(
            f"{type(self).__qualname__}: define make_storage(self) returning a new storage, "
            "or a fixture named storage (see conformance.pytest_plugin)"
        )

    @pytest.fixture
    def conformance_storage(self, request: pytest.FixtureRequest) -> Any:
        """What a clause runs on: ``make_storage()`` if the class defines it, else the value of
        the ``storage`` fixture (asked for only then, so a class with make_storage needs none).
        Synchronous, so it works under pytest-asyncio's strict mode and without pytest-asyncio."""
        if type(self).make_storage is not CheckpointStorageConformance.make_storage:
            return self.make_storage()
        return request.getfixturevalue("storage")

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize ``test_clause`` with the selected clauses (pytest calls this per class)."""
        if CLAUSE_ARGUMENT not in metafunc.fixturenames:
            return
        selected = _selected_clauses(type(self), metafunc.config.getoption("conformance_clause", None))
        marks: list[pytest.MarkDecorator] = []
        if metafunc.config.pluginmanager.has_plugin("asyncio") and (
            metafunc.definition.get_closest_marker("asyncio") is None
        ):
            marks.append(pytest.mark.asyncio)  # needed in strict mode, harmless in auto mode
        metafunc.parametrize(
            CLAUSE_ARGUMENT,
            [pytest.param(c, id=c.id, marks=marks) for c in selected],
        )

    async def test_clause(
        self, conformance_storage: Any, conformance_clause: Clause, request: pytest.FixtureRequest
    ) -> None:
        """The clause's guarantee holds on ``storage``."""
        target = StorageTarget(
            name=type(self).__qualname__,
            factory=_FirstHandleThenNew(conformance_storage),
            expected_failures=dict(self.expected_failures),
            checkpoint_class=self.checkpoint_class,
            capabilities=self.capabilities,
            faults=self.faults,
            runner=self.runner,
            required_capabilities=_required(type(self)),
            process_opener=self.process_opener,
            round_trips=type(self).round_trips,
            reopen=self.reopen_storage if _overrides(self, "reopen_storage") else None,
            expiry_factory=self.make_expiring_storage if _overrides(self, "make_expiring_storage") else None,
            model_seed=self.model_seed,
            model_budget=self.model_budget,
            operation_timeout=self.operation_timeout,
        )
        report_outcome(await run_clause(conformance_clause, target, _session_watch(request, target)))


_WATCHES = pytest.StashKey[dict[type, OperationWatch]]()


def _session_watch(request: pytest.FixtureRequest, target: StorageTarget) -> OperationWatch:
    """The bound on the calls of the test class's storage, one for the whole session: once a
    call of one clause does not return, the storage is marked stuck and every later clause of the
    class fails at once, as in a kit run, instead of each waiting out a bound of its own."""
    watches = request.config.stash.setdefault(_WATCHES, {})
    owner = type(request.instance)
    if owner not in watches:
        watches[owner] = operation_watch(target)
    return watches[owner]


def _overrides(instance: CheckpointStorageConformance, name: str) -> bool:
    return getattr(type(instance), name) is not getattr(CheckpointStorageConformance, name)


def report_outcome(result: ClauseResult) -> None:
    """Turn a clause result into the pytest outcome: return, fail, skip or xfail."""
    if result.outcome is Outcome.FAILED:
        # An unexpected exception's traceback is the storage's, not this function's: shown as text.
        where = f"\n\n{result.traceback}" if result.traceback else ""
        pytest.fail(f"{result.clause_id}: {result.guarantee}\n{result.message}{where}", pytrace=False)
    if result.outcome is Outcome.NOT_APPLICABLE:
        pytest.skip(result.message)
    if result.outcome is Outcome.XFAILED:
        pytest.xfail(result.message)
    if result.outcome is Outcome.FINDING:
        # The runner, not the storage, broke the guarantee: shown, not held against the storage.
        pytest.xfail(f"runner finding: {result.message}")


def _required(cls: type[CheckpointStorageConformance]) -> frozenset[Capability]:
    try:
        return frozenset(capabilities_from_names(cls.required_capabilities))
    except ValueError as exc:
        pytest.fail(f"{cls.__qualname__}.required_capabilities: {exc}", pytrace=False)


class _FirstHandleThenNew:
    """The fixture's storage for the clause's first open; a new handle on it for any later one."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self._given = False

    def __call__(self) -> Any:
        if not self._given:
            self._given = True
            return self._storage
        new_handle = getattr(self._storage, "new_handle", None)
        if new_handle is None:
            raise TypeError(
                f"{type(self._storage).__name__} has no new_handle(); "
                "this clause needs a second handle on the same backend"
            )
        return new_handle()


def _selected_clauses(cls: type[CheckpointStorageConformance], option: Sequence[str] | None) -> list[Clause]:
    try:
        selected = select_clauses(cls.clauses)
        if option:
            narrowed = {c.id for c in select_clauses(option)}
            selected = [c for c in selected if c.id in narrowed]
        known = {c.id for c in select_clauses()}
    except ValueError as exc:
        pytest.fail(f"{cls.__qualname__}: {exc}", pytrace=False)
    unknown = sorted(set(cls.expected_failures) - known)
    if unknown:
        pytest.fail(
            f"{cls.__qualname__}.expected_failures names unknown clauses: {', '.join(unknown)}", pytrace=False
        )
    return selected


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("checkpoint-conformance").addoption(
        "--conformance-clause",
        action="append",
        dest="conformance_clause",
        metavar="ID_OR_FAMILY",
        help="run only these conformance clauses or families (repeatable)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run clause tests with asyncio.run when pytest-asyncio is not there to run coroutines."""
    if pyfuncitem.config.pluginmanager.has_plugin("asyncio"):
        return None
    if getattr(pyfuncitem.obj, "__func__", None) is not CheckpointStorageConformance.test_clause:
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    coroutine = pyfuncitem.obj(**arguments)
    assert inspect.iscoroutine(coroutine)
    asyncio.run(coroutine)
    return True


__all__ = ["CheckpointStorageConformance", "report_outcome"]
