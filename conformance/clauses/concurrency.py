"""concurrency: many tasks and several handles on one backend lose and duplicate nothing.

Saves are fired together with ``asyncio.gather``. Afterwards every checkpoint must be listed
exactly once, the latest must be the last listed, and the list order must be a total order that
respects real time: a save that returned before another save started is listed before it.

``waits_yield_to_the_loop`` times where a call's wall time goes on the event loop's thread:
computing, waiting for a CPU (Linux's per-thread schedstat), waiting in the loop's own select
(the I/O and timers it awaits), or none of these: sleeping on something synchronous. A storage
that calls a blocking client from an async method spends that last part on every call and
stalls every other task of the process meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import socket
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from storages.contract import Capability
from storages.errors import CheckpointConflictError

from ..clause import clause, ensure, ensure_equal, fail, not_applicable
from ..context import ClauseContext
from ._maf import is_not_found
from .fidelity import first_difference
from .nested import embedded, expect_loads, sub_workflow_state

BURST = 120
"""Checkpoints saved at once in the single-workflow clauses."""

_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class _Timed:
    """When a save started and returned, in ticks of one shared counter (real-time order)."""

    checkpoint: Any
    started: int
    finished: int


async def _timed_saves(pairs: Sequence[tuple[Any, Any]]) -> list[_Timed]:
    """Save each (storage, checkpoint) pair concurrently, recording start and finish order."""
    ticks = itertools.count()

    async def save(storage: Any, checkpoint: Any) -> _Timed:
        started = next(ticks)
        returned = await storage.save(checkpoint)
        ensure_equal(returned, checkpoint.checkpoint_id, "id returned by a concurrent save()")
        return _Timed(checkpoint, started, next(ticks))

    return list(await asyncio.gather(*(save(storage, checkpoint) for storage, checkpoint in pairs)))


def _ensure_exactly_once(ids: list[str], saved: Sequence[Any], what: str) -> None:
    expected = {c.checkpoint_id for c in saved}
    duplicated = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    ensure(not duplicated, f"{what} lists {len(duplicated)} ids more than once, e.g. {duplicated[:3]}")
    missing = sorted(expected - set(ids))
    ensure(not missing, f"{what} lost {len(missing)} of {len(expected)} concurrent saves, e.g. {missing[:3]}")
    foreign = sorted(set(ids) - expected)
    ensure(not foreign, f"{what} lists ids that were never saved to it, e.g. {foreign[:3]}")


def _ensure_real_time_order(ids: list[str], saves: Sequence[_Timed], what: str) -> None:
    """A save that returned before another started must be listed before it."""
    position = {checkpoint_id: index for index, checkpoint_id in enumerate(ids)}
    by_finish = sorted(saves, key=lambda s: s.finished)
    for later in saves:
        for earlier in by_finish:
            if earlier.finished >= later.started:
                break
            if position[earlier.checkpoint.checkpoint_id] > position[later.checkpoint.checkpoint_id]:
                fail(
                    f"{what} lists {later.checkpoint.checkpoint_id!r} before "
                    f"{earlier.checkpoint.checkpoint_id!r}, although the save of the second returned "
                    "before the save of the first started"
                )


async def _ensure_consistent(
    storage: Any, workflow_name: str, saves: Sequence[_Timed], handle: str
) -> list[str]:
    """The workflow holds exactly ``saves``, in one order shared by every read; returns the ids."""
    saved = {s.checkpoint.checkpoint_id: s.checkpoint for s in saves}
    ids: list[str] = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    _ensure_exactly_once(ids, list(saved.values()), f"list_checkpoint_ids on {handle}")
    _ensure_real_time_order(ids, saves, f"list_checkpoint_ids on {handle}")
    listed = await storage.list_checkpoints(workflow_name=workflow_name)
    ensure_equal(
        [c.checkpoint_id for c in listed],
        ids,
        f"list_checkpoints order vs list_checkpoint_ids order on {handle}",
    )
    for checkpoint in listed:
        problem = first_difference(saved[checkpoint.checkpoint_id], checkpoint)
        if problem is not None:
            fail(f"list_checkpoints on {handle}, checkpoint {checkpoint.checkpoint_id!r}: {problem}")
    latest = await storage.get_latest(workflow_name=workflow_name)
    ensure(
        latest is not None,
        f"get_latest({workflow_name!r}) on {handle} returned None after {len(saves)} saves",
    )
    ensure_equal(latest.checkpoint_id, ids[-1], f"get_latest id vs the last listed id on {handle}")
    ensure_equal(latest, saved[latest.checkpoint_id], f"get_latest on {handle}")
    return ids


async def _writers(ctx: ClauseContext) -> list[Any]:
    """The handles concurrent saves of one workflow go through: four on a shared store (a
    handle may queue one workflow's saves, so only several handles race them in the store),
    else the clause's one."""
    if not ctx.has(Capability.SHARED):
        return [ctx.storage]
    return [ctx.storage, *[await ctx.other_handle() for _ in range(3)]]


@clause(
    "concurrency.many_saves_one_workflow",
    f"{BURST} concurrent saves to one workflow, through several handles where the store is shared, are "
    "listed once each, in real-time order, latest last.",
    timeout=_TIMEOUT,
)
async def many_saves_one_workflow(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("burst")
    checkpoints = [ctx.checkpoint(workflow_name, iteration_count=i, state={"i": i}) for i in range(BURST)]
    writers = await _writers(ctx)
    saves = await _timed_saves([(writers[i % len(writers)], c) for i, c in enumerate(checkpoints)])
    ids = await _ensure_consistent(ctx.storage, workflow_name, saves, "the saving handle")
    # The burst must leave the sequence usable: the next save is the newest.
    follow_up = ctx.checkpoint(workflow_name, previous_checkpoint_id=ids[-1], iteration_count=BURST)
    await ctx.storage.save(follow_up)
    after = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(after, [*ids, follow_up.checkpoint_id], "list_checkpoint_ids after one more save")


@clause(
    "concurrency.workflows_do_not_mix",
    "Interleaved concurrent saves to many workflows leave each workflow exactly its own checkpoints.",
    timeout=_TIMEOUT,
)
async def workflows_do_not_mix(ctx: ClauseContext) -> None:
    names = [ctx.workflow_name(f"mix{index}") for index in range(16)]
    checkpoints = [
        ctx.checkpoint(name, iteration_count=i, state={"i": i}) for i in range(8) for name in names
    ]
    random.Random(7748).shuffle(checkpoints)  # noqa: S311 - reproducible order
    saves = await _timed_saves([(ctx.storage, c) for c in checkpoints])
    for name in names:
        own = [s for s in saves if s.checkpoint.workflow_name == name]
        await _ensure_consistent(ctx.storage, name, own, f"workflow {name!r}")


@clause(
    "concurrency.identical_saves",
    "Concurrent saves of equal checkpoints under one id, through several handles where the store is "
    "shared, all succeed and store it exactly once (MAF #7748).",
    timeout=_TIMEOUT,
)
async def identical_saves(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("same-id")
    original = ctx.checkpoint(workflow_name, state={"tuple": (1, 2), "text": "same"})
    copies = [_copy_of(ctx, original) for _ in range(64)]
    writers = await _writers(ctx)
    results = await asyncio.gather(
        *(writers[index % len(writers)].save(c) for index, c in enumerate(copies)), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            fail(
                f"a concurrent save of equal checkpoint {original.checkpoint_id!r} raised "
                f"{type(result).__name__}: {result}"
            )
        ensure_equal(
            result, original.checkpoint_id, "id returned by a concurrent save of an equal checkpoint"
        )
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(ids, [original.checkpoint_id], "list_checkpoint_ids after 64 concurrent equal saves")
    loaded = await ctx.storage.load(original.checkpoint_id)
    problem = first_difference(original, loaded)
    ensure(problem is None, f"load({original.checkpoint_id!r}) after concurrent equal saves: {problem}")


def _copy_of(ctx: ClauseContext, checkpoint: Any, **changes: Any) -> Any:
    """An equal but distinct checkpoint object (a caller rebuilding it, not reusing it)."""
    fields = {
        "checkpoint_id": checkpoint.checkpoint_id,
        "timestamp": checkpoint.timestamp,
        "graph_signature_hash": checkpoint.graph_signature_hash,
        "state": {key: value for key, value in checkpoint.state.items()},
    }
    fields.update(changes)
    return ctx.checkpoint(checkpoint.workflow_name, **fields)


@clause(
    "concurrency.conflicting_saves",
    "Concurrent saves of different content under one id, through several handles where the store is "
    "shared, store one; the others raise CheckpointConflictError.",
    timeout=_TIMEOUT,
)
async def conflicting_saves(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("conflict")
    base = ctx.checkpoint(workflow_name)
    variants = [_copy_of(ctx, base, state={"variant": index}) for index in range(16)]
    writers = await _writers(ctx)
    results = await asyncio.gather(
        *(writers[index % len(writers)].save(v) for index, v in enumerate(variants)), return_exceptions=True
    )
    stored = await ctx.storage.load(base.checkpoint_id)
    winners = [index for index, variant in enumerate(variants) if variant == stored]
    ensure(len(winners) == 1, f"load({base.checkpoint_id!r}) returned none of the saved variants: {stored!r}")
    for index, result in enumerate(results):
        if index == winners[0]:
            if isinstance(result, BaseException):
                fail(f"the save whose variant {index} was stored raised {type(result).__name__}: {result}")
        elif not isinstance(result, CheckpointConflictError):
            outcome = (
                f"raised {type(result).__name__}: {result}"
                if isinstance(result, BaseException)
                else "returned"
            )
            fail(
                f"save of variant {index} under {base.checkpoint_id!r} {outcome}, but variant {winners[0]} "
                "is stored; a losing concurrent save must raise CheckpointConflictError"
            )
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(ids, [base.checkpoint_id], "list_checkpoint_ids after conflicting concurrent saves")


@clause(
    "concurrency.reads_see_whole_checkpoints",
    "Reads racing with saves see either nothing or a whole, equal checkpoint, never a partial one.",
    timeout=_TIMEOUT,
)
async def reads_see_whole_checkpoints(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("racing-reads")
    payload = [f"item {index} " + "x" * 200 for index in range(300)]
    checkpoints = [
        ctx.checkpoint(
            workflow_name, iteration_count=i, state={"i": i, "payload": payload, "pair": (i, str(i))}
        )
        for i in range(40)
    ]
    expected = {c.checkpoint_id: c for c in checkpoints}
    readers_handles = [ctx.storage]
    if ctx.has(Capability.SHARED):
        readers_handles.append(await ctx.other_handle())
    writing = True

    def check(checkpoint: Any, source: str) -> None:
        want = expected.get(checkpoint.checkpoint_id)
        ensure(want is not None, f"{source} returned unknown checkpoint {checkpoint.checkpoint_id!r}")
        problem = first_difference(want, checkpoint)
        if problem is not None:
            fail(f"{source} during concurrent saves, checkpoint {checkpoint.checkpoint_id!r}: {problem}")

    async def read_everything(storage: Any) -> None:
        for checkpoint_id in expected:
            await _load_whole_or_nothing(storage, checkpoint_id, check, "during concurrent saves")
        try:
            latest = await storage.get_latest(workflow_name=workflow_name)
            listed = await storage.list_checkpoints(workflow_name=workflow_name)
        except Exception as exc:
            fail(f"get_latest/list_checkpoints during concurrent saves raised {type(exc).__name__}: {exc}")
        if latest is not None:
            check(latest, "get_latest")
        for checkpoint in listed:
            check(checkpoint, "list_checkpoints")

    async def reader(storage: Any) -> None:
        while writing:
            await read_everything(storage)
            await asyncio.sleep(0)

    async def writer() -> None:
        nonlocal writing
        try:
            await asyncio.gather(*(ctx.storage.save(c) for c in checkpoints))
        finally:
            writing = False

    await asyncio.gather(writer(), *(reader(handle) for handle in readers_handles for _ in range(2)))
    for handle in readers_handles:
        await read_everything(handle)
    # Bodies that take a while to write, each loaded by its id for as long as its save runs: a
    # record written in place (truncated, then filled) is found half written here, where the
    # small bodies above are written too fast for a racing read to land in between.
    for index in range(_LARGE_RACES):
        body = random.Random(index).randbytes(_LARGE_BODY_BYTES)  # noqa: S311 - incompressible, reproducible
        state = {"i": index, "large": body}
        large = ctx.checkpoint(workflow_name, iteration_count=len(checkpoints), state=state)
        checkpoints.append(large)
        expected[large.checkpoint_id] = large
        saving = asyncio.ensure_future(ctx.storage.save(large))
        try:
            while not saving.done():
                for handle in readers_handles:
                    await _load_whole_or_nothing(handle, large.checkpoint_id, check, "racing its own save")
                await asyncio.sleep(0)
        finally:
            await saving
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    _ensure_exactly_once(ids, checkpoints, "list_checkpoint_ids after racing reads")


_LARGE_RACES = 6
"""Saves of a large body that loads of its id race in ``reads_see_whole_checkpoints``."""
_LARGE_BODY_BYTES = 1_000_000
"""How large: a write of it takes long enough on a file or a socket for loads to land within it."""


async def _load_whole_or_nothing(
    storage: Any, checkpoint_id: str, check: Callable[[Any, str], None], while_: str
) -> None:
    """Loads ``checkpoint_id`` and checks it, taking "not found" as not saved yet; ``while_``
    names what the load raced, in the message of a load that raises."""
    try:
        loaded = await storage.load(checkpoint_id)
    except Exception as exc:
        if is_not_found(exc):
            return
        fail(f"load({checkpoint_id!r}) {while_} raised {type(exc).__name__}: {exc}")
    check(loaded, f"load({checkpoint_id!r})")


_DELETE_RACE_LENGTH = 8
"""Checkpoints a listing races the deletes of: enough for a listing that reads its bodies one
request at a time to meet a delete coming the other way."""


@clause(
    "concurrency.listings_race_deletes",
    "Listings, get_latest and loads racing deletes of the workflow's newest checkpoints answer as some order "
    "of the deletes explains (the oldest checkpoints, whole, in order; a load finds its checkpoint whole or "
    "not at all); none raises another error.",
    timeout=_TIMEOUT,
)
async def listings_race_deletes(ctx: ClauseContext) -> None:
    # A listing is one read: a layer that lists ids and then loads them one by one finds some
    # deleted in between and raises CheckpointNotFoundError, an answer no order explains.
    workflow_name = ctx.workflow_name("race-deletes")
    chain = await ctx.save_chain(workflow_name, _DELETE_RACE_LENGTH)
    await _race_deletes(ctx.storage, chain)


async def _race_deletes(storage: Any, chain: list[Any]) -> None:
    """Delete ``chain`` newest first while two readers list it and read its latest."""
    workflow_name = chain[0].workflow_name
    ids = [c.checkpoint_id for c in chain]
    deleting = True

    def explained(listed_ids: list[str], what: str) -> None:
        ensure(
            listed_ids == ids[: len(listed_ids)],
            f"{what} racing deletes of the newest checkpoints returned {listed_ids}, which is not the "
            f"oldest {len(listed_ids)} of {ids} in order",
        )

    async def read() -> None:
        try:
            listed = await storage.list_checkpoints(workflow_name=workflow_name)
            listed_ids = await storage.list_checkpoint_ids(workflow_name=workflow_name)
            latest = await storage.get_latest(workflow_name=workflow_name)
        except Exception as exc:
            fail(f"a listing or get_latest racing deletes raised {type(exc).__name__}: {exc}")
        explained([c.checkpoint_id for c in listed], "list_checkpoints")
        explained(list(listed_ids), "list_checkpoint_ids")
        for checkpoint in [*listed, *([] if latest is None else [latest])]:
            ensure(
                checkpoint.checkpoint_id in ids,
                f"a read racing deletes returned {checkpoint.checkpoint_id!r}, never saved in {ids}",
            )
            problem = first_difference(chain[ids.index(checkpoint.checkpoint_id)], checkpoint)
            ensure(problem is None, f"a read racing deletes: {problem}")

    async def reader() -> None:
        while deleting:
            await read()
            await asyncio.sleep(0)

    async def deleter() -> None:
        nonlocal deleting
        try:
            for checkpoint_id in reversed(ids):
                await storage.delete(checkpoint_id)
                await asyncio.sleep(0)
        finally:
            deleting = False

    async def loader() -> None:
        # A load racing the delete of its own checkpoint: a store that reads a record in two
        # steps (an index entry, then the body or its parts) must not report a checkpoint
        # deleted between them as corrupted.
        for checkpoint_id in reversed(ids):
            try:
                loaded = await storage.load(checkpoint_id)
            except Exception as exc:
                if is_not_found(exc):
                    continue
                fail(f"load({checkpoint_id!r}) racing its delete raised {type(exc).__name__}: {exc}")
            problem = first_difference(chain[ids.index(checkpoint_id)], loaded)
            ensure(problem is None, f"load({checkpoint_id!r}) racing its delete: {problem}")
            await asyncio.sleep(0)

    await asyncio.gather(deleter(), reader(), reader(), loader())
    await read()


@clause(
    "concurrency.shared_handles_interleave",
    "Two handles saving to one workflow at once both see every save once, in one order, agreeing on latest.",
    requires=(Capability.SHARED,),
    timeout=_TIMEOUT,
)
async def shared_handles_interleave(ctx: ClauseContext) -> None:
    first, second = ctx.storage, await ctx.other_handle()
    handles = {"the first handle": first, "the second handle": second}
    workflow_name = ctx.workflow_name("two-handles")
    checkpoints = [ctx.checkpoint(workflow_name, iteration_count=i, state={"i": i}) for i in range(80)]
    saves = await _timed_saves([(first if i % 2 == 0 else second, c) for i, c in enumerate(checkpoints)])
    orders = {name: await _ensure_consistent(h, workflow_name, saves, name) for name, h in handles.items()}
    ensure_equal(
        orders["the second handle"], orders["the first handle"], "list order seen by the two handles"
    )
    # Sequences must come from the shared backend: a save on either handle is newest on both.
    for writer_name, reader_name in (
        ("the second handle", "the first handle"),
        ("the first handle", "the second handle"),
    ):
        checkpoint = ctx.checkpoint(workflow_name, state={"written_by": writer_name})
        await handles[writer_name].save(checkpoint)
        latest = await handles[reader_name].get_latest(workflow_name=workflow_name)
        ensure_equal(
            getattr(latest, "checkpoint_id", None),
            checkpoint.checkpoint_id,
            f"get_latest on {reader_name} right after a save on {writer_name}",
        )
        checkpoints.append(checkpoint)
    for name, handle in handles.items():
        ids = await handle.list_checkpoint_ids(workflow_name=workflow_name)
        ensure_equal(
            ids,
            [*orders[name], checkpoints[-2].checkpoint_id, checkpoints[-1].checkpoint_id],
            f"ids on {name}",
        )


READERS_IN_FLIGHT = 4
"""Tasks each reading through the reading handle without pause while the other handle saves: a
read of that handle is then in flight whenever the other's save commits."""

FRESH_READ_ROUNDS = 12


@clause(
    "concurrency.reads_follow_other_handles",
    "A read started after another handle's save returned sees that save, while the reading handle's "
    "earlier reads are still in flight.",
    requires=(Capability.SHARED,),
    timeout=_TIMEOUT,
)
async def reads_follow_other_handles(ctx: ClauseContext) -> None:
    # A handle pinning its reads to a snapshot it took (its own last write, a version its running
    # reads keep alive) or joining a read already in flight (one request for identical reads)
    # answers as of before the other handle's save, and only while its own reads overlap.
    reader, writer = ctx.storage, await ctx.other_handle()
    workflow_name = ctx.workflow_name("fresh-reads")
    first = ctx.checkpoint(workflow_name)
    await reader.save(first)
    saved = [first]
    stop = asyncio.Event()

    async def keep_reading() -> None:
        while not stop.is_set():
            await reader.get_latest(workflow_name=workflow_name)
            await reader.list_checkpoint_ids(workflow_name=workflow_name)
            await asyncio.sleep(0)  # a storage answering without a suspension would starve the loop

    background = [asyncio.create_task(keep_reading()) for _ in range(READERS_IN_FLIGHT)]
    try:
        await asyncio.sleep(0)
        for index in range(1, FRESH_READ_ROUNDS + 1):
            checkpoint = ctx.checkpoint(
                workflow_name, previous_checkpoint_id=saved[-1].checkpoint_id, iteration_count=index
            )
            await writer.save(checkpoint)
            saved.append(checkpoint)
            after = f"save {index} of {FRESH_READ_ROUNDS} on the other handle returned"
            latest = await reader.get_latest(workflow_name=workflow_name)
            ensure_equal(
                getattr(latest, "checkpoint_id", None),
                checkpoint.checkpoint_id,
                f"get_latest on the reading handle, started after {after}",
            )
            ensure_equal(
                await reader.list_checkpoint_ids(workflow_name=workflow_name),
                [c.checkpoint_id for c in saved],
                f"list_checkpoint_ids on the reading handle, started after {after}",
            )
    finally:
        stop.set()
        outcomes = await asyncio.gather(*background, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            fail(
                f"a read in flight beside the other handle's saves raised {type(outcome).__name__}: {outcome}"
            )


@clause(
    "concurrency.shared_identical_saves",
    "Equal checkpoints saved under one id through two handles at once are stored once, without error.",
    requires=(Capability.SHARED,),
    timeout=_TIMEOUT,
)
async def shared_identical_saves(ctx: ClauseContext) -> None:
    first, second = ctx.storage, await ctx.other_handle()
    workflow_name = ctx.workflow_name("two-handles-same-id")
    original = ctx.checkpoint(workflow_name, state={"set": frozenset({1, 2})})
    calls = [(first if i % 2 == 0 else second).save(_copy_of(ctx, original)) for i in range(32)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            fail(
                f"an equal save of {original.checkpoint_id!r} through two handles raised "
                f"{type(result).__name__}: {result}"
            )
    for name, handle in (("the first handle", first), ("the second handle", second)):
        ids = await handle.list_checkpoint_ids(workflow_name=workflow_name)
        ensure_equal(
            ids,
            [original.checkpoint_id],
            f"list_checkpoint_ids on {name} after equal saves through two handles",
        )
    # One stored copy means one delete, through either handle, removes it for both.
    ensure_equal(await first.delete(original.checkpoint_id), True, f"delete({original.checkpoint_id!r})")
    remaining = await second.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(
        remaining, [], "list_checkpoint_ids on the second handle after the first deleted the only copy"
    )


# ---------------------------------------------------------------------- waits on the loop's thread

WAIT_CALLS = 31
"""Calls timed per operation; the median decides, so a preempted call or a first call that
connects does not."""
WAIT_LIMIT_US = 50.0
"""Median time a call may spend waiting on the event loop's thread outside the loop's own wait
for I/O. A storage that waits correctly (awaits a socket, a thread, an asyncio lock) spends none
there (the loop's select overlaps the thread's own clock, so such medians are at or below zero).
A synchronous client to a server on loopback waits about one round trip (40-60 µs on Redis),
more for every further command; a fsync or a time.sleep much more."""


class _SelectClock:
    """Adds up the time the running loop spends in its selector's ``select`` (waiting for I/O or
    for a timer), by wrapping that method on the selector instance for the clause's duration."""

    def __init__(self, selector: Any) -> None:
        self._selector = selector
        self._select = selector.select
        self.waited = 0.0
        selector.select = self._timed

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop) -> _SelectClock | None:
        """None when the loop is not a selector loop (uvloop, the proactor): nothing to time."""
        selector = getattr(loop, "_selector", None)
        if selector is None or not callable(getattr(selector, "select", None)):
            return None
        return cls(selector)

    def _timed(self, timeout: float | None = None) -> Any:
        started = time.perf_counter()
        try:
            return self._select(timeout)
        finally:
            self.waited += time.perf_counter() - started

    def remove(self) -> None:
        del self._selector.select  # the class's own method again


_SCHEDSTAT = "/proc/thread-self/schedstat"


def _queued_seconds() -> float | None:
    """Seconds this thread has spent runnable on a run queue (Linux's schedstat, second field,
    brought up to date whenever the thread gets a CPU back); None where there is no such
    figure. (The first field, time on a CPU, lags for a running thread: thread_time is used.)"""
    try:
        with open(_SCHEDSTAT, "rb") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def _scheduled_seconds() -> float:
    """Seconds this thread has computed or waited for a CPU, so that being preempted on a busy
    machine is not counted as waiting."""
    return time.thread_time() + (_queued_seconds() or 0.0)


async def _blocking_wait_us(clock: _SelectClock, call: Awaitable[Any]) -> float:
    """Wall time of ``call`` during which this thread neither ran, nor waited for a CPU, nor
    waited in the loop's select: the time it slept on something else (a sleep, a socket, a file,
    a lock)."""
    scheduled, waited = _scheduled_seconds(), clock.waited
    wall = time.perf_counter()
    await call
    wall = time.perf_counter() - wall
    scheduled, waited = _scheduled_seconds() - scheduled, clock.waited - waited
    return (wall - scheduled - waited) * 1e6


@clause(
    "concurrency.waits_yield_to_the_loop",
    "No call waits on the event loop's thread: while a save, load or read waits, other tasks run.",
    timeout=_TIMEOUT,
)
async def waits_yield_to_the_loop(ctx: ClauseContext) -> None:
    clock = _SelectClock.install(asyncio.get_running_loop())
    if clock is None:
        not_applicable("the event loop is not a selector loop, so its waits for I/O cannot be timed")
    if _queued_seconds() is None:
        clock.remove()
        # Without it, a busy machine's preemption would read as waiting: no verdict is better
        # than a false one.
        not_applicable(f"no per-thread run-queue time ({_SCHEDSTAT}) to tell waiting from preemption")
    try:
        workflow_name = ctx.workflow_name("waits")
        # A chain: each continues the one before, as a run saves, so get_latest reads no rivals.
        checkpoints = [ctx.checkpoint(workflow_name, iteration_count=0)]
        for i in range(1, WAIT_CALLS):
            checkpoints.append(
                ctx.checkpoint(
                    workflow_name, previous_checkpoint_id=checkpoints[-1].checkpoint_id, iteration_count=i
                )
            )
        waits: dict[str, list[float]] = {"save": [], "load": [], "get_latest": [], "list_checkpoint_ids": []}
        storage = ctx.storage
        for checkpoint in checkpoints:
            waits["save"].append(await _blocking_wait_us(clock, storage.save(checkpoint)))
        for checkpoint in checkpoints:
            waits["load"].append(await _blocking_wait_us(clock, storage.load(checkpoint.checkpoint_id)))
            waits["get_latest"].append(
                await _blocking_wait_us(clock, storage.get_latest(workflow_name=workflow_name))
            )
            waits["list_checkpoint_ids"].append(
                await _blocking_wait_us(clock, storage.list_checkpoint_ids(workflow_name=workflow_name))
            )
    finally:
        clock.remove()
    blocking = {name: statistics.median(values) for name, values in waits.items()}
    slow = [f"{name} ({wait:,.0f} µs a call)" for name, wait in blocking.items() if wait >= WAIT_LIMIT_US]
    ensure(
        not slow,
        f"the event loop's thread waited (median of {WAIT_CALLS} calls) inside "
        + ", ".join(slow)
        + f", over {WAIT_LIMIT_US:g} µs: a synchronous wait in an async method (time.sleep, a blocking "
        "socket, file or lock) stalls every other task of the process; await it or run it in a thread",
    )


_FILE_EVENTS = frozenset({"open", "sqlite3.connect"})
"""Audit events that open a file: the builtin and ``os.open``, and a SQLite database."""
_IMPORT_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth", ".zip")
"""Files an import (or a traceback's source line) opens: the interpreter's, not the storage's."""


class _FileWatch:
    """The audit hook's state: the thread whose opens are recorded (None: none), and what it
    opened. An audit hook cannot be removed, so one is installed per process and does nothing
    outside a watch but compare one attribute."""

    installed = False
    thread: int | None = None
    opened: list[str] = []  # noqa: RUF012 - one list per process, as the hook is

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if cls.thread is None or event not in _FILE_EVENTS or threading.get_ident() != cls.thread:
            return
        target = args[0] if args else None
        name = os.fsdecode(target) if isinstance(target, (str, bytes, os.PathLike)) else repr(target)
        if not name.endswith(_IMPORT_SUFFIXES):
            cls.opened.append(f"{event} {name}")

    @classmethod
    def install(cls) -> None:
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True

    @classmethod
    @contextlib.contextmanager
    def watching(cls) -> Iterator[None]:
        """Record the opens of this thread (the loop's) while the block runs."""
        cls.install()
        cls.opened = []
        cls.thread = threading.get_ident()
        try:
            yield
        finally:
            cls.thread = None


OPEN_WATCH_CALLS = 4
"""Checkpoints the loop-thread clauses save and read while they watch (after one round unwatched)."""


async def _rounds_while_watched(ctx: ClauseContext, label: str, watch: AbstractContextManager[Any]) -> None:
    """A save, a load, get_latest and both listings per checkpoint of a chain, the first round
    unwatched (a client that loads its files or connects once, when first used, does setup, not
    a wait per call), the other rounds and a delete inside ``watch``."""
    workflow_name = ctx.workflow_name(label)
    storage = ctx.storage
    checkpoints = [ctx.checkpoint(workflow_name, iteration_count=0)]
    for index in range(1, OPEN_WATCH_CALLS + 1):
        checkpoints.append(
            ctx.checkpoint(
                workflow_name, previous_checkpoint_id=checkpoints[-1].checkpoint_id, iteration_count=index
            )
        )

    async def one_round(checkpoint: Any) -> None:
        await storage.save(checkpoint)
        await storage.load(checkpoint.checkpoint_id)
        await storage.get_latest(workflow_name=workflow_name)
        await storage.list_checkpoints(workflow_name=workflow_name)
        await storage.list_checkpoint_ids(workflow_name=workflow_name)

    await one_round(checkpoints[0])
    with watch:
        for checkpoint in checkpoints[1:]:
            await one_round(checkpoint)
        await storage.delete(checkpoints[-1].checkpoint_id)


@clause(
    "concurrency.no_file_opened_on_the_loop",
    "No save, load or read opens a file on the event loop's thread (after a first round): file work "
    "runs in a thread.",
    timeout=_TIMEOUT,
)
async def no_file_opened_on_the_loop(ctx: ClauseContext) -> None:
    # A journal appended on the loop's thread takes microseconds on an idle disk, below what
    # waits_yield_to_the_loop can tell from preemption, and stalls every task on a busy or
    # network disk. The audit hook sees the open itself, whatever it costs.
    await _rounds_while_watched(ctx, "files", _FileWatch.watching())
    opened = sorted(set(_FileWatch.opened))
    ensure(
        not opened,
        f"the storage opened files on the event loop's thread while saving, loading, listing and deleting "
        f"({len(_FileWatch.opened)} opens: {opened[:3]}): a file's open, read or write waits for the disk; "
        "run it in a thread (asyncio.to_thread) so other tasks run meanwhile",
    )


_SOCKET_CALLS = frozenset(
    {"recv", "recv_into", "recvfrom", "recvfrom_into", "recvmsg", "send", "sendall", "sendto", "sendmsg"}
)
"""Socket methods that wait for the peer when the socket blocks (a timeout other than 0)."""


class _SocketWatch:
    """A profile function for the loop's thread that records sends and receives on blocking
    sockets while it is entered. asyncio's transports and ``sock_*`` calls use non-blocking
    sockets (timeout 0), which never wait; a synchronous client's socket waits for its server on
    every call."""

    def __init__(self) -> None:
        self.used: list[str] = []
        self._previous: Any = None

    def __enter__(self) -> None:
        self._previous = sys.getprofile()
        sys.setprofile(self)

    def __exit__(self, *exc_info: object) -> None:
        sys.setprofile(self._previous)

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "c_call" or getattr(arg, "__name__", None) not in _SOCKET_CALLS:
            return
        owner = getattr(arg, "__self__", None)
        if isinstance(owner, socket.socket) and owner.gettimeout() != 0.0:
            try:
                peer = owner.getpeername()
            except OSError:
                peer = "?"
            self.used.append(f"{arg.__name__} to {peer}")


@clause(
    "concurrency.no_blocking_socket_on_the_loop",
    "No save, load or read sends or receives on a blocking socket on the event loop's thread (after "
    "a first round): a synchronous client's request runs in a thread.",
    timeout=_TIMEOUT,
)
async def no_blocking_socket_on_the_loop(ctx: ClauseContext) -> None:
    # A request to a server on loopback takes tens of µs, below what waits_yield_to_the_loop can
    # tell from preemption, and stalls every task for as long as the server takes to answer. The
    # profile function sees the send and the receive, whatever they cost.
    watch = _SocketWatch()
    await _rounds_while_watched(ctx, "sockets", watch)
    used = sorted(set(watch.used))
    ensure(
        not used,
        f"the storage used blocking sockets on the event loop's thread while saving, loading, listing and "
        f"deleting ({len(watch.used)} calls: {used[:3]}): each waits for the server while no other task "
        "runs; use the client's asyncio API, or run the synchronous call in a thread (asyncio.to_thread)",
    )


# ---------------------------------------------------------------------- many writers

WRITERS = 16
"""Writers racing saves, deletes and prunes on one workflow in ``many_writers_number_once``."""
_WRITER_ROUNDS = 6


@clause(
    "concurrency.many_writers_number_once",
    f"{WRITERS} writers racing saves, deletes and prunes on one workflow never get one sequence number "
    "twice (not even one a deleted record had), and the listing stays in sequence order.",
    requires=[Capability.INSPECT],
    timeout=_TIMEOUT,
)
async def many_writers_number_once(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("writers")
    handles = await _writers(ctx)
    prunes = ctx.has(Capability.PRUNE)
    numbered: dict[int, str] = {}
    """Sequence number -> the id it was seen on, by any writer at any time."""
    saved: set[str] = set()

    def note(checkpoint_id: str, sequence: int, when: str) -> None:
        first = numbered.setdefault(sequence, checkpoint_id)
        ensure(
            first == checkpoint_id,
            f"sequence {sequence} of workflow {workflow_name!r} was handed out twice: to {first!r} and, "
            f"{when}, to {checkpoint_id!r} ({WRITERS} writers racing saves, deletes and prunes)",
        )

    async def writer(index: int) -> None:
        storage = handles[index % len(handles)]
        for round_index in range(_WRITER_ROUNDS):
            checkpoint = ctx.checkpoint(
                workflow_name, iteration_count=round_index, state={"writer": index, "round": round_index}
            )
            await storage.save(checkpoint)
            saved.add(checkpoint.checkpoint_id)
            info = await storage.checkpoint_info(checkpoint.checkpoint_id)
            if info is not None:  # None: another writer's prune took it already
                note(checkpoint.checkpoint_id, info.sequence, "after a save")
            if round_index % 3 == 1:
                # The newest record goes: a counter read from what is stored would hand its
                # number out again.
                await storage.delete(checkpoint.checkpoint_id)
            elif round_index % 3 == 2 and prunes and index % 4 == 0:
                await storage.prune(workflow_name=workflow_name, keep_last=3)

    await asyncio.gather(*(writer(index) for index in range(WRITERS)))
    records = await ctx.storage.list_records(workflow_name=workflow_name)
    for info in records:
        ensure(
            info.checkpoint_id in saved,
            f"list_records({workflow_name!r}) lists {info.checkpoint_id!r}, which no writer saved",
        )
        note(info.checkpoint_id, info.sequence, "in list_records after the race")
    sequence_of = {info.checkpoint_id: info.sequence for info in records}
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure(len(set(ids)) == len(ids), f"list_checkpoint_ids({workflow_name!r}) lists an id twice: {ids!r}")
    unindexed = [checkpoint_id for checkpoint_id in ids if checkpoint_id not in sequence_of]
    ensure(
        not unindexed,
        f"list_checkpoint_ids({workflow_name!r}) lists ids list_records does not: {unindexed[:3]!r}",
    )
    listed = [(sequence_of[checkpoint_id], checkpoint_id) for checkpoint_id in ids]
    ensure(
        listed == sorted(listed),
        f"list_checkpoint_ids({workflow_name!r}) after the race is not in sequence order "
        f"(sequence, id): {listed[:8]!r}",
    )


# ---------------------------------------------------------------------- cancellation

CANCEL_AFTER_YIELDS = 24
"""Loop turns a call is given before it is cancelled: 0 (cancelled before it starts) to this."""
CANCEL_AFTER_SECONDS = (0.0001, 0.0003, 0.001, 0.003, 0.01)
"""And these delays, to land inside waits for a server or a thread."""
_FOLLOW_UP_SECONDS = 10.0


async def _cancelled(call: Awaitable[Any], yields: int, delay: float) -> tuple[bool, Any]:
    """Run ``call`` as a task, cancel it after ``yields`` loop turns and then ``delay`` seconds;
    (True, None) if the cancellation took, else (False, its result). Other errors propagate."""
    task = asyncio.ensure_future(call)
    for _ in range(yields):
        await asyncio.sleep(0)
    if delay:
        await asyncio.sleep(delay)
    requested = task.cancel()
    try:
        result = await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise  # this clause itself is being cancelled
        return True, None
    # cancel() returned True: the call had not finished, so it must end cancelled. One that goes on
    # to return (a retry layer taking CancelledError for a transient failure) makes a caller's
    # timeout or shutdown wait for it, and tells the caller it was cancelled when it was not.
    ensure(
        not requested,
        f"a call cancelled before it finished returned {result!r:.80} instead of raising CancelledError: "
        "the cancellation was swallowed",
    )
    return False, result


async def _followed_up(call: Awaitable[Any], what: str) -> Any:
    try:
        return await asyncio.wait_for(call, _FOLLOW_UP_SECONDS)
    except TimeoutError:
        fail(f"{what} did not return within {_FOLLOW_UP_SECONDS:g} s (a lock or a connection left held?)")
    except Exception as exc:
        fail(f"{what} raised {type(exc).__name__}: {exc} (a reply a cancelled call left unread?)")


@clause(
    "concurrency.cancelled_calls_leave_no_trace",
    "A save or read cancelled at any point ends cancelled, stores all or nothing and leaves the handle "
    "answering correctly, a save running beside it included.",
    timeout=_TIMEOUT * 2,
)
async def cancelled_calls_leave_no_trace(ctx: ClauseContext) -> None:
    storage = ctx.storage
    workflow_name = ctx.workflow_name("cancel")
    anchor = ctx.checkpoint(workflow_name, state={"anchor": True})
    await storage.save(anchor)
    attempted: dict[str, Any] = {anchor.checkpoint_id: anchor}
    completed = [anchor.checkpoint_id]
    points = [(yields, 0.0) for yields in range(CANCEL_AFTER_YIELDS + 1)]
    points += [(0, delay) for delay in CANCEL_AFTER_SECONDS]
    reads: dict[str, Callable[[], Awaitable[Any]]] = {
        "load": lambda: storage.load(anchor.checkpoint_id),
        "get_latest": lambda: storage.get_latest(workflow_name=workflow_name),
        "list_checkpoint_ids": lambda: storage.list_checkpoint_ids(workflow_name=workflow_name),
    }
    for index, (yields, delay) in enumerate(points):
        where = f"after {yields} loop turns" if not delay else f"after {delay * 1000:g} ms"
        checkpoint = ctx.checkpoint(workflow_name, iteration_count=index, state={"point": index})
        attempted[checkpoint.checkpoint_id] = checkpoint
        # A save started right after the cancelled one, on the same handle, is not cancelled: it
        # must return, whatever the cancellation did to what the two shared (a batch, a queue).
        bystander = ctx.checkpoint(workflow_name, iteration_count=index, state={"beside": index})
        attempted[bystander.checkpoint_id] = bystander
        cancelled = asyncio.ensure_future(storage.save(checkpoint))
        beside = asyncio.ensure_future(storage.save(bystander))
        was_cancelled, returned = await _cancelled(cancelled, yields, delay)
        if not was_cancelled:
            ensure_equal(returned, checkpoint.checkpoint_id, f"id returned by a save not cancelled {where}")
            completed.append(checkpoint.checkpoint_id)
        returned = await _followed_up(beside, f"a save started beside a save cancelled {where}")
        ensure_equal(
            returned, bystander.checkpoint_id, f"id returned by the save beside one cancelled {where}"
        )
        completed.append(bystander.checkpoint_id)
        for name, read in reads.items():
            read_cancelled, answer = await _cancelled(read(), yields, delay)
            if read_cancelled:
                continue
            if name == "load":
                problem = first_difference(anchor, answer)
                ensure(problem is None, f"{name} not cancelled {where} returned something else: {problem}")
            elif name == "get_latest":
                ensure(
                    getattr(answer, "checkpoint_id", None) in attempted,
                    f"{name} not cancelled {where} returned {answer!r}",
                )
        # The same handle must go on answering, and answering for the right call: a reply left
        # unread by a cancelled call must not become the next call's.
        what = f"after a save and reads cancelled {where}, "
        loaded = await _followed_up(storage.load(anchor.checkpoint_id), what + "load")
        problem = first_difference(anchor, loaded)
        ensure(problem is None, f"{what}load({anchor.checkpoint_id!r}) returned something else: {problem}")
        probe = ctx.checkpoint(workflow_name, iteration_count=index, state={"probe": index})
        attempted[probe.checkpoint_id] = probe
        returned = await _followed_up(storage.save(probe), what + "a save")
        ensure_equal(returned, probe.checkpoint_id, what + "the id a save returned")
        completed.append(probe.checkpoint_id)
        ids = await _followed_up(storage.list_checkpoint_ids(workflow_name=workflow_name), what + "listing")
        foreign = [i for i in ids if i not in attempted]
        ensure(not foreign, f"{what}list_checkpoint_ids lists ids never saved: {foreign[:3]}")
        missing = [i for i in completed if i not in ids]
        ensure(not missing, f"{what}list_checkpoint_ids lacks saves that returned: {missing[:3]}")
    # A cancelled save may still land (the request had left): give it a moment, then every listed
    # id must load whole and every unlisted cancelled one must be absent.
    await asyncio.sleep(0.2)
    ids = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    for checkpoint_id, checkpoint in attempted.items():
        try:
            loaded = await storage.load(checkpoint_id)
        except Exception as exc:
            ensure(is_not_found(exc), f"load({checkpoint_id!r}) after cancelled saves raised {exc!r}")
            ensure(
                checkpoint_id not in ids,
                f"{checkpoint_id!r} is listed but cannot be loaded: a cancelled save stored half of it",
            )
            continue
        problem = first_difference(checkpoint, loaded)
        ensure(problem is None, f"load({checkpoint_id!r}) after cancelled saves: {problem}")
        ensure(
            checkpoint_id in ids,
            f"{checkpoint_id!r} loads but is not listed: a cancelled save stored half of it",
        )
    latest = await storage.get_latest(workflow_name=workflow_name)
    ensure(
        latest is not None and latest.checkpoint_id == ids[-1],
        f"get_latest after cancelled saves is {getattr(latest, 'checkpoint_id', None)!r}, "
        f"not the last listed {ids[-1]!r}",
    )


@clause(
    "concurrency.cancelled_retry_keeps_stored",
    "A save of a checkpoint already stored (a retry) cancelled at any point leaves it stored, listed "
    "and latest.",
    timeout=_TIMEOUT * 2,
)
async def cancelled_retry_keeps_stored(ctx: ClauseContext) -> None:
    # A cancelled save stores all or nothing of itself: a layer that undoes a cancelled save by
    # deleting its id deletes the checkpoint a retried save found already stored.
    storage = ctx.storage
    workflow_name = ctx.workflow_name("cancel-resave")
    chain = await ctx.save_chain(workflow_name, 2)
    expected = [checkpoint.checkpoint_id for checkpoint in chain]
    points = [(yields, 0.0) for yields in range(CANCEL_AFTER_YIELDS + 1)]
    points += [(0, delay) for delay in CANCEL_AFTER_SECONDS]
    for yields, delay in points:
        where = f"after {yields} loop turns" if not delay else f"after {delay * 1000:g} ms"
        for checkpoint in chain:
            was_cancelled, returned = await _cancelled(storage.save(checkpoint), yields, delay)
            if not was_cancelled:
                ensure_equal(
                    returned, checkpoint.checkpoint_id, f"id returned by a re-save not cancelled {where}"
                )
        what = f"after re-saves of stored checkpoints cancelled {where}, "
        ids = await _followed_up(storage.list_checkpoint_ids(workflow_name=workflow_name), what + "listing")
        ensure_equal(list(ids), expected, what + "list_checkpoint_ids")
    for checkpoint in chain:
        await expect_loads(ctx, checkpoint, "after re-saves of it cancelled at every point")
    latest = await storage.get_latest(workflow_name=workflow_name)
    ensure_equal(
        getattr(latest, "checkpoint_id", None),
        expected[-1],
        "get_latest after cancelled re-saves of its chain",
    )


CANCEL_NESTED_AFTER_YIELDS = 12
"""Loop turns a save of a family is given before it is cancelled: 0 to this, then the delays."""
CANCEL_NESTED_AFTER_SECONDS = (0.0001, 0.001, 0.01)


@clause(
    "concurrency.cancelled_nested_saves_whole",
    "A save of a checkpoint with embedded ones cancelled at any point leaves them stored with it or "
    "not at all, and saving it again returns its id and stores each of them once.",
    requires=[Capability.NESTED],
    timeout=_TIMEOUT * 2,
)
async def cancelled_nested_saves_whole(ctx: ClauseContext) -> None:
    # A cancelled save is a request whose answer was lost: the runner saves again, and that save
    # must neither collide with embedded records the cancelled one left nor store them twice.
    storage = ctx.storage
    points = [(yields, 0.0) for yields in range(CANCEL_NESTED_AFTER_YIELDS + 1)]
    points += [(0, delay) for delay in CANCEL_NESTED_AFTER_SECONDS]
    for index, (yields, delay) in enumerate(points):
        where = f"after {yields} loop turns" if not delay else f"after {delay * 1000:g} ms"
        grandchild = embedded(ctx, f"cancel-{index}-l2", state={"leaf": index})
        child = embedded(ctx, f"cancel-{index}-l1", state={"inner": [grandchild]})
        parent = embedded(ctx, f"cancel-{index}", state=sub_workflow_state(child))
        was_cancelled, returned = await _cancelled(storage.save(parent), yields, delay)
        if not was_cancelled:
            ensure_equal(returned, parent.checkpoint_id, f"id returned by a save not cancelled {where}")
        # The container first: a cancelled save that lands late lands whole, so once the container
        # is found its embedded checkpoints must be too.
        if await _found(storage, parent.checkpoint_id, f"after a save cancelled {where}"):
            for checkpoint in (child, grandchild):
                await expect_loads(ctx, checkpoint, f"after a save cancelled {where} stored its container")
        again = f"saving {parent.checkpoint_id!r} again after a save cancelled {where}"
        ensure_equal(
            await _followed_up(storage.save(parent), again), parent.checkpoint_id, f"id returned by {again}"
        )
        for checkpoint in (parent, child, grandchild):
            await expect_loads(ctx, checkpoint, f"after {again}")
        for checkpoint in (child, grandchild):
            listed = await storage.list_checkpoint_ids(
                workflow_name=checkpoint.workflow_name, include_nested=True
            )
            ensure_equal(
                list(listed),
                [checkpoint.checkpoint_id],
                f"list_checkpoint_ids({checkpoint.workflow_name!r}, include_nested=True) after {again}",
            )


async def _found(storage: Any, checkpoint_id: str, when: str) -> bool:
    """Whether ``checkpoint_id`` loads; not found is False, any other answer fails the clause."""
    try:
        await asyncio.wait_for(storage.load(checkpoint_id), _FOLLOW_UP_SECONDS)
    except TimeoutError:
        fail(f"load({checkpoint_id!r}) {when} did not return within {_FOLLOW_UP_SECONDS:g} s")
    except Exception as exc:
        if is_not_found(exc):
            return False
        fail(f"load({checkpoint_id!r}) {when} raised {type(exc).__name__}: {exc}")
    return True
