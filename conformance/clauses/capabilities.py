"""capabilities: declared capabilities work; undeclared operations raise UnsupportedOperationError.

There is one clause per operation capability (``storages.contract.OPERATION_CAPABILITIES``), and
each checks the declaration both ways. Declared: a small call does what the capability promises.
Undeclared: every operation it gates raises UnsupportedOperationError, and changes nothing. A
third-party storage may simply lack the method (or, for an extension keyword of MAF's methods,
the keyword): that is an honest refusal too. A method that exists and quietly returns, or a
keyword that is quietly ignored, is the failure these clauses exist to catch.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections import Counter
from collections.abc import Callable, Set
from operator import attrgetter
from typing import Any, TypeVar

from storages.contract import AncestryEnd, Capability, PendingWrite
from storages.errors import CheckpointNotFoundError, StaleWriterError, UnsupportedOperationError

from ..clause import clause, ensure, ensure_equal, fail
from ..context import WORKFLOW_NAME_PREFIX, ClauseContext
from ._maf import is_not_found
from .fidelity import first_difference
from .nested import sub_workflow_state


async def expect_refused(
    ctx: ClauseContext,
    capability: Capability,
    operation: str,
    *args: Any,
    keyword: str | None = None,
    **kwargs: Any,
) -> None:
    """Calling ``operation`` must raise UnsupportedOperationError, or the storage must lack it.

    ``keyword`` names an extension keyword of one of MAF's methods: a storage whose signature
    lacks it refuses with TypeError, which is as honest as a missing method.
    """
    method = getattr(ctx.storage, operation, None)
    if method is None:
        return
    call = f"{operation}({', '.join([*map(repr, args), *(f'{k}={v!r}' for k, v in kwargs.items())])})"
    try:
        result = await method(*args, **kwargs)
    except UnsupportedOperationError:
        return
    except TypeError as exc:
        if keyword is not None and keyword in str(exc):
            return
        fail(
            f"{call} raised TypeError: {exc}; with {capability.value!r} undeclared it must raise "
            "UnsupportedOperationError"
        )
    except Exception as exc:
        fail(
            f"{call} raised {type(exc).__name__}: {exc}; with {capability.value!r} undeclared it must raise "
            "UnsupportedOperationError"
        )
    fail(
        f"{call} returned {_show(result)} although capability {capability.value!r} is not declared; "
        "it must raise UnsupportedOperationError"
    )


def _show(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ids(checkpoints: list[Any]) -> list[str]:
    return [c.checkpoint_id for c in checkpoints]


async def _ensure_unchanged(ctx: ClauseContext, saved: list[Any], after: str) -> None:
    workflow_name = saved[0].workflow_name
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    # Order is the ordering family's business; here only what is stored matters.
    ensure_equal(sorted(ids), sorted(_ids(saved)), f"ids listed for {workflow_name!r} after {after}")
    for checkpoint in saved:
        problem = first_difference(checkpoint, await ctx.storage.load(checkpoint.checkpoint_id))
        if problem is not None:
            fail(f"load({checkpoint.checkpoint_id!r}) after {after}: {problem}")


@clause(
    "capabilities.signature_filter",
    "Declared: graph_signature_hash= filters get_latest and list_*; undeclared: passing it is refused.",
)
async def signature_filter(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("signatures")
    first = ctx.checkpoint(workflow_name, graph_signature_hash="sig-filter-a")
    other = ctx.checkpoint(workflow_name, graph_signature_hash="sig-filter-b")
    last = ctx.checkpoint(workflow_name, graph_signature_hash="sig-filter-a")
    for checkpoint in (first, other, last):
        await ctx.storage.save(checkpoint)
    storage = ctx.storage
    if not ctx.has(Capability.SIGNATURE_FILTER):
        for operation in ("get_latest", "list_checkpoints", "list_checkpoint_ids"):
            await expect_refused(
                ctx,
                Capability.SIGNATURE_FILTER,
                operation,
                keyword="graph_signature_hash",
                workflow_name=workflow_name,
                graph_signature_hash="sig-filter-b",
            )
        return
    latest_a = await storage.get_latest(workflow_name=workflow_name, graph_signature_hash="sig-filter-a")
    ensure_equal(
        getattr(latest_a, "checkpoint_id", None), last.checkpoint_id, "get_latest id for signature a"
    )
    latest_b = await storage.get_latest(workflow_name=workflow_name, graph_signature_hash="sig-filter-b")
    ensure_equal(
        getattr(latest_b, "checkpoint_id", None), other.checkpoint_id, "get_latest id for signature b"
    )
    none = await storage.get_latest(workflow_name=workflow_name, graph_signature_hash="sig-filter-unknown")
    ensure(none is None, f"get_latest for an unused signature returned {_show(none)}, not None")
    ids_a = await storage.list_checkpoint_ids(
        workflow_name=workflow_name, graph_signature_hash="sig-filter-a"
    )
    ensure_equal(ids_a, _ids([first, last]), "list_checkpoint_ids for signature a")
    listed_b = await storage.list_checkpoints(
        workflow_name=workflow_name, graph_signature_hash="sig-filter-b"
    )
    ensure_equal(listed_b, [other], "list_checkpoints for signature b")
    unknown = await storage.list_checkpoint_ids(
        workflow_name=workflow_name, graph_signature_hash="sig-filter-unknown"
    )
    ensure_equal(unknown, [], "list_checkpoint_ids for an unused signature")


@clause(
    "capabilities.ancestry",
    "Declared: walk_ancestry and walk_ancestry_ids walk to the root; undeclared: both are refused.",
)
async def ancestry(ctx: ClauseContext) -> None:
    chain = await ctx.save_chain(ctx.workflow_name("ancestry"), 3)
    newest = chain[-1].checkpoint_id
    if not ctx.has(Capability.ANCESTRY):
        for operation in ("walk_ancestry", "walk_ancestry_ids"):
            await expect_refused(ctx, Capability.ANCESTRY, operation, newest)
        return
    walk_ids = await ctx.storage.walk_ancestry_ids(newest)
    ensure(walk_ids is not None, f"walk_ancestry_ids({newest!r}) returned None")
    ensure_equal(list(walk_ids.items), _ids(chain)[::-1], f"walk_ancestry_ids({newest!r}) items")
    ensure_equal(walk_ids.end, AncestryEnd.ROOT, f"walk_ancestry_ids({newest!r}) end")
    ensure_equal(walk_ids.end_id, chain[0].checkpoint_id, f"walk_ancestry_ids({newest!r}) end_id")
    walk = await ctx.storage.walk_ancestry(newest)
    ensure(walk is not None, f"walk_ancestry({newest!r}) returned None")
    ensure_equal(list(walk.items), chain[::-1], f"walk_ancestry({newest!r}) items")
    ensure_equal(walk.end, AncestryEnd.ROOT, f"walk_ancestry({newest!r}) end")


@clause(
    "capabilities.nested",
    "Declared: list_nested names embedded checkpoints, include_nested= works; undeclared: both refused.",
)
async def nested(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("nested")
    child = ctx.checkpoint(ctx.workflow_name("nested-child"), state={"leaf": True})
    parent = ctx.checkpoint(
        workflow_name, state={"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}}
    )
    await ctx.storage.save(parent)
    if not ctx.has(Capability.NESTED):
        await expect_refused(ctx, Capability.NESTED, "list_nested", parent.checkpoint_id)
        for operation in ("list_checkpoints", "list_checkpoint_ids"):
            await expect_refused(
                ctx,
                Capability.NESTED,
                operation,
                keyword="include_nested",
                workflow_name=workflow_name,
                include_nested=True,
            )
        return
    nested_ids = await ctx.storage.list_nested(parent.checkpoint_id)
    ensure(
        isinstance(nested_ids, list) and child.checkpoint_id in nested_ids,
        f"list_nested({parent.checkpoint_id!r}) returned {_show(nested_ids)}, "
        f"without embedded {child.checkpoint_id!r}",
    )
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name, include_nested=True)
    ensure(
        isinstance(ids, list) and parent.checkpoint_id in ids,
        f"list_checkpoint_ids(include_nested=True) returned {_show(ids)}, without {parent.checkpoint_id!r}",
    )


@clause(
    "capabilities.prune",
    "Declared: prune(keep_last=) and delete_workflow() delete and count; undeclared: refused, no deletes.",
)
async def prune(ctx: ClauseContext) -> None:
    chain = await ctx.save_chain(ctx.workflow_name("prune"), 5)
    workflow_name = chain[0].workflow_name
    if not ctx.has(Capability.PRUNE):
        await expect_refused(ctx, Capability.PRUNE, "prune", workflow_name=workflow_name, keep_last=1)
        await expect_refused(ctx, Capability.PRUNE, "delete_workflow", workflow_name=workflow_name)
        await _ensure_unchanged(ctx, chain, "refused prune and delete_workflow calls")
        return
    removed = await ctx.storage.prune(workflow_name=workflow_name, keep_last=2)
    ensure_equal(removed, 3, "prune(keep_last=2) of 5 checkpoints: count removed")
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(ids, _ids(chain[-2:]), "list_checkpoint_ids after prune(keep_last=2)")
    deleted = await ctx.storage.delete_workflow(workflow_name=workflow_name)
    ensure_equal(deleted, 2, "delete_workflow() of 2 remaining checkpoints: count deleted")
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(ids, [], "list_checkpoint_ids after delete_workflow()")
    latest = await ctx.storage.get_latest(workflow_name=workflow_name)
    ensure(latest is None, f"get_latest after delete_workflow() returned {_show(latest)}")


@clause(
    "capabilities.ttl",
    "Declared: the storage's ttl is None or a positive duration; undeclared: no ttl is configured.",
)
async def ttl(ctx: ClauseContext) -> None:
    # The contract has no TTL operation yet (expiry itself is checked when one lands), so this
    # checks the declaration against the one observable: the storage's configured ``ttl``.
    storage = ctx.storage
    if not ctx.has(Capability.TTL):
        configured = getattr(storage, "ttl", None)
        ensure(
            configured is None,
            f"the storage has ttl={configured!r} configured but does not declare the 'ttl' capability",
        )
        return
    ensure(hasattr(storage, "ttl"), "the storage declares 'ttl' but has no ttl attribute")
    value = storage.ttl
    if value is None:
        return
    if isinstance(value, dt.timedelta):
        ensure(value > dt.timedelta(0), f"ttl is {value!r}; a time to live must be positive")
        return
    ensure(
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0,
        f"ttl is {value!r}; expected None, a positive number of seconds or a positive timedelta",
    )


@clause(
    "capabilities.list_workflows",
    "Declared: list_workflows() names exactly the workflows holding top-level checkpoints (not one only "
    "embedded checkpoints carry); undeclared: refused.",
)
async def list_workflows(ctx: ClauseContext) -> None:
    kept = await ctx.save_chain(ctx.workflow_name("listed"), 2)
    emptied = await ctx.save_chain(ctx.workflow_name("emptied"), 1)
    only_embedded = ctx.checkpoint(ctx.workflow_name("listed-only-embedded"))
    if ctx.has(Capability.NESTED):
        await ctx.storage.save(
            ctx.checkpoint(ctx.workflow_name("listed-container"), state=sub_workflow_state(only_embedded))
        )
    if not ctx.has(Capability.LIST_WORKFLOWS):
        await expect_refused(ctx, Capability.LIST_WORKFLOWS, "list_workflows")
        return
    names = await ctx.storage.list_workflows()
    ensure(isinstance(names, list), f"list_workflows() returned {_show(names)}, not a list")
    for checkpoint in (kept[0], emptied[0]):
        ensure(checkpoint.workflow_name in names, f"list_workflows() lacks {checkpoint.workflow_name!r}")
    ensure(
        only_embedded.workflow_name not in names,
        f"list_workflows() names {only_embedded.workflow_name!r}, whose only checkpoint is embedded in "
        "another's: a workflow is listed for its top-level checkpoints",
    )
    await ctx.storage.delete(emptied[0].checkpoint_id)
    names = await ctx.storage.list_workflows()
    ensure(
        emptied[0].workflow_name not in names,
        f"list_workflows() still names {emptied[0].workflow_name!r} after its only checkpoint was deleted",
    )
    ensure(kept[0].workflow_name in names, f"list_workflows() lost {kept[0].workflow_name!r}")
    # Exactly: every name it lists holds checkpoints of this store, not a name another store of
    # the target (another prefix on the same server, where the factory opens one) saved under. A
    # name another writer emptied meanwhile is listed no more when asked again.
    elsewhere = await ctx.factory_handle()
    await elsewhere.save(ctx.checkpoint(ctx.workflow_name("listed-elsewhere")))
    names = await ctx.storage.list_workflows()
    empty = [n for n in foreign_first(names, str)[:_NAMES_CHECKED] if not await _holds_checkpoints(ctx, n)]
    if empty:
        again = await ctx.storage.list_workflows()
        empty = [n for n in empty if n in again]
    ensure(
        not empty,
        f"list_workflows() names {len(empty)} workflow(s) holding no top-level checkpoint of this store: "
        f"{', '.join(repr(n) for n in empty[:5])}",
    )


_NAMES_CHECKED = 64
"""How many listed names list_workflows' clause asks for checkpoints (a store left with many)."""

