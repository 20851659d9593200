"""fencing: a stale writer can never move a workflow's latest off the branch that superseded it.

Every clause needs the ``fencing`` capability: ``save(checkpoint, expected_latest_id=X)`` stores
only while ``X`` is the workflow's latest (as get_latest() names it; None: no checkpoint yet), checked
atomically with the write, and otherwise raises StaleWriterError and stores nothing.

Writers race through separate handles on one backend (``new_handle()``), fired together with
``asyncio.gather``. The kit cannot open a store in another process, so the cross-process race
is left to each backend's own tests (tests/test_fencing.py runs it on SQLite); a backend whose
handles share nothing but the store (SQLite, Redis, S3) meets the same race through handles.
"""

from __future__ import annotations

import asyncio
from typing import Any

from storages.contract import Capability
from storages.errors import StaleWriterError

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext
from ._loads import loads_equal_or_absent

WRITERS = 4
"""Handles racing for one head in ``fencing.one_winner_per_head``."""
ROUNDS = 5
"""Races in a row, each expecting the previous round's winner."""

_REQUIRES = [Capability.FENCING]


async def _fenced_save(storage: Any, checkpoint: Any, expected: str | None) -> StaleWriterError | None:
    """Save ``checkpoint`` fenced on ``expected``: None if stored, the error if refused."""
    try:
        returned = await storage.save(checkpoint, expected_latest_id=expected)
    except StaleWriterError as exc:
        return exc
    ensure_equal(returned, checkpoint.checkpoint_id, f"id returned by a fenced save expecting {expected!r}")
    return None


def _ensure_names(error: StaleWriterError, workflow: str, expected: str | None, actual: str | None) -> None:
    """A refusal names the workflow, the expected and the actual latest."""
    what = f"StaleWriterError for checkpoint {error.checkpoint_id!r}"
    ensure_equal(error.workflow_name, workflow, f"{what}: workflow_name")
    ensure_equal(error.expected_latest_id, expected, f"{what}: expected_latest_id")
    ensure_equal(error.actual_latest_id, actual, f"{what}: actual_latest_id")


async def _latest_id(storage: Any, workflow: str) -> str | None:
    latest = await storage.get_latest(workflow_name=workflow)
    return None if latest is None else latest.checkpoint_id


async def _ensure_absent(storage: Any, checkpoint: Any, why: str) -> None:
    if await loads_equal_or_absent(storage, checkpoint, why):
        fail(f"checkpoint {checkpoint.checkpoint_id!r} loads, although {why}: a refused save stored it")


