"""scale: latest stays constant-cost as history grows, nothing is dropped to make room, and an
ancestry walk is one round trip.

Where the target counts its backend round trips (``StorageTarget.round_trips``), the clauses
count: ``get_latest`` (with and without a signature filter) and ``load`` must cost as many
round trips after 60 saves as after 3, and a walk as many at depth 30 as at depth 3. Counting
is exact, so a loaded machine cannot make it flaky.
Without a counter, latest falls back to timing: ``get_latest`` on a workflow of 2,000 checkpoints
and on one of 10, called back to back in rounds, and the median of the per-round ratios against a
generous bound, so load on a shared machine slows both sides of each round alike. Whether a clause
applies never depends on how fast the machine is: the same storage gets the same verdict every run.
A walk is not applicable without a counter (a property of the target, not of its speed): time cannot
tell one round trip of O(depth) work from depth round trips.

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

from storages.contract import Capability

from ..clause import clause, ensure, fail, not_applicable
from ..context import ClauseContext

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


_KEPT_WORKFLOWS, _KEPT_PER_WORKFLOW = 8, 300
"""History the keeping clause writes: 2,400 checkpoints, saved a round at a time (one save per
workflow per round, concurrently), so a store is filled in seconds even over a network."""
_KEPT_SAMPLE_EVERY = 25
"""Every so many of a workflow's checkpoints (and its first and last) are loaded back and compared."""


_SIGNATURE = "sig-" + "0" * 60
"""The graph signature ClauseContext.checkpoint gives every checkpoint."""


def _single_reads(
    ctx: ClauseContext, workflow_name: str, first_id: str
) -> dict[str, Callable[[], Awaitable[Any]]]:
    """The reads of one checkpoint whose cost must not grow with the history."""
    reads: dict[str, Callable[[], Awaitable[Any]]] = {
        "get_latest()": lambda: ctx.storage.get_latest(workflow_name=workflow_name),
        f"load({first_id!r})": lambda: ctx.storage.load(first_id),
    }
    if ctx.has(Capability.SIGNATURE_FILTER):
        reads["get_latest(graph_signature_hash=...)"] = lambda: ctx.storage.get_latest(
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
    "(uncounted: get_latest takes about the same time at 2,000 checkpoints as at 10).",
    timeout=180,
)
async def latest_is_constant_cost(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("latest-scale")
    if ctx.target.round_trips is not None:
        first = await _extend(ctx, workflow_name, 1, None)
        tip = await _extend(ctx, workflow_name, _FEW - 1, first)
        reads = _single_reads(ctx, workflow_name, first)
        few = {name: await _round_trips_of(ctx, read) for name, read in reads.items()}
        await _extend(ctx, workflow_name, _MANY - _FEW, tip)
        for name, read in reads.items():
            many = await _round_trips_of(ctx, read)
            ensure(
                many <= few[name],
                f"{name} took {many} round trips at {_MANY} checkpoints and {few[name]} at {_FEW}: it grows "
                "with the history (does it scan every checkpoint?)",
            )
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
    costs does not depend on their order, and a remote store fills in seconds."""
    for start in range(0, count, _FILL_BATCH):
        batch = [
            ctx.checkpoint(workflow_name, iteration_count=index)
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


@clause(
    "scale.walk_is_one_round_trip",
    f"walk_ancestry and walk_ancestry_ids cost the same round trips at depth {_DEEP} as at depth {_SHALLOW}.",
    requires=[Capability.ANCESTRY],
)
async def walk_is_one_round_trip(ctx: ClauseContext) -> None:
    if ctx.target.round_trips is None:
        not_applicable("the target counts no round trips (StorageTarget.round_trips), and time cannot tell")
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
    "scale.history_is_kept",
    f"{_KEPT_WORKFLOWS * _KEPT_PER_WORKFLOW:,} checkpoints over {_KEPT_WORKFLOWS} workflows all stay listed "
    "and loadable: none is dropped to make room.",
    timeout=180.0,
)
async def history_is_kept(ctx: ClauseContext) -> None:
    if ctx.has(Capability.TTL):
        not_applicable("the storage declares a time to live: old checkpoints are meant to go")
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
