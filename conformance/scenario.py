"""Runner scenarios: what happens to a storage when a superstep runner with a sub-workflow uses it.

The ``runner`` clause family does not call the storage directly; it asks a :class:`RunnerProfile`
to run a parent workflow that contains one sub-workflow, against the storage, and then checks what
the storage holds. A profile is anything that can run that scenario: the reference
:class:`ScenarioRunner` below, or (through the same small interface) a real runner such as
Microsoft Agent Framework's ``WorkflowBuilder`` with a ``WorkflowExecutor``. A target picks its
profile with ``StorageTarget(runner=...)``; without one the reference driver runs.

The reference driver follows MAF's checkpoint protocol step by step:

1. A fresh run saves an entry checkpoint at iteration 0 (previous id None), then one checkpoint per
   superstep, each chained to the one before by ``previous_checkpoint_id``.
2. Every parent checkpoint embeds the child's state as MAF's ``WorkflowExecutor`` does:
   ``state["_executor_state"]["child"]["sub_workflow_checkpoint"]`` is a checkpoint of the child
   workflow with a fresh id and previous id None, never saved on its own by the runner. A storage
   with the ``nested`` capability stores it as a nested record, addressable by that id.
3. When the child has a storage (shared with the parent, or a separate one), the child also saves
   its own checkpoints: an entry checkpoint, then one per superstep, chained by previous id.
4. A restore loads the parent checkpoint with MAF's one-argument ``load(id)``, compares its graph
   signature with the current graph's (which covers the child's graph too, as MAF's does) and
   raises :class:`~storages.errors.GraphSignatureMismatchError` on a mismatch, then checks the
   embedded child checkpoint's signature the same way. Both checks happen before anything is
   saved. The parent continues its chain from the restored checkpoint (a fork); the child resumes
   from its embedded checkpoint: its progress is the embedded state and its next own checkpoint
   points at the embedded checkpoint's id (MAF's ``_mark_resumed``). With a shared ``nested``
   storage that id resolves; with a separate child storage it cannot, which is the dangling link
   found in the review of microsoft/agent-framework#7097.

"Progress" is the child's one observable value: a counter that grows by one per superstep, so a
child restored from empty is told apart from one restored from mid-run state.

``docs/runner-profiles.md`` describes the interface, how to plug in a real runner, and what each
``runner`` clause proves.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from storages.contract import CHECKPOINT_FIELDS, WorkflowCheckpoint
from storages.errors import GraphSignatureMismatchError


class ChildStorageMode(str, enum.Enum):
    """Where the sub-workflow saves checkpoints of its own."""

    NONE = "none"
    """The child never saves on its own; its state lives only inside parent checkpoints (MAF's
    default for a sub-workflow built without a checkpoint storage)."""
    SHARED = "shared"
    """The child saves its own checkpoints to the parent's storage, under its own workflow name."""
    SEPARATE = "separate"
    """The child saves its own checkpoints to a storage of its own (``Scenario.child_own_storage``)."""

    def __str__(self) -> str:
        return self.value


