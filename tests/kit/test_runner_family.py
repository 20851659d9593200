"""The runner family passes correct storages under the reference driver and catches broken runner
profiles (the sub-workflow bug from microsoft/agent-framework#7097's review among them) and storages
whose defects only show when a runner uses them."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conformance import (
    BackendReport,
    ChildStorageMode,
    GraphChange,
    Outcome,
    RunObservation,
    Scenario,
    ScenarioRunner,
    StorageTarget,
    select_clauses,
    target_from_url,
)
from conformance.scenario import ChildResume
from storages.backend import StoredBody
from storages.contract import AncestryEnd, Capability
from storages.errors import GraphSignatureMismatchError
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .double import DoubleBackend, InlineStorage
from .support import failed
from .test_fencing_family import ComparesWithCachedLatest, WithoutFencing
from .test_ordering_family import RootsNeverRival

FAMILY = "runner"

NESTED_STATE = "runner.nested_state_survives_parent_restore"
CHANGED_PARENT = "runner.changed_parent_graph_is_rejected"
CHANGED_CHILD = "runner.changed_child_graph_is_rejected"
CHAIN = "runner.chain_whole_after_parent_restore"
RESUME_LATEST = "runner.resume_from_latest_continues"
STALE_RUN = "runner.stale_run_cannot_clobber_successor"
PARALLEL = "runner.parallel_steps_resume_where_the_runner_would"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


def with_runner(runner: ScenarioRunner, factory: Any = InMemoryCheckpointStorage) -> StorageTarget:
    return StorageTarget(name=type(runner).__name__, factory=factory, runner=runner)


def all_passed(backend: BackendReport) -> None:
    assert {r.clause_id: r.outcome for r in backend.results} == {
        c.id: Outcome.PASSED for c in select_clauses([FAMILY])
    }, [(r.clause_id, r.message) for r in backend.results if r.outcome is not Outcome.PASSED]


# ---------------------------------------------------------------- runner-profile mutants, one defect each


class ChildLinksToFreshId(ScenarioRunner):
    """After a parent restore the child restores its state, but its next checkpoint points at a
    freshly minted id that nothing saved: the bug found in the review of agent-framework#7097."""

    def _resume_child(self, embedded: Any) -> ChildResume:
        resumed = super()._resume_child(embedded)
        return ChildResume(resumed.progress, resumed.iteration, str(uuid.uuid4()))


class ChildRestartsEmpty(ScenarioRunner):
    """Ignores the embedded child checkpoint: the child starts over, state and chain (pre-#7097 MAF)."""

    def _resume_child(self, embedded: Any) -> ChildResume:
        return ChildResume(progress=0, iteration=0, previous_id=None)


class ChildResumesFromItsLatest(ScenarioRunner):
    """Restores a child that saves on its own from its newest checkpoint, not from the one embedded
    in the restored parent checkpoint (right without a fork, wrong after one)."""

    async def _restore(self, scenario: Scenario, checkpoint_id: str, parent_sig: str, child_sig: str) -> Any:
        run = await super()._restore(scenario, checkpoint_id, parent_sig, child_sig)
        storage = scenario.child_saving_storage
        if storage is not None:
            latest = await storage.get_latest(workflow_name=scenario.child_workflow)
            progress = latest.state["_executor_state"]["work"]["progress"]
            run.child = ChildResume(progress, latest.iteration_count, latest.checkpoint_id)
        return run


class SkipsSignatureCheck(ScenarioRunner):
    """Restores whatever graph the checkpoint was taken with."""

    def _check_signature(self, checkpoint: Any, expected: str) -> None:
        return None


class RejectsAfterRunning(SkipsSignatureCheck):
    """Raises the signature error only after the restored run has saved its checkpoints."""

    async def run(self, scenario: Scenario) -> RunObservation:
        observation = await super().run(scenario)
        if scenario.changed_graph is not GraphChange.NONE:
            raise GraphSignatureMismatchError(str(scenario.resume_from), "current-graph", "checkpoint-graph")
        return observation


# ---------------------------------------------------------------- storage mutants, under the reference driver


class InlinesEmbeddedButDeclaresNested(InlineStorage):
    """Declares ``nested`` but keeps embedded checkpoints inline in their container's body, so their
    ids resolve to nothing (a backend that forgot to write the nested records)."""


class WithoutNested(DoubleBackend):
    """Honestly declares no ``nested``: embedded checkpoints stay inline, as in MAF's own storages."""

    capabilities = MemoryBackend.capabilities - {Capability.NESTED}


