"""A twelfth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only README.md, docs/contract.md,
docs/backends.md, docs/registry.md, docs/integrity.md, docs/conformance.md's prose, examples/ and
the public author API could ship. Two styles:

* ``DocBackend``: one document per workflow (its sequence counter, its records and its prune
  tombstones in one value), rewritten whole on each write with optimistic concurrency on the
  document's version number, and a global id directory beside the documents (ids are global);
  a commit checks the version and claims or releases ids in the directory in one step;
* ``MirrorBackend``: a mirrored pair of built-in in-memory backends: every write goes to the
  primary and then to the secondary under the mirror's lock; reads go to the primary and fail
  over to the secondary when the primary raises (the primary here fails every fifth read).

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_twelve.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from conformance import StorageTarget
from storages import NestedCheckpointDeletionError
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
from storages.contract import Capability, CheckpointID, CheckpointInfo
from storages.memory.backend import MemoryBackend

from .blind_batch_nine import TableStorage as LocalStorage
from .blind_batch_nine import stored

Entry = tuple[str, Callable[[], StorageTarget], str]
T = TypeVar("T")

ALL_CAPABILITIES = frozenset(
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


# ====================================================================== one document per workflow


@dataclass
class Doc:
    """One workflow's document: what a JSON value would hold."""

    version: int = 0
    counter: int = 0
    records: dict[CheckpointID, tuple[int, CheckpointRecord]] = field(default_factory=dict)
    tombstones: list[CheckpointID] = field(default_factory=list)


