"""A fifteenth blind batch: broken storages written from the author docs alone.

Each broken storage has exactly one defect an author who read only the author docs and the
public author API could ship. Four styles, each over batch nine's ``Tables`` (the primitives as
plain functions) with the style's own representation underneath:

* ``DynamoBackend``: a DynamoDB-like single table: a record is an item ``("CP#id", "META")`` and
  a workflow's commit order is a partition of items ``("WF#name", "SEQ#000..n")``; listings Query
  the workflow's partition a page (``PAGE`` items) at a time, resuming after LastEvaluatedKey; a
  family is one TransactWriteItems with ``attribute_not_exists`` conditions; a global secondary
  index by checkpoint id is fed asynchronously by a stream task (one stream event a call) and is
  only eventually consistent, so the honest storage never reads it for an answer;
* ``S3Backend``: an author's own S3 key layout through boto3 on in-process moto, a bucket with
  random bits per store: ``rec/<percent-escaped id>`` written with ``IfNoneMatch='*'`` and
  ``wf/<escaped workflow>/<zero-padded sequence>`` naming the id, listed ten keys a page with
  continuation tokens; every primitive's boto3 calls run on a worker thread;
* ``SoftBackend``: a soft-delete store: remove, prune and delete_workflow set a row's deleted
  flag (prune also writes a tombstone) and a background vacuum (one pass a call) removes the
  flagged rows later, first listing them, then deleting each one still flagged;
* ``MvccBackend``: multi-version concurrency control: every write transaction works on its
  snapshot (the latest committed version when it starts) and commits a new version stamped with
  the next transaction id, first-committer-wins (a write whose snapshot is no longer the latest
  runs again); reads run at the latest committed version when the call starts; versions no
  running read needs are garbage-collected.

``ENTRIES`` lists them as (name, factory, defect); a factory returns a
``conformance.StorageTarget``. tests/kit/blind_batch_fifteen.md has the kit's verdicts.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import pickle
import threading
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterator, MutableMapping, Sequence
from typing import Any, Self, TypeVar

from conformance import StorageTarget
from storages.backend import (
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    nested_id_conflict,
    pruned_records,
)
from storages.contract import CheckpointID, CheckpointInfo

from .blind_batch_nine import Tables, TableStorage, stored
from .blind_batch_thirteen import TablesBackend

Entry = tuple[str, Callable[[], StorageTarget], str]
T = TypeVar("T")
Value = tuple[int, CheckpointRecord]
Key = tuple[str, str]


def _doc(obj: Any) -> str:
    return " ".join((obj.__doc__ or "").split())


def tables_target(backend_class: type[TablesBackend]) -> Callable[[], StorageTarget]:
    def target() -> StorageTarget:
        return StorageTarget(backend_class.__name__, lambda: TableStorage(backend_class()))

    return target


# ====================================================================== a DynamoDB-like table

PAGE = 8
"""Items a Query returns per page."""
BATCH_WRITE = 25
"""Items one BatchWriteItem takes."""


def seq_key(sequence: int) -> str:
    return f"SEQ#{sequence:012d}"


class ItemTable:
    """The single table: items by (partition key, sort key), a stream of changes and a global
    secondary index by checkpoint id that the stream feeds."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.stream: list[tuple[CheckpointID, Value | None]] = []
        self.gsi: dict[CheckpointID, Value] = {}

    def get(self, key: Key) -> Any | None:
        return self.items.get(key[0], {}).get(key[1])

    def put(self, key: Key, value: Any) -> None:
        self.items.setdefault(key[0], {})[key[1]] = value

    def delete(self, key: Key) -> None:
        partition = self.items.get(key[0])
        if partition is not None:
            partition.pop(key[1], None)
            if not partition:
                del self.items[key[0]]

    def query(self, pk: str, limit: int, start: str | None) -> tuple[list[Any], str | None]:
        """One page of the partition in sort-key order, after ``start``; the last key of a full
        page (LastEvaluatedKey) when more may follow."""
        partition = self.items.get(pk, {})
        keys = sorted(k for k in partition if start is None or k > start)
        page = keys[:limit]
        last = page[-1] if len(keys) > limit else None
        return [partition[k] for k in page], last

    def pump(self, events: int = 1) -> None:
        """The stream task: applies the oldest change(s) to the index."""
        for _ in range(min(events, len(self.stream))):
            checkpoint_id, value = self.stream.pop(0)
            if value is None:
                self.gsi.pop(checkpoint_id, None)
            else:
                self.gsi[checkpoint_id] = value


