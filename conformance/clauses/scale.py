"""scale: latest stays constant-cost as history grows, nothing is dropped to make room, and an
ancestry walk is one round trip.

Where the target counts its backend round trips (``StorageTarget.round_trips``), the clauses
count: ``get_latest`` (with and without a signature filter) and ``load`` must cost as many
round trips after 60 saves as after 3, and a walk as many at depth 30 as at depth 3. Counting
is exact, so a loaded machine cannot make it flaky.
Without a counter, where the storage is the engine over a :class:`~storages.backend.Backend`
(every storage built on the author API), the kit counts another way: it opens a handle over a new
backend of the store (``storage.over(storage.backend.new_handle())``) whose primitives count their
calls, the backend's calls to its own primitives included, and the records each hands back, and
compares counts with a margin of 20x: ``get_latest`` and ``load`` may make at most twice the calls,
handing back at most twice the records, at 60 checkpoints as at 3 (one that reads every checkpoint
makes 20 times as many), a walk at most twice the calls at depth 80 as at depth 2 (a walk a hop at
a time makes 40 times as many), and a walk into a cycle at most twice the calls with ``max_depth``
10,000 as with 10 (one that spins the cycle to the limit makes 1,000 times as many).
Other storages' latest falls back to timing: ``get_latest`` on a workflow of 2,000 checkpoints and
on one of 10, called back to back in rounds, and the median of the per-round ratios against a
generous bound, so load on a shared machine slows both sides of each round alike. Whether a clause
applies never depends on how fast the machine is: the same storage gets the same verdict every run.
Other storages' walks are not applicable without a counter (a property of the target, not of its
speed): time cannot tell one round trip of O(depth) work from depth round trips.

``history_is_kept`` saves a few thousand checkpoints over several workflows and then finds every
one of them listed and a sample of them loadable: a store that keeps a bounded number (an LRU
cache, a capped list, a server that evicts) loses the oldest, silently, and is caught. Its size
is beyond the round capacities such stores are configured with (1,000, 1,024, 2,000). Every store
is checked, however slow: a round's saves go together, so a remote store fills in seconds.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from storages.backend import CAPABILITY_PRIMITIVES, CORE_PRIMITIVES, Backend, StoredBody, WalkRecords
from storages.contract import Capability
from storages.engine import CheckpointStore

from ..bounded import unbound
from ..clause import clause, ensure, fail, not_applicable
from ..context import ClauseContext, unstored_parent

_FEW, _MANY = 3, 60
"""History sizes the round-trip counts compare."""
_SHALLOW, _DEEP = 3, 30
"""Walk depths the round-trip counts compare."""
_SMALL_HISTORY, _LARGE_HISTORY = 10, 2000
"""History sizes the timing fallback compares."""
_TIMED_CALLS = 25
_SLOWDOWN_BOUND = 8.0
"""get_latest at 2,000 checkpoints may be this many times slower than at 10 (plus the slack)."""
_SLACK_SECONDS = 0.0005
"""Added to both times of a round, so jitter on sub-millisecond calls cannot make a ratio. Half
a millisecond: decoding 2,000 small bodies (about 20 ms) must still stand out against a latest
that takes a tenth of a millisecond, which 2 ms of slack hid."""
_FILL_BATCH = 50
"""Saves sent together while filling the large history of the timing fallback."""


_CALLS_BOUND = 2
"""How many times the backend calls (and the records they hand back) of the smaller case the
larger may make: 20 times below what a walk a hop at a time (40x at depth 80), one spinning a
cycle to the limit (1,000x) or a latest reading every checkpoint (20x at 60 checkpoints) makes."""


_KEPT_WORKFLOWS, _KEPT_PER_WORKFLOW = 8, 300
"""History the keeping clause writes: 2,400 checkpoints, saved a round at a time (one save per
workflow per round, concurrently), so a store is filled in seconds even over a network."""
_KEPT_SAMPLE_EVERY = 25
"""Every so many of a workflow's checkpoints (and its first and last) are loaded back and compared."""


_SIGNATURE = "sig-" + "0" * 60
"""The graph signature ClauseContext.checkpoint gives every checkpoint."""


