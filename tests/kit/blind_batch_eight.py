"""An eighth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/registry.md, docs/integrity.md, docs/conformance.md's prose, examples/ and
the public author API could ship. Three styles:

* ``FileBackend``: one JSON file per record in a directory (a temporary directory per store),
  every file written to a temporary name and moved into place with ``os.replace``, one index file
  per workflow (its counter, its entries in commit order, its tombstones), a marker file per
  tombstoned id, names and ids hashed into file names, workflows listed with ``os.scandir``;
  every primitive runs on the handle's own worker thread under an ``flock`` of the directory's
  lock file, so handles and processes take turns;
* ``DbmBackend``: the same records as values of a ``dbm.dumb`` database (a temporary path per
  store), synced after every write; a generation file, bumped by every writer, tells a handle
  that another handle or process wrote since it read the database's index;
* wrappers over the built-in in-memory backend (``LayerBackend`` and one layer each: a
  read-replica router, shards by workflow name, compressed bodies, encrypted bodies, a
  multi-tenant name prefixer, an audit log, a memoizing ``load`` cache).

No style declares ``ttl``: the ``expiry`` family waits out the storage's own time to live, and one
that short expires checkpoints under every other clause.

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_eight.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dbm.dumb
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import tempfile
import threading
import unicodedata
import uuid
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self
from urllib.parse import quote

from conformance import StorageTarget
from storages import CheckpointCorruptedError, NestedCheckpointDeletionError, StorageUnavailableError
from storages.backend import (
    Backend,
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    latest_record,
    nested_id_conflict,
    pruned_records,
    rivals_of,
)
from storages.codec import CheckpointCodec
from storages.contract import Capability, CheckpointID, CheckpointInfo
from storages.engine import CheckpointStore
from storages.memory.backend import MemoryBackend

Entry = tuple[str, Callable[[], StorageTarget], str]

EVERY_CAPABILITY_BUT_TTL = frozenset(c for c in Capability if c is not Capability.TTL)

# ====================================================================== records on a medium


@dataclass(frozen=True)
class IndexRow:
    """One entry of a workflow's index: what latest, listings and prune read without a body."""

    checkpoint_id: CheckpointID
    sequence: int
    previous_checkpoint_id: CheckpointID | None
    graph_signature_hash: str
    container_id: CheckpointID | None


def row_of(record: CheckpointRecord, sequence: int, children: list[CheckpointID]) -> dict[str, Any]:
    """What is persisted for one record (JSON-safe: the body in base64)."""
    return {
        "id": record.checkpoint_id,
        "workflow": record.workflow_name,
        "previous": record.previous_checkpoint_id,
        "signature": record.graph_signature_hash,
        "container": record.container_id,
        "root": record.root_id,
        "position": record.position,
        "digest": record.digest,
        "sequence": sequence,
        "children": children,
        "body": base64.b64encode(record.body).decode("ascii"),
    }


