"""In-memory storage: encoded bodies in process memory.

Bodies are stored encoded, so every read builds a fresh object (copy isolation) and a checkpoint
that cannot be encoded fails at save time, exactly as on a persistent backend. Latest is O(1):
each workflow's ids sit in an insertion-ordered dict, whose last key is the newest commit.
A lock guards the shared maps, so handles may be used from several threads and event loops;
every primitive takes it once, which makes each one atomic.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from typing_extensions import Self

from .base import (
    BaseCheckpointStorage,
    CheckpointRecord,
    FenceCheck,
    StoredBody,
    WalkRecords,
    body_digest,
    nested_id_conflict,
)
from .codec import CheckpointCodec, TypeRef
from .contract import Capability, CheckpointID, CheckpointInfo
from .errors import NestedCheckpointDeletionError, StorageConfigurationError
from .integrity import IntegrityKeyInput
from .redaction import redact_url

URL_OPTIONS: tuple[str, ...] = ()
"""Query options ``memory://`` takes besides the common ones (see ``storages.urls``)."""


@dataclass(slots=True)
class _Entry:
    record: CheckpointRecord
    sequence: int
    children: list[CheckpointID] = field(default_factory=list)
    stored: StoredBody | None = None
    """What reads return, once built (see _stored); reset when the body is overwritten."""


@dataclass(slots=True)
class _Workflow:
    next_sequence: int = 1
    # id -> entry, in commit order; dicts keep insertion order and delete from the middle in O(1).
    # Top-level and nested records are kept apart so latest stays O(1) for both kinds of name.
    entries: dict[CheckpointID, _Entry] = field(default_factory=dict)
    nested: dict[CheckpointID, _Entry] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.entries)


@dataclass(slots=True)
class _MemoryStore:
    lock: threading.Lock = field(default_factory=threading.Lock)
    by_id: dict[CheckpointID, _Entry] = field(default_factory=dict)
    workflows: dict[str, _Workflow] = field(default_factory=dict)
    tombstones: dict[CheckpointID, str] = field(default_factory=dict)
    """Pruned id -> the workflow it was pruned from."""


