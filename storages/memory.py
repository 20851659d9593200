"""In-memory storage: encoded bodies in process memory.

Bodies are stored encoded, so every read builds a fresh object (copy isolation) and a checkpoint
that cannot be encoded fails at save time, exactly as on a persistent backend. Latest is O(1):
each workflow's ids sit in an insertion-ordered dict, whose last key is the newest commit.
A lock guards the shared maps, so handles may be used from several threads and event loops.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from typing_extensions import Self

from .base import BaseCheckpointStorage, CheckpointRecord, StoredBody
from .codec import CheckpointCodec
from .contract import Capability, CheckpointID


@dataclass(slots=True)
class _Entry:
    record: CheckpointRecord
    sequence: int


@dataclass(slots=True)
class _Workflow:
    next_sequence: int = 1
    # id -> entry, in commit order; dicts keep insertion order and delete from the middle in O(1).
    entries: dict[CheckpointID, _Entry] = field(default_factory=dict)


@dataclass(slots=True)
class _MemoryStore:
    lock: threading.Lock = field(default_factory=threading.Lock)
    by_id: dict[CheckpointID, _Entry] = field(default_factory=dict)
    workflows: dict[str, _Workflow] = field(default_factory=dict)


class InMemoryCheckpointStorage(BaseCheckpointStorage):
    """Checkpoints in this process's memory. Handles from :meth:`new_handle` share one store."""

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,
            Capability.LIST_WORKFLOWS,
            Capability.RAW_ACCESS,
            Capability.SHARED,
        }
    )

    def __init__(self, *, codec: CheckpointCodec | None = None, _store: _MemoryStore | None = None) -> None:
        super().__init__(codec=codec)
        self._store = _store if _store is not None else _MemoryStore()

    def describe(self) -> str:
        return "memory://"

    def new_handle(self) -> Self:
        return type(self)(codec=self._codec, _store=self._store)

    async def _insert(self, record: CheckpointRecord) -> str | None:
        store = self._store
        with store.lock:
            existing = store.by_id.get(record.checkpoint_id)
            if existing is not None:
                return existing.record.digest
            workflow = store.workflows.get(record.workflow_name)
            if workflow is None:
                workflow = store.workflows[record.workflow_name] = _Workflow()
            entry = _Entry(record, workflow.next_sequence)
            workflow.next_sequence += 1
            workflow.entries[record.checkpoint_id] = entry
            store.by_id[record.checkpoint_id] = entry
        return None

    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        entry = self._store.by_id.get(checkpoint_id)
        return None if entry is None else entry.record.body

    async def _latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        with self._store.lock:
            workflow = self._store.workflows.get(workflow_name)
            if workflow is None:
                return None
            for entry in reversed(workflow.entries.values()):
                if graph_signature_hash is None or entry.record.graph_signature_hash == graph_signature_hash:
                    return StoredBody(entry.record.checkpoint_id, entry.record.body)
        return None

    async def _list(self, workflow_name: str, graph_signature_hash: str | None) -> Sequence[StoredBody]:
        return [
            StoredBody(entry.record.checkpoint_id, entry.record.body)
            for entry in self._entries(workflow_name, graph_signature_hash)
        ]

    async def _list_ids(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointID]:
        return [entry.record.checkpoint_id for entry in self._entries(workflow_name, graph_signature_hash)]

    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
        store = self._store
        with store.lock:
            entry = store.by_id.pop(checkpoint_id, None)
            if entry is None:
                return False
            workflow = store.workflows[entry.record.workflow_name]
            del workflow.entries[checkpoint_id]
            # The workflow (and its sequence counter) is kept even when empty: a later save must
            # still get a higher sequence than anything saved before.
        return True

    async def _overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        store = self._store
        with store.lock:
            entry = store.by_id.get(checkpoint_id)
            if entry is None:
                return False
            old = entry.record
            entry.record = CheckpointRecord(
                old.checkpoint_id,
                old.workflow_name,
                old.previous_checkpoint_id,
                old.graph_signature_hash,
                body,
                old.digest,
            )
        return True

    async def _workflow_names(self) -> list[str]:
        with self._store.lock:
            return [name for name, workflow in self._store.workflows.items() if workflow.entries]

    def _entries(self, workflow_name: str, graph_signature_hash: str | None) -> list[_Entry]:
        with self._store.lock:
            workflow = self._store.workflows.get(workflow_name)
            if workflow is None:
                return []
            return [
                entry
                for entry in workflow.entries.values()
                if graph_signature_hash is None or entry.record.graph_signature_hash == graph_signature_hash
            ]


__all__ = ["InMemoryCheckpointStorage"]