class ItemRecords(MutableMapping[CheckpointID, Value]):
    """Records as items: ``("CP#id", "META")`` holds (sequence, record) and
    ``("WF#name", "SEQ#n")`` the id, its place in the workflow's commit order."""

    def __init__(self, table: ItemTable) -> None:
        self.table = table

    def __getitem__(self, checkpoint_id: CheckpointID) -> Value:
        found = self.table.get(("CP#" + checkpoint_id, "META"))
        if found is None:
            raise KeyError(checkpoint_id)
        return found  # type: ignore[no-any-return]

    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        # One TransactWriteItems of the two items (the caller checked attribute_not_exists).
        self.table.put(("CP#" + checkpoint_id, "META"), value)
        self.table.put(("WF#" + value[1].workflow_name, seq_key(value[0])), checkpoint_id)
        self.table.stream.append((checkpoint_id, value))

    def __delitem__(self, checkpoint_id: CheckpointID) -> None:
        sequence, record = self[checkpoint_id]
        self.table.delete(("CP#" + checkpoint_id, "META"))
        self.table.delete(("WF#" + record.workflow_name, seq_key(sequence)))
        self.table.stream.append((checkpoint_id, None))

    def __iter__(self) -> Iterator[CheckpointID]:
        return iter([pk[3:] for pk in list(self.table.items) if pk.startswith("CP#")])

    def __len__(self) -> int:
        return sum(1 for pk in self.table.items if pk.startswith("CP#"))


