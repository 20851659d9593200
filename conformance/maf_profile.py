"""The ``runner`` clauses driven through Microsoft Agent Framework's real runner.

:class:`MafRunnerProfile` runs each :class:`~conformance.scenario.Scenario` as MAF workflows:

* the sub-workflow is a one-executor workflow (``work``) whose executor counts its runs in
  checkpointed executor state (its "progress") and yields the new value as its output;
* the parent is a ``WorkflowExecutor`` (id ``child``) wrapping it, with an edge back to itself, so
  each parent superstep runs the sub-workflow once and forwards its output as the next message;
* a run is bounded by ``max_iterations`` (MAF ends it with ``WorkflowConvergenceException`` after
  saving the last superstep's checkpoint), so a checkpoint always holds the message that continues
  the run, and a restore runs exactly ``Scenario.supersteps`` more supersteps;
* a fresh run uses ``WorkflowBuilder(checkpoint_storage=...)``; a restore builds the parent without
  storage and calls ``workflow.run(checkpoint_id=..., checkpoint_storage=...)``;
* the child saves on its own when built with a storage: the parent's (SHARED) or its own
  (SEPARATE);
* a changed graph adds an executor and an edge to the parent (``audit``) or the child (``review``).

With ``separate_child_storage=True`` the profile gives the child a store of its own wherever a
clause asks for a shared one, and says so in :attr:`RunObservation.child_storage`. That is how the
kit shows what MAF does to a child with its own storage: after a parent restore, the child's first
checkpoint points at the id of the child checkpoint embedded in the parent checkpoint, which MAF
never saved to the child's storage. The clauses report that as a runner finding.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from storages.errors import MissingDependencyError

from ._maf_ids import PARENT_EXECUTOR_ID, WORK_EXECUTOR_ID
from .scenario import ChildStorageMode, ParallelStepsObservation, RunnerProfile, RunObservation, Scenario
from .six_methods import SixMethods


def _require_maf() -> None:
    try:
        import agent_framework  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("the MAF runner profile", "maf", "agent-framework-core") from exc


class _Recorder(SixMethods):
    """Forwards MAF's six storage methods to a storage and notes the ids ``save`` returns.

    The observation comes from what the runner saved, not from the storage's listings, so a
    storage whose listings are broken cannot hide its defect behind a wrong observation.
    """

    def __init__(self, storage: Any) -> None:
        super().__init__(storage)
        self.saved: list[str] = []
        self.failures: list[BaseException] = []
        """Exceptions save raised: MAF only logs them and runs on, the profile raises the first."""

    async def save(self, checkpoint: Any) -> str:
        try:
            checkpoint_id: str = await self.inner.save(checkpoint)
        except Exception as exc:
            self.failures.append(exc)
            raise
        self.saved.append(checkpoint_id)
        return checkpoint_id


_EXPECTED_WARNINGS: tuple[str, ...] = (
    "agent_framework._workflows._validation",  # the parent's edge to itself is a self-loop
    "agent_framework._workflows._workflow_executor",  # the child has its own storage, on purpose
)


@contextmanager
def _quiet_expected_warnings() -> Iterator[None]:
    """Silence MAF's warnings about this profile's deliberate graph shape, nothing else."""
    loggers = [logging.getLogger(name) for name in _EXPECTED_WARNINGS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


class MafRunnerProfile(RunnerProfile):
    """Runs the kit's runner scenarios as real MAF workflows (``agent-framework-core``).

    Args:
        separate_child_storage: give the child a store of its own where a clause asks for the
            child to share the parent's storage (see the module docstring).
        child_storage_factory: makes that store, one per parent storage (so one per clause);
            default: a fresh :class:`~storages.memory.InMemoryCheckpointStorage`. The caller
            closes what it makes.
    """

    def __init__(
        self,
        *,
        separate_child_storage: bool = False,
        child_storage_factory: Callable[[], Any] | None = None,
    ) -> None:
        _require_maf()
        self._separate = separate_child_storage
        self._child_storage_factory = child_storage_factory
        self._separate_store: Any = None

    @property
    def name(self) -> str:
        version = importlib.metadata.version("agent-framework-core")
        suffix = ", child with its own storage" if self._separate else ""
        return f"agent_framework {version}{suffix}"

    async def run_parallel_steps(
        self,
        storage: Any,
        workflow_name: str,
        *,
        seed: int,
        max_delay: float = 0.005,
        starts_parallel: bool = False,
    ) -> ParallelStepsObservation:
        """A functional workflow with parallel steps (``conformance._maf_parallel_steps``)."""
        from ._maf_parallel_steps import run_parallel_steps

        return await run_parallel_steps(
            storage, workflow_name, seed=seed, max_delay=max_delay, starts_parallel=starts_parallel
        )

    def is_signature_rejection(self, exc: BaseException) -> bool:
        from agent_framework import WorkflowCheckpointException

        # MAF: "Workflow graph has changed since the checkpoint was created."; ours (a storage
        # refusing an expected signature) says "the workflow graph has changed" too.
        return isinstance(exc, WorkflowCheckpointException) and "graph has changed" in str(exc).lower()

    async def run(self, scenario: Scenario) -> RunObservation:
        from agent_framework import WorkflowConvergenceException

        from ._maf_workflows import Work, build_child, build_parent

        child_store = self._child_store(scenario)
        parent = _Recorder(scenario.storage)
        child = _Recorder(child_store) if child_store is not None else None
        work = Work(WORK_EXECUTOR_ID)
        if scenario.resume_from is None:
            bound, builder_storage = scenario.supersteps, parent
        else:
            # MAF continues counting iterations from the restored checkpoint and stops at
            # max_iterations (which the graph signature leaves out), so the bound is relative to it.
            restored = await scenario.storage.load(scenario.resume_from)
            bound, builder_storage = restored.iteration_count + scenario.supersteps, None
        with _quiet_expected_warnings():
            child_workflow = build_child(scenario, work, child)
            workflow = build_parent(scenario, child_workflow, builder_storage, bound)
            try:
                if scenario.resume_from is None:
                    await workflow.run(0)
                else:
                    await workflow.run(checkpoint_id=scenario.resume_from, checkpoint_storage=parent)
            except WorkflowConvergenceException:
                pass  # the bound was reached with the next message in flight, as intended
        for recorder in (parent, child):
            if recorder is not None and recorder.failures:
                # A save MAF swallowed is a checkpoint the user silently lost: report it.
                raise recorder.failures[0]
        observation = RunObservation(
            parent_saved=tuple(parent.saved),
            child_saved=tuple(child.saved) if child is not None else (),
            child_progress=tuple(work.observed),
        )
        if child_store is not None and child_store is not scenario.storage and self._separate:
            observation = dataclasses.replace(observation, child_storage=child_store)
        return observation

    def _child_store(self, scenario: Scenario) -> Any:
        if scenario.child_storage is ChildStorageMode.NONE:
            return None
        if scenario.child_storage is ChildStorageMode.SEPARATE:
            return scenario.child_own_storage
        if not self._separate:
            return scenario.storage
        # One child store per parent storage, so a clause's restore finds the child's earlier saves.
        if self._separate_store is None or self._separate_store[0] is not scenario.storage:
            self._separate_store = (scenario.storage, self._new_child_store())
        return self._separate_store[1]

    def _new_child_store(self) -> Any:
        if self._child_storage_factory is not None:
            return self._child_storage_factory()
        from storages.memory import InMemoryCheckpointStorage

        return InMemoryCheckpointStorage()


__all__ = ["PARENT_EXECUTOR_ID", "WORK_EXECUTOR_ID", "MafRunnerProfile"]
