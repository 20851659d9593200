"""The commit protocol: every write is one ``BEGIN IMMEDIATE`` transaction, run whole on the
connection's thread.

Each function here takes the ``sqlite3.Connection`` and runs on the handle's connection thread
(thread.py) as one call (:meth:`SQLiteClient.run`), so a save costs one hand-off to that thread
and back however many statements its transaction holds. ``BEGIN IMMEDIATE`` takes the write lock
before reading anything, so a transaction never has to upgrade a read lock (which fails at once,
whatever the busy timeout); waiting for the lock is bounded by ``busy_timeout_ms``. A transaction
that fails anywhere, COMMIT included, is rolled back before the error leaves the thread, and a
caller cancelled while it runs cannot interrupt it: the thread finishes the transaction either
way, so a save is all of its family or nothing.

Each workflow's next sequence number is taken inside the transaction, one past the largest the
workflow holds (read from an index) and past the high-water mark ``workflows.next_sequence``
that every deleting transaction records first, so sequences follow commit order across processes
and never go back, even after the newest checkpoint is deleted; a save writes its rows only.

An id already stored is recognised by its bytes: the transaction compares the stored body with
the one being saved (``body = ?``, a memcmp in SQLite) and the insert answers
``InsertResult.SAME_BODY`` or ``DIFFERENT_BODY`` (then the engine compares decoded contents:
equal content may encode differently). An unkeyed save therefore hashes nothing (the ``digest``
column keeps ``record.known_digest``: a keyed save's MAC digest, else empty), and a row written
by any earlier version, whatever its ``digest`` column holds, compares by the bytes it holds.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Final

from ..backend import CheckpointRecord, FenceCheck, InsertResult, nested_id_conflict
from ..contract import CheckpointID
from ..errors import CheckpointConflictError, NestedCheckpointDeletionError
from ..records import stored_id
from . import lineage, schema

_COMPARED: Final = {1: InsertResult.SAME_BODY, 0: InsertResult.DIFFERENT_BODY}
"""An id already stored, by SQLite's ``body = ?`` (1 or 0)."""


class Abandoned(Exception):
    """The caller was cancelled before the transaction committed; it was rolled back."""


class Abandon:
    """Set on the loop when a caller is cancelled, read on the connection's thread before COMMIT.

    One boolean attribute: its store and load are atomic under the GIL, and the thread only
    needs to see it before COMMIT, so no lock is needed (a ``threading.Event`` would build a
    condition and a lock per save: several microseconds on the save's path)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


@contextlib.contextmanager
def immediate_transaction(connection: sqlite3.Connection, abandon: Abandon | None = None) -> Iterator[None]:
    """One write transaction; rolled back if ``abandon`` is set before COMMIT (a cancelled caller
    gets nothing written, as a caller cancelled while waiting for the lock always did)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        if abandon is not None and abandon.is_set():
            raise Abandoned
        yield
        if abandon is not None and abandon.is_set():
            raise Abandoned
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
        raise


def insert_families(
    connection: sqlite3.Connection, saves: Sequence[tuple[Sequence[CheckpointRecord], Abandon]]
) -> list[InsertResult | BaseException]:
    """A group commit: the saves that queued up while the previous group was committing, in one
    transaction (one fsync for all of them), each family of several rows in a savepoint of its
    own (a family of one row is one statement, all or nothing by itself).

    Each save gets what inserting its family alone would have returned, or the error that refused it
    alone (an embedded id already stored); that save's rows are rolled back, the others commit.
    An error of the transaction itself (the lock not obtained, the disk failing, COMMIT failing)
    fails every save of the group and writes none. No save is acknowledged before COMMIT
    returns, so durability is exactly that of a save committed alone. A save abandoned before its
    turn is skipped; a group of one is rolled back if abandoned before COMMIT, as a lone save is.
    """
    outcomes: list[InsertResult | BaseException] = []
    lone_abandon = saves[0][1] if len(saves) == 1 else None
    with immediate_transaction(connection, lone_abandon):
        for records, abandon in saves:
            if abandon.is_set():
                outcomes.append(Abandoned())
                continue
            if len(records) == 1:  # one statement, all or nothing by itself: nothing to undo
                outcomes.append(insert_or_compare(connection, records))
                continue
            connection.execute("SAVEPOINT save")
            try:
                outcomes.append(insert_or_compare(connection, records))
            except CheckpointConflictError as exc:
                connection.execute("ROLLBACK TO save")
                outcomes.append(exc)
            connection.execute("RELEASE save")
    return outcomes


def insert_or_compare(connection: sqlite3.Connection, records: Sequence[CheckpointRecord]) -> InsertResult:
    """The one write of a save, plain or fenced: insert a family whose top id is absent; else
    say whether the stored body is the same (see the module's docstring)."""
    if _write_family(connection, records):
        return InsertResult.INSERTED
    compared = _compare_stored(connection, records[0])
    assert compared is not None  # the INSERT found the id, inside this transaction
    return compared


def _compare_stored(connection: sqlite3.Connection, top: CheckpointRecord) -> InsertResult | None:
    """Whether the row stored under the top id holds the same bytes; None if the id is absent."""
    stored = connection.execute(schema.SELECT_SAME_BODY, (top.checkpoint_id, top.body)).fetchone()
    return None if stored is None else _COMPARED[stored[0]]