@clause(
    "fencing.one_winner_per_head",
    f"Of {WRITERS} handles saving at once with the same expected latest, exactly one stores its checkpoint; "
    "the others raise StaleWriterError naming the winner as the actual latest and store nothing.",
    requires=_REQUIRES,
)
async def one_winner_per_head(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("fence-race")
    handles = [ctx.storage, *[await ctx.other_handle() for _ in range(WRITERS - 1)]]
    (root,) = await ctx.save_chain(workflow, 1)
    head = root.checkpoint_id
    listed = [head]
    for round_number in range(1, ROUNDS + 1):
        contenders = [
            ctx.checkpoint(
                workflow, previous_checkpoint_id=head, iteration_count=round_number, state={"w": w}
            )
            for w in range(WRITERS)
        ]
        outcomes = await asyncio.gather(
            *(_fenced_save(h, c, head) for h, c in zip(handles, contenders, strict=True))
        )
        winners = [c for c, refused in zip(contenders, outcomes, strict=True) if refused is None]
        race = f"round {round_number}: {WRITERS} handles saved expecting latest {head!r}"
        ensure(
            len(winners) == 1,
            f"{race}; {len(winners)} stored their checkpoint ({[c.checkpoint_id for c in winners]}), "
            "expected exactly one: the check and the write are not one atomic step",
        )
        (winner,) = winners
        for contender, refused in zip(contenders, outcomes, strict=True):
            if refused is not None:
                _ensure_names(refused, workflow, head, winner.checkpoint_id)
                await _ensure_absent(ctx.storage, contender, f"its fenced save was refused ({race})")
        ensure_equal(
            await _latest_id(ctx.storage, workflow), winner.checkpoint_id, f"get_latest after {race}"
        )
        head = winner.checkpoint_id
        listed.append(head)
    ensure_equal(
        await ctx.storage.list_checkpoint_ids(workflow_name=workflow),
        listed,
        f"list_checkpoint_ids after {ROUNDS} fenced races (the root, then each round's winner)",
    )


@clause(
    "fencing.stale_save_after_fork_is_refused",
    "After another handle forks the workflow from an older checkpoint, a save expecting the old latest is "
    "refused and leaves the latest, the listing and the fork untouched; nothing nested in it is stored.",
    requires=_REQUIRES,
)
async def stale_save_after_fork_is_refused(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("fence-fork")
    stale_writer, successor = ctx.storage, await ctx.other_handle()
    chain: list[Any] = []
    previous: str | None = None
    for index in range(4):
        checkpoint = ctx.checkpoint(workflow, previous_checkpoint_id=previous, iteration_count=index)
        refused = await _fenced_save(stale_writer, checkpoint, previous)
        ensure(refused is None, f"fenced save {index} of an uncontested chain was refused: {refused}")
        chain.append(checkpoint)
        previous = checkpoint.checkpoint_id
    old_latest = chain[-1].checkpoint_id
    # The successor restores an older checkpoint and continues from it: a fork of the workflow.
    await successor.load(chain[1].checkpoint_id)
    fork = ctx.checkpoint(workflow, previous_checkpoint_id=chain[1].checkpoint_id, iteration_count=2)
    refused = await _fenced_save(successor, fork, await _latest_id(successor, workflow))
    ensure(
        refused is None, f"the successor's fork, expecting the latest it just read, was refused: {refused}"
    )
    embedded = ctx.checkpoint(ctx.workflow_name("fence-child"), iteration_count=4)
    late = ctx.checkpoint(
        workflow,
        previous_checkpoint_id=old_latest,
        iteration_count=4,
        state={"sub_workflow_checkpoint": embedded} if ctx.has(Capability.NESTED) else {},
    )
    refused = await _fenced_save(stale_writer, late, old_latest)
    ids = [c.checkpoint_id for c in chain]
    if refused is None:
        fail(
            f"the stale writer's save of {late.checkpoint_id!r}, expecting latest {old_latest!r}, was stored "
            f"although the successor's fork {fork.checkpoint_id!r} had become the latest: the stale writer "
            "clobbered it"
        )
    _ensure_names(refused, workflow, old_latest, fork.checkpoint_id)
    for handle, name in ((stale_writer, "the stale writer's handle"), (successor, "the successor's handle")):
        ensure_equal(
            await _latest_id(handle, workflow), fork.checkpoint_id, f"get_latest on {name} after the refusal"
        )
    ensure_equal(
        await ctx.storage.list_checkpoint_ids(workflow_name=workflow),
        [*ids, fork.checkpoint_id],
        "list_checkpoint_ids after the refused stale save",
    )
    await _ensure_absent(ctx.storage, late, "its fenced save was refused")
    if ctx.has(Capability.NESTED):
        await _ensure_absent(
            ctx.storage, embedded, "the save of the checkpoint it is embedded in was refused"
        )


@clause(
    "fencing.retried_save_is_idempotent",
    "Repeating a fenced save that succeeded, on the same or another handle, returns its id and stores "
    "nothing more: the retry finds its own checkpoint as the latest.",
    requires=_REQUIRES,
)
async def retried_save_is_idempotent(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("fence-retry")
    other = await ctx.other_handle()
    first = ctx.checkpoint(workflow, iteration_count=0)
    second = ctx.checkpoint(workflow, previous_checkpoint_id=first.checkpoint_id, iteration_count=1)
    for checkpoint, expected in ((first, None), (second, first.checkpoint_id)):
        for attempt, handle in enumerate((ctx.storage, ctx.storage, other)):
            refused = await _fenced_save(handle, checkpoint, expected)
            if refused is not None:
                fail(
                    f"attempt {attempt + 1} of the fenced save of {checkpoint.checkpoint_id!r} expecting "
                    f"{expected!r} was refused ({refused}); retrying a save that succeeded must return its id"
                )
    ensure_equal(
        await ctx.storage.list_checkpoint_ids(workflow_name=workflow),
        [first.checkpoint_id, second.checkpoint_id],
        "list_checkpoint_ids after each fenced save was made three times",
    )
    ensure_equal(
        await _latest_id(ctx.storage, workflow), second.checkpoint_id, "get_latest after the retries"
    )


STALE_RESAVES = 10
"""Fenced re-saves of a superseded checkpoint in ``fencing.superseded_resave_is_stale``: a store
whose answers are sometimes lost (and read back) meets the loss on some of them."""


@clause(
    "fencing.superseded_resave_is_stale",
    "A fenced re-save of a stored checkpoint that is no longer the latest raises StaleWriterError naming "
    f"the latest, each of {STALE_RESAVES} times on either handle, and stores nothing.",
    requires=_REQUIRES,
)
async def superseded_resave_is_stale(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("fence-superseded")
    handles = (ctx.storage, await ctx.other_handle())
    first = ctx.checkpoint(workflow, iteration_count=0)
    second = ctx.checkpoint(workflow, previous_checkpoint_id=first.checkpoint_id, iteration_count=1)
    for checkpoint, expected in ((first, None), (second, first.checkpoint_id)):
        refused = await _fenced_save(ctx.storage, checkpoint, expected)
        ensure(refused is None, f"the fenced save of {checkpoint.checkpoint_id!r} was refused: {refused}")
    for attempt in range(STALE_RESAVES):
        refused = await _fenced_save(handles[attempt % 2], first, None)
        if refused is None:
            fail(
                f"re-save {attempt + 1} of {STALE_RESAVES} of {first.checkpoint_id!r} expecting None "
                f"returned its id, although {second.checkpoint_id!r} superseded it: it must raise "
                "StaleWriterError"
            )
        _ensure_names(refused, workflow, None, second.checkpoint_id)
    ensure_equal(
        await ctx.storage.list_checkpoint_ids(workflow_name=workflow),
        [first.checkpoint_id, second.checkpoint_id],
        "list_checkpoint_ids after the refused re-saves",
    )
    ensure_equal(await _latest_id(ctx.storage, workflow), second.checkpoint_id, "get_latest after them")


@clause(
    "fencing.fence_follows_the_lineage",
    "The fence checks the latest get_latest() names: after a parent is saved after its child, a save "
    "expecting the child is stored, and one expecting the parent (the newest commit) is refused.",
    requires=_REQUIRES,
)
async def fence_follows_the_lineage(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("fence-lineage")
    parent = ctx.checkpoint(workflow, checkpoint_id=f"{workflow}-parent")
    child = ctx.checkpoint(
        workflow, checkpoint_id=f"{workflow}-child", previous_checkpoint_id=f"{workflow}-parent"
    )
    await ctx.storage.save(child)
    await ctx.storage.save(parent)
    ensure_equal(
        await _latest_id(ctx.storage, workflow),
        child.checkpoint_id,
        "get_latest() after the child, then its parent",
    )
    stale = ctx.checkpoint(
        workflow, checkpoint_id=f"{workflow}-stale", previous_checkpoint_id=parent.checkpoint_id
    )
    refused = await _fenced_save(ctx.storage, stale, parent.checkpoint_id)
    if refused is None:
        fail("a save expecting the parent (committed last, but continued by the child) was stored")
    _ensure_names(refused, workflow, parent.checkpoint_id, child.checkpoint_id)
    following = ctx.checkpoint(
        workflow, checkpoint_id=f"{workflow}-next", previous_checkpoint_id=child.checkpoint_id
    )
    stored = await _fenced_save(ctx.storage, following, child.checkpoint_id)
    if stored is not None:
        fail(f"a save expecting the child, the latest, was refused: {stored}")
    ensure_equal(await _latest_id(ctx.storage, workflow), following.checkpoint_id, "get_latest() after it")


@clause(
    "fencing.expected_none_means_no_checkpoint_yet",
    "expected_latest_id=None stores the first checkpoint of a fresh workflow, and is refused (naming the "
    "latest) once the workflow has one.",
    requires=_REQUIRES,
)
async def expected_none_means_no_checkpoint_yet(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("fence-none")
    first = ctx.checkpoint(workflow, iteration_count=0)
    refused = await _fenced_save(ctx.storage, first, None)
    ensure(refused is None, f"the first save of a fresh workflow expecting None was refused: {refused}")
    rival = ctx.checkpoint(workflow, iteration_count=0)
    refused = await _fenced_save(ctx.storage, rival, None)
    if refused is None:
        fail(
            f"a second save expecting None (no checkpoint yet) stored {rival.checkpoint_id!r} although "
            f"the workflow already had {first.checkpoint_id!r}"
        )
    _ensure_names(refused, workflow, None, first.checkpoint_id)
    await _ensure_absent(ctx.storage, rival, "its save expecting None was refused")
    ensure_equal(await _latest_id(ctx.storage, workflow), first.checkpoint_id, "get_latest after the refusal")


@clause(
    "fencing.fence_is_the_head_not_a_rival",
    "Of two siblings, the one committed last (the head) is what a fence checks even when get_latest() "
    "resumes from the other by its newer timestamp: expecting the head stores, expecting the rival is "
    "refused naming the head, and latest_id(), where offered, names the head.",
    requires=_REQUIRES,
)
async def fence_is_the_head_not_a_rival(ctx: ClauseContext) -> None:
    # A fence decides between writers and clocks never do: a layer that fences on get_latest()
    # (which prefers the rival with the newer timestamp) refuses the writer holding the head and
    # lets through one that read the rival.
    workflow = ctx.workflow_name("fence-rival")
    root = ctx.checkpoint(workflow, checkpoint_id=f"{workflow}-root", timestamp="2030-01-01T00:00:00+00:00")
    await ctx.storage.save(root)
    newer = ctx.checkpoint(
        workflow,
        checkpoint_id=f"{workflow}-newer",
        previous_checkpoint_id=root.checkpoint_id,
        timestamp="2030-01-01T00:00:09+00:00",
    )
    head = ctx.checkpoint(
        workflow,
        checkpoint_id=f"{workflow}-head",
        previous_checkpoint_id=root.checkpoint_id,
        timestamp="2030-01-01T00:00:05+00:00",
    )
    await ctx.storage.save(newer)
    await ctx.storage.save(head)
    ensure_equal(
        await _latest_id(ctx.storage, workflow),
        newer.checkpoint_id,
        "get_latest() of two siblings, the one committed first with the newer timestamp",
    )
    latest_id = getattr(ctx.storage, "latest_id", None)
    if callable(latest_id):
        # What a writer passes as expected_latest_id (docs/contract.md, "Writer fencing").
        ensure_equal(
            await latest_id(workflow_name=workflow),
            head.checkpoint_id,
            "latest_id() of two siblings: the head (committed last), not the rival get_latest() prefers",
        )
    from_rival = ctx.checkpoint(
        workflow, checkpoint_id=f"{workflow}-from-rival", previous_checkpoint_id=newer.checkpoint_id
    )
    refused = await _fenced_save(ctx.storage, from_rival, newer.checkpoint_id)
    if refused is None:
        fail(
            f"a save expecting {newer.checkpoint_id!r} (the rival get_latest() resumes from) was stored, "
            f"although the head is {head.checkpoint_id!r}: the fence must check the head, not a rival"
        )
    _ensure_names(refused, workflow, newer.checkpoint_id, head.checkpoint_id)
    await _ensure_absent(ctx.storage, from_rival, "its save expecting the rival was refused")
    following = ctx.checkpoint(
        workflow, checkpoint_id=f"{workflow}-from-head", previous_checkpoint_id=head.checkpoint_id
    )
    stored = await _fenced_save(ctx.storage, following, head.checkpoint_id)
    if stored is not None:
        fail(f"a save expecting {head.checkpoint_id!r}, the head (committed last), was refused: {stored}")
    ensure_equal(await _latest_id(ctx.storage, workflow), following.checkpoint_id, "get_latest() after it")
