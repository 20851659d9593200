"""The in-memory backend: encoded bodies in process memory.

Bodies are stored encoded, so every read builds a fresh object (copy isolation) and a checkpoint
that cannot be encoded fails at save time, exactly as on a persistent backend. Latest is O(1) in
the history: each workflow's ids sit in an insertion-ordered dict, whose last key is the newest
commit, and a map from each previous id to the checkpoints naming it resolves that commit to the
tip of its lineage (docs/contract.md, "Latest").
A lock guards the shared maps, so handles may be used from several threads and event loops;
every primitive takes it once, which makes each one atomic.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Self

from ..backend import (
    RIVALS_LIMIT,
    Backend,
    CheckedIds,
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    nested_id_conflict,
)
from ..contract import Capability, CheckpointID, CheckpointInfo
from ..errors import NestedCheckpointDeletionError


@dataclass(slots=True)
class _Entry:
    record: CheckpointRecord
    sequence: int
    children: list[CheckpointID] = field(default_factory=list)
    stored: StoredBody | None = None
    """What reads return, once built (see _stored); reset when the body is overwritten."""
    saved_digest: str | None = None
    """After raw access overwrote the body: the digest of the body that was saved, which a
    re-save is compared with."""


@dataclass(slots=True)
class _Workflow:
    next_sequence: int = 1
    # id -> entry, in commit order; dicts keep insertion order and delete from the middle in O(1).
    # Top-level and nested records are kept apart so latest stays O(1) for both kinds of name.
    entries: dict[CheckpointID, _Entry] = field(default_factory=dict)
    nested: dict[CheckpointID, _Entry] = field(default_factory=dict)
    successors: dict[tuple[CheckpointID, str], dict[CheckpointID, _Entry]] = field(default_factory=dict)
    """(previous id, graph signature) -> the top-level entries naming that previous id with that
    signature, in commit order: what supersedes a checkpoint (its parent may not be stored yet)."""

    def __bool__(self) -> bool:
        return bool(self.entries)

    def add_top(self, entry: _Entry) -> None:
        record = entry.record
        self.entries[record.checkpoint_id] = entry
        previous = record.previous_checkpoint_id
        if previous is not None:
            key = (previous, record.graph_signature_hash)
            successors = self.successors.get(key)
            if successors is None:
                self.successors[key] = {record.checkpoint_id: entry}
            else:
                successors[record.checkpoint_id] = entry

    def drop_top(self, record: CheckpointRecord) -> None:
        del self.entries[record.checkpoint_id]
        previous = record.previous_checkpoint_id
        if previous is not None:
            key = (previous, record.graph_signature_hash)
            successors = self.successors[key]
            del successors[record.checkpoint_id]
            if not successors:
                del self.successors[key]

    def rivals(self, head: _Entry) -> list[_Entry]:
        """The head's rivals (storages.backend.rivals_of), in commit order."""
        record = head.record
        if record.previous_checkpoint_id is None:
            return self._roots_before(head)
        siblings = self.successors.get((record.previous_checkpoint_id, record.graph_signature_hash))
        if siblings is None or len(siblings) < 2:
            return []
        rivals = [entry for entry in siblings.values() if entry is not head and self._is_leaf(entry)]
        return rivals[-RIVALS_LIMIT:]

    def _roots_before(self, head: _Entry) -> list[_Entry]:
        """The leaf roots of the head's signature committed right before it, in commit order."""
        signature = head.record.graph_signature_hash
        before = reversed(self.entries.values())
        for entry in before:  # a root head is the newest of its signature: few entries to pass
            if entry is head:
                break
        roots: list[_Entry] = []
        for entry in before:
            record = entry.record
            if (
                record.previous_checkpoint_id is not None
                or record.graph_signature_hash != signature
                or not self._is_leaf(entry)
                or len(roots) == RIVALS_LIMIT
            ):
                break
            roots.append(entry)
        return roots[::-1]

    def _is_leaf(self, entry: _Entry) -> bool:
        return (entry.record.checkpoint_id, entry.record.graph_signature_hash) not in self.successors

    def latest(self, graph_signature_hash: str | None) -> _Entry | None:
        """The head (docs/contract.md, "Latest"): the newest commit, then while a stored
        checkpoint of its signature names it as previous, the newest such one."""
        newest = None
        for entry in reversed(self.entries.values()):
            if graph_signature_hash is None or entry.record.graph_signature_hash == graph_signature_hash:
                newest = entry
                break
        if newest is None or not self.successors:
            return newest
        visited = {newest.record.checkpoint_id}
        while True:
            record = newest.record
            successors = self.successors.get((record.checkpoint_id, record.graph_signature_hash))
            if successors is None:
                return newest
            following = next(
                (e for e in reversed(successors.values()) if e.record.checkpoint_id not in visited), None
            )
            if following is None:
                return newest  # every successor already visited: a cycle of previous ids ends here
            newest = following
            visited.add(following.record.checkpoint_id)