T = TypeVar("T")


def foreign_first(items: list[T], name_of: Callable[[T], str]) -> list[T]:
    """``items`` with those of workflows the kit did not make first: on a store the clauses
    filled, a name leaking in from elsewhere (another tenant, another prefix) is then among the
    ones checked, wherever it sorts."""
    return sorted(items, key=lambda item: name_of(item).startswith(WORKFLOW_NAME_PREFIX))


async def _holds_checkpoints(ctx: ClauseContext, workflow_name: str) -> bool:
    """Whether the workflow holds a top-level checkpoint."""
    return bool(await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name))


@clause(
    "capabilities.raw_access",
    "Declared: read_raw_body/write_raw_body read and replace stored bytes exactly, read back as bytes (NUL "
    "and blank bytes at either end included; a replacement made beside a save is kept); undeclared: refused, "
    "no writes.",
)
async def raw_access(ctx: ClauseContext) -> None:
    saved = await ctx.save_chain(ctx.workflow_name("raw"), 1, state={"pair": (1, 2)})
    checkpoint_id = saved[0].checkpoint_id
    if not ctx.has(Capability.RAW_ACCESS):
        await expect_refused(ctx, Capability.RAW_ACCESS, "read_raw_body", checkpoint_id)
        await expect_refused(ctx, Capability.RAW_ACCESS, "write_raw_body", checkpoint_id, b"not a checkpoint")
        await _ensure_unchanged(ctx, saved, "refused raw access calls")
        return
    body = await ctx.storage.read_raw_body(checkpoint_id)
    ensure(
        isinstance(body, bytes) and len(body) > 0,
        f"read_raw_body({checkpoint_id!r}) returned {_show(body)}, not the stored bytes",
    )
    missing_id = f"missing-{ctx.workflow_name('raw-missing')}"
    nothing = await ctx.storage.read_raw_body(missing_id)
    ensure(
        nothing is None, f"read_raw_body({missing_id!r}) of an unknown id returned {_show(nothing)}, not None"
    )
    await _raw_bytes_kept_exactly(ctx, checkpoint_id, body)
    await ctx.storage.write_raw_body(checkpoint_id, body)
    await _ensure_unchanged(ctx, saved, "writing its own body back")
    await _replacement_beside_a_save(ctx, checkpoint_id, body)
    await _ensure_unchanged(ctx, saved, "writing its own body back after a replacement")
    try:
        await ctx.storage.write_raw_body(missing_id, body)
    except CheckpointNotFoundError:
        pass
    except Exception as exc:
        fail(f"write_raw_body({missing_id!r}) of an unknown id raised {type(exc).__name__}: {exc}")
    else:
        fail(
            f"write_raw_body({missing_id!r}) of an unknown id returned; it must raise CheckpointNotFoundError"
        )
    try:
        await ctx.storage.load(missing_id)
    except Exception as exc:
        if is_not_found(exc):
            return
        fail(f"load({missing_id!r}) after a refused raw write raised {type(exc).__name__}: {exc}")
    fail(f"write_raw_body({missing_id!r}) created a checkpoint under an unknown id")