def _single_reads(
    ctx: ClauseContext, workflow_name: str, first_id: str
) -> dict[str, Callable[[Any], Awaitable[Any]]]:
    """The reads of one checkpoint whose cost must not grow with the history, on whichever handle
    they are given."""
    reads: dict[str, Callable[[Any], Awaitable[Any]]] = {
        "get_latest()": lambda storage: storage.get_latest(workflow_name=workflow_name),
        f"load({first_id!r})": lambda storage: storage.load(first_id),
    }
    if ctx.has(Capability.SIGNATURE_FILTER):
        reads["get_latest(graph_signature_hash=...)"] = lambda storage: storage.get_latest(
            workflow_name=workflow_name, graph_signature_hash=_SIGNATURE
        )
    return reads


async def _round_trips_of(ctx: ClauseContext, call: Callable[[], Awaitable[Any]]) -> int:
    count = ctx.target.round_trips
    assert count is not None
    before = count(ctx.storage)
    await call()
    return count(ctx.storage) - before


async def _extend(ctx: ClauseContext, workflow_name: str, count: int, previous: str | None) -> str:
    assert count > 0
    for index in range(count):
        checkpoint = ctx.checkpoint(workflow_name, previous_checkpoint_id=previous, iteration_count=index)
        await ctx.storage.save(checkpoint)
        previous = checkpoint.checkpoint_id
    assert previous is not None
    return previous


