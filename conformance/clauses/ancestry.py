"""ancestry: walks reach the root through forks and nested records, and report every break.

A walk follows previous ids from a checkpoint towards its root and says why it stopped: the root,
a pruned ancestor (tombstone), a dangling link, a cycle or the depth limit. The breaks matter most:
a dangling link reported as a root hides lost history, and a walk that follows a cycle hangs its
caller. Every checkpoint here gets a readable id, ``<workflow>-<label>``, and messages name
checkpoints by label (c0, c1, ... in save order) so a failure reads as the chain it describes.

The retention family reuses :class:`Book` and :func:`expect_walk`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from storages.contract import AncestryEnd, Capability
from storages.errors import CheckpointNotFoundError, InvalidCheckpointError

from ..clause import clause, ensure, fail
from ..context import ClauseContext
from ._maf import is_not_found
from .durability import rebuilt
from .fidelity import first_difference

_ANCESTRY = (Capability.ANCESTRY,)

LONG_CHAIN = 300
"""Length of the long-chain clause's chain: deeper than any recursion limit or small page size."""

_SHOWN_ITEMS = 8
"""Walk items shown in a message before the rest is summarised as a count."""

_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)

T = TypeVar("T")


def at(seconds: int) -> str:
    """An ISO timestamp ``seconds`` after a fixed epoch, for checkpoints whose clocks disagree."""
    return (_EPOCH + timedelta(seconds=seconds)).isoformat()


class Book:
    """The checkpoints of one clause: readable ids ``<workflow>-<label>``, named by label."""

    def __init__(self, ctx: ClauseContext, label: str = "walk") -> None:
        self.ctx = ctx
        self.workflow = ctx.workflow_name(label)
        self._labels: dict[str, str] = {}
        self._keys: dict[str, str] = {}
        """label -> key, for checkpoints whose id is built from a key rather than the label."""

    def id(self, label: str) -> str:
        """The id ``label`` stands for (a checkpoint of this book, or one never saved)."""
        checkpoint_id = f"{self.workflow}-{label}"
        self._labels[checkpoint_id] = label
        return checkpoint_id

    def make(
        self,
        label: str,
        *,
        previous: str | None = None,
        workflow: str | None = None,
        key: str | None = None,
        **fields: Any,
    ) -> Any:
        """A checkpoint labelled ``label`` (id from ``key`` if given), in this book's workflow
        unless ``workflow`` names another, with ``previous`` as its previous id."""
        checkpoint_id = self.id(key if key is not None else label)
        self._labels[checkpoint_id] = label
        if key is not None:
            self._keys[label] = key
        return self.ctx.checkpoint(
            workflow if workflow is not None else self.workflow,
            checkpoint_id=checkpoint_id,
            previous_checkpoint_id=previous,
            **fields,
        )

    async def save(self, label: str, *, storage: Any = None, **options: Any) -> Any:
        """Make a checkpoint (see :meth:`make`), save it and return it."""
        checkpoint = self.make(label, **options)
        await (self.ctx.storage if storage is None else storage).save(checkpoint)
        return checkpoint

    async def chain(
        self, length: int, *, prefix: str = "c", previous: str | None = None, **fields: Any
    ) -> list[Any]:
        """Save ``prefix0`` ... ``prefix<length-1>``, each the previous one's child; oldest first."""
        chain: list[Any] = []
        for index in range(length):
            checkpoint = await self.save(
                f"{prefix}{index}", previous=previous, iteration_count=index, **fields
            )
            chain.append(checkpoint)
            previous = checkpoint.checkpoint_id
        return chain

    def name(self, checkpoint_id: object) -> str:
        if isinstance(checkpoint_id, str) and checkpoint_id in self._labels:
            return self._labels[checkpoint_id]
        return repr(checkpoint_id)

    def show(self, ids: Sequence[object]) -> str:
        shown = ", ".join(self.name(i) for i in ids[:_SHOWN_ITEMS])
        if len(ids) > _SHOWN_ITEMS:
            shown += f", ... ({len(ids)} items)"
        return f"[{shown}]"

    @property
    def legend(self) -> str:
        keyed = "".join(f", {label} for '-{key}'" for label, key in self._keys.items())
        return f"(a label L stands for checkpoint id '{self.workflow}-L'{keyed})"