@dataclass
class DocStore:
    """The documents and the id directory (id -> its workflow and its container), shared by
    every handle; the lock makes one commit (version checks, directory claims, document writes)
    one step."""

    docs: dict[str, Doc] = field(default_factory=dict)
    directory: dict[CheckpointID, tuple[str, CheckpointID | None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


RETRIES = 1000


class Conflict(Exception):
    """A document moved on (or an id was claimed) since it was read: read again and retry."""


Docs = dict[str, Doc]


class DocBackend(Backend):
    """One document per workflow rewritten whole on each write, with optimistic concurrency on
    its version, and a global id directory claimed in the same commit. A record lives in its own
    workflow's document (nested ones too); a save that touches several documents commits them
    together."""

    capabilities = ALL_CAPABILITIES

    def __init__(self, store: DocStore | None = None) -> None:
        self.store = store if store is not None else DocStore()

    def describe(self) -> str:
        return "doc://"

    def new_handle(self) -> Self:
        return type(self)(self.store)

    # ------------------------------------------------------------ the store's operations

    async def read(self, workflow_name: str) -> Doc:
        """A private copy of the workflow's document (what a GET returns)."""
        await asyncio.sleep(0)  # a round trip
        with self.store.lock:
            found = self.store.docs.get(workflow_name)
            return copy.deepcopy(found) if found is not None else Doc()

    async def read_many(self, names: Collection[str]) -> Docs:
        return {name: await self.read(name) for name in names}

    def commit(
        self,
        docs: Docs,
        claims: Collection[CheckpointRecord] = (),
        releases: Collection[CheckpointID] = (),
    ) -> None:
        """Write every document if each stored version is still the one read and every claimed
        id is free; else raise Conflict."""
        s = self.store
        with s.lock:
            for name, doc in docs.items():
                if self.version_of(s.docs.get(name)) != doc.version:
                    raise Conflict(name)
            if any(r.checkpoint_id in s.directory for r in claims):
                raise Conflict("directory")
            self.write_held(docs, claims, releases)

    def version_of(self, doc: Doc | None) -> int:
        return 0 if doc is None else doc.version

    def write_held(
        self, docs: Docs, claims: Collection[CheckpointRecord], releases: Collection[CheckpointID]
    ) -> None:
        s = self.store
        for i in releases:
            s.directory.pop(i, None)
        for r in claims:
            s.directory[r.checkpoint_id] = (r.workflow_name, r.container_id)
        for name, doc in docs.items():
            s.docs[name] = replace(doc, version=doc.version + 1)

    async def retry(self, step: Callable[[], Any]) -> Any:
        for _ in range(RETRIES):
            try:
                return await step()
            except Conflict:
                continue
        raise RuntimeError(f"{self.describe()}: the documents kept changing; {RETRIES} attempts failed")

    def owner(self, checkpoint_id: CheckpointID) -> str | None:
        with self.store.lock:
            found = self.store.directory.get(checkpoint_id)
        return None if found is None else found[0]

    async def find(self, checkpoint_id: CheckpointID) -> tuple[int, CheckpointRecord] | None:
        name = self.owner(checkpoint_id)
        if name is None:
            return None
        return (await self.read(name)).records.get(checkpoint_id)

    def family(self, checkpoint_id: CheckpointID) -> list[tuple[CheckpointID, str]]:
        """The record and every record nested in it, at any depth, with their workflows."""
        with self.store.lock:
            directory = dict(self.store.directory)
        found = []
        wanted = [checkpoint_id]
        while wanted:
            current = wanted.pop()
            if current in directory:
                found.append((current, directory[current][0]))
            wanted += [i for i, (_, container) in directory.items() if container == current]
        return found

    # ------------------------------------------------------------ reading a document

    def ordered(
        self, doc: Doc, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        rows = [
            row
            for row in doc.records.values()
            if (include_nested or row[1].container_id is None)
            and graph_signature_hash in (None, row[1].graph_signature_hash)
        ]
        rows.sort(key=lambda row: row[0])
        return [r for _, r in rows]

    def next_sequence(self, doc: Doc) -> int:
        doc.counter += 1
        return doc.counter

    def add(self, docs: Docs, records: Sequence[CheckpointRecord]) -> None:
        for record in records:
            doc = docs[record.workflow_name]
            doc.records[record.checkpoint_id] = (self.next_sequence(doc), record)

    async def existing(self, records: Sequence[CheckpointRecord]) -> InsertResult | None:
        """What the directory says about the checkpoint's id (None: free)."""
        top = records[0]
        found = await self.find(top.checkpoint_id)
        if found is not None:
            return InsertResult.of_stored_digest(found[1].digest, top)
        return None

    def check_nested(self, records: Sequence[CheckpointRecord]) -> None:
        for record in records[1:]:
            if self.owner(record.checkpoint_id) is not None:
                raise nested_id_conflict(records, record.checkpoint_id)

    def limit(self, doc: Doc) -> None:
        """Room for the document's size (this store has no limit)."""

    async def drop(self, ids: Sequence[tuple[CheckpointID, str]], docs: Docs) -> None:
        """Take the records out of their documents (read into ``docs`` as needed)."""
        for checkpoint_id, name in ids:
            if name not in docs:
                docs[name] = await self.read(name)
            docs[name].records.pop(checkpoint_id, None)

    # ------------------------------------------------------------ primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result: InsertResult = await self.retry(lambda: self.insert_once(records, None, fenced=False))
        return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        check: FenceCheck | None = await self.retry(
            lambda: self.insert_once(records, expected_latest_id, fenced=True)
        )
        return check

    async def insert_once(
        self, records: Sequence[CheckpointRecord], expected: CheckpointID | None, *, fenced: bool
    ) -> Any:
        name = records[0].workflow_name
        docs = await self.read_many({name, *(r.workflow_name for r in records)})
        head = latest_record(self.ordered(docs[name], None, False))
        latest = None if head is None else head.checkpoint_id
        found = await self.existing(records)
        if found is not None:
            return FenceCheck(latest, found) if fenced else found
        if fenced and latest != expected:
            self.confirm(name, docs[name])
            return FenceCheck(latest, None)
        self.check_nested(records)
        self.add(docs, records)
        for doc in docs.values():
            self.limit(doc)
        await asyncio.sleep(0)  # the write's own round trip: others may commit meanwhile
        self.commit(docs, claims=records)
        return None if fenced else InsertResult.INSERTED

    def confirm(self, workflow_name: str, doc: Doc) -> None:
        """The document read is still the stored one (else the fence's verdict is stale)."""
        with self.store.lock:
            if self.version_of(self.store.docs.get(workflow_name)) != doc.version:
                raise Conflict(workflow_name)

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = await self.find(checkpoint_id)
        return None if found is None else stored(found[1])

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        top = self.ordered(await self.read(workflow_name), None, False)
        head = latest_record(top, graph_signature_hash)
        if head is None:
            return None
        return replace(stored(head), rivals=[stored(r) for r in rivals_of(top, head)])

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        doc = await self.read(workflow_name)
        return [stored(r) for r in self.ordered(doc, graph_signature_hash, include_nested)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        rows = self.ordered(await self.read(workflow_name), graph_signature_hash, include_nested)
        return [r.checkpoint_id for r in rows]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return bool(await self.retry(lambda: self.remove_once(checkpoint_id)))

    async def remove_once(self, checkpoint_id: CheckpointID) -> bool:
        name = self.owner(checkpoint_id)
        if name is None:
            return False
        doc = await self.read(name)
        found = doc.records.get(checkpoint_id)
        if found is None:
            self.confirm(name, doc)
            return False
        if found[1].container_id is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, found[1].container_id)
        gone = self.family(checkpoint_id)
        docs = {name: doc}
        await self.drop(gone, docs)
        self.commit(docs, releases=[i for i, _ in gone])
        return True

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        bodies: dict[CheckpointID, bytes] = {}
        for checkpoint_id in checkpoint_ids:
            for i, name in self.family(checkpoint_id)[1:]:
                found = (await self.read(name)).records.get(i)
                if found is not None:
                    bodies[i] = found[1].body
        return bodies

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        if await self.find(checkpoint_id) is None:
            return None
        with self.store.lock:
            children = [(i, n) for i, (n, c) in self.store.directory.items() if c == checkpoint_id]
        rows = [await self.find(i) for i, _ in children]
        kept = sorted((r for r in rows if r is not None), key=lambda r: r[1].position)
        return [r[1].checkpoint_id for r in kept]

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        # One consistent read: the whole store under its lock, as a snapshot read would be.
        with self.store.lock:
            docs = copy.deepcopy(self.store.docs)
            directory = dict(self.store.directory)
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        pruned = {i for d in docs.values() for i in d.tombstones}

        def row_of(i: CheckpointID) -> tuple[int, CheckpointRecord] | None:
            entry = directory.get(i)
            return None if entry is None else docs[entry[0]].records.get(i)

        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            row = row_of(current)
            if row is None:
                if current != checkpoint_id and current in pruned:
                    tombstones.add(current)
                break
            record = row[1]
            links[current] = record.previous_checkpoint_id
            if with_bodies:
                wanted = [current]
                while wanted:
                    each = wanted.pop()
                    found = row_of(each)
                    if found is not None:
                        bodies[each] = found[1].body
                    wanted += [i for i, (_, c) in directory.items() if c == each]
            current = record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return int(await self.retry(lambda: self.prune_once(workflow_name, keep_last)))

    async def prune_once(self, workflow_name: str, keep_last: int) -> int:
        doc = await self.read(workflow_name)
        doomed = pruned_records(self.ordered(doc, None, False), keep_last)
        gone: list[tuple[CheckpointID, str]] = []
        for record in doomed:
            gone += self.family(record.checkpoint_id)
        docs = {workflow_name: doc}
        await self.drop(gone, docs)
        doc.tombstones += [i for i, _ in gone]
        self.commit(docs, releases=[i for i, _ in gone])
        return self.pruned_count(doomed, gone)

    def pruned_count(self, doomed: list[CheckpointRecord], gone: list[tuple[CheckpointID, str]]) -> int:
        return len(doomed)

    async def delete_workflow(self, workflow_name: str) -> int:
        return int(await self.retry(lambda: self.delete_once(workflow_name)))

    async def delete_once(self, workflow_name: str) -> int:
        doc = await self.read(workflow_name)
        doomed = self.ordered(doc, None, False)
        gone: list[tuple[CheckpointID, str]] = []
        for record in doomed:
            gone += self.family(record.checkpoint_id)
        docs = {workflow_name: doc}
        await self.drop(gone, docs)
        doc.tombstones = []
        self.commit(docs, releases=self.released(gone))
        return len(doomed)

    def released(self, gone: list[tuple[CheckpointID, str]]) -> list[CheckpointID]:
        return [i for i, _ in gone]

    async def workflow_names(self) -> list[str]:
        with self.store.lock:
            return sorted(
                n
                for n, d in self.store.docs.items()
                if any(r.container_id is None for _, r in d.records.values())
            )

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return bool(await self.retry(lambda: self.overwrite_once(checkpoint_id, body)))

    async def overwrite_once(self, checkpoint_id: CheckpointID, body: bytes) -> bool:
        name = self.owner(checkpoint_id)
        if name is None:
            return False
        doc = await self.read(name)
        found = doc.records.get(checkpoint_id)
        if found is None:
            return False
        doc.records[checkpoint_id] = (found[0], found[1].replaced(body=body, digest=found[1].digest))
        self.commit({name: doc})
        return True

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        found = await self.find(checkpoint_id)
        return None if found is None else found[1].info(found[0])

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        with self.store.lock:
            docs = copy.deepcopy(self.store.docs)
        return [
            r.info(n)
            for name, d in docs.items()
            if workflow_name in (None, name)
            for n, r in d.records.values()
        ]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        with self.store.lock:
            return [
                i
                for name, d in self.store.docs.items()
                if workflow_name in (None, name)
                for i in d.tombstones
            ]


class DocVersionNotChecked(DocBackend):
    """A commit writes the documents without comparing their versions: two writers that read the
    same version both win, the later one's document erasing the other's save."""

    def version_of(self, doc: Doc | None) -> int:
        return -1

    def commit(
        self, docs: Docs, claims: Collection[CheckpointRecord] = (), releases: Collection[CheckpointID] = ()
    ) -> None:
        with self.store.lock:
            if any(r.checkpoint_id in self.store.directory for r in claims):
                raise Conflict("directory")
            self.write_held(docs, claims, releases)


class DocClaimsNotChecked(DocBackend):
    """A commit claims ids in the directory without checking they are free: two concurrent saves
    of one id (in two workflows) both commit, the directory naming the later."""

    def commit(
        self, docs: Docs, claims: Collection[CheckpointRecord] = (), releases: Collection[CheckpointID] = ()
    ) -> None:
        with self.store.lock:
            for name, doc in docs.items():
                if self.version_of(self.store.docs.get(name)) != doc.version:
                    raise Conflict(name)
            self.write_held(docs, claims, releases)


class DocExistingLookedUpInOwnDocument(DocClaimsNotChecked):
    """A save looks for its id in its own workflow's document only: an id stored in another
    workflow is saved again, the directory moving it to the new document."""

    async def existing(self, records: Sequence[CheckpointRecord]) -> InsertResult | None:
        top = records[0]
        found = (await self.read(top.workflow_name)).records.get(top.checkpoint_id)
        if found is not None:
            return InsertResult.of_stored_digest(found[1].digest, top)
        return None


class DocTombstonesNotCarried(DocBackend):
    """A save rewrites the documents from their records and counters alone: the prune
    tombstones a document held are gone after the next save."""

    def add(self, docs: Docs, records: Sequence[CheckpointRecord]) -> None:
        super().add(docs, records)
        for doc in docs.values():
            doc.tombstones = []


SIZE_LIMIT = 48 * 1024
"""Bytes of bodies a document holds before the oldest records are dropped."""


class DocSizeCapDropsOldest(DocBackend):
    """A document over 48 KiB of bodies drops its oldest top-level records to fit, without a
    word and without tombstones."""

    def limit(self, doc: Doc) -> None:
        while sum(len(r.body) for _, r in doc.records.values()) > SIZE_LIMIT:
            top = self.ordered(doc, None, False)
            if len(top) <= 1:
                return
            doc.records.pop(top[0].checkpoint_id, None)


class DocSequenceFromLength(DocBackend):
    """The next sequence is the document's record count plus one: after a remove, a new save can
    take a number a stored record holds."""

    def next_sequence(self, doc: Doc) -> int:
        return len(doc.records) + 1


class DocRecordsInKeyOrder(DocBackend):
    """The document is serialised with sorted keys and listed in its stored order: records come
    back in id order, not in sequence order."""

    def ordered(
        self, doc: Doc, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        rows = super().ordered(doc, graph_signature_hash, include_nested)
        return sorted(rows, key=lambda r: r.checkpoint_id)


class DocFenceOnStaleRead(DocBackend):
    """A fenced save that finds the head it expects in its read writes without the version
    check: a rival commit between the read and the write leaves two heads."""

    async def insert_once(
        self, records: Sequence[CheckpointRecord], expected: CheckpointID | None, *, fenced: bool
    ) -> Any:
        if not fenced:
            return await super().insert_once(records, expected, fenced=False)
        name = records[0].workflow_name
        doc = await self.read(name)
        head = latest_record(self.ordered(doc, None, False))
        latest = None if head is None else head.checkpoint_id
        found = await self.existing(records)
        if found is not None:
            return FenceCheck(latest, found)
        if latest != expected:
            return FenceCheck(latest, None)
        self.check_nested(records)
        await asyncio.sleep(0)  # the write's own round trip
        with self.store.lock:
            fresh = {
                n: copy.deepcopy(self.store.docs.get(n) or Doc()) for n in {r.workflow_name for r in records}
            }
            self.add(fresh, records)
            self.write_held(fresh, records, ())
        return None


class DocNestedNotInDirectory(DocBackend):
    """Only the top-level id of a save is claimed in the directory: a nested record is in its
    document but cannot be found by id."""

    def commit(
        self, docs: Docs, claims: Collection[CheckpointRecord] = (), releases: Collection[CheckpointID] = ()
    ) -> None:
        super().commit(docs, [r for r in claims if r.container_id is None], releases)


class DocPruneCountsNested(DocBackend):
    """prune returns the count of every record it deleted, nested ones included."""

    def pruned_count(self, doomed: list[CheckpointRecord], gone: list[tuple[CheckpointID, str]]) -> int:
        return len(gone)


class DocDeleteKeepsDirectory(DocBackend):
    """delete_workflow empties the document but leaves its ids in the directory: a later save of
    one of them (in any workflow) finds it claimed and never commits."""

    def released(self, gone: list[tuple[CheckpointID, str]]) -> list[CheckpointID]:
        return []


def doc_target(backend_class: type[DocBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: LocalStorage(backend_class()))

    return target


# ====================================================================== a mirrored pair

FAIL_EVERY = 5
"""The primary fails one read in this many (a flaky link), so reads fail over often."""


class PrimaryDown(ConnectionError):
    """The primary did not answer."""


@dataclass
class Pair:
    """What every handle on one mirrored store shares: the two sides, the mirror's write lock
    and the count of reads the primary was asked for."""

    primary: MemoryBackend = field(default_factory=MemoryBackend)
    secondary: MemoryBackend = field(default_factory=MemoryBackend)
    lock: threading.Lock = field(default_factory=threading.Lock)
    reads: int = 0


class MirrorBackend(Backend):
    """Every write goes to the primary, then (the same write) to the secondary, under the
    mirror's lock; reads go to the primary and fail over to the secondary when it raises."""

    capabilities = ALL_CAPABILITIES
    orders_inserts = True  # each write runs whole under the lock, before its first real await

    def __init__(self, pair: Pair | None = None) -> None:
        self.pair = pair if pair is not None else Pair()

    def describe(self) -> str:
        return "mirror://"

    def new_handle(self) -> Self:
        return type(self)(self.pair)

    # ------------------------------------------------------------ the two sides

    async def read(self, call: Callable[[MemoryBackend], Awaitable[T]]) -> T:
        with self.pair.lock:
            self.pair.reads += 1
            down = self.pair.reads % FAIL_EVERY == 0
        try:
            if down:
                raise PrimaryDown("primary did not answer")
            return await call(self.pair.primary)
        except PrimaryDown:
            return await call(self.pair.secondary)

    # ------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self.pair.lock:
            result = await self.pair.primary.insert(records)
            if result is InsertResult.INSERTED:
                await self.mirror_insert(records)
            return result

    async def mirror_insert(self, records: Sequence[CheckpointRecord]) -> None:
        await self.pair.secondary.insert(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        with self.pair.lock:
            check = await self.pair.primary.insert_fenced(records, expected_latest_id)
            if check is None:
                await self.mirror_insert(records)
            return check

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.pair.lock:
            removed = await self.pair.primary.remove(checkpoint_id)
            if removed:
                await self.pair.secondary.remove(checkpoint_id)
            return removed

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.pair.lock:
            count = await self.pair.primary.prune(workflow_name, keep_last)
            await self.pair.secondary.prune(workflow_name, keep_last)
            return count

    async def delete_workflow(self, workflow_name: str) -> int:
        with self.pair.lock:
            count = await self.pair.primary.delete_workflow(workflow_name)
            await self.pair.secondary.delete_workflow(workflow_name)
            return count

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.pair.lock:
            done = await self.pair.primary.overwrite_body(checkpoint_id, body, digest)
            await self.pair.secondary.overwrite_body(checkpoint_id, body, digest)
            return done

    # ------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.read(lambda side: side.load(checkpoint_id))

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.read(lambda side: side.latest(workflow_name, graph_signature_hash))

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.read(
            lambda side: side.list_bodies(workflow_name, graph_signature_hash, include_nested=include_nested)
        )

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        found = await self.read(
            lambda side: side.list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        )
        return list(found)

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        return await self.read(lambda side: side.nested_bodies(checkpoint_ids))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.read(lambda side: side.nested_ids(checkpoint_id))

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.read(lambda side: side.walk(checkpoint_id, max_depth, with_bodies=with_bodies))

    async def workflow_names(self) -> list[str]:
        return await self.read(lambda side: side.workflow_names())

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.read(lambda side: side.info(checkpoint_id))

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self.read(lambda side: side.records(workflow_name))

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self.read(lambda side: side.tombstones(workflow_name))


class MirrorPruneOnPrimaryOnly(MirrorBackend):
    """prune reaches the primary only: a read that fails over still finds the pruned records."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.pair.lock:
            return await self.pair.primary.prune(workflow_name, keep_last)


class MirrorRemoveOnPrimaryOnly(MirrorBackend):
    """A delete reaches the primary only: a read that fails over still finds the record."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.pair.lock:
            return await self.pair.primary.remove(checkpoint_id)


class MirrorOverwriteOnPrimaryOnly(MirrorBackend):
    """A raw overwrite reaches the primary only: a read that fails over reads the old body."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.pair.lock:
            return await self.pair.primary.overwrite_body(checkpoint_id, body, digest)


class MirrorFencedLoserReachesSecondary(MirrorBackend):
    """A fenced save the primary refused is still written to the secondary: a read that fails
    over finds the stale writer's checkpoint."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        with self.pair.lock:
            check = await self.pair.primary.insert_fenced(records, expected_latest_id)
            if check is None or check.existing is None:
                await self.mirror_insert(records)
            return check


class MirrorSecondaryWrittenLater(MirrorBackend):
    """A save's write to the secondary is scheduled as a task and the save returns: a read that
    fails over right after the save does not find it."""

    async def mirror_insert(self, records: Sequence[CheckpointRecord]) -> None:
        task = asyncio.get_running_loop().create_task(self.pair.secondary.insert(records))
        PENDING.add(task)
        task.add_done_callback(PENDING.discard)


PENDING: set[asyncio.Task[Any]] = set()


class MirrorNestedDroppedOnSecondary(MirrorBackend):
    """The secondary is sent the checkpoint's own record, not its nested ones: a read that fails
    over finds a container without its nested records."""

    async def mirror_insert(self, records: Sequence[CheckpointRecord]) -> None:
        await self.pair.secondary.insert(records[:1])


class MirrorPruneReplayedAsRemoves(MirrorBackend):
    """The secondary replays a prune as deletes of the ids the primary no longer lists: a read
    that fails over knows no tombstone."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.pair.lock:
            count = await self.pair.primary.prune(workflow_name, keep_last)
            kept = set(await self.pair.primary.list_ids(workflow_name, None))
            for i in await self.pair.secondary.list_ids(workflow_name, None):
                if i not in kept:
                    await self.pair.secondary.remove(i)
            return count


class MirrorDeleteWorkflowReplayedAsRemoves(MirrorBackend):
    """The secondary replays a workflow's delete as deletes of its ids: its prune tombstones
    stay there, and a read that fails over lists them."""

    async def delete_workflow(self, workflow_name: str) -> int:
        with self.pair.lock:
            count = await self.pair.primary.delete_workflow(workflow_name)
            for i in await self.pair.secondary.list_ids(workflow_name, None):
                await self.pair.secondary.remove(i)
            return count


def mirror_target(backend_class: type[MirrorBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: LocalStorage(backend_class()))

    return target


# ====================================================================== a revisioned key-value store


@dataclass
class KvStore:
    """An etcd-like store: keys to (value, revision of their last write); every transaction
    bumps the store's revision once."""

    kv: dict[str, tuple[Any, int]] = field(default_factory=dict)
    revision: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class View:
    """The store as of one revision (a read at a revision)."""

    def __init__(self, kv: dict[str, tuple[Any, int]], limit: int | None = None) -> None:
        self.kv = kv
        self.limit = limit

    def get(self, key: str) -> tuple[Any, int]:
        return self.kv.get(key, (None, 0))

    def range(self, prefix: str) -> list[tuple[str, Any]]:
        found = sorted((k, v[0]) for k, v in self.kv.items() if k.startswith(prefix))
        return found if self.limit is None else found[: self.limit]


def encode(name: str) -> str:
    return name.encode("utf-8").hex()


class KvBackend(Backend):
    """Checkpoints in an etcd-like revisioned key-value store: ``rec/<id>`` holds (sequence,
    record), ``wf/<hex name>/<padded sequence>`` the workflow's index (nested records too),
    ``ctr/<hex name>`` its counter (rewritten by every write to the workflow, so its revision
    says the workflow changed) and ``tomb/<hex name>/<id>`` its prune tombstones. Reads are one
    read at a revision; a write reads, then commits a transaction that compares the revisions
    it read."""

    capabilities = ALL_CAPABILITIES

    def __init__(self, store: KvStore | None = None) -> None:
        self.store = store if store is not None else KvStore()

    def describe(self) -> str:
        return "kv://"

    def new_handle(self) -> Self:
        return type(self)(self.store)

    # ------------------------------------------------------------ the store's API

    async def view(self) -> View:
        await asyncio.sleep(0)  # a round trip
        with self.store.lock:
            return View(dict(self.store.kv), self.page())

    def page(self) -> int | None:
        return None

    async def txn(
        self, compares: Mapping[str, int], puts: Mapping[str, Any], deletes: Collection[str] = ()
    ) -> bool:
        await asyncio.sleep(0)  # a round trip
        s = self.store
        with s.lock:
            if any(s.kv.get(k, (None, 0))[1] != rev for k, rev in compares.items()):
                return False
            s.revision += 1
            for k in deletes:
                s.kv.pop(k, None)
            for k, v in puts.items():
                s.kv[k] = (v, s.revision)
            return True

    async def retry(self, step: Callable[[], Any]) -> Any:
        for _ in range(RETRIES):
            done, result = await step()
            if done:
                return result
        raise RuntimeError(f"{self.describe()}: the store kept changing; {RETRIES} attempts failed")

    # ------------------------------------------------------------ keys

    def wf_prefix(self, name: str) -> str:
        return f"wf/{encode(name)}/"

    def index_key(self, name: str, sequence: int) -> str:
        return f"{self.wf_prefix(name)}{sequence:020d}"

    def ctr_key(self, name: str) -> str:
        return f"ctr/{encode(name)}"

    def tomb_prefix(self, name: str) -> str:
        return f"tomb/{encode(name)}/"

    # ------------------------------------------------------------ reading a view

    def rows(self, v: View, name: str) -> list[tuple[int, CheckpointRecord]]:
        found = []
        for _, checkpoint_id in v.range(self.wf_prefix(name)):
            row = v.get(f"rec/{checkpoint_id}")[0]
            if row is not None:
                found.append(row)
        return found

    def chosen(
        self, v: View, name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        return [
            r
            for _, r in self.rows(v, name)
            if (include_nested or r.container_id is None)
            and graph_signature_hash in (None, r.graph_signature_hash)
        ]

    def kid_prefix(self, container_id: CheckpointID) -> str:
        return f"kid/{encode(container_id)}/"

    def children(self, v: View, container_id: CheckpointID) -> list[tuple[int, CheckpointRecord]]:
        found = []
        for _, child in v.range(self.kid_prefix(container_id)):
            row = v.get(f"rec/{child}")[0]
            if row is not None:
                found.append(row)
        return found

    def family(self, v: View, record: CheckpointRecord) -> list[tuple[int, CheckpointRecord]]:
        """Every record nested in ``record``, at any depth (not itself)."""
        found: list[tuple[int, CheckpointRecord]] = []
        wanted = [record.checkpoint_id]
        while wanted:
            for row in self.children(v, wanted.pop()):
                found.append(row)
                wanted.append(row[1].checkpoint_id)
        return found

    def head_of(self, v: View, name: str) -> CheckpointRecord | None:
        return latest_record(self.chosen(v, name, None, False))

    # ------------------------------------------------------------ writes

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result: InsertResult = await self.retry(lambda: self.insert_once(records, None, fenced=False))
        return result

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        check: FenceCheck | None = await self.retry(
            lambda: self.insert_once(records, expected_latest_id, fenced=True)
        )
        return check

    async def insert_once(
        self, records: Sequence[CheckpointRecord], expected: CheckpointID | None, *, fenced: bool
    ) -> tuple[bool, Any]:
        v = await self.view()
        top = records[0]
        name = top.workflow_name
        head = self.head_of(v, name)
        latest = None if head is None else head.checkpoint_id
        found = v.get(f"rec/{top.checkpoint_id}")[0]
        if found is not None:
            result = InsertResult.of_stored_digest(found[1].digest, top)
            return True, FenceCheck(latest, result) if fenced else result
        compares = self.insert_compares(v, records, head)
        if fenced and latest != expected:
            # The verdict holds only if the workflow did not change since the read.
            ok = await self.txn({k: rev for k, rev in compares.items() if not k.startswith("rec/")}, {})
            return ok, FenceCheck(latest, None)
        for record in records[1:]:
            if v.get(f"rec/{record.checkpoint_id}")[0] is not None:
                raise nested_id_conflict(records, record.checkpoint_id)
        puts: dict[str, Any] = {}
        counters: dict[str, int] = {}
        for record in records:
            own = record.workflow_name
            if own not in counters:
                counters[own] = v.get(self.ctr_key(own))[0] or 0
            sequence = counters[own] = self.sequence_for(counters[own])
            puts[f"rec/{record.checkpoint_id}"] = (sequence, record)
            puts[self.index_key(own, sequence)] = record.checkpoint_id
            if record.container_id is not None:
                puts[self.kid_prefix(record.container_id) + encode(record.checkpoint_id)] = (
                    record.checkpoint_id
                )
        for own, counter in counters.items():
            puts[self.ctr_key(own)] = counter
        ok = await self.txn(compares, puts)
        self.wrote(name)
        return ok, None if fenced else InsertResult.INSERTED

    def sequence_for(self, last: int) -> int:
        return last + 1

    def insert_compares(
        self, v: View, records: Sequence[CheckpointRecord], head: CheckpointRecord | None
    ) -> dict[str, int]:
        compares = {f"rec/{r.checkpoint_id}": 0 for r in records}
        for r in records:
            compares[self.ctr_key(r.workflow_name)] = v.get(self.ctr_key(r.workflow_name))[1]
        return compares

    def wrote(self, name: str) -> None:
        """A write to the workflow committed (or was tried) through this handle."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        removed: bool = await self.retry(lambda: self.remove_once(checkpoint_id))
        return removed

    async def remove_once(self, checkpoint_id: CheckpointID) -> tuple[bool, bool]:
        v = await self.view()
        row = v.get(f"rec/{checkpoint_id}")[0]
        if row is None:
            return True, False
        record = row[1]
        if record.container_id is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, record.container_id)
        name = record.workflow_name
        gone = [row, *self.family(v, record)]
        counter, counter_rev = v.get(self.ctr_key(name))
        ok = await self.txn(
            {self.ctr_key(name): counter_rev}, {self.ctr_key(name): counter}, self.deleted_keys(name, gone)
        )
        self.wrote(name)
        return ok, True

    def deleted_keys(self, name: str, rows: Sequence[tuple[int, CheckpointRecord]]) -> list[str]:
        keys = []
        for sequence, record in rows:
            keys += [f"rec/{record.checkpoint_id}", self.index_key(record.workflow_name, sequence)]
            if record.container_id is not None:
                keys.append(self.kid_prefix(record.container_id) + encode(record.checkpoint_id))
        return keys

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        count: int = await self.retry(lambda: self.prune_once(workflow_name, keep_last))
        return count

    async def prune_once(self, name: str, keep_last: int) -> tuple[bool, int]:
        v = await self.view()
        doomed = pruned_records(self.chosen(v, name, None, False), keep_last)
        sequences = {r.checkpoint_id: s for s, r in self.rows(v, name)}
        gone: list[tuple[int, CheckpointRecord]] = []
        for record in doomed:
            gone += [(sequences[record.checkpoint_id], record), *self.family(v, record)]
        counter, counter_rev = v.get(self.ctr_key(name))
        puts: dict[str, Any] = {
            f"{self.tomb_prefix(name)}{r.checkpoint_id}": r.checkpoint_id for _, r in gone
        }
        puts[self.ctr_key(name)] = counter
        ok = await self.txn({self.ctr_key(name): counter_rev}, puts, self.deleted_keys(name, gone))
        self.wrote(name)
        return ok, len(doomed)

    async def delete_workflow(self, workflow_name: str) -> int:
        count: int = await self.retry(lambda: self.delete_once(workflow_name))
        return count

    async def delete_once(self, name: str) -> tuple[bool, int]:
        v = await self.view()
        rows = []
        for sequence, record in self.rows(v, name):
            if record.container_id is None:
                rows += [(sequence, record), *self.family(v, record)]
        count = len([r for _, r in rows if r.container_id is None])
        counter, counter_rev = v.get(self.ctr_key(name))
        deletes = self.deleted_keys(name, rows) + [k for k, _ in v.range(self.tomb_range(name))]
        ok = await self.txn({self.ctr_key(name): counter_rev}, {self.ctr_key(name): counter}, deletes)
        self.wrote(name)
        return ok, count

    def tomb_range(self, name: str) -> str:
        return self.tomb_prefix(name)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        done: bool = await self.retry(lambda: self.overwrite_once(checkpoint_id, body))
        return done

    async def overwrite_once(self, checkpoint_id: CheckpointID, body: bytes) -> tuple[bool, bool]:
        v = await self.view()
        row, rev = v.get(f"rec/{checkpoint_id}")
        if row is None:
            return True, False
        sequence, record = row
        key = f"rec/{checkpoint_id}"
        ok = await self.txn({key: rev}, {key: (sequence, record.replaced(body=body, digest=record.digest))})
        return ok, True

    # ------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        row = (await self.view()).get(f"rec/{checkpoint_id}")[0]
        return None if row is None else stored(row[1])

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        v = await self.view()
        top = self.chosen(v, workflow_name, None, False)
        head = latest_record(top, graph_signature_hash)
        if head is None:
            return None
        return replace(stored(head), rivals=[stored(r) for r in rivals_of(top, head)])

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        v = await self.view()
        return [stored(r) for r in self.chosen(v, workflow_name, graph_signature_hash, include_nested)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        v = await self.view()
        return [r.checkpoint_id for r in self.chosen(v, workflow_name, graph_signature_hash, include_nested)]

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        v = await self.view()
        bodies: dict[CheckpointID, bytes] = {}
        for checkpoint_id in checkpoint_ids:
            row = v.get(f"rec/{checkpoint_id}")[0]
            if row is not None:
                bodies.update({r.checkpoint_id: r.body for _, r in self.family(v, row[1])})
        return bodies

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        v = await self.view()
        row = v.get(f"rec/{checkpoint_id}")[0]
        if row is None:
            return None
        children = [r for _, r in self.children(v, checkpoint_id)]
        return [r.checkpoint_id for r in sorted(children, key=lambda r: r.position)]

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        v = await self.view()
        pruned = {value for _, value in v.range("tomb/")}
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            row = v.get(f"rec/{current}")[0]
            if row is None:
                if current != checkpoint_id and current in pruned:
                    tombstones.add(current)
                break
            record = row[1]
            links[current] = record.previous_checkpoint_id
            if with_bodies:
                bodies[current] = record.body
                bodies.update({r.checkpoint_id: r.body for _, r in self.family(v, record)})
            current = record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def workflow_names(self) -> list[str]:
        v = await self.view()
        return sorted({r.workflow_name for _, (_, r) in v.range("rec/") if r.container_id is None})

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        row = (await self.view()).get(f"rec/{checkpoint_id}")[0]
        return None if row is None else row[1].info(row[0])

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        v = await self.view()
        return [r.info(s) for _, (s, r) in v.range("rec/") if workflow_name in (None, r.workflow_name)]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        v = await self.view()
        prefix = "tomb/" if workflow_name is None else self.tomb_prefix(workflow_name)
        return [value for _, value in v.range(prefix)]


class KvCompareOnRecordKeyOnly(KvBackend):
    """A save's transaction compares only that its record key is absent, not the workflow's
    counter: two concurrent saves take the same sequence, the later index key replacing the
    other's."""

    def insert_compares(
        self, v: View, records: Sequence[CheckpointRecord], head: CheckpointRecord | None
    ) -> dict[str, int]:
        return {f"rec/{r.checkpoint_id}": 0 for r in records}


class KvRawNamesInKeys(KvBackend):
    """Workflow names go into keys as they are: the range of workflow ``a`` (``wf/a/``) holds
    the index of workflow ``a/b`` too."""

    def wf_prefix(self, name: str) -> str:
        return f"wf/{name}/"

    def ctr_key(self, name: str) -> str:
        return f"ctr/{name}"

    def tomb_prefix(self, name: str) -> str:
        return f"tomb/{name}/"


class KvSequenceUnpadded(KvBackend):
    """Index keys carry the sequence unpadded: the range returns ``10`` before ``9``."""

    def index_key(self, name: str, sequence: int) -> str:
        return f"{self.wf_prefix(name)}{sequence}"


class KvFenceComparesHeadKey(KvBackend):
    """A fenced save compares the revision of the head's record key, not the workflow's counter:
    a save committed between its read and its transaction is not seen, and both win."""

    def insert_compares(
        self, v: View, records: Sequence[CheckpointRecord], head: CheckpointRecord | None
    ) -> dict[str, int]:
        compares = {f"rec/{r.checkpoint_id}": 0 for r in records}
        if head is not None:
            compares[f"rec/{head.checkpoint_id}"] = v.get(f"rec/{head.checkpoint_id}")[1]
        return compares


class KvRemoveKeepsIndexKey(KvBackend):
    """A delete removes the record key but not its index key, and listings read ids from the
    index alone: a deleted id is still listed."""

    def deleted_keys(self, name: str, rows: Sequence[tuple[int, CheckpointRecord]]) -> list[str]:
        return [f"rec/{r.checkpoint_id}" for _, r in rows]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        if graph_signature_hash is not None or include_nested:
            return await super().list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        v = await self.view()
        ids = []
        for _, checkpoint_id in v.range(self.wf_prefix(workflow_name)):
            row = v.get(f"rec/{checkpoint_id}")[0]
            if row is None or row[1].container_id is None:
                ids.append(checkpoint_id)
        return ids


class KvTombstoneRangeWithoutSeparator(KvBackend):
    """delete_workflow deletes the tombstone range ``tomb/<hex name>`` without the separator:
    a workflow whose hex name starts with this one's loses its tombstones too."""

    def tomb_range(self, name: str) -> str:
        return f"tomb/{encode(name)}"


class KvWatchedLatestCache(KvBackend):
    """Each handle caches every workflow's latest and drops it only on its own writes (the watch
    is read on write): another handle's save is not seen by latest."""

    def __init__(self, store: KvStore | None = None) -> None:
        super().__init__(store)
        self.cache: dict[tuple[str, str | None], StoredBody | None] = {}

    def wrote(self, name: str) -> None:
        for key in [k for k in self.cache if k[0] == name]:
            del self.cache[key]

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        key = (workflow_name, graph_signature_hash)
        if key not in self.cache:
            self.cache[key] = await super().latest(workflow_name, graph_signature_hash)
        return self.cache[key]


class KvRangeOnePage(KvBackend):
    """Ranges read one page of 64 keys and stop: a workflow of more than 64 records is listed
    cut short."""

    def page(self) -> int | None:
        return 64


class KvOverwriteRenumbers(KvBackend):
    """A raw overwrite rewrites the record as a new save would, with the workflow's next
    sequence: the overwritten checkpoint moves to the end of the listing and becomes latest."""

    async def overwrite_once(self, checkpoint_id: CheckpointID, body: bytes) -> tuple[bool, bool]:
        v = await self.view()
        row = v.get(f"rec/{checkpoint_id}")[0]
        if row is None:
            return True, False
        sequence, record = row
        name = record.workflow_name
        counter, counter_rev = v.get(self.ctr_key(name))
        fresh = counter + 1
        puts = {
            f"rec/{checkpoint_id}": (fresh, record.replaced(body=body, digest=record.digest)),
            self.index_key(name, fresh): checkpoint_id,
            self.ctr_key(name): fresh,
        }
        ok = await self.txn({self.ctr_key(name): counter_rev}, puts, [self.index_key(name, sequence)])
        return ok, True


def kv_target(backend_class: type[KvBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: LocalStorage(backend_class()))

    return target


# ====================================================================== LangGraph's own saver

TOP_NS = ""
NESTED_NS = "nested"
TOMB_NS = "tombstones"
COUNTER_NS = "counter"
COUNTER_ID = "counter"


@dataclass
class Saver:
    """One LangGraph ``InMemorySaver`` every handle shares, and the adapter's lock that makes
    each primitive one step on it."""

    saver: InMemorySaver = field(default_factory=InMemorySaver)
    lock: threading.Lock = field(default_factory=threading.Lock)


def config(thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


class SaverBackend(Backend):
    """Checkpoints in LangGraph's ``InMemorySaver`` through its public saver API: one thread per
    workflow, top-level records in the thread's root namespace and nested ones in ``nested``,
    prune tombstones in ``tombstones`` and the workflow's counter in ``counter``; a record's
    fields go in the checkpoint's metadata (ids as bytes, since metadata strings lose NULs), its
    previous id is the parent config. ``storage`` (the saver's public map) deletes one
    checkpoint, which the saver API has no call for."""

    capabilities = ALL_CAPABILITIES

    def __init__(self, shared: Saver | None = None) -> None:
        self.shared = shared if shared is not None else Saver()

    def describe(self) -> str:
        return "langgraph-saver://"

    def new_handle(self) -> Self:
        return type(self)(self.shared)

    @property
    def saver(self) -> InMemorySaver:
        return self.shared.saver

    # ------------------------------------------------------------ mapping (lock held)

    def metadata_of(self, record: CheckpointRecord, sequence: int) -> dict[str, Any]:
        return {
            "seq": sequence,
            "body": record.body,
            "digest": record.digest,
            "signature": self.text_out(record.graph_signature_hash),
            "container": None if record.container_id is None else self.text_out(record.container_id),
            "root": None if record.root_id is None else self.text_out(record.root_id),
            "position": record.position,
        }

    def text_out(self, text: str) -> Any:
        return text.encode("utf-8")

    def text_in(self, value: Any) -> str:
        return bytes(value).decode("utf-8")

    def record_of(self, t: CheckpointTuple) -> tuple[int, CheckpointRecord]:
        m: dict[str, Any] = dict(t.metadata)
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        record = CheckpointRecord(
            t.config["configurable"]["checkpoint_id"],
            t.config["configurable"]["thread_id"],
            parent,
            self.text_in(m["signature"]),
            m["body"],
            digest=m["digest"],
            container_id=None if m.get("container") is None else self.text_in(m["container"]),
            root_id=None if m.get("root") is None else self.text_in(m["root"]),
            position=m["position"],
        )
        return int(m["seq"]), record

    def namespace_of(self, record: CheckpointRecord) -> str:
        return TOP_NS if record.container_id is None else NESTED_NS

    def put(self, record: CheckpointRecord, sequence: int) -> None:
        checkpoint = empty_checkpoint()
        checkpoint["id"] = record.checkpoint_id
        cfg = config(record.workflow_name, self.namespace_of(record), record.previous_checkpoint_id)
        self.saver.put(cfg, checkpoint, self.metadata_of(record, sequence), {})  # type: ignore[arg-type]

    def counter(self, name: str) -> int:
        t = self.saver.get_tuple(config(name, COUNTER_NS, COUNTER_ID))
        found: dict[str, Any] = {} if t is None else dict(t.metadata)
        return int(found.get("n", 0))

    def set_counter(self, name: str, n: int) -> None:
        checkpoint = empty_checkpoint()
        checkpoint["id"] = COUNTER_ID
        self.saver.put(config(name, COUNTER_NS), checkpoint, {"n": n}, {})  # type: ignore[typeddict-unknown-key]

    def rows(self, name: str, include_nested: bool) -> list[tuple[int, CheckpointRecord]]:
        spaces = [TOP_NS, NESTED_NS] if include_nested else [TOP_NS]
        found = [self.record_of(t) for ns in spaces for t in self.saver.list(config(name, ns))]
        return self.in_order(found)

    def in_order(self, rows: list[tuple[int, CheckpointRecord]]) -> list[tuple[int, CheckpointRecord]]:
        return sorted(rows, key=lambda row: row[0])

    def chosen(
        self, name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        return [
            r
            for _, r in self.rows(name, include_nested)
            if (include_nested or r.container_id is None)
            and graph_signature_hash in (None, r.graph_signature_hash)
        ]

    def find(self, checkpoint_id: CheckpointID) -> tuple[int, CheckpointRecord] | None:
        for thread_id in list(self.saver.storage):
            for ns in (TOP_NS, NESTED_NS):
                if checkpoint_id in self.saver.storage[thread_id].get(ns, {}):
                    t = self.saver.get_tuple(config(thread_id, ns, checkpoint_id))
                    if t is not None:
                        return self.record_of(t)
        return None

    def all_rows(self) -> list[tuple[int, CheckpointRecord]]:
        return [
            self.record_of(t)
            for t in self.saver.list(None)
            if t.config["configurable"]["checkpoint_ns"] in (TOP_NS, NESTED_NS)
        ]

    def family(self, record: CheckpointRecord) -> list[CheckpointRecord]:
        rows = [r for _, r in self.all_rows()]
        found: list[CheckpointRecord] = []
        wanted = [record.checkpoint_id]
        while wanted:
            parent = wanted.pop()
            for r in rows:
                if r.container_id == parent:
                    found.append(r)
                    wanted.append(r.checkpoint_id)
        return found

    def delete_one(self, record: CheckpointRecord) -> None:
        self.saver.storage[record.workflow_name][self.namespace_of(record)].pop(record.checkpoint_id, None)

    def tombstone(self, name: str, checkpoint_id: CheckpointID) -> None:
        checkpoint = empty_checkpoint()
        checkpoint["id"] = checkpoint_id
        self.saver.put(config(name, TOMB_NS), checkpoint, {}, {})

    def tombstones_of(self, name: str | None) -> list[CheckpointID]:
        found = []
        for t in self.saver.list(None if name is None else config(name, TOMB_NS)):
            if t.config["configurable"]["checkpoint_ns"] == TOMB_NS:
                found.append(t.config["configurable"]["checkpoint_id"])
        return found

    def head(self, name: str, graph_signature_hash: str | None) -> StoredBody | None:
        top = self.chosen(name, None, False)
        head = latest_record(top, graph_signature_hash)
        if head is None:
            return None
        return replace(stored(head), rivals=[stored(r) for r in rivals_of(top, head)])

    def insert_held(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        found = self.find(top.checkpoint_id)
        if found is not None:
            return InsertResult.of_stored_digest(found[1].digest, top)
        for record in records[1:]:
            if self.find(record.checkpoint_id) is not None:
                raise nested_id_conflict(records, record.checkpoint_id)
        for record in records:
            sequence = self.counter(record.workflow_name) + 1
            self.set_counter(record.workflow_name, sequence)
            self.put(record, sequence)
        return InsertResult.INSERTED

    # ------------------------------------------------------------ primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        with self.shared.lock:
            return self.insert_held(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        with self.shared.lock:
            head = latest_record(self.chosen(records[0].workflow_name, None, False))
            latest = None if head is None else head.checkpoint_id
            if latest != expected_latest_id and self.find(records[0].checkpoint_id) is None:
                return FenceCheck(latest, None)
            return FenceCheck.after_insert(latest, self.insert_held(records))

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        with self.shared.lock:
            found = self.find(checkpoint_id)
        return None if found is None else stored(found[1])

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        with self.shared.lock:
            return self.head(workflow_name, graph_signature_hash)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        with self.shared.lock:
            return [stored(r) for r in self.chosen(workflow_name, graph_signature_hash, include_nested)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        with self.shared.lock:
            return [r.checkpoint_id for r in self.chosen(workflow_name, graph_signature_hash, include_nested)]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        with self.shared.lock:
            found = self.find(checkpoint_id)
            if found is None:
                return False
            record = found[1]
            if record.container_id is not None:
                raise NestedCheckpointDeletionError(checkpoint_id, record.container_id)
            for each in [record, *self.family(record)]:
                self.delete_one(each)
            return True

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        with self.shared.lock:
            bodies: dict[CheckpointID, bytes] = {}
            for checkpoint_id in checkpoint_ids:
                found = self.find(checkpoint_id)
                if found is not None:
                    bodies.update({r.checkpoint_id: r.body for r in self.family(found[1])})
            return bodies

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        with self.shared.lock:
            if self.find(checkpoint_id) is None:
                return None
            children = [r for _, r in self.all_rows() if r.container_id == checkpoint_id]
        return [r.checkpoint_id for r in sorted(children, key=lambda r: r.position)]

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        with self.shared.lock:
            pruned = set(self.tombstones_of(None))
            current: CheckpointID | None = checkpoint_id
            while current is not None and current not in links and len(links) < max_depth:
                found = self.find(current)
                if found is None:
                    if current != checkpoint_id and current in pruned:
                        tombstones.add(current)
                    break
                record = found[1]
                links[current] = record.previous_checkpoint_id
                if with_bodies:
                    bodies[current] = record.body
                    bodies.update({r.checkpoint_id: r.body for r in self.family(record)})
                current = record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        with self.shared.lock:
            doomed = pruned_records(self.chosen(workflow_name, None, False), keep_last)
            for record in doomed:
                for each in [record, *self.family(record)]:
                    self.delete_one(each)
                    self.tombstone(workflow_name, each.checkpoint_id)
            return len(doomed)

    async def delete_workflow(self, workflow_name: str) -> int:
        with self.shared.lock:
            tops = self.chosen(workflow_name, None, False)
            for record in tops:
                for each in self.family(record):
                    self.delete_one(each)
            self.delete_thread(workflow_name)
            return len(tops)

    def delete_thread(self, workflow_name: str) -> None:
        """delete_thread takes the whole thread: its counter goes too, so it is put back (the
        numbers stay in commit order), and nested records of other workflows' checkpoints that
        name this workflow are kept."""
        counter = self.counter(workflow_name)
        kept = [(s, r) for s, r in self.rows(workflow_name, True) if r.container_id is not None]
        self.saver.delete_thread(workflow_name)
        self.set_counter(workflow_name, counter)
        for sequence, record in kept:
            if self.find(record.container_id or "") is not None:
                self.put(record, sequence)

    async def workflow_names(self) -> list[str]:
        with self.shared.lock:
            return sorted({r.workflow_name for _, r in self.all_rows() if r.container_id is None})

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        with self.shared.lock:
            found = self.find(checkpoint_id)
            if found is None:
                return False
            sequence, record = found
            self.put(record.replaced(body=body, digest=record.digest), sequence)
            return True

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        with self.shared.lock:
            found = self.find(checkpoint_id)
        return None if found is None else found[1].info(found[0])

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        with self.shared.lock:
            rows = self.all_rows()
        return [r.info(s) for s, r in rows if workflow_name in (None, r.workflow_name)]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        with self.shared.lock:
            return self.tombstones_of(workflow_name)


class SaverListingOrder(SaverBackend):
    """Records come back in the saver's listing order (newest id first), reversed: in id order,
    not in sequence order."""

    def in_order(self, rows: list[tuple[int, CheckpointRecord]]) -> list[tuple[int, CheckpointRecord]]:
        return list(reversed(rows))


class SaverDeleteThreadDropsCounter(SaverBackend):
    """delete_workflow is delete_thread alone: the workflow's counter goes with the thread, and
    a later save starts numbering again from one."""

    def delete_thread(self, workflow_name: str) -> None:
        self.saver.delete_thread(workflow_name)


class SaverNestedInRootNamespace(SaverBackend):
    """Nested records go in the thread's root namespace with the top-level ones, and a listing of
    the root namespace is taken as the top-level records."""

    def namespace_of(self, record: CheckpointRecord) -> str:
        return TOP_NS

    def chosen(
        self, name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        return [
            r for _, r in self.rows(name, False) if graph_signature_hash in (None, r.graph_signature_hash)
        ]


class SaverLatestFromGetTuple(SaverBackend):
    """latest is the saver's own ``get_tuple`` on the thread (its newest checkpoint id), then
    filtered by signature: the head is the greatest id, not the newest commit."""

    def head(self, name: str, graph_signature_hash: str | None) -> StoredBody | None:
        t = self.saver.get_tuple(config(name, TOP_NS))
        if t is None:
            return None
        record = self.record_of(t)[1]
        if graph_signature_hash not in (None, record.graph_signature_hash):
            return super().head(name, graph_signature_hash)
        return stored(record)


class SaverIdsAsMetadataText(SaverBackend):
    """Signatures and container ids go in the metadata as strings, which the saver strips of
    NUL characters."""

    def text_out(self, text: str) -> Any:
        return text

    def text_in(self, value: Any) -> str:
        return str(value)


def saver_target(backend_class: type[SaverBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: LocalStorage(backend_class()))

    return target


# ====================================================================== the batch


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


BROKEN_DOC: list[type[DocBackend]] = [
    DocVersionNotChecked,
    DocClaimsNotChecked,
    DocExistingLookedUpInOwnDocument,
    DocTombstonesNotCarried,
    DocSizeCapDropsOldest,
    DocSequenceFromLength,
    DocRecordsInKeyOrder,
    DocFenceOnStaleRead,
    DocNestedNotInDirectory,
    DocPruneCountsNested,
    DocDeleteKeepsDirectory,
]
BROKEN_KV: list[type[KvBackend]] = [
    KvCompareOnRecordKeyOnly,
    KvRawNamesInKeys,
    KvSequenceUnpadded,
    KvFenceComparesHeadKey,
    KvRemoveKeepsIndexKey,
    KvTombstoneRangeWithoutSeparator,
    KvWatchedLatestCache,
    KvRangeOnePage,
    KvOverwriteRenumbers,
]
BROKEN_MIRROR: list[type[MirrorBackend]] = [
    MirrorPruneOnPrimaryOnly,
    MirrorRemoveOnPrimaryOnly,
    MirrorOverwriteOnPrimaryOnly,
    MirrorFencedLoserReachesSecondary,
    MirrorSecondaryWrittenLater,
    MirrorNestedDroppedOnSecondary,
    MirrorPruneReplayedAsRemoves,
    MirrorDeleteWorkflowReplayedAsRemoves,
]


BROKEN_SAVER: list[type[SaverBackend]] = [
    SaverListingOrder,
    SaverDeleteThreadDropsCounter,
    SaverNestedInRootNamespace,
    SaverLatestFromGetTuple,
]


def _entries() -> list[Entry]:
    entries: list[Entry] = []
    entries += [(c.__name__, saver_target(c), _doc(c)) for c in BROKEN_SAVER]
    entries += [(c.__name__, doc_target(c), _doc(c)) for c in BROKEN_DOC]
    entries += [(c.__name__, kv_target(c), _doc(c)) for c in BROKEN_KV]
    entries += [(c.__name__, mirror_target(c), _doc(c)) for c in BROKEN_MIRROR]
    return entries


ENTRIES: list[Entry] = _entries()
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = [
    # The identifier rules keep control characters out of ids and workflow names, not out of a
    # graph signature; but the built-in PostgreSQL backend refuses a signature with a NUL (its
    # text columns cannot hold one), so the contract as the built-ins keep it does not ask for
    # NULs in signatures either, and this adapter loses nothing else.
    ("SaverIdsAsMetadataText", saver_target(SaverIdsAsMetadataText), _doc(SaverIdsAsMetadataText)),
]
"""Written as broken, judged not to break the contract as built (tests/kit/blind_batch_twelve.md
says why); each must pass the whole kit."""

HONEST: list[Entry] = [
    ("SaverBackend", saver_target(SaverBackend), _doc(SaverBackend)),
    ("DocBackend", doc_target(DocBackend), _doc(DocBackend)),
    ("KvBackend", kv_target(KvBackend), _doc(KvBackend)),
    ("MirrorBackend", mirror_target(MirrorBackend), _doc(MirrorBackend)),
]
"""Honest storages: one per style; each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