class LatestByIteration(DoubleBackend):
    """get_latest() returns the checkpoint with the highest iteration_count ("furthest progress"),
    the newest commit on ties: right for a single straight run, wrong after a fork."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        stored = await self.list_bodies(workflow_name, graph_signature_hash)
        if not stored:
            return None
        checkpoints = [await self.decode(item) for item in stored]
        ranked = [(checkpoint.iteration_count, index) for index, checkpoint in enumerate(checkpoints)]
        return stored[max(ranked)[1]]


class RivalsByCommitOrder(DoubleBackend):
    """Reads no rivals with the head: of parallel steps' checkpoints, the one committed last is
    latest, whatever order they were built in."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        stored = await super().latest(workflow_name, graph_signature_hash)
        return None if stored is None else replace(stored, rivals=())


# ---------------------------------------------------------------- tests: correct storages pass


def test_in_memory_storage_passes_every_runner_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    all_passed(backend)
    assert len(backend.results) == 7


@pytest.mark.sqlite
def test_sqlite_storage_passes_every_runner_clause(tmp_path: Path) -> None:
    backend = run_family(target_from_url(f"sqlite:///{tmp_path}/runner.db"))
    all_passed(backend)


# ---------------------------------------------------------------- tests: runner-profile mutants


def test_child_pointing_at_a_never_saved_id_fails_the_chain_clause() -> None:
    backend = run_family(with_runner(ChildLinksToFreshId()))
    assert failed(backend) == {CHAIN}
    message = backend.result(CHAIN).message
    assert "child checkpoint '" in message
    assert (
        "which the storage cannot load: a dangling link; the child checkpoint embedded in the restored "
        in message
    )
    assert "so the child links to an id that was never saved" in message


def test_child_restarting_from_empty_fails_state_chain_and_resume() -> None:
    backend = run_family(with_runner(ChildRestartsEmpty()))
    assert failed(backend) == {NESTED_STATE, CHAIN, RESUME_LATEST}
    message = backend.result(NESTED_STATE).message
    assert "(child storage none)" in message
    assert (
        "was [1, 2], expected [3, 4] as in the uninterrupted run: the child restarted from empty" in message
    )
    assert "has no previous id: the child's chain restarted" in backend.result(CHAIN).message
    assert "gave child progress [1], expected [4]" in backend.result(RESUME_LATEST).message


def test_child_resuming_from_its_own_latest_fails_after_a_fork() -> None:
    backend = run_family(with_runner(ChildResumesFromItsLatest()))
    # The chain resolves, but through the abandoned branch: the link fidelity check names it.
    assert failed(backend) == {NESTED_STATE, CHAIN, RESUME_LATEST}
    assert "not at the child checkpoint embedded in the restored parent" in backend.result(CHAIN).message
    message = backend.result(NESTED_STATE).message
    assert "(child storage shared)" in message
    assert "was [5, 6], expected [3, 4]" in message
    assert "continued from a later state" in message


def test_skipping_the_signature_check_fails_both_changed_graph_clauses() -> None:
    backend = run_family(with_runner(SkipsSignatureCheck()))
    assert failed(backend) == {CHANGED_PARENT, CHANGED_CHILD}
    for clause_id, graph in ((CHANGED_PARENT, "parent"), (CHANGED_CHILD, "child")):
        message = backend.result(clause_id).message
        assert f"with a changed {graph} graph was not rejected: the run continued and saved" in message


def test_rejecting_after_saving_fails_the_storage_untouched_check() -> None:
    backend = run_family(with_runner(RejectsAfterRunning()))
    assert failed(backend) == {CHANGED_PARENT, CHANGED_CHILD}
    message = backend.result(CHANGED_PARENT).message
    assert "was rejected but changed the ids listed for workflow 'ck-parent-" in message
    assert "added ['" in message


def test_a_rejection_that_is_not_the_signature_error_fails() -> None:
    class RejectsWithKeyError(ScenarioRunner):
        def _check_signature(self, checkpoint: Any, expected: str) -> None:
            if checkpoint.graph_signature_hash != expected:
                raise KeyError("graph")

    backend = run_family(with_runner(RejectsWithKeyError()))
    assert failed(backend) == {CHANGED_PARENT, CHANGED_CHILD}
    assert "raised KeyError: 'graph'; expected runner 'reference'" in backend.result(CHANGED_CHILD).message


