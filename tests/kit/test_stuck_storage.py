"""A stuck storage fails fast: the first call that does not return within the operation timeout
fails its clause, and every later clause fails at once instead of waiting out its own timeout."""

from __future__ import annotations

import asyncio
import collections
import inspect
from collections.abc import Sequence
from typing import Any

import pytest

from conformance import Outcome, StorageTarget, select_clauses, validate
from conformance.bounded import OperationWatch, StorageStuck, unbound
from storages.backend import CheckpointRecord, InsertResult, StoredBody
from storages.contract import CheckpointID
from storages.engine import CheckpointStore

from .double import Backing, DoubleBackend, MemoryBacking, storage_of

BOUND = 0.5
"""The operation timeout of these tests' runs, in seconds."""
CANCELLING = "concurrency.cancelled_calls_leave_no_trace"
"""The first clause that cancels a call in flight: where the mutant's lock is left held."""
LATER = ["lifecycle", "model"]
"""Families run after it; the model clauses' own timeouts are 600 to 900 s."""


class Gate:
    """A first-come first-served lock made of events: a waiter waits for its own event, which the
    holder sets when it hands the lock over."""

    def __init__(self) -> None:
        self.held = False
        self.waiters: collections.deque[asyncio.Event] = collections.deque()

    async def take(self) -> None:
        if not self.held:
            self.held = True
            return
        handed = asyncio.Event()
        self.waiters.append(handed)
        await handed.wait()

    def give(self) -> None:
        if self.waiters:
            self.waiters.popleft().set()  # still held: handed to the next waiter
        else:
            self.held = False


class GateBacking(MemoryBacking):
    """The double's memory, and one gate its handles share."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()


class LockHeldAfterCancel(DoubleBackend):
    """Serialises its primitives with a store-wide gate taken and given back by hand around a
    round trip: a call cancelled while it holds the gate never gives it back, so every later call,
    on any handle, waits for an event nobody sets."""

    def __init__(self, backing: Backing | None = None) -> None:
        super().__init__(backing if backing is not None else GateBacking())

    async def _take(self) -> None:
        assert isinstance(self.backing, GateBacking)
        await self.backing.gate.take()
        await asyncio.sleep(0)  # the round trip, where a cancellation lands (the defect: no finally)

    def _give(self) -> None:
        assert isinstance(self.backing, GateBacking)
        self.backing.gate.give()

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        await self._take()
        result = await super().insert(records)
        self._give()
        return result

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        await self._take()
        body = await super().load(checkpoint_id)
        self._give()
        return body

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        await self._take()
        ids = await super().list_ids(workflow_name, graph_signature_hash, include_nested=include_nested)
        self._give()
        return ids

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        await self._take()
        body = await super().latest(workflow_name, graph_signature_hash)
        self._give()
        return body


def _target(**options: Any) -> StorageTarget:
    root = storage_of(LockHeldAfterCancel())
    return StorageTarget("lock-held-after-cancel", root.new_handle, operation_timeout=BOUND, **options)


def test_the_first_stuck_call_fails_its_clause_and_later_clauses_fail_without_running() -> None:
    (backend,) = validate(_target(), clauses=["concurrency", *LATER]).backends
    ids = [c.id for c in select_clauses(["concurrency", *LATER])]
    assert [r.clause_id for r in backend.results] == ids
    stuck_at = ids.index(CANCELLING)
    # Before the cancellation the mutant is a correct storage.
    assert all(r.outcome is Outcome.PASSED for r in backend.results[:stuck_at]), [
        (r.clause_id, r.message) for r in backend.results[:stuck_at] if r.outcome is not Outcome.PASSED
    ]
    stuck = backend.result(CANCELLING)
    assert stuck.outcome is Outcome.FAILED
    assert f"did not return within {BOUND:g} s" in stuck.message
    assert "marked stuck" in stuck.message
    for later in backend.results[stuck_at + 1 :]:
        assert later.outcome is Outcome.FAILED, later.clause_id
        assert later.message.startswith(f"not run: the storage is stuck since {CANCELLING}"), later.message


def test_the_cleanup_of_a_stuck_storage_waits_for_nothing() -> None:
    (backend,) = validate(_target(remove_workflows=True), clauses=[CANCELLING, "lifecycle"]).backends
    stuck = backend.result(CANCELLING)
    assert f"did not return within {BOUND:g} s" in stuck.message
    # The workflows it made are reported as left behind, not deleted through the stuck store.
    assert stuck.leftovers
    assert set(stuck.leftovers) <= set(backend.leftovers)
    assert all(r.message.startswith("not run: ") for r in backend.results[1:])


def test_a_healthy_storage_is_never_reported_stuck_at_the_same_bound() -> None:
    root = storage_of(DoubleBackend())
    target = StorageTarget("double", root.new_handle, operation_timeout=BOUND)
    (backend,) = validate(target, clauses=[CANCELLING, "lifecycle"]).backends
    assert backend.ok, [(r.clause_id, r.message) for r in backend.failures]


async def test_a_bound_handle_is_the_storage_to_whoever_inspects_it() -> None:
    watch = OperationWatch(BOUND)
    raw = storage_of(DoubleBackend())
    handle = watch.bound(raw)
    assert isinstance(handle, CheckpointStore)
    assert unbound(handle) is raw
    assert watch.bound(handle) is handle
    assert "workflow_name" in inspect.signature(handle.list_checkpoint_ids).parameters
    second = handle.new_handle()
    assert unbound(second) is not raw
    assert isinstance(second, CheckpointStore)
    assert type(second) is type(handle)  # bound as well
    async with watch.bound(raw.new_handle()) as managed:
        assert type(managed) is type(handle)
        assert await managed.list_checkpoint_ids(workflow_name="ck-none") == []


async def test_a_call_that_never_returns_raises_storage_stuck_and_so_does_every_later_one() -> None:
    watch = OperationWatch(BOUND)
    watch.begin("family.clause", BOUND)
    never = asyncio.Event()
    with pytest.raises(StorageStuck, match=rf"save\(\) did not return within {BOUND:g} s"):
        await watch.run("save", never.wait())
    assert watch.stuck_in == "family.clause"
    answered = asyncio.Event()
    answered.set()
    with pytest.raises(StorageStuck, match="not called: the storage is stuck"):
        await watch.run("load", answered.wait())


async def test_a_storage_own_timeout_error_is_its_answer_not_a_stuck_call() -> None:
    watch = OperationWatch(60.0)

    async def refuses() -> None:
        raise TimeoutError("the server said so")

    with pytest.raises(TimeoutError, match="the server said so") as raised:
        await watch.run("load", refuses())
    assert not isinstance(raised.value, StorageStuck)
    assert not watch.stuck


async def test_a_call_queued_behind_calls_that_keep_returning_is_slow_not_stuck() -> None:
    # Forty calls take turns, each returning a twentieth of the bound after the one before: the
    # last waits twice the bound in all, yet the storage never goes a bound without an answer.
    watch = OperationWatch(1.0)
    turn = asyncio.Lock()

    async def call() -> None:
        async with turn:
            await asyncio.sleep(0.05)

    await asyncio.gather(*(watch.run("save", call()) for _ in range(40)))
    assert not watch.stuck
