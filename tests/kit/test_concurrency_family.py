"""The concurrency family passes the in-memory storage and catches racy and blocking storages."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import pytest

from conformance import BackendReport, Outcome, all_clauses, validate
from storages.backend import Backend, CheckpointRecord, InsertResult, StoredBody, nested_id_conflict
from storages.contract import Capability, CheckpointID
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .blind_batch_fourteen import GroupAnswersCancelledCallers, group_target
from .double import DoubleBackend, DoubleState, Row, double_target
from .support import failed

FAMILY = "concurrency"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


@dataclass
class _Row:
    sequence: int
    record: CheckpointRecord


@dataclass
class _Table:
    rows: list[_Row] = field(default_factory=list)
    next_sequence: int = 1


class RacyStorage(Backend):
    """Checks for the id, reads the next sequence, then awaits before writing: a check-then-act race."""

    capabilities = frozenset({Capability.SHARED})

    def __init__(self, table: _Table | None = None) -> None:
        self._table = table if table is not None else _Table()

    def new_handle(self) -> Self:
        return type(self)(self._table)

    def _rows(self, workflow_name: str | None = None) -> list[_Row]:
        rows = sorted(self._table.rows, key=lambda row: row.sequence)
        return [row for row in rows if workflow_name is None or row.record.workflow_name == workflow_name]

    def _find(self, checkpoint_id: str) -> _Row | None:
        return next((row for row in self._rows() if row.record.checkpoint_id == checkpoint_id), None)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        existing = self._find(record.checkpoint_id)
        if existing is not None:
            return InsertResult.of_stored_digest(existing.record.digest, record)
        sequence = self._table.next_sequence
        await asyncio.sleep(0)  # e.g. a round trip to the database between the read and the write
        self._table.next_sequence = sequence + 1
        self._table.rows.append(_Row(sequence, record))
        return InsertResult.INSERTED

    async def load(self, checkpoint_id: str) -> StoredBody | None:
        row = self._find(checkpoint_id)
        return None if row is None else StoredBody(checkpoint_id, row.record.body)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        rows = self._rows(workflow_name)
        if not rows:
            return None
        newest = max(rows, key=lambda row: row.sequence)  # the first of any tied rows
        return StoredBody(newest.record.checkpoint_id, newest.record.body)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [StoredBody(row.record.checkpoint_id, row.record.body) for row in self._rows(workflow_name)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[str]:
        return [row.record.checkpoint_id for row in self._rows(workflow_name)]

    async def remove(self, checkpoint_id: str) -> bool:
        row = self._find(checkpoint_id)
        if row is None:
            return False
        self._table.rows.remove(row)
        return True


class NotReallyShared(DoubleBackend):
    """Declares shared, but each new handle opens a store of its own."""

    def new_handle(self) -> Self:
        return type(self)()


class TornWrites(DoubleBackend):
    """Writes a body in two steps with an await between, so a reader can see the first half."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        half = record.replaced(body=record.body[: len(record.body) // 2], digest=record.digest)
        result = await super().insert([half, *records[1:]])
        if result is InsertResult.INSERTED:
            await asyncio.sleep(0)
            await self.overwrite_body(record.checkpoint_id, record.body, record.digest)
        return result


class OrdersById(DoubleBackend):
    """Lists and picks latest by checkpoint id instead of commit order."""

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[str]:
        return sorted(await super().list_ids(workflow_name, graph_signature_hash))

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return sorted(
            await super().list_bodies(workflow_name, graph_signature_hash), key=lambda s: s.checkpoint_id
        )

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        listed = await self.list_bodies(workflow_name, graph_signature_hash)
        return listed[-1] if listed else None


class SleepsOnTheLoop(DoubleBackend):
    """Waits synchronously in every save, as a storage calling a blocking client would."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        time.sleep(0.002)  # noqa: ASYNC251 - the defect under test
        return await super().insert(records)


class BlockingReads(DoubleBackend):
    """Reads through a lock another thread holds for a moment: a synchronous wait in load."""

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        lock, held = threading.Lock(), threading.Event()

        def hold() -> None:
            with lock:
                held.set()
                time.sleep(0.002)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait()
        with lock:  # waits on the loop's thread until the holder lets go
            pass
        holder.join()
        return await super().load(checkpoint_id)


class BlockingSocketReads(DoubleBackend):
    """Every load sends a byte down a blocking socket and reads it back on the loop's thread, as a
    synchronous client's request to a server on loopback would: microseconds, on every call."""

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        ours, theirs = socket.socketpair()
        try:
            ours.sendall(b"x")
            theirs.recv(1)
        finally:
            ours.close()
            theirs.close()
        return await super().load(checkpoint_id)


class LockLeftHeldOnCancel(DoubleBackend):
    """Takes a write lock and releases it only on the way out of a save that was not cancelled."""

    _locks: ClassVar[dict[int, asyncio.Lock]] = {}

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        lock = self._locks.setdefault(id(self.backing), asyncio.Lock())
        await lock.acquire()
        await asyncio.sleep(0)  # the write, on a server
        result = await super().insert(records)
        lock.release()  # not in a finally: a cancelled save leaves it held
        return result


