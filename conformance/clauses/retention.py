"""retention: prune and delete_workflow remove what they say, leave tombstones, and orphan nothing.

``prune(keep_last=N)`` keeps a workflow's latest and the N - 1 other checkpoints committed last
(timestamps are data, never order) and leaves a tombstone for every id it deletes, so a walk
from a kept checkpoint ends PRUNED: history cut on purpose. A plain ``delete`` leaves none, so
the same walk ends MISSING. ``delete_workflow`` removes a workflow's checkpoints, their nested
records and its tombstones, and nothing of any other workflow, however similar the names.

Checkpoint ids here are readable, ``<workflow>-<label>``; see :class:`~.ancestry.Book`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from storages.contract import AncestryEnd, Capability
from storages.errors import InvalidCheckpointError

from ..clause import clause, ensure, ensure_equal
from ..context import ClauseContext
from .ancestry import (
    Book,
    answer,
    at,
    expect_gone,
    expect_latest,
    expect_listed,
    expect_loads_equal,
    expect_raises,
    expect_walk,
    ids_of,
    sub_workflow_state,
)
from .durability import rebuilt

_PRUNE = (Capability.PRUNE,)

# Commit position -> (id key, timestamp): neither the ids nor the timestamps sort into commit
# order, and the two newest by timestamp (c2, c5) are not the two newest commits (c4, c5).
_SCRAMBLE: tuple[tuple[str, int], ...] = (("c", 3), ("f", 1), ("a", 5), ("d", 0), ("b", 2), ("e", 4))


async def _expect_tombstones(
    book: Book, workflow_name: str, expected: list[str], when: str, storage: Any = None
) -> None:
    storage = book.ctx.storage if storage is None else storage
    tombstones = await storage.list_tombstones(workflow_name=workflow_name)
    ensure(
        sorted(tombstones) == sorted(expected),
        f"list_tombstones(workflow_name={workflow_name!r}) {when} returned {book.show(list(tombstones))}, "
        f"expected {book.show(sorted(expected))} {book.legend}",
    )


async def _prune(book: Book, workflow_name: str, keep_last: int, expected_count: int, when: str = "") -> None:
    call = f"prune(workflow_name={workflow_name!r}, keep_last={keep_last})"
    suffix = f" {when}" if when else ""
    removed = await answer(
        f"{call}{suffix}", book.ctx.storage.prune(workflow_name=workflow_name, keep_last=keep_last)
    )
    ensure_equal(removed, expected_count, f"count returned by {call}{suffix}")


async def _nested_family(book: Book, length: int) -> tuple[list[Any], list[Any], str]:
    """``length`` top-level checkpoints t0, t1, ... of the book's workflow, each embedding a
    sub-workflow checkpoint n0, n1, ... chained by previous id; returns (tops, nested, sub name)."""
    sub = book.ctx.workflow_name("sub")
    tops: list[Any] = []
    nested: list[Any] = []
    for index in range(length):
        child = book.make(f"n{index}", workflow=sub, previous=nested[-1].checkpoint_id if nested else None)
        top = await book.save(
            f"t{index}",
            previous=tops[-1].checkpoint_id if tops else None,
            state=sub_workflow_state(child),
            iteration_count=index,
        )
        tops.append(top)
        nested.append(child)
    return tops, nested, sub


@clause(
    "retention.prune_keeps_newest",
    "prune(keep_last=2) deletes all but the 2 checkpoints saved last (commit order, not timestamp or id "
    "order), returns the count, leaves those 2 loadable and intact, and no other workflow changes.",
    requires=_PRUNE,
)
async def prune_keeps_newest(ctx: ClauseContext) -> None:
    book, other = Book(ctx, "prune"), Book(ctx, "bystander")
    saved: list[Any] = []
    bystanders: list[Any] = []
    for index, (key, clock) in enumerate(_SCRAMBLE):
        previous = saved[-1].checkpoint_id if saved else None
        saved.append(await book.save(f"c{index}", key=key, previous=previous, timestamp=at(clock)))
        # Another workflow's checkpoints, interleaved and newer by clock: prune must not see them.
        previous = bystanders[-1].checkpoint_id if bystanders else None
        bystanders.append(await other.save(f"o{index}", previous=previous, timestamp=at(100 + index)))
    # What a storage does behind the saves (moving older records elsewhere) must not hide them.
    await ctx.settle()
    await _prune(book, book.workflow, 2, len(saved) - 2, "of 6 checkpoints")
    when = "after prune(keep_last=2)"
    await expect_listed(book, book.workflow, saved[-2:], when)
    await expect_latest(book, book.workflow, saved[-1], when)
    for checkpoint in saved[-2:]:
        await expect_loads_equal(book, checkpoint, when)
    for checkpoint in saved[:-2]:
        await expect_gone(book, checkpoint.checkpoint_id, when)
    await expect_listed(other, other.workflow, bystanders, f"{when} of workflow {book.workflow!r}")
    for checkpoint in bystanders:
        await expect_loads_equal(other, checkpoint, f"{when} of workflow {book.workflow!r}")


@clause(
    "retention.prune_keeps_the_latest",
    "prune(keep_last=1) keeps the latest even when it was committed before the checkpoint it "
    "continues (a parent saved after its child), and keep_last=2 keeps it and the newest other commit.",
    requires=_PRUNE,
)
async def prune_keeps_the_latest(ctx: ClauseContext) -> None:
    for keep_last in (1, 2):
        book = Book(ctx, f"prune-tip-{keep_last}")
        root = await book.save("c0")
        child = book.make("c2", previous=book.id("c1"))
        await book.ctx.storage.save(child)
        parent = await book.save("c1", previous=root.checkpoint_id)
        when = f"after saving c0, c2 (which continues c1), then c1, and prune(keep_last={keep_last})"
        await expect_latest(book, book.workflow, child, "before the prune")
        await _prune(book, book.workflow, keep_last, 3 - keep_last, when)
        kept = [child] if keep_last == 1 else [child, parent]
        await expect_listed(book, book.workflow, kept, when)
        await expect_latest(book, book.workflow, child, when)


@clause(
    "retention.prune_keeps_the_rivals",
    "prune(keep_last=N) keeps the head, every rival of it and N-1 other commits: siblings that fill "
    "keep_last by themselves cost the checkpoints before them nothing.",
    requires=_PRUNE,
)
async def prune_keeps_the_rivals(ctx: ClauseContext) -> None:
    book = Book(ctx, "prune-rivals")
    root = await book.save("c0")
    first = await book.save("c1", previous=root.checkpoint_id)
    second = await book.save("c2", previous=root.checkpoint_id)
    when = "after saving c0, then c1 and c2 (both continuing c0: the head c2 and its rival c1)"
    await _prune(book, book.workflow, 2, 0, f"{when}, prune(keep_last=2)")
    await expect_listed(book, book.workflow, [root, first, second], f"{when} and prune(keep_last=2)")
    await _prune(book, book.workflow, 1, 1, f"{when}, prune(keep_last=1)")
    await expect_listed(book, book.workflow, [first, second], f"{when} and prune(keep_last=1)")

    book = Book(ctx, "prune-rival-fan")
    chain = await book.chain(3)
    fan = [await book.save(f"s{index}", previous=chain[-1].checkpoint_id) for index in range(3)]
    when = (
        "after saving the chain c0, c1, c2, then s0, s1 and s2 "
        "(each continuing c2: the head s2, its rivals s0, s1)"
    )
    await _prune(book, book.workflow, 5, 0, f"{when}, prune(keep_last=5)")
    await expect_listed(book, book.workflow, [*chain, *fan], f"{when} and prune(keep_last=5)")
    await _prune(book, book.workflow, 2, 2, f"{when}, prune(keep_last=2)")
    await expect_listed(book, book.workflow, [chain[-1], *fan], f"{when} and prune(keep_last=2)")


@clause(
    "retention.prune_edge_counts",
    "prune with keep_last at or above the count deletes nothing and returns 0; keep_last=0 deletes every "
    "checkpoint (get_latest, read just before, then answers None) and returns the count; pruning an "
    "empty or unknown workflow returns 0.",
    requires=_PRUNE,
)
async def prune_edge_counts(ctx: ClauseContext) -> None:
    book = Book(ctx, "edges")
    chain = await book.chain(3)
    workflow = book.workflow
    # 2**64 does not fit a 64-bit database integer: "keep everything" must still just work.
    for keep_last in (5, 3, 2**64):
        await _prune(book, workflow, keep_last, 0, "of 3 checkpoints")
        await expect_listed(book, workflow, chain, f"after prune(keep_last={keep_last}) of 3 checkpoints")
    # A latest the storage just answered must not outlive the prune (a cache a prune forgets).
    await expect_latest(book, workflow, chain[-1], "before prune(keep_last=0)")
    await _prune(book, workflow, 0, 3, "of 3 checkpoints")
    when = "after prune(keep_last=0)"
    await expect_listed(book, workflow, [], when)
    await expect_latest(book, workflow, None, when)
    for checkpoint in chain:
        await expect_gone(book, checkpoint.checkpoint_id, when)
    await _prune(book, workflow, 0, 0, "of a workflow already pruned to nothing")
    await _prune(book, ctx.workflow_name("never-saved"), 0, 0, "of a workflow never saved")


_MANY = 70
"""Checkpoints prune_many_at_once saves: more than a batch or page a store may handle at once
(25 for a DynamoDB batch write, 50 or 64 for many listing pages)."""


@clause(
    "retention.prune_many_at_once",
    f"prune(keep_last=1) of {_MANY} checkpoints deletes the {_MANY - 1} before the latest in one call, "
    "returns that count and tombstones each: none is left behind a batch or page limit.",
    requires=_PRUNE,
)
async def prune_many_at_once(ctx: ClauseContext) -> None:
    book = Book(ctx, "prune-many")
    chain = await book.chain(_MANY)
    await ctx.settle()
    when = f"after prune(keep_last=1) of {_MANY} checkpoints"
    await _prune(book, book.workflow, 1, _MANY - 1, f"of {_MANY} checkpoints")
    await expect_listed(book, book.workflow, chain[-1:], when)
    await expect_latest(book, book.workflow, chain[-1], when)
    for checkpoint in chain[:-1]:
        await expect_gone(book, checkpoint.checkpoint_id, when)
    if ctx.has(Capability.INSPECT):
        await _expect_tombstones(book, book.workflow, ids_of(chain[:-1]), when)


@clause(
    "retention.prune_invalid_keep_last",
    "prune with keep_last of -1, True, False, 1.5 or '2' raises InvalidCheckpointError and deletes nothing.",
    requires=_PRUNE,
)
async def prune_invalid_keep_last(ctx: ClauseContext) -> None:
    book = Book(ctx, "bad-keep")
    chain = await book.chain(3)
    for bad in (-1, True, False, 1.5, "2"):
        call = f"prune(workflow_name={book.workflow!r}, keep_last={bad!r})"
        await expect_raises(
            InvalidCheckpointError,
            call,
            ctx.storage.prune,
            workflow_name=book.workflow,
            keep_last=bad,
        )
        await expect_listed(book, book.workflow, chain, f"after the refused {call}")


@clause(
    "retention.pruned_ancestor_leaves_tombstone",
    "A walk from a checkpoint kept by prune ends PRUNED at the newest pruned id, not MISSING, and still "
    "does after later saves to the workflow.",
    requires=[Capability.PRUNE, Capability.ANCESTRY],
)
async def pruned_ancestor_leaves_tombstone(ctx: ClauseContext) -> None:
    book = Book(ctx, "tombstone")
    chain = await book.chain(5)
    await _prune(book, book.workflow, 2, 3, "of 5 checkpoints")
    cut = chain[2].checkpoint_id
    when = "after prune(keep_last=2)"
    await expect_walk(book, chain[4].checkpoint_id, [chain[4], chain[3]], AncestryEnd.PRUNED, cut, when=when)
    await expect_walk(book, chain[3].checkpoint_id, [chain[3]], AncestryEnd.PRUNED, cut, when=when)
    # A store that rewrites a workflow's state on each save (a document, a row of JSON) must
    # carry the tombstones over, not only the records.
    after = ctx.checkpoint(book.workflow, previous_checkpoint_id=chain[4].checkpoint_id, iteration_count=5)
    await ctx.storage.save(after)
    when = "after prune(keep_last=2) and one more save to the workflow"
    await expect_walk(book, chain[3].checkpoint_id, [chain[3]], AncestryEnd.PRUNED, cut, when=when)


@clause(
    "retention.tombstones_listed",
    "list_tombstones(workflow_name=) names exactly the ids pruned from that workflow, accumulating over "
    "prunes, keep_last=0 included, and a prune racing a plain delete tombstones exactly what it reports it "
    "deleted; other workflows' lists are unaffected, and list_tombstones() names none of another store's.",
    requires=[Capability.PRUNE, Capability.INSPECT],
)
async def tombstones_listed(ctx: ClauseContext) -> None:
    book, other = Book(ctx, "listed"), Book(ctx, "unpruned")
    chain = await book.chain(5)
    await other.chain(2)
    await ctx.settle()  # older records a storage moved behind the saves are pruned and marked too
    await _prune(book, book.workflow, 3, 2, "of 5 checkpoints")
    await _expect_tombstones(book, book.workflow, ids_of(chain[:2]), "after prune(keep_last=3)")
    await _prune(book, book.workflow, 1, 2, "of the 3 left")
    await _expect_tombstones(book, book.workflow, ids_of(chain[:4]), "after a second prune(keep_last=1)")
    await _expect_tombstones(other, other.workflow, [], f"after pruning only {book.workflow!r}")
    everything = set(await ctx.storage.list_tombstones())
    missing = [i for i in ids_of(chain[:4]) if i not in everything]
    ensure(not missing, f"list_tombstones() without a workflow lacks {book.show(missing)} {book.legend}")
    await _no_tombstone_of_another_store(ctx)
    # keep_last=0 is a prune like any other, not a delete_workflow: it adds, and clears nothing.
    await _prune(book, book.workflow, 0, 1, "of the last one left")
    await _expect_tombstones(book, book.workflow, ids_of(chain), "after a third prune(keep_last=0)")
    for first in ("delete", "prune"):
        await _delete_racing_prune(ctx, first)


async def _no_tombstone_of_another_store(ctx: ClauseContext) -> None:
    """A tombstone left by a prune through a store the target's factory opens (another tenant,
    another prefix) is in this store's whole list only where that store is this one, and then
    its workflow's list names it too: a tombstone carries no workflow to tell it apart by."""
    elsewhere = await ctx.factory_handle()
    workflow_name = ctx.workflow_name("pruned-elsewhere")
    first = ctx.checkpoint(workflow_name, iteration_count=0)
    for checkpoint in (first, ctx.checkpoint(workflow_name, previous_checkpoint_id=first.checkpoint_id)):
        await elsewhere.save(checkpoint)
    await elsewhere.prune(workflow_name=workflow_name, keep_last=1)
    if first.checkpoint_id not in await ctx.storage.list_tombstones():
        return
    ensure(
        first.checkpoint_id in await ctx.storage.list_tombstones(workflow_name=workflow_name),
        f"list_tombstones() names {first.checkpoint_id!r}, pruned from workflow {workflow_name!r} through "
        f"another store the target's factory opened, and list_tombstones(workflow_name={workflow_name!r}) "
        "does not: the whole store's list reaches past this store",
    )


