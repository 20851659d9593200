"""What the kit runs against: a storage and how to open more handles on the same backend."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from storages.contract import Capability, WorkflowCheckpoint

from .faults import FaultInjector
from .scenario import RunnerProfile

StorageFactory = Callable[[], Any]
"""Returns a storage, or an awaitable of one. Every call must give a handle on the same backend."""


@dataclass
class StorageTarget:
    """A storage under test.

    Args:
        name: shown in reports (for built-ins, the storage URL).
        factory: opens a handle; called once per clause. A handle's own ``new_handle()`` is
            preferred for second handles and reopening, so a factory that builds a fresh backend
            per call (``InMemoryCheckpointStorage``) still works.
        expected_failures: clause id -> reason, for known deviations. Such a clause that fails
            is reported as xfailed; one that passes fails the run (strict), so stale entries go.
        checkpoint_class: the class clauses build checkpoints with (MAF's own storages need
            ``agent_framework.WorkflowCheckpoint``).
        capabilities: overrides the storage's declared ``capabilities``.
        cleanup: awaited once after the run (remove temp files, stop servers).
        faults: breaks the backend on purpose for the ``faults`` family; without one, fault
            clauses are skipped.
        runner: the runner the ``runner`` family drives against the storage; None means the
            reference :class:`~conformance.scenario.ScenarioRunner` (built with ``checkpoint_class``).
        process_opener: how another process opens the same store, for the durability clauses that
            write in one process and read in another: a storage URL, or ``"module:function"``
            naming an importable zero-argument callable returning a storage (or an awaitable of
            one), or a function returning either once the target has opened. The child process
            inherits this process's environment and ``sys.path``. None skips those clauses.
        round_trips: returns how many backend round trips (requests, statements, scripts) a handle
            of this target has made so far; the ``scale`` family counts with it. None makes the
            scale clauses fall back to timings where timings can tell, and skip where they cannot.
    """

    name: str
    factory: StorageFactory
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    checkpoint_class: type[Any] = WorkflowCheckpoint
    capabilities: frozenset[Capability] | None = None
    cleanup: Callable[[], Awaitable[None]] | None = None
    faults: FaultInjector | None = None
    runner: RunnerProfile | None = None
    process_opener: str | Callable[[], str | None] | None = None
    round_trips: Callable[[Any], int] | None = None

    async def open(self) -> Any:
        handle = self.factory()
        if inspect.isawaitable(handle):
            handle = await handle
        return handle

    def declared_capabilities(self, storage: Any) -> frozenset[Capability]:
        if self.capabilities is not None:
            return self.capabilities
        declared: Iterable[Any] = getattr(storage, "capabilities", frozenset())
        return frozenset(Capability(c) for c in declared)


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


def target_from_url(url: str, **options: Any) -> StorageTarget:
    """A target for a storage URL: one root storage, each clause on a new handle of it."""
    from storages.urls import open_storage

    root = open_storage(url, **options)

    async def cleanup() -> None:
        await root.aclose()

    return StorageTarget(name=url, factory=root.new_handle, cleanup=cleanup, process_opener=url)


__all__ = [
    "CHECKPOINT_CLASS_CHOICES",
    "StorageFactory",
    "StorageTarget",
    "target_from_url",
    "with_checkpoint_class",
]
