"""The ``runner`` clauses driven through real CrewAI Flows, over
:class:`~storages.runners.crewai.StorageFlowPersistence`.

:class:`CrewAIRunnerProfile` runs each :class:`~conformance.scenario.Scenario` as CrewAI flows:

* the parent flow (flow id ``parent``, persisted with ``@persist``) has one start method,
  ``child``, which runs a child flow handed the parent's progress; the child's method ``work`` adds
  one to it and the parent keeps the result. One ``kickoff(inputs={"id": "parent"})`` is one
  superstep: CrewAI loads the flow's latest state, runs the method and saves;
* each superstep's child flow is a new flow (its own flow id) persisted through the parent's
  adapter (SHARED) or not at all (NONE);
* the adapter names the parent flow the parent workflow and every child flow the child workflow,
  so the clauses read the store by the names they chose;
* a restore is the adapter's time travel (``StorageFlowPersistence.restore``): the next kickoff
  loads the restored state and its save continues that checkpoint (CrewAI itself resumes a flow
  from its latest state only);
* flows run in worker threads (``asyncio.to_thread(flow.kickoff, ...)``) and the adapter uses the
  clause's storage on the clause's loop (``loop=``), as a user holding an async storage does;
* a changed graph adds a listener to the parent (``audit``) or to the child (``review``).

CrewAI keeps no graph signature and its child flows carry their state through the parent's, not
as embedded checkpoints: :data:`CREWAI_DEVIATIONS` names the clauses those facts fail, reported as
runner findings.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
from typing import Any

from storages.errors import MissingDependencyError

from .runner_recorder import SaveRecorder
from .scenario import ChildStorageMode, GraphChange, RunnerProfile, RunObservation, Scenario

CREWAI_DEVIATIONS: dict[str, str] = {
    "runner.changed_parent_graph_is_rejected": (
        "CrewAI keeps no graph signature and resumes a flow's state into a changed flow class "
        "without complaint"
    ),
    "runner.changed_child_graph_is_rejected": (
        "CrewAI keeps no graph signature and runs a changed child flow without complaint"
    ),
    "runner.chain_whole_after_parent_restore": (
        "a CrewAI child flow reaches its state through the parent's state, not through an embedded "
        "checkpoint: the child's first checkpoint after a restore continues the child workflow's "
        "latest, not a checkpoint embedded in the restored parent"
    ),
}
"""Clause id -> why CrewAI, not the storage, fails it."""

PARENT_FLOW = "parent"
"""The flow id of every scenario's parent flow (the adapter maps it to the parent workflow)."""
CHILD_PREFIX = "child-"


QUIET_CREWAI: dict[str, str] = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_TRACING_ENABLED": "false",
}
"""CrewAI's settings for no telemetry and no tracing: the kit's flows send nothing anywhere, unless
the environment already says otherwise."""


def _require_crewai() -> None:
    for name, value in QUIET_CREWAI.items():
        os.environ.setdefault(name, value)
    try:
        import crewai.flow.flow  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("the CrewAI runner profile", "crewai", "crewai") from exc


class CrewAIRunnerProfile(RunnerProfile):
    """Real CrewAI flows with a child flow, over StorageFlowPersistence."""

    def __init__(self) -> None:
        _require_crewai()
        self._version = importlib.metadata.version("crewai")

    @property
    def name(self) -> str:
        return f"crewai {self._version}"

    async def run(self, scenario: Scenario) -> RunObservation:
        if scenario.child_storage is ChildStorageMode.SEPARATE:
            raise ValueError("the CrewAI profile's child flow saves through the parent's adapter")
        recorder = SaveRecorder(scenario.storage)
        persistence = _persistence(scenario, recorder, asyncio.get_running_loop())
        try:
            parent = _flows(scenario, persistence)
            if scenario.resume_from is not None:
                await asyncio.to_thread(persistence.restore, PARENT_FLOW, scenario.resume_from)
            progress: list[int] = []
            for _ in range(scenario.supersteps):
                flow = parent(persistence=persistence)
                await asyncio.to_thread(flow.kickoff, inputs={"id": PARENT_FLOW})
                progress.append(int(flow.state.progress))
        finally:
            persistence.close()
        return RunObservation(
            tuple(recorder.saved[scenario.parent_workflow]),
            tuple(recorder.saved[scenario.child_workflow]),
            tuple(progress),
        )


def _persistence(scenario: Scenario, storage: Any, loop: asyncio.AbstractEventLoop) -> Any:
    from storages.runners.crewai import StorageFlowPersistence, workflow_for

    class ScenarioPersistence(StorageFlowPersistence):
        """Names the parent flow the parent workflow and every child flow the child workflow."""

        def workflow_name(self, flow_uuid: str) -> str:
            if flow_uuid == PARENT_FLOW:
                return scenario.parent_workflow
            return scenario.child_workflow if flow_uuid.startswith(CHILD_PREFIX) else workflow_for(flow_uuid)

        def _belongs(self, stored: Any, flow_uuid: str) -> bool:
            # The child workflow holds every child flow: another child's record is no corruption.
            return isinstance(stored.state, dict) and stored.state.get("flow_uuid") == flow_uuid

    return ScenarioPersistence.over(storage, loop=loop)


def _flows(scenario: Scenario, persistence: Any) -> Any:
    from crewai.flow.flow import Flow, FlowState, listen, start
    from crewai.flow.persistence import persist

    class Progress(FlowState):
        progress: int = 0
        seen: list[str] = []  # noqa: RUF012 - a pydantic field

    child_count = [0]

    def child_class() -> Any:
        class Child(Flow[Progress]):
            @start()
            def work(self) -> None:
                self.state.progress += 1

            if scenario.changed_graph is GraphChange.CHILD:

                @listen(work)
                def review(self) -> None:
                    self.state.seen.append("review")

        if scenario.child_storage is ChildStorageMode.SHARED:
            return persist(persistence)(Child)
        return Child

    child_flow = child_class()

    @persist(persistence)
    class Parent(Flow[Progress]):
        @start()
        async def child(self) -> None:
            child_count[0] += 1
            inputs = {"progress": self.state.progress}
            flow = (
                child_flow(persistence=persistence)
                if scenario.child_storage is ChildStorageMode.SHARED
                else child_flow()
            )
            flow.state.id = f"{CHILD_PREFIX}{self.state.id}-{child_count[0]}"
            await flow.kickoff_async(inputs=inputs)
            self.state.progress = flow.state.progress

        if scenario.changed_graph is GraphChange.PARENT:

            @listen(child)
            def audit(self) -> None:
                self.state.seen.append("audit")

    return Parent


__all__ = ["CHILD_PREFIX", "CREWAI_DEVIATIONS", "PARENT_FLOW", "CrewAIRunnerProfile"]
