"""A fifth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/conformance.md's prose, examples/dict_storage.py and the public author API
could ship. Four styles, each with an honest storage that passes the whole kit:

* own backends: the worked example (``FencedDictBackend``) under the engine, one primitive
  changed;
* an own durable backend: the worked example persisted to a JSON-lines journal in a directory,
  shared by processes under a file lock (``DirBackend``);
* wrappers delegating to the built-in in-memory storage;
* six-method MAF-style storages (only ``save``, ``load``, ``list_checkpoints``,
  ``list_checkpoint_ids``, ``delete``, ``get_latest``).

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_five.md has the kit's verdicts before this
batch's clauses; tests/kit/test_blind_batch_five.py names the clause that catches each defect now.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import os
import tempfile
import threading
import unicodedata
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, TypeVar, cast

from conformance import StorageTarget
from examples.dict_storage import FencedDictBackend, Tables, _stored
from storages import (
    CheckpointConflictError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    InMemoryCheckpointStorage,
)
from storages.backend import (
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    latest_record,
    rivals_of,
)
from storages.contract import Capability, CheckpointID
from storages.engine import CheckpointStore

# ====================================================================== own backend


class DictStorage(CheckpointStore[FencedDictBackend]):
    def __init__(self, backend: FencedDictBackend, **options: Any) -> None:
        super().__init__(backend, **options)


def backend_target(backend_class: type[FencedDictBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: DictStorage(backend_class()))

    return target


class LatestWithoutRivals(FencedDictBackend):
    """latest returns the head alone, never its rivals: parallel steps resume from the one
    committed last, not the one built last."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        head = latest_record(self._rows(workflow_name, None), graph_signature_hash)
        return None if head is None else _stored(head)


class ListIdsNewestFirst(FencedDictBackend):
    """list_ids answers newest first (an ORDER BY sequence DESC copied from the latest query);
    list_bodies stays oldest first."""

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        rows = self._rows(workflow_name, graph_signature_hash)
        return [record.checkpoint_id for record in reversed(rows)]


class ListBodiesPageSkipsOne(FencedDictBackend):
    """list_bodies reads pages of 50 and starts each next page one row too far (offset + 51):
    a history longer than a page loses a checkpoint per page."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        rows = self._rows(workflow_name, graph_signature_hash)
        found: list[StoredBody] = []
        offset = 0
        while True:
            page = rows[offset : offset + 50]
            found += [_stored(record) for record in page]
            if len(page) < 50:
                return found
            offset += 51


class LoadIgnoresCase(FencedDictBackend):
    """load looks ids up case-insensitively (a case-insensitive collation on the id column)."""

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        with self.tables.lock:
            for sequence_record in self.tables.records.values():
                if sequence_record[1].checkpoint_id.lower() == checkpoint_id.lower():
                    return _stored(sequence_record[1])
        return None


class WorkflowNamesNfc(FencedDictBackend):
    """Workflow names are compared after NFC normalisation (as a filesystem would): "é" composed
    and decomposed are one workflow."""

    def _rows_held(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointRecord]:
        wanted = unicodedata.normalize("NFC", workflow_name)
        rows = [
            (sequence, record)
            for sequence, record in self.tables.records.values()
            if unicodedata.normalize("NFC", record.workflow_name) == wanted
            and graph_signature_hash in (None, record.graph_signature_hash)
        ]
        rows.sort(key=lambda row: row[0])
        return [record for _, record in rows]


class WorkflowNamesCaseFolded(FencedDictBackend):
    """Workflow names are matched case-insensitively (a case-insensitive collation on the name
    column): "Orders" and "orders" are one workflow."""

    def _rows_held(self, workflow_name: str, graph_signature_hash: str | None) -> list[CheckpointRecord]:
        rows = [
            (sequence, record)
            for sequence, record in self.tables.records.values()
            if record.workflow_name.casefold() == workflow_name.casefold()
            and graph_signature_hash in (None, record.graph_signature_hash)
        ]
        rows.sort(key=lambda row: row[0])
        return [record for _, record in rows]


class RemoveDropsEmptyCounter(FencedDictBackend):
    """remove tidies up: deleting a workflow's last checkpoint deletes its sequence counter too."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.tables.lock:
            found = self.tables.records.pop(checkpoint_id, None)
            if found is None:
                return False
            name = found[1].workflow_name
            if not any(record.workflow_name == name for _, record in self.tables.records.values()):
                self.tables.sequences.pop(name, None)
            return True


