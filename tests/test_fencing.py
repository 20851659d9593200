"""Writer fencing on every backend: save(expected_latest_id=...), StaleWriterError, FencedStorage.

The shared ``storage`` / ``storage_maker`` fixtures run each test once per backend, marked with
that backend's marker (conftest.py). Backend-specific races follow at the end: two processes on
one SQLite file, and an S3 fenced save that died between its pointer swap and its order key.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from conftest import BACKENDS, StorageMaker

from conformance import Outcome, StorageTarget, all_clauses, validate
from conformance.faults import SimulatedCrash
from storages import (
    CheckpointConflictError,
    CheckpointNotFoundError,
    CheckpointStore,
    FencedStorage,
    InvalidCheckpointIdError,
    SQLiteCheckpointStorage,
    StaleWriterError,
    UnsupportedOperationError,
    WorkflowCheckpoint,
)
from storages.contract import Capability
from storages.memory import InMemoryCheckpointStorage, MemoryBackend
from storages.s3 import S3CheckpointStorage

WORKER = Path(__file__).with_name("sqlite_worker.py")


def checkpoint(workflow_name: str = "wf", **fields: Any) -> WorkflowCheckpoint:
    fields.setdefault("graph_signature_hash", "sig")
    return WorkflowCheckpoint(workflow_name=workflow_name, **fields)


def after(previous: WorkflowCheckpoint, **fields: Any) -> WorkflowCheckpoint:
    return checkpoint(
        previous.workflow_name,
        previous_checkpoint_id=previous.checkpoint_id,
        iteration_count=previous.iteration_count + 1,
        **fields,
    )


async def latest_id(storage: Any, workflow_name: str = "wf") -> str | None:
    latest = await storage.get_latest(workflow_name=workflow_name)
    return None if latest is None else latest.checkpoint_id


async def is_stored(storage: CheckpointStore, checkpoint_id: str) -> bool:
    try:
        await storage.load(checkpoint_id)
    except CheckpointNotFoundError:
        return False
    return True


# ---------------------------------------------------------------------------- save(expected_latest_id=...)


async def test_a_fenced_save_stores_on_the_expected_latest_only(storage: CheckpointStore) -> None:
    first = checkpoint()
    assert await storage.save(first, expected_latest_id=None) == first.checkpoint_id
    second = after(first)
    assert await storage.save(second, expected_latest_id=first.checkpoint_id) == second.checkpoint_id
    stale = after(first)
    with pytest.raises(StaleWriterError) as refused:
        await storage.save(stale, expected_latest_id=first.checkpoint_id)
    error = refused.value
    assert isinstance(error, CheckpointConflictError)
    assert (error.workflow_name, error.checkpoint_id) == ("wf", stale.checkpoint_id)
    assert (error.expected_latest_id, error.actual_latest_id) == (first.checkpoint_id, second.checkpoint_id)
    assert f"expected at latest {first.checkpoint_id!r} but its latest is {second.checkpoint_id!r}" in str(
        error
    )
    assert not await is_stored(storage, stale.checkpoint_id)
    assert await storage.list_checkpoint_ids(workflow_name="wf") == [
        first.checkpoint_id,
        second.checkpoint_id,
    ]


async def test_the_fence_looks_at_one_workflow_only(storage: CheckpointStore) -> None:
    await storage.save(checkpoint("other"))
    first = checkpoint("wf")
    await storage.save(first, expected_latest_id=None)  # "other" has a checkpoint; "wf" had none
    assert await latest_id(storage, "wf") == first.checkpoint_id


async def test_handles_racing_for_one_head_have_one_winner(storage_maker: StorageMaker) -> None:
    handles = [storage_maker() for _ in range(4)]
    try:
        root = checkpoint()
        await handles[0].save(root)
        contenders = [after(root, state={"writer": index}) for index in range(len(handles))]
        outcomes = await asyncio.gather(
            *(
                h.save(c, expected_latest_id=root.checkpoint_id)
                for h, c in zip(handles, contenders, strict=True)
            ),
            return_exceptions=True,
        )
        winners = [
            c.checkpoint_id
            for c, outcome in zip(contenders, outcomes, strict=True)
            if outcome == c.checkpoint_id
        ]
        assert len(winners) == 1, outcomes
        refusals = [outcome for outcome in outcomes if not isinstance(outcome, str)]
        assert all(isinstance(r, StaleWriterError) and r.actual_latest_id == winners[0] for r in refusals)
        assert await handles[1].list_checkpoint_ids(workflow_name="wf") == [root.checkpoint_id, winners[0]]
    finally:
        for handle in handles:
            await handle.aclose()


async def test_a_retried_fenced_save_returns_its_id(storage_maker: StorageMaker) -> None:
    async with storage_maker() as storage, storage_maker() as other:
        first = checkpoint()
        second = after(first)
        for _ in range(2):
            assert await storage.save(first, expected_latest_id=None) == first.checkpoint_id
            assert await other.save(first, expected_latest_id=None) == first.checkpoint_id
        await storage.save(second, expected_latest_id=first.checkpoint_id)
        assert await other.save(second, expected_latest_id=first.checkpoint_id) == second.checkpoint_id
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [
            first.checkpoint_id,
            second.checkpoint_id,
        ]


async def test_a_retry_after_the_workflow_moved_on_is_refused(storage: CheckpointStore) -> None:
    first = checkpoint()
    await storage.save(first, expected_latest_id=None)
    second = after(first)
    await storage.save(second, expected_latest_id=first.checkpoint_id)
    with pytest.raises(StaleWriterError, match="already stored but is not the latest") as refused:
        await storage.save(first, expected_latest_id=None)
    assert refused.value.actual_latest_id == second.checkpoint_id
    changed = checkpoint(checkpoint_id=second.checkpoint_id, previous_checkpoint_id=first.checkpoint_id)
    with pytest.raises(CheckpointConflictError) as conflict:
        await storage.save(changed, expected_latest_id=first.checkpoint_id)
    assert not isinstance(conflict.value, StaleWriterError)  # different content: the immutability error


async def test_a_refused_save_stores_none_of_its_nested_records(storage: CheckpointStore) -> None:
    first = checkpoint()
    await storage.save(first)
    await storage.save(after(first))
    child = checkpoint("child")
    stale = after(first, state={"_executor_state": {"child": {"sub_workflow_checkpoint": child}}})
    with pytest.raises(StaleWriterError):
        await storage.save(stale, expected_latest_id=first.checkpoint_id)
    assert not await is_stored(storage, stale.checkpoint_id)
    assert not await is_stored(storage, child.checkpoint_id)
    # Unrefused, the family is stored together (nested records follow their container).
    head = await latest_id(storage)
    fresh = checkpoint(previous_checkpoint_id=head, state={"embedded": checkpoint("child")})
    await storage.save(fresh, expected_latest_id=head)
    assert (await storage.load(fresh.checkpoint_id)).state == fresh.state


async def test_a_bad_expected_latest_id_names_the_field(storage: CheckpointStore) -> None:
    with pytest.raises(InvalidCheckpointIdError, match="expected_latest_id") as caught:
        await storage.save(checkpoint(), expected_latest_id="")
    assert caught.value.field == "expected_latest_id"
    with pytest.raises(InvalidCheckpointIdError, match="must be a str"):
        await storage.save(checkpoint(), expected_latest_id=7)  # type: ignore[arg-type]


async def test_the_kit_fencing_family_and_runner_race_pass(storage_maker: StorageMaker) -> None:
    target = StorageTarget(name="backend", factory=storage_maker)
    clauses = ["fencing", "runner.stale_run_cannot_clobber_successor"]
    report = await asyncio.to_thread(validate, target, clauses=clauses)
    (backend,) = report.backends
    expected = 1 + sum(1 for c in all_clauses() if c.family == "fencing")
    assert [r.outcome for r in backend.results] == [Outcome.PASSED] * expected, backend.failures


# ---------------------------------------------------------------------------- FencedStorage


async def test_the_fenced_handle_lets_the_fork_win_and_refuses_the_stale_run(
    storage_maker: StorageMaker,
) -> None:
    async with storage_maker() as one, storage_maker() as two:
        run_a, run_b = one.fenced(), FencedStorage(two)  # a handle per run, on different connections
        chain = [checkpoint(iteration_count=0)]
        await run_a.save(chain[0])
        for _ in range(3):
            chain.append(after(chain[-1]))
            await run_a.save(chain[-1])
        restored = await run_b.load(chain[1].checkpoint_id)  # B resumes from an older checkpoint
        fork = after(restored)
        await run_b.save(fork)
        await run_b.save(after(fork))
        with pytest.raises(StaleWriterError) as refused:
            await run_a.save(after(chain[-1]))  # A's late finalizer
        assert refused.value.expected_latest_id == chain[-1].checkpoint_id
        assert await latest_id(one) == refused.value.actual_latest_id
        assert await latest_id(run_a) == (await run_b.get_latest(workflow_name="wf")).checkpoint_id


async def test_one_fenced_handle_shared_by_both_runs_fences_as_well(storage: CheckpointStore) -> None:
    """MAF's Workflow keeps one storage for all its runs, as in the seed's race."""
    shared = storage.fenced()
    first = checkpoint()
    await shared.save(first)
    a_last = after(first)
    await shared.save(a_last)
    restored = await shared.load(first.checkpoint_id)
    fork = after(restored)
    await shared.save(fork)
    with pytest.raises(StaleWriterError):
        await shared.save(after(a_last))
    assert await latest_id(storage) == fork.checkpoint_id
    # A second continuation of the restored checkpoint is the fork's sibling (a parallel step of
    # the resumed run): it is on the line the fork began, so it commits; the stale run is not.
    await shared.save(after(restored))
    with pytest.raises(StaleWriterError):
        await shared.save(after(a_last))


async def test_saves_of_the_superseded_run_before_the_forks_first_save_are_superseded(
    storage_maker: StorageMaker,
) -> None:
    """The window between B's restore and B's first save: A is not refused yet (nothing says B
    exists), but B's first save takes over from A's newer head and A is refused from then on."""
    async with storage_maker() as one, storage_maker() as two:
        run_a, run_b = one.fenced(), two.fenced()
        a_first = checkpoint()
        await run_a.save(a_first)
        a_head = after(a_first)
        await run_a.save(a_head)
        restored = await run_b.load(a_first.checkpoint_id)
        in_window = [after(a_head)]
        in_window.append(after(in_window[0]))
        for late in in_window:
            await run_a.save(late)  # lands after B's restore, before B's first save
        fork = after(restored)
        await run_b.save(fork)
        assert await latest_id(one) == fork.checkpoint_id
        with pytest.raises(StaleWriterError):
            await run_a.save(after(in_window[-1]))
        assert await latest_id(two) == fork.checkpoint_id


async def test_a_stale_run_that_had_itself_resumed_is_refused_at_its_first_save(
    storage_maker: StorageMaker,
) -> None:
    """A resumed from the latest, was dropped before saving; B resumed from an older checkpoint
    and saved; A's late first save is a fork too, fenced on the latest A saw, so it is refused."""
    async with storage_maker() as one, storage_maker() as two:
        chain = [checkpoint()]
        for _ in range(3):
            chain.append(after(chain[-1]))
        for saved in chain:
            await one.save(saved)
        run_a, run_b = one.fenced(), two.fenced()
        a_restored = await run_a.load(chain[-1].checkpoint_id)
        b_restored = await run_b.load(chain[1].checkpoint_id)
        fork = after(b_restored)
        await run_b.save(fork)
        with pytest.raises(StaleWriterError) as refused:
            await run_a.save(after(a_restored))
        assert refused.value.expected_latest_id == chain[-1].checkpoint_id
        assert refused.value.actual_latest_id == fork.checkpoint_id
        assert await latest_id(one) == fork.checkpoint_id