class CrossedReplies(DoubleBackend):
    """Sends each load on one shared wire and takes the next reply off it, as a client that
    neither waits for nor drops a cancelled call's reply: the next load gets that reply."""

    _wires: ClassVar[dict[int, asyncio.Queue[StoredBody | None]]] = {}

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        wire = self._wires.setdefault(id(self.backing), asyncio.Queue())
        answer = await super().load(checkpoint_id)
        asyncio.get_running_loop().call_later(0.0002, wire.put_nowait, answer)
        return await wire.get()


def test_in_memory_storage_passes_every_concurrency_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert len(backend.results) == len([c for c in all_clauses() if c.family == FAMILY])
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures


def test_two_handle_clauses_need_shared() -> None:
    not_shared = MemoryBackend.capabilities - {Capability.SHARED}
    backend = run_family(InMemoryCheckpointStorage, capabilities=not_shared)
    skipped = {r.clause_id for r in backend.results if r.outcome is Outcome.SKIPPED}
    assert skipped == {
        "concurrency.shared_handles_interleave",
        "concurrency.shared_identical_saves",
        "concurrency.reads_follow_other_handles",
    }
    assert not backend.failures


def test_a_check_then_act_race_is_caught() -> None:
    backend = run_family(RacyStorage)
    assert {
        "concurrency.identical_saves",
        "concurrency.conflicting_saves",
        "concurrency.shared_identical_saves",
    } <= failed(backend)
    assert (
        "list_checkpoint_ids after 64 concurrent equal saves"
        in backend.result("concurrency.identical_saves").message
    )
    # Every save read the same next sequence, so the latest is not the last listed.
    assert (
        "get_latest id vs the last listed id" in backend.result("concurrency.many_saves_one_workflow").message
    )


def test_handles_that_do_not_share_a_store_are_caught() -> None:
    backend = run_family(NotReallyShared)
    # The clauses that spread saves over several handles see the stores apart.
    assert failed(backend) == {
        "concurrency.shared_handles_interleave",
        "concurrency.shared_identical_saves",
        "concurrency.many_saves_one_workflow",
        "concurrency.conflicting_saves",
        "concurrency.many_writers_number_once",
        "concurrency.reads_follow_other_handles",
    }
    assert "lost" in backend.result("concurrency.shared_handles_interleave").message


def test_reads_of_half_written_checkpoints_are_caught() -> None:
    backend = run_family(TornWrites)
    assert "concurrency.reads_see_whole_checkpoints" in failed(backend)
    message = backend.result("concurrency.reads_see_whole_checkpoints").message
    assert "during concurrent saves raised CheckpointCorruptedError" in message


def test_an_order_that_contradicts_real_time_is_caught() -> None:
    backend = run_family(OrdersById)
    assert "concurrency.many_saves_one_workflow" in failed(backend)
    assert (
        "returned before the save of the first started"
        in backend.result("concurrency.many_saves_one_workflow").message
    )


def test_a_synchronous_wait_in_save_is_caught() -> None:
    backend = run_family(SleepsOnTheLoop)
    assert "concurrency.waits_yield_to_the_loop" in failed(backend)
    message = backend.result("concurrency.waits_yield_to_the_loop").message
    assert "inside save (" in message
    assert "load (" not in message


def test_a_synchronous_lock_wait_in_load_is_caught() -> None:
    backend = run_family(BlockingReads)
    assert "concurrency.waits_yield_to_the_loop" in failed(backend)
    assert "inside load (" in backend.result("concurrency.waits_yield_to_the_loop").message


def test_a_blocking_socket_request_in_load_is_caught() -> None:
    (backend,) = validate(
        double_target(BlockingSocketReads), clauses=["concurrency.no_blocking_socket_on_the_loop"]
    ).backends
    assert failed(backend) == {"concurrency.no_blocking_socket_on_the_loop"}
    assert "blocking sockets" in backend.result("concurrency.no_blocking_socket_on_the_loop").message


def test_a_save_beside_a_cancelled_one_left_unanswered_is_caught() -> None:
    # A group commit whose flusher stops answering its batch at a cancelled caller's future.
    (backend,) = validate(
        group_target(GroupAnswersCancelledCallers)(), clauses=["concurrency.cancelled_calls_leave_no_trace"]
    ).backends
    assert failed(backend) == {"concurrency.cancelled_calls_leave_no_trace"}
    message = backend.result("concurrency.cancelled_calls_leave_no_trace").message
    assert "a save started beside a save cancelled" in message


def test_a_lock_left_held_by_a_cancelled_save_is_caught() -> None:
    backend = run_family(LockLeftHeldOnCancel)
    assert "concurrency.cancelled_calls_leave_no_trace" in failed(backend)
    assert "did not return within" in backend.result("concurrency.cancelled_calls_leave_no_trace").message