async def _delete_racing_prune(ctx: ClauseContext, first: str) -> None:
    """A delete of c1 and a prune(keep_last=1) made together, on a workflow already holding a
    tombstone (c0): the prune tombstones exactly what it says it deleted (c2, and c1 if it took
    it), whatever the delete did, and c1 is gone."""
    book = Book(ctx, f"raced-{first}")
    chain = await book.chain(4)
    await _prune(book, book.workflow, 3, 1, "of 4 checkpoints")
    delete = ctx.storage.delete(chain[1].checkpoint_id)
    prune = ctx.storage.prune(workflow_name=book.workflow, keep_last=1)
    if first == "delete":
        deleted, pruned = await asyncio.gather(delete, prune)
    else:
        pruned, deleted = await asyncio.gather(prune, delete)
    when = f"after delete(c1) and prune(keep_last=1) made together ({first} started first)"
    # Where deletes are not atomic (S3) both may say they took c1; one of them must have.
    ensure(
        pruned in (1, 2) and (deleted is True or pruned == 2),
        f"{when}: delete returned {deleted!r} and prune {pruned!r}; one of them takes c1, the prune c2 "
        f"{book.legend}",
    )
    marked = ids_of(chain[:3]) if pruned == 2 else ids_of(chain[:1] + chain[2:3])
    await _expect_tombstones(book, book.workflow, marked, f"{when}, the prune reporting {pruned}")
    await expect_gone(book, chain[1].checkpoint_id, when)


