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


async def _leftovers(ctx: ClauseContext, workflow_name: str, ids: list[str]) -> list[str]:
    """What a read still shows of checkpoints that should have expired."""
    storage = ctx.storage
    found = [f"load({i!r})" for i in ids if await _present(storage, i)]
    if await storage.get_latest(workflow_name=workflow_name) is not None:
        found.append("get_latest()")
    if await storage.list_checkpoint_ids(workflow_name=workflow_name):
        found.append("list_checkpoint_ids()")
    if await storage.list_checkpoints(workflow_name=workflow_name):
        found.append("list_checkpoints()")
    if ctx.has(Capability.LIST_WORKFLOWS) and workflow_name in await storage.list_workflows():
        found.append("list_workflows()")
    return found


@clause(
    "expiry.checkpoints_expire_after_ttl",
    "With a short ttl, checkpoints (nested ones too) are all there early in their ttl, gone from every "
    "read soon after it, and an expired id can be saved afresh.",
    requires=[Capability.TTL],
    timeout=3 * _LONGEST_WAIT + 2 * _GRACE,
)
async def checkpoints_expire_after_ttl(ctx: ClauseContext) -> None:
    ttl = _ttl_seconds(ctx)
    workflow_name = ctx.workflow_name("expiring")
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
    saved = time.monotonic()
    await asyncio.sleep(ttl * _EARLY_CHECK)
    missing = [i for i in ids if not await _present(ctx.storage, i)]
    age = time.monotonic() - saved
    if missing and age < ttl:
        fail(
            f"{len(missing)} of {len(ids)} checkpoints were gone {age:.2f} s after their save, before "
            f"their ttl of {ttl:g} s (is the ttl read in the wrong unit?)"
        )
    deadline = saved + ttl + _GRACE
    await asyncio.sleep(max(0.0, saved + ttl - time.monotonic()))
    while True:
        leftovers = await _leftovers(ctx, workflow_name, ids)
        if not leftovers or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    ensure(
        not leftovers,
        f"{ttl + _GRACE:g} s after saving with a ttl of {ttl:g} s, these still show the checkpoints: "
        f"{', '.join(leftovers)}",
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