class GraphChange(str, enum.Enum):
    """Which graph differs from the one the restored checkpoint was taken with."""

    NONE = "none"
    PARENT = "parent"
    """The parent graph gained an executor."""
    CHILD = "child"
    """The sub-workflow's graph gained an executor."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Scenario:
    """One run of a parent workflow with one sub-workflow.

    Args:
        storage: the parent's checkpoint storage (MAF's six methods are all a profile may use).
        parent_workflow: the parent workflow's name; the kit makes it unique per clause.
        child_workflow: the sub-workflow's name, different from the parent's.
        supersteps: how many supersteps to run in this call (after the restore, when resuming).
        child_storage: where the child saves checkpoints of its own.
        child_own_storage: the child's storage when ``child_storage`` is SEPARATE, else None.
        resume_from: a parent checkpoint id to restore before running, or None for a fresh run.
        changed_graph: run with a parent or child graph that differs from the one the run
            started with; a restore must then be rejected with the runner's signature error.
    """

    storage: Any
    parent_workflow: str
    child_workflow: str
    supersteps: int
    child_storage: ChildStorageMode = ChildStorageMode.NONE
    child_own_storage: Any = None
    resume_from: str | None = None
    changed_graph: GraphChange = GraphChange.NONE

    def __post_init__(self) -> None:
        if isinstance(self.supersteps, bool) or not isinstance(self.supersteps, int) or self.supersteps < 1:
            raise ValueError(f"supersteps must be an int >= 1, got {self.supersteps!r}")
        if self.parent_workflow == self.child_workflow:
            raise ValueError(
                f"the parent and the child need different workflow names: {self.parent_workflow!r}"
            )
        separate = self.child_storage is ChildStorageMode.SEPARATE
        if separate != (self.child_own_storage is not None):
            raise ValueError("child_own_storage is required with ChildStorageMode.SEPARATE and only then")

    @property
    def child_saving_storage(self) -> Any:
        """The storage the child saves its own checkpoints to, or None."""
        if self.child_storage is ChildStorageMode.SHARED:
            return self.storage
        return self.child_own_storage


@dataclass(frozen=True, slots=True)
class RunObservation:
    """What a profile saw during one :meth:`RunnerProfile.run` call.

    Attributes:
        parent_saved: ids of the parent checkpoints saved in this call, in save order.
        child_saved: ids of the checkpoints the child saved on its own in this call, in save
            order, whichever storage they went to (empty with ChildStorageMode.NONE).
        child_progress: the child's progress after each superstep of this call, one value per
            superstep. It grows by at least one per superstep and continues across a restore:
            resuming from the parent checkpoint taken at iteration ``k`` must give the values an
            uninterrupted run had from superstep ``k + 1`` on.
        child_storage: the storage the child saved to, when a profile gave it one of its own
            although the scenario asked for a shared one (a profile configured to show what its
            runner does with a separate child storage); None otherwise.
    """

    parent_saved: tuple[str, ...]
    child_saved: tuple[str, ...]
    child_progress: tuple[int, ...]
    child_storage: Any = None


@dataclass(frozen=True, slots=True)
class ParallelStepsObservation:
    """One run of a functional workflow whose parallel steps saved through a store with random
    per-save latency, failed after them, and was resumed from the storage's ``get_latest``."""

    saved: int
    """Checkpoints the failed run saved (one per completed step)."""
    latest_id: str | None
    """The storage's ``get_latest`` after the failed run."""
    runner_latest_id: str | None
    """What the runner's own in-memory storage answers over the same saves, in the same order."""
    rerun: tuple[str, ...]
    """Steps the failed run had completed that ran again when resuming from ``latest_id``."""


class RunnerProfile(abc.ABC):
    """A runner the ``runner`` clauses can drive: the reference driver or a real runner.

    Implementations run :class:`Scenario` and report a :class:`RunObservation`. Conventions the
    clauses rely on: a parent checkpoint's ``iteration_count`` is the number of supersteps done
    when it was taken (0 for the entry checkpoint); a restore with a changed graph raises before
    it saves anything, with an exception :meth:`is_signature_rejection` recognises.
    """

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Shown in clause messages, e.g. ``reference`` or ``agent_framework 1.23.0``."""

    @abc.abstractmethod
    async def run(self, scenario: Scenario) -> RunObservation:
        """Run (or restore and continue) the scenario's parent workflow and its sub-workflow."""

    async def run_parallel_steps(
        self,
        storage: Any,
        workflow_name: str,
        *,
        seed: int,
        max_delay: float = 0.005,
        starts_parallel: bool = False,
    ) -> ParallelStepsObservation | None:
        """Run the runner's parallel-steps scenario on ``storage`` (see
        :class:`ParallelStepsObservation`), each save delayed by up to ``max_delay`` seconds drawn
        from ``seed``; with ``starts_parallel``, the parallel steps are the run's first, so their
        checkpoints continue none. None if the runner has no such workflows."""
        return None

    def is_signature_rejection(self, exc: BaseException) -> bool:
        """True if ``exc`` is this runner's "the graph has changed" error on restore.

        MAF raises ``WorkflowCheckpointException("Workflow graph has changed ...")``; a MAF
        profile overrides this accordingly.
        """
        return isinstance(exc, GraphSignatureMismatchError)