async def test_a_sub_workflow_resuming_from_its_embedded_checkpoint_is_a_fork(
    storage: CheckpointStore,
) -> None:
    shared = storage.fenced()
    child = [checkpoint("child")]
    child.append(after(child[0]))
    for saved in child:
        await shared.save(saved)
    embedded = checkpoint("child", iteration_count=1)
    parent = checkpoint("parent", state={"_executor_state": {"child": {"sub_workflow_checkpoint": embedded}}})
    await shared.save(parent)
    await shared.load(parent.checkpoint_id)
    resumed_child = checkpoint("child", previous_checkpoint_id=embedded.checkpoint_id)
    await shared.save(resumed_child)  # continues the embedded checkpoint: a fork, not a stale write
    assert await latest_id(storage, "child") == resumed_child.checkpoint_id


async def test_a_fresh_run_on_a_used_workflow_name_starts_a_branch(storage: CheckpointStore) -> None:
    await storage.save(checkpoint())
    fresh_run = storage.fenced()
    entry = checkpoint()
    await fresh_run.save(entry)
    await fresh_run.save(after(entry))
    assert len(await fresh_run.list_checkpoint_ids(workflow_name="wf")) == 3


@pytest.mark.memory
def test_a_storage_without_fencing_cannot_be_fenced() -> None:
    class UnfencedBackend(MemoryBackend):
        capabilities = MemoryBackend.capabilities - {Capability.FENCING}

    class Unfenced(InMemoryCheckpointStorage):
        backend_class = UnfencedBackend

    with pytest.raises(UnsupportedOperationError, match="fenced"):
        FencedStorage(Unfenced())