def insert_fenced(
    connection: sqlite3.Connection,
    abandon: Abandon,
    records: Sequence[CheckpointRecord],
    expected_latest_id: CheckpointID | None,
) -> FenceCheck | None:
    """Insert only if the workflow's latest is ``expected_latest_id``: check and write share one
    transaction, so no other writer, in this process or another, can commit between them. The
    fence only decides whether the save reaches the write every save makes (``insert_or_compare``)."""
    top = records[0]
    with immediate_transaction(connection, abandon):
        latest = lineage.latest_id(connection, top.workflow_name)
        latest_id = None if latest is None else stored_id(latest)
        if latest_id != expected_latest_id:
            # Refused; an id already stored is still compared, to tell a retry of a save that
            # won from a stale writer.
            return FenceCheck(latest_id, _compare_stored(connection, top))
        outcome = insert_or_compare(connection, records)
    return FenceCheck.after_insert(latest_id, outcome)


def _write_family(connection: sqlite3.Connection, records: Sequence[CheckpointRecord]) -> bool:
    """Write a family's rows, each numbered by its insert (schema.INSERT_CHECKPOINT); False, and
    nothing written, if the top id is stored. A nested id already stored raises, and the caller's
    transaction or savepoint rolls the family back: none of it is written."""
    top = records[0]
    if not connection.execute(schema.INSERT_CHECKPOINT, _row(top)).rowcount:
        return False
    for record in records[1:]:
        if not connection.execute(schema.INSERT_CHECKPOINT, _row(record)).rowcount:
            raise nested_id_conflict(records, record.checkpoint_id)
    return True


def _row(record: CheckpointRecord) -> tuple[object, ...]:
    return (
        record.checkpoint_id,
        record.workflow_name,
        record.previous_checkpoint_id,
        record.graph_signature_hash,
        record.known_digest,
        record.body,
        1 if record.nested else 0,
        record.container_id,
        record.root_id,
        record.position,
    )


def remove(connection: sqlite3.Connection, abandon: Abandon, checkpoint_id: CheckpointID) -> bool:
    """Delete a top-level checkpoint and its nested records; refuse a nested one."""
    with immediate_transaction(connection, abandon):
        row = connection.execute(schema.SELECT_CONTAINER, (checkpoint_id,)).fetchone()
        if row is None:
            return False
        if row[0] is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, str(row[0]))
        connection.execute(schema.RECORD_HIGH_WATER, {"id": checkpoint_id})
        connection.execute(schema.DELETE_FAMILY, (checkpoint_id, checkpoint_id))
    return True


def overwrite_body(
    connection: sqlite3.Connection,
    abandon: Abandon,
    checkpoint_id: CheckpointID,
    body: bytes,
    digest: str,
) -> bool:
    with immediate_transaction(connection, abandon):
        cursor = connection.execute(schema.UPDATE_BODY, (body, digest, checkpoint_id))
    return cursor.rowcount > 0


def prune(connection: sqlite3.Connection, abandon: Abandon, workflow_name: str, keep_last: int) -> int:
    """Delete all but the head, its rivals and the ``keep_last - 1`` other top-level checkpoints
    committed last (everything with ``keep_last=0``), leaving tombstones."""
    with immediate_transaction(connection, abandon):
        # Newest first, past the keep_last - 1 newest, which stay whatever they are.
        older = _doomed(connection.execute(schema.SELECT_PRUNED, (workflow_name, max(keep_last - 1, 0))))
        if keep_last == 0:
            doomed = older
        elif len(older) <= 1:
            doomed = []  # the one row past them stays: it is the head, a rival, or one more other
        else:
            doomed = _past_the_kept(older, lineage.head_and_rival_ids(connection, workflow_name))
        connection.executemany(
            schema.TOMBSTONE_FAMILY, [(workflow_name, doomed_id, doomed_id) for doomed_id in doomed]
        )
        connection.executemany(schema.RECORD_HIGH_WATER, [{"id": doomed_id} for doomed_id in doomed])
        connection.executemany(schema.DELETE_FAMILY, [(doomed_id, doomed_id) for doomed_id in doomed])
    return len(doomed)


def _past_the_kept(older: list[object], protected: set[object]) -> list[object]:
    """Of the top-level ids past the ``keep_last - 1`` newest (newest first), those a prune
    deletes: all but the protected ones (the head and its rivals), and as many others, newest
    first, as protected ones are among the newest, whose places the next others take."""
    spare = len(protected) - sum(1 for checkpoint_id in older if checkpoint_id in protected)
    doomed = []
    for checkpoint_id in older:
        if checkpoint_id in protected:
            continue
        if spare > 0:
            spare -= 1
            continue
        doomed.append(checkpoint_id)
    return doomed


def delete_workflow(connection: sqlite3.Connection, abandon: Abandon, workflow_name: str) -> int:
    with immediate_transaction(connection, abandon):
        doomed = _doomed(connection.execute(schema.SELECT_TOP_IDS, (workflow_name,)))
        connection.executemany(schema.RECORD_HIGH_WATER, [{"id": doomed_id} for doomed_id in doomed])
        connection.executemany(schema.DELETE_FAMILY, [(doomed_id, doomed_id) for doomed_id in doomed])
        connection.execute(schema.DELETE_TOMBSTONES, (workflow_name,))
    return len(doomed)


def _doomed(rows: Iterator[Sequence[object]]) -> list[object]:
    """The ids a prune or workflow deletion removes, as stored: the statements that follow match
    them exactly (a text rendering of a BLOB id would match no row and tombstone an id nobody
    saved). An id that is neither text nor UTF-8 bytes is CheckpointCorruptedError naming it,
    raised inside the transaction, so nothing is deleted."""
    doomed = [row[0] for row in rows]
    for value in doomed:
        stored_id(value)
    return doomed