def ids_of(checkpoints: Sequence[Any]) -> list[str]:
    return [c.checkpoint_id for c in checkpoints]


async def answer(call: str, pending: Awaitable[T]) -> T:
    """The result of ``pending``; if it raises, the clause fails naming ``call`` and the error."""
    try:
        return await pending
    except Exception as exc:
        fail(f"{call} raised {type(exc).__name__}: {exc}")


def _end_name(end: object) -> str:
    return str(getattr(end, "value", end))


async def expect_walk(
    book: Book,
    start: str,
    expected: Sequence[Any],
    end: AncestryEnd,
    end_id: str,
    *,
    when: str = "",
    storage: Any = None,
    max_depth: int | None = None,
) -> None:
    """Both walks from ``start`` give ``expected`` (checkpoints, newest first) and stop with
    ``end`` at ``end_id``; walk_ancestry's items must also equal the checkpoints saved."""
    storage = book.ctx.storage if storage is None else storage
    options: dict[str, Any] = {} if max_depth is None else {"max_depth": max_depth}
    depth = "" if max_depth is None else f", max_depth={max_depth}"
    suffix = f" {when}" if when else ""
    wanted = f"{book.show(ids_of(expected))} ending {end.value} at {book.name(end_id)}"

    def check(call: str, walk: Any, got_ids: list[Any]) -> None:
        got = f"{book.show(got_ids)} ending {_end_name(walk.end)} at {book.name(walk.end_id)}"
        ensure(
            got_ids == ids_of(expected) and walk.end == end and walk.end_id == end_id,
            f"{call}{suffix} returned {got}, expected {wanted} {book.legend}",
        )

    call = f"walk_ancestry_ids({book.name(start)}{depth})"
    walk = await answer(f"{call}{suffix}", storage.walk_ancestry_ids(start, **options))
    _ensure_walk_shape(call, walk)
    check(call, walk, list(walk.items))

    call = f"walk_ancestry({book.name(start)}{depth})"
    walk = await answer(f"{call}{suffix}", storage.walk_ancestry(start, **options))
    _ensure_walk_shape(call, walk)
    items = list(walk.items)
    check(call, walk, [getattr(item, "checkpoint_id", item) for item in items])
    for item, checkpoint in zip(items, expected, strict=True):
        problem = first_difference(checkpoint, item)
        if problem is not None:
            label = book.name(checkpoint.checkpoint_id)
            fail(f"{call}{suffix}: item {label} differs from what was saved: {problem}")


def _ensure_walk_shape(call: str, walk: Any) -> None:
    ensure(
        all(hasattr(walk, name) for name in ("items", "end", "end_id")),
        f"{call} returned {walk!r}, not an AncestryWalk (items, end, end_id)",
    )


async def expect_raises(
    error: type[BaseException],
    call: str,
    operation: Callable[..., Awaitable[Any]],
    *args: Any,
    **kwargs: Any,
) -> None:
    """``operation(*args, **kwargs)`` must raise ``error``; anything else, or returning, fails
    naming ``call``."""
    try:
        result = await operation(*args, **kwargs)
    except error:
        return
    except Exception as exc:
        fail(f"{call} raised {type(exc).__name__}: {exc}; expected {error.__name__}")
    fail(f"{call} returned {_short(result)}; expected it to raise {error.__name__}")


async def expect_gone(book: Book, checkpoint_id: str, when: str, storage: Any = None) -> None:
    """load(checkpoint_id) raises CheckpointNotFoundError."""
    storage = book.ctx.storage if storage is None else storage
    try:
        loaded = await storage.load(checkpoint_id)
    except Exception as exc:
        if is_not_found(exc):
            return
        fail(
            f"load({book.name(checkpoint_id)}) {when} raised {type(exc).__name__}: {exc}, "
            f"not CheckpointNotFoundError {book.legend}"
        )
    fail(
        f"load({book.name(checkpoint_id)}) {when} returned checkpoint "
        f"{book.name(getattr(loaded, 'checkpoint_id', loaded))}; it should be gone {book.legend}"
    )