class InMemoryCheckpointStorage(BaseCheckpointStorage):
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
    _index_holds_checked_ids = True  # only this process's checked saves put ids in the store

    def __init__(
        self,
        *,
        codec: CheckpointCodec | None = None,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
        _store: _MemoryStore | None = None,
    ) -> None:
        super().__init__(
            codec=codec,
            allowed_checkpoint_types=allowed_checkpoint_types,
            allowed_modules=allowed_modules,
            integrity_key=integrity_key,
        )
        self._store = _store if _store is not None else _MemoryStore()

    @classmethod
    def from_url(cls, url: str, *, codec: CheckpointCodec | None = None) -> Self:
        """``memory://``: a fresh store of its own; it names no host and no path."""
        from .urls import allowance_options, parse_url_options

        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme.lower() != "memory":
            raise StorageConfigurationError(f"Not a memory URL: {url!r}; expected memory://")
        if parts.netloc or parts.path or parts.fragment:
            raise StorageConfigurationError(
                f"memory URL {redact_url(url)!r} names a host or path; an in-memory store is this "
                "process's memory: use memory:// (handles share a store through new_handle())"
            )
        options = parse_url_options(url, parts.query, URL_OPTIONS, what="memory")
        return cls(
            codec=codec,
            **allowance_options(options),
        )

    _reads_held_bytes = True
    # Reads hand out the bytes objects the store holds (never copies), so a keyed handle reading
    # a record again skips a second MAC over the same immutable object (engine/sealing.py).

    def describe(self) -> str:
        return "memory://"

    @classmethod
    def _default_codec(cls) -> CheckpointCodec:
        # The bytes never leave this process: a type met at save is trusted for this store's reads,
        # as MAF's own in-memory storage keeps any object.
        return CheckpointCodec(trust_saved_types=True)

    def _handle_overrides(self) -> Mapping[str, object]:
        return {"_store": self._store}  # new_handle(): every handle shares this process's store

    def _plain_digest(self, body: bytes) -> str:
        # Unkeyed records are kept without a digest: an idempotent re-save is recognised by
        # comparing bodies (_digest_to_compare), which costs a fraction of hashing every save.
        return ""

    # ------------------------------------------------------------------ writes

    async def _insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        store = self._store
        with store.lock:
            workflow = store.workflows.get(records[0].workflow_name)
            latest = None if workflow is None else next(reversed(workflow.entries), None)
            existing = store.by_id.get(records[0].checkpoint_id)
            if existing is not None:
                return FenceCheck(latest, _digest_to_compare(existing.record, records[0]))
            if latest != expected_latest_id:
                return FenceCheck(latest, None)
            self._write_family(records)
        return None

    async def _insert(self, record: CheckpointRecord) -> str | None:
        # One record (every save without embedded checkpoints, every write batch): no family to
        # check, and no second coroutine, which the default's forwarding to _insert_family costs.
        store = self._store
        checkpoint_id = record.checkpoint_id
        with store.lock:
            existing = store.by_id.get(checkpoint_id)
            if existing is not None:
                return _digest_to_compare(existing.record, record)
            if record.container_id is not None:
                self._add(record)  # a nested record (a caller's own family of one): _add links it
                return None
            # _add's work for a top-level record, in line: every save and write batch comes here.
            workflow = store.workflows.get(record.workflow_name)
            if workflow is None:
                workflow = store.workflows[record.workflow_name] = _Workflow()
            entry = _Entry(record, workflow.next_sequence, [])
            workflow.next_sequence += 1
            workflow.entries[checkpoint_id] = entry
            store.by_id[checkpoint_id] = entry
        return None

    async def _insert_family(self, records: Sequence[CheckpointRecord]) -> str | None:
        store = self._store
        with store.lock:
            existing = store.by_id.get(records[0].checkpoint_id)
            if existing is not None:
                return _digest_to_compare(existing.record, records[0])
            self._write_family(records)
        return None

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
        (workflow.nested if record.nested else workflow.entries)[record.checkpoint_id] = entry
        store.by_id[record.checkpoint_id] = entry
        if record.container_id is not None:
            store.by_id[record.container_id].children.append(record.checkpoint_id)

    async def _remove(self, checkpoint_id: CheckpointID) -> bool:
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

    async def _overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        store = self._store
        with store.lock:
            entry = store.by_id.get(checkpoint_id)
            if entry is None:
                return False
            old = entry.record
            # The digest of what was saved is kept, so a re-save still compares with that.
            entry.record = CheckpointRecord(
                old.checkpoint_id,
                old.workflow_name,
                old.previous_checkpoint_id,
                old.graph_signature_hash,
                body,
                old.digest or body_digest(old.body),
                old.container_id,
                old.root_id,
                old.position,
            )
            entry.stored = None
        return True

    async def _prune(self, workflow_name: str, keep_last: int) -> int:
        store = self._store
        with store.lock:
            workflow = store.workflows.get(workflow_name)
            if workflow is None:
                return 0
            doomed = list(workflow.entries.values())
            doomed = doomed[: max(0, len(doomed) - keep_last)]
            for entry in doomed:
                for dropped in self._drop_family(entry):
                    store.tombstones[dropped] = workflow_name
        return len(doomed)

    async def _delete_workflow(self, workflow_name: str) -> int:
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

    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        entry = self._store.by_id.get(checkpoint_id)
        return None if entry is None else entry.record.body

    async def _load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        entry = self._store.by_id.get(checkpoint_id)
        return None if entry is None else _stored(entry)

    async def _nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        store = self._store
        with store.lock:
            return {
                entry.record.checkpoint_id: entry.record.body
                for container_id in checkpoint_ids
                if (container := store.by_id.get(container_id)) is not None
                for entry in self._descendants(container)
            }

    async def _latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        if workflow_name not in self._store.workflows:
            return None  # one atomic look, as the lock's would be: nothing to iterate over
        with self._store.lock:
            workflow = self._store.workflows.get(workflow_name)
            if workflow is None:
                return None
            for entry in reversed(workflow.entries.values()):
                if graph_signature_hash is None or entry.record.graph_signature_hash == graph_signature_hash:
                    return _stored(entry)
        return None

    async def _list(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [
            _stored(entry) for entry in self._entries(workflow_name, graph_signature_hash, include_nested)
        ]

    async def _list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        if graph_signature_hash is None and not include_nested:
            with self._store.lock:  # the keys are the ids, in commit order: one C copy
                workflow = self._store.workflows.get(workflow_name)
                return [] if workflow is None else list(workflow.entries)
        return [
            entry.record.checkpoint_id
            for entry in self._entries(workflow_name, graph_signature_hash, include_nested)
        ]

    async def _walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
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

    async def _nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        with self._store.lock:
            entry = self._store.by_id.get(checkpoint_id)
            return None if entry is None else list(entry.children)

    async def _workflow_names(self) -> list[str]:
        with self._store.lock:
            return [name for name, workflow in self._store.workflows.items() if workflow]

    async def _info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        with self._store.lock:
            entry = self._store.by_id.get(checkpoint_id)
            return None if entry is None else entry.record.info(entry.sequence)

    async def _records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        with self._store.lock:
            return [
                entry.record.info(entry.sequence)
                for entry in self._store.by_id.values()
                if workflow_name is None or entry.record.workflow_name == workflow_name
            ]

    async def _tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
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
            del (workflow.nested if record.nested else workflow.entries)[record.checkpoint_id]
            dropped.append(record.checkpoint_id)
        return dropped


_DIFFERENT = "different"
"""Equal to no digest (digests are hex): the bodies differ."""


def _digest_to_compare(stored: CheckpointRecord, incoming: CheckpointRecord) -> str:
    """What the engine compares with ``incoming.digest`` for an id already stored: the stored
    digest of keyed records; for unkeyed ones (stored without a digest), ``incoming.digest`` when
    the bodies are equal, else a value no digest equals. A body overwritten through raw access
    is compared by the digest of what was saved."""
    if incoming.digest:
        return stored.digest
    same = stored.digest == body_digest(incoming.body) if stored.digest else stored.body == incoming.body
    return incoming.digest if same else _DIFFERENT


def _stored(entry: _Entry) -> StoredBody:
    """The entry's body as reads return it, built on its first read and kept: every part of it
    is immutable, and reads outnumber saves."""
    stored = entry.stored
    if stored is None:
        record = entry.record
        stored = entry.stored = StoredBody(record.checkpoint_id, record.body, entry=record.index_entry())
    return stored


__all__ = ["InMemoryCheckpointStorage"]
