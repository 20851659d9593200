"""What the kit runs against: a storage and how to open more handles on the same backend."""

from __future__ import annotations

import dataclasses
import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from storages.contract import Capability, WorkflowCheckpoint
from storages.redaction import redact_url

from .bounded import OPERATION_TIMEOUT
from .faults import FaultInjector
from .scenario import RunnerProfile

StorageFactory = Callable[[], Any]
"""Returns a storage, or an awaitable of one. Every call must give a handle on the same backend."""


@dataclass
class StorageTarget:
    """A storage under test.

    Args:
        name: shown in reports (for built-ins, the storage URL); redacted there.
        factory: opens a handle; called once per clause. A handle's own ``new_handle()`` is
            preferred for second handles and reopening, so a factory that builds a fresh backend
            per call (``InMemoryCheckpointStorage``) still works.
        expected_failures: clause id -> reason, for known deviations. Such a clause that fails
            is reported as xfailed; one that passes fails the run (strict), so stale entries go.
        runner_findings: clause id -> reason, for guarantees the runner driving the storage does
            not give (LangGraph checks no graph signature). Such a clause that fails is reported
            as a runner finding; one that passes fails the run (strict), as above.
        checkpoint_class: the class clauses build checkpoints with (MAF's own storages need
            ``agent_framework.WorkflowCheckpoint``).
        capabilities: overrides the storage's declared ``capabilities``.
        cleanup: awaited once after the run (remove temp files, stop servers).
        faults: breaks the backend on purpose for the ``faults`` family; without one, fault
            clauses are skipped.
        runner: the runner the ``runner`` family drives against the storage; None means the
            reference :class:`~conformance.scenario.ScenarioRunner` (built with ``checkpoint_class``).
        required_capabilities: capabilities the storage must declare; a clause that needs one
            of them fails instead of being not applicable, and the backend fails if one is missing.
        prepare: awaited once before the first clause (connect a root handle, create a bucket).
        remove_workflows: delete every workflow a clause created when the clause ends, so a run
            against a real store leaves nothing behind (``checkpoint-conformance`` does, unless
            ``--keep``).
        fresh_store: awaited before each clause: True when it moved the target to a new, empty
            store of the same backend (an embedded one that makes stores cheaply), so the clause
            starts on it and what it writes needs no removing after it; False leaves the store as
            it is.
        timeout_factor: multiplies every clause's timeout (slow remote backends, tests).
        process_opener: how another process opens the same store, for the durability clauses that
            write in one process and read in another: a storage URL, or ``"module:function"``
            naming an importable zero-argument callable returning a storage (or an awaitable of
            one), or a function returning either once the target has opened. The child process
            inherits this process's environment and ``sys.path``. None skips those clauses.
        round_trips: returns how many backend round trips (requests, statements, scripts) a handle
            of this target has made so far; the ``scale`` family counts with it. None makes the
            scale clauses fall back to timings where timings can tell, and skip where they cannot.
        reopen: builds a new storage on the same store from its settings (a new object sharing no
            memory with the handles before it, as a restarted process would), or an awaitable of
            one. The durability clauses and the model family rebuild the store with it after every
            handle closed, which is what proves ``durable``. None: the kit derives it from
            ``process_opener`` (a URL or ``"module:function"``), else it cannot rebuild, and
            ``durable`` is reported as unverified.
        model_seed: the seed of the ``model`` family's generated programs (None: the default
            seed, :data:`conformance.model.DEFAULT_SEED`); the same seed gives the same programs.
        model_budget: how much the ``model`` family generates: a number of operations (``"600"``)
            or seconds (``"20s"``); None is the default budget.
        operation_timeout: seconds one storage call may take (times ``timeout_factor``). The first
            call that does not return in time fails its clause ("did not return within N s") and
            marks the storage stuck: every later clause fails at once without running, so a
            storage that hangs costs one bound, not every clause's timeout (conformance/bounded.py).
        expiry_factory: opens a handle on a store of the same backend whose records live a few
            seconds (a ``ttl`` of 1, say), for the ``expiry`` family, which waits the time to live
            out. A ``ttl`` backend then passes the whole kit in one run: ``factory``'s store keeps
            records longer than any clause runs (or for ever), and the expiry family runs here,
            judged by what this store declares. None: the expiry family runs on ``factory``.
    """

    name: str
    factory: StorageFactory
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    runner_findings: Mapping[str, str] = field(default_factory=dict)
    checkpoint_class: type[Any] = WorkflowCheckpoint
    capabilities: frozenset[Capability] | None = None
    cleanup: Callable[[], Awaitable[None]] | None = None
    faults: FaultInjector | None = None
    runner: RunnerProfile | None = None
    required_capabilities: frozenset[Capability] = frozenset()
    prepare: Callable[[], Awaitable[None]] | None = None
    remove_workflows: bool = False
    fresh_store: Callable[[], Awaitable[bool]] | None = None
    timeout_factor: float = 1.0
    process_opener: str | Callable[[], str | None] | None = None
    round_trips: Callable[[Any], int] | None = None
    reopen: Callable[[], Any] | None = None
    model_seed: int | None = None
    model_budget: str | None = None
    operation_timeout: float = OPERATION_TIMEOUT
    expiry_factory: StorageFactory | None = None

    async def open(self) -> Any:
        handle = self.factory()
        if inspect.isawaitable(handle):
            handle = await handle
        return handle

    def for_family(self, family: str) -> StorageTarget:
        """The target a clause of ``family`` runs on: the short-lived store of
        ``expiry_factory`` for the expiry family, where there is one; else this target."""
        if family != "expiry" or self.expiry_factory is None:
            return self
        return dataclasses.replace(
            self,
            factory=self.expiry_factory,
            capabilities=None,
            prepare=None,  # the run's one, awaited before the first clause, readies both stores
            fresh_store=None,
            process_opener=None,
            reopen=None,
            expiry_factory=None,
        )

    def declared_capabilities(self, storage: Any) -> frozenset[Capability]:
        if self.capabilities is not None:
            return self.capabilities
        declared: Iterable[Any] = getattr(storage, "capabilities", frozenset())
        return frozenset(Capability(c) for c in declared)


