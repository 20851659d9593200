"""scale: latest stays constant-cost as history grows, and an ancestry walk is one round trip.

Where the target counts its backend round trips (``StorageTarget.round_trips``), the clauses
count: ``get_latest`` must cost as many round trips after 60 saves as after 3, and a walk as
many at depth 40 as at depth 3. Counting is exact, so a loaded machine cannot make it flaky.
Without a counter, latest falls back to timing: the median of repeated ``get_latest`` calls at
2,000 checkpoints against 10, with a generous bound; a store too slow to fill to 2,000 in a
second or two is skipped rather than slowing the kit down. A walk is skipped without a counter:
time cannot tell one round trip of O(depth) work from depth round trips.
"""

from __future__ import annotations

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
_SLACK_SECONDS = 0.002
_FILL_BUDGET_SECONDS = 1.5
"""Projected time to fill 2,000 checkpoints beyond which the timing fallback is skipped."""


async def _round_trips_of(ctx: ClauseContext, call: Callable[[], Awaitable[Any]]) -> int:
    count = ctx.target.round_trips
    assert count is not None
    before = count(ctx.storage)
    await call()
    return count(ctx.storage) - before


async def _extend(ctx: ClauseContext, workflow_name: str, count: int, previous: str | None) -> str | None:
    for index in range(count):
        checkpoint = ctx.checkpoint(workflow_name, previous_checkpoint_id=previous, iteration_count=index)
        await ctx.storage.save(checkpoint)
        previous = checkpoint.checkpoint_id
    return previous


async def _median_latest(ctx: ClauseContext, workflow_name: str) -> float:
    timings = []
    for _ in range(_TIMED_CALLS):
        started = time.perf_counter()
        await ctx.storage.get_latest(workflow_name=workflow_name)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


@clause(
    "scale.latest_is_constant_cost",
    "get_latest costs the same round trips after 60 saves as after 3 (or, uncounted, about the same time "
    "at 2,000 checkpoints as at 10).",
    timeout=60,
)
async def latest_is_constant_cost(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("latest-scale")
    latest = lambda: ctx.storage.get_latest(workflow_name=workflow_name)  # noqa: E731
    if ctx.target.round_trips is not None:
        tip = await _extend(ctx, workflow_name, _FEW, None)
        few = await _round_trips_of(ctx, latest)
        await _extend(ctx, workflow_name, _MANY - _FEW, tip)
        many = await _round_trips_of(ctx, latest)
        ensure(
            many <= few,
            f"get_latest() took {many} round trips at {_MANY} checkpoints and {few} at {_FEW}: it grows "
            "with the history (does it scan every checkpoint?)",
        )
        return
    started = time.perf_counter()
    tip = await _extend(ctx, workflow_name, _SMALL_HISTORY, None)
    projected = (time.perf_counter() - started) / _SMALL_HISTORY * _LARGE_HISTORY
    if projected > _FILL_BUDGET_SECONDS:
        not_applicable(
            f"the target counts no round trips and filling {_LARGE_HISTORY} checkpoints would take about "
            f"{projected:.0f} s; give the target a round_trips counter"
        )
    small = await _median_latest(ctx, workflow_name)
    await _extend(ctx, workflow_name, _LARGE_HISTORY - _SMALL_HISTORY, tip)
    large = await _median_latest(ctx, workflow_name)
    bound = small * _SLOWDOWN_BOUND + _SLACK_SECONDS
    ensure(
        large <= bound,
        f"get_latest() took a median {large * 1000:.2f} ms at {_LARGE_HISTORY} checkpoints and "
        f"{small * 1000:.2f} ms at {_SMALL_HISTORY} (bound {bound * 1000:.2f} ms): it grows with the history",
    )


@clause(
    "scale.walk_is_one_round_trip",
    f"walk_ancestry and walk_ancestry_ids cost the same round trips at depth {_DEEP} as at depth {_SHALLOW}.",
    requires=[Capability.ANCESTRY],
)
async def walk_is_one_round_trip(ctx: ClauseContext) -> None:
    if ctx.target.round_trips is None:
        not_applicable("the target counts no round trips (StorageTarget.round_trips), and time cannot tell")
    workflow_name = ctx.workflow_name("walk-scale")
    tip = await _extend(ctx, workflow_name, _SHALLOW, None)
    assert tip is not None
    shallow_tip = tip
    deep_tip = await _extend(ctx, workflow_name, _DEEP - _SHALLOW, tip)
    assert deep_tip is not None
    for operation in ("walk_ancestry_ids", "walk_ancestry"):
        walk = getattr(ctx.storage, operation)
        shallow = await _round_trips_of(ctx, functools.partial(walk, shallow_tip))
        deep = await _round_trips_of(ctx, functools.partial(walk, deep_tip))
        if deep > shallow:
            fail(
                f"{operation}() took {deep} round trips at depth {_DEEP} and {shallow} at depth {_SHALLOW}: "
                "it fetches the chain a hop at a time"
            )
