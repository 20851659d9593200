"""The fencing family passes the built-in storages and catches fences that are not one atomic step."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conformance import BackendReport, Outcome
from storages.backend import CheckpointRecord, FenceCheck, InsertResult
from storages.contract import Capability, CheckpointID
from storages.memory import InMemoryCheckpointStorage
from storages.sqlite import SQLiteCheckpointStorage

from . import support
from .double import Backing, FencingDouble
from .support import caught_only_by, failed

FAMILY = "fencing"
ONE_WINNER = "fencing.one_winner_per_head"
AFTER_FORK = "fencing.stale_save_after_fork_is_refused"
RETRY = "fencing.retried_save_is_idempotent"
NONE_FIRST = "fencing.expected_none_means_no_checkpoint_yet"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


class _Fence(FencingDouble):
    """The test double with the parts of a fenced insert as separate steps, for mutants."""

    def _latest_id(self, workflow_name: str) -> CheckpointID | None:
        return self.latest_id(self._read(), workflow_name)

    def _existing(self, record: CheckpointRecord) -> InsertResult | None:
        stored = self.stored_digest(self._read(), record.checkpoint_id)
        return None if stored is None else InsertResult.of_stored_digest(stored, record)


class ChecksThenWrites(_Fence):
    """Reads the latest, awaits (a round trip), then writes: two writers both pass the check."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        latest = self._latest_id(records[0].workflow_name)
        await asyncio.sleep(0)
        existing = self._existing(records[0])
        if existing is not None:
            return FenceCheck(latest, existing)
        if latest != expected_latest_id:
            return FenceCheck(latest, None)
        result = await self.insert(records)
        return None if result is InsertResult.INSERTED else FenceCheck(latest, result)


class ComparesWithCachedLatest(_Fence):
    """Each handle compares against the latest it last read or wrote, not the store's."""

    def __init__(self, backing: Backing | None = None) -> None:
        super().__init__(backing)
        self._cached: dict[str, CheckpointID | None] = {}  # per handle: new_handle starts afresh

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        top = records[0]
        if top.workflow_name not in self._cached:
            self._cached[top.workflow_name] = self._latest_id(top.workflow_name)
        latest = self._cached[top.workflow_name]
        existing = self._existing(top)
        if existing is not None:
            return FenceCheck(self._latest_id(top.workflow_name), existing)
        if latest != expected_latest_id:
            return FenceCheck(latest, None)
        await self.insert(records)
        self._cached[top.workflow_name] = top.checkpoint_id
        return None


class RetryLooksStale(_Fence):
    """Checks the expected latest before looking for the id, so a retried save is refused."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        latest = self._latest_id(records[0].workflow_name)
        if latest != expected_latest_id:
            return FenceCheck(latest, None)
        return await super().insert_fenced(records, expected_latest_id)


class NoneMeansUnfenced(_Fence):
    """Treats expected_latest_id=None as "do not check" instead of "no checkpoint yet"."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        if expected_latest_id is None:
            digest = await self.insert(records)
            return None if digest is None else FenceCheck(records[0].checkpoint_id, digest)
        return await super().insert_fenced(records, expected_latest_id)


class FencesOnTheNewestCommit(_Fence):
    """Compares the expected latest with the checkpoint committed last, not the latest
    get_latest() names: a parent saved after its child passes the fence in its child's place."""

    def _latest_id(self, workflow_name: str) -> CheckpointID | None:
        rows = self._read().top_level(workflow_name)
        return rows[-1].record.checkpoint_id if rows else None

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        latest = self._latest_id(records[0].workflow_name)
        existing = self._existing(records[0])
        if existing is not None:
            return FenceCheck(latest, existing)
        if latest != expected_latest_id:
            return FenceCheck(latest, None)
        await self.insert(records)
        return None


class LostAnswerReadBackAsInserted(_Fence):
    """Loses the answer of every third fenced insert and reads the id back: finding it stored
    with the same body, it reports the insert as made, never asking whether it was stored
    before (then a superseded re-save, which must be refused, passes)."""

    calls = 0

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        type(self).calls += 1
        check = await super().insert_fenced(records, expected_latest_id)
        if type(self).calls % 3 == 0 and check is not None and check.existing is InsertResult.SAME_BODY:
            return None
        return check


class WithoutFencing(FencingDouble):
    capabilities = FencingDouble.capabilities - {Capability.FENCING}


@pytest.mark.memory
def test_in_memory_storage_passes_the_fencing_family() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert not failed(backend), [r.message for r in backend.failures]
    assert all(r.outcome is Outcome.PASSED for r in backend.results)


@pytest.mark.sqlite
def test_sqlite_storage_passes_the_fencing_family(tmp_path: Path) -> None:
    root = SQLiteCheckpointStorage(tmp_path / "fence.db")
    backend = run_family(root.new_handle)
    assert not failed(backend), [r.message for r in backend.failures]
    assert all(r.outcome is Outcome.PASSED for r in backend.results)


@pytest.mark.memory
def test_a_check_and_a_write_in_two_steps_let_two_writers_win() -> None:
    caught_only_by(
        run_family(ChecksThenWrites), ONE_WINNER, "the check and the write are not one atomic step"
    )


@pytest.mark.memory
def test_a_cached_latest_lets_the_stale_writer_clobber_the_fork() -> None:
    backend = run_family(ComparesWithCachedLatest)
    assert failed(backend) == {ONE_WINNER, AFTER_FORK}
    assert "the stale writer clobbered it" in backend.result(AFTER_FORK).message
    assert "expected exactly one" in backend.result(ONE_WINNER).message


@pytest.mark.memory
def test_a_retry_refused_as_stale_fails_the_idempotency_clause() -> None:
    caught_only_by(run_family(RetryLooksStale), RETRY, "retrying a save that succeeded must return its id")


@pytest.mark.memory
def test_none_taken_as_unfenced_fails_the_fresh_workflow_clause() -> None:
    backend = run_family(NoneMeansUnfenced)
    # A re-save expecting None is let through too, though another checkpoint superseded it.
    assert failed(backend) == {NONE_FIRST, "fencing.superseded_resave_is_stale"}
    assert "although the workflow already had" in backend.result(NONE_FIRST).message


@pytest.mark.memory
def test_a_fence_on_the_newest_commit_fails_the_lineage_clause() -> None:
    caught_only_by(
        run_family(FencesOnTheNewestCommit),
        "fencing.fence_follows_the_lineage",
        "a save expecting the parent (committed last, but continued by the child) was stored",
    )


@pytest.mark.memory
def test_a_lost_answer_read_back_as_inserted_fails_the_superseded_clause() -> None:
    caught_only_by(
        run_family(LostAnswerReadBackAsInserted),
        "fencing.superseded_resave_is_stale",
        "it must raise StaleWriterError",
    )


@pytest.mark.memory
def test_a_storage_without_fencing_skips_the_family() -> None:
    backend = run_family(WithoutFencing)
    assert {r.outcome for r in backend.results} == {Outcome.SKIPPED}
    assert all("fencing" in r.message for r in backend.results)


def test_the_fencing_double_passes_the_fencing_family() -> None:
    # The mutants above each break one step of this correct fence.
    backend = run_family(FencingDouble)
    assert not failed(backend), [r.message for r in backend.failures]
    assert all(r.outcome is Outcome.PASSED for r in backend.results)