async def expect_loads_equal(book: Book, checkpoint: Any, when: str, storage: Any = None) -> None:
    storage = book.ctx.storage if storage is None else storage
    try:
        loaded = await storage.load(checkpoint.checkpoint_id)
    except Exception as exc:
        fail(
            f"load({book.name(checkpoint.checkpoint_id)}) {when} raised {type(exc).__name__}: {exc} "
            f"{book.legend}"
        )
    problem = first_difference(checkpoint, loaded)
    if problem is not None:
        fail(f"load({book.name(checkpoint.checkpoint_id)}) {when}: {problem} {book.legend}")


async def expect_listed(book: Book, workflow_name: str, expected: Sequence[Any], when: str) -> None:
    """list_checkpoint_ids(workflow_name) is exactly ``expected``, in that (commit) order."""
    listed = await book.ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure(
        list(listed) == ids_of(expected),
        f"list_checkpoint_ids(workflow_name={workflow_name!r}) {when} returned {book.show(list(listed))}, "
        f"expected {book.show(ids_of(expected))} {book.legend}",
    )


async def expect_latest(book: Book, workflow_name: str, expected: Any, when: str) -> None:
    latest = await book.ctx.storage.get_latest(workflow_name=workflow_name)
    got = None if latest is None else latest.checkpoint_id
    wanted = None if expected is None else expected.checkpoint_id
    ensure(
        got == wanted,
        f"get_latest(workflow_name={workflow_name!r}) {when} returned {book.name(got)}, "
        f"expected {book.name(wanted)} {book.legend}",
    )