@clause(
    "scale.latest_is_constant_cost",
    "get_latest (filtered by signature too) and load cost the same round trips after 60 saves as after 3 "
    f"(uncounted, on the engine: at most {_CALLS_BOUND}x the backend calls and the records they hand back; "
    "elsewhere: get_latest takes about the same time at 2,000 checkpoints as at 10).",
    timeout=180,
)
async def latest_is_constant_cost(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("latest-scale")
    if ctx.target.round_trips is not None:
        first = await _extend(ctx, workflow_name, 1, None)
        tip = await _extend(ctx, workflow_name, _FEW - 1, first)
        reads = _single_reads(ctx, workflow_name, first)
        few = {}
        for name, read in reads.items():
            few[name] = await _round_trips_of(ctx, functools.partial(read, ctx.storage))
        await _extend(ctx, workflow_name, _MANY - _FEW, tip)
        for name, read in reads.items():
            many = await _round_trips_of(ctx, functools.partial(read, ctx.storage))
            ensure(
                many <= few[name],
                f"{name} took {many} round trips at {_MANY} checkpoints and {few[name]} at {_FEW}: it grows "
                "with the history (does it scan every checkpoint?)",
            )
        return
    counter = _counted_handle(ctx)
    if counter is not None:
        await _counted_reads(ctx, counter)
        return
    small_name = ctx.workflow_name("latest-small")
    await _extend(ctx, small_name, _SMALL_HISTORY, None)
    await _fill(ctx, workflow_name, _LARGE_HISTORY)
    ratio = await _interleaved_ratio(ctx, workflow_name, small_name)
    ensure(
        ratio <= _SLOWDOWN_BOUND,
        f"get_latest() took a median {ratio:.1f} times as long at {_LARGE_HISTORY} checkpoints as at "
        f"{_SMALL_HISTORY} (bound {_SLOWDOWN_BOUND:g}, calls interleaved): it grows with the history",
    )


async def _fill(ctx: ClauseContext, workflow_name: str, count: int) -> None:
    """``count`` checkpoints in ``workflow_name``, saved a batch at a time concurrently: what latest
    costs does not depend on their order, and a remote store fills in seconds. None rivals another
    (roots committed one after another would: the latest would read 64 of them, a cost of rivals,
    not of the history)."""
    for start in range(0, count, _FILL_BATCH):
        batch = [
            ctx.checkpoint(
                workflow_name,
                previous_checkpoint_id=unstored_parent(f"{workflow_name}-{index}"),
                iteration_count=index,
            )
            for index in range(start, min(start + _FILL_BATCH, count))
        ]
        await asyncio.gather(*(ctx.storage.save(checkpoint) for checkpoint in batch))


async def _interleaved_ratio(ctx: ClauseContext, large: str, small: str) -> float:
    """The median, over rounds, of get_latest's time on ``large`` over its time on ``small``, the two
    calls back to back in each round (alternating which goes first): load on a shared machine
    slows both alike and cancels out of each round's ratio."""
    ratios = []
    for round_index in range(_TIMED_CALLS):
        order = (large, small) if round_index % 2 == 0 else (small, large)
        taken: dict[str, float] = {}
        for name in order:
            started = time.perf_counter()
            await ctx.storage.get_latest(workflow_name=name)
            taken[name] = time.perf_counter() - started
        ratios.append((taken[large] + _SLACK_SECONDS) / (taken[small] + _SLACK_SECONDS))
    return statistics.median(ratios)


_COUNTED_SHALLOW, _COUNTED_DEEP = 2, 80
"""Walk depths the counted calls compare: a walk a hop at a time makes 40 times the calls."""
_CYCLE_DEPTHS = (10, 10_000)
"""max_depth of the two walks into one cycle the counted calls compare."""
_PRIMITIVES = frozenset(
    {*CORE_PRIMITIVES, "records_after", *(name for names in CAPABILITY_PRIMITIVES.values() for name in names)}
)


class _CountedHandle:
    """A handle of the clause's storage over a new backend of its store whose primitives count
    their calls (the backend's own calls to them included: the counters are on the instance)."""

    def __init__(self, storage: Any, backend: Backend) -> None:
        self.storage = storage
        self.calls = 0
        self.records = 0
        """Records the primitives handed back (bodies, ids, index entries, rivals)."""
        for name in _PRIMITIVES:
            primitive = getattr(backend, name, None)
            if primitive is not None:
                setattr(backend, name, self._counting(primitive))

    def _counting(self, primitive: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(primitive)
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            result = await primitive(*args, **kwargs)
            self.records += _records_in(result)
            return result

        return counted

    async def calls_of(self, call: Callable[[Any], Awaitable[Any]]) -> int:
        before = self.calls
        await call(self.storage)
        return self.calls - before

    async def cost_of(self, call: Callable[[Any], Awaitable[Any]]) -> tuple[int, int]:
        """The backend calls ``call`` made on this handle, and the records they handed back."""
        calls, records = self.calls, self.records
        await call(self.storage)
        return self.calls - calls, self.records - records


def _records_in(result: object) -> int:
    """How many records a primitive's answer holds: one body (and its rivals and nested bodies),
    or the entries of a listing, a mapping or a walk."""
    if isinstance(result, StoredBody):
        return 1 + len(result.rivals) + len(result.nested or ())
    if isinstance(result, WalkRecords):
        return len(result.links)
    if isinstance(result, (list, tuple, dict, set, frozenset)):
        return len(result)
    return 0


async def _counted_reads(ctx: ClauseContext, counter: _CountedHandle) -> None:
    workflow_name = ctx.workflow_name("latest-calls")
    first = await _extend(ctx, workflow_name, 1, None)
    tip = await _extend(ctx, workflow_name, _FEW - 1, first)
    reads = _single_reads(ctx, workflow_name, first)
    few = {name: await counter.cost_of(read) for name, read in reads.items()}
    await _extend(ctx, workflow_name, _MANY - _FEW, tip)
    for name, read in reads.items():
        calls, records = await counter.cost_of(read)
        few_calls, few_records = few[name]
        ensure(
            calls <= _CALLS_BOUND * max(few_calls, 1) and records <= _CALLS_BOUND * max(few_records, 1),
            f"{name} made {calls} backend calls handing back {records} records at {_MANY} checkpoints, and "
            f"{few_calls} calls with {few_records} records at {_FEW} (counted, bound {_CALLS_BOUND}x): it "
            "grows with the history (does it read every checkpoint?)",
        )


def _counted_handle(ctx: ClauseContext) -> _CountedHandle | None:
    """A counted handle on the clause's store, or None where the storage is not the engine over a
    Backend whose instances take attributes."""
    storage = unbound(ctx.storage)
    if not isinstance(storage, CheckpointStore) or not isinstance(storage.backend, Backend):
        return None
    backend = storage.backend.new_handle()
    try:
        counter = _CountedHandle(None, backend)
    except (AttributeError, TypeError):  # __slots__, a frozen instance
        return None
    counter.storage = ctx.track_handle(ctx.storage.over(backend))
    return counter


def _walk(operation: str, start: str, **options: Any) -> Callable[[Any], Awaitable[Any]]:
    """A walk from ``start`` on whichever handle it is given."""

    def walk(storage: Any) -> Awaitable[Any]:
        result: Awaitable[Any] = getattr(storage, operation)(start, **options)
        return result

    return walk


async def _counted_walks(ctx: ClauseContext, counter: _CountedHandle) -> None:
    workflow_name = ctx.workflow_name("walk-calls")
    shallow_tip = await _extend(ctx, workflow_name, _COUNTED_SHALLOW, None)
    deep_tip = await _extend(ctx, workflow_name, _COUNTED_DEEP - _COUNTED_SHALLOW, shallow_tip)
    for operation in ("walk_ancestry_ids", "walk_ancestry"):
        shallow = await counter.calls_of(_walk(operation, shallow_tip))
        deep = await counter.calls_of(_walk(operation, deep_tip))
        if deep > _CALLS_BOUND * max(shallow, 1):
            fail(
                f"{operation}() made {deep} backend calls at depth {_COUNTED_DEEP} and {shallow} at depth "
                f"{_COUNTED_SHALLOW} (counted, bound {_CALLS_BOUND}x): it fetches the chain a hop at a time"
            )


@clause(
    "scale.walk_is_one_round_trip",
    f"walk_ancestry and walk_ancestry_ids cost the same round trips at depth {_DEEP} as at depth {_SHALLOW} "
    f"(uncounted, on the engine: at most {_CALLS_BOUND}x the backend calls at depth {_COUNTED_DEEP}).",
    requires=[Capability.ANCESTRY],
)
async def walk_is_one_round_trip(ctx: ClauseContext) -> None:
    if ctx.target.round_trips is None:
        counter = _counted_handle(ctx)
        if counter is None:
            not_applicable(
                "the target counts no round trips (StorageTarget.round_trips), the storage is not the "
                "engine over a Backend whose calls the kit can count, and time cannot tell"
            )
        await _counted_walks(ctx, counter)
        return
    workflow_name = ctx.workflow_name("walk-scale")
    shallow_tip = await _extend(ctx, workflow_name, _SHALLOW, None)
    deep_tip = await _extend(ctx, workflow_name, _DEEP - _SHALLOW, shallow_tip)
    for operation in ("walk_ancestry_ids", "walk_ancestry"):
        walk = getattr(ctx.storage, operation)
        shallow = await _round_trips_of(ctx, functools.partial(walk, shallow_tip))
        deep = await _round_trips_of(ctx, functools.partial(walk, deep_tip))
        if deep > shallow:
            fail(
                f"{operation}() took {deep} round trips at depth {_DEEP} and {shallow} at depth {_SHALLOW}: "
                "it fetches the chain a hop at a time"
            )


@clause(
    "scale.cycle_walk_stops_at_the_cycle",
    f"A walk into a cycle costs at most {_CALLS_BOUND}x the round trips (or backend calls) with max_depth "
    f"{_CYCLE_DEPTHS[1]:,} as with {_CYCLE_DEPTHS[0]}: it stops at the cycle, not at the limit.",
    requires=[Capability.ANCESTRY],
)
async def cycle_walk_stops_at_the_cycle(ctx: ClauseContext) -> None:
    count: Callable[[Callable[[Any], Awaitable[Any]]], Awaitable[int]]
    if ctx.target.round_trips is not None:
        storage = ctx.storage

        async def count(call: Callable[[Any], Awaitable[Any]]) -> int:
            return await _round_trips_of(ctx, lambda: call(storage))

        what = "round trips"
    else:
        counter = _counted_handle(ctx)
        if counter is None:
            not_applicable(
                "the target counts no round trips (StorageTarget.round_trips), the storage is not the "
                "engine over a Backend whose calls the kit can count, and time cannot tell"
            )
        count, what = counter.calls_of, "backend calls"
    workflow_name = ctx.workflow_name("cycle-calls")
    # A's previous is B before B exists; B's previous is A: a loop of two, entered from a tail.
    a = ctx.checkpoint(
        workflow_name, checkpoint_id=f"{workflow_name}-a", previous_checkpoint_id=f"{workflow_name}-b"
    )
    b = ctx.checkpoint(
        workflow_name, checkpoint_id=f"{workflow_name}-b", previous_checkpoint_id=a.checkpoint_id
    )
    tail = ctx.checkpoint(workflow_name, previous_checkpoint_id=b.checkpoint_id)
    for checkpoint in (a, b, tail):
        await ctx.storage.save(checkpoint)
    small, large = _CYCLE_DEPTHS
    for operation in ("walk_ancestry_ids", "walk_ancestry"):
        near = await count(_walk(operation, tail.checkpoint_id, max_depth=small))
        far = await count(_walk(operation, tail.checkpoint_id, max_depth=large))
        if far > _CALLS_BOUND * max(near, 1):
            fail(
                f"{operation}() into a cycle of two made {far} {what} with max_depth={large:,} and {near} "
                f"with max_depth={small} (bound {_CALLS_BOUND}x): it spins the cycle to the limit instead of "
                "stopping where an id repeats"
            )


@clause(
    "scale.history_is_kept",
    f"{_KEPT_WORKFLOWS * _KEPT_PER_WORKFLOW:,} checkpoints over {_KEPT_WORKFLOWS} workflows all stay listed "
    "and loadable: none is dropped to make room; a prune's tombstones from before them stay too, seen "
    "from a handle opened after them, which agrees on the order of what is saved next.",
    timeout=180.0,
)
async def history_is_kept(ctx: ClauseContext) -> None:
    if ctx.has(Capability.TTL):
        not_applicable("the storage declares a time to live: old checkpoints are meant to go")
    pruned_name, pruned = await _pruned_before(ctx)
    names = [ctx.workflow_name(f"kept{index}") for index in range(_KEPT_WORKFLOWS)]
    saved: dict[str, list[Any]] = {name: [] for name in names}
    for index in range(_KEPT_PER_WORKFLOW):
        batch = [
            ctx.checkpoint(
                name,
                previous_checkpoint_id=saved[name][-1].checkpoint_id if saved[name] else None,
                iteration_count=index,
                state={"round": index},
            )
            for name in names
        ]
        await asyncio.gather(*(ctx.storage.save(checkpoint) for checkpoint in batch))
        for checkpoint in batch:
            saved[checkpoint.workflow_name].append(checkpoint)
    total = _KEPT_WORKFLOWS * _KEPT_PER_WORKFLOW
    for name, checkpoints in saved.items():
        listed = set(await ctx.storage.list_checkpoint_ids(workflow_name=name))
        missing = [c.checkpoint_id for c in checkpoints if c.checkpoint_id not in listed]
        ensure(
            not missing,
            f"after {total:,} saves, list_checkpoint_ids({name!r}) lacks {len(missing)} of its "
            f"{len(checkpoints)} checkpoints, the oldest first: {missing[:3]} (a bounded store dropping "
            "old checkpoints to make room?)",
        )
        sample = checkpoints[::_KEPT_SAMPLE_EVERY] + checkpoints[-1:]
        for checkpoint in sample:
            try:
                loaded = await ctx.storage.load(checkpoint.checkpoint_id)
            except Exception as exc:
                fail(
                    f"after {total:,} saves, load({checkpoint.checkpoint_id!r}) raised "
                    f"{type(exc).__name__}: {exc}"
                )
            ensure(
                loaded == checkpoint,
                f"after {total:,} saves, load({checkpoint.checkpoint_id!r}) returned another checkpoint",
            )
    if not ctx.has(Capability.SHARED):
        return  # another handle would be another store
    if pruned:
        # A store that compacts its history (snapshots, logs) keeps what the compaction covers.
        later = await ctx.other_handle()
        tombstones = sorted(await later.list_tombstones(workflow_name=pruned_name))
        ensure(
            tombstones == sorted(pruned),
            f"after {total:,} saves, list_tombstones({pruned_name!r}) on a handle opened after them returned "
            f"{tombstones!r}; the prune before them tombstoned {sorted(pruned)!r}",
        )
    await _order_after_history(ctx, total)


async def _order_after_history(ctx: ClauseContext, total: int) -> None:
    """After the history, a handle opened then and the one that wrote it agree on the order of
    what comes next: a checkpoint deleted and saved again lists before one saved after it."""
    later = await ctx.other_handle()
    name = ctx.workflow_name("after-history")
    await later.list_checkpoint_ids(workflow_name=name)
    again, after = ctx.checkpoint(name, iteration_count=0), ctx.checkpoint(name, iteration_count=1)
    await ctx.storage.save(again)
    await ctx.storage.delete(again.checkpoint_id)
    await ctx.storage.save(again)
    await ctx.storage.save(after)
    expected = [again.checkpoint_id, after.checkpoint_id]
    for label, handle in (("a handle opened after them", later), ("the handle that saved them", ctx.storage)):
        listed = await handle.list_checkpoint_ids(workflow_name=name)
        ensure(
            listed == expected,
            f"after {total:,} saves, list_checkpoint_ids({name!r}) on {label} returned {listed!r}, "
            f"expected {expected!r} ({again.checkpoint_id!r} deleted and saved again, then "
            f"{after.checkpoint_id!r} saved)",
        )


async def _pruned_before(ctx: ClauseContext) -> tuple[str, list[str]]:
    """A workflow pruned before the history: its name and the ids its prune tombstoned (none
    where the storage cannot prune or list tombstones)."""
    name = ctx.workflow_name("pruned-before")
    if not (ctx.has(Capability.PRUNE) and ctx.has(Capability.INSPECT)):
        return name, []
    chain = await ctx.save_chain(name, 3)
    await ctx.storage.prune(workflow_name=name, keep_last=1)
    return name, [c.checkpoint_id for c in chain[:2]]