@dataclass(slots=True)
class MemoryStore:
    """The maps every handle on one in-memory store shares."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    by_id: dict[CheckpointID, _Entry] = field(default_factory=dict)
    workflows: dict[str, _Workflow] = field(default_factory=dict)
    tombstones: dict[CheckpointID, str] = field(default_factory=dict)
    """Pruned id -> the workflow it was pruned from."""


class MemoryBackend(Backend):
    """Checkpoints in this process's memory. Handles from :meth:`new_handle` share one store."""

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,
            Capability.ANCESTRY,
            Capability.NESTED,
            Capability.PRUNE,
            Capability.LIST_WORKFLOWS,
            Capability.RAW_ACCESS,
            Capability.INSPECT,
            Capability.PENDING_WRITES,
            Capability.SHARED,
            Capability.FENCING,
        }
    )

    orders_inserts = True  # every insert runs whole under the lock, before its first await

    def __init__(self, store: MemoryStore | None = None) -> None:
        """``store``: share another backend's maps (what new_handle does); None: a fresh store."""
        self._store = store if store is not None else MemoryStore()
        self.general_path = False
        """A test hook (docs/backends.md, "One path per operation"): True lists ids by the general
        path, so a test can hold the copy of the keys to it."""

    @property
    def store(self) -> MemoryStore:
        """The maps every handle on this store shares. A test hook (docs/backends.md): tests that
        must break the store's invariants behind its back reach them here."""
        return self._store

    def describe(self) -> str:
        return "memory://"

    def new_handle(self) -> Self:
        return type(self)(self._store)  # every handle shares this process's store

    # ------------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self._store.lock:
            return self._insert_locked(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        store = self._store
        with store.lock:
            workflow = store.workflows.get(records[0].workflow_name)
            tip = None if workflow is None else workflow.latest(None)
            latest = None if tip is None else tip.record.checkpoint_id
            # An id already stored goes on to the write, which compares it and writes nothing:
            # a retry of a save that won is told apart from a stale writer whatever the fence.
            if latest != expected_latest_id and records[0].checkpoint_id not in store.by_id:
                return FenceCheck(latest, None)
            return FenceCheck.after_insert(latest, self._insert_locked(records))

    def _insert_locked(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        """The one write of a save, plain or fenced (lock held): an id stored is compared, else
        the family is written."""
        existing = self._store.by_id.get(records[0].checkpoint_id)
        if existing is not None:
            return _compared(existing, records[0])
        self._write_family(records)
        return InsertResult.INSERTED

    def _write_family(self, records: Sequence[CheckpointRecord]) -> None:
        """Insert a family whose top id is absent (lock held); a taken nested id writes nothing."""
        store = self._store
        for record in records[1:]:
            if record.checkpoint_id in store.by_id:
                raise nested_id_conflict(records, record.checkpoint_id)
        for record in records:
            self._add(record)

    def _add(self, record: CheckpointRecord) -> None:
        """Insert one record whose id is absent, at its workflow's next sequence (lock held)."""
        store = self._store
        workflow = store.workflows.get(record.workflow_name)
        if workflow is None:
            workflow = store.workflows[record.workflow_name] = _Workflow()
        entry = _Entry(record, workflow.next_sequence)
        workflow.next_sequence += 1
        if record.nested:
            workflow.nested[record.checkpoint_id] = entry
        else:
            workflow.add_top(entry)
        store.by_id[record.checkpoint_id] = entry
        if record.container_id is not None:
            store.by_id[record.container_id].children.append(record.checkpoint_id)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        store = self._store
        with store.lock:
            entry = store.by_id.get(checkpoint_id)
            if entry is None:
                return False
            if entry.record.container_id is not None:
                raise NestedCheckpointDeletionError(checkpoint_id, entry.record.container_id)
            self._drop_family(entry)
            # The workflow (and its sequence counter) is kept even when empty: a later save must
            # still get a higher sequence than anything saved before.
        return True

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        store = self._store
        with store.lock:
            entry = store.by_id.get(checkpoint_id)
            if entry is None:
                return False
            old = entry.record
            # The digest of what was saved is kept, so a re-save still compares with that.
            entry.record = old.replaced(body=body)
            if entry.saved_digest is None:
                entry.saved_digest = old.digest  # a keyed record's is its MAC's
            entry.stored = None
        return True

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        store = self._store
        with store.lock:
            workflow = store.workflows.get(workflow_name)
            if workflow is None:
                return 0
            doomed = _pruned(workflow, keep_last)
            for entry in doomed:
                for dropped in self._drop_family(entry):
                    store.tombstones[dropped] = workflow_name
        return len(doomed)

    async def delete_workflow(self, workflow_name: str) -> int:
        store = self._store
        with store.lock:
            workflow = store.workflows.get(workflow_name)
            entries = list(workflow.entries.values()) if workflow is not None else []
            for entry in entries:
                self._drop_family(entry)
            for pruned in [i for i, name in store.tombstones.items() if name == workflow_name]:
                del store.tombstones[pruned]
        return len(entries)

    # ------------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        entry = self._store.by_id.get(checkpoint_id)
        return None if entry is None else _stored(entry)

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        store = self._store
        with store.lock:
            return {
                entry.record.checkpoint_id: entry.record.body
                for container_id in checkpoint_ids
                if (container := store.by_id.get(container_id)) is not None
                for entry in self._descendants(container)
            }

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        with self._store.lock:
            workflow = self._store.workflows.get(workflow_name)
            head = None if workflow is None else workflow.latest(graph_signature_hash)
            if head is None:
                return None
            assert workflow is not None
            rivals = workflow.rivals(head)
            stored = _stored(head)
            return replace(stored, rivals=[_stored(rival) for rival in rivals]) if rivals else stored

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [
            _stored(entry) for entry in self._entries(workflow_name, graph_signature_hash, include_nested)
        ]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        # The one choice between list_ids' two paths (docs/backends.md, "One path per operation"):
        # the ids of every top-level entry are the workflow's keys, in commit order, so one C copy
        # of them replaces the general path's Python step per entry (3.86x fewer instructions at
        # 1,000 checkpoints).
        if graph_signature_hash is None and not include_nested and not self.general_path:
            with self._store.lock:
                workflow = self._store.workflows.get(workflow_name)
                return CheckedIds() if workflow is None else CheckedIds(workflow.entries)
        return CheckedIds(
            entry.record.checkpoint_id
            for entry in self._entries(workflow_name, graph_signature_hash, include_nested)
        )

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        store = self._store
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        with store.lock:
            current: CheckpointID | None = checkpoint_id
            while current is not None and current not in links and len(links) < max_depth:
                entry = store.by_id.get(current)
                if entry is None:
                    if current in store.tombstones:
                        tombstones.add(current)
                    break
                links[current] = entry.record.previous_checkpoint_id
                if with_bodies:
                    bodies[current] = entry.record.body
                    bodies.update((e.record.checkpoint_id, e.record.body) for e in self._descendants(entry))
                current = entry.record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        with self._store.lock:
            entry = self._store.by_id.get(checkpoint_id)
            return None if entry is None else list(entry.children)

    async def workflow_names(self) -> list[str]:
        with self._store.lock:
            return [name for name, workflow in self._store.workflows.items() if workflow]

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        with self._store.lock:
            entry = self._store.by_id.get(checkpoint_id)
            return None if entry is None else entry.record.info(entry.sequence)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        with self._store.lock:
            return [
                entry.record.info(entry.sequence)
                for entry in self._store.by_id.values()
                if workflow_name is None or entry.record.workflow_name == workflow_name
            ]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        with self._store.lock:
            return [
                pruned
                for pruned, name in self._store.tombstones.items()
                if workflow_name is None or name == workflow_name
            ]

    # ------------------------------------------------------------------ machinery (lock held)

    def _entries(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[_Entry]:
        with self._store.lock:
            workflow = self._store.workflows.get(workflow_name)
            if workflow is None:
                return []
            entries = list(workflow.entries.values())
            if include_nested and workflow.nested:
                entries = sorted([*entries, *workflow.nested.values()], key=lambda entry: entry.sequence)
            return [
                entry
                for entry in entries
                if graph_signature_hash is None or entry.record.graph_signature_hash == graph_signature_hash
            ]

    def _descendants(self, entry: _Entry) -> list[_Entry]:
        by_id = self._store.by_id
        found: list[_Entry] = []
        pending = list(entry.children)
        while pending:
            child = by_id.get(pending.pop())
            if child is not None:
                found.append(child)
                pending.extend(child.children)
        return found

    def _drop_family(self, entry: _Entry) -> list[CheckpointID]:
        """Remove a top-level entry and everything nested in it; returns the removed ids."""
        store = self._store
        dropped: list[CheckpointID] = []
        for member in [entry, *self._descendants(entry)]:
            record = member.record
            del store.by_id[record.checkpoint_id]
            workflow = store.workflows[record.workflow_name]
            if record.nested:
                del workflow.nested[record.checkpoint_id]
            else:
                workflow.drop_top(record)
            dropped.append(record.checkpoint_id)
        return dropped


def _pruned(workflow: _Workflow, keep_last: int) -> list[_Entry]:
    """What prune(keep_last) deletes (storages.backend.pruned_records): all but the head, its
    rivals and the ``keep_last - 1`` other checkpoints committed last (with ``keep_last=0``,
    everything)."""
    if len(workflow.entries) <= keep_last:
        return []
    if keep_last <= 0:
        return list(workflow.entries.values())
    head = workflow.latest(None)
    protected = set() if head is None else {id(head), *(id(rival) for rival in workflow.rivals(head))}
    others = [entry for entry in workflow.entries.values() if id(entry) not in protected]
    return others[: max(0, len(others) - (keep_last - 1))]


def _compared(stored: _Entry, incoming: CheckpointRecord) -> InsertResult:
    """Whether an id already stored holds ``incoming``'s body: compared byte for byte (a keyed
    body's seal holds its MAC), or by the digest of what was saved once raw access overwrote it."""
    if stored.saved_digest is not None:
        same = stored.saved_digest == incoming.digest
    else:
        same = stored.record.body == incoming.body
    return InsertResult.SAME_BODY if same else InsertResult.DIFFERENT_BODY


def _stored(entry: _Entry) -> StoredBody:
    """The entry's body as reads return it, built on its first read and kept: every part of it
    is immutable, and reads outnumber saves."""
    stored = entry.stored
    if stored is None:
        record = entry.record
        stored = entry.stored = StoredBody(record.checkpoint_id, record.body, entry=record.index_entry())
    return stored


__all__ = ["MemoryBackend", "MemoryStore"]
