"""expiry: a storage that declares ``ttl`` forgets each checkpoint entirely after its time to live.

The time to live is the storage's own ``ttl`` (seconds, or a timedelta). The kit waits for it, so
it checks expiry only when the ttl is short (at most a few seconds): the family runs on the
target's ``expiry_factory`` where it gives one (``--expiry-url 'redis://host/0?prefix=kit-ttl&ttl=1'``),
a store whose records live a second beside the one the other clauses use. Expired means gone from
every read: load, latest, listings, nested records, walks.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from storages.contract import Capability

from ..clause import clause, ensure, fail, not_applicable
from ..context import ClauseContext
from ._maf import is_not_found
from .nested import sub_workflow_state

_LONGEST_WAIT = 5.0
"""The longest ttl, in seconds, the kit waits out."""
_EARLY_CHECK = 0.3
"""Fraction of the ttl after which everything must still be there."""
_GRACE = 2.0
"""Seconds past the ttl a backend may take to purge (Redis expires lazily and in sweeps)."""


def _ttl_seconds(ctx: ClauseContext) -> float:
    value = getattr(ctx.storage, "ttl", None)
    if value is None:
        not_applicable("the storage declares 'ttl' but has no time to live configured")
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
    if seconds > _LONGEST_WAIT:
        not_applicable(
            f"the storage's ttl is {seconds:g} s and the kit waits at most {_LONGEST_WAIT:g} s; give the "
            "target a store of the same backend with a short ttl (e.g. ttl=1) as expiry_factory "
            "(--expiry-url), where this family runs"
        )
    return seconds


async def _present(storage: Any, checkpoint_id: str) -> bool:
    try:
        await storage.load(checkpoint_id)
    except Exception as exc:
        if is_not_found(exc):
            return False
        fail(f"load({checkpoint_id!r}) raised {type(exc).__name__}: {exc}")
    return True


async def _leftovers(ctx: ClauseContext, workflow_names: list[str], ids: list[str]) -> list[str]:
    """What a read still shows of checkpoints that should have expired."""
    found = [f"load({i!r})" for i in ids if await _present(ctx.storage, i)]
    for workflow_name in workflow_names:
        for what, read in _workflow_reads(ctx):
            if await read(ctx.storage, workflow_name, ids):
                found.append(f"{what} for {workflow_name!r}")
    return found


_Read = Callable[[Any, str, list[str]], Awaitable[bool]]
"""A read of (storage, workflow name, the ids saved under it) answering whether it still shows
any of them."""


def _workflow_reads(ctx: ClauseContext) -> list[tuple[str, _Read]]:
    """The reads that answer for a whole workflow."""
    reads: list[tuple[str, _Read]] = [
        ("get_latest()", _latest_shows),
        ("list_checkpoint_ids()", _ids_show),
        ("list_checkpoints()", _listing_shows),
    ]
    if ctx.has(Capability.LIST_WORKFLOWS):
        reads.append(("list_workflows()", _workflows_show))
    return reads


_LATE_CHECK = 0.85
"""Fraction of the ttl at which everything must still be there, a second time: a deadline cut to
whole seconds (an integer expiry time) has passed by then."""
_TOGETHER = 0.5
"""Fraction of the ttl within which checkpoints saved together are gone together."""


async def _gone_from(read: Callable[[], Awaitable[bool]], deadline: float) -> bool:
    """Polls one read until it shows nothing of the expired checkpoints or the deadline passes;
    False if it still shows them."""
    while True:
        if not await read():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)


async def _probes(ctx: ClauseContext) -> list[tuple[str, Callable[[], Awaitable[bool]]]]:
    """One store per read (from the target's factory), each holding a chain of its own that the
    read is the first call to meet after it expired: a storage that purges as a side effect of
    some reads cannot let another read's purge hide a read that shows expired checkpoints.
    Each read answers True while it still shows them."""
    reads = _workflow_reads(ctx)
    if ctx.has(Capability.NESTED):
        reads.append(("load() of an embedded checkpoint", _embedded_loads))
    if ctx.has(Capability.ANCESTRY):
        reads.append(("walk_ancestry_ids()", _walk_shows))
    if ctx.has(Capability.INSPECT):
        reads.append(("checkpoint_info()", _info_shows))
    probes: list[tuple[str, Callable[[], Awaitable[bool]]]] = []
    for what, read in reads:
        storage = await ctx.factory_handle()
        workflow_name = ctx.workflow_name("expiring-probe")
        ids: list[str] = []
        previous: str | None = None
        for index in range(2):
            checkpoint = ctx.checkpoint(workflow_name, previous_checkpoint_id=previous, iteration_count=index)
            await storage.save(checkpoint)
            previous = checkpoint.checkpoint_id
            ids.append(previous)
        if read is _embedded_loads:  # elsewhere a plain chain: reading a parent reads its children
            child_name = ctx.workflow_name("expiring-probe-child")
            child = ctx.checkpoint(child_name, checkpoint_id=f"embedded-{child_name}")
            parent = ctx.checkpoint(
                workflow_name, previous_checkpoint_id=previous, state=sub_workflow_state(child)
            )
            await storage.save(parent)
            ids += [parent.checkpoint_id, child.checkpoint_id]
        probes.append((what, partial(read, storage, workflow_name, ids)))
    return probes


async def _latest_shows(storage: Any, workflow_name: str, ids: list[str]) -> bool:
    return await storage.get_latest(workflow_name=workflow_name) is not None


async def _ids_show(storage: Any, workflow_name: str, ids: list[str]) -> bool:
    return bool(await storage.list_checkpoint_ids(workflow_name=workflow_name))


async def _listing_shows(storage: Any, workflow_name: str, ids: list[str]) -> bool:
    return bool(await storage.list_checkpoints(workflow_name=workflow_name))


async def _workflows_show(storage: Any, workflow_name: str, ids: list[str]) -> bool:
    return workflow_name in await storage.list_workflows()


async def _embedded_loads(storage: Any, workflow_name: str, ids: list[str]) -> bool:
    return await _present(storage, ids[-1])


async def _walk_shows(storage: Any, workflow_name: str, ids: list[str]) -> bool:
    try:
        walk = await storage.walk_ancestry_ids(ids[1])
    except Exception as exc:
        if is_not_found(exc):
            return False
        fail(f"walk_ancestry_ids({ids[1]!r}) raised {type(exc).__name__}: {exc}")
    return bool(walk.items)


async def _info_shows(storage: Any, workflow_name: str, ids: list[str]) -> bool:
    return await storage.checkpoint_info(ids[0]) is not None


async def _past_the_second() -> None:
    """Starts the saves at least a fifth of a second past a whole second of the clock, so that a
    deadline cut to whole seconds falls before the late check."""
    fraction = time.time() % 1.0
    if fraction < 0.2:
        await asyncio.sleep(0.2 - fraction)


@clause(
    "expiry.checkpoints_expire_after_ttl",
    "With a short ttl, checkpoints (nested ones, ones saved through another handle or behind a fence) "
    "are all there until their ttl (a re-save renews none), gone from every read soon after it (each "
    "read the first call to meet them expired), together, and an expired id can be saved afresh.",
    requires=[Capability.TTL],
    timeout=3 * _LONGEST_WAIT + 2 * _GRACE,
)
async def checkpoints_expire_after_ttl(ctx: ClauseContext) -> None:
    ttl = _ttl_seconds(ctx)
    workflow_name = ctx.workflow_name("expiring")
    await _past_the_second()
    first_saved = time.monotonic()
    chain = await ctx.save_chain(workflow_name, 2)
    ids = [c.checkpoint_id for c in chain]
    if ctx.has(Capability.NESTED):
        child_name = ctx.workflow_name("expiring-child")
        child = ctx.checkpoint(child_name, checkpoint_id=f"embedded-{child_name}")
        parent = ctx.checkpoint(
            workflow_name, previous_checkpoint_id=ids[-1], state=sub_workflow_state(child)
        )
        await ctx.storage.save(parent)
        ids += [parent.checkpoint_id, child.checkpoint_id]
    # What another handle saves, and what a fenced save stores, expires the same way.
    other_name = ctx.workflow_name("expiring-other")
    other = await ctx.other_handle()
    through_other = ctx.checkpoint(other_name)
    await other.save(through_other)
    ids.append(through_other.checkpoint_id)
    if ctx.has(Capability.FENCING):
        fenced = ctx.checkpoint(other_name, previous_checkpoint_id=through_other.checkpoint_id)
        await ctx.storage.save(fenced, expected_latest_id=through_other.checkpoint_id)
        ids.append(fenced.checkpoint_id)
    saved = time.monotonic()
    probes = await _probes(ctx)
    probes_saved = time.monotonic()
    renewed_in_time = False
    for check in (_EARLY_CHECK, _LATE_CHECK):
        await asyncio.sleep(max(0.0, first_saved + ttl * check - time.monotonic()))
        if check == _LATE_CHECK:
            await ctx.storage.save(chain[0])  # saved again, unchanged, late in its ttl
            # Only a re-save that returned within the ttl met the checkpoint still stored.
            renewed_in_time = time.monotonic() - first_saved < ttl
        missing = [i for i in ids if not await _present(ctx.storage, i)]
        age = time.monotonic() - first_saved
        if missing and age < ttl:
            fail(
                f"{len(missing)} of {len(ids)} checkpoints were gone {age:.2f} s after their save, before "
                f"their ttl of {ttl:g} s (is the ttl read in the wrong unit, or cut to whole seconds?)"
            )
    deadline = saved + ttl + _GRACE
    await asyncio.sleep(max(0.0, saved + ttl - time.monotonic()))
    # The re-saved checkpoint was saved first: once the one saved right after it is gone, it must
    # be gone too, give or take a fraction of the ttl.
    second_gone: float | None = None
    while True:
        leftovers = await _leftovers(ctx, [workflow_name, other_name], ids)
        now = time.monotonic()
        if not leftovers or now > deadline:
            break
        if renewed_in_time and second_gone is None and f"load({ids[1]!r})" not in leftovers:
            second_gone = now
        if second_gone is not None and now > second_gone + ttl * _TOGETHER:
            break
        await asyncio.sleep(0.1)
    when = (
        f"{ttl * _TOGETHER:g} s after {ids[1]!r}, saved with them, expired"
        if second_gone is not None
        else f"{ttl + _GRACE:g} s after their save"
    )
    ensure(
        not leftovers,
        f"with a ttl of {ttl:g} s (the first checkpoint saved again, unchanged, {_LATE_CHECK:g} of the "
        f"way through it), {when}, these still show the checkpoints: {', '.join(leftovers)}",
    )
    late = [
        what
        for what, read in probes
        if not await _gone_from(read, max(probes_saved + ttl + _GRACE, time.monotonic()))
    ]
    ensure(
        not late,
        f"{ttl + _GRACE:g} s after saving with a ttl of {ttl:g} s, these still show expired checkpoints "
        f"when they are the first read of their store after the ttl: {', '.join(late)}",
    )
    # Nothing of an expired checkpoint may linger either: not its id, not its place in the order.
    again = chain[0]
    await ctx.storage.save(again)
    ensure(
        await _present(ctx.storage, again.checkpoint_id),
        f"save({again.checkpoint_id!r}) after it expired returned, but the checkpoint does not load: an "
        "index of ids outlived the ttl and took the save for a repeat",
    )
    latest = await ctx.storage.get_latest(workflow_name=workflow_name)
    ensure(
        getattr(latest, "checkpoint_id", None) == again.checkpoint_id,
        f"get_latest() after saving {again.checkpoint_id!r} again once everything expired returned "
        f"{getattr(latest, 'checkpoint_id', latest)!r}",
    )