class ScenarioStateError(ValueError):
    """A restored parent checkpoint (or the child checkpoint embedded in it) lacks the state the
    driver saved into it."""

    def __init__(self, checkpoint_id: str, reason: str) -> None:
        super().__init__(f"Checkpoint {checkpoint_id!r} cannot be resumed: {reason}")
        self.checkpoint_id = checkpoint_id


CHILD_EXECUTOR_ID = "child"
"""The parent's executor that runs the sub-workflow; its state holds the embedded checkpoint."""
EMBEDDED_KEY = "sub_workflow_checkpoint"
"""MAF's key for the embedded child checkpoint inside the executor's state."""
_PARENT_COUNTER = "steps"
_CHILD_WORKER = "work"


def graph_signature(
    executors: Sequence[str], edges: Sequence[tuple[str, str]], sub_workflows: Mapping[str, str]
) -> str:
    """A sha256 over a graph's topology, its sub-workflows' signatures included (as MAF's)."""
    topology = {"executors": sorted(executors), "edges": sorted(edges), "sub_workflows": dict(sub_workflows)}
    return hashlib.sha256(json.dumps(topology, sort_keys=True).encode()).hexdigest()


def _signatures(change: GraphChange) -> tuple[str, str]:
    """(parent, child) graph signatures of the reference scenario, with ``change`` applied."""
    child_executors = [_CHILD_WORKER]
    child_edges: list[tuple[str, str]] = []
    if change is GraphChange.CHILD:
        child_executors.append("review")
        child_edges.append((_CHILD_WORKER, "review"))
    child = graph_signature(child_executors, child_edges, {})
    parent_executors = [_PARENT_COUNTER, CHILD_EXECUTOR_ID]
    parent_edges = [(_PARENT_COUNTER, CHILD_EXECUTOR_ID)]
    if change is GraphChange.PARENT:
        parent_executors.append("audit")
        parent_edges.append((CHILD_EXECUTOR_ID, "audit"))
    return graph_signature(parent_executors, parent_edges, {CHILD_EXECUTOR_ID: child}), child


@dataclass(frozen=True, slots=True)
class ChildResume:
    """Where the child stands when a run starts: its progress, its iteration count, and the id
    its next own checkpoint points at."""

    progress: int
    iteration: int
    previous_id: str | None


@dataclass(slots=True)
class _Run:
    """Mutable state of one :meth:`ScenarioRunner.run` call."""

    scenario: Scenario
    parent_signature: str
    child_signature: str
    parent_iteration: int
    parent_previous: str | None
    child: ChildResume
    parent_saved: list[str]
    child_saved: list[str]
    child_progress: list[int]


PARALLEL_STEP_NAMES = ("left", "right", "middle")
"""The reference parallel-steps scenario's steps that run in parallel."""
_PARALLEL_STEPS = "parallel_steps"


