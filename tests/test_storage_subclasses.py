"""Authors extend the built-in storages by subclassing: a storage class that keeps state of its
own, a storage class over a subclass of its backend, a backend whose time to live is a setting
(docs/backends.md, "Extending a built-in storage")."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from storages import StorageClosedError, WorkflowCheckpoint
from storages.backend import CheckpointRecord, InsertResult
from storages.memory import InMemoryCheckpointStorage
from storages.memory.backend import MemoryBackend
from storages.sqlite import SQLiteCheckpointStorage
from storages.sqlite.backend import SQLiteBackend


def make_checkpoint(workflow_name: str, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name=workflow_name, graph_signature_hash="sig", **fields)


class CountingMemory(InMemoryCheckpointStorage):
    """A storage class with settings of its own, set in its ``__init__``."""

    def __init__(self, *, label: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.label = label
        self.saved: list[str] = []

    async def save(self, checkpoint: Any, **kwargs: Any) -> str:
        checkpoint_id = await super().save(checkpoint, **kwargs)
        self.saved.append(checkpoint_id)
        return checkpoint_id


async def test_a_new_handle_keeps_what_the_subclass_set_and_shares_no_engine_state() -> None:
    storage = CountingMemory(label="billing")
    handle = storage.new_handle()
    assert type(handle) is CountingMemory
    assert handle.label == "billing"
    await handle.save(make_checkpoint("wf"))
    assert handle.saved == storage.saved != []
    await storage.aclose()
    with pytest.raises(StorageClosedError):
        await storage.get_latest(workflow_name="wf")
    assert await handle.get_latest(workflow_name="wf") is not None


async def test_a_keyed_handle_of_a_subclass_keeps_what_the_subclass_set() -> None:
    storage = CountingMemory(label="billing")
    keyed = storage.with_integrity_key(b"k" * 32)
    assert keyed.label == "billing"
    assert keyed.integrity_enabled
    assert not storage.integrity_enabled


class CountingSQLiteBackend(SQLiteBackend):
    inserted: ClassVar[list[str]] = []

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        type(self).inserted.extend(record.checkpoint_id for record in records)
        return await super().insert(records)


class CountingSQLite(SQLiteCheckpointStorage):
    backend_class = CountingSQLiteBackend


async def test_a_storage_class_builds_the_backend_subclass_it_names(tmp_path: Path) -> None:
    CountingSQLiteBackend.inserted = []
    storage = CountingSQLite.from_url(f"sqlite:///{tmp_path / 'counted.db'}")
    try:
        assert type(storage.backend) is CountingSQLiteBackend
        first = await storage.save(make_checkpoint("wf"))
        handle = storage.new_handle()
        try:
            assert type(handle.backend) is CountingSQLiteBackend
            second = await handle.save(make_checkpoint("wf", previous_checkpoint_id=first))
        finally:
            await handle.aclose()
        assert CountingSQLiteBackend.inserted == [first, second]
    finally:
        await storage.aclose()


class SettingMemoryBackend(MemoryBackend):
    """A backend whose time to live is a setting of its own, assigned in its ``__init__``."""

    def __init__(self, ttl: float) -> None:
        super().__init__()
        self.ttl = ttl


def test_a_backend_sets_its_time_to_live_in_its_init() -> None:
    assert SettingMemoryBackend(30.0).ttl == 30.0
    assert MemoryBackend().ttl is None