# ---------------------------------------------------------------- tests: storage mutants


def test_storage_declaring_nested_without_nested_records_breaks_the_shared_childs_chain() -> None:
    backend = run_family(InlinesEmbeddedButDeclaresNested)
    assert failed(backend) == {CHAIN}
    message = backend.result(CHAIN).message
    assert "child checkpoint '" in message
    assert "a dangling link to the child checkpoint embedded in the restored parent checkpoint, which a " in (
        message
    )


def test_storage_without_nested_skips_the_chain_clause_and_passes_the_rest() -> None:
    """Without nested records no storage can resolve the embedded id the child links to; a storage
    that says so by not declaring ``nested`` gets the chain clause skipped, never passed."""
    backend = run_family(WithoutNested)
    assert not failed(backend)
    chain = backend.result(CHAIN)
    assert chain.outcome is Outcome.SKIPPED
    assert "nested" in chain.message
    assert [r.outcome for r in backend.results].count(Outcome.PASSED) == len(backend.results) - 1


def test_storage_without_fencing_reports_the_stale_runs_clobber_as_a_finding() -> None:
    """Not a failure: the storage promises no fencing (a storage declaring only MAF's six methods
    passes every clause it can run); the finding, a status of its own, names what happened."""
    backend = run_family(WithoutFencing)
    assert not failed(backend)
    assert backend.result(STALE_RUN).outcome is Outcome.FINDING
    message = backend.result(STALE_RUN).message
    assert message.startswith("the storage does not declare 'fencing': run A was dropped")
    assert "A's abandoned branch: the next resume continues the dead run" in message


def test_a_fence_on_a_cached_latest_lets_the_stale_run_clobber_the_successor() -> None:
    backend = run_family(ComparesWithCachedLatest)
    assert failed(backend) == {STALE_RUN}
    assert "although the storage declares 'fencing'" in backend.result(STALE_RUN).message


def test_latest_by_iteration_count_fails_resume_from_latest_and_parallel_steps() -> None:
    backend = run_family(LatestByIteration)
    # Parallel steps' checkpoints carry one iteration count: the newest commit wins among them.
    assert failed(backend) == {RESUME_LATEST, PARALLEL}
    message = backend.result(RESUME_LATEST).message
    assert "(the newest checkpoint of the abandoned first run)" in message
    # The unit family for "latest" sees it only where its runs fork or save out of order.
    ordering = support.run_family("ordering", LatestByIteration)
    assert failed(ordering) == {
        "ordering.latest_is_the_lineage_tip",
        "ordering.latest_among_rivals_by_timestamp",
        "ordering.latest_among_root_rivals_by_timestamp",
        "ordering.rival_timestamps_compare_as_instants",
        "ordering.latest_reads_the_rivals_committed_last",
        "ordering.concurrent_saves_commit_in_call_order",
    }


def test_rivals_by_commit_order_fail_the_parallel_steps_clause() -> None:
    backend = run_family(RivalsByCommitOrder)
    assert failed(backend) == {PARALLEL}
    message = backend.result(PARALLEL).message
    assert "get_latest() returned" in message
    assert "resuming from it ran ['" in message  # at least one completed step ran again


def test_roots_that_never_rival_fail_the_parallel_steps_clause_only() -> None:
    backend = run_family(RootsNeverRival)
    assert failed(backend) == {PARALLEL}
    assert "parallel-first run" in backend.result(PARALLEL).message


@pytest.mark.maf
def test_maf_in_memory_storage_passes_and_skips_the_chain_clause() -> None:
    """MAF's own storage passes under the reference driver; it declares no ``nested`` (embedded
    checkpoints stay inline), so the chain clause is skipped rather than passed. (It cannot refuse
    the stale run's late save, but its latest-by-timestamp keeps B's checkpoint latest here: A's
    late checkpoint was taken before B's.)"""
    agent_framework = pytest.importorskip("agent_framework")
    backend = run_family(
        StorageTarget(
            name="agent_framework.InMemoryCheckpointStorage",
            factory=agent_framework.InMemoryCheckpointStorage,
            checkpoint_class=agent_framework.WorkflowCheckpoint,
        )
    )
    assert not failed(backend)
    assert backend.result(CHAIN).outcome is Outcome.SKIPPED


# ---------------------------------------------------------------- tests: the driver itself