def test_a_reply_left_unread_by_a_cancelled_load_is_caught() -> None:
    backend = run_family(CrossedReplies)
    # The engine refuses a reply for another id than the one asked for, so racing reads see the
    # crossed replies too.
    assert failed(backend) == {
        "concurrency.cancelled_calls_leave_no_trace",
        "concurrency.reads_see_whole_checkpoints",
    }
    message = backend.result("concurrency.cancelled_calls_leave_no_trace").message
    assert "the backend answered a read of" in message


ANSWER_TURNS = 4
"""Loop turns a read's answer takes to come back from where it was read."""


class JoinsReadsInFlight(DoubleBackend):
    """Sends one request for identical reads of a handle (latest, ids): a read started while an
    identical one is in flight takes that one's answer, read before the read was asked for."""

    def __init__(self, backing: Any = None) -> None:
        super().__init__(backing)
        self.in_flight: dict[tuple[Any, ...], asyncio.Future[Any]] = {}

    async def joined(self, key: tuple[Any, ...], read: Any) -> Any:
        if key in self.in_flight:
            return await asyncio.shield(self.in_flight[key])
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.in_flight[key] = answer
        try:
            result = await read()
            for _ in range(ANSWER_TURNS):
                await asyncio.sleep(0)  # the answer on its way back
            answer.set_result(result)
            return result
        except BaseException as exc:
            answer.set_exception(exc)
            answer.exception()  # retrieved: a joiner may not come
            raise
        finally:
            del self.in_flight[key]

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        read = super().latest
        return await self.joined(
            ("latest", workflow_name, graph_signature_hash), lambda: read(workflow_name, graph_signature_hash)
        )

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[str]:
        read = super().list_ids
        return await self.joined(  # type: ignore[no-any-return]
            ("ids", workflow_name, graph_signature_hash, include_nested),
            lambda: read(workflow_name, graph_signature_hash, include_nested=include_nested),
        )


def test_reads_joined_to_one_in_flight_are_caught() -> None:
    (backend,) = validate(
        double_target(JoinsReadsInFlight), clauses=["concurrency.reads_follow_other_handles"]
    ).backends
    assert failed(backend) == {"concurrency.reads_follow_other_handles"}
    assert (
        "on the reading handle, started after save"
        in backend.result("concurrency.reads_follow_other_handles").message
    )


class WritesEmbeddedRecordsFirst(DoubleBackend):
    """Writes a family's embedded records one at a time, each after an await (a request to a
    server), and its container last: a save cancelled between leaves embedded records that the
    runner's second save collides with."""

    _locks: ClassVar[dict[int, asyncio.Lock]] = {}

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        # Saves take turns (no check-then-act race between them); only a cancellation splits one.
        async with self._locks.setdefault(id(self.backing), asyncio.Lock()):
            state = self._read()
            existing = state.rows.get(self._key(records[0].checkpoint_id))
            if existing is not None:
                return InsertResult.of_stored_digest(existing.record.digest, records[0])
            for record in records[1:]:
                if self._key(record.checkpoint_id) in state.rows:
                    raise nested_id_conflict(records, record.checkpoint_id)
            for record in [*records[1:], records[0]]:
                await asyncio.sleep(0)
                sequence = self._next_sequence(state, record.workflow_name)
                state.rows[self._key(record.checkpoint_id)] = Row(record, sequence)
                self._commit(state)
            return InsertResult.INSERTED


def test_embedded_records_left_by_a_cancelled_save_are_caught() -> None:
    backend = run_family(WritesEmbeddedRecordsFirst)
    assert failed(backend) == {"concurrency.cancelled_nested_saves_whole"}
    message = backend.result("concurrency.cancelled_nested_saves_whole").message
    assert "again after a save cancelled" in message
    assert "CheckpointConflictError" in message


def test_cancelled_nested_saves_need_nested() -> None:
    (clause,) = [c for c in all_clauses() if c.id == "concurrency.cancelled_nested_saves_whole"]
    assert Capability.NESTED in clause.requires


class NumbersFromTheHighestStored(DoubleBackend):
    """Numbers a record one past the highest sequence stored in its workflow: once the newest
    record is deleted, its number is handed out again."""

    def _next_sequence(self, state: DoubleState, workflow_name: str) -> int:
        stored = [row.sequence for row in state.rows.values() if row.record.workflow_name == workflow_name]
        return max(stored, default=0) + 1


class LosesCounterUpdates(DoubleBackend):
    """Reads the workflow's counter, makes a round trip, then writes back what it read before
    numbering: two inserts racing between the read and the write get one number."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        state = self._read()
        workflow_name = records[0].workflow_name
        counter = state.sequences.get(workflow_name, 0)
        await asyncio.sleep(0)  # the round trip
        state.sequences[workflow_name] = counter
        return await super().insert(records)


@pytest.mark.parametrize("mutant", [NumbersFromTheHighestStored, LosesCounterUpdates])
def test_sequence_numbers_handed_out_twice_are_caught(mutant: type[DoubleBackend]) -> None:
    backend = run_family(double_target(mutant))
    assert "concurrency.many_writers_number_once" in failed(backend)
    assert "was handed out twice" in backend.result("concurrency.many_writers_number_once").message