# ---------------------------------------------------------------------------- backend-specific races


@pytest.mark.sqlite
async def test_two_processes_racing_on_one_sqlite_file_keep_one_chain(tmp_path: Path) -> None:
    db_path, count = tmp_path / "race.db", 60
    async with SQLiteCheckpointStorage(db_path) as storage:
        await storage.list_checkpoint_ids(workflow_name="race")  # create the schema before the race
        worker = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), "fence-race", str(db_path), "race", str(count), "worker",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert worker.stdin is not None
        assert worker.stdout is not None
        assert await asyncio.wait_for(worker.stdout.readline(), 60) == b"ready\n"
        worker.stdin.write(b"go\n")
        await worker.stdin.drain()
        wins = 0
        for index in range(count):
            head = await latest_id(storage, "race")
            try:
                await storage.save(
                    checkpoint("race", checkpoint_id=f"test-{index}", previous_checkpoint_id=head),
                    expected_latest_id=head,
                )
                wins += 1
            except StaleWriterError:
                pass
        stdout, stderr = await asyncio.wait_for(worker.communicate(), 120)
        assert worker.returncode == 0, stderr.decode()
        _, worker_wins, worker_refusals = stdout.decode().split()
        assert int(worker_wins) + int(worker_refusals) == count
        listed = await storage.list_checkpoints(workflow_name="race")
        assert len(listed) == wins + int(worker_wins)
        # One chain: every stored checkpoint continues the one committed just before it.
        previous = [c.previous_checkpoint_id for c in listed]
        assert previous == [None, *(c.checkpoint_id for c in listed[:-1])]