async def test_separate_child_storage_leaves_maf_s_dangling_link() -> None:
    """With its own storage the child resumes from an id only the parent's storage holds: the
    reference driver reproduces the dangling link MAF 1.23 shows (field notes)."""
    runner = ScenarioRunner()
    async with InMemoryCheckpointStorage() as parent, InMemoryCheckpointStorage() as child:

        def scenario(supersteps: int, resume_from: str | None = None) -> Scenario:
            return Scenario(
                parent,
                "parent",
                "child",
                supersteps,
                child_storage=ChildStorageMode.SEPARATE,
                child_own_storage=child,
                resume_from=resume_from,
            )

        fresh = await runner.run(scenario(4))
        assert await child.list_checkpoint_ids(workflow_name="child") == list(fresh.child_saved)
        assert await parent.list_checkpoint_ids(workflow_name="child") == []
        resumed = await runner.run(scenario(2, resume_from=fresh.parent_saved[2]))
        assert resumed.child_progress == (3, 4)

        restored = await parent.load(fresh.parent_saved[2])
        embedded = restored.state["_executor_state"]["child"]["sub_workflow_checkpoint"]
        first_child = await child.load(resumed.child_saved[0])
        assert first_child.previous_checkpoint_id == embedded.checkpoint_id
        walk = await child.walk_ancestry_ids(resumed.child_saved[-1])
        assert (walk.end, walk.end_id) == (AncestryEnd.MISSING, embedded.checkpoint_id)
        # The parent's storage holds the embedded checkpoint as a nested record, a root.
        assert (await parent.walk_ancestry_ids(embedded.checkpoint_id)).end is AncestryEnd.ROOT


async def test_fresh_run_follows_maf_s_protocol() -> None:
    async with InMemoryCheckpointStorage() as storage:
        run = await ScenarioRunner().run(
            Scenario(storage, "p", "c", 3, child_storage=ChildStorageMode.SHARED)
        )
        assert run.child_progress == (1, 2, 3)
        parents = [await storage.load(i) for i in run.parent_saved]
        assert [p.iteration_count for p in parents] == [0, 1, 2, 3]
        assert [p.previous_checkpoint_id for p in parents] == [None, *run.parent_saved[:-1]]
        children = [await storage.load(i) for i in run.child_saved]
        assert [c.previous_checkpoint_id for c in children] == [None, *run.child_saved[:-1]]
        for parent in parents:
            embedded = parent.state["_executor_state"]["child"]["sub_workflow_checkpoint"]
            assert embedded.previous_checkpoint_id is None
            assert embedded.checkpoint_id not in run.child_saved
            assert embedded.state["_executor_state"]["work"]["progress"] == parent.iteration_count
        assert await storage.list_nested(run.parent_saved[-1]) == [
            parents[-1].state["_executor_state"]["child"]["sub_workflow_checkpoint"].checkpoint_id
        ]


@pytest.mark.parametrize("change", [GraphChange.PARENT, GraphChange.CHILD])
async def test_changed_graph_raises_before_saving(change: GraphChange) -> None:
    async with InMemoryCheckpointStorage() as storage:
        runner = ScenarioRunner()
        fresh = await runner.run(Scenario(storage, "p", "c", 2, child_storage=ChildStorageMode.SHARED))
        with pytest.raises(GraphSignatureMismatchError, match=fresh.parent_saved[1]):
            await runner.run(
                Scenario(
                    storage,
                    "p",
                    "c",
                    1,
                    child_storage=ChildStorageMode.SHARED,
                    resume_from=fresh.parent_saved[1],
                    changed_graph=change,
                )
            )
        assert runner.is_signature_rejection(GraphSignatureMismatchError("x", "a", "b"))
        assert await storage.list_checkpoint_ids(workflow_name="p") == list(fresh.parent_saved)
        assert await storage.list_checkpoint_ids(workflow_name="c") == list(fresh.child_saved)


def test_scenario_rejects_inconsistent_settings() -> None:
    storage = InMemoryCheckpointStorage()
    with pytest.raises(ValueError, match="child_own_storage"):
        Scenario(storage, "p", "c", 1, child_storage=ChildStorageMode.SEPARATE)
    with pytest.raises(ValueError, match="child_own_storage"):
        Scenario(storage, "p", "c", 1, child_own_storage=InMemoryCheckpointStorage())
    with pytest.raises(ValueError, match="different workflow names"):
        Scenario(storage, "p", "p", 1)
    with pytest.raises(ValueError, match="supersteps"):
        Scenario(storage, "p", "c", 0)
