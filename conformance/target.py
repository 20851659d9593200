"""What the kit runs against: a storage and how to open more handles on the same backend."""

from __future__ import annotations

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
    """

    name: str
    factory: StorageFactory
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    checkpoint_class: type[Any] = WorkflowCheckpoint
    capabilities: frozenset[Capability] | None = None
    cleanup: Callable[[], Awaitable[None]] | None = None
    faults: FaultInjector | None = None
    runner: RunnerProfile | None = None

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


def target_from_url(url: str, **options: Any) -> StorageTarget:
    """A target for a storage URL: one root storage, each clause on a new handle of it."""
    from storages.urls import open_storage

    root = open_storage(url, **options)

    async def cleanup() -> None:
        await root.aclose()

    return StorageTarget(name=url, factory=root.new_handle, cleanup=cleanup)


__all__ = ["StorageFactory", "StorageTarget", "target_from_url"]
