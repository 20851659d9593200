"""The ``runner`` clauses driven through real Apache Burr applications, over
:class:`~storages.runners.burr.AsyncStorageStatePersister`.

:class:`BurrRunnerProfile` runs each :class:`~conformance.scenario.Scenario` as Burr applications:

* the parent application has one action, ``child``, looping on itself; each ``arun`` is halted
  after it, so a run of N supersteps is N steps; the step runs a child application (Burr's
  sub-application, ``with_spawning_parent``) whose action ``work`` adds one to the progress the
  parent hands it, and the parent keeps what the child returns;
* the child application saves through the parent's persister (SHARED) or has none (NONE); each
  parent step runs a new child application (its own app id), as Burr's recursive applications do;
* the persister names the parent application (and every fork of it) the parent workflow and every
  child application the child workflow, so the clauses read the store by the names they chose;
* a restore is Burr's fork: a new application initialised ``fork_from_app_id`` / ``_sequence_id``
  of the restored step, whose first step continues that checkpoint (the persister's own lineage);
* a changed graph adds an action to the parent (``audit``) or to the child (``review``).

Burr keeps no graph signature and its child applications carry their state through the parent's,
not as embedded checkpoints: :data:`BURR_DEVIATIONS` names the clauses those facts fail, reported
as runner findings.
"""

from __future__ import annotations

import importlib.metadata
import itertools
from typing import Any

from storages.errors import MissingDependencyError

from .runner_recorder import SaveRecorder
from .scenario import ChildStorageMode, GraphChange, RunnerProfile, RunObservation, Scenario

BURR_DEVIATIONS: dict[str, str] = {
    "runner.changed_parent_graph_is_rejected": (
        "Burr keeps no graph signature and resumes a step into a changed parent application without complaint"
    ),
    "runner.changed_child_graph_is_rejected": (
        "Burr keeps no graph signature and runs a changed child application without complaint"
    ),
    "runner.chain_whole_after_parent_restore": (
        "a Burr child application reaches its state through the parent's state, not through an "
        "embedded checkpoint: the child's first checkpoint after a restore continues the child "
        "workflow's latest, not a checkpoint embedded in the restored parent"
    ),
}
"""Clause id -> why Burr, not the storage, fails it."""

PARENT_PARTITION = "kit"
"""The partition key every application of a scenario uses."""


def _require_burr() -> None:
    try:
        import burr.core  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("the Burr runner profile", "burr", "apache-burr") from exc


class BurrRunnerProfile(RunnerProfile):
    """Real Burr applications with a child application, over AsyncStorageStatePersister."""

    def __init__(self) -> None:
        _require_burr()
        self._version = importlib.metadata.version("apache-burr")
        self._forks = itertools.count(1)

    @property
    def name(self) -> str:
        return f"burr {self._version}"

    async def run(self, scenario: Scenario) -> RunObservation:
        from storages.runners.burr import AsyncStorageStatePersister

        if scenario.child_storage is ChildStorageMode.SEPARATE:
            raise ValueError("the Burr profile's child application saves through the parent's persister")
        parent_app = "parent"
        recorder = SaveRecorder(scenario.storage)

        class ScenarioPersister(AsyncStorageStatePersister):
            """Names the parent application and its forks the parent workflow, every child
            application the child workflow."""

            def workflow_name(self, partition_key: str, app_id: str) -> str:
                return scenario.child_workflow if app_id.startswith("child-") else scenario.parent_workflow

        persister = ScenarioPersister(recorder)
        fork: dict[str, Any] = {}
        app_id = parent_app
        if scenario.resume_from is not None:
            restored = (await scenario.storage.load(scenario.resume_from)).state
            app_id = f"{parent_app}-fork-{next(self._forks)}"
            fork = {
                "fork_from_app_id": restored["app_id"],
                "fork_from_partition_key": PARENT_PARTITION,
                "fork_from_sequence_id": restored["sequence_id"],
            }
        app = await _parent(scenario, persister, app_id, fork).abuild()
        progress: list[int] = []
        for _ in range(scenario.supersteps):
            *_, state = await app.arun(halt_after=["child"])
            progress.append(int(state["progress"]))
        return RunObservation(
            tuple(recorder.saved[scenario.parent_workflow]),
            tuple(recorder.saved[scenario.child_workflow]),
            tuple(progress),
        )


def _parent(scenario: Scenario, persister: Any, app_id: str, fork: dict[str, Any]) -> Any:
    from burr.core import ApplicationBuilder, State, action

    children = itertools.count(1)

    @action(reads=["progress"], writes=["progress"])
    async def child(state: State[Any], __context: Any) -> tuple[dict[str, Any], State[Any]]:
        handed = int(state["progress"])
        child_app = _child(scenario, persister, f"child-{app_id}-{__context.sequence_id}-{next(children)}")
        builder = child_app.with_spawning_parent(app_id, __context.sequence_id, PARENT_PARTITION)
        *_, result = await (await builder.abuild()).arun(halt_after=["work"], inputs={"handed": handed})
        return {}, state.update(progress=int(result["progress"]))

    @action(reads=[], writes=["audited"])
    async def audit(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
        return {}, state.update(audited=True)

    actions: dict[str, Any] = {"child": child}
    transitions: list[tuple[str, str]] = [("child", "child")]
    if scenario.changed_graph is GraphChange.PARENT:
        actions["audit"] = audit
        transitions = [("child", "audit"), ("audit", "child")]
    builder: Any = ApplicationBuilder()  # type: ignore[no-untyped-call]
    return (
        builder.with_actions(**actions)
        .with_transitions(*transitions)
        .initialize_from(
            persister,
            resume_at_next_action=True,
            default_state={"progress": 0},
            default_entrypoint="child",
            **fork,
        )
        .with_state_persister(persister)
        .with_identifiers(app_id=app_id, partition_key=PARENT_PARTITION)
    )


def _child(scenario: Scenario, persister: Any, app_id: str) -> Any:
    from burr.core import ApplicationBuilder, State, action

    @action(reads=[], writes=["progress"])
    async def work(state: State[Any], handed: int) -> tuple[dict[str, Any], State[Any]]:
        return {}, state.update(progress=handed + 1)

    @action(reads=[], writes=["reviewed"])
    async def review(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
        return {}, state.update(reviewed=True)

    actions: dict[str, Any] = {"work": work}
    transitions: list[tuple[str, str]] = [("work", "work")]
    if scenario.changed_graph is GraphChange.CHILD:
        actions["review"] = review
        transitions = [("work", "review"), ("review", "work")]
    builder: Any = ApplicationBuilder()  # type: ignore[no-untyped-call]
    builder = (
        builder.with_actions(**actions)
        .with_transitions(*transitions)
        .with_entrypoint("work")
        .with_state(progress=0)
        .with_identifiers(app_id=app_id, partition_key=PARENT_PARTITION)
    )
    if scenario.child_storage is ChildStorageMode.SHARED:
        builder = builder.with_state_persister(persister)
    return builder


__all__ = ["BURR_DEVIATIONS", "PARENT_PARTITION", "BurrRunnerProfile"]
