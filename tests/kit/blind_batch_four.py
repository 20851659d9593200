"""A fourth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/conformance.md's prose, examples/dict_storage.py and the public author API
could make. Three styles, each with an honest storage that passes the whole kit:

* own backends on ``storages.backend``: the worked example grown with ``prune``, ``inspect``,
  ``list_workflows`` and ``pending_writes`` (``GrownBackend``), and one persisting to a JSON file
  (``FileBackend``, ``durable``);
* wrappers delegating to the built-in in-memory storage (caches, metrics, retries, read-through,
  write-behind, tenancy, fences of their own);
* six-method MAF-style storages (only ``save``, ``load``, ``list_checkpoints``,
  ``list_checkpoint_ids``, ``delete``, ``get_latest``).

``ENTRIES`` lists them as (name, factory, description); a factory returns a
``conformance.StorageTarget``. The results of the kit as it was before this batch's clauses are
in tests/kit/blind_batch_four.md; tests/kit/test_blind_batch_four.py names the clause that catches
each defect now.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import functools
import json
import tempfile
import unicodedata
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC
from datetime import datetime as _datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from conformance import StorageTarget
from examples.dict_storage import FencedDictBackend, Tables, _stored
from storages import (
    Capability,
    CheckpointConflictError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    InMemoryCheckpointStorage,
    NestedCheckpointDeletionError,
    StaleWriterError,
    StorageClosedError,
    StorageUnavailableError,
)
from storages.backend import (
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    latest_record,
    pruned_records,
    rivals_of,
)
from storages.contract import CheckpointID, CheckpointInfo
from storages.engine import CheckpointStore

# ====================================================================== own backend: grown example


@dataclass
class GrownTables(Tables):
    """The worked example's tables plus tombstones: workflow name -> pruned ids."""

    tombstones: dict[str, set[CheckpointID]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)