@clause(
    "retention.prune_removes_nested",
    "Pruning a checkpoint deletes the checkpoints embedded in it too: none stays loadable (also when "
    "loaded just before), listed or indexed, while the kept checkpoint's embedded one stays intact.",
    requires=[Capability.PRUNE, Capability.NESTED],
)
async def prune_removes_nested(ctx: ClauseContext) -> None:
    book = Book(ctx, "nested-prune")
    tops, nested, sub = await _nested_family(book, 3)
    # Loaded first: a read cache or replica that prune forgets must not answer for them after it.
    for checkpoint in [*tops, *nested]:
        await expect_loads_equal(book, checkpoint, "before prune")
    await _prune(book, book.workflow, 1, 2, "of 3 checkpoints with one embedded each (nested not counted)")
    when = "after prune(keep_last=1)"
    for checkpoint in nested[:2]:
        await expect_gone(book, checkpoint.checkpoint_id, when)
    await expect_loads_equal(book, tops[-1], when)
    await expect_loads_equal(book, nested[-1], when)
    listed = await ctx.storage.list_checkpoint_ids(workflow_name=sub, include_nested=True)
    ensure(
        list(listed) == ids_of(nested[-1:]),
        f"list_checkpoint_ids(workflow_name={sub!r}, include_nested=True) {when} returned "
        f"{book.show(list(listed))}, expected [n2] {book.legend}",
    )
    if ctx.has(Capability.INSPECT):
        for checkpoint in nested[:2]:
            info = await ctx.storage.checkpoint_info(checkpoint.checkpoint_id)
            ensure(
                info is None,
                f"checkpoint_info({book.name(checkpoint.checkpoint_id)}) {when} returned {info!r}",
            )
        tombstones = set(await ctx.storage.list_tombstones())
        unmarked = [i for i in ids_of([*tops[:2], *nested[:2]]) if i not in tombstones]
        ensure(not unmarked, f"list_tombstones() {when} lacks pruned {book.show(unmarked)} {book.legend}")