@pytest.mark.s3
async def test_an_s3_fenced_save_that_died_after_its_pointer_swap_is_finished_by_the_next(
    tmp_path: Path,
) -> None:
    async with BACKENDS["s3"].fresh_store(tmp_path) as maker, maker() as storage, maker() as other:
        assert isinstance(storage, S3CheckpointStorage)
        first = checkpoint()
        await storage.save(first, expected_latest_id=None)
        crashing = after(first)

        async def die(*args: Any, **kwargs: Any) -> None:
            raise SimulatedCrash("died after the pointer swap, before the order key")

        with patch.object(storage.backend.protocol, "commit", die), pytest.raises(SimulatedCrash):
            await storage.save(crashing, expected_latest_id=first.checkpoint_id)
        assert await latest_id(other) == first.checkpoint_id  # not committed yet: invisible
        rival = after(first)
        with pytest.raises(StaleWriterError) as refused:
            await other.save(rival, expected_latest_id=first.checkpoint_id)
        assert refused.value.actual_latest_id == crashing.checkpoint_id
        assert await latest_id(other) == crashing.checkpoint_id  # the swap won; its commit was finished
        assert not await is_stored(other, rival.checkpoint_id)


@pytest.mark.memory
async def test_restoring_an_older_checkpoint_works_when_the_latest_is_damaged() -> None:
    async with InMemoryCheckpointStorage() as storage:
        first = checkpoint()
        damaged = after(first)
        await storage.save(first)
        await storage.save(damaged)
        await storage.write_raw_body(damaged.checkpoint_id, b"not a checkpoint")
        run_b = storage.fenced()
        restored = await run_b.load(first.checkpoint_id)
        fork = after(restored)
        await run_b.save(fork)  # fenced on the damaged latest, found by id without decoding it
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [
            first.checkpoint_id,
            damaged.checkpoint_id,
            fork.checkpoint_id,
        ]
