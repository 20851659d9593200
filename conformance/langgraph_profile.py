"""The ``runner`` clauses driven through real LangGraph graphs, over StorageSaver.

:class:`LangGraphRunnerProfile` runs each :class:`~conformance.scenario.Scenario` as a LangGraph
thread:

* the parent graph has one node, ``child``: a compiled subgraph whose node ``work`` adds one to
  the ``progress`` channel (the child's progress), with an edge back to itself; the parent is
  compiled with ``interrupt_after=["child"]``, so each ``ainvoke`` runs exactly one superstep,
  and a run of N supersteps is N calls;
* the thread is the scenario's parent workflow; the saver names the parent's namespace ("") the
  parent workflow and every subgraph namespace the child workflow, so the clauses read the
  store by the names they chose;
* the subgraph saves its own checkpoints through the parent's saver (SHARED) or none at all
  (NONE: compiled with ``checkpointer=False``); LangGraph has no separate child store;
* a restore is LangGraph's time travel: ``ainvoke(None, {"checkpoint_id": ...})`` from the
  restored checkpoint forks the thread, and later calls continue from the latest;
* a changed graph adds a node to the parent (``audit``) or to the subgraph (``review``).

LangGraph has no graph signature and does not check one on resume, and each subgraph invocation
starts a checkpoint chain of its own (the subgraph's state reaches it through the parent's
channels). :data:`LANGGRAPH_DEVIATIONS` names the clauses those two facts fail, with the reason;
a target driven by this profile declares them as ``runner_findings``, so the report shows them as
runner findings (a status of their own, with the reason), not as passes and not as storage failures.
"""

from __future__ import annotations

import importlib.metadata
import operator
from dataclasses import dataclass, field
from typing import Annotated, Any

from typing_extensions import TypedDict

from storages.errors import MissingDependencyError

from .scenario import ChildStorageMode, GraphChange, RunnerProfile, RunObservation, Scenario

LANGGRAPH_DEVIATIONS: dict[str, str] = {
    "runner.changed_parent_graph_is_rejected": (
        "LangGraph keeps no graph signature and resumes a checkpoint into a changed "
        "parent graph without complaint"
    ),
    "runner.changed_child_graph_is_rejected": (
        "LangGraph keeps no graph signature and resumes a checkpoint into a changed "
        "subgraph without complaint"
    ),
    "runner.chain_whole_after_parent_restore": (
        "each subgraph invocation starts a checkpoint chain of its own (previous id "
        "None), so the child's first checkpoint after a restore does not continue an earlier chain"
    ),
}
"""Clause id -> why LangGraph, not the storage, fails it."""


def _require_langgraph() -> None:
    try:
        import langgraph.graph  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("the LangGraph runner profile", "langgraph", "langgraph") from exc


@dataclass
class _Saved:
    """Stored ids of the checkpoints saved during one run call, by role."""

    parent: list[str] = field(default_factory=list)
    child: list[str] = field(default_factory=list)


def _saver_for(scenario: Scenario, saved: _Saved) -> Any:
    from storages.runners.langgraph import StorageSaver, stored_id_for

    class ScenarioSaver(StorageSaver):
        """Names workflows after the scenario and notes every checkpoint it saves."""

        def workflow_name(self, thread_id: str, checkpoint_ns: str) -> str:
            return scenario.parent_workflow if not checkpoint_ns else scenario.child_workflow

        async def _latest(self, workflow_name: str, thread_id: str, checkpoint_ns: str) -> Any | None:
            # Every subgraph namespace shares the child workflow: its latest is the newest of them
            # that belongs to this namespace (commit order still decides).
            if not checkpoint_ns:
                return await super()._latest(workflow_name, thread_id, checkpoint_ns)
            for stored in reversed(await self.storage.list_checkpoints(workflow_name=workflow_name)):
                if self._belongs(stored, thread_id, checkpoint_ns):
                    return stored
            return None

        def _belongs(self, stored: Any, thread_id: str, checkpoint_ns: str) -> bool:
            return (stored.state.get("thread_id"), stored.state.get("checkpoint_ns")) == (
                thread_id,
                checkpoint_ns,
            )

        async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            stored = await super().aput(config, checkpoint, metadata, new_versions)
            configurable = stored["configurable"]
            name = self.workflow_name(configurable["thread_id"], configurable["checkpoint_ns"])
            stored_id = stored_id_for(name, checkpoint["id"])
            (saved.child if configurable["checkpoint_ns"] else saved.parent).append(stored_id)
            return stored

    return ScenarioSaver(scenario.storage)


class Progress(TypedDict, total=False):
    """The graphs' state: the child's progress, and what the added nodes of a changed graph saw."""

    progress: int
    seen: Annotated[list[str], operator.add]


def _build(scenario: Scenario, saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    def work(state: Progress) -> dict[str, Any]:
        return {"progress": state.get("progress", 0) + 1}

    def review(state: Progress) -> dict[str, Any]:
        return {"seen": ["review"]}

    def audit(state: Progress) -> dict[str, Any]:
        return {"seen": ["audit"]}

    sub = StateGraph(Progress)
    sub.add_node("work", work)
    sub.add_edge(START, "work")
    if scenario.changed_graph is GraphChange.CHILD:
        sub.add_node("review", review)
        sub.add_edge("work", "review")
        sub.add_edge("review", END)
    else:
        sub.add_edge("work", END)
    child = sub.compile(checkpointer=False if scenario.child_storage is ChildStorageMode.NONE else None)

    parent = StateGraph(Progress)
    parent.add_node("child", child)
    parent.add_edge(START, "child")
    if scenario.changed_graph is GraphChange.PARENT:
        parent.add_node("audit", audit)
        parent.add_edge("child", "audit")
        parent.add_edge("audit", "child")
    else:
        parent.add_edge("child", "child")
    return parent.compile(checkpointer=saver, interrupt_after=["child"])


class LangGraphRunnerProfile(RunnerProfile):
    """Real LangGraph graphs with a subgraph, over :class:`~storages.runners.langgraph.StorageSaver`."""

    def __init__(self) -> None:
        _require_langgraph()
        self._version = importlib.metadata.version("langgraph")

    @property
    def name(self) -> str:
        return f"langgraph {self._version}"

    async def run(self, scenario: Scenario) -> RunObservation:
        if scenario.child_storage is ChildStorageMode.SEPARATE:
            raise ValueError("LangGraph subgraphs save through the parent's checkpointer; no separate store")
        saved = _Saved()
        graph = _build(scenario, _saver_for(scenario, saved))
        thread = {"configurable": {"thread_id": scenario.parent_workflow}}
        progress: list[int] = []
        for step in range(scenario.supersteps):
            if step == 0 and scenario.resume_from is None:
                state = await graph.ainvoke({"progress": 0}, thread)
            elif step == 0 and scenario.resume_from is not None:
                restored = scenario.resume_from.rpartition("@")[0]
                state = await graph.ainvoke(
                    None, {"configurable": {"thread_id": scenario.parent_workflow, "checkpoint_id": restored}}
                )
            else:
                state = await graph.ainvoke(None, thread)
            progress.append(int(state["progress"]))
        return RunObservation(tuple(saved.parent), tuple(saved.child), tuple(progress))


__all__ = ["LANGGRAPH_DEVIATIONS", "LangGraphRunnerProfile"]