@clause(
    "retention.walk_reaches_pruned_nested",
    "A walk that reaches an embedded checkpoint deleted with its pruned container ends PRUNED at it.",
    requires=[Capability.PRUNE, Capability.NESTED, Capability.ANCESTRY],
)
async def walk_reaches_pruned_nested(ctx: ClauseContext) -> None:
    book = Book(ctx, "nested-walk")
    tops, nested, sub = await _nested_family(book, 3)
    resumed = await book.save("r", workflow=sub, previous=nested[-1].checkpoint_id)
    await _prune(book, book.workflow, 1, 2, "of 3 checkpoints with one embedded each")
    when = "after prune(keep_last=1)"
    cut = nested[1].checkpoint_id
    await expect_walk(book, resumed.checkpoint_id, [resumed, nested[2]], AncestryEnd.PRUNED, cut, when=when)
    await expect_walk(book, nested[2].checkpoint_id, [nested[2]], AncestryEnd.PRUNED, cut, when=when)
    await expect_walk(
        book, tops[2].checkpoint_id, [tops[2]], AncestryEnd.PRUNED, tops[1].checkpoint_id, when=when
    )


@clause(
    "retention.delete_workflow_removes_all",
    "delete_workflow deletes every checkpoint of the workflow and those embedded in them, returns the "
    "count, and leaves get_latest None and none of them loadable (also when read just before), listing "
    "empty and other workflows intact.",
    requires=_PRUNE,
)
async def delete_workflow_removes_all(ctx: ClauseContext) -> None:
    book, other = Book(ctx, "doomed"), Book(ctx, "survivor")
    bystanders = await other.chain(2)
    sub: str | None = None
    nested: list[Any] = []
    if ctx.has(Capability.NESTED):
        tops, nested, sub = await _nested_family(book, 3)
    else:
        tops = await book.chain(3)
    bystanders += await other.chain(1, prefix="later", previous=bystanders[-1].checkpoint_id)
    # A latest or a load the storage just answered must not outlive the delete (a cache it forgets).
    await expect_latest(book, book.workflow, tops[-1], "before delete_workflow")
    for checkpoint in [*tops, *nested]:
        await expect_loads_equal(book, checkpoint, "before delete_workflow")
    deleted = await ctx.storage.delete_workflow(workflow_name=book.workflow)
    ensure_equal(
        deleted, 3, f"count returned by delete_workflow(workflow_name={book.workflow!r}) of 3 checkpoints"
    )
    when = "after delete_workflow"
    await expect_listed(book, book.workflow, [], when)
    await expect_latest(book, book.workflow, None, when)
    for checkpoint in [*tops, *nested]:
        await expect_gone(book, checkpoint.checkpoint_id, when)
    if sub is not None:
        listed = await ctx.storage.list_checkpoint_ids(workflow_name=sub, include_nested=True)
        ensure(
            list(listed) == [],
            f"list_checkpoint_ids(workflow_name={sub!r}, include_nested=True) {when} of the containers' "
            f"workflow returned {book.show(list(listed))}, expected [] {book.legend}",
        )
    if ctx.has(Capability.INSPECT):
        for name in filter(None, (book.workflow, sub)):
            records = await ctx.storage.list_records(workflow_name=name)
            left = [r.checkpoint_id for r in records]
            ensure(
                not left,
                f"list_records(workflow_name={name!r}) {when} still has {book.show(left)} {book.legend}",
            )
    await expect_listed(other, other.workflow, bystanders, f"{when} of {book.workflow!r}")
    for checkpoint in bystanders:
        await expect_loads_equal(other, checkpoint, f"{when} of {book.workflow!r}")