async def _raw_bytes_kept_exactly(ctx: ClauseContext, checkpoint_id: str, body: bytes) -> None:
    """Raw bytes come back as written: a store that pads bodies into fixed blocks and strips the
    padding again, or trims what it stores, loses the NUL or blank bytes a body begins or ends
    with."""
    for written in (body + b"\x00\x00\x00", b"\x00 " + body + b" \n\x00"):
        await ctx.storage.write_raw_body(checkpoint_id, written)
        now = await ctx.storage.read_raw_body(checkpoint_id)
        # bytes, not a bytearray or memoryview that compares equal: callers hash, key and keep them.
        if not isinstance(now, bytes) or now != written:
            fail(
                f"read_raw_body({checkpoint_id!r}) after write_raw_body of {len(written)} bytes that begin "
                f"with {written[:2]!r} and end with {written[-3:]!r} returned {type(now).__name__} "
                f"{_show(now)}: raw bytes must come back exactly, as bytes"
            )


async def _replacement_beside_a_save(ctx: ClauseContext, checkpoint_id: str, body: bytes) -> None:
    """A replacement made while a save runs beside it, in either order, is kept: a store that
    publishes whole states must not publish one taken before the replacement."""
    stand_in = (await ctx.save_chain(ctx.workflow_name("raw-stand-in"), 1))[0]
    replacement = await ctx.storage.read_raw_body(stand_in.checkpoint_id)
    ensure(
        isinstance(replacement, bytes),
        f"read_raw_body({stand_in.checkpoint_id!r}) returned {_show(replacement)}",
    )
    for first in ("the save", "the replacement"):
        beside = ctx.checkpoint(ctx.workflow_name("raw-beside"))
        save, replace = ctx.storage.save(beside), ctx.storage.write_raw_body(checkpoint_id, replacement)
        await asyncio.gather(*((save, replace) if first == "the save" else (replace, save)))
        now = await ctx.storage.read_raw_body(checkpoint_id)
        if now != replacement:
            was = "the bytes it held before" if now == body else _show(now)
            fail(
                f"read_raw_body({checkpoint_id!r}) after write_raw_body of another checkpoint's bytes, made "
                f"while a save ran beside it ({first} started first), returned {was}: it was lost"
            )
        await ctx.storage.write_raw_body(checkpoint_id, body)


