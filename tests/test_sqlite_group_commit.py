"""SQLite group commit without a committing task: what a save costs (hand-offs, pages written,
both load-independent) and that no caller's cancellation can strand another's save."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from bench.sqlite_counts import count_handoffs, measure
from storages import CheckpointConflictError, WorkflowCheckpoint
from storages.sqlite import SQLiteCheckpointStorage

pytestmark = pytest.mark.sqlite


def checkpoint() -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="sig")


@contextmanager
def write_lock_held(path: Path) -> Iterator[None]:
    with closing(sqlite3.connect(path, timeout=0.1, isolation_level=None)) as connection:
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            connection.execute("ROLLBACK")


async def test_a_save_costs_one_handoff_and_writes_a_bounded_number_of_pages(tmp_path: Path) -> None:
    counts = await measure(tmp_path)
    assert counts["ours"]["handoffs"] == 1.0
    assert counts["raw"]["handoffs"] == 1.0
    # The row (leaf and overflow page), the primary key, three secondary indexes, the sequence
    # row and the header page: a ninth page per save would be an index or a statement too many.
    assert 4 <= counts["ours"]["wal_frames"] <= 8.5
    assert counts["raw"]["wal_frames"] < counts["ours"]["wal_frames"]


async def test_a_save_runs_in_its_callers_task_and_creates_no_other(tmp_path: Path) -> None:
    async with SQLiteCheckpointStorage(tmp_path / "x.db") as storage:
        await storage.save(checkpoint())
        loop = asyncio.get_running_loop()
        created: list[object] = []
        assert loop.get_task_factory() is None

        def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Task[Any]:
            created.append(coro)
            return asyncio.Task(coro, loop=loop)

        loop.set_task_factory(counting_factory)
        try:
            await storage.save(checkpoint())
        finally:
            loop.set_task_factory(None)
        assert created == []


async def test_cancelling_the_save_that_started_a_group_strands_no_queued_save(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with SQLiteCheckpointStorage(path, busy_timeout_ms=10_000) as storage:
        await storage.list_workflows()
        first, second, third = checkpoint(), checkpoint(), checkpoint()
        connection = storage.backend.connection
        assert connection is not None
        handoffs = count_handoffs(connection)
        with write_lock_held(path):
            starter = asyncio.ensure_future(storage.save(first))
            await asyncio.sleep(0.2)  # its group of one waits in BEGIN IMMEDIATE on the thread
            queued = [asyncio.ensure_future(storage.save(item)) for item in (second, third)]
            await asyncio.sleep(0.05)
            starter.cancel()
            await asyncio.sleep(0.05)
            assert not any(save.done() for save in queued)  # still waiting for the lock
        with pytest.raises(asyncio.CancelledError):
            await starter
        assert await asyncio.wait_for(asyncio.gather(*queued), 10) == [
            second.checkpoint_id,
            third.checkpoint_id,
        ]
        # The cancelled save's group of one rolled back; the two queued saves were the next group.
        assert handoffs.puts == 2
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [
            second.checkpoint_id,
            third.checkpoint_id,
        ]


async def test_a_queued_save_cancelled_before_its_group_starts_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    async with SQLiteCheckpointStorage(path, busy_timeout_ms=10_000) as storage:
        await storage.list_workflows()
        first, dropped, kept = checkpoint(), checkpoint(), checkpoint()
        with write_lock_held(path):
            starter = asyncio.ensure_future(storage.save(first))
            await asyncio.sleep(0.2)
            cancelled = asyncio.ensure_future(storage.save(dropped))
            survivor = asyncio.ensure_future(storage.save(kept))
            await asyncio.sleep(0.05)
            cancelled.cancel()
        assert await asyncio.wait_for(starter, 10) == first.checkpoint_id
        assert await asyncio.wait_for(survivor, 10) == kept.checkpoint_id
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [
            first.checkpoint_id,
            kept.checkpoint_id,
        ]


async def test_a_group_of_one_row_saves_refuses_a_conflicting_id_alone(tmp_path: Path) -> None:
    """One-row saves in a group skip the savepoint: an id already stored must still answer its
    own save (same content: its id; other content: a conflict) and leave the others committed,
    each with the next sequence in queue order."""
    path = tmp_path / "x.db"
    async with SQLiteCheckpointStorage(path, busy_timeout_ms=10_000) as storage:
        stored = checkpoint()
        await storage.save(stored)
        first, fresh, later = checkpoint(), checkpoint(), checkpoint()
        rival = dataclasses.replace(stored, state={"other": 1})
        with write_lock_held(path):  # the first save holds the thread; the others queue as one group
            starter = asyncio.ensure_future(storage.save(first))
            await asyncio.sleep(0.2)
            queued = [asyncio.ensure_future(storage.save(item)) for item in (fresh, stored, rival, later)]
            await asyncio.sleep(0.05)
        assert await asyncio.wait_for(starter, 10) == first.checkpoint_id
        outcomes = await asyncio.wait_for(asyncio.gather(*queued, return_exceptions=True), 10)
        assert outcomes[0] == fresh.checkpoint_id
        assert outcomes[1] == stored.checkpoint_id
        assert isinstance(outcomes[2], CheckpointConflictError)
        assert outcomes[3] == later.checkpoint_id
        assert (await storage.load(stored.checkpoint_id)).state == stored.state
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [
            stored.checkpoint_id,
            first.checkpoint_id,
            fresh.checkpoint_id,
            later.checkpoint_id,
        ]
        with closing(sqlite3.connect(path)) as connection:
            sequences = [
                row[0] for row in connection.execute("SELECT sequence FROM checkpoints ORDER BY sequence")
            ]
        assert sequences == [1, 2, 3, 4]


async def test_closing_waits_for_the_groups_already_on_the_thread(tmp_path: Path) -> None:
    async with SQLiteCheckpointStorage(tmp_path / "x.db") as storage:
        await storage.list_workflows()
        saves = [asyncio.ensure_future(storage.save(checkpoint())) for _ in range(8)]
        await asyncio.sleep(0)  # every save has queued; leaving the block closes the handle
    ids = await asyncio.gather(*saves)
    async with SQLiteCheckpointStorage(tmp_path / "x.db") as reopened:
        assert await reopened.list_checkpoint_ids(workflow_name="wf") == ids


async def test_the_targets_table_reports_the_counts_next_to_the_sqlite_ratios(tmp_path: Path) -> None:
    from bench.report import _target_note

    counts = await measure(tmp_path)
    medians = {"sqlite/ours-full": 500.0, "sqlite/raw-full": 200.0, "sqlite/asyncsqlitesaver": 450.0}
    note = _target_note("sqlite_save_vs_raw_full", {"medians_us": medians, "sqlite_counts": counts})
    assert f"ours {counts['ours']['wal_frames']:.1f}" in note
    assert "hand-offs per save: ours 1, raw 1" in note
    assert "pages written" not in _target_note("sqlite_save_vs_raw_full", {"medians_us": medians})