@clause(
    "retention.delete_workflow_spares_others",
    "delete_workflow('wf_1') leaves workflows named 'wf_10', 'wf_', 'wfx1' and 'WF_1' untouched: names "
    "match exactly, never by prefix, pattern or case.",
    requires=_PRUNE,
)
async def delete_workflow_spares_others(ctx: ClauseContext) -> None:
    await _spares_others(ctx, "delete_workflow", lambda name: ctx.storage.delete_workflow(workflow_name=name))


@clause(
    "retention.prune_spares_others",
    "prune('wf_1', keep_last=0) leaves workflows named 'wf_10', 'wf_', 'wfx1' and 'WF_1' untouched: "
    "names match exactly, never by prefix, pattern or case.",
    requires=_PRUNE,
)
async def prune_spares_others(ctx: ClauseContext) -> None:
    await _spares_others(ctx, "prune", lambda name: ctx.storage.prune(workflow_name=name, keep_last=0))


async def _spares_others(ctx: ClauseContext, operation: str, call: Callable[[str], Awaitable[int]]) -> None:
    """``call`` (deleting every checkpoint of a workflow) of 'wf_1' leaves its neighbours whole."""
    target = ctx.workflow_name("wf_1")
    neighbours = {
        "a longer name it is a prefix of": target + "0",
        "a prefix of it": target[:-1],
        "its name with '_' as a LIKE wildcard would match": target.replace("_", "x"),
        "its name in upper case": target.upper(),
    }
    books = {reason: Book(ctx, "spared") for reason in neighbours}
    doomed = Book(ctx, "doomed")
    kept: dict[str, list[Any]] = {reason: [] for reason in neighbours}
    for index in range(2):
        await ctx.storage.save(doomed.make(f"t{index}", workflow=target))
        for reason, name in neighbours.items():
            checkpoint = books[reason].make(f"k{index}", workflow=name)
            await ctx.storage.save(checkpoint)
            kept[reason].append(checkpoint)
    deleted = await call(target)
    # Neighbours first: a lost neighbour says more than the count it inflated.
    for reason, name in neighbours.items():
        book = books[reason]
        when = f"after {operation}({target!r}), for workflow {name!r}, {reason}"
        await expect_listed(book, name, kept[reason], when)
        for checkpoint in kept[reason]:
            await expect_loads_equal(book, checkpoint, when)
    ensure_equal(deleted, 2, f"count returned by {operation}(workflow_name={target!r}) of 2 checkpoints")
    await expect_listed(doomed, target, [], f"after {operation}({target!r})")


