"""inspect at scale (issue 30): the index is read in pages, and a lineage is drawn from an index
on disk, so memory does not grow with the number of checkpoints.

Memory is counted (tracemalloc's peak of Python allocations), never timed.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import pytest

from storages import CheckpointCorruptedError, InvalidCheckpointError, WorkflowCheckpoint
from storages.contract import CheckpointID, CheckpointInfo
from storages.engine import CheckpointStore
from storages.memory import InMemoryCheckpointStorage, MemoryBackend
from storages.sqlite import SQLiteCheckpointStorage
from storages.tools.inspection import build_lineage, stream_lineage


async def _chain(storage: CheckpointStore, workflow: str, length: int) -> list[CheckpointID]:
    ids: list[CheckpointID] = []
    previous = None
    for step in range(length):
        checkpoint = WorkflowCheckpoint(
            workflow, "sig", previous_checkpoint_id=previous, iteration_count=step
        )
        previous = await storage.save(checkpoint)
        ids.append(previous)
    return ids


async def _streams_28_records_in_pages_of_7(storage: CheckpointStore) -> None:
    """Two workflows (28 records) streamed 7 at a time: list_records' entries, each once."""
    await _chain(storage, "a", 23)
    await _chain(storage, "b", 5)
    streamed = [info async for info in storage.iter_records(page_size=7)]
    listed = await storage.list_records()
    assert sorted(streamed, key=lambda info: info.checkpoint_id) == sorted(
        listed, key=lambda info: info.checkpoint_id
    )
    assert len({info.checkpoint_id for info in streamed}) == 28


@pytest.mark.sqlite
async def test_a_streamed_index_holds_every_record_once_in_pages(tmp_path: Path) -> None:
    async with SQLiteCheckpointStorage(tmp_path / "s.db") as storage:
        await _streams_28_records_in_pages_of_7(storage)
        with pytest.raises(InvalidCheckpointError, match="page_size"):
            [info async for info in storage.iter_records(page_size=0)]


@pytest.mark.postgres
async def test_postgres_streams_its_index_in_pages() -> None:
    import postgres_servers

    async with postgres_servers.schema_store() as new_handle, new_handle() as storage:
        await _streams_28_records_in_pages_of_7(storage)


async def test_a_storage_that_does_not_page_its_index_is_read_whole() -> None:
    storage = InMemoryCheckpointStorage()
    await _chain(storage, "a", 12)
    assert len([info async for info in storage.iter_records(page_size=5)]) == 12


async def test_pages_that_do_not_advance_are_corrupt_not_an_endless_read() -> None:
    class StuckPages(MemoryBackend):
        async def records_after(self, after: CheckpointID | None, limit: int) -> Sequence[CheckpointInfo]:
            everything = sorted(await self.records(None), key=lambda info: info.checkpoint_id)
            return everything[:limit]  # always the first page

    storage = CheckpointStore(StuckPages())
    await _chain(storage, "a", 6)
    with pytest.raises(CheckpointCorruptedError, match="do not advance"):
        [info async for info in storage.iter_records(page_size=2)]


async def _peak_drawing(storage: CheckpointStore, workflow: str) -> tuple[int, int]:
    """Python's peak allocation while a lineage is built and every line drawn, and the lines."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        tree = await build_lineage(storage, workflow)
        lines = 0
        async for _ in stream_lineage(storage, tree, with_fields=True):
            lines += 1
        del tree
        return tracemalloc.get_traced_memory()[1] - base, lines
    finally:
        tracemalloc.stop()


@pytest.mark.sqlite
async def test_drawing_a_lineage_of_ten_times_more_checkpoints_takes_no_more_memory(tmp_path: Path) -> None:
    """Held in dicts, the tree took about 840 bytes a checkpoint: 15 MB more for 18,000 more
    checkpoints. Read in pages into an index on disk, the peak stays within what a page of the
    index takes, whatever the store holds."""
    peaks = []
    for length in (2_000, 20_000):
        async with SQLiteCheckpointStorage(tmp_path / f"{length}.db") as storage:
            await _chain(storage, "flow", length)
            peak, lines = await _peak_drawing(storage, "flow")
        assert lines == length
        peaks.append(peak)
    small, large = peaks
    assert large < small + 1_000_000, (small, large)