@clause(
    "capabilities.inspect",
    "Declared: checkpoint_info/list_records/list_tombstones (and iter_records, where offered, past the "
    "engine's own records in the index) describe stored records (embedded ones under their own workflow, "
    "whatever their containers'), sizes in stored bytes, an entry a raw write leaves as it was, and a "
    "deleted one no more; every entry of the whole store's list_records is one checkpoint_info describes; "
    "undeclared: refused.",
)
async def inspect(ctx: ClauseContext) -> None:
    saved = await ctx.save_chain(ctx.workflow_name("inspect"), 2)
    workflow_name = saved[0].workflow_name
    newest = saved[-1]
    if not ctx.has(Capability.INSPECT):
        await expect_refused(ctx, Capability.INSPECT, "checkpoint_info", newest.checkpoint_id)
        await expect_refused(ctx, Capability.INSPECT, "list_records", workflow_name=workflow_name)
        await expect_refused(ctx, Capability.INSPECT, "list_tombstones", workflow_name=workflow_name)
        return
    info = await ctx.storage.checkpoint_info(newest.checkpoint_id)
    ensure(info is not None, f"checkpoint_info({newest.checkpoint_id!r}) of a saved checkpoint returned None")
    described = (
        info.checkpoint_id,
        info.workflow_name,
        info.previous_checkpoint_id,
        info.graph_signature_hash,
    )
    ensure_equal(
        described,
        (newest.checkpoint_id, workflow_name, saved[0].checkpoint_id, newest.graph_signature_hash),
        f"checkpoint_info({newest.checkpoint_id!r}): id, workflow, previous id, signature",
    )
    ensure(
        info.container_id is None,
        f"checkpoint_info of a top-level checkpoint names container {info.container_id!r}",
    )
    ensure(info.size > 0, f"checkpoint_info({newest.checkpoint_id!r}).size is {info.size!r}")
    if ctx.has(Capability.RAW_ACCESS):
        stored = await ctx.storage.read_raw_body(newest.checkpoint_id)
        stored_size = None if stored is None else len(stored)
        ensure_equal(
            info.size,
            stored_size,
            f"checkpoint_info({newest.checkpoint_id!r}).size against the stored body's bytes (read_raw_body)",
        )
        # A raw write replaces a body; it is no commit: the record's index entry, its sequence
        # included, is what it was (a sequence taken from an object's version would move).
        assert stored is not None
        await ctx.storage.write_raw_body(newest.checkpoint_id, stored)
        ensure_equal(
            await ctx.storage.checkpoint_info(newest.checkpoint_id),
            info,
            f"checkpoint_info({newest.checkpoint_id!r}) after write_raw_body of its own bytes",
        )
    records = await ctx.storage.list_records(workflow_name=workflow_name)
    ensure_equal(
        [r.checkpoint_id for r in records], _ids(saved), f"list_records(workflow_name={workflow_name!r}) ids"
    )
    ensure(
        records[0].sequence < records[1].sequence,
        f"list_records sequences {[r.sequence for r in records]} do not rise in commit order",
    )
    tombstones = await ctx.storage.list_tombstones(workflow_name=workflow_name)
    ensure_equal(tombstones, [], f"list_tombstones of never-pruned workflow {workflow_name!r}")
    unknown = await ctx.storage.checkpoint_info(f"missing-{workflow_name}")
    ensure(unknown is None, f"checkpoint_info of an unknown id returned {_show(unknown)}, not None")
    # Described once, then deleted: the index no longer knows it (an entry kept in a cache is not
    # the index).
    await ctx.storage.delete(newest.checkpoint_id)
    gone = await ctx.storage.checkpoint_info(newest.checkpoint_id)
    ensure(gone is None, f"checkpoint_info({newest.checkpoint_id!r}) after its delete returned {_show(gone)}")
    remaining = await ctx.storage.list_records(workflow_name=workflow_name)
    ensure_equal(
        [r.checkpoint_id for r in remaining],
        _ids(saved[:1]),
        f"list_records(workflow_name={workflow_name!r}) ids after the newest was deleted",
    )
    if ctx.has(Capability.NESTED):
        await _embedded_listed_under_their_workflow(ctx)
    await _streamed_index_is_the_listing(ctx)
    await _whole_index_is_described(ctx)