class ScenarioRunner(RunnerProfile):
    """The reference driver: MAF's superstep and sub-workflow checkpoint protocol, nothing more.

    Each step of a restore is a method of its own (``_restore``, ``_check_signature``,
    ``_resume_child``) so the kit's tests can break one step at a time; they are not part of the
    :class:`RunnerProfile` interface.

    Args:
        checkpoint_class: the class checkpoints are built with (the target's ``checkpoint_class``).
    """

    def __init__(self, checkpoint_class: type[Any] = WorkflowCheckpoint) -> None:
        self._checkpoint_class = checkpoint_class

    @property
    def name(self) -> str:
        return "reference"

    async def run(self, scenario: Scenario) -> RunObservation:
        parent_signature, child_signature = _signatures(scenario.changed_graph)
        if scenario.resume_from is None:
            run = _Run(
                scenario, parent_signature, child_signature, 0, None, ChildResume(0, 0, None), [], [], []
            )
            await self._save_child(run)
            await self._save_parent(run)
        else:
            run = await self._restore(scenario, scenario.resume_from, parent_signature, child_signature)
        for _ in range(scenario.supersteps):
            run.parent_iteration += 1
            run.child = ChildResume(run.child.progress + 1, run.child.iteration + 1, run.child.previous_id)
            run.child_progress.append(run.child.progress)
            await self._save_child(run)
            await self._save_parent(run)
        return RunObservation(tuple(run.parent_saved), tuple(run.child_saved), tuple(run.child_progress))

    async def run_parallel_steps(
        self,
        storage: Any,
        workflow_name: str,
        *,
        seed: int,
        max_delay: float = 0.005,
        starts_parallel: bool = False,
    ) -> ParallelStepsObservation:
        """MAF 1.26's functional-workflow protocol in miniature: an entry step's checkpoint (none
        with ``starts_parallel``), then three parallel steps, each completing one after another
        and building a checkpoint that continues the entry's (none of their saves has returned;
        with ``starts_parallel`` they continue none) and records every step done so far,
        timestamped when built; each save runs as a task of its own after a random delay. The
        runner's own answer is the checkpoint built last; a resume from the storage's latest
        runs again every completed step its state lacks."""
        rng = random.Random(seed)  # noqa: S311 - delays, not secrets
        signature = _signatures(GraphChange.NONE)[0]
        start = datetime.now(UTC)

        def build(done: list[str], previous: str | None) -> Any:
            return self._checkpoint_class(
                workflow_name=workflow_name,
                graph_signature_hash=signature,
                previous_checkpoint_id=previous,
                timestamp=(start + timedelta(milliseconds=len(done))).isoformat(),
                state={"_executor_state": {_PARALLEL_STEPS: {"done": list(done)}}},
            )

        async def save_later(checkpoint: Any) -> None:
            await asyncio.sleep(rng.uniform(0.0, max_delay))
            await storage.save(checkpoint)

        steps: tuple[str, ...] = PARALLEL_STEP_NAMES if starts_parallel else ("prepare", *PARALLEL_STEP_NAMES)
        first_parallel = len(steps) - len(PARALLEL_STEP_NAMES)
        entry_id = None
        if not starts_parallel:
            entry = build(["prepare"], None)
            await storage.save(entry)
            entry_id = entry.checkpoint_id
        built = [
            build(list(steps[: first_parallel + n + 1]), entry_id) for n in range(len(PARALLEL_STEP_NAMES))
        ]
        await asyncio.gather(*(save_later(checkpoint) for checkpoint in built))
        latest = await storage.get_latest(workflow_name=workflow_name)
        done = () if latest is None else tuple(latest.state["_executor_state"][_PARALLEL_STEPS]["done"])
        return ParallelStepsObservation(
            saved=first_parallel + len(built),
            latest_id=None if latest is None else latest.checkpoint_id,
            runner_latest_id=built[-1].checkpoint_id,
            rerun=tuple(step for step in steps if step not in done),
        )

    # ------------------------------------------------------------------ restore

    async def _restore(
        self, scenario: Scenario, checkpoint_id: str, parent_signature: str, child_signature: str
    ) -> _Run:
        # MAF's one-argument load: a foreign storage may not take expected_graph_signature_hash.
        parent = await scenario.storage.load(checkpoint_id)
        self._check_signature(parent, parent_signature)
        embedded = self._embedded_child(parent)
        self._check_signature(embedded, child_signature)
        return _Run(
            scenario,
            parent_signature,
            child_signature,
            parent.iteration_count,
            parent.checkpoint_id,
            self._resume_child(embedded),
            [],
            [],
            [],
        )

    def _check_signature(self, checkpoint: Any, expected: str) -> None:
        """Refuse a checkpoint taken with another graph, before anything is saved."""
        if checkpoint.graph_signature_hash != expected:
            raise GraphSignatureMismatchError(
                checkpoint.checkpoint_id, expected, checkpoint.graph_signature_hash
            )

    def _resume_child(self, embedded: Any) -> ChildResume:
        """The child continues from its embedded checkpoint: its state, and its chain."""
        return ChildResume(_child_progress(embedded), embedded.iteration_count, embedded.checkpoint_id)

    def _embedded_child(self, parent: Any) -> Any:
        try:
            value = parent.state["_executor_state"][CHILD_EXECUTOR_ID][EMBEDDED_KEY]
        except (KeyError, TypeError) as exc:
            raise ScenarioStateError(
                parent.checkpoint_id,
                "no embedded child checkpoint at "
                f"state['_executor_state'][{CHILD_EXECUTOR_ID!r}][{EMBEDDED_KEY!r}]",
            ) from exc
        if isinstance(value, Mapping) and set(CHECKPOINT_FIELDS) <= set(value):
            value = self._checkpoint_class(**value)
        if not all(hasattr(value, name) for name in CHECKPOINT_FIELDS):
            raise ScenarioStateError(
                parent.checkpoint_id,
                f"the embedded child state is a {type(value).__name__}, not a checkpoint",
            )
        return value

    # ------------------------------------------------------------------ saves

    async def _save_child(self, run: _Run) -> None:
        """The child's own checkpoint, when it has a storage; chained to its previous one."""
        storage = run.scenario.child_saving_storage
        if storage is None:
            return
        checkpoint = self._child_checkpoint(run, previous_id=run.child.previous_id)
        await storage.save(checkpoint)
        run.child_saved.append(checkpoint.checkpoint_id)
        run.child = replace(run.child, previous_id=checkpoint.checkpoint_id)

    async def _save_parent(self, run: _Run) -> None:
        """The parent's checkpoint, embedding a snapshot of the child (fresh id, previous None)."""
        snapshot = self._child_checkpoint(run, previous_id=None)
        checkpoint = self._checkpoint_class(
            workflow_name=run.scenario.parent_workflow,
            graph_signature_hash=run.parent_signature,
            previous_checkpoint_id=run.parent_previous,
            iteration_count=run.parent_iteration,
            state={
                "_executor_state": {
                    _PARENT_COUNTER: {"count": run.parent_iteration},
                    CHILD_EXECUTOR_ID: {EMBEDDED_KEY: snapshot},
                }
            },
        )
        await run.scenario.storage.save(checkpoint)
        run.parent_saved.append(checkpoint.checkpoint_id)
        run.parent_previous = checkpoint.checkpoint_id

    def _child_checkpoint(self, run: _Run, *, previous_id: str | None) -> Any:
        return self._checkpoint_class(
            workflow_name=run.scenario.child_workflow,
            graph_signature_hash=run.child_signature,
            previous_checkpoint_id=previous_id,
            iteration_count=run.child.iteration,
            state={"_executor_state": {_CHILD_WORKER: {"progress": run.child.progress}}},
        )


def _child_progress(embedded: Any) -> int:
    try:
        progress = embedded.state["_executor_state"][_CHILD_WORKER]["progress"]
    except (KeyError, TypeError) as exc:
        raise ScenarioStateError(
            embedded.checkpoint_id,
            f"the embedded child checkpoint has no progress at state['_executor_state'][{_CHILD_WORKER!r}]",
        ) from exc
    if isinstance(progress, bool) or not isinstance(progress, int):
        raise ScenarioStateError(
            embedded.checkpoint_id, f"the child's progress is a {type(progress).__name__}, not an int"
        )
    return progress


__all__ = [
    "CHILD_EXECUTOR_ID",
    "EMBEDDED_KEY",
    "ChildResume",
    "ChildStorageMode",
    "GraphChange",
    "ParallelStepsObservation",
    "RunObservation",
    "RunnerProfile",
    "Scenario",
    "ScenarioRunner",
    "ScenarioStateError",
    "graph_signature",
]