@clause(
    "retention.delete_workflow_clears_tombstones",
    "delete_workflow clears the workflow's tombstones (a link to a pruned id is then MISSING; on another "
    "handle that listed them too) and no other workflow's, not even those of a workflow whose name "
    "extends its own.",
    requires=[Capability.PRUNE, Capability.INSPECT],
)
async def delete_workflow_clears_tombstones(ctx: ClauseContext) -> None:
    book, other = Book(ctx, "cleared"), Book(ctx, "still-pruned")
    # The bystander's name extends the cleared one's: a key-prefix scan over tombstones takes both.
    other.workflow = book.workflow + "0"
    chain = await book.chain(4)
    others = await other.chain(3)
    await _prune(book, book.workflow, 2, 2, "of 4 checkpoints")
    await _prune(other, other.workflow, 1, 2, "of 3 checkpoints")
    await _expect_tombstones(
        book, book.workflow, ids_of(chain[:2]), "after prune(keep_last=2), before delete_workflow"
    )
    # Another handle that listed the tombstones before the delete lists none after it.
    handle = await ctx.other_handle() if ctx.has(Capability.SHARED) else None
    if handle is not None:
        await _expect_tombstones(
            book, book.workflow, ids_of(chain[:2]), "through another handle, before delete_workflow", handle
        )
    deleted = await ctx.storage.delete_workflow(workflow_name=book.workflow)
    ensure_equal(
        deleted, 2, f"count returned by delete_workflow(workflow_name={book.workflow!r}) of 2 checkpoints"
    )
    when = "after delete_workflow"
    await _expect_tombstones(book, book.workflow, [], when)
    if handle is not None:
        await _expect_tombstones(book, book.workflow, [], f"through another handle {when}", handle)
    await _expect_tombstones(other, other.workflow, ids_of(others[:2]), f"{when} of {book.workflow!r}")
    everything = set(await ctx.storage.list_tombstones())
    stale = [i for i in ids_of(chain[:2]) if i in everything]
    ensure(not stale, f"list_tombstones() {when} still names {book.show(stale)} {book.legend}")
    if ctx.has(Capability.ANCESTRY):
        cut = chain[1].checkpoint_id
        orphan = await book.save("x", previous=cut)
        await expect_walk(book, orphan.checkpoint_id, [orphan], AncestryEnd.MISSING, cut, when=when)