EMBEDDING_WORKFLOWS = 8
"""Workflows each saving a checkpoint that embeds one of a single sub-workflow: a store placing
each save's family by its container's workflow (a shard, a partition) spreads them over places
other than the sub-workflow's own."""


async def _embedded_listed_under_their_workflow(ctx: ClauseContext) -> None:
    sub = ctx.workflow_name("inspect-sub")
    embedded: list[str] = []
    for index in range(EMBEDDING_WORKFLOWS):
        child = ctx.checkpoint(sub, iteration_count=index)
        parent = ctx.checkpoint(
            ctx.workflow_name(f"inspect-parent-{index}"),
            state={"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}},
        )
        await ctx.storage.save(parent)
        embedded.append(child.checkpoint_id)
    records = await ctx.storage.list_records(workflow_name=sub)
    ensure_equal(
        sorted(r.checkpoint_id for r in records),
        sorted(embedded),
        f"list_records(workflow_name={sub!r}) of a workflow whose checkpoints are each embedded in a "
        f"checkpoint of another of {EMBEDDING_WORKFLOWS} workflows",
    )


STREAM_PAGE = 2
"""A page size small enough that even a fresh store's records span several pages."""


async def _streamed_index_is_the_listing(ctx: ClauseContext) -> None:
    """A storage offering ``iter_records`` (the built-in ones; a backend pages it with
    ``records_after``) streams every record list_records lists, each once, in pages."""
    stream = getattr(ctx.storage, "iter_records", None)
    if stream is None:
        return
    workflow_name = ctx.workflow_name("streamed")
    chain = await ctx.save_chain(workflow_name, 5)
    # Ids that sort apart by case (upper case sorts before the digits' successors and lower-case
    # hex in code points, after them case-folded): pages must resume in the order they were cut.
    for prefix in ("Z", "a", "B"):
        cased = ctx.checkpoint(workflow_name, checkpoint_id=f"{prefix}-{workflow_name}")
        await ctx.storage.save(cased)
        chain.append(cased)
    if ctx.has(Capability.PENDING_WRITES):
        # The engine's own records are in the index too (their ids sort before every checkpoint's):
        # pages the backend shortens by leaving them out must not end the stream early.
        for index, checkpoint in enumerate(chain):
            await ctx.storage.put_writes(
                checkpoint.checkpoint_id,
                [PendingWrite("task", 0, "out", index)],
                workflow_name=checkpoint.workflow_name,
            )
    streamed = [info.checkpoint_id async for info in stream(page_size=STREAM_PAGE)]
    listed = [info.checkpoint_id for info in await ctx.storage.list_records()]
    repeated = sorted(item for item, times in Counter(streamed).items() if times > 1)
    ensure(not repeated, f"iter_records(page_size={STREAM_PAGE}) streamed {repeated[:3]} more than once")
    missing = sorted(set(listed) - set(streamed))
    ensure(
        not missing,
        f"iter_records(page_size={STREAM_PAGE}) left out {len(missing)} of the {len(listed)} records "
        f"list_records lists (first {missing[:3]}): its pages skip records",
    )
    extra = sorted(set(streamed) - set(listed))
    ensure(not extra, f"iter_records streamed {extra[:3]}, which list_records does not list")


async def _whole_index_is_described(ctx: ClauseContext) -> None:
    """Each entry list_records() lists for the whole store is one checkpoint_info knows, under
    the same id and workflow (entries of the kit's own workflows last, at most ``_NAMES_CHECKED``).
    An entry deleted meanwhile by another writer is listed no more when asked again."""
    records = await ctx.storage.list_records()
    unknown = []
    for record in foreign_first(records, attrgetter("workflow_name"))[:_NAMES_CHECKED]:
        info = await ctx.storage.checkpoint_info(record.checkpoint_id)
        if info is None or (info.checkpoint_id, info.workflow_name) != (
            record.checkpoint_id,
            record.workflow_name,
        ):
            unknown.append(record)
    if unknown:
        again = {(r.checkpoint_id, r.workflow_name) for r in await ctx.storage.list_records()}
        unknown = [r for r in unknown if (r.checkpoint_id, r.workflow_name) in again]
    ensure(
        not unknown,
        f"list_records() lists {len(unknown)} entries checkpoint_info does not describe as listed: "
        + ", ".join(f"{r.checkpoint_id!r} of workflow {r.workflow_name!r}" for r in unknown[:3]),
    )


@clause(
    "capabilities.declared_members",
    "The capabilities attribute is a set of Capability members or their string values, nothing else.",
)
async def declared_members(ctx: ClauseContext) -> None:
    storage = ctx.storage
    if not hasattr(storage, "capabilities"):
        # A storage written only for MAF's protocol declares nothing, which is a valid declaration.
        return
    declared = storage.capabilities
    ensure(
        isinstance(declared, Set),
        f"capabilities is a {type(declared).__name__} ({_show(declared)}); declare a frozenset of Capability",
    )
    values = {c.value for c in Capability}
    strays = [
        item
        for item in declared
        if not isinstance(item, Capability) and not (isinstance(item, str) and item in values)
    ]
    ensure(not strays, f"capabilities holds values that are not capabilities: {_show(strays)}")


@clause(
    "capabilities.fencing",
    "Declared: save(expected_latest_id=...) stores on the right latest and refuses a wrong one; "
    "undeclared: passing it is refused and stores nothing.",
)
async def fencing(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("fencing")
    (first,) = await ctx.save_chain(workflow_name, 1)
    second = ctx.checkpoint(workflow_name, previous_checkpoint_id=first.checkpoint_id, iteration_count=1)
    if not ctx.has(Capability.FENCING):
        await expect_refused(
            ctx, Capability.FENCING, "save", second, keyword="expected_latest_id", expected_latest_id=None
        )
        await _ensure_unchanged(ctx, [first], "a refused save(expected_latest_id=None)")
        return
    try:
        await ctx.storage.save(second, expected_latest_id=None)
    except StaleWriterError:
        pass
    else:
        fail(
            f"save(expected_latest_id=None) stored {second.checkpoint_id!r} although the workflow has "
            f"{first.checkpoint_id!r}; it must raise StaleWriterError"
        )
    await _ensure_unchanged(ctx, [first], "a refused fenced save")
    returned = await ctx.storage.save(second, expected_latest_id=first.checkpoint_id)
    ensure_equal(returned, second.checkpoint_id, "id returned by a fenced save on the right latest")
    await _ensure_unchanged(ctx, [first, second], "a fenced save on the right latest")


@clause(
    "capabilities.pending_writes",
    "Declared: put_writes/list_writes/delete_writes keep a checkpoint's writes; undeclared: refused.",
)
async def pending_writes(ctx: ClauseContext) -> None:
    (checkpoint,) = await ctx.save_chain(ctx.workflow_name("pending"), 1)
    owner, workflow_name = checkpoint.checkpoint_id, checkpoint.workflow_name
    batch = [PendingWrite("task", 0, "channel", "value")]
    if not ctx.has(Capability.PENDING_WRITES):
        await expect_refused(
            ctx, Capability.PENDING_WRITES, "put_writes", owner, batch, workflow_name=workflow_name
        )
        await expect_refused(
            ctx, Capability.PENDING_WRITES, "list_writes", owner, workflow_name=workflow_name
        )
        await expect_refused(
            ctx, Capability.PENDING_WRITES, "delete_writes", owner, workflow_name=workflow_name
        )
        await _ensure_unchanged(ctx, [checkpoint], "refused pending-writes calls")
        return
    await ctx.storage.put_writes(owner, batch, workflow_name=workflow_name)
    listed = await ctx.storage.list_writes(owner, workflow_name=workflow_name)
    ensure_equal(listed, batch, f"list_writes({owner!r}) after put_writes")
    removed = await ctx.storage.delete_writes(owner, workflow_name=workflow_name)
    ensure_equal(removed, 1, f"delete_writes({owner!r}) of one batch: count")
    listed = await ctx.storage.list_writes(owner, workflow_name=workflow_name)
    ensure_equal(listed, [], f"list_writes({owner!r}) after delete_writes")
    await _ensure_unchanged(ctx, [checkpoint], "put_writes, list_writes and delete_writes")