def new_run_prefix() -> str:
    """A key prefix no other run uses: ``ck-run-`` and 12 hex digits."""
    return f"ck-run-{uuid.uuid4().hex[:12]}"


def with_run_prefix(url: str, run_prefix: str) -> str:
    """``url`` in a namespace of its store named after ``run_prefix``, where its backend has one
    (``BackendSpec.run_prefix`` in storages/registry.py); other URLs are returned unchanged."""
    from storages.registry import load_reference, registry

    backend = registry().for_scheme(urlsplit(url).scheme.lower())
    if backend is None or backend.spec.run_prefix is None:
        return url
    scoped: str = load_reference(backend.spec.run_prefix)(url, run_prefix)
    return scoped


CHECKPOINT_CLASS_CHOICES = ("project", "maf", "both")
"""What ``--checkpoint-class`` accepts: the project's class, MAF's, or each target once with each."""


def with_checkpoint_class(targets: Iterable[StorageTarget], choice: str) -> list[StorageTarget]:
    """The targets, building checkpoints with the project's class, MAF's, or each in turn (``both``:
    every target is run twice, the second time named ``<name> [MAF class]``).

    Raises ValueError for an unknown choice, or for ``maf``/``both`` without agent_framework.
    """
    if choice not in CHECKPOINT_CLASS_CHOICES:
        raise ValueError(f"checkpoint class {choice!r} is not one of {', '.join(CHECKPOINT_CLASS_CHOICES)}")
    targets = list(targets)
    if choice == "project":
        return targets
    try:
        from agent_framework import WorkflowCheckpoint as MafWorkflowCheckpoint
    except ImportError as exc:
        raise ValueError(
            f"--checkpoint-class {choice} needs agent_framework (pip install agent-framework-core)"
        ) from exc
    maf = [
        dataclasses.replace(t, name=f"{t.name} [MAF class]", checkpoint_class=MafWorkflowCheckpoint)
        for t in targets
    ]
    return maf if choice == "maf" else [*targets, *maf]


def target_from_url(
    url: str,
    *,
    run_prefix: str | None = None,
    remove_workflows: bool = False,
    expiry_url: str | None = None,
    **options: Any,
) -> StorageTarget:
    """A target for a storage URL: one root storage, each clause on a new handle of it.

    The root is opened before the first clause (``prepare``), which is when options such as S3's
    ``create_bucket=true`` take effect. ``run_prefix`` writes under a prefix of its own (see
    :func:`with_run_prefix`); the report still names the URL as given, redacted. ``expiry_url``
    names a store of the same backend with a short time to live for the ``expiry`` family
    (``StorageTarget.expiry_factory``), in a namespace of its own: under ``run_prefix`` with
    ``-expiry`` added, since a store whose every key expires must share none with one whose
    records stay.
    """
    from storages.urls import open_storage

    opened = with_run_prefix(url, run_prefix) if run_prefix is not None else url
    root = open_storage(opened, **options)
    roots = [root]
    if expiry_url is not None:
        if run_prefix is not None:
            expiry_url = with_run_prefix(expiry_url, f"{run_prefix}-expiry")
        roots.append(open_storage(expiry_url, **options))

    async def prepare() -> None:
        # One real round trip on each root handle: it connects (and creates what the URL asks
        # for, such as a bucket) before any clause opens handles of its own.
        for each in roots:
            await each.get_latest(workflow_name=f"ck-connectivity-{uuid.uuid4().hex[:8]}")

    async def cleanup() -> None:
        for each in roots:
            await each.aclose()

    return StorageTarget(
        name=redact_url(url),
        factory=root.new_handle,
        cleanup=cleanup,
        prepare=prepare,
        remove_workflows=remove_workflows,
        process_opener=opened,
        expiry_factory=roots[1].new_handle if expiry_url is not None else None,
    )


__all__ = [
    "CHECKPOINT_CLASS_CHOICES",
    "StorageFactory",
    "StorageTarget",
    "new_run_prefix",
    "target_from_url",
    "with_checkpoint_class",
    "with_run_prefix",
]