@clause(
    "retention.save_after_delete_workflow",
    "After delete_workflow, new saves (and a re-save of a deleted id) become latest in commit order, "
    "with sequence numbers above every earlier one.",
    requires=_PRUNE,
)
async def save_after_delete_workflow(ctx: ClauseContext) -> None:
    book = Book(ctx, "reborn")
    chain = await book.chain(3)
    before: list[int] = []
    if ctx.has(Capability.INSPECT):
        before = [r.sequence for r in await ctx.storage.list_records(workflow_name=book.workflow)]
    deleted = await ctx.storage.delete_workflow(workflow_name=book.workflow)
    ensure_equal(
        deleted, 3, f"count returned by delete_workflow(workflow_name={book.workflow!r}) of 3 checkpoints"
    )
    x = book.make("x")
    y = book.make("y", previous=x.checkpoint_id)
    again = chain[0]
    saved: list[Any] = []
    for checkpoint in (x, y, again):
        returned = await ctx.storage.save(checkpoint)
        label = book.name(checkpoint.checkpoint_id)
        ensure_equal(
            returned, checkpoint.checkpoint_id, f"id returned by save({label}) after delete_workflow"
        )
        saved.append(checkpoint)
        when = f"after delete_workflow, then saving {book.show(ids_of(saved))}"
        await expect_latest(book, book.workflow, checkpoint, when)
        await expect_listed(book, book.workflow, saved, when)
    await expect_loads_equal(book, again, "re-saved after delete_workflow")
    if before:
        records = await ctx.storage.list_records(workflow_name=book.workflow)
        after = {r.checkpoint_id: r.sequence for r in records}
        numbers = [after.get(c.checkpoint_id, -1) for c in saved]
        ensure(
            min(numbers) > max(before) and numbers == sorted(numbers),
            f"sequences of {book.show(ids_of(saved))} saved after delete_workflow are {numbers}; they must "
            f"rise above {max(before)}, the highest before it (sequences never go back) {book.legend}",
        )


@clause(
    "retention.delete_is_not_prune",
    "A plain delete of a mid-chain checkpoint leaves no tombstone: a walk from its child ends MISSING at it.",
    requires=[Capability.ANCESTRY],
)
async def delete_is_not_prune(ctx: ClauseContext) -> None:
    book = Book(ctx, "deleted")
    chain = await book.chain(4)
    cut = chain[1].checkpoint_id
    await ctx.storage.delete(cut)
    when = f"after delete({book.name(cut)})"
    await expect_walk(book, chain[3].checkpoint_id, [chain[3], chain[2]], AncestryEnd.MISSING, cut, when=when)
    if ctx.has(Capability.INSPECT):
        await _expect_tombstones(book, book.workflow, [], when)