class GrownBackend(FencedDictBackend):
    """The worked example grown with ``prune``, ``inspect``, ``list_workflows`` and
    ``pending_writes`` (no ``nested``: a save is one record)."""

    capabilities = FencedDictBackend.capabilities | {
        Capability.PRUNE,
        Capability.INSPECT,
        Capability.PENDING_WRITES,
    }
    tables: GrownTables

    def __init__(self, tables: GrownTables | None = None) -> None:
        super().__init__(tables if tables is not None else GrownTables())

    # ---- hooks the defects override

    def _matches(self, stored_name: str, asked_name: str) -> bool:
        return stored_name == asked_name

    def _signature_matches(self, stored: str, asked: str | None) -> bool:
        return asked is None or stored == asked

    def _key(self, checkpoint_id: CheckpointID) -> CheckpointID:
        return checkpoint_id

    def _next_sequence(self, workflow_name: str) -> int:
        sequence = self.tables.sequences.get(workflow_name, 0) + 1
        self.tables.sequences[workflow_name] = sequence
        return sequence

    def _order_key(self, sequence: int) -> Any:
        return sequence

    # ---- core

    def _insert(self, record: CheckpointRecord) -> InsertResult:
        tables = self.tables
        existing = tables.records.get(self._key(record.checkpoint_id))
        if existing is not None:
            return InsertResult.of_stored_digest(existing[1].digest, record)
        sequence = self._next_sequence(record.workflow_name)
        tables.records[self._key(record.checkpoint_id)] = (sequence, record)
        tables.names.add(record.workflow_name)
        return InsertResult.INSERTED

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        with self.tables.lock:
            found = self.tables.records.get(self._key(checkpoint_id))
        return None if found is None else _stored(found[1])

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.tables.lock:
            return self.tables.records.pop(self._key(checkpoint_id), None) is not None

    def _rows_held(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointRecord]:
        rows = [
            (sequence, record)
            for sequence, record in self.tables.records.values()
            if self._matches(record.workflow_name, workflow_name)
            and self._signature_matches(record.graph_signature_hash, graph_signature_hash)
        ]
        rows.sort(key=lambda row: self._order_key(row[0]))
        return [record for _, record in rows]

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        with self.tables.lock:
            current: CheckpointID | None = checkpoint_id
            while current is not None and current not in links and len(links) < max_depth:
                found = self.tables.records.get(self._key(current))
                if found is None:
                    if self._is_tombstone(current):
                        tombstones.add(current)
                    break
                record = found[1]
                links[current] = record.previous_checkpoint_id
                if with_bodies:
                    bodies[current] = record.body
                current = record.previous_checkpoint_id
            if current is not None and current not in links and self._is_tombstone(current):
                tombstones.add(current)
        return WalkRecords(links, bodies, frozenset(tombstones))

    def _is_tombstone(self, checkpoint_id: CheckpointID) -> bool:
        return any(checkpoint_id in ids for ids in self.tables.tombstones.values())

    # ---- prune

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.tables.lock:
            doomed = self._doomed(self._rows_held(workflow_name, None), keep_last)
            for record in doomed:
                del self.tables.records[self._key(record.checkpoint_id)]
                self.tables.tombstones.setdefault(workflow_name, set()).add(record.checkpoint_id)
            return len(doomed)

    def _doomed(self, rows: Sequence[CheckpointRecord], keep_last: int) -> list[CheckpointRecord]:
        return pruned_records(rows, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        with self.tables.lock:
            rows = self._rows_held(workflow_name, None)
            for record in rows:
                del self.tables.records[self._key(record.checkpoint_id)]
            self._drop_tombstones(workflow_name)
            return len(rows)

    def _drop_tombstones(self, workflow_name: str) -> None:
        self.tables.tombstones.pop(workflow_name, None)

    async def workflow_names(self) -> list[str]:
        with self.tables.lock:
            return sorted({record.workflow_name for _, record in self.tables.records.values()})

    # ---- inspect

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        with self.tables.lock:
            found = self.tables.records.get(self._key(checkpoint_id))
        return None if found is None else found[1].info(found[0])

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        with self.tables.lock:
            rows = sorted(self.tables.records.values(), key=lambda row: (row[1].workflow_name, row[0]))
            return [
                record.info(sequence)
                for sequence, record in rows
                if workflow_name is None or self._matches(record.workflow_name, workflow_name)
            ]

    async def tombstones(self, workflow_name: str | None) -> set[CheckpointID]:
        with self.tables.lock:
            return {
                checkpoint_id
                for name, ids in self.tables.tombstones.items()
                if workflow_name is None or name == workflow_name
                for checkpoint_id in ids
            }


class GrownStorage(CheckpointStore[GrownBackend]):
    def __init__(self, backend: GrownBackend | None = None, **options: Any) -> None:
        super().__init__(backend if backend is not None else GrownBackend(), **options)


def grown(backend_class: type[GrownBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: GrownStorage(backend_class()))

    return target


# -- defects of the grown backend


class ListIdsByPrefix(GrownBackend):
    """list_ids matches workflow names with startswith (a LIKE 'name%' in the id-only query)."""

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        with self.tables.lock:
            rows = [
                (s, r)
                for s, r in self.tables.records.values()
                if r.workflow_name.startswith(workflow_name)
                and graph_signature_hash in (None, r.graph_signature_hash)
            ]
            rows.sort(key=lambda row: row[0])
            return [r.checkpoint_id for _, r in rows]


class SignatureByPrefix(GrownBackend):
    """The signature filter is a prefix match (a LIKE 'sig%'): pending writes keep the owning
    checkpoint's id in the signature column, so one checkpoint's writes show up under another's
    whose id extends it, and a signature filter lets in longer signatures."""

    def _signature_matches(self, stored: str, asked: str | None) -> bool:
        return asked is None or stored.startswith(asked)


class SequenceAsText(GrownBackend):
    """Sequence numbers kept as strings (a key-value store's sort key), so 10 sorts before 9."""

    def _order_key(self, sequence: int) -> Any:
        return str(sequence)


class SequenceFromCount(GrownBackend):
    """The next sequence is the workflow's record count plus one: after a delete, a number is
    handed out twice."""

    def _next_sequence(self, workflow_name: str) -> int:
        return sum(1 for _, r in self.tables.records.values() if r.workflow_name == workflow_name) + 1


class IdKeyTruncated(GrownBackend):
    """Records are keyed by the first 200 characters of the id (a file-name length limit)."""

    def _key(self, checkpoint_id: CheckpointID) -> CheckpointID:
        return checkpoint_id[:200]


class ControlCharactersStripped(GrownBackend):
    """Workflow names are matched after stripping control characters (made safe for file
    names): the engine's writes log of workflow ``w`` lands in the user's workflow ``writesw``."""

    def _matches(self, stored_name: str, asked_name: str) -> bool:
        return _printable(stored_name) == _printable(asked_name)


def _printable(name: str) -> str:
    return "".join(character for character in name if unicodedata.category(character) != "Cc")


class FenceOnSignatureHead(GrownBackend):
    """insert_fenced compares the expected id with the head of the saved checkpoint's own
    signature, not with the workflow's head of any signature."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        with self.tables.lock:
            head = latest_record(self._rows_held(record.workflow_name, record.graph_signature_hash))
            latest = None if head is None else head.checkpoint_id
            if latest != expected_latest_id and record.checkpoint_id not in self.tables.records:
                return FenceCheck(latest, None)
            return FenceCheck.after_insert(latest, self._insert(record))


class LatestFollowsAnySignature(GrownBackend):
    """latest's walk to the head follows successors of any signature (the lineage lookup by
    previous id forgets the signature)."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self._rows(workflow_name, None)
        candidates = [r for r in rows if graph_signature_hash in (None, r.graph_signature_hash)]
        if not candidates:
            return None
        current, visited = candidates[-1], {candidates[-1].checkpoint_id}
        while True:
            following = [
                r
                for r in rows
                if r.previous_checkpoint_id == current.checkpoint_id and r.checkpoint_id not in visited
            ]
            if not following:
                break
            current = following[-1]
            visited.add(current.checkpoint_id)
        return replace(_stored(current), rivals=[_stored(r) for r in rivals_of(rows, current)])


class RivalsNewestFirst(GrownBackend):
    """Rivals returned newest first (a ZREVRANGE), not in ascending sequence."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        found = await super().latest(workflow_name, graph_signature_hash)
        if found is None:
            return None
        return replace(found, rivals=list(reversed(found.rivals)))


class RivalsFirstCommitted(GrownBackend):
    """At most 64 rivals, but the first 64 committed instead of the last."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self._rows(workflow_name, graph_signature_hash)
        head = latest_record(rows, graph_signature_hash)
        if head is None:
            return None
        everything = rivals_of_unbounded(rows, head)
        return replace(_stored(head), rivals=[_stored(r) for r in everything[:64]])


def rivals_of_unbounded(rows: Sequence[CheckpointRecord], head: CheckpointRecord) -> list[CheckpointRecord]:
    continued = {(r.previous_checkpoint_id, r.graph_signature_hash) for r in rows}
    if head.previous_checkpoint_id is None:
        position = next(i for i, r in enumerate(rows) if r.checkpoint_id == head.checkpoint_id)
        roots: list[CheckpointRecord] = []
        for r in reversed(rows[:position]):
            if (
                r.previous_checkpoint_id is not None
                or r.graph_signature_hash != head.graph_signature_hash
                or (r.checkpoint_id, r.graph_signature_hash) in continued
            ):
                break
            roots.append(r)
        return roots[::-1]
    return [
        r
        for r in rows
        if r.previous_checkpoint_id == head.previous_checkpoint_id
        and r.graph_signature_hash == head.graph_signature_hash
        and r.checkpoint_id != head.checkpoint_id
        and (r.checkpoint_id, r.graph_signature_hash) not in continued
    ]


class PruneNewestOnly(GrownBackend):
    """prune keeps the keep_last checkpoints committed last, not the head and its rivals."""

    def _doomed(self, rows: Sequence[CheckpointRecord], keep_last: int) -> list[CheckpointRecord]:
        return list(rows[: max(0, len(rows) - keep_last)])


class TombstonesByPrefix(GrownBackend):
    """tombstones(workflow) lists the tombstones of every workflow whose name starts with it."""

    async def tombstones(self, workflow_name: str | None) -> set[CheckpointID]:
        with self.tables.lock:
            return {
                checkpoint_id
                for name, ids in self.tables.tombstones.items()
                if workflow_name is None or name.startswith(workflow_name)
                for checkpoint_id in ids
            }


class DeleteWorkflowClearsAllTombstones(GrownBackend):
    """delete_workflow clears the store's whole tombstone table, not the workflow's."""

    def _drop_tombstones(self, workflow_name: str) -> None:
        self.tables.tombstones.clear()


class WalkStaysInWorkflow(GrownBackend):
    """walk follows previous ids only through records of the start's workflow."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        walked = await super().walk(checkpoint_id, max_depth, with_bodies=with_bodies)
        start = self.tables.records.get(checkpoint_id)
        if start is None:
            return walked
        name = start[1].workflow_name
        links: dict[CheckpointID, CheckpointID | None] = {}
        for reached, previous in walked.links.items():
            found = self.tables.records.get(reached)
            if found is None or found[1].workflow_name != name:
                break
            links[reached] = previous
        return WalkRecords(links, {k: v for k, v in walked.bodies.items() if k in links}, walked.tombstones)


class WorkflowNamesNeverForget(GrownBackend):
    """workflow_names answers from a set of names ever saved: a deleted workflow stays listed."""

    async def workflow_names(self) -> list[str]:
        with self.tables.lock:
            return sorted(self.tables.names)


class RecordsSequenceFromPosition(GrownBackend):
    """records() numbers entries by their position in the listing, not their stored sequence."""

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        entries = await super().records(workflow_name)
        return [dataclasses.replace(entry, sequence=index + 1) for index, entry in enumerate(entries)]


class OrdersInsertsButYields(GrownBackend):
    """Claims ``orders_inserts`` but yields to the loop before taking its lock (an audit log
    written first), so a handle's saves can overtake each other."""

    orders_inserts = True
    _turn = 0

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        type(self)._turn += 1
        for _ in range(type(self)._turn % 3):
            await asyncio.sleep(0)
        return await super().insert(records)


class RemoveAlwaysTrue(GrownBackend):
    """remove answers True whether or not the id was stored (a DELETE whose row count is
    not read)."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        await super().remove(checkpoint_id)
        return True


# ====================================================================== own backend: a JSON file


T = TypeVar("T")


def _in_worker_thread(
    primitive: Callable[..., Coroutine[Any, Any, T]],
) -> Callable[..., Coroutine[Any, Any, T]]:
    """Run a primitive that never suspends (its body is the worked example's locked steps plus a
    journal append) to its end in a worker thread, so the loop's thread never waits on the file."""

    def drive(*args: Any, **kwargs: Any) -> T:
        # The coroutine is made in the thread: a call cancelled before the thread starts leaves
        # no coroutine never awaited.
        call = primitive(*args, **kwargs)
        try:
            call.send(None)
        except StopIteration as stop:
            return cast("T", stop.value)
        call.close()
        raise RuntimeError(f"{primitive.__name__} suspended")

    @functools.wraps(primitive)
    async def in_thread(*args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(drive, *args, **kwargs)

    return in_thread


class FileBackend(GrownBackend):
    """The grown backend persisted to a JSON-lines journal appended on every write and replayed
    on open (``durable``)."""

    capabilities = GrownBackend.capabilities | {Capability.DURABLE}

    def __init__(self, path: Path, tables: GrownTables | None = None) -> None:
        self.path = path
        super().__init__(tables if tables is not None else self._read())

    def new_handle(self) -> FileBackend:
        return type(self)(self.path, self.tables)

    def describe(self) -> str:
        return f"file://{self.path.name}"

    # ---- the journal

    def _append(self, *entries: dict[str, Any]) -> None:
        text = "".join(json.dumps(entry, ensure_ascii=False) + "\n" for entry in entries)
        with self.path.open("ab") as journal:
            journal.write(self._encoded(text))

    def _encoded(self, text: str) -> bytes:
        return text.encode("utf-8", errors="surrogatepass")

    def _read(self) -> GrownTables:
        tables = GrownTables()
        if not self.path.exists():
            return tables
        for line in self.path.read_bytes().decode("utf-8", errors="surrogatepass").split("\n"):
            if not line:
                continue
            entry = json.loads(line)
            op = entry["op"]
            if op == "put":
                record = CheckpointRecord(
                    entry["id"],
                    entry["workflow"],
                    entry["previous"],
                    entry["signature"],
                    base64.b64decode(entry["body"]),
                    entry["digest"],
                    None,
                    None,
                    0,
                )
                tables.records[entry["id"]] = (int(entry["sequence"]), record)
                tables.sequences[entry["workflow"]] = int(entry["sequence"])
            elif op == "del":
                tables.records.pop(entry["id"], None)
            elif op == "tomb":
                tables.tombstones.setdefault(entry["workflow"], set()).add(entry["id"])
            elif op == "untomb":
                tables.tombstones.pop(entry["workflow"], None)
            elif op == "body":
                sequence, old = tables.records[entry["id"]]
                tables.records[entry["id"]] = (
                    sequence,
                    old.replaced(body=base64.b64decode(entry["body"]), digest=old.digest),
                )
        self._reopened(tables)
        tables.names = {r.workflow_name for _, r in tables.records.values()}
        return tables

    def _reopened(self, tables: GrownTables) -> None:
        """Hook: what a reopen does to the replayed tables (nothing)."""

    @_in_worker_thread
    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await super().insert(records)

    @_in_worker_thread
    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await super().insert_fenced(records, expected_latest_id)

    def _insert(self, record: CheckpointRecord) -> InsertResult:
        result = super()._insert(record)
        if result is InsertResult.INSERTED:
            sequence = self.tables.records[self._key(record.checkpoint_id)][0]
            self._append(
                {
                    "op": "put",
                    "id": record.checkpoint_id,
                    "workflow": record.workflow_name,
                    "previous": record.previous_checkpoint_id,
                    "signature": record.graph_signature_hash,
                    "digest": record.digest,
                    "sequence": sequence,
                    "body": base64.b64encode(record.body).decode("ascii"),
                }
            )
        return result

    @_in_worker_thread
    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.tables.lock:
            removed = self.tables.records.pop(self._key(checkpoint_id), None) is not None
            if removed:
                self._append({"op": "del", "id": checkpoint_id})
            return removed

    @_in_worker_thread
    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.tables.lock:
            doomed = self._doomed(self._rows_held(workflow_name, None), keep_last)
            for record in doomed:
                del self.tables.records[self._key(record.checkpoint_id)]
                self.tables.tombstones.setdefault(workflow_name, set()).add(record.checkpoint_id)
            self._append(
                *[{"op": "del", "id": r.checkpoint_id} for r in doomed],
                *self._tombstone_entries(workflow_name, doomed),
            )
            return len(doomed)

    def _tombstone_entries(
        self, workflow_name: str, doomed: Sequence[CheckpointRecord]
    ) -> list[dict[str, Any]]:
        return [{"op": "tomb", "workflow": workflow_name, "id": r.checkpoint_id} for r in doomed]

    @_in_worker_thread
    async def delete_workflow(self, workflow_name: str) -> int:
        with self.tables.lock:
            rows = self._rows_held(workflow_name, None)
            for record in rows:
                del self.tables.records[self._key(record.checkpoint_id)]
            self._drop_tombstones(workflow_name)
            self._append(
                *[{"op": "del", "id": r.checkpoint_id} for r in rows],
                {"op": "untomb", "workflow": workflow_name},
            )
            return len(rows)

    @_in_worker_thread
    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        written = await super().overwrite_body(checkpoint_id, body, digest)
        if written:
            with self.tables.lock:
                self._append(
                    {"op": "body", "id": checkpoint_id, "body": base64.b64encode(body).decode("ascii")}
                )
        return written


class FileStorage(CheckpointStore[FileBackend]):
    def __init__(self, backend: FileBackend, **options: Any) -> None:
        super().__init__(backend, **options)


def file_target(backend_class: type[FileBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        directory = tempfile.mkdtemp(prefix="blind4-")
        path = Path(directory) / "store.json"

        def open_it() -> FileStorage:
            return FileStorage(backend_class(path))

        return StorageTarget(backend_class.__name__, open_it, reopen=open_it)

    return target


class FileReopenOrdersById(FileBackend):
    """On reopen, records are numbered afresh in id order (the journal's sequence is not read)."""

    def _reopened(self, tables: GrownTables) -> None:
        counters: dict[str, int] = {}
        renumbered: dict[CheckpointID, tuple[int, CheckpointRecord]] = {}
        for checkpoint_id in sorted(tables.records):
            record = tables.records[checkpoint_id][1]
            counters[record.workflow_name] = counters.get(record.workflow_name, 0) + 1
            renumbered[checkpoint_id] = (counters[record.workflow_name], record)
        tables.records = renumbered


class FileSequencesFromRecords(FileBackend):
    """On reopen, each workflow's counter is its highest stored sequence: a number handed out
    before the newest checkpoint was deleted is handed out again."""

    def _reopened(self, tables: GrownTables) -> None:
        counters: dict[str, int] = {}
        for sequence, record in tables.records.values():
            counters[record.workflow_name] = max(counters.get(record.workflow_name, 0), sequence)
        tables.sequences = counters


class FileForgetsTombstones(FileBackend):
    """Tombstones are kept in memory only (not journaled): a reopened store has none."""

    def _tombstone_entries(
        self, workflow_name: str, doomed: Sequence[CheckpointRecord]
    ) -> list[dict[str, Any]]:
        return []


class FileStrictUtf8(FileBackend):
    """The journal is written as strict UTF-8: a save whose id or name holds a lone surrogate
    (a valid identifier) fails with UnicodeEncodeError after the record is in the tables."""

    def _encoded(self, text: str) -> bytes:
        return text.encode("utf-8")


# ====================================================================== wrappers


class Wrapper:
    """Delegates every operation to a built-in in-memory storage; subclasses change one."""

    def __init__(self, inner: Any | None = None, shared: dict[str, Any] | None = None) -> None:
        self.inner = inner if inner is not None else InMemoryCheckpointStorage()
        self.shared: dict[str, Any] = shared if shared is not None else {}

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset(self.inner.capabilities)

    def new_handle(self) -> Any:
        return type(self)(self.inner.new_handle(), self.shared)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        return await self.inner.save(checkpoint, **options)

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        return await self.inner.load(checkpoint_id, **options)

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        return await self.inner.get_latest(workflow_name=workflow_name, **options)

    async def list_checkpoints(self, *, workflow_name: str, **options: Any) -> list[Any]:
        return list(await self.inner.list_checkpoints(workflow_name=workflow_name, **options))

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        return list(await self.inner.list_checkpoint_ids(workflow_name=workflow_name, **options))

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return bool(await self.inner.delete(checkpoint_id))


def wrapped(wrapper_class: type[Wrapper]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(wrapper_class.__name__, wrapper_class)

    return target


def over_sqlite(wrapper_class: type[Wrapper]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        from storages import open_storage

        path = Path(tempfile.mkdtemp(prefix="blind4-")) / "store.db"
        return StorageTarget(wrapper_class.__name__, lambda: wrapper_class(open_storage(f"sqlite:///{path}")))

    return target


class LatestCacheKeptOnDelete(Wrapper):
    """get_latest cached per workflow (shared by handles), dropped on save but not on delete."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        saved = await super().save(checkpoint, **options)
        self.shared.setdefault("latest", {}).pop(checkpoint.workflow_name, None)
        return saved

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        cache = self.shared.setdefault("latest", {})
        key = (workflow_name, options.get("graph_signature_hash"))
        if key not in cache:
            cache[key] = await super().get_latest(workflow_name=workflow_name, **options)
        return copy.deepcopy(cache[key])


class LoadCachePerHandle(Wrapper):
    """load cached per handle (checkpoints are immutable, after all), dropped by this handle's
    delete only: a delete through another handle leaves it loadable here."""

    def __init__(self, inner: Any | None = None, shared: dict[str, Any] | None = None) -> None:
        super().__init__(inner, shared)
        self.cache: dict[CheckpointID, Any] = {}

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        if checkpoint_id not in self.cache:
            self.cache[checkpoint_id] = await super().load(checkpoint_id)
        found = self.cache[checkpoint_id]
        expected = options.get("expected_graph_signature_hash")
        if expected is not None:
            return await super().load(checkpoint_id, **options)
        return copy.deepcopy(found)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self.cache.pop(checkpoint_id, None)
        return await super().delete(checkpoint_id)


class LoadCacheAliases(Wrapper):
    """load cached (shared) and handed out as the cached object itself."""

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        cache = self.shared.setdefault("loads", {})
        if options or checkpoint_id not in cache:
            found = await super().load(checkpoint_id, **options)
            cache[checkpoint_id] = found
        return cache[checkpoint_id]

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self.shared.setdefault("loads", {}).pop(checkpoint_id, None)
        return await super().delete(checkpoint_id)

    async def prune(self, **options: Any) -> int:
        self.shared.setdefault("loads", {}).clear()
        return int(await self.inner.prune(**options))

    async def delete_workflow(self, **options: Any) -> int:
        self.shared.setdefault("loads", {}).clear()
        return int(await self.inner.delete_workflow(**options))


class IdsCacheKeptOnPrune(Wrapper):
    """list_checkpoint_ids cached (shared), dropped on save and delete but not on prune or
    delete_workflow."""

    def _cache(self) -> dict[Any, list[CheckpointID]]:
        cache: dict[Any, list[CheckpointID]] = self.shared.setdefault("ids", {})
        return cache

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        saved = await super().save(checkpoint, **options)
        self._cache().clear()
        return saved

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        deleted = await super().delete(checkpoint_id)
        self._cache().clear()
        return deleted

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        key = (workflow_name, tuple(sorted(options.items())))
        if key not in self._cache():
            self._cache()[key] = await super().list_checkpoint_ids(workflow_name=workflow_name, **options)
        return list(self._cache()[key])


class MetricsStampsMetadata(Wrapper):
    """A metrics layer that records the save time into the checkpoint's metadata before saving."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        checkpoint.metadata["saved_at"] = _datetime.now(UTC).isoformat()
        return await super().save(checkpoint, **options)


class RetrySwallowsConflict(Wrapper):
    """A retry layer that reads a CheckpointConflictError on save as "an earlier attempt landed"
    and returns the id."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        try:
            return await super().save(checkpoint, **options)
        except StaleWriterError:
            raise
        except CheckpointConflictError:
            return str(checkpoint.checkpoint_id)


class RetryWrapsErrors(Wrapper):
    """A retry layer that retries every storage error twice, then raises StorageUnavailableError."""

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        for _attempt in range(2):
            try:
                return await super().load(checkpoint_id, **options)
            except StorageClosedError:
                raise
            except CheckpointStorageError:
                continue
        raise StorageUnavailableError("load", f"gave up on {checkpoint_id}")


class ArchiveReadThrough(Wrapper):
    """Deletes move checkpoints to an archive (shared); load reads through to it."""

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        try:
            found = await self.inner.load(checkpoint_id)
        except CheckpointStorageError:
            found = None
        deleted = await super().delete(checkpoint_id)
        if deleted and found is not None:
            self.shared.setdefault("archive", {})[checkpoint_id] = found
        return deleted

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        try:
            return await super().load(checkpoint_id, **options)
        except CheckpointNotFoundError:
            archived = self.shared.setdefault("archive", {}).get(checkpoint_id)
            if archived is None:
                raise
            return copy.deepcopy(archived)


class EmptySignatureIsNoFilter(Wrapper):
    """Passes graph_signature_hash on as ``h or None``: the empty signature filters nothing."""

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        if "graph_signature_hash" in options:
            options["graph_signature_hash"] = options["graph_signature_hash"] or None
        return await super().get_latest(workflow_name=workflow_name, **options)

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        if "graph_signature_hash" in options:
            options["graph_signature_hash"] = options["graph_signature_hash"] or None
        return await super().list_checkpoint_ids(workflow_name=workflow_name, **options)

    async def list_checkpoints(self, *, workflow_name: str, **options: Any) -> list[Any]:
        if "graph_signature_hash" in options:
            options["graph_signature_hash"] = options["graph_signature_hash"] or None
        return await super().list_checkpoints(workflow_name=workflow_name, **options)


class LoadChecksSignatureItself(Wrapper):
    """load checks expected_graph_signature_hash itself, with ``if expected and ...``: the empty
    signature is never enforced."""

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        expected = options.pop("expected_graph_signature_hash", None)
        found = await super().load(checkpoint_id, **options)
        if expected and found.graph_signature_hash != expected:
            from storages import GraphSignatureMismatchError

            raise GraphSignatureMismatchError(checkpoint_id, expected, found.graph_signature_hash)
        return found


class NestedDeleteReturnsFalse(Wrapper):
    """delete of an embedded checkpoint answers False instead of raising."""

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        try:
            return await super().delete(checkpoint_id)
        except NestedCheckpointDeletionError:
            return False


class TenantPrefix:
    """Multi-tenancy over a built-in storage, MAF's six methods: workflow names are stored as
    ``"tenant:" + name`` and given back without the prefix; a 256-character name becomes too
    long to store."""

    prefix = "tenant:"

    def __init__(self, inner: Any | None = None) -> None:
        self.inner = inner if inner is not None else InMemoryCheckpointStorage()

    def new_handle(self) -> TenantPrefix:
        return type(self)(self.inner.new_handle())

    async def aclose(self) -> None:
        await self.inner.aclose()

    def _in(self, checkpoint: Any) -> Any:
        return dataclasses.replace(checkpoint, workflow_name=self.prefix + checkpoint.workflow_name)

    def _out(self, checkpoint: Any) -> Any:
        if checkpoint is None:
            return None
        return dataclasses.replace(checkpoint, workflow_name=checkpoint.workflow_name[len(self.prefix) :])

    async def save(self, checkpoint: Any) -> CheckpointID:
        return str(await self.inner.save(self._in(checkpoint)))

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        return self._out(await self.inner.load(checkpoint_id))

    async def get_latest(self, *, workflow_name: str) -> Any:
        return self._out(await self.inner.get_latest(workflow_name=self.prefix + workflow_name))

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        found = await self.inner.list_checkpoints(workflow_name=self.prefix + workflow_name)
        return [self._out(c) for c in found]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return list(await self.inner.list_checkpoint_ids(workflow_name=self.prefix + workflow_name))

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return bool(await self.inner.delete(checkpoint_id))


class NewHandleKeepsClosed(Wrapper):
    """new_handle copies the wrapper, closed flag included."""

    def __init__(self, inner: Any | None = None, shared: dict[str, Any] | None = None) -> None:
        super().__init__(inner, shared)
        self.closed = False

    def new_handle(self) -> Any:
        handle = copy.copy(self)
        handle.inner = self.inner.new_handle()
        return handle

    async def aclose(self) -> None:
        self.closed = True
        await super().aclose()

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        if self.closed:
            raise StorageClosedError("save")
        return await super().save(checkpoint, **options)


class FencedByGetLatest(Wrapper):
    """Fences itself (under one lock for every handle): compares expected_latest_id with
    get_latest(), which may prefer a rival by timestamp, instead of the head."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        if "expected_latest_id" not in options:
            return await super().save(checkpoint, **options)
        expected = options.pop("expected_latest_id")
        lock: asyncio.Lock = self.shared.setdefault("fence", asyncio.Lock())
        async with lock:
            try:
                stored = await self.inner.load(checkpoint.checkpoint_id)
            except CheckpointNotFoundError:
                stored = None
            latest = await self.inner.get_latest(workflow_name=checkpoint.workflow_name)
            latest_id = None if latest is None else latest.checkpoint_id
            if stored is None and latest_id != expected:
                raise StaleWriterError(
                    checkpoint.workflow_name, checkpoint.checkpoint_id, expected, latest_id
                )
            if stored is not None and latest_id != checkpoint.checkpoint_id:
                await self.inner.save(checkpoint)  # another content conflicts here
                raise StaleWriterError(
                    checkpoint.workflow_name,
                    checkpoint.checkpoint_id,
                    expected,
                    latest_id,
                    already_stored=True,
                )
            return await self.inner.save(checkpoint)


class CancelledSaveCached(Wrapper):
    """A write-through cache filled before the store's save is awaited: a cancelled save leaves
    the handle loading a checkpoint that was never stored. Over the in-memory storage a save
    completes without suspending, so no cancellation falls between the two; over SQLite (a
    thread per handle) one does (the factory in ``_entries``)."""

    def __init__(self, inner: Any | None = None, shared: dict[str, Any] | None = None) -> None:
        super().__init__(inner, shared)
        self.cache: dict[CheckpointID, Any] = {}

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        if checkpoint.checkpoint_id not in self.cache:
            snapshot = copy.deepcopy(checkpoint)
            self.cache[checkpoint.checkpoint_id] = snapshot
            try:
                return await super().save(checkpoint, **options)
            except CheckpointStorageError:
                self.cache.pop(checkpoint.checkpoint_id, None)
                raise
        return await super().save(checkpoint, **options)

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        if not options and checkpoint_id in self.cache:
            return copy.deepcopy(self.cache[checkpoint_id])
        return await super().load(checkpoint_id, **options)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self.cache.pop(checkpoint_id, None)
        return await super().delete(checkpoint_id)

    async def prune(self, **options: Any) -> int:
        self.cache.clear()
        return int(await self.inner.prune(**options))

    async def delete_workflow(self, **options: Any) -> int:
        self.cache.clear()
        return int(await self.inner.delete_workflow(**options))

    async def write_raw_body(self, checkpoint_id: CheckpointID, body: bytes) -> None:
        self.cache.pop(checkpoint_id, None)
        await self.inner.write_raw_body(checkpoint_id, body)

    async def aclose(self) -> None:
        self.cache.clear()
        await super().aclose()

    @property
    def capabilities(self) -> frozenset[Capability]:
        # The cache is per handle: other handles' deletes are not seen, so not ``shared``.
        return frozenset(self.inner.capabilities) - {Capability.SHARED}


class TimestampsToUtc(Wrapper):
    """Normalises every checkpoint's timestamp to UTC before saving ("store instants in UTC")."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        try:
            moment = _datetime.fromisoformat(checkpoint.timestamp)
        except (TypeError, ValueError):
            return await super().save(checkpoint, **options)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        normalised = copy.copy(checkpoint)
        normalised.timestamp = moment.astimezone(UTC).isoformat()
        return await super().save(normalised, **options)


class SizeMetricsViaAsdict(Wrapper):
    """A metrics layer that measures a checkpoint through ``dataclasses.asdict`` and saves the
    checkpoint rebuilt from it (dataclasses in its values become dicts)."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        if dataclasses.is_dataclass(checkpoint) and not isinstance(checkpoint, type):
            fields = dataclasses.asdict(checkpoint)
            self.shared["bytes"] = self.shared.get("bytes", 0) + len(repr(fields))
            checkpoint = type(checkpoint)(**fields)
        return await super().save(checkpoint, **options)


class WriteBehindOnSecondHandle(Wrapper):
    """Write-behind: saves are buffered per handle and flushed on the next save or close; this
    handle reads its buffer, other handles see a save only once it is flushed."""

    def __init__(self, inner: Any | None = None, shared: dict[str, Any] | None = None) -> None:
        super().__init__(inner, shared)
        self.buffer: list[Any] = []

    async def _flush(self) -> None:
        while self.buffer:
            await self.inner.save(self.buffer.pop(0))

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        await self._flush()
        if options:
            return await super().save(checkpoint, **options)
        self.buffer.append(copy.deepcopy(checkpoint))
        return str(checkpoint.checkpoint_id)

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        await self._flush()
        return await super().load(checkpoint_id, **options)

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        await self._flush()
        return await super().get_latest(workflow_name=workflow_name, **options)

    async def list_checkpoints(self, *, workflow_name: str, **options: Any) -> list[Any]:
        await self._flush()
        return await super().list_checkpoints(workflow_name=workflow_name, **options)

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        await self._flush()
        return await super().list_checkpoint_ids(workflow_name=workflow_name, **options)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        await self._flush()
        return await super().delete(checkpoint_id)

    async def aclose(self) -> None:
        await self._flush()
        await super().aclose()


# ====================================================================== six-method storages


class SixMethods:
    """MAF's six methods only, over a built-in in-memory store shared by nothing else."""

    def __init__(self) -> None:
        self.inner = InMemoryCheckpointStorage()

    async def save(self, checkpoint: Any) -> CheckpointID:
        return str(await self.inner.save(checkpoint))

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        return await self.inner.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return list(await self.inner.list_checkpoints(workflow_name=workflow_name))

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return list(await self.inner.list_checkpoint_ids(workflow_name=workflow_name))

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return bool(await self.inner.delete(checkpoint_id))

    async def get_latest(self, *, workflow_name: str) -> Any:
        return await self.inner.get_latest(workflow_name=workflow_name)


def six(six_class: type[SixMethods]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(six_class.__name__, six_class)

    return target


class SixLatestByNewestTimestamp(SixMethods):
    """get_latest is the listing's newest timestamp, as instants (MAF 1.25's rule)."""

    async def get_latest(self, *, workflow_name: str) -> Any:
        found = await self.list_checkpoints(workflow_name=workflow_name)
        if not found:
            return None
        return max(reversed(found), key=lambda c: _instant(c.timestamp))


def _instant(timestamp: str) -> _datetime:
    try:
        moment = _datetime.fromisoformat(timestamp)
    except ValueError:
        return _datetime.min.replace(tzinfo=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class SixLatestIsLastListed(SixMethods):
    """get_latest is the last checkpoint listed (commit order, no lineage, no rivals)."""

    async def get_latest(self, *, workflow_name: str) -> Any:
        found = await self.list_checkpoints(workflow_name=workflow_name)
        return found[-1] if found else None


class SixListedByTimestamp(SixMethods):
    """list_checkpoints sorted by timestamp (stable), not commit order."""

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return sorted(
            await super().list_checkpoints(workflow_name=workflow_name), key=lambda c: _instant(c.timestamp)
        )


class SixFirstPageOnly(SixMethods):
    """Listings read one page of 1,000 (an S3 ListObjectsV2 without its continuation token)."""

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return (await super().list_checkpoint_ids(workflow_name=workflow_name))[:1000]

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return (await super().list_checkpoints(workflow_name=workflow_name))[:1000]


class SixEqualIsSame(SixMethods):
    """A re-save is a no-op when the stored checkpoint is ``==`` to the new one (True == 1)."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        try:
            stored = await self.inner.load(checkpoint.checkpoint_id)
        except CheckpointNotFoundError:
            stored = None
        if stored is not None and stored == checkpoint:
            return str(checkpoint.checkpoint_id)
        return await super().save(checkpoint)


class SixShortIdInError(SixMethods):
    """load's not-found error names the id cut to 8 characters, for readable logs."""

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        try:
            return await super().load(checkpoint_id)
        except CheckpointNotFoundError:
            raise CheckpointNotFoundError(checkpoint_id[:8]) from None


class SixDeleteReturnsNone(SixMethods):
    """delete answers None when there was nothing to delete (falls off the end)."""

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        if await self.inner.delete(checkpoint_id):
            return True
        return None  # type: ignore[return-value]


class SixSaveReturnsCheckpoint(SixMethods):
    """save returns the checkpoint (MAF's own storages return its id)."""

    async def save(self, checkpoint: Any) -> Any:
        await super().save(checkpoint)
        return checkpoint


class SixLockLeftHeldOnCancel(SixMethods):
    """Serialises saves with a lock taken by acquire() and released after the await without
    try/finally: a save that raises (a conflict) or is cancelled leaves it held."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = asyncio.Lock()

    async def save(self, checkpoint: Any) -> CheckpointID:
        await self.lock.acquire()
        saved = await super().save(checkpoint)
        self.lock.release()
        return saved


class SixDeleteByPrefix(SixMethods):
    """delete removes the id and every checkpoint of its workflow whose id starts with it
    (a "delete a checkpoint and its retries" shortcut)."""

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        try:
            found = await self.inner.load(checkpoint_id)
        except CheckpointNotFoundError:
            return False
        for other in await self.inner.list_checkpoint_ids(workflow_name=found.workflow_name):
            if other != checkpoint_id and other.startswith(checkpoint_id):
                await self.inner.delete(other)
        return bool(await self.inner.delete(checkpoint_id))


class SixLatestSkipsUnparsable(SixMethods):
    """get_latest skips a checkpoint whose timestamp does not parse (a "bad" checkpoint)."""

    async def get_latest(self, *, workflow_name: str) -> Any:
        latest = await super().get_latest(workflow_name=workflow_name)
        if latest is None:
            return None
        try:
            _datetime.fromisoformat(latest.timestamp)
        except ValueError:
            found = [
                c for c in await self.list_checkpoints(workflow_name=workflow_name) if _parses(c.timestamp)
            ]
            return found[-1] if found else None
        return latest


def _parses(timestamp: str) -> bool:
    try:
        _datetime.fromisoformat(timestamp)
    except ValueError:
        return False
    return True


# ====================================================================== the registry


Entry = tuple[str, Callable[[], StorageTarget], str]


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


def _entries() -> list[Entry]:
    broken_backends: list[type[GrownBackend]] = [
        ListIdsByPrefix,
        SignatureByPrefix,
        SequenceAsText,
        SequenceFromCount,
        IdKeyTruncated,
        ControlCharactersStripped,
        FenceOnSignatureHead,
        LatestFollowsAnySignature,
        RivalsNewestFirst,
        RivalsFirstCommitted,
        PruneNewestOnly,
        TombstonesByPrefix,
        DeleteWorkflowClearsAllTombstones,
        WalkStaysInWorkflow,
        WorkflowNamesNeverForget,
        RecordsSequenceFromPosition,
        OrdersInsertsButYields,
        RemoveAlwaysTrue,
    ]
    broken_files: list[type[FileBackend]] = [
        FileReopenOrdersById,
        FileSequencesFromRecords,
        FileForgetsTombstones,
    ]
    broken_wrappers: list[type[Wrapper]] = [
        LatestCacheKeptOnDelete,
        LoadCachePerHandle,
        LoadCacheAliases,
        IdsCacheKeptOnPrune,
        MetricsStampsMetadata,
        RetrySwallowsConflict,
        RetryWrapsErrors,
        ArchiveReadThrough,
        EmptySignatureIsNoFilter,
        LoadChecksSignatureItself,
        NestedDeleteReturnsFalse,
        NewHandleKeepsClosed,
        FencedByGetLatest,
        TimestampsToUtc,
        SizeMetricsViaAsdict,
        WriteBehindOnSecondHandle,
    ]
    broken_six: list[type[SixMethods]] = [
        SixLatestByNewestTimestamp,
        SixLatestIsLastListed,
        SixListedByTimestamp,
        SixFirstPageOnly,
        SixEqualIsSame,
        SixShortIdInError,
        SixDeleteReturnsNone,
        SixSaveReturnsCheckpoint,
        SixLockLeftHeldOnCancel,
        SixDeleteByPrefix,
        SixLatestSkipsUnparsable,
    ]
    entries: list[Entry] = []
    entries += [(c.__name__, grown(c), _doc(c)) for c in broken_backends]
    entries += [(c.__name__, file_target(c), _doc(c)) for c in broken_files]
    entries += [(c.__name__, wrapped(c), _doc(c)) for c in broken_wrappers]
    entries.append(
        (
            "CancelledSaveCachedOverSQLite",
            over_sqlite(CancelledSaveCached),
            "CancelledSaveCached over SQLite.",
        )
    )
    entries += [(c.__name__, six(c), _doc(c)) for c in broken_six]
    entries.append(("TenantPrefix", lambda: StorageTarget("TenantPrefix", TenantPrefix), _doc(TenantPrefix)))
    return entries


ENTRIES: list[Entry] = _entries()
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = [
    ("FileStrictUtf8", file_target(FileStrictUtf8), _doc(FileStrictUtf8)),
    ("CancelledSaveCached", wrapped(CancelledSaveCached), _doc(CancelledSaveCached)),
]
"""Written as broken, judged not to break the contract as built: the engine refuses an id or
name with a surrogate before any backend sees it (docs/contract.md, "Identifiers"), and over the
in-memory storage the cache's window never opens. Each passes the whole kit."""

HONEST: list[Entry] = [
    ("GrownBackend", grown(GrownBackend), _doc(GrownBackend)),
    ("FileBackend", file_target(FileBackend), _doc(FileBackend)),
    ("Wrapper", wrapped(Wrapper), _doc(Wrapper)),
    ("SixMethods", six(SixMethods), _doc(SixMethods)),
]
"""Honest storages, one per style (and the file backend): each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