def record_of(row: Mapping[str, Any]) -> CheckpointRecord:
    try:
        return CheckpointRecord(
            str(row["id"]),
            str(row["workflow"]),
            None if row["previous"] is None else str(row["previous"]),
            str(row["signature"]),
            base64.b64decode(str(row["body"]), validate=True),
            str(row["digest"]),
            None if row["container"] is None else str(row["container"]),
            None if row["root"] is None else str(row["root"]),
            int(row["position"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointCorruptedError(str(row.get("id", "?")), f"unreadable record: {exc}") from None


def stored(row: Mapping[str, Any]) -> StoredBody:
    record = record_of(row)
    return StoredBody(record.checkpoint_id, record.body, entry=record.index_entry())


def new_index() -> dict[str, Any]:
    return {"counter": 0, "entries": {}, "tombstones": []}


class Medium:
    """Where a disk backend keeps records, workflow indexes and tombstone markers; every method
    runs on the handle's worker thread with the store's lock held."""

    def record(self, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        raise NotImplementedError

    def put_record(self, row: dict[str, Any]) -> None:
        raise NotImplementedError

    def drop_record(self, checkpoint_id: CheckpointID) -> None:
        raise NotImplementedError

    def index(self, workflow_name: str) -> dict[str, Any]:
        raise NotImplementedError

    def put_index(self, workflow_name: str, index: dict[str, Any]) -> None:
        raise NotImplementedError

    def indexed_workflows(self) -> list[str]:
        raise NotImplementedError

    def marks(self, checkpoint_id: CheckpointID) -> list[str]:
        """The workflows whose prune tombstoned this id."""
        raise NotImplementedError

    def put_marks(self, checkpoint_id: CheckpointID, workflows: list[str]) -> None:
        raise NotImplementedError

    def begin(self) -> None:
        """Called when the lock is taken."""

    def commit(self) -> None:
        """Called after a primitive that wrote, before the lock is released."""

    def close(self) -> None:
        """Called on the worker thread when the handle closes."""


class DiskBackend(Backend):
    """Every primitive of a record store on a :class:`Medium`, each run whole on this handle's
    worker thread under an ``flock`` of the store's lock file (handles and processes take turns)."""

    capabilities = EVERY_CAPABILITY_BUT_TTL

    def __init__(self, path: str) -> None:
        self.path = path
        self.pool: ThreadPoolExecutor | None = None
        self.medium = self.make_medium()

    def make_medium(self) -> Medium:
        raise NotImplementedError

    def describe(self) -> str:
        return f"{type(self).__name__.lower()}://{self.path}"

    def new_handle(self) -> Self:
        return type(self)(self.path)

    async def close(self) -> None:
        pool, self.pool = self.pool, None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(pool, self.medium.close)
            pool.shutdown(wait=True)

    async def run(self, work: Callable[..., Any], *args: Any, writes: bool = False) -> Any:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="blind8-disk")
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.locked, work, args, writes)

    def locked(self, work: Callable[..., Any], args: tuple[Any, ...], writes: bool) -> Any:
        with open(os.path.join(self.path, "lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self.medium.begin()
                result = work(*args)
                if writes:
                    self.medium.commit()
                return result
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # ---------------------------------------------------------------- reading the medium

    def committed(self, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        """The record stored under the id, if its workflow's index lists it (a record file a
        killed save wrote before its index entry is no checkpoint)."""
        row = self.medium.record(checkpoint_id)
        if row is None or checkpoint_id not in self.medium.index(str(row["workflow"]))["entries"]:
            return None
        return row

    def rows(self, workflow_name: str) -> list[IndexRow]:
        entries = self.medium.index(workflow_name)["entries"]
        return [IndexRow(cid, *entry) for cid, entry in entries.items()]

    def top_rows(self, workflow_name: str, graph_signature_hash: str | None = None) -> list[IndexRow]:
        return [
            row
            for row in self.rows(workflow_name)
            if row.container_id is None and graph_signature_hash in (None, row.graph_signature_hash)
        ]

    def family(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The record and every record nested in it, at any depth."""
        found: list[dict[str, Any]] = []
        pending = [dict(row)]
        while pending:
            current = pending.pop()
            found.append(current)
            for child in current["children"]:
                child_row = self.medium.record(child)
                if child_row is not None:
                    pending.append(child_row)
        return found

    def body_of(self, checkpoint_id: CheckpointID) -> StoredBody:
        row = self.medium.record(checkpoint_id)
        if row is None:
            raise CheckpointCorruptedError(checkpoint_id, "indexed, but its record is gone")
        return stored(row)

    # ---------------------------------------------------------------- writing the medium

    def write(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        """The one write of a save, plain or fenced."""
        top = records[0]
        existing = self.committed(top.checkpoint_id)
        if existing is not None:
            return InsertResult.of_stored_digest(str(existing["digest"]), top)
        for record in records[1:]:
            if self.committed(record.checkpoint_id) is not None:
                raise nested_id_conflict(records, record.checkpoint_id)
        children: dict[CheckpointID, list[tuple[int, CheckpointID]]] = {}
        for record in records[1:]:
            assert record.container_id is not None
            children.setdefault(record.container_id, []).append((record.position, record.checkpoint_id))
        indexes: dict[str, dict[str, Any]] = {}
        for record in records:
            index = indexes.setdefault(record.workflow_name, self.medium.index(record.workflow_name))
            sequence = self.next_sequence(index)
            kids = [cid for _, cid in sorted(children.get(record.checkpoint_id, []))]
            self.medium.put_record(row_of(record, sequence, kids))
            index["entries"][record.checkpoint_id] = [
                sequence,
                record.previous_checkpoint_id,
                record.graph_signature_hash,
                record.container_id,
            ]
        for workflow_name, index in indexes.items():
            self.medium.put_index(workflow_name, index)
        return InsertResult.INSERTED

    def next_sequence(self, index: dict[str, Any]) -> int:
        index["counter"] = int(index["counter"]) + 1
        return int(index["counter"])

    def drop_family(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        family = self.family(row)
        indexes: dict[str, dict[str, Any]] = {}
        for member in family:
            name = str(member["workflow"])
            index = indexes.setdefault(name, self.medium.index(name))
            index["entries"].pop(member["id"], None)
            self.medium.drop_record(str(member["id"]))
        for name, index in indexes.items():
            self.medium.put_index(name, index)
        return family

    def tombstone(self, workflow_name: str, checkpoint_ids: Sequence[CheckpointID]) -> None:
        index = self.medium.index(workflow_name)
        for checkpoint_id in checkpoint_ids:
            if checkpoint_id not in index["tombstones"]:
                index["tombstones"].append(checkpoint_id)
            marks = self.medium.marks(checkpoint_id)
            if workflow_name not in marks:
                self.medium.put_marks(checkpoint_id, [*marks, workflow_name])
        self.medium.put_index(workflow_name, index)

    # ---------------------------------------------------------------- the primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.run(self.write, records, writes=True)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.run(self.fenced_write, records, expected_latest_id, writes=True)

    def fenced_write(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        head = latest_record(self.top_rows(records[0].workflow_name))
        latest = None if head is None else head.checkpoint_id
        if latest != expected_latest_id and self.committed(records[0].checkpoint_id) is None:
            return FenceCheck(latest, None)
        return FenceCheck.after_insert(latest, self.write(records))

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.run(self.load_now, checkpoint_id)

    def load_now(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        row = self.committed(checkpoint_id)
        return None if row is None else stored(row)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.run(self.latest_now, workflow_name, graph_signature_hash)

    def latest_now(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self.top_rows(workflow_name)
        head = latest_record(rows, graph_signature_hash)
        if head is None:
            return None
        rivals = [self.body_of(rival.checkpoint_id) for rival in rivals_of(rows, head)]
        return replace(self.body_of(head.checkpoint_id), rivals=rivals)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.run(self.list_bodies_now, workflow_name, graph_signature_hash, include_nested)

    def list_bodies_now(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[StoredBody]:
        ids = self.list_ids_now(workflow_name, graph_signature_hash, include_nested)
        return [self.body_of(checkpoint_id) for checkpoint_id in ids]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self.run(self.list_ids_now, workflow_name, graph_signature_hash, include_nested)

    def list_ids_now(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointID]:
        return [
            row.checkpoint_id
            for row in self.rows(workflow_name)
            if (include_nested or row.container_id is None)
            and graph_signature_hash in (None, row.graph_signature_hash)
        ]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return bool(await self.run(self.remove_now, checkpoint_id, writes=True))

    def remove_now(self, checkpoint_id: CheckpointID) -> bool:
        row = self.committed(checkpoint_id)
        if row is None:
            return False
        if row["container"] is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, str(row["container"]))
        self.drop_family(row)
        return True

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.run(self.nested_bodies_now, list(checkpoint_ids))

    def nested_bodies_now(self, checkpoint_ids: list[CheckpointID]) -> dict[CheckpointID, bytes]:
        bodies: dict[CheckpointID, bytes] = {}
        for checkpoint_id in checkpoint_ids:
            row = self.committed(checkpoint_id)
            if row is not None:
                for member in self.family(row)[1:]:
                    bodies[str(member["id"])] = record_of(member).body
        return bodies

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.run(self.nested_ids_now, checkpoint_id)

    def nested_ids_now(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        row = self.committed(checkpoint_id)
        return None if row is None else [str(child) for child in row["children"]]

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.run(self.walk_now, checkpoint_id, max_depth, with_bodies)

    def walk_now(self, checkpoint_id: CheckpointID, max_depth: int, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            row = self.walk_step(checkpoint_id, current)
            if row is None:
                if current != checkpoint_id and self.medium.marks(current):
                    tombstones.add(current)
                break
            links[current] = row["previous"]
            if with_bodies:
                for member in self.family(row):
                    bodies[str(member["id"])] = record_of(member).body
            current = row["previous"]
        return WalkRecords(links, bodies, frozenset(tombstones))

    def walk_step(self, start: CheckpointID, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        return self.committed(checkpoint_id)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return int(await self.run(self.prune_now, workflow_name, keep_last, writes=True))

    def top_records(self, workflow_name: str) -> list[CheckpointRecord]:
        return [record_of(self.body_row(row.checkpoint_id)) for row in self.top_rows(workflow_name)]

    def body_row(self, checkpoint_id: CheckpointID) -> dict[str, Any]:
        row = self.medium.record(checkpoint_id)
        if row is None:
            raise CheckpointCorruptedError(checkpoint_id, "indexed, but its record is gone")
        return row

    def prune_now(self, workflow_name: str, keep_last: int) -> int:
        doomed = pruned_records(self.top_records(workflow_name), keep_last)
        for record in doomed:
            family = self.drop_family(self.body_row(record.checkpoint_id))
            self.tombstone(workflow_name, [str(member["id"]) for member in family])
        return len(doomed)

    async def delete_workflow(self, workflow_name: str) -> int:
        return int(await self.run(self.delete_workflow_now, workflow_name, writes=True))

    def delete_workflow_now(self, workflow_name: str) -> int:
        top = self.top_rows(workflow_name)
        for row in top:
            self.drop_family(self.body_row(row.checkpoint_id))
        index = self.medium.index(workflow_name)
        for checkpoint_id in index["tombstones"]:
            marks = [name for name in self.medium.marks(checkpoint_id) if name != workflow_name]
            self.medium.put_marks(checkpoint_id, marks)
        index["tombstones"] = []
        self.medium.put_index(workflow_name, index)
        return len(top)

    async def workflow_names(self) -> list[str]:
        return list(await self.run(self.workflow_names_now))

    def workflow_names_now(self) -> list[str]:
        return [name for name in self.medium.indexed_workflows() if self.top_rows(name)]

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return bool(await self.run(self.overwrite_now, checkpoint_id, body, writes=True))

    def overwrite_now(self, checkpoint_id: CheckpointID, body: bytes) -> bool:
        row = self.committed(checkpoint_id)
        if row is None:
            return False
        row["body"] = base64.b64encode(body).decode("ascii")  # the digest stays: what was saved
        self.medium.put_record(row)
        return True

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.run(self.info_now, checkpoint_id)

    def info_now(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        row = self.committed(checkpoint_id)
        return None if row is None else record_of(row).info(int(row["sequence"]))

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return list(await self.run(self.records_now, workflow_name))

    def records_now(self, workflow_name: str | None) -> list[CheckpointInfo]:
        names = self.medium.indexed_workflows() if workflow_name is None else [workflow_name]
        infos: list[CheckpointInfo] = []
        for name in names:
            for row in self.rows(name):
                infos.append(record_of(self.body_row(row.checkpoint_id)).info(row.sequence))
        return infos

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return list(await self.run(self.tombstones_now, workflow_name))

    def tombstones_now(self, workflow_name: str | None) -> list[CheckpointID]:
        names = self.medium.indexed_workflows() if workflow_name is None else [workflow_name]
        return [str(cid) for name in names for cid in self.medium.index(name)["tombstones"]]


# ====================================================================== one file per record


def file_key(text: str) -> str:
    """A file name for an id or a workflow name: any text, any length, case kept."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Files(Medium):
    """Record files ``r/<key>``, workflow index files ``w/<key>``, tombstone markers ``t/<key>``;
    every write goes to a temporary file moved into place (``os.replace``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def file(self, folder: str, key: str) -> str:
        return os.path.join(self.path, folder, key)

    def read(self, path: str) -> Any | None:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise CheckpointCorruptedError(os.path.basename(path), f"unreadable file: {exc}") from None

    def replace_file(self, path: str, value: Any) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(value, handle)
        os.replace(temporary, path)

    def remove_file(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def record_key(self, checkpoint_id: CheckpointID) -> str:
        return file_key(checkpoint_id)

    def index_key(self, workflow_name: str) -> str:
        return file_key(workflow_name)

    def record(self, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        row = self.read(self.file("r", self.record_key(checkpoint_id)))
        return None if row is None or row.get("id") != checkpoint_id else dict(row)

    def put_record(self, row: dict[str, Any]) -> None:
        self.replace_file(self.file("r", self.record_key(str(row["id"]))), row)

    def drop_record(self, checkpoint_id: CheckpointID) -> None:
        self.remove_file(self.file("r", self.record_key(checkpoint_id)))

    def index(self, workflow_name: str) -> dict[str, Any]:
        found = self.read(self.file("w", self.index_key(workflow_name)))
        if found is None or found.get("name") != workflow_name:
            return new_index()
        return dict(found["index"])

    def put_index(self, workflow_name: str, index: dict[str, Any]) -> None:
        self.replace_file(
            self.file("w", self.index_key(workflow_name)), {"name": workflow_name, "index": index}
        )

    def indexed_workflows(self) -> list[str]:
        folder = os.path.join(self.path, "w")
        if not os.path.isdir(folder):
            return []
        names = []
        with os.scandir(folder) as listing:
            for entry in listing:
                if entry.name.endswith(".tmp"):
                    continue
                found = self.read(entry.path)
                if found is not None:
                    names.append(str(found["name"]))
        return names

    def marks(self, checkpoint_id: CheckpointID) -> list[str]:
        found = self.read(self.file("t", file_key(checkpoint_id)))
        return [] if found is None else [str(name) for name in found]

    def put_marks(self, checkpoint_id: CheckpointID, workflows: list[str]) -> None:
        path = self.file("t", file_key(checkpoint_id))
        if workflows:
            self.replace_file(path, workflows)
        else:
            self.remove_file(path)


class FileBackend(DiskBackend):
    """Checkpoints as files in a directory: one JSON file per record (``r/<sha256 of the id>``,
    holding the id itself, its fields, its sequence, its children and its body in base64), one
    index file per workflow (``w/<sha256 of the name>``: its counter, its entries in commit order,
    its tombstones), a marker file per tombstoned id (``t/``); each written to a temporary file
    and moved into place with ``os.replace``; workflows listed with ``os.scandir``. Every primitive
    runs on the handle's worker thread under an ``flock`` of the directory's lock file."""

    def make_medium(self) -> Medium:
        return Files(self.path)


# ---------------------------------------------------------------------- its broken variants


class CasefoldFiles(Files):
    def record_key(self, checkpoint_id: CheckpointID) -> str:
        return file_key(checkpoint_id.casefold())


class FileNamesCasefolded(FileBackend):
    """Record file names hash the casefolded id, so that a store copied to a case-insensitive
    filesystem (macOS, Windows) keeps one file per id: ids differing only in case share a file."""

    def make_medium(self) -> Medium:
        return CasefoldFiles(self.path)


class NfcFiles(Files):
    def record_key(self, checkpoint_id: CheckpointID) -> str:
        return file_key(unicodedata.normalize("NFC", checkpoint_id))


class FileNamesNormalizedNfc(FileBackend):
    """Record file names hash the NFC form of the id (macOS stores file names normalised, so a
    copied store would not find the decomposed form): ids differing only in normalisation share a file."""

    def make_medium(self) -> Medium:
        return NfcFiles(self.path)


class QuotedFiles(Files):
    def record_key(self, checkpoint_id: CheckpointID) -> str:
        return quote(checkpoint_id, safe="")[:200]


class FileNamesQuotedTruncated(FileBackend):
    """Record files are named by the percent-encoded id (readable in a directory listing), cut to
    200 characters to stay under the filesystem's 255-byte name limit: long ids sharing their
    encoded first 200 characters share a file."""

    def make_medium(self) -> Medium:
        return QuotedFiles(self.path)


class SlashFiles(Files):
    def record_key(self, checkpoint_id: CheckpointID) -> str:
        return file_key(checkpoint_id.replace("/", "_"))


class FileSlashReplaced(FileBackend):
    """Record file names hash the id with "/" replaced by "_" (the one character a POSIX file name
    cannot hold, replaced before an earlier naming scheme was hashed): "a/b" and "a_b" share a file."""

    def make_medium(self) -> Medium:
        return SlashFiles(self.path)


class QuotedIndexFiles(Files):
    def index_key(self, workflow_name: str) -> str:
        return quote(workflow_name, safe="")


class FileIndexNamedByQuotedName(FileBackend):
    """Workflow index files are named by the percent-encoded workflow name (readable with ``ls``):
    a long name with non-ASCII characters passes the filesystem's 255-byte limit and its save
    fails with OSError (File name too long)."""

    def make_medium(self) -> Medium:
        return QuotedIndexFiles(self.path)


class InPlaceFiles(Files):
    def put_record(self, row: dict[str, Any]) -> None:
        path = self.file("r", self.record_key(str(row["id"])))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:  # no temporary file: one write less
            handle.write(json.dumps(row))


class FileRecordWrittenInPlace(FileBackend):
    """Record files are written in place (opened with "w", truncated, then written) rather than
    through a temporary file, and load reads a record file without the lock (one file, nothing to
    coordinate): a load racing a raw write or a save reads a truncated file and reports corruption."""

    def make_medium(self) -> Medium:
        return InPlaceFiles(self.path)

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="blind8-disk")
        return await asyncio.get_running_loop().run_in_executor(None, self.load_now, checkpoint_id)


class FileListIdsByMtime(FileBackend):
    """list_ids reads the workflow's ids from its index, then orders them by their record files'
    modification times (``os.stat``), the order in which they were written: saves within one
    clock tick of the filesystem come back in hash order."""

    def list_ids_now(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointID]:
        ids = super().list_ids_now(workflow_name, graph_signature_hash, include_nested)
        files = self.medium
        assert isinstance(files, Files)

        def written(checkpoint_id: CheckpointID) -> tuple[int, str]:
            path = files.file("r", files.record_key(checkpoint_id))
            return (os.stat(path).st_mtime_ns, path)

        return sorted(ids, key=written)


class FileIndexCachedByMtime(FileBackend):
    """Each handle keeps the workflow index files it read and reads one again only when its
    modification time changed: another handle's write within the same filesystem clock tick is not seen."""

    def make_medium(self) -> Medium:
        return MtimeCachedFiles(self.path)


class MtimeCachedFiles(Files):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.cached: dict[str, tuple[int, dict[str, Any]]] = {}

    def index(self, workflow_name: str) -> dict[str, Any]:
        path = self.file("w", self.index_key(workflow_name))
        try:
            mtime = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            return new_index()
        hit = self.cached.get(workflow_name)
        if hit is not None and hit[0] == mtime:
            return json.loads(json.dumps(hit[1]))
        index = super().index(workflow_name)
        self.cached[workflow_name] = (mtime, json.loads(json.dumps(index)))
        return index


class FileThreadLockOnly(FileBackend):
    """Handles take turns on a lock shared by this process's handles of the directory (a
    ``threading.Lock``), not an ``flock``: the store is meant for one process, but another process
    opening it read-modify-writes the same index files at the same time."""

    process_locks: ClassVar[dict[str, threading.Lock]] = {}

    def locked(self, work: Callable[..., Any], args: tuple[Any, ...], writes: bool) -> Any:
        lock = self.process_locks.setdefault(self.path, threading.Lock())
        with lock:
            self.medium.begin()
            result = work(*args)
            if writes:
                self.medium.commit()
            return result


class FileUnlinkDeferred(FileBackend):
    """remove takes the family out of the index at once and unlinks its record files on a
    background thread afterwards (unlinks are slow on network filesystems), and load reads the
    record file without checking the index: a load right after a delete can still find it."""

    def drop_family(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        family = self.family(row)
        indexes: dict[str, dict[str, Any]] = {}
        for member in family:
            name = str(member["workflow"])
            index = indexes.setdefault(name, self.medium.index(name))
            index["entries"].pop(member["id"], None)
        for name, index in indexes.items():
            self.medium.put_index(name, index)
        ids = [str(member["id"]) for member in family]

        def unlink_later() -> None:
            for checkpoint_id in ids:
                self.medium.drop_record(checkpoint_id)

        threading.Timer(0.05, unlink_later).start()
        return family

    def load_now(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        row = self.medium.record(checkpoint_id)
        return None if row is None else stored(row)


class FileWorkflowNamesScannedOnce(FileBackend):
    """workflow_names scans the index directory once per handle and then adds the names this
    handle saves under: workflows another handle creates or empties are not seen."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.known: list[str] | None = None

    def workflow_names_now(self) -> list[str]:
        if self.known is None:
            self.known = super().workflow_names_now()
        return list(self.known)

    def write(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = super().write(records)
        if self.known is not None and result is InsertResult.INSERTED:
            name = records[0].workflow_name
            if name not in self.known:
                self.known.append(name)
        return result


class FileWalkWithinWorkflowIndex(FileBackend):
    """walk follows previous ids through the starting record's workflow index (one file read for
    the whole chain): a previous id that names a checkpoint of another workflow ends the walk there."""

    def walk_step(self, start: CheckpointID, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        start_row = self.medium.record(start)
        row = self.committed(checkpoint_id)
        if row is None or start_row is None or row["workflow"] != start_row["workflow"]:
            return None
        return row


class FileRemoveIndexesTopLevelOnly(FileBackend):
    """remove deletes the family's record files but takes only the top-level record out of its
    workflow index: the nested records' entries stay in their workflows' index files."""

    def drop_family(self, row: Mapping[str, Any]) -> list[dict[str, Any]]:
        family = self.family(row)
        index = self.medium.index(str(row["workflow"]))
        index["entries"].pop(row["id"], None)
        self.medium.put_index(str(row["workflow"]), index)
        for member in family:
            self.medium.drop_record(str(member["id"]))
        return family


class FilePruneMarksOnlyInIndex(FileBackend):
    """prune lists the pruned ids in the workflow's index file but writes no marker file per id:
    a walk, which looks a missing id up by its marker, reports a pruned ancestor as missing."""

    def tombstone(self, workflow_name: str, checkpoint_ids: Sequence[CheckpointID]) -> None:
        index = self.medium.index(workflow_name)
        for checkpoint_id in checkpoint_ids:
            if checkpoint_id not in index["tombstones"]:
                index["tombstones"].append(checkpoint_id)
        self.medium.put_index(workflow_name, index)


class FileExistsThenReplace(FileBackend):
    """A save decides whether its id is new by ``os.path.exists`` on the record file before taking
    the lock (``os.replace`` is atomic, so only the index needs the lock): two saves of one id with
    different content both find it absent, and the second replaces the first."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="blind8-disk")
        files = self.medium
        assert isinstance(files, Files)
        path = files.file("r", files.record_key(records[0].checkpoint_id))
        exists = await asyncio.get_running_loop().run_in_executor(self.pool, os.path.exists, path)
        if exists:
            return await self.run(self.write, records, writes=True)
        await asyncio.sleep(0)  # the index update waits its turn for the lock
        return await self.run(self.write_new, records, writes=True)

    def write_new(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        existing = self.medium.record(top.checkpoint_id)
        if existing is not None:  # written meanwhile: replace it, the index keeps one entry
            index = self.medium.index(str(existing["workflow"]))
            index["entries"].pop(top.checkpoint_id, None)
            self.medium.put_index(str(existing["workflow"]), index)
        return self.write(records)


# ====================================================================== a dbm.dumb database


def generation(path: str) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


class Dumb(Medium):
    """Records under ``r\\0<id>``, workflow indexes under ``w\\0<name>``, tombstone markers under
    ``t\\0<id>`` in a ``dbm.dumb`` database, values JSON; synced after every write, and a
    generation file bumped with it, so another handle or process reopens the database."""

    flag = "c"

    def __init__(self, path: str) -> None:
        self.base = os.path.join(path, "store")
        self.generation_file = os.path.join(path, "generation")
        self.db: Any = None
        self.seen = ""

    def key(self, kind: str, text: str) -> str:
        return f"{kind}\0{text}"

    def begin(self) -> None:
        current = generation(self.generation_file)
        if self.db is None or current != self.seen:
            if self.db is not None:
                # Dropped, not committed: dbm.dumb never clears its "modified" flag, so a close
                # would write its index file again from this handle's older view.
                self.db._modified = False
                self.db.close()
            self.db = dbm.dumb.open(self.base, self.flag)  # noqa: SIM115 - kept open, closed by close()
            self.seen = current

    def commit(self) -> None:
        self.db.sync()
        self.db._modified = False  # synced: nothing for a close to write
        self.bump()

    def bump(self) -> None:
        self.seen = uuid.uuid4().hex
        temporary = f"{self.generation_file}.{self.seen}.tmp"
        with open(temporary, "w", encoding="ascii") as handle:
            handle.write(self.seen)
        os.replace(temporary, self.generation_file)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    def get(self, key: str) -> Any | None:
        try:
            value = self.db[key]
        except KeyError:
            return None
        try:
            return json.loads(value)
        except ValueError as exc:
            raise CheckpointCorruptedError(repr(key), f"unreadable value: {exc}") from None

    def put(self, key: str, value: Any) -> None:
        self.db[key] = json.dumps(value)

    def drop(self, key: str) -> None:
        with contextlib.suppress(KeyError):
            del self.db[key]

    def record(self, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        row = self.get(self.key("r", checkpoint_id))
        return None if row is None or row.get("id") != checkpoint_id else dict(row)

    def put_record(self, row: dict[str, Any]) -> None:
        self.put(self.key("r", str(row["id"])), row)

    def drop_record(self, checkpoint_id: CheckpointID) -> None:
        self.drop(self.key("r", checkpoint_id))

    def index(self, workflow_name: str) -> dict[str, Any]:
        found = self.get(self.key("w", workflow_name))
        return new_index() if found is None else dict(found)

    def put_index(self, workflow_name: str, index: dict[str, Any]) -> None:
        self.put(self.key("w", workflow_name), index)

    def indexed_workflows(self) -> list[str]:
        prefix = b"w\0"
        return [key[len(prefix) :].decode("utf-8") for key in self.db if key.startswith(prefix)]

    def marks(self, checkpoint_id: CheckpointID) -> list[str]:
        found = self.get(self.key("t", checkpoint_id))
        return [] if found is None else [str(name) for name in found]

    def put_marks(self, checkpoint_id: CheckpointID, workflows: list[str]) -> None:
        if workflows:
            self.put(self.key("t", checkpoint_id), workflows)
        else:
            self.drop(self.key("t", checkpoint_id))


class DbmBackend(DiskBackend):
    """Checkpoints in a ``dbm.dumb`` database: a JSON value per record (``r\\0<id>``, its fields,
    sequence, children and body in base64), per workflow index (``w\\0<name>``: counter, entries in
    commit order, tombstones) and per tombstoned id (``t\\0<id>``); synced after every write, with
    a generation file bumped beside it so that other handles and processes reopen the database.
    Every primitive runs on the handle's worker thread under an ``flock`` of the store's lock file."""

    def make_medium(self) -> Medium:
        return Dumb(self.path)


# ---------------------------------------------------------------------- its broken variants


class Latin1Dumb(Dumb):
    def key(self, kind: str, text: str) -> str:
        return f"{kind}\0{text}".encode("latin-1", "replace").decode("latin-1")

    def record(self, checkpoint_id: CheckpointID) -> dict[str, Any] | None:
        row = self.get(self.key("r", checkpoint_id))
        return None if row is None else dict(row)


class DbmKeysLatin1(DbmBackend):
    """Keys are made Latin-1 (``encode("latin-1", "replace")``: dbm's ``.dir`` file is written as
    Latin-1), and a record is trusted to be the one its key names: ids outside Latin-1 that
    differ only there share a key."""

    def make_medium(self) -> Medium:
        return Latin1Dumb(self.path)


class SyncOnCloseDumb(Dumb):
    def commit(self) -> None:
        self.bump()  # the data file is written at once; the index file on close

    def close(self) -> None:
        super().close()


class DbmSyncOnlyOnClose(DbmBackend):
    """The database is synced when the handle closes, not after each write (dbm writes values to
    its data file at once): updates and deletes of keys stay in this handle's memory until then, so
    another process, or a handle after a crash, reads the database as it was."""

    def make_medium(self) -> Medium:
        return SyncOnCloseDumb(self.path)


class OpenOnceDumb(Dumb):
    def begin(self) -> None:
        if self.db is None:
            self.db = dbm.dumb.open(self.base, self.flag)  # noqa: SIM115 - kept open, closed by close()


class DbmOpenedOncePerHandle(DbmBackend):
    """Each handle opens the database once and keeps its index in memory (the generation file is
    written but never read back): another handle's or process's writes are not seen, and its own
    writes overwrite theirs."""

    def make_medium(self) -> Medium:
        return OpenOnceDumb(self.path)


class CommaIndexDumb(Dumb):
    def index(self, workflow_name: str) -> dict[str, Any]:
        found = self.get(self.key("w", workflow_name))
        if found is None:
            return new_index()
        ids = [cid for cid in str(found["ids"]).split(",") if cid]
        rows = found["rows"]
        return {
            "counter": found["counter"],
            "entries": {cid: rows[cid] for cid in ids if cid in rows},
            "tombstones": found["tombstones"],
        }

    def put_index(self, workflow_name: str, index: dict[str, Any]) -> None:
        entries = index["entries"]
        self.put(
            self.key("w", workflow_name),
            {
                "counter": index["counter"],
                "ids": ",".join(entries),
                "rows": entries,
                "tombstones": index["tombstones"],
            },
        )


class DbmIndexOrderCommaJoined(DbmBackend):
    """A workflow's commit order is kept as its ids joined with "," (the rows themselves in a map):
    an id holding a comma splits into pieces that name no row, and drops out of every listing."""

    def make_medium(self) -> Medium:
        return CommaIndexDumb(self.path)


class DigestDumb(Dumb):
    def put_record(self, row: dict[str, Any]) -> None:
        super().put_record(row)
        self.put(self.key("d", str(row["id"])), row["digest"])


class DbmDigestKeyOutlivesRecord(DbmBackend):
    """Each record's digest is also kept under a key of its own (``d\\0<id>``), which a save
    consults to decide whether the id is stored; remove and prune delete the record, not the digest."""

    def make_medium(self) -> Medium:
        return DigestDumb(self.path)

    def write(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        medium = self.medium
        assert isinstance(medium, Dumb)
        digest = medium.get(medium.key("d", records[0].checkpoint_id))
        if digest is not None:
            return InsertResult.of_stored_digest(str(digest), records[0])
        return super().write(records)


class DbmOpenedWithFlagN(DbmBackend):
    """A handle opens the database with flag "n" on its first operation (read as "new or
    existing", where it means "always a new, empty database"): every new handle, and every storage
    built anew on the store, empties it."""

    def make_medium(self) -> Medium:
        return NTruncDumb(self.path)


class NTruncDumb(Dumb):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.first = True

    def begin(self) -> None:
        if self.first:
            self.first = False
            if self.db is not None:
                self.db.close()
            self.db = dbm.dumb.open(self.base, "n")  # noqa: SIM115 - kept open, closed by close()
            self.seen = generation(self.generation_file)
            return
        super().begin()


class DbmWorkflowNamesKeepEmptied(DbmBackend):
    """workflow_names lists every workflow index key: a workflow whose checkpoints were all
    deleted keeps its index (its counter must outlive them) and is still listed."""

    def workflow_names_now(self) -> list[str]:
        return self.medium.indexed_workflows()


class OneSetDumb(Dumb):
    def index(self, workflow_name: str) -> dict[str, Any]:
        index = super().index(workflow_name)
        index["tombstones"] = list(self.get("tombstones") or [])
        return index

    def put_index(self, workflow_name: str, index: dict[str, Any]) -> None:
        self.put("tombstones", list(index["tombstones"]))
        super().put_index(workflow_name, {**index, "tombstones": []})


class DbmTombstonesOneKey(DbmBackend):
    """Tombstoned ids are kept in one set under one key for the whole store (a walk only asks
    whether an id was pruned): list_tombstones of a workflow names every workflow's pruned ids,
    and delete_workflow clears them all."""

    def make_medium(self) -> Medium:
        return OneSetDumb(self.path)


class DbmRivalsAmongSignature(DbmBackend):
    """latest reads the index rows of the asked signature only (the rows of other signatures
    cannot be the answer) and finds the head and its rivals among them: a record of another
    signature between two roots no longer ends the run of root rivals."""

    def latest_now(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self.top_rows(workflow_name, graph_signature_hash)
        head = latest_record(rows, graph_signature_hash)
        if head is None:
            return None
        rivals = [self.body_of(rival.checkpoint_id) for rival in rivals_of(rows, head)]
        return replace(self.body_of(head.checkpoint_id), rivals=rivals)


class DbmOverwriteCreatesMissing(DbmBackend):
    """overwrite_body of an id that is not stored writes the body under it anyway (a repair tool
    may restore a lost record): a raw write of an unknown id succeeds and leaves a value no index lists."""

    def overwrite_now(self, checkpoint_id: CheckpointID, body: bytes) -> bool:
        row = self.medium.record(checkpoint_id)
        if row is None:
            medium = self.medium
            assert isinstance(medium, Dumb)
            medium.put(medium.key("x", checkpoint_id), base64.b64encode(body).decode("ascii"))
            return True
        return super().overwrite_now(checkpoint_id, body)


# ====================================================================== targets for disk stores


class DiskStorage(CheckpointStore[DiskBackend]):
    def __init__(self, backend: DiskBackend, **options: Any) -> None:
        super().__init__(backend, **options)


STORE_PATH = "BLIND_BATCH_EIGHT_STORE"
STORE_CLASS = "BLIND_BATCH_EIGHT_CLASS"


def open_from_environment() -> DiskStorage:
    """What another process calls (``process_opener``): the same store, the same backend class."""
    backend_class = globals()[os.environ[STORE_CLASS]]
    return DiskStorage(backend_class(os.environ[STORE_PATH]))


def disk_target(backend_class: type[DiskBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        made: list[str] = []

        def fresh() -> str:
            path = tempfile.mkdtemp(prefix="blind8-")
            made.append(path)
            os.environ[STORE_PATH] = path
            os.environ[STORE_CLASS] = backend_class.__name__
            return path

        fresh()

        async def fresh_store() -> bool:
            fresh()
            return True

        async def cleanup() -> None:
            for path in made:
                shutil.rmtree(path, ignore_errors=True)

        return StorageTarget(
            backend_class.__name__,
            lambda: DiskStorage(backend_class(made[-1])),
            reopen=lambda: DiskStorage(backend_class(made[-1])),
            process_opener=f"{__name__}:open_from_environment",
            fresh_store=fresh_store,
            cleanup=cleanup,
        )

    return target


# ====================================================================== layers over memory


class LayerBackend(Backend):
    """A backend wrapping the built-in in-memory backend, every primitive delegated; subclasses
    add one layer (a replica, shards, a body transform, a tenant prefix, an audit log, a cache).
    ``shared`` is what every handle of one store shares."""

    def __init__(self, inner: MemoryBackend | None = None, shared: dict[str, Any] | None = None) -> None:
        self.inner = inner if inner is not None else MemoryBackend()
        self.shared: dict[str, Any] = shared if shared is not None else {}
        self.capabilities = frozenset(self.inner.capabilities)

    def describe(self) -> str:
        return f"layer+{self.inner.describe()}"

    def new_handle(self) -> Self:
        return type(self)(self.inner.new_handle(), self.shared)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.inner.insert(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.inner.insert_fenced(records, expected_latest_id)

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.inner.load(checkpoint_id)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.inner.latest(workflow_name, graph_signature_hash)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.inner.list_bodies(
            workflow_name, graph_signature_hash, include_nested=include_nested
        )

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return list(
            await self.inner.list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        )

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.inner.remove(checkpoint_id)

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.inner.nested_bodies(checkpoint_ids)

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.inner.nested_ids(checkpoint_id)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.inner.walk(checkpoint_id, max_depth, with_bodies=with_bodies)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.inner.prune(workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.inner.delete_workflow(workflow_name)

    async def workflow_names(self) -> list[str]:
        return list(await self.inner.workflow_names())

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.inner.overwrite_body(checkpoint_id, body, digest)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.inner.info(checkpoint_id)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return list(await self.inner.records(workflow_name))

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return list(await self.inner.tombstones(workflow_name))


class LayerStorage(CheckpointStore[LayerBackend]):
    def __init__(self, backend: LayerBackend, **options: Any) -> None:
        # The bytes never leave this process, as with the in-memory storage.
        super().__init__(backend, codec=CheckpointCodec(trust_saved_types=True), **options)


def layer_target(backend_class: type[LayerBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: LayerStorage(backend_class()))

    return target


# ---------------------------------------------------------------------- layers that keep copies


class CopyingLayer(LayerBackend):
    """Keeps copies of loaded records in a map shared by the store's handles, filled on a load
    that misses; every write that removes or rewrites records drops the copies of the records it
    touches, nested ones included. Subclasses name the map and say where else copies go stale."""

    copies_key: str = "copies"

    def copies(self) -> dict[CheckpointID, StoredBody | None]:
        return self.shared.setdefault(self.copies_key, {})

    def forget(self, checkpoint_ids: Collection[CheckpointID]) -> None:
        for checkpoint_id in checkpoint_ids:
            self.copies().pop(checkpoint_id, None)

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        copies = self.copies()
        if checkpoint_id in copies:
            return copies[checkpoint_id]
        found = await self.inner.load(checkpoint_id)
        if found is not None:
            copies[checkpoint_id] = found
        return found

    async def family(self, checkpoint_ids: Collection[CheckpointID]) -> list[CheckpointID]:
        return [*checkpoint_ids, *(await self.inner.nested_bodies(checkpoint_ids))]

    async def workflow_family(self, workflow_name: str) -> list[CheckpointID]:
        return await self.family(await self.inner.list_ids(workflow_name, None, include_nested=False))

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        family = await self.family([checkpoint_id])
        removed = await self.inner.remove(checkpoint_id)
        self.forget(family)
        return removed

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        family = await self.workflow_family(workflow_name)
        pruned = await self.inner.prune(workflow_name, keep_last)
        self.forget(family)
        return pruned

    async def delete_workflow(self, workflow_name: str) -> int:
        family = await self.workflow_family(workflow_name)
        deleted = await self.inner.delete_workflow(workflow_name)
        self.forget(family)
        return deleted

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        written = await self.inner.overwrite_body(checkpoint_id, body, digest)
        self.forget([checkpoint_id])
        return written


# ---------------------------------------------------------------------- a read replica


class ReplicaRouter(CopyingLayer):
    """Reads by id go to a replica (a second in-memory map shared by the store's handles) filled
    lazily from the primary on a miss; every write that removes or rewrites a record drops it there."""

    copies_key = "replica"


class ReplicaKeepsDeleted(ReplicaRouter):
    """remove is sent to the primary only (the replica catches up on the next copy): a deleted
    checkpoint still loads from the replica."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.inner.remove(checkpoint_id)


class ReplicaMissesRawWrites(ReplicaRouter):
    """overwrite_body goes to the primary without dropping the replica's copy (raw writes are a
    repair tool's business): reads keep returning the body as it was before the write."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.inner.overwrite_body(checkpoint_id, body, digest)


class ReplicaPerHandle(ReplicaRouter):
    """Each handle keeps a replica of its own (no state shared between handles): a checkpoint
    deleted or pruned through another handle still loads from this one."""

    def __init__(self, inner: MemoryBackend | None = None, shared: dict[str, Any] | None = None) -> None:
        super().__init__(inner, None)


class ReplicaPruneKeepsNested(ReplicaRouter):
    """prune drops the replica's copies of the workflow's top-level checkpoints but not of the
    records nested in them: a pruned nested record still loads."""

    async def workflow_family(self, workflow_name: str) -> list[CheckpointID]:
        return list(await self.inner.list_ids(workflow_name, None, include_nested=False))


# ---------------------------------------------------------------------- shards


class ShardedByName(LayerBackend):
    """Workflows are spread over two in-memory stores by a stable hash of the name; a save first
    checks that no shard holds its ids (ids are global), under a lock shared by the handles."""

    def __init__(self, inner: MemoryBackend | None = None, shared: dict[str, Any] | None = None) -> None:
        super().__init__(inner, shared)
        self.shared.setdefault("lock", threading.Lock())
        if "second" not in self.shared:
            self.shared["second"] = MemoryBackend()
        self.second: MemoryBackend = self.shared["second"].new_handle()
        self.lock: threading.Lock = self.shared["lock"]

    def shard(self, workflow_name: str) -> MemoryBackend:
        digit = hashlib.blake2b(workflow_name.encode("utf-8", "surrogatepass"), digest_size=1).digest()[0]
        return self.inner if digit % 2 == 0 else self.second

    def shards(self) -> list[MemoryBackend]:
        return [self.inner, self.second]

    def other(self, shard: MemoryBackend) -> MemoryBackend:
        return self.second if shard is self.inner else self.inner

    async def clash(self, records: Sequence[CheckpointRecord], shard: MemoryBackend) -> InsertResult | None:
        """The answer of a save whose id or nested ids another shard holds, or None."""
        other = self.other(shard)
        held = await other.load(records[0].checkpoint_id)
        if held is not None:
            # Held by the other shard: a different checkpoint, whatever its bytes (another workflow).
            return InsertResult.DIFFERENT_BODY
        for record in records[1:]:
            if await other.load(record.checkpoint_id) is not None:
                raise nested_id_conflict(records, record.checkpoint_id)
        return None

    def number(self, records: Sequence[CheckpointRecord]) -> None:
        """Number the records in one commit order over both shards: a workflow's nested records
        may sit in either shard (with their containers), and include_nested lists them together."""
        order: dict[CheckpointID, int] = self.shared.setdefault("order", {})
        for record in records:
            self.shared["committed"] = self.shared.get("committed", 0) + 1
            order[record.checkpoint_id] = self.shared["committed"]

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        shard = self.shard(records[0].workflow_name)
        with self.lock:  # the memory backend never suspends: the lock is held for one step
            clash = await self.clash(records, shard)
            if clash is not None:
                return clash
            result = await shard.insert(records)
            if result is InsertResult.INSERTED:
                self.number(records)
            return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        shard = self.shard(records[0].workflow_name)
        with self.lock:
            head = await shard.latest(records[0].workflow_name, None)
            latest = None if head is None else head.checkpoint_id
            if await self.other(shard).load(records[0].checkpoint_id) is not None:
                return FenceCheck(latest, InsertResult.DIFFERENT_BODY)
            if latest != expected_latest_id and await shard.load(records[0].checkpoint_id) is None:
                return FenceCheck(latest, None)
            for record in records[1:]:
                if await self.other(shard).load(record.checkpoint_id) is not None:
                    raise nested_id_conflict(records, record.checkpoint_id)
            result = await shard.insert_fenced(records, expected_latest_id)
            if result is None:
                self.number(records)
            return result

    async def find(self, checkpoint_id: CheckpointID) -> MemoryBackend | None:
        for shard in self.shards():
            if await shard.load(checkpoint_id) is not None:
                return shard
        return None

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        for shard in self.shards():
            found = await shard.load(checkpoint_id)
            if found is not None:
                return found
        return None

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.shard(workflow_name).latest(workflow_name, graph_signature_hash)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        # A nested record of this name may live in any shard (with its container): merge by sequence.
        if not include_nested:
            shard = self.shard(workflow_name)
            return await shard.list_bodies(workflow_name, graph_signature_hash, include_nested=False)
        ids = await self.list_ids(workflow_name, graph_signature_hash, include_nested=True)
        bodies = []
        for checkpoint_id in ids:
            found = await self.load(checkpoint_id)
            if found is not None:
                bodies.append(found)
        return bodies

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        if not include_nested:
            shard = self.shard(workflow_name)
            return list(await shard.list_ids(workflow_name, graph_signature_hash, include_nested=False))
        order: dict[CheckpointID, int] = self.shared.setdefault("order", {})
        rows: list[tuple[int, CheckpointID]] = []
        for shard in self.shards():
            for info in await shard.records(workflow_name):
                if graph_signature_hash in (None, info.graph_signature_hash):
                    rows.append((order.get(info.checkpoint_id, 0), info.checkpoint_id))
        return [checkpoint_id for _, checkpoint_id in sorted(rows)]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        shard = await self.find(checkpoint_id)
        return False if shard is None else await shard.remove(checkpoint_id)

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        bodies: dict[CheckpointID, bytes] = {}
        for shard in self.shards():
            bodies.update(await shard.nested_bodies(checkpoint_ids))
        return bodies

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        shard = await self.find(checkpoint_id)
        return None if shard is None else await shard.nested_ids(checkpoint_id)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        current: CheckpointID | None = checkpoint_id
        with self.lock:  # one step, as one locked read would be
            while current is not None and current not in links and len(links) < max_depth:
                shard = await self.find(current)
                if shard is None:
                    if current != checkpoint_id:
                        for each in self.shards():
                            if current in await each.tombstones(None):
                                tombstones.add(current)
                    break
                step = await shard.walk(current, 1, with_bodies=with_bodies)
                links[current] = step.links.get(current)
                bodies.update(step.bodies)
                current = links[current]
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.shard(workflow_name).prune(workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.shard(workflow_name).delete_workflow(workflow_name)

    async def workflow_names(self) -> list[str]:
        names: list[str] = []
        for shard in self.shards():
            names += await shard.workflow_names()
        return names

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        shard = await self.find(checkpoint_id)
        return False if shard is None else await shard.overwrite_body(checkpoint_id, body, digest)

    def numbered(self, info: CheckpointInfo) -> CheckpointInfo:
        """The sequence in the commit order over both shards (it rises within every workflow)."""
        order: dict[CheckpointID, int] = self.shared.setdefault("order", {})
        return replace(info, sequence=order.get(info.checkpoint_id, info.sequence))

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        shard = await self.find(checkpoint_id)
        info = None if shard is None else await shard.info(checkpoint_id)
        return None if info is None else self.numbered(info)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        infos: list[CheckpointInfo] = []
        for shard in self.shards():
            infos += [self.numbered(info) for info in await shard.records(workflow_name)]
        return infos

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        ids: list[CheckpointID] = []
        for shard in self.shards():
            ids += await shard.tombstones(workflow_name)
        return ids


class ShardIdsCheckedInOwnShard(ShardedByName):
    """A save checks its ids in its own shard only (the shard holding the workflow): an id stored
    under a workflow of the other shard is saved again under this one, and two checkpoints share it."""

    async def clash(self, records: Sequence[CheckpointRecord], shard: MemoryBackend) -> InsertResult | None:
        return None

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        result = await self.shard(records[0].workflow_name).insert_fenced(records, expected_latest_id)
        if result is None:
            self.number(records)
        return result


# ---------------------------------------------------------------------- body transforms


class TransformedBodies(LayerBackend):
    """Bodies are stored transformed (``pack``) and given back as saved (``unpack``) by every read;
    an index entry's size is the size of the body as saved (what read_raw_body returns)."""

    def pack(self, body: bytes) -> bytes:
        return body

    def unpack(self, checkpoint_id: CheckpointID, stored_bytes: bytes) -> bytes:
        return stored_bytes

    def packed(self, record: CheckpointRecord) -> CheckpointRecord:
        return record.replaced(body=self.pack(record.body), digest=record.digest)

    def opened(self, found: StoredBody) -> StoredBody:
        nested = None
        if found.nested is not None:
            nested = {cid: self.unpack(cid, body) for cid, body in found.nested.items()}
        return replace(
            found,
            body=self.unpack(found.checkpoint_id, found.body),
            nested=nested,
            rivals=[self.opened(rival) for rival in found.rivals],
        )

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.inner.insert([self.packed(record) for record in records])

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.inner.insert_fenced([self.packed(record) for record in records], expected_latest_id)

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = await self.inner.load(checkpoint_id)
        return None if found is None else self.opened(found)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        found = await self.inner.latest(workflow_name, graph_signature_hash)
        return None if found is None else self.opened(found)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        found = await self.inner.list_bodies(
            workflow_name, graph_signature_hash, include_nested=include_nested
        )
        return [self.opened(each) for each in found]

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        found = await self.inner.nested_bodies(checkpoint_ids)
        return {cid: self.unpack(cid, body) for cid, body in found.items()}

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        found = await self.inner.walk(checkpoint_id, max_depth, with_bodies=with_bodies)
        bodies = {cid: self.unpack(cid, body) for cid, body in found.bodies.items()}
        return replace(found, bodies=bodies)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.inner.overwrite_body(checkpoint_id, self.pack(body), digest)

    async def sized(self, info: CheckpointInfo) -> CheckpointInfo:
        found = await self.load(info.checkpoint_id)
        return info if found is None else replace(info, size=len(found.body))

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        info = await self.inner.info(checkpoint_id)
        return None if info is None else await self.sized(info)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return [await self.sized(info) for info in await self.inner.records(workflow_name)]


class CompressedBodies(TransformedBodies):
    """Bodies are stored compressed with zlib (a marker byte says whether the bytes were
    compressed, so short bodies stay as they are)."""

    def pack(self, body: bytes) -> bytes:
        return b"z" + zlib.compress(body) if len(body) > 64 else b"=" + body

    def unpack(self, checkpoint_id: CheckpointID, stored_bytes: bytes) -> bytes:
        marker, rest = stored_bytes[:1], stored_bytes[1:]
        if marker == b"=":
            return rest
        if marker == b"z":
            try:
                return zlib.decompress(rest)
            except zlib.error:
                pass
        # Not what this layer wrote: hand the bytes on, and the codec reports the damage.
        return stored_bytes


class CompressNestedBodiesLeftPacked(CompressedBodies):
    """nested_bodies hands back the nested records' bodies as stored, still compressed (the one
    read path the layer forgot): checkpoints embedded in another read back as corrupted."""

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.inner.nested_bodies(checkpoint_ids)


class CompressWalkBodiesLeftPacked(CompressedBodies):
    """walk(with_bodies=True) hands back the reached records' bodies as stored, still compressed:
    walk_ancestry reports every checkpoint it reaches as corrupted."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.inner.walk(checkpoint_id, max_depth, with_bodies=with_bodies)


class CompressRawWritesRefused(CompressedBodies):
    """A stored body without this layer's marker is refused as corrupted (the layer wrote every
    body, so anything else is damage), and overwrite_body stores the bytes it is given as they are:
    a body written back with write_raw_body (a repair) reads as corrupted."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.inner.overwrite_body(checkpoint_id, body, digest)

    def unpack(self, checkpoint_id: CheckpointID, stored_bytes: bytes) -> bytes:
        marker, rest = stored_bytes[:1], stored_bytes[1:]
        if marker == b"=":
            return rest
        if marker == b"z":
            try:
                return zlib.decompress(rest)
            except zlib.error:
                pass
        raise CheckpointCorruptedError(checkpoint_id, "not a body this layer wrote")


def keystream(key: bytes, nonce: bytes, length: int) -> bytes:
    blocks = []
    for counter in range((length + 63) // 64):
        blocks.append(hashlib.blake2b(nonce + counter.to_bytes(8, "big"), key=key).digest())
    return b"".join(blocks)[:length]


class EncryptedBodies(TransformedBodies):
    """Bodies are stored encrypted at rest: a random 16-byte nonce, then the body XORed with a
    BLAKE2b keystream under the store's key (shared by every handle of the store)."""

    def key(self) -> bytes:
        return bytes(self.shared.setdefault("key", secrets.token_bytes(32)))

    def pack(self, body: bytes) -> bytes:
        nonce = secrets.token_bytes(16)
        stream = keystream(self.key(), nonce, len(body))
        return nonce + bytes(a ^ b for a, b in zip(body, stream, strict=True))

    def unpack(self, checkpoint_id: CheckpointID, stored_bytes: bytes) -> bytes:
        if len(stored_bytes) < 16:
            return stored_bytes  # not what this layer wrote: the codec reports the damage
        nonce, sealed = stored_bytes[:16], stored_bytes[16:]
        stream = keystream(self.key(), nonce, len(sealed))
        return bytes(a ^ b for a, b in zip(sealed, stream, strict=True))


class EncryptKeyPerHandle(EncryptedBodies):
    """The key is made per handle (each handle draws its own on first use, as a per-process secret
    would be): a body saved through one handle reads as corrupted through another."""

    def __init__(self, inner: MemoryBackend | None = None, shared: dict[str, Any] | None = None) -> None:
        super().__init__(inner, shared)
        self.own_key = secrets.token_bytes(32)

    def key(self) -> bytes:
        return self.own_key


class EncryptRivalsLeftSealed(EncryptedBodies):
    """latest decrypts the head's body but hands its rivals back as stored, still encrypted: a
    workflow whose head has rivals reads as corrupted from get_latest."""

    def opened(self, found: StoredBody) -> StoredBody:
        nested = None
        if found.nested is not None:
            nested = {cid: self.unpack(cid, body) for cid, body in found.nested.items()}
        return replace(found, body=self.unpack(found.checkpoint_id, found.body), nested=nested)


class EncryptListingSkipsUnreadable(EncryptedBodies):
    """list_bodies leaves out a body too short to hold a nonce (it cannot be decrypted, so it is
    not shown), instead of handing it on: a damaged checkpoint drops out of list_checkpoints."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        found = await self.inner.list_bodies(
            workflow_name, graph_signature_hash, include_nested=include_nested
        )
        return [self.opened(each) for each in found if len(each.body) >= 17]


# ---------------------------------------------------------------------- a tenant prefix


TENANT = "tenant-7\u241f"


class TenantPrefixed(LayerBackend):
    """Every workflow name is stored with the tenant's prefix (records, nested ones included, and
    every name a primitive is given), and the prefix is taken off every name read back."""

    def name_in(self, workflow_name: str) -> str:
        return TENANT + workflow_name

    def name_out(self, workflow_name: str) -> str:
        return workflow_name[len(TENANT) :] if workflow_name.startswith(TENANT) else workflow_name

    def record_in(self, record: CheckpointRecord) -> CheckpointRecord:
        return record.replaced(workflow_name=self.name_in(record.workflow_name), digest=record.digest)

    def body_out(self, found: StoredBody) -> StoredBody:
        entry = (
            None
            if found.entry is None
            else replace(found.entry, workflow_name=self.name_out(found.entry.workflow_name))
        )
        return replace(found, entry=entry, rivals=[self.body_out(rival) for rival in found.rivals])

    def info_out(self, info: CheckpointInfo) -> CheckpointInfo:
        return replace(info, workflow_name=self.name_out(info.workflow_name))

    def records_in(self, records: Sequence[CheckpointRecord]) -> list[CheckpointRecord]:
        return [self.record_in(record) for record in records]

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.inner.insert(self.records_in(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.inner.insert_fenced(self.records_in(records), expected_latest_id)

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = await self.inner.load(checkpoint_id)
        return None if found is None else self.body_out(found)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        found = await self.inner.latest(self.name_in(workflow_name), graph_signature_hash)
        return None if found is None else self.body_out(found)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        found = await self.inner.list_bodies(
            self.name_in(workflow_name), graph_signature_hash, include_nested=include_nested
        )
        return [self.body_out(each) for each in found]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return list(
            await self.inner.list_ids(
                self.name_in(workflow_name), graph_signature_hash, include_nested=include_nested
            )
        )

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.inner.prune(self.name_in(workflow_name), keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.inner.delete_workflow(self.name_in(workflow_name))

    async def workflow_names(self) -> list[str]:
        return [self.name_out(name) for name in await self.inner.workflow_names() if name.startswith(TENANT)]

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        info = await self.inner.info(checkpoint_id)
        return None if info is None else self.info_out(info)

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        name = None if workflow_name is None else self.name_in(workflow_name)
        return [self.info_out(info) for info in await self.inner.records(name)]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        name = None if workflow_name is None else self.name_in(workflow_name)
        return list(await self.inner.tombstones(name))


class TenantNamesLeftPrefixed(TenantPrefixed):
    """workflow_names hands back the names as stored, prefix included (the listing is an admin
    view of the tenant's store): list_workflows names no workflow the caller saved under."""

    async def workflow_names(self) -> list[str]:
        return [name for name in await self.inner.workflow_names() if name.startswith(TENANT)]


class TenantNestedLeftBare(TenantPrefixed):
    """Only the saved checkpoint's workflow name gets the prefix; the records nested in it keep
    their bare names: a listing with include_nested of the nested records' name finds none."""

    def records_in(self, records: Sequence[CheckpointRecord]) -> list[CheckpointRecord]:
        return [self.record_in(records[0]), *records[1:]]


class TenantTombstonesAskedBare(TenantPrefixed):
    """tombstones passes the workflow name on without the prefix (tombstones are ids, so the
    layer did not look at them): list_tombstones of a workflow is always empty."""

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return list(await self.inner.tombstones(workflow_name))


# ---------------------------------------------------------------------- an audit log


class AuditLogged(LayerBackend):
    """Every write (insert, remove, prune, delete_workflow, overwrite_body) is recorded in an
    audit log shared by the store's handles: what was done, to which ids, with what outcome."""

    def log(self) -> list[tuple[str, str, str]]:
        return self.shared.setdefault("audit", [])

    async def audited(self, operation: str, subject: str, call: Callable[[], Any]) -> Any:
        try:
            result = await call()
        except Exception as exc:
            self.log().append((operation, subject, type(exc).__name__))
            raise
        self.log().append((operation, subject, repr(result)))
        return result

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.audited("insert", records[0].checkpoint_id, lambda: self.inner.insert(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.audited(
            "insert_fenced",
            records[0].checkpoint_id,
            lambda: self.inner.insert_fenced(records, expected_latest_id),
        )

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.audited("remove", checkpoint_id, lambda: self.inner.remove(checkpoint_id))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.audited("prune", workflow_name, lambda: self.inner.prune(workflow_name, keep_last))

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.audited(
            "delete_workflow", workflow_name, lambda: self.inner.delete_workflow(workflow_name)
        )

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.audited(
            "overwrite_body", checkpoint_id, lambda: self.inner.overwrite_body(checkpoint_id, body, digest)
        )


class AuditAppendsFileOnLoop(AuditLogged):
    """Each audit entry is appended to a log file as it happens (``open(path, "a")`` in the
    coroutine: one short line, too small to bother a thread with)."""

    def log(self) -> list[tuple[str, str, str]]:
        entries = super().log()
        path = self.shared.setdefault(
            "path", os.path.join(tempfile.gettempdir(), f"blind8-audit-{uuid.uuid4().hex}.log")
        )

        class FileLog(list[tuple[str, str, str]]):
            def append(self, entry: tuple[str, str, str]) -> None:
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(repr(entry) + "\n")
                super().append(entry)

        return FileLog(entries)


class AuditErrorsAsUnavailable(AuditLogged):
    """The audit layer records a failed write and raises StorageUnavailableError naming the
    operation (one error type for the audit trail's alerts): a refused nested delete or a nested
    id conflict reaches the caller as an outage."""

    async def audited(self, operation: str, subject: str, call: Callable[[], Any]) -> Any:
        try:
            return await super().audited(operation, subject, call)
        except StorageUnavailableError:
            raise
        except Exception as exc:
            raise StorageUnavailableError(operation, f"{subject}: {type(exc).__name__}") from exc


# ---------------------------------------------------------------------- a load cache


class LoadCache(CopyingLayer):
    """load is memoized per id in a cache shared by the store's handles (records are immutable);
    every write that removes or rewrites records drops their ids, and so does a save."""

    copies_key = "cache"

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await self.inner.insert(records)
        self.forget([record.checkpoint_id for record in records])
        return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        result = await self.inner.insert_fenced(records, expected_latest_id)
        self.forget([record.checkpoint_id for record in records])
        return result


class CacheRemembersMisses(LoadCache):
    """load memoizes misses too (a runner polls for ids that are not there yet), and a save drops
    nothing (a new record cannot be in the cache): an id loaded before it was saved stays not found."""

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        copies = self.copies()
        if checkpoint_id in copies:
            return copies[checkpoint_id]
        found = await self.inner.load(checkpoint_id)
        copies[checkpoint_id] = found
        return found

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.inner.insert(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.inner.insert_fenced(records, expected_latest_id)


class CacheKeepsDeletedWorkflows(LoadCache):
    """delete_workflow does not touch the cache (it is an administrative purge, rare enough):
    every checkpoint of a deleted workflow that was loaded before still loads."""

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.inner.delete_workflow(workflow_name)


class CachePrunesTopLevelOnly(LoadCache):
    """prune drops the cached top-level checkpoints of the workflow, not the records nested in
    them: a pruned embedded checkpoint that was loaded before still loads."""

    async def workflow_family(self, workflow_name: str) -> list[CheckpointID]:
        return list(await self.inner.list_ids(workflow_name, None, include_nested=False))


# ====================================================================== the batch


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


def _entries() -> list[Entry]:
    broken_files: list[type[DiskBackend]] = [
        FileNamesCasefolded,
        FileNamesNormalizedNfc,
        FileNamesQuotedTruncated,
        FileSlashReplaced,
        FileIndexNamedByQuotedName,
        FileRecordWrittenInPlace,
        FileListIdsByMtime,
        FileThreadLockOnly,
        FileUnlinkDeferred,
        FileWorkflowNamesScannedOnce,
        FileWalkWithinWorkflowIndex,
        FileRemoveIndexesTopLevelOnly,
        FilePruneMarksOnlyInIndex,
        FileExistsThenReplace,
    ]
    broken_dbm: list[type[DiskBackend]] = [
        DbmKeysLatin1,
        DbmSyncOnlyOnClose,
        DbmOpenedOncePerHandle,
        DbmIndexOrderCommaJoined,
        DbmDigestKeyOutlivesRecord,
        DbmOpenedWithFlagN,
        DbmWorkflowNamesKeepEmptied,
        DbmTombstonesOneKey,
        DbmRivalsAmongSignature,
        DbmOverwriteCreatesMissing,
    ]
    broken_layers: list[type[LayerBackend]] = [
        ReplicaKeepsDeleted,
        ReplicaMissesRawWrites,
        ReplicaPerHandle,
        ReplicaPruneKeepsNested,
        ShardIdsCheckedInOwnShard,
        CompressNestedBodiesLeftPacked,
        CompressWalkBodiesLeftPacked,
        CompressRawWritesRefused,
        EncryptKeyPerHandle,
        EncryptRivalsLeftSealed,
        EncryptListingSkipsUnreadable,
        TenantNamesLeftPrefixed,
        TenantNestedLeftBare,
        TenantTombstonesAskedBare,
        AuditAppendsFileOnLoop,
        AuditErrorsAsUnavailable,
        CacheRemembersMisses,
        CacheKeepsDeletedWorkflows,
        CachePrunesTopLevelOnly,
    ]
    entries: list[Entry] = []
    entries += [(c.__name__, disk_target(c), _doc(c)) for c in broken_files + broken_dbm]
    entries += [(c.__name__, layer_target(c), _doc(c)) for c in broken_layers]
    return entries


ENTRIES: list[Entry] = _entries()
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = [
    # This machine's filesystem (ext4) stamps every write with its own nanosecond mtime (none of
    # 2,000 files replaced back to back shared one), so the cache is never stale here; on a
    # filesystem with coarse mtimes (1 s on ext3 or HFS+, 2 s on FAT) it would be.
    ("FileIndexCachedByMtime", disk_target(FileIndexCachedByMtime), _doc(FileIndexCachedByMtime)),
]
"""Written as broken, judged not to break the contract as built (tests/kit/blind_batch_eight.md
says why); each must pass the whole kit."""

HONEST_LAYERS: list[type[LayerBackend]] = [
    LayerBackend,
    ReplicaRouter,
    ShardedByName,
    CompressedBodies,
    EncryptedBodies,
    TenantPrefixed,
    AuditLogged,
    LoadCache,
]

HONEST: list[Entry] = [
    ("FileBackend", disk_target(FileBackend), _doc(FileBackend)),
    ("DbmBackend", disk_target(DbmBackend), _doc(DbmBackend)),
    *[(c.__name__, layer_target(c), _doc(c)) for c in HONEST_LAYERS],
]
"""Honest storages: the two disk backends, the plain layer and each layer the broken ones change
one thing of; each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
