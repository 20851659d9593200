"""A fenced save makes the same write as a plain save (docs/backends.md, "One write for a save"):
on the memory and SQLite backends and the worked example, both primitives reach one function, so
what a save stores is written in one place per backend. Each test counts the calls of that
function through plain, fenced, refused and repeated saves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from examples.dict_storage import FencedDictBackend
from storages import StaleWriterError, WorkflowCheckpoint
from storages.backend import CheckpointRecord, FenceCheck, InsertResult
from storages.engine import CheckpointStore
from storages.memory import MemoryBackend
from storages.sqlite import SQLiteCheckpointStorage, commit


def _checkpoint(name: str, previous: str | None = None) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        "wf",
        "sig",
        checkpoint_id=name,
        previous_checkpoint_id=previous,
        timestamp="2026-01-01T00:00:00+00:00",
    )


def _counting(calls: list[str], function: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any) -> Any:
        calls.append(function.__name__)
        return function(*args)

    return counted


async def _saves(storage: CheckpointStore[Any], calls: list[str]) -> None:
    """A plain save and a fenced save each reach the write once; a refused fenced save (a stale
    writer) never does; a fenced re-save of the latest (a retry) writes nothing."""
    await storage.save(_checkpoint("c1"))
    assert len(calls) == 1
    await storage.save(_checkpoint("c2", "c1"), expected_latest_id="c1")
    assert len(calls) == 2
    with pytest.raises(StaleWriterError):
        await storage.save(_checkpoint("c3", "c1"), expected_latest_id="c1")
    assert len(calls) == 2
    assert await storage.save(_checkpoint("c2", "c1"), expected_latest_id="c1") == "c2"
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["c1", "c2"]
    await storage.aclose()


def test_after_insert_is_none_for_a_write_and_the_verdict_otherwise() -> None:
    assert FenceCheck.after_insert("c1", InsertResult.INSERTED) is None
    for verdict in (InsertResult.SAME_BODY, InsertResult.DIFFERENT_BODY):
        assert FenceCheck.after_insert("c1", verdict) == FenceCheck("c1", verdict)


class CountedMemoryBackend(MemoryBackend):
    calls: list[str]

    def _insert_locked(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        self.calls.append("write")
        return super()._insert_locked(records)


@pytest.mark.memory
async def test_memory_saves_plain_and_fenced_through_one_write() -> None:
    backend = CountedMemoryBackend()
    backend.calls = []
    await _saves(CheckpointStore(backend), backend.calls)


@pytest.mark.sqlite
async def test_sqlite_saves_plain_and_fenced_through_one_write(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(commit, "insert_or_compare", _counting(calls, commit.insert_or_compare))
    await _saves(SQLiteCheckpointStorage(tmp_path / "one-write.db"), calls)
    assert set(calls) == {"insert_or_compare"}


class CountedDictBackend(FencedDictBackend):
    calls: list[str]

    def _insert(self, record: CheckpointRecord) -> InsertResult:
        self.calls.append("write")
        return super()._insert(record)


@pytest.mark.memory
async def test_the_worked_example_saves_plain_and_fenced_through_one_write() -> None:
    backend = CountedDictBackend()
    backend.calls = []
    await _saves(CheckpointStore(backend), backend.calls)