class WalkOneTooDeep(FencedDictBackend):
    """walk stops after max_depth + 1 records (``<=`` instead of ``<``)."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        with self.tables.lock:
            current: CheckpointID | None = checkpoint_id
            while current is not None and current not in links and len(links) <= max_depth:
                found = self.tables.records.get(current)
                if found is None:
                    break
                record = found[1]
                links[current] = record.previous_checkpoint_id
                if with_bodies:
                    bodies[current] = record.body
                current = record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset())


class OverwriteTakesNewDigest(FencedDictBackend):
    """overwrite_body stores the digest it is given with the new body, so the index always
    matches the body (a repair tool's write, or a tampering one, can never be told apart)."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.tables.lock:
            found = self.tables.records.get(checkpoint_id)
            if found is None:
                return False
            sequence, old = found
            self.tables.records[checkpoint_id] = (sequence, old.replaced(body=body, digest=digest))
        return True


class KeyedByWorkflowAndId(FencedDictBackend):
    """Records are keyed by (workflow name, id): the same id saved under two workflow names is
    two checkpoints, and load answers whichever was saved first."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        with self.tables.lock:
            for _, existing in self.tables.records.values():
                if (
                    existing.checkpoint_id == record.checkpoint_id
                    and existing.workflow_name == record.workflow_name
                ):
                    return InsertResult.of_stored_digest(existing.digest, record)
            tables = self.tables
            sequence = tables.sequences.get(record.workflow_name, 0) + 1
            tables.sequences[record.workflow_name] = sequence
            key = record.checkpoint_id
            if key in tables.records:
                key = f"{record.workflow_name}\x00{record.checkpoint_id}"
            tables.records[key] = (sequence, record)
            return InsertResult.INSERTED

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        with self.tables.lock:
            for _, record in self.tables.records.values():
                if record.checkpoint_id == checkpoint_id:
                    return _stored(record)
        return None


class FenceNoneIsNoFence(FencedDictBackend):
    """insert_fenced tests ``if expected_latest_id and head != expected``: expecting no head
    (None) fences nothing."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        with self.tables.lock:
            head = latest_record(self._rows_held(record.workflow_name, None))
            latest = None if head is None else head.checkpoint_id
            if (
                expected_latest_id
                and latest != expected_latest_id
                and record.checkpoint_id not in self.tables.records
            ):
                return FenceCheck(latest, None)
            return FenceCheck.after_insert(latest, self._insert(record))


class FenceOnNewestCommit(FencedDictBackend):
    """insert_fenced compares the expected id with the workflow's newest commit, not the head
    found through the lineage."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        with self.tables.lock:
            rows = [r for r in self._rows_held(record.workflow_name, None) if r.container_id is None]
            latest = rows[-1].checkpoint_id if rows else None
            if latest != expected_latest_id and record.checkpoint_id not in self.tables.records:
                return FenceCheck(latest, None)
            return FenceCheck.after_insert(latest, self._insert(record))


class LatestFiltersAfterHead(FencedDictBackend):
    """latest with a signature finds the workflow's head over every signature, then answers None
    when that head has another signature (the filter applied after the lineage walk)."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self._rows(workflow_name, None)
        head = latest_record(rows, None)
        if head is None:
            return None
        if graph_signature_hash is not None and head.graph_signature_hash != graph_signature_hash:
            return None
        return replace(_stored(head), rivals=[_stored(rival) for rival in rivals_of(rows, head)])


class ListBodiesIgnoresSignature(FencedDictBackend):
    """list_bodies ignores graph_signature_hash (only list_ids was given the filter)."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [_stored(record) for record in self._rows(workflow_name, None)]


class InsertUpserts(FencedDictBackend):
    """insert is an upsert (INSERT OR REPLACE): saving an id again replaces the stored record and
    gives it a new sequence."""

    def _insert(self, record: CheckpointRecord) -> InsertResult:
        tables = self.tables
        sequence = tables.sequences.get(record.workflow_name, 0) + 1
        tables.sequences[record.workflow_name] = sequence
        tables.records.pop(record.checkpoint_id, None)
        tables.records[record.checkpoint_id] = (sequence, record)
        return InsertResult.INSERTED


# ====================================================================== own durable backend

T = TypeVar("T")


@dataclass
class JournalTables(Tables):
    """The tables of one process's handles, plus how far into the journal they have read."""

    lock: Any = field(default_factory=threading.RLock)
    offset: int = 0
    unwritten: list[bytes] = field(default_factory=list)


def _drive(call: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the worked example's primitives) to its end."""
    try:
        call.send(None)
    except StopIteration as stop:
        return cast("T", stop.value)
    call.close()
    raise RuntimeError("a primitive suspended")


class DirBackend(FencedDictBackend):
    """The worked example persisted to a directory: a JSON-lines journal of every write, appended
    under an exclusive file lock; each call first reads what other processes appended since, in
    a worker thread (``durable``)."""

    capabilities = FencedDictBackend.capabilities | {Capability.DURABLE}

    tables: JournalTables

    def __init__(self, directory: Path, tables: JournalTables | None = None) -> None:
        self.directory = directory
        self._journal: IO[bytes] | None = None
        if tables is None:
            tables = JournalTables()
            with tables.lock, open(self.path, "a+b") as journal:
                fcntl.flock(journal, fcntl.LOCK_EX)
                self._replay(tables, journal)
        super().__init__(tables)

    @property
    def path(self) -> Path:
        return self.directory / "journal.jsonl"

    def new_handle(self) -> DirBackend:
        return type(self)(self.directory, self.tables)

    def describe(self) -> str:
        return f"dir://{self.directory}"

    # ------------------------------------------------------------ the journal

    def _encode_body(self, body: bytes) -> str:
        return base64.b64encode(body).decode("ascii")

    def _decode_body(self, text: str) -> bytes:
        return base64.b64decode(text)

    def _replay(self, tables: JournalTables, journal: IO[bytes]) -> None:
        journal.seek(tables.offset)
        for line in journal.read().splitlines():
            row = json.loads(line)
            if row["op"] == "insert":
                record = CheckpointRecord(
                    row["id"],
                    row["workflow"],
                    row["previous"],
                    row["signature"],
                    self._decode_body(row["body"]),
                    row["digest"],
                )
                tables.records[row["id"]] = (row["sequence"], record)
                tables.sequences[row["workflow"]] = max(
                    tables.sequences.get(row["workflow"], 0), row["sequence"]
                )
            elif row["op"] == "remove":
                tables.records.pop(row["id"], None)
            elif row["op"] == "overwrite" and row["id"] in tables.records:
                sequence, old = tables.records[row["id"]]
                tables.records[row["id"]] = (
                    sequence,
                    old.replaced(body=self._decode_body(row["body"]), digest=old.digest),
                )
        tables.offset = journal.tell()

    def _refresh(self, journal: IO[bytes]) -> None:
        self._replay(self.tables, journal)

    def _append(self, row: dict[str, Any]) -> None:
        assert self._journal is not None
        self._journal.seek(0, os.SEEK_END)
        self._journal.write(json.dumps(row, ensure_ascii=True).encode("ascii") + b"\n")

    def _locked(self, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        with self.tables.lock, open(self.path, "a+b") as journal:
            fcntl.flock(journal, fcntl.LOCK_EX)
            self._refresh(journal)
            self._journal = journal
            try:
                return _drive(call())
            finally:
                self._journal = None
                journal.flush()
                journal.seek(0, os.SEEK_END)
                self.tables.offset = journal.tell()

    async def _run(self, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return await asyncio.to_thread(self._locked, call)

    # ------------------------------------------------------------ the primitives, journaled

    def _insert(self, record: CheckpointRecord) -> InsertResult:
        result = super()._insert(record)
        if result is InsertResult.INSERTED:
            self._append(
                {
                    "op": "insert",
                    "id": record.checkpoint_id,
                    "workflow": record.workflow_name,
                    "previous": record.previous_checkpoint_id,
                    "signature": record.graph_signature_hash,
                    "body": self._encode_body(record.body),
                    "digest": record.digest,
                    "sequence": self.tables.sequences[record.workflow_name],
                }
            )
        return result

    async def _remove_here(self, checkpoint_id: CheckpointID) -> bool:
        removed = self.tables.records.pop(checkpoint_id, None) is not None
        if removed:
            self._append({"op": "remove", "id": checkpoint_id})
        return removed

    async def _overwrite_here(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        found = self.tables.records.get(checkpoint_id)
        if found is None:
            return False
        sequence, old = found
        self.tables.records[checkpoint_id] = (sequence, old.replaced(body=body, digest=old.digest))
        self._append({"op": "overwrite", "id": checkpoint_id, "body": self._encode_body(body)})
        return True

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self._run(lambda: FencedDictBackend.insert(self, records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self._run(lambda: FencedDictBackend.insert_fenced(self, records, expected_latest_id))

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self._run(lambda: FencedDictBackend.load(self, checkpoint_id))

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self._run(lambda: FencedDictBackend.latest(self, workflow_name, graph_signature_hash))

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self._run(
            lambda: FencedDictBackend.list_bodies(self, workflow_name, graph_signature_hash)
        )

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self._run(lambda: FencedDictBackend.list_ids(self, workflow_name, graph_signature_hash))

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self._run(lambda: self._remove_here(checkpoint_id))

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self._run(
            lambda: FencedDictBackend.walk(self, checkpoint_id, max_depth, with_bodies=with_bodies)
        )

    async def workflow_names(self) -> list[str]:
        return await self._run(lambda: FencedDictBackend.workflow_names(self))

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self._run(lambda: self._overwrite_here(checkpoint_id, body, digest))


class DirStorage(CheckpointStore[DirBackend]):
    def __init__(self, backend: DirBackend, **options: Any) -> None:
        super().__init__(backend, **options)


_DIR_CLASSES: dict[str, type[DirBackend]] = {}
_DIR_VARIABLE = "BLIND_BATCH_FIVE_DIR"


def open_dir_from_environment() -> DirStorage:
    """What another process opens: the class and directory named by the environment."""
    name, directory = os.environ[_DIR_VARIABLE].split("|", 1)
    return DirStorage(_DIR_CLASSES[name](Path(directory)))


def dir_target(backend_class: type[DirBackend]) -> Callable[[], StorageTarget]:
    _DIR_CLASSES[backend_class.__name__] = backend_class

    def target() -> StorageTarget:
        directory = Path(tempfile.mkdtemp(prefix="blind5-"))
        os.environ[_DIR_VARIABLE] = f"{backend_class.__name__}|{directory}"

        def open_it() -> DirStorage:
            return DirStorage(backend_class(directory))

        return StorageTarget(
            backend_class.__name__,
            open_it,
            reopen=open_it,
            process_opener="tests.kit.blind_batch_five:open_dir_from_environment",
        )

    return target


class DirDeletesNotJournaled(DirBackend):
    """A delete changes the tables but appends nothing: it lasts until the store is reopened
    (and other processes never see it)."""

    async def _remove_here(self, checkpoint_id: CheckpointID) -> bool:
        return self.tables.records.pop(checkpoint_id, None) is not None


class DirBodyAsText(DirBackend):
    """Bodies are journaled as text (decoded as UTF-8 with replacement): a body that is not
    UTF-8 comes back altered after a reopen or in another process."""

    def _encode_body(self, body: bytes) -> str:
        return body.decode("utf-8", errors="replace")

    def _decode_body(self, text: str) -> bytes:
        return text.encode("utf-8")


class DirRepairNotJournaled(DirBackend):
    """overwrite_body (raw writes of repair tools) changes the tables only: a repaired body is
    back to the damaged one after a reopen."""

    async def _overwrite_here(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        found = self.tables.records.get(checkpoint_id)
        if found is None:
            return False
        sequence, old = found
        self.tables.records[checkpoint_id] = (sequence, old.replaced(body=body, digest=old.digest))
        return True


class DirJournalWrittenOnClose(DirBackend):
    """Journal lines are buffered and appended on close() only (batched for speed): a process
    that ends without aclose() loses its writes, and other processes see them late."""

    def _append(self, row: dict[str, Any]) -> None:
        self.tables.unwritten.append(json.dumps(row, ensure_ascii=True).encode("ascii") + b"\n")

    async def close(self) -> None:
        def flush() -> None:
            with self.tables.lock, open(self.path, "ab") as journal:
                fcntl.flock(journal, fcntl.LOCK_EX)
                journal.write(b"".join(self.tables.unwritten))
                self.tables.unwritten.clear()

        await asyncio.to_thread(flush)


class DirReadsJournalOnOpenOnly(DirBackend):
    """The journal is read when the store is opened only: what other processes append later is
    never seen by an open store."""

    def _refresh(self, journal: IO[bytes]) -> None:
        pass


class DirFileWorkOnLoopThread(DirBackend):
    """Every call does its file work (lock, read, append) on the event loop's own thread."""

    async def _run(self, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return self._locked(call)


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


class IdsCacheIgnoresSignature(Wrapper):
    """list_checkpoint_ids cached per workflow (shared by handles, dropped on every write), keyed
    by the workflow name alone: a filtered listing after an unfiltered one answers unfiltered."""

    def _drop(self) -> None:
        self.shared.pop("ids", None)

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        cache: dict[str, list[CheckpointID]] = self.shared.setdefault("ids", {})
        if workflow_name not in cache:
            cache[workflow_name] = await super().list_checkpoint_ids(workflow_name=workflow_name, **options)
        return list(cache[workflow_name])

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        self._drop()
        return await super().save(checkpoint, **options)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self._drop()
        return await super().delete(checkpoint_id)

    async def prune(self, **options: Any) -> int:
        self._drop()
        return int(await self.inner.prune(**options))

    async def delete_workflow(self, **options: Any) -> int:
        self._drop()
        return int(await self.inner.delete_workflow(**options))


class LoadCacheSkipsSignatureCheck(Wrapper):
    """load cached (a decoded copy per load through the codec's round trip) and a cache hit
    returns without checking expected_graph_signature_hash."""

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        cache: dict[CheckpointID, Any] = self.shared.setdefault("loads", {})
        if checkpoint_id in cache:
            return await self.inner.load(checkpoint_id)
        found = await self.inner.load(checkpoint_id, **options)
        cache[checkpoint_id] = True
        return found

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self.shared.setdefault("loads", {}).clear()
        return await super().delete(checkpoint_id)


class CloseTwiceRaises(Wrapper):
    """aclose raises RuntimeError("already closed") on a second call."""

    async def aclose(self) -> None:
        key = f"closed-{id(self)}"
        if self.shared.get(key):
            raise RuntimeError("storage already closed")
        self.shared[key] = True
        await self.inner.aclose()


class CloseLeavesInnerOpen(Wrapper):
    """aclose releases only the wrapper's own state (a cache): the storage it wraps stays open, so
    every operation after aclose still works."""

    async def aclose(self) -> None:
        self.shared.pop("cache", None)


class NewHandleIsFresh(Wrapper):
    """new_handle builds a fresh in-memory storage (copying the constructor call) instead of a
    handle on the same store, while still declaring ``shared``."""

    def new_handle(self) -> Any:
        return type(self)()


class ClosedRaisesRuntimeError(Wrapper):
    """After aclose the wrapper refuses calls itself, with RuntimeError("closed")."""

    closed = False

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()

    def _check(self) -> None:
        if self.closed:
            raise RuntimeError("storage is closed")

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        self._check()
        return await super().save(checkpoint, **options)

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        self._check()
        return await super().load(checkpoint_id, **options)

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        self._check()
        return await super().get_latest(workflow_name=workflow_name, **options)


class LoadMissingReturnsNone(Wrapper):
    """load answers None for an id that is not stored (like dict.get)."""

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        try:
            return await super().load(checkpoint_id, **options)
        except CheckpointNotFoundError:
            return None


class LatestRaisesWhenEmpty(Wrapper):
    """get_latest raises CheckpointNotFoundError for a workflow with no checkpoint."""

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        found = await super().get_latest(workflow_name=workflow_name, **options)
        if found is None:
            raise CheckpointNotFoundError(f"no checkpoint for workflow {workflow_name!r}")
        return found


class SaveDropsNoneMetadata(Wrapper):
    """save compacts metadata by leaving out keys whose value is None (on a copy)."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        metadata = getattr(checkpoint, "metadata", None)
        if isinstance(metadata, dict) and any(v is None for v in metadata.values()):
            checkpoint = replace(checkpoint, metadata={k: v for k, v in metadata.items() if v is not None})
        return await super().save(checkpoint, **options)


class SaveJsonNormalisesState(Wrapper):
    """save normalises state through JSON (``json.loads(json.dumps(state, default=str))``) so it
    stays portable: tuples become lists, int keys strings."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        state = getattr(checkpoint, "state", None)
        if isinstance(state, dict):
            try:
                normalised = json.loads(json.dumps(state, default=str))
            except (TypeError, ValueError):
                normalised = state
            if normalised != state or repr(normalised) != repr(state):
                checkpoint = replace(checkpoint, state=normalised)
        return await super().save(checkpoint, **options)


class TimestampsToSeconds(Wrapper):
    """save truncates timestamps to whole seconds (an index column of seconds precision)."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        stamp = getattr(checkpoint, "timestamp", "")
        if isinstance(stamp, str) and "." in stamp[:30]:
            head, _, rest = stamp.partition(".")
            digits = len(rest) - len(rest.lstrip("0123456789"))
            checkpoint = replace(checkpoint, timestamp=head + rest[digits:])
        return await super().save(checkpoint, **options)


class PruneKeepsOneMore(Wrapper):
    """prune keeps keep_last checkpoints besides the head ("the latest plus N"): one too many."""

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        return int(await self.inner.prune(workflow_name=workflow_name, keep_last=keep_last + 1))


class PruneZeroKeepsAll(Wrapper):
    """prune treats keep_last=0 as "no limit" (``if not keep_last: return 0``)."""

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        if not keep_last:
            return 0
        return int(await self.inner.prune(workflow_name=workflow_name, keep_last=keep_last))


class SaveForwardsCheckpointOnly(Wrapper):
    """save forwards the checkpoint alone (MAF's signature): expected_latest_id is accepted and
    dropped, while ``fencing`` is still declared."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        return await self.inner.save(checkpoint)


class LatestDropsSignature(Wrapper):
    """get_latest forwards workflow_name only: graph_signature_hash is accepted and dropped."""

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        return await self.inner.get_latest(workflow_name=workflow_name)


class IdsAlwaysIncludeNested(Wrapper):
    """list_checkpoint_ids always passes include_nested=True ("list everything by default")."""

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        options["include_nested"] = True
        return await super().list_checkpoint_ids(workflow_name=workflow_name, **options)


class WritesSortedByTask(Wrapper):
    """list_writes answers sorted by (task_id, index) for a stable output."""

    async def list_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> list[Any]:
        found = await self.inner.list_writes(checkpoint_id, workflow_name=workflow_name)
        return sorted(found, key=lambda w: (w.task_id, w.index))


class DeleteAlsoDropsWrites(Wrapper):
    """delete also deletes the checkpoint's pending writes (tidy: no orphans)."""

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        try:
            loaded = await self.inner.load(checkpoint_id)
        except CheckpointStorageError:
            loaded = None
        if loaded is not None:
            await self.inner.delete_writes(checkpoint_id, workflow_name=loaded.workflow_name)
        return await super().delete(checkpoint_id)


class PutWritesOneByOne(Wrapper):
    """put_writes stores the writes one call each (a batch size of one): an invalid write stops
    the call after the writes before it were stored."""

    async def put_writes(
        self, checkpoint_id: CheckpointID, writes: Sequence[Any], *, workflow_name: str
    ) -> None:
        for write in writes:
            await self.inner.put_writes(checkpoint_id, [write], workflow_name=workflow_name)


class CancelRollsBack(Wrapper):
    """A cancelled save deletes the checkpoint it was saving ("leave no trace"), also when that
    id was already stored before (a retried save)."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        try:
            await asyncio.sleep(0)
            return await super().save(checkpoint, **options)
        except asyncio.CancelledError:
            with contextlib.suppress(CheckpointStorageError):
                await asyncio.shield(self.inner.delete(checkpoint.checkpoint_id))
            raise


class LoadErrorsAsNotFound(Wrapper):
    """load turns every storage error into CheckpointNotFoundError (callers handle one error)."""

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        try:
            return await super().load(checkpoint_id, **options)
        except CheckpointNotFoundError:
            raise
        except CheckpointStorageError as error:
            raise CheckpointNotFoundError(f"checkpoint {checkpoint_id!r} not found: {error}") from error


# ====================================================================== six methods


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


class SixResaveBecomesLatest(SixMethods):
    """get_latest answers the checkpoint saved last through this object, also when that save was
    a no-op re-save of an older checkpoint (a retry)."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[str, CheckpointID] = {}

    async def save(self, checkpoint: Any) -> CheckpointID:
        saved = await super().save(checkpoint)
        self.last[checkpoint.workflow_name] = saved
        return saved

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self.last = {k: v for k, v in self.last.items() if v != checkpoint_id}
        return await super().delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str) -> Any:
        remembered = self.last.get(workflow_name)
        if remembered is not None:
            return await self.inner.load(remembered)
        return await super().get_latest(workflow_name=workflow_name)


class SixDeleteMissingRaises(SixMethods):
    """delete of an id that is not stored raises CheckpointNotFoundError instead of answering
    False."""

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        if not await super().delete(checkpoint_id):
            raise CheckpointNotFoundError(f"checkpoint {checkpoint_id!r} not found")
        return True


class SixResaveAlwaysConflicts(SixMethods):
    """Checkpoints are immutable, so saving a stored id raises CheckpointConflictError, even with
    the same content."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        try:
            await self.inner.load(checkpoint.checkpoint_id)
        except CheckpointNotFoundError:
            return await super().save(checkpoint)
        raise CheckpointConflictError(f"checkpoint {checkpoint.checkpoint_id!r} already stored")


class SixFireAndForgetSave(SixMethods):
    """save schedules the write as a task and returns the id at once (the runner need not wait)."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: set[asyncio.Task[Any]] = set()

    async def save(self, checkpoint: Any) -> CheckpointID:
        task = asyncio.ensure_future(self.inner.save(checkpoint))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return str(checkpoint.checkpoint_id)


class SixLockBoundToFirstLoop(SixMethods):
    """Saves take turns under an asyncio.Lock made once, in __init__: once a save waited on it,
    the lock belongs to that event loop, and the next asyncio.run() cannot save."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = asyncio.Lock()

    async def save(self, checkpoint: Any) -> CheckpointID:
        async with self.lock:
            await asyncio.sleep(0)
            return await super().save(checkpoint)


class SixIdsNfc(SixMethods):
    """Ids are NFC-normalised on save, load and delete (so they compare as people read them)."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        checkpoint = replace(checkpoint, checkpoint_id=unicodedata.normalize("NFC", checkpoint.checkpoint_id))
        return await super().save(checkpoint)

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        return await super().load(unicodedata.normalize("NFC", checkpoint_id))

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return await super().delete(unicodedata.normalize("NFC", checkpoint_id))


class SixStripsWorkflowNames(SixMethods):
    """Workflow names are stripped of surrounding whitespace on save and in every query."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        return await super().save(replace(checkpoint, workflow_name=checkpoint.workflow_name.strip()))

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return await super().list_checkpoints(workflow_name=workflow_name.strip())

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return await super().list_checkpoint_ids(workflow_name=workflow_name.strip())

    async def get_latest(self, *, workflow_name: str) -> Any:
        return await super().get_latest(workflow_name=workflow_name.strip())


class SixListsRecentHundred(SixMethods):
    """The listings answer the 100 checkpoints committed last ("recent history")."""

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return (await super().list_checkpoints(workflow_name=workflow_name))[-100:]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        return (await super().list_checkpoint_ids(workflow_name=workflow_name))[-100:]


class SixLoadAcceptsPrefix(SixMethods):
    """load accepts a unique prefix of an id (short ids, as git does) when the id itself is not
    stored."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[CheckpointID, str] = {}

    async def save(self, checkpoint: Any) -> CheckpointID:
        saved = await super().save(checkpoint)
        self.ids[saved] = checkpoint.workflow_name
        return saved

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        self.ids.pop(checkpoint_id, None)
        return await super().delete(checkpoint_id)

    async def load(self, checkpoint_id: CheckpointID) -> Any:
        try:
            return await super().load(checkpoint_id)
        except CheckpointNotFoundError:
            matches = [i for i in self.ids if i.startswith(checkpoint_id)]
            if checkpoint_id and len(matches) == 1:
                return await super().load(matches[0])
            raise


# ====================================================================== the registry


Entry = tuple[str, Callable[[], StorageTarget], str]


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


def _entries() -> list[Entry]:
    broken_backends: list[type[FencedDictBackend]] = [
        LatestWithoutRivals,
        ListIdsNewestFirst,
        ListBodiesPageSkipsOne,
        LoadIgnoresCase,
        WorkflowNamesNfc,
        WorkflowNamesCaseFolded,
        KeyedByWorkflowAndId,
        FenceNoneIsNoFence,
        FenceOnNewestCommit,
        LatestFiltersAfterHead,
        ListBodiesIgnoresSignature,
        InsertUpserts,
    ]
    broken_dirs: list[type[DirBackend]] = [
        DirDeletesNotJournaled,
        DirBodyAsText,
        DirRepairNotJournaled,
        DirJournalWrittenOnClose,
        DirReadsJournalOnOpenOnly,
        DirFileWorkOnLoopThread,
    ]
    broken_wrappers: list[type[Wrapper]] = [
        IdsCacheIgnoresSignature,
        LoadCacheSkipsSignatureCheck,
        CloseTwiceRaises,
        CloseLeavesInnerOpen,
        NewHandleIsFresh,
        ClosedRaisesRuntimeError,
        LoadMissingReturnsNone,
        LatestRaisesWhenEmpty,
        SaveDropsNoneMetadata,
        SaveJsonNormalisesState,
        TimestampsToSeconds,
        PruneKeepsOneMore,
        PruneZeroKeepsAll,
        SaveForwardsCheckpointOnly,
        LatestDropsSignature,
        IdsAlwaysIncludeNested,
        WritesSortedByTask,
        DeleteAlsoDropsWrites,
        PutWritesOneByOne,
        CancelRollsBack,
        LoadErrorsAsNotFound,
    ]
    broken_six: list[type[SixMethods]] = [
        SixResaveBecomesLatest,
        SixDeleteMissingRaises,
        SixResaveAlwaysConflicts,
        SixFireAndForgetSave,
        SixLockBoundToFirstLoop,
        SixIdsNfc,
        SixStripsWorkflowNames,
        SixListsRecentHundred,
        SixLoadAcceptsPrefix,
    ]
    entries: list[Entry] = []
    entries += [(c.__name__, backend_target(c), _doc(c)) for c in broken_backends]
    entries += [(c.__name__, dir_target(c), _doc(c)) for c in broken_dirs]
    entries += [(c.__name__, wrapped(c), _doc(c)) for c in broken_wrappers]
    entries += [(c.__name__, six(c), _doc(c)) for c in broken_six]
    return entries


ENTRIES: list[Entry] = _entries()
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = [
    (c.__name__, backend_target(c), _doc(c))
    for c in (RemoveDropsEmptyCounter, WalkOneTooDeep, OverwriteTakesNewDigest)
]
"""Written as broken, judged not to break the contract as built (tests/kit/blind_batch_five.md
says why): without ``inspect`` no caller sees a sequence number, the engine cuts a walk at
``max_depth`` whatever the backend returns, and docs/backends.md allows either digest on
``overwrite_body``. Each passes the whole kit."""

HONEST: list[Entry] = [
    ("FencedDictBackend", backend_target(FencedDictBackend), _doc(FencedDictBackend)),
    ("DirBackend", dir_target(DirBackend), _doc(DirBackend)),
    ("Wrapper", wrapped(Wrapper), _doc(Wrapper)),
    ("SixMethods", six(SixMethods), _doc(SixMethods)),
]
"""Honest storages, one per style: each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