class DynamoTables(Tables):
    """Tables whose listings Query the workflow's partition page by page."""

    table: ItemTable

    @classmethod
    def new(cls) -> Self:
        table = ItemTable()
        tables = cls(records=ItemRecords(table))
        tables.table = table
        return tables

    def query_ids(self, workflow_name: str) -> list[CheckpointID]:
        """Every id of the workflow's partition, in commit order, a page per Query."""
        ids: list[CheckpointID] = []
        start: str | None = None
        while True:
            page, last = self.table.query("WF#" + workflow_name, PAGE, start)
            ids += page
            if last is None:
                return ids
            start = self.next_start(last)

    def next_start(self, last: str) -> str | None:
        return last

    def rows(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        found = []
        for checkpoint_id in self.query_ids(workflow_name):
            value = self.records.get(checkpoint_id)
            if value is None:
                continue
            record = value[1]
            if (include_nested or record.container_id is None) and graph_signature_hash in (
                None,
                record.graph_signature_hash,
            ):
                found.append(record)
        return found


class DynamoBackend(TablesBackend):
    """A DynamoDB-like single table: records as items, a workflow's commit order as a partition
    Queried a page at a time with LastEvaluatedKey continuation, families written in one
    TransactWriteItems with attribute_not_exists conditions, every read strongly consistent; a
    global secondary index by id, fed by a stream task one event a call, is read for nothing."""

    def new_tables(self) -> Tables:
        return DynamoTables.new()

    def describe(self) -> str:
        return "dynamo://"

    async def step(self, call: Callable[[Tables], T]) -> T:
        await asyncio.sleep(0)
        with self.tables.lock:
            try:
                return call(self.tables)
            finally:
                self.item_table.pump()

    @property
    def item_table(self) -> ItemTable:
        assert isinstance(self.tables, DynamoTables)
        return self.tables.table


class DynamoQueryFirstPageOnly(DynamoBackend):
    """A listing Queries the workflow's partition once and ignores LastEvaluatedKey: a workflow
    of more than one page (8 records) lists its first 8."""

    def new_tables(self) -> Tables:
        return OnePageTables.new()


class OnePageTables(DynamoTables):
    def query_ids(self, workflow_name: str) -> list[CheckpointID]:
        page, _ = self.table.query("WF#" + workflow_name, PAGE, None)
        return list(page)


class InclusiveResumeTables(DynamoTables):
    def next_start(self, last: str) -> str | None:
        # ExclusiveStartKey taken as the key before the last one: the page's last item again.
        sequence = int(last[4:])
        return seq_key(sequence - 1)


class DynamoResumeRepeatsLastItem(DynamoBackend):
    """The next Query page starts at LastEvaluatedKey inclusive (the sort key before it is passed
    as ExclusiveStartKey): each page's last item is listed twice."""

    def new_tables(self) -> Tables:
        return InclusiveResumeTables.new()


class GsiLoadTables(DynamoTables):
    def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        found = self.table.gsi.get(checkpoint_id)
        return (
            None if found is None else StoredBody(checkpoint_id, found[1].body, entry=found[1].index_entry())
        )


class DynamoLoadFromIndex(DynamoBackend):
    """load reads the global secondary index by checkpoint id (eventually consistent, fed by the
    stream) instead of the record's item: a checkpoint just saved is not found."""

    def new_tables(self) -> Tables:
        return GsiLoadTables.new()


class GsiDuplicateTables(DynamoTables):
    def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        found = self.table.gsi.get(top.checkpoint_id)
        if found is not None:
            return InsertResult.of_stored_digest(found[1].digest, top)
        for record in records[1:]:
            if record.checkpoint_id in self.table.gsi:
                raise nested_id_conflict(records, record.checkpoint_id)
        for record in records:
            self.store(record)
        return InsertResult.INSERTED


class DynamoDuplicateCheckOnIndex(DynamoBackend):
    """A save checks whether its id is stored through the global secondary index and puts
    without attribute_not_exists: a re-save right after a save (before the stream caught up)
    is written again, replacing the first body under a new sequence."""

    def new_tables(self) -> Tables:
        return GsiDuplicateTables.new()


class SplitTransactionTables(DynamoTables):
    def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        found = self.records.get(top.checkpoint_id)
        if found is not None:
            return InsertResult.of_stored_digest(found[1].digest, top)
        # One PutItem per record, each with its own condition: a conflict midway keeps the rest.
        for record in records:
            if record.checkpoint_id in self.records:
                raise nested_id_conflict(records, record.checkpoint_id)
            self.store(record)
        return InsertResult.INSERTED


class DynamoFamilyPutOneByOne(DynamoBackend):
    """A family is written one conditional PutItem per record instead of one
    TransactWriteItems: a nested id already stored fails the save after the top record (and the
    nested records before it) were written."""

    def new_tables(self) -> Tables:
        return SplitTransactionTables.new()


class DynamoCounterWithoutCondition(DynamoBackend):
    """The workflow's sequence counter is read in one call and written with the record in the
    next, without a ``version = :read`` condition: concurrent saves of a workflow take the same
    sequence."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        name = records[0].workflow_name
        base = await self.step(lambda t: t.sequences.get(name, 0))

        def write(t: Tables) -> InsertResult:
            saved = t.sequences.get(name, 0)
            t.sequences[name] = base
            try:
                result = t.insert(records)
            except BaseException:
                t.sequences[name] = saved
                raise
            if result is not InsertResult.INSERTED:
                t.sequences[name] = saved
            else:
                t.sequences[name] = max(saved, t.sequences[name])
            return result

        return await self.step(write)


class NestedDeleteTables(DynamoTables):
    def remove(self, checkpoint_id: CheckpointID) -> bool:
        if checkpoint_id not in self.records:
            return False
        self.drop(checkpoint_id)  # DeleteItem without the ``container = NULL`` condition
        return True


class DynamoDeleteWithoutCondition(DynamoBackend):
    """remove deletes the item without a ``attribute_not_exists(container)`` condition: a nested
    record is deleted out of its container instead of refused."""

    def new_tables(self) -> Tables:
        return NestedDeleteTables.new()


class BatchPruneTables(DynamoTables):
    def prune(self, workflow_name: str, keep_last: int) -> int:
        doomed = pruned_records(self.top_rows(workflow_name, None), keep_last)
        marks = self.tombstones.setdefault(workflow_name, {})
        # One BatchWriteItem; its UnprocessedItems past the first 25 are never sent again.
        for record in doomed[:BATCH_WRITE]:
            for gone in self.drop(record.checkpoint_id):
                marks[gone] = None
        return len(doomed)


class DynamoPruneIgnoresUnprocessed(DynamoBackend):
    """prune deletes the doomed records in one BatchWriteItem and ignores its UnprocessedItems:
    past 25 records, the rest stay (the count still says all of them)."""

    def new_tables(self) -> Tables:
        return BatchPruneTables.new()


class GsiNamesTables(DynamoTables):
    def workflow_names(self) -> list[str]:
        return sorted({v[1].workflow_name for v in self.table.gsi.values() if v[1].container_id is None})


class DynamoWorkflowNamesFromIndex(DynamoBackend):
    """workflow_names Scans the global secondary index (one item per checkpoint, smaller than
    the table): a workflow saved a moment ago is missing, one deleted a moment ago still listed."""

    def new_tables(self) -> Tables:
        return GsiNamesTables.new()


class GsiInfoTables(DynamoTables):
    def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        found = self.table.gsi.get(checkpoint_id)
        return None if found is None else found[1].info(found[0])


class DynamoInfoFromIndex(DynamoBackend):
    """info (the index entry of one id) is a GetItem on the global secondary index, eventually
    consistent: a checkpoint just saved has no entry, one just deleted still has one."""

    def new_tables(self) -> Tables:
        return GsiInfoTables.new()


# ====================================================================== soft deletes


class SoftRecords(MutableMapping[CheckpointID, Value]):
    """Rows with a deleted flag: a delete flags the row; a vacuum removes flagged rows later."""

    def __init__(self) -> None:
        self.rows: dict[CheckpointID, list[Any]] = {}
        """id -> [value, deleted]"""
        self.listed: list[CheckpointID] = []
        """The vacuum's list of flagged rows, deleted on its next pass."""

    def honours_flag(self) -> bool:
        return True

    def __getitem__(self, checkpoint_id: CheckpointID) -> Value:
        row = self.rows.get(checkpoint_id)
        if row is None or (row[1] and self.honours_flag()):
            raise KeyError(checkpoint_id)
        return row[0]  # type: ignore[no-any-return]

    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        self.rows[checkpoint_id] = [value, False]

    def __delitem__(self, checkpoint_id: CheckpointID) -> None:
        row = self.rows.get(checkpoint_id)
        if row is None or row[1]:
            raise KeyError(checkpoint_id)
        row[1] = True

    def __iter__(self) -> Iterator[CheckpointID]:
        return iter([k for k, row in self.rows.items() if not row[1]])

    def __len__(self) -> int:
        return sum(1 for row in self.rows.values() if not row[1])

    def raw(self) -> list[Value]:
        """Every row, flagged ones too."""
        return [row[0] for row in self.rows.values()]

    def vacuum(self) -> None:
        """One pass: delete the rows listed last pass that are still flagged, list the flagged."""
        for checkpoint_id in self.listed:
            row = self.rows.get(checkpoint_id)
            if row is not None and self.still_flagged(row):
                del self.rows[checkpoint_id]
        self.listed = [k for k, row in self.rows.items() if row[1]]

    def still_flagged(self, row: list[Any]) -> bool:
        return bool(row[1])


class SoftTables(Tables):
    @classmethod
    def new(cls, records: SoftRecords | None = None) -> Self:
        return cls(records=records if records is not None else SoftRecords())

    @property
    def soft(self) -> SoftRecords:
        assert isinstance(self.records, SoftRecords)
        return self.records


class SoftBackend(TablesBackend):
    """A soft-delete store: remove, prune and delete_workflow flag rows deleted (prune writes
    tombstones too); reads skip flagged rows; a background vacuum, one pass a call, lists the
    flagged rows and deletes, on its next pass, those still flagged."""

    def new_tables(self) -> Tables:
        return SoftTables.new()

    def describe(self) -> str:
        return "soft://"

    async def step(self, call: Callable[[Tables], T]) -> T:
        await asyncio.sleep(0)
        with self.tables.lock:
            try:
                return call(self.tables)
            finally:
                assert isinstance(self.tables, SoftTables)
                self.tables.soft.vacuum()


class LoadsFlagged(SoftRecords):
    def honours_flag(self) -> bool:
        return False


class SoftLoadIgnoresFlag(SoftBackend):
    """A read by id forgets the deleted flag: a removed checkpoint loads (and a re-save of its
    id compares with it) until the vacuum passes."""

    def new_tables(self) -> Tables:
        return SoftTables.new(LoadsFlagged())


class RawRowsTables(SoftTables):
    def rows(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        found = [
            (sequence, record)
            for sequence, record in self.soft.raw()
            if record.workflow_name == workflow_name
            and (include_nested or record.container_id is None)
            and graph_signature_hash in (None, record.graph_signature_hash)
        ]
        found.sort(key=lambda row: row[0])
        return [record for _, record in found]


class SoftListingIgnoresFlag(SoftBackend):
    """The workflow listing query has no ``WHERE NOT deleted``: list, latest and prune see
    removed and pruned rows until the vacuum passes."""

    def new_tables(self) -> Tables:
        return RawRowsTables.new()


class RawLatestTables(SoftTables):
    def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        raw = RawRowsTables(records=self.records, sequences=self.sequences, children=self.children)
        return Tables.latest(raw, workflow_name, graph_signature_hash)


class SoftLatestIgnoresFlag(SoftBackend):
    """latest (its own query, written apart from the listing) forgets the deleted flag: the head
    removed a moment ago is still the latest until the vacuum passes."""

    def new_tables(self) -> Tables:
        return RawLatestTables.new()


class RawWalkTables(SoftTables):
    def walk(self, checkpoint_id: CheckpointID, max_depth: int, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            row = self.soft.rows.get(current)  # the recursive query forgets the flag
            if row is None:
                if current != checkpoint_id and self.is_tombstone(current):
                    tombstones.add(current)
                break
            record = row[0][1]
            links[current] = record.previous_checkpoint_id
            if with_bodies:
                bodies[current] = record.body
                bodies.update(self.nested_bodies([current]))
            current = record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))


class SoftWalkIgnoresFlag(SoftBackend):
    """The ancestry walk's recursive query forgets the deleted flag: it goes on through pruned
    ancestors (with their bodies) until the vacuum passes."""

    def new_tables(self) -> Tables:
        return RawWalkTables.new()


class FlagsById(SoftRecords):
    def still_flagged(self, row: list[Any]) -> bool:
        return True  # deleted by the id listed, without re-reading the flag


class SoftVacuumDeletesListedIds(SoftBackend):
    """The vacuum deletes the ids it listed on its last pass without checking they are still
    flagged: a checkpoint re-saved under a removed id in between is deleted."""

    def new_tables(self) -> Tables:
        return SoftTables.new(FlagsById())


class CountedSequenceTables(SoftTables):
    def store(self, record: CheckpointRecord) -> None:
        # The next number is the workflow's row count, flagged rows included, plus one.
        sequence = 1 + sum(1 for _, r in self.soft.raw() if r.workflow_name == record.workflow_name)
        self.sequences[record.workflow_name] = sequence
        self.records[record.checkpoint_id] = (sequence, record)
        if record.container_id is not None:
            self.children.setdefault(record.container_id, []).append(record.checkpoint_id)


class SoftSequenceFromRowCount(SoftBackend):
    """A record's sequence is the workflow's row count plus one (flagged rows are counted, so no
    number repeats before a vacuum): once the vacuum removes a deleted row, the next save takes a
    number a stored record has."""

    def new_tables(self) -> Tables:
        return CountedSequenceTables.new()


class KeepTombstonesTables(SoftTables):
    def delete_workflow(self, workflow_name: str) -> int:
        doomed = self.top_rows(workflow_name, None)
        for record in doomed:
            self.drop(record.checkpoint_id)
        return len(doomed)  # tombstones are rows too: the vacuum will get them (it never does)


class SoftDeleteWorkflowKeepsTombstones(SoftBackend):
    """delete_workflow flags the workflow's rows and leaves its tombstones for the vacuum, which
    only removes flagged records: the deleted workflow's pruned ids stay listed."""

    def new_tables(self) -> Tables:
        return KeepTombstonesTables.new()


class TopOnlyTables(SoftTables):
    def drop(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        # Only the top row is flagged: its nested rows go with it "by container" at vacuum time.
        gone = self.family(checkpoint_id)
        self.records.pop(checkpoint_id, None)
        return gone

    def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return Tables.nested_ids(self, checkpoint_id)


class SoftRemoveFlagsTopOnly(SoftBackend):
    """remove and prune flag the top-level row only, expecting the vacuum to take its nested
    rows with it (it does not): a removed checkpoint's nested records still load and list."""

    def new_tables(self) -> Tables:
        return TopOnlyTables.new()


class RemoveTombstonesTables(SoftTables):
    def remove(self, checkpoint_id: CheckpointID) -> bool:
        found = self.records.get(checkpoint_id)
        removed = Tables.remove(self, checkpoint_id)
        if removed and found is not None:
            # Every soft delete writes its tombstone row, whatever deleted it.
            marks = self.tombstones.setdefault(found[1].workflow_name, {})
            for gone in self.family(checkpoint_id):
                marks[gone] = None
        return removed


class SoftRemoveWritesTombstone(SoftBackend):
    """remove writes a tombstone as prune does (a soft delete is a soft delete): a deleted id is
    listed among the pruned ones, and a walk reaching it ends as pruned, not missing."""

    def new_tables(self) -> Tables:
        return RemoveTombstonesTables.new()


class RawNamesTables(SoftTables):
    def workflow_names(self) -> list[str]:
        return sorted({r.workflow_name for _, r in self.soft.raw() if r.container_id is None})


class SoftWorkflowNamesIgnoreFlag(SoftBackend):
    """workflow_names forgets the deleted flag: a workflow whose records were all deleted is
    listed until the vacuum passes."""

    def new_tables(self) -> Tables:
        return RawNamesTables.new()


# ====================================================================== MVCC


class Versions:
    """Committed versions of the whole store, by transaction id, and the running reads."""

    def __init__(self) -> None:
        self.committed = 0
        self.versions: dict[int, Tables] = {0: Tables()}
        self.readers: Counter[int] = Counter()
        self.lock = threading.Lock()

    def gc(self) -> None:
        """Drop every version older than the oldest running read's and the latest."""
        horizon = min([self.committed, *(t for t, n in self.readers.items() if n > 0)])
        for txn in [t for t in self.versions if t < horizon]:
            del self.versions[txn]


class MvccBackend(TablesBackend):
    """MVCC: a write transaction works on a copy of its snapshot (the latest committed version
    when it starts) and commits it as the next version, first-committer-wins (a write whose
    snapshot is no longer the latest runs again on the new one); a read registers and runs at
    the latest committed version when the call starts; versions older than every running read
    are garbage-collected at each commit."""

    def __init__(self, versions: Versions | None = None) -> None:
        self.versions = versions if versions is not None else Versions()
        self.seen = self.versions.committed
        with self.versions.lock:
            current = self.versions.versions[self.versions.committed]
        super().__init__(current)

    def new_handle(self) -> Self:
        return type(self)(self.versions)

    def describe(self) -> str:
        return "mvcc://"

    def snapshot(self) -> int:
        return self.versions.committed

    def version_at(self, txn: int) -> Tables:
        return self.versions.versions[txn]

    def register_before_round_trip(self) -> bool:
        return True

    async def read(self, call: Callable[[Tables], T]) -> T:
        store = self.versions
        with store.lock:
            txn = self.snapshot()
            if self.register_before_round_trip():
                store.readers[txn] += 1
        await asyncio.sleep(0)  # the round trip
        with store.lock:
            if not self.register_before_round_trip():
                store.readers[txn] += 1
            version = self.version_at(txn)
        try:
            return call(version)
        finally:
            with store.lock:
                store.readers[txn] -= 1

    def first_committer_wins(self) -> bool:
        return True

    def new_version(self, base: Tables) -> Tables:
        return base.copy()

    async def write(self, call: Callable[[Tables], T]) -> T:
        store = self.versions
        while True:
            with store.lock:
                txn = store.committed
                base = store.versions[txn]
            await asyncio.sleep(0)  # the round trip
            with store.lock:
                if store.committed != txn and self.first_committer_wins():
                    continue  # another transaction committed first: run again on it
                draft = self.new_version(base)
                result = call(draft)  # raises: nothing committed
                store.committed += 1
                store.versions[store.committed] = draft
                self.seen = store.committed
                store.gc()
                return result

    async def step(self, call: Callable[[Tables], T]) -> T:
        raise AssertionError("every primitive is a read or a write")

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        return await self.write(lambda t: t.insert(records))

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self.write(lambda t: t.insert_fenced(records, expected_latest_id))

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self.write(lambda t: t.remove(checkpoint_id))

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self.write(lambda t: t.prune(workflow_name, keep_last))

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self.write(lambda t: t.delete_workflow(workflow_name))

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self.write(lambda t: t.overwrite_body(checkpoint_id, body, digest))

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return await self.read(lambda t: t.load(checkpoint_id))

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await self.read(lambda t: t.latest(workflow_name, graph_signature_hash))

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return await self.read(lambda t: t.list_bodies(workflow_name, graph_signature_hash, include_nested))

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await self.read(lambda t: t.list_ids(workflow_name, graph_signature_hash, include_nested))

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> dict[CheckpointID, bytes]:
        return await self.read(lambda t: t.nested_bodies(checkpoint_ids))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        return await self.read(lambda t: t.nested_ids(checkpoint_id))

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await self.read(lambda t: t.walk(checkpoint_id, max_depth, with_bodies))

    async def workflow_names(self) -> list[str]:
        return await self.read(lambda t: t.workflow_names())

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        return await self.read(lambda t: t.info(checkpoint_id))

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        return await self.read(lambda t: t.records_of(workflow_name))

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        return await self.read(lambda t: t.tombstones_of(workflow_name))


class MvccLastCommitterWins(MvccBackend):
    """A write commits its draft whatever committed since its snapshot (no first-committer-wins
    check): of two concurrent writes, the later commit silently drops the earlier one."""

    def first_committer_wins(self) -> bool:
        return False


class MvccFenceReadAtSnapshot(MvccBackend):
    """A fenced save reads the workflow's head at a read snapshot, then writes a plain insert in
    its own transaction: the write's conflict check never covers the fence's read (write skew),
    so two saves fenced on the same head both commit."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        record = records[0]
        head = await self.read(lambda t: t.head_id(record.workflow_name))
        stored_already = await self.read(lambda t: record.checkpoint_id in t.records)
        if head != expected_latest_id and not stored_already:
            return FenceCheck(head, None)
        return FenceCheck.after_insert(head, await self.insert(records))


class MvccReaderRegistersLate(MvccBackend):
    """A read registers its snapshot with the garbage collector after its round trip, not when
    it chooses the snapshot: a commit in between collects the version the read then asks for."""

    def register_before_round_trip(self) -> bool:
        return False


class MvccSnapshotOfHandle(MvccBackend):
    """A handle reads at the last version it committed itself (its own writes are visible, so it
    looks right): another handle's commits stay invisible to it until it writes."""

    def snapshot(self) -> int:
        return self.seen if self.seen in self.versions.versions else self.versions.committed


class MvccSnapshotBelowCommitted(MvccBackend):
    """A read runs at the versions strictly below the commit counter (the counter taken as the
    next transaction's id): the latest commit is invisible to the next read."""

    def snapshot(self) -> int:
        store = self.versions
        below = [t for t in store.versions if t < store.committed]
        return max(below) if below else store.committed


class MvccTombstonesCollected(MvccBackend):
    """The garbage collector treats tombstones as delete markers of old versions: a new version
    keeps none of them, so the next write after a prune forgets what it pruned."""

    def new_version(self, base: Tables) -> Tables:
        draft = base.copy()
        draft.tombstones.clear()
        return draft


class MvccGcKeepsLatestOnly(MvccBackend):
    """The garbage collector keeps only the latest committed version (readers are counted but
    not consulted): a read whose snapshot was collected meanwhile finds it gone."""

    def version_at(self, txn: int) -> Tables:
        store = self.versions
        for t in list(store.versions):
            if t < store.committed:
                del store.versions[t]
        return store.versions[txn]


# ====================================================================== an S3 key layout on moto

S3_PAGE = 10
"""Keys per LIST page (MaxKeys): small, so listings take several pages."""
LONG_KEY = 700
"""An escaped name longer than this (in UTF-8 bytes) is keyed by its SHA-256 instead."""

_moto: dict[str, Any] = {}
_moto_lock = threading.Lock()


def s3_client() -> Any:
    """This process's in-process moto and a client made inside it (started once)."""
    with _moto_lock:
        if "client" not in _moto:
            from conformance.s3_moto import start_in_process

            client, stop = start_in_process("blind15-" + uuid.uuid4().hex[:12])
            atexit.register(stop)
            _moto["client"] = client
        return _moto["client"]


def escape(name: str) -> str:
    escaped = urllib.parse.quote(name, safe="")
    if len(escaped.encode()) > LONG_KEY:
        return "h" + hashlib.sha256(name.encode()).hexdigest()
    return "n" + escaped


class S3Records(MutableMapping[CheckpointID, Value]):
    """Records as objects of one bucket: ``rec/<escaped id>`` holds (sequence, record) and
    ``wf/<escaped workflow>/<sequence>`` holds the id (the workflow's commit order, listed a page at
    a time). Order keys never change and records only through overwrite_body, so both are cached
    (shared by the handles, which share the bucket through these tables)."""

    def __init__(self) -> None:
        self.client = s3_client()
        self.bucket = "blind15-" + uuid.uuid4().hex[:16]
        self.client.create_bucket(Bucket=self.bucket)
        self.cache: dict[CheckpointID, Value] = {}
        self.order_cache: dict[str, CheckpointID] = {}

    def escape(self, name: str) -> str:
        return escape(name)

    def rec_key(self, checkpoint_id: CheckpointID) -> str:
        return "rec/" + self.escape(checkpoint_id)

    def order_prefix(self, workflow_name: str) -> str:
        return "wf/" + self.escape(workflow_name) + "/"

    def order_key(self, workflow_name: str, sequence: int) -> str:
        return self.order_prefix(workflow_name) + self.seq_text(sequence)

    def seq_text(self, sequence: int) -> str:
        return f"{sequence:012d}"

    def get(self, checkpoint_id: CheckpointID, default: Any = None) -> Any:
        try:
            return self[checkpoint_id]
        except KeyError:
            return default

    def fetch(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()  # type: ignore[no-any-return]
        except self.client.exceptions.NoSuchKey:
            return None

    def __getitem__(self, checkpoint_id: CheckpointID) -> Value:
        found = self.cache.get(checkpoint_id)
        if found is not None:
            return found
        data = self.fetch(self.rec_key(checkpoint_id))
        if data is None:
            raise KeyError(checkpoint_id)
        value: Value = pickle.loads(data)
        self.cache[checkpoint_id] = value
        return value

    def __setitem__(self, checkpoint_id: CheckpointID, value: Value) -> None:
        data = pickle.dumps(value)
        key = self.rec_key(checkpoint_id)
        if checkpoint_id in self:
            self.overwrite(key, checkpoint_id, value, data)
            return
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        self.cache[checkpoint_id] = value
        sequence, record = value
        order = self.order_key(record.workflow_name, sequence)
        self.client.put_object(Bucket=self.bucket, Key=order, Body=checkpoint_id.encode())
        self.order_cache[order] = checkpoint_id

    def overwrite(self, key: str, checkpoint_id: CheckpointID, value: Value, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
        self.cache[checkpoint_id] = value

    def __delitem__(self, checkpoint_id: CheckpointID) -> None:
        sequence, record = self[checkpoint_id]
        self.client.delete_object(Bucket=self.bucket, Key=self.rec_key(checkpoint_id))
        order = self.order_key(record.workflow_name, sequence)
        self.client.delete_object(Bucket=self.bucket, Key=order)
        self.cache.pop(checkpoint_id, None)
        self.order_cache.pop(order, None)

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` in key order, a LIST page at a time."""
        keys: list[str] = []
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": S3_PAGE}
            if token is not None:
                args["ContinuationToken"] = token
            page = self.client.list_objects_v2(**args)
            keys += [item["Key"] for item in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return keys
            token = page["NextContinuationToken"]

    def workflow_ids(self, workflow_name: str) -> list[CheckpointID]:
        ids = []
        for key in self.list_keys(self.order_prefix(workflow_name)):
            found = self.order_cache.get(key)
            if found is None:
                data = self.fetch(key)
                if data is None:
                    continue
                found = self.order_cache[key] = data.decode()
            ids.append(found)
        return ids

    def __iter__(self) -> Iterator[CheckpointID]:
        return iter(self.all_ids())

    def all_ids(self) -> list[CheckpointID]:
        ids = []
        for key in self.list_keys("wf/"):
            found = self.order_cache.get(key)
            if found is None:
                data = self.fetch(key)
                if data is None:
                    continue
                found = self.order_cache[key] = data.decode()
            ids.append(found)
        return ids

    def __len__(self) -> int:
        return len(self.all_ids())


class S3Tables(Tables):
    @classmethod
    def new(cls, records: S3Records | None = None) -> Self:
        return cls(records=records if records is not None else S3Records())

    @property
    def s3(self) -> S3Records:
        assert isinstance(self.records, S3Records)
        return self.records

    def rows(
        self, workflow_name: str, graph_signature_hash: str | None, include_nested: bool
    ) -> list[CheckpointRecord]:
        found = []
        for checkpoint_id in self.s3.workflow_ids(workflow_name):
            value = self.records.get(checkpoint_id)
            if value is None:
                continue
            record = value[1]
            if (
                record.workflow_name == workflow_name
                and (include_nested or record.container_id is None)
                and graph_signature_hash in (None, record.graph_signature_hash)
            ):
                found.append(record)
        return found


class S3Backend(TablesBackend):
    """An author's own S3 key layout through boto3 on in-process moto, a bucket per store:
    ``rec/<escaped id>`` (percent-escaped, or its SHA-256 when long) written with
    ``IfNoneMatch='*'``, ``wf/<escaped workflow>/<zero-padded sequence>`` naming the id, listed a
    page of 10 keys at a time with continuation tokens; every primitive runs its boto3 calls on a
    worker thread holding the store's lock."""

    def new_tables(self) -> Tables:
        return S3Tables.new()

    def describe(self) -> str:
        return "s3-layout://"

    async def step(self, call: Callable[[Tables], T]) -> T:
        def run() -> T:
            with self.tables.lock:
                return call(self.tables)

        return await asyncio.to_thread(run)


class IncrementalRecords(S3Records):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, list[str]] = {}

    def list_keys(self, prefix: str) -> list[str]:
        # Only keys after the last one seen are listed again (StartAfter): a listing is the
        # keys seen before plus the new ones.
        keys = self.seen.setdefault(prefix, [])
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": S3_PAGE}
        if keys:
            args["StartAfter"] = keys[-1]
        while True:
            page = self.client.list_objects_v2(**args)
            keys += [item["Key"] for item in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return list(keys)
            args["ContinuationToken"] = page["NextContinuationToken"]

    def workflow_ids(self, workflow_name: str) -> list[CheckpointID]:
        return [
            self.order_cache[key]
            for key in self.list_keys(self.order_prefix(workflow_name))
            if key in self.order_cache or self.fetch(key) is not None
        ]


class S3IncrementalListing(S3Backend):
    """A workflow's listing resumes after the last order key it listed before (StartAfter) and
    adds the new keys to the ones it listed then: keys deleted since stay listed, as cached
    ids, until the process restarts."""

    def new_tables(self) -> Tables:
        return S3Tables.new(IncrementalRecords())


class SlashOnlyRecords(S3Records):
    def escape(self, name: str) -> str:
        return "n" + name.replace("/", "%2F")


class S3EscapesSlashOnly(S3Backend):
    """Names are escaped by replacing ``/`` with ``%2F`` and nothing else: the ids ``a/b`` and
    ``a%2Fb`` (and workflows so named) share a key."""

    def new_tables(self) -> Tables:
        return S3Tables.new(SlashOnlyRecords())


class UnpaddedRecords(S3Records):
    def seq_text(self, sequence: int) -> str:
        return str(sequence)


class S3SequenceKeysUnpadded(S3Backend):
    """Order keys carry the sequence unpadded (``wf/<workflow>/10`` lists before ``.../9``):
    past nine records, a workflow lists out of commit order."""

    def new_tables(self) -> Tables:
        return S3Tables.new(UnpaddedRecords())


class S3ListThenGetEach(S3Backend):
    """A listing LISTs the order keys in one call and GETs each record in a call of its own
    (the lock released between): a record deleted meanwhile fails the listing with NoSuchKey."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        def ids(t: Tables) -> list[CheckpointID]:
            assert isinstance(t, S3Tables)
            return t.s3.workflow_ids(workflow_name)

        bodies = []
        for checkpoint_id in await self.step(ids):
            found = await self.step(lambda t, i=checkpoint_id: t.records.get(i))  # type: ignore[misc]
            if found is None:
                raise LookupError(f"NoSuchKey: rec/{checkpoint_id}")
            record = found[1]
            if (include_nested or record.container_id is None) and graph_signature_hash in (
                None,
                record.graph_signature_hash,
            ):
                bodies.append(stored(record))
        return bodies


class StaleCacheRecords(S3Records):
    def overwrite(self, key: str, checkpoint_id: CheckpointID, value: Value, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)  # the cache is left as is


class S3OverwriteKeepsCache(S3Backend):
    """overwrite_body writes the object and leaves the read cache holding the old record: reads
    go on returning the body saved before the raw write."""

    def new_tables(self) -> Tables:
        return S3Tables.new(StaleCacheRecords())


# ====================================================================== the batch

BROKEN_DYNAMO: list[type[TablesBackend]] = [
    DynamoQueryFirstPageOnly,
    DynamoResumeRepeatsLastItem,
    DynamoLoadFromIndex,
    DynamoDuplicateCheckOnIndex,
    DynamoFamilyPutOneByOne,
    DynamoCounterWithoutCondition,
    DynamoDeleteWithoutCondition,
    DynamoPruneIgnoresUnprocessed,
    DynamoWorkflowNamesFromIndex,
    DynamoInfoFromIndex,
]
BROKEN_SOFT: list[type[TablesBackend]] = [
    SoftLoadIgnoresFlag,
    SoftListingIgnoresFlag,
    SoftLatestIgnoresFlag,
    SoftWalkIgnoresFlag,
    SoftVacuumDeletesListedIds,
    SoftSequenceFromRowCount,
    SoftDeleteWorkflowKeepsTombstones,
    SoftRemoveFlagsTopOnly,
    SoftWorkflowNamesIgnoreFlag,
    SoftRemoveWritesTombstone,
]
BROKEN_S3: list[type[TablesBackend]] = [
    S3IncrementalListing,
    S3EscapesSlashOnly,
    S3SequenceKeysUnpadded,
    S3ListThenGetEach,
    S3OverwriteKeepsCache,
]
BROKEN_MVCC: list[type[TablesBackend]] = [
    MvccLastCommitterWins,
    MvccFenceReadAtSnapshot,
    MvccReaderRegistersLate,
    MvccSnapshotOfHandle,
    MvccSnapshotBelowCommitted,
    MvccTombstonesCollected,
    MvccGcKeepsLatestOnly,
]

ENTRIES: list[Entry] = [
    (c.__name__, tables_target(c), _doc(c)) for c in BROKEN_DYNAMO + BROKEN_S3 + BROKEN_SOFT + BROKEN_MVCC
]
"""Every broken storage: (name, factory of its target, its one defect)."""

NOT_VIOLATIONS: list[Entry] = []
"""Written as broken, judged not to break the contract as built; each must pass the whole kit."""

HONEST: list[Entry] = [
    ("DynamoBackend", tables_target(DynamoBackend), _doc(DynamoBackend)),
    ("S3Backend", tables_target(S3Backend), _doc(S3Backend)),
    ("SoftBackend", tables_target(SoftBackend), _doc(SoftBackend)),
    ("MvccBackend", tables_target(MvccBackend), _doc(MvccBackend)),
]
"""Honest storages: one per style; each must pass the whole kit."""

BY_NAME: dict[str, Callable[[], StorageTarget]] = {
    name: factory for name, factory, _ in ENTRIES + NOT_VIOLATIONS + HONEST
}