def sub_workflow_state(child: Any) -> dict[str, Any]:
    """State embedding ``child`` where MAF keeps a sub-workflow's checkpoint."""
    return {"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}}


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------- clauses


@clause(
    "ancestry.walk_to_root",
    "From every checkpoint of a chain, walk_ancestry returns the saved checkpoints newest first (and "
    "walk_ancestry_ids their ids) down to the root, ending ROOT at the root's id.",
    requires=_ANCESTRY,
)
async def walk_to_root(ctx: ClauseContext) -> None:
    book = Book(ctx)
    chain = await book.chain(5)
    root = chain[0].checkpoint_id
    for index in reversed(range(len(chain))):
        await expect_walk(book, chain[index].checkpoint_id, chain[index::-1], AncestryEnd.ROOT, root)


@clause(
    "ancestry.long_chain",
    f"A walk from the tip of a {LONG_CHAIN}-checkpoint chain, and from its middle, reaches the root "
    "with every checkpoint in order.",
    requires=_ANCESTRY,
)
async def long_chain(ctx: ClauseContext) -> None:
    book = Book(ctx, "long")
    chain = await book.chain(LONG_CHAIN)
    root = chain[0].checkpoint_id
    middle = LONG_CHAIN // 2
    await expect_walk(book, chain[-1].checkpoint_id, chain[::-1], AncestryEnd.ROOT, root)
    await expect_walk(book, chain[middle].checkpoint_id, chain[middle::-1], AncestryEnd.ROOT, root)


@clause(
    "ancestry.depth_limit",
    "With max_depth=N below the chain's length a walk returns exactly the N newest checkpoints and ends "
    "DEPTH_LIMIT at the N-th; with N at or above it, the walk reaches the root.",
    requires=_ANCESTRY,
)
async def depth_limit(ctx: ClauseContext) -> None:
    book = Book(ctx, "depth")
    chain = await book.chain(6)
    newest_first = chain[::-1]
    tip, root = chain[-1].checkpoint_id, chain[0].checkpoint_id
    for max_depth in (1, 3, 5):
        kept = newest_first[:max_depth]
        await expect_walk(
            book, tip, kept, AncestryEnd.DEPTH_LIMIT, kept[-1].checkpoint_id, max_depth=max_depth
        )
    # 2**64 does not fit a 64-bit database integer: "no practical limit" must still just work.
    for max_depth in (6, 7, 2**64):
        await expect_walk(book, tip, newest_first, AncestryEnd.ROOT, root, max_depth=max_depth)
    await expect_walk(book, root, chain[:1], AncestryEnd.ROOT, root, max_depth=1)


@clause(
    "ancestry.invalid_max_depth",
    "max_depth of 0, -1, True, '3' or 2.5 makes both walks raise InvalidCheckpointError.",
    requires=_ANCESTRY,
)
async def invalid_max_depth(ctx: ClauseContext) -> None:
    book = Book(ctx, "bad-depth")
    chain = await book.chain(2)
    tip = chain[-1].checkpoint_id
    for bad in (0, -1, True, "3", 2.5):
        for operation in ("walk_ancestry_ids", "walk_ancestry"):
            await expect_raises(
                InvalidCheckpointError,
                f"{operation}({book.name(tip)}, max_depth={bad!r})",
                getattr(ctx.storage, operation),
                tip,
                max_depth=bad,
            )


@clause(
    "ancestry.cycle_is_reported",
    "A walk into a cycle (A and B each other's previous, or a checkpoint its own previous) stops after "
    "one lap and ends CYCLE at the id that repeats; it never loops.",
    requires=_ANCESTRY,
    timeout=10,
)
async def cycle_is_reported(ctx: ClauseContext) -> None:
    book = Book(ctx, "cycle")
    # A's previous is B before B exists; B's previous is A: the pair closes a loop.
    a = await book.save("A", previous=book.id("B"))
    b = await book.save("B", previous=a.checkpoint_id)
    tail = await book.save("T", previous=a.checkpoint_id)
    itself = await book.save("S", previous=book.id("S"))
    await expect_walk(book, a.checkpoint_id, [a, b], AncestryEnd.CYCLE, a.checkpoint_id)
    await expect_walk(book, b.checkpoint_id, [b, a], AncestryEnd.CYCLE, b.checkpoint_id)
    await expect_walk(book, tail.checkpoint_id, [tail, a, b], AncestryEnd.CYCLE, a.checkpoint_id)
    await expect_walk(book, itself.checkpoint_id, [itself], AncestryEnd.CYCLE, itself.checkpoint_id)


@clause(
    "ancestry.dangling_link_is_missing",
    "A walk whose previous id was never saved ends MISSING at that id with every checkpoint before it "
    "intact; it is never reported as ROOT.",
    requires=_ANCESTRY,
)
async def dangling_link_is_missing(ctx: ClauseContext) -> None:
    book = Book(ctx, "dangling")
    ghost = book.id("ghost")
    chain = await book.chain(3, previous=ghost)
    for index in reversed(range(len(chain))):
        await expect_walk(book, chain[index].checkpoint_id, chain[index::-1], AncestryEnd.MISSING, ghost)


@clause(
    "ancestry.unknown_start_not_found",
    "Walking from an id never saved, or from a deleted checkpoint, raises CheckpointNotFoundError.",
    requires=_ANCESTRY,
)
async def unknown_start_not_found(ctx: ClauseContext) -> None:
    book = Book(ctx, "unknown")
    chain = await book.chain(2)
    deleted = chain[-1].checkpoint_id
    await ctx.storage.delete(deleted)
    for start, what in ((book.id("never-saved"), "never saved"), (deleted, "deleted")):
        for operation in ("walk_ancestry_ids", "walk_ancestry"):
            await expect_raises(
                CheckpointNotFoundError,
                f"{operation}({book.name(start)}) of a checkpoint {what}",
                getattr(ctx.storage, operation),
                start,
            )


@clause(
    "ancestry.forks_stay_walkable",
    "Saving again from mid-chain checkpoints forks the history: every branch walks through the shared "
    "prefix to the same root, and get_latest and listing follow commit order across branches.",
    requires=_ANCESTRY,
)
async def forks_stay_walkable(ctx: ClauseContext) -> None:
    book = Book(ctx, "fork")
    workflow = book.workflow
    saved: list[Any] = []

    async def save(label: str, previous: Any, clock: int) -> Any:
        # Clocks disagree with commit order (the last branch tip carries the oldest timestamp),
        # except between rivals (leaves continuing one checkpoint), where the newest timestamp
        # is the latest: d, saved as c's rival, is newer than c.
        checkpoint = await book.save(
            label, previous=None if previous is None else previous.checkpoint_id, timestamp=at(clock)
        )
        saved.append(checkpoint)
        await expect_latest(book, workflow, checkpoint, f"right after saving {label}")
        return checkpoint

    r = await save("r", None, 50)
    a = await save("a", r, 60)
    b = await save("b", a, 70)
    c = await save("c", b, 80)
    resumed = await ctx.storage.load(b.checkpoint_id)  # resume from b, as MAF's runner would
    d = await save("d", resumed, 90)
    e = await save("e", d, 45)
    f = await save("f", a, 10)  # a second fork, further back
    await expect_listed(book, workflow, saved, "after forking at b and at a")
    root = r.checkpoint_id
    for tip, expected in ((c, [c, b, a, r]), (e, [e, d, b, a, r]), (f, [f, a, r])):
        await expect_walk(book, tip.checkpoint_id, expected, AncestryEnd.ROOT, root, when="after forking")


@clause(
    "ancestry.walks_through_nested",
    "A walk steps into embedded (sub-workflow) checkpoints by id: from a checkpoint whose previous id is "
    "an embedded one, through that one's own previous ids in other containers, to their root.",
    requires=[Capability.ANCESTRY, Capability.NESTED],
)
async def walks_through_nested(ctx: ClauseContext) -> None:
    book = Book(ctx, "outer")
    sub = ctx.workflow_name("sub")
    n0 = book.make("n0", workflow=sub)
    n1 = book.make("n1", workflow=sub, previous=n0.checkpoint_id)
    t0 = await book.save("t0", state=sub_workflow_state(n0))
    t1 = await book.save("t1", previous=t0.checkpoint_id, state=sub_workflow_state(n1))
    # The sub-workflow resumed on its own: a top-level checkpoint continuing the embedded chain.
    resumed = await book.save("r", workflow=sub, previous=n1.checkpoint_id)
    n0_id = n0.checkpoint_id
    await expect_walk(book, resumed.checkpoint_id, [resumed, n1, n0], AncestryEnd.ROOT, n0_id)
    await expect_walk(book, n1.checkpoint_id, [n1, n0], AncestryEnd.ROOT, n0_id)
    await expect_walk(book, t1.checkpoint_id, [t1, t0], AncestryEnd.ROOT, t0.checkpoint_id)


@clause(
    "ancestry.walk_from_other_handle",
    "Chains saved through one handle walk the same from another handle, both ways round.",
    requires=[Capability.ANCESTRY, Capability.SHARED],
)
async def walk_from_other_handle(ctx: ClauseContext) -> None:
    book = Book(ctx, "handles")
    other = await ctx.other_handle()
    first = await book.chain(3)
    more = await book.chain(2, prefix="d", previous=first[-1].checkpoint_id)
    ghost = book.id("ghost")
    dangling = await book.save("x", previous=ghost, storage=other)
    whole = first + more
    root = first[0].checkpoint_id
    await expect_walk(
        book,
        more[-1].checkpoint_id,
        whole[::-1],
        AncestryEnd.ROOT,
        root,
        storage=other,
        when="on a second handle",
    )
    tail = await book.save("e", previous=more[-1].checkpoint_id, storage=other)
    await expect_walk(
        book,
        tail.checkpoint_id,
        [tail, *whole[::-1]],
        AncestryEnd.ROOT,
        root,
        when="on the first handle, saved on the second",
    )
    await expect_walk(
        book,
        dangling.checkpoint_id,
        [dangling],
        AncestryEnd.MISSING,
        ghost,
        when="on the first handle, saved on the second",
    )


@clause(
    "ancestry.walk_after_reopen",
    "After every handle closes and the storage is built anew from its settings, it walks chains, "
    "dangling links and cycles as before.",
    requires=[Capability.ANCESTRY, Capability.DURABLE],
)
async def walk_after_reopen(ctx: ClauseContext) -> None:
    book = Book(ctx, "reopen")
    chain = await book.chain(4)
    ghost = book.id("ghost")
    dangling = await book.chain(2, prefix="m", previous=ghost)
    a = await book.save("A", previous=book.id("B"))
    b = await book.save("B", previous=a.checkpoint_id)
    storage = await rebuilt(ctx)  # not a new handle, which may share this process's memory
    when = "after reopening"
    root = chain[0].checkpoint_id
    await expect_walk(book, chain[-1].checkpoint_id, chain[::-1], AncestryEnd.ROOT, root, when=when)
    await expect_walk(book, dangling[-1].checkpoint_id, dangling[::-1], AncestryEnd.MISSING, ghost, when=when)
    await expect_walk(
        book, b.checkpoint_id, [b, a], AncestryEnd.CYCLE, b.checkpoint_id, when=when, storage=storage
    )


@clause(
    "ancestry.walks_across_workflow_names",
    "A walk follows previous ids into checkpoints saved under other workflow names, hop after hop, to "
    "the root, and reports a pruned ancestor in another workflow as PRUNED.",
    requires=_ANCESTRY,
)
async def walks_across_workflow_names(ctx: ClauseContext) -> None:
    book = Book(ctx, "names")
    # Three top-level workflows chained into one another, as a run continued under a new name.
    first, second = ctx.workflow_name("first"), ctx.workflow_name("second")
    a0 = await book.save("a0", workflow=first)
    a1 = await book.save("a1", workflow=first, previous=a0.checkpoint_id)
    b0 = await book.save("b0", workflow=second, previous=a1.checkpoint_id)
    c0 = await book.save("c0", previous=b0.checkpoint_id)
    c1 = await book.save("c1", previous=c0.checkpoint_id)
    root = a0.checkpoint_id
    await expect_walk(book, c1.checkpoint_id, [c1, c0, b0, a1, a0], AncestryEnd.ROOT, root)
    await expect_walk(book, b0.checkpoint_id, [b0, a1, a0], AncestryEnd.ROOT, root)
    if ctx.has(Capability.PRUNE):
        await answer(f"prune({first!r}, keep_last=1)", ctx.storage.prune(workflow_name=first, keep_last=1))
        when = f"after prune(workflow_name={first!r}, keep_last=1)"
        await expect_walk(book, c1.checkpoint_id, [c1, c0, b0, a1], AncestryEnd.PRUNED, root, when=when)


@clause(
    "ancestry.dangling_link_kept_as_given",
    "A previous id that was never saved, anywhere in a chain, is stored exactly as given (never "
    "repaired to another checkpoint) and every walk through it ends MISSING at that id.",
    requires=_ANCESTRY,
)
async def dangling_link_kept_as_given(ctx: ClauseContext) -> None:
    book = Book(ctx, "gap")
    head = await book.chain(3, prefix="h")
    ghost = book.id("ghost")
    # The break is mid-chain, after checkpoints a storage could "repair" it to (the latest, h2).
    tail = await book.chain(3, prefix="t", previous=ghost)
    loaded = await answer(
        f"load({book.name(tail[0].checkpoint_id)})", ctx.storage.load(tail[0].checkpoint_id)
    )
    ensure(
        loaded.previous_checkpoint_id == ghost,
        f"load(t0).previous_checkpoint_id is {book.name(loaded.previous_checkpoint_id)}, expected the "
        f"dangling id ghost exactly as saved {book.legend}",
    )
    if ctx.has(Capability.INSPECT):
        info = await answer("checkpoint_info(t0)", ctx.storage.checkpoint_info(tail[0].checkpoint_id))
        recorded = getattr(info, "previous_checkpoint_id", None)
        ensure(
            recorded == ghost,
            f"checkpoint_info(t0).previous_checkpoint_id is {book.name(recorded)}, expected ghost "
            f"{book.legend}",
        )
    for index in reversed(range(len(tail))):
        await expect_walk(book, tail[index].checkpoint_id, tail[index::-1], AncestryEnd.MISSING, ghost)
    await expect_walk(book, head[-1].checkpoint_id, head[::-1], AncestryEnd.ROOT, head[0].checkpoint_id)