@clause(
    "retention.tombstones_survive_reopen",
    "After every handle closes and the storage is built anew from its settings, a walk from a kept "
    "checkpoint still ends PRUNED at the pruned ancestor.",
    requires=[Capability.PRUNE, Capability.ANCESTRY, Capability.DURABLE],
)
async def tombstones_survive_reopen(ctx: ClauseContext) -> None:
    book = Book(ctx, "durable-prune")
    chain = await book.chain(4)
    await _prune(book, book.workflow, 2, 2, "of 4 checkpoints")
    # Rebuilt, not a new handle: a handle may share this process's memory, where tombstones a
    # store never wrote down would still be found.
    await rebuilt(ctx)
    when = "after prune(keep_last=2) and reopening"
    cut = chain[1].checkpoint_id
    await expect_walk(book, chain[3].checkpoint_id, [chain[3], chain[2]], AncestryEnd.PRUNED, cut, when=when)
    if ctx.has(Capability.INSPECT):
        await _expect_tombstones(book, book.workflow, ids_of(chain[:2]), when)


async def _shared_name_story(ctx: ClauseContext, label: str) -> tuple[Book, str, Any, Any, list[Any]]:
    """MAF's shared-storage layout: the child workflow's own checkpoints, and a child checkpoint
    embedded in the parent, all under the child's workflow name. Returns the book, that name, the
    parent, the embedded child and the child's own checkpoints."""
    book = Book(ctx, label)
    child_name = ctx.workflow_name(f"{label}-child")
    own = [await book.save("own0", workflow=child_name)]
    for index in (1, 2):
        own.append(await book.save(f"own{index}", workflow=child_name, previous=own[-1].checkpoint_id))
    embedded = book.make("embedded", workflow=child_name)
    parent = await book.save("parent", state=sub_workflow_state(embedded))
    return book, child_name, parent, embedded, own


async def _expect_embedded_kept(book: Book, parent: Any, embedded: Any, when: str) -> None:
    await expect_loads_equal(book, parent, when)
    await expect_loads_equal(book, embedded, when)
    await expect_latest(book, book.workflow, parent, when)


@clause(
    "retention.prune_keeps_records_embedded_elsewhere",
    "prune() of a workflow name that other workflows' embedded checkpoints also use counts and deletes "
    "only that workflow's own checkpoints; the containers and their embedded records still load.",
    requires=[Capability.PRUNE, Capability.NESTED],
)
async def prune_keeps_records_embedded_elsewhere(ctx: ClauseContext) -> None:
    book, child_name, parent, embedded, own = await _shared_name_story(ctx, "shared-prune")
    # The embedded record is the newest of the name by sequence; keep_last counts only own ones
    # (with 2: the latest, which is kept whatever the ranking, and the one before it).
    for keep_last, kept, doomed in ((2, own[1:], own[:1]), (0, [], own[1:])):
        when = f"after prune(workflow_name={child_name!r}, keep_last={keep_last})"
        pruned = await answer(
            f"prune({child_name!r}, keep_last={keep_last})",
            ctx.storage.prune(workflow_name=child_name, keep_last=keep_last),
        )
        await _expect_embedded_kept(book, parent, embedded, when)
        for checkpoint in kept:
            await expect_loads_equal(book, checkpoint, f"{when}: it is the newest of the workflow's own")
        for checkpoint in doomed:
            await expect_gone(book, checkpoint.checkpoint_id, when)
        ensure_equal(pruned, len(doomed), f"count returned by prune(keep_last={keep_last})")


@clause(
    "retention.delete_workflow_keeps_records_embedded_elsewhere",
    "delete_workflow() of a workflow name that other workflows' embedded checkpoints also use deletes "
    "only that workflow's own checkpoints; the containers and their embedded records still load.",
    requires=[Capability.PRUNE, Capability.NESTED],
)
async def delete_workflow_keeps_records_embedded_elsewhere(ctx: ClauseContext) -> None:
    book, child_name, parent, embedded, own = await _shared_name_story(ctx, "shared-delete")
    when = f"after delete_workflow(workflow_name={child_name!r})"
    deleted = await answer(
        f"delete_workflow({child_name!r})", ctx.storage.delete_workflow(workflow_name=child_name)
    )
    await _expect_embedded_kept(book, parent, embedded, when)
    for checkpoint in own:
        await expect_gone(book, checkpoint.checkpoint_id, when)
    ensure_equal(
        deleted, len(own), f"count returned by delete_workflow() of {len(own)} top-level checkpoints"
    )
    # The name is free again, and the embedded record is still not one of its checkpoints.
    await expect_listed(book, child_name, [], when)
