"""durability: checkpoints survive closing every handle and opening a new one.

Each clause writes through one handle, closes every handle, builds the storage anew from its
settings (``ctx.rebuild()``: the target's ``reopen`` or ``process_opener``, never ``new_handle()``,
which may share this process's memory with the closed handles) and checks the
new handle sees exactly what was committed: the checkpoints, their order, the latest, the deletes,
and the per-workflow sequence, which must continue rather than restart.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from storages.contract import Capability
from storages.errors import CheckpointConflictError
from storages.redaction import redact_text

from .. import _process_child
from .._process_child import MESSAGE_PREFIX, SHARED_FIELDS
from ..clause import clause, ensure, ensure_equal, fail, not_applicable
from ..context import ClauseContext
from ._loads import expect_loads_equal
from ._maf import is_not_found

_DURABLE = (Capability.DURABLE,)


def _ids(checkpoints: list[Any]) -> list[str]:
    return [c.checkpoint_id for c in checkpoints]


async def _expect_missing(storage: Any, checkpoint_id: str, when: str) -> None:
    try:
        loaded = await storage.load(checkpoint_id)
    except Exception as exc:
        if is_not_found(exc):
            return
        fail(
            f"load({checkpoint_id!r}) {when} raised {type(exc).__name__}: {exc}, not CheckpointNotFoundError"
        )
    fail(f"load({checkpoint_id!r}) {when} returned checkpoint {getattr(loaded, 'checkpoint_id', loaded)!r}")


UNVERIFIED = (
    "durable is declared but unverified: the target gives the kit no way to build the store anew "
    "from its settings (StorageTarget.reopen, or process_opener: a URL or 'module:function'); "
    "new_handle() may share this process's memory, so it proves nothing"
)


async def rebuilt(ctx: ClauseContext) -> Any:
    """Every handle of the clause closed, then the storage built anew from its settings."""
    if ctx.rebuilder() is None:
        if Capability.DURABLE in ctx.target.required_capabilities:
            fail(UNVERIFIED)
        not_applicable(UNVERIFIED)
    return await ctx.rebuild()


@dataclass(frozen=True, slots=True)
class _View:
    """What a handle shows of one workflow: ids in list order, and the latest."""

    ids: list[str]
    latest: Any


async def _view(storage: Any, workflow_name: str) -> _View:
    ids = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    return _View(list(ids), await storage.get_latest(workflow_name=workflow_name))


def _ensure_same_view(after: _View, before: _View, workflow_name: str) -> None:
    # Compared with what the storage itself showed before reopening, so a backend is judged on
    # keeping its order, not on the order (the ordering family's business).
    ensure_equal(after.ids, before.ids, f"list_checkpoint_ids({workflow_name!r}) after reopening vs before")
    ensure_equal(after.latest, before.latest, f"get_latest({workflow_name!r}) after reopening vs before")


@clause(
    "durability.survives_reopen",
    "After every handle closes, a new handle loads every checkpoint equal, with the same latest and order.",
    requires=_DURABLE,
)
async def survives_reopen(ctx: ClauseContext) -> None:
    rich_state = {
        "tuple": (1, "two"),
        "when": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        "blob": b"\x00\xff",
    }
    saved = [
        await ctx.save_chain(ctx.workflow_name("durable"), 3, state=rich_state),
        await ctx.save_chain(ctx.workflow_name("durable-other"), 1),
    ]
    before = [await _view(ctx.storage, chain[0].workflow_name) for chain in saved]
    storage = await rebuilt(ctx)
    for chain, seen in zip(saved, before, strict=True):
        workflow_name = chain[0].workflow_name
        for checkpoint in chain:
            await expect_loads_equal(storage, checkpoint, "after reopening")
        _ensure_same_view(await _view(storage, workflow_name), seen, workflow_name)
        by_id = {c.checkpoint_id: c for c in chain}
        listed = await storage.list_checkpoints(workflow_name=workflow_name)
        ensure_equal(
            listed, [by_id[i] for i in seen.ids], f"list_checkpoints({workflow_name!r}) after reopening"
        )


@clause(
    "durability.sequence_continues",
    "Saves after reopening are newer than everything saved before: the latest is the last one saved.",
    requires=_DURABLE,
)
async def sequence_continues(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("sequence")
    # Ids that sort neither ascending nor descending in commit order, before or after the reopen:
    # a store that numbers its records again by id when it reads them back cannot pass by luck.
    chain: list[Any] = []
    for index, suffix in enumerate("cab"):
        previous = chain[-1].checkpoint_id if chain else None
        chain.append(
            ctx.checkpoint(
                workflow_name,
                checkpoint_id=f"{workflow_name}-{suffix}",
                previous_checkpoint_id=previous,
                iteration_count=index,
            )
        )
        await ctx.storage.save(chain[-1])
    before = await _view(ctx.storage, workflow_name)
    storage = await rebuilt(ctx)
    after = [
        ctx.checkpoint(
            workflow_name,
            checkpoint_id=f"{workflow_name}-e",
            previous_checkpoint_id=chain[-1].checkpoint_id,
            iteration_count=3,
        )
    ]
    after.append(
        ctx.checkpoint(
            workflow_name,
            checkpoint_id=f"{workflow_name}-d",
            previous_checkpoint_id=after[0].checkpoint_id,
            iteration_count=4,
        )
    )
    for checkpoint in after:
        await storage.save(checkpoint)
        latest = await storage.get_latest(workflow_name=workflow_name)
        ensure_equal(
            getattr(latest, "checkpoint_id", None),
            checkpoint.checkpoint_id,
            "get_latest id right after a save on the reopened handle (did the sequence restart?)",
        )
    ids = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(
        ids, before.ids + _ids(after), "list_checkpoint_ids: the ones before reopening, then the new ones"
    )


@clause(
    "durability.counter_survives_reopen",
    "After the newest checkpoint of a workflow, then all of three, then all of twelve (newest first) are "
    "deleted and the storage is built anew, the next save's sequence (checkpoint_info) is above every one "
    "handed out before.",
    requires=(*_DURABLE, Capability.INSPECT),
)
async def counter_survives_reopen(ctx: ClauseContext) -> None:
    # A store that sets a workflow's counter on open from the records it holds (the highest
    # sequence stored, or their count) hands a deleted checkpoint's number out again; so does a
    # log that a compaction rewrites without it, met once deletes outnumber what is left.
    cases = (
        ("newest-deleted", 3, slice(-1, None), "the newest checkpoint"),
        ("emptied", 3, slice(None), "every checkpoint"),
        ("emptied-newest-first", 12, slice(None, None, -1), "every checkpoint, newest first,"),
    )
    for label, length, doomed, what in cases:
        workflow_name = ctx.workflow_name(f"counter-{label}")
        chain = await ctx.save_chain(workflow_name, length)
        before = [r.sequence for r in await ctx.storage.list_records(workflow_name=workflow_name)]
        for checkpoint in chain[doomed]:
            await ctx.storage.delete(checkpoint.checkpoint_id)
        storage = await rebuilt(ctx)
        again = ctx.checkpoint(workflow_name, checkpoint_id=f"{workflow_name}-again", iteration_count=99)
        await storage.save(again)
        sequence = getattr(await storage.checkpoint_info(again.checkpoint_id), "sequence", None)
        ensure(
            isinstance(sequence, int) and sequence > max(before),
            f"checkpoint_info({again.checkpoint_id!r}).sequence is {sequence!r} after deleting {what} of "
            f"{workflow_name!r} (sequences {before}) and reopening; it must be above {max(before)}",
        )


@clause(
    "durability.deletes_persist",
    "Deleted checkpoints stay deleted after reopening, including a deleted latest.",
    requires=_DURABLE,
)
async def deletes_persist(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("deletes")
    chain = await ctx.save_chain(workflow_name, 4)
    gone = [chain[1], chain[3]]
    for checkpoint in gone:
        ensure_equal(
            await ctx.storage.delete(checkpoint.checkpoint_id), True, f"delete({checkpoint.checkpoint_id!r})"
        )
    before = await _view(ctx.storage, workflow_name)
    storage = await rebuilt(ctx)
    for checkpoint in gone:
        await _expect_missing(storage, checkpoint.checkpoint_id, "after deleting it and reopening")
        again = await storage.delete(checkpoint.checkpoint_id)
        ensure_equal(again, False, f"delete({checkpoint.checkpoint_id!r}) after deleting it and reopening")
    after = await _view(storage, workflow_name)
    ensure_equal(
        sorted(after.ids), sorted(_ids([chain[0], chain[2]])), "ids listed after deletes and reopening"
    )
    _ensure_same_view(after, before, workflow_name)


@clause(
    "durability.immutable_after_reopen",
    "After reopening, re-saving an equal checkpoint is a no-op and different content under its id conflicts.",
    requires=_DURABLE,
)
async def immutable_after_reopen(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("immutable")
    (checkpoint,) = await ctx.save_chain(workflow_name, 1, state={"set": {1, 2, 3}, "tuple": (4,)})
    storage = await rebuilt(ctx)
    same = ctx.checkpoint(
        workflow_name,
        checkpoint_id=checkpoint.checkpoint_id,
        timestamp=checkpoint.timestamp,
        iteration_count=checkpoint.iteration_count,
        state={"set": {3, 2, 1}, "tuple": (4,)},
    )
    ensure(same == checkpoint, "the kit built an unequal copy; this is a kit bug")
    stored = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(stored, [checkpoint.checkpoint_id], "list_checkpoint_ids after reopening, before re-saving")
    returned = await storage.save(same)
    ensure_equal(returned, checkpoint.checkpoint_id, "save() of an equal checkpoint after reopening")
    ids = await storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(ids, [checkpoint.checkpoint_id], "list_checkpoint_ids after re-saving an equal checkpoint")
    changed = ctx.checkpoint(
        workflow_name,
        checkpoint_id=checkpoint.checkpoint_id,
        timestamp=checkpoint.timestamp,
        state={"changed": True},
    )
    try:
        await storage.save(changed)
    except CheckpointConflictError:
        pass
    except Exception as exc:
        fail(
            f"save() of different content under {checkpoint.checkpoint_id!r} raised "
            f"{type(exc).__name__}: {exc}, not CheckpointConflictError"
        )
    else:
        fail(
            f"save() of different content under existing {checkpoint.checkpoint_id!r} after reopening "
            "returned instead of raising CheckpointConflictError"
        )
    await expect_loads_equal(storage, checkpoint, "after a refused overwrite")


@clause(
    "durability.raw_writes_survive_reopen",
    "A body written with write_raw_body is the stored body after reopening: a damage and its repair "
    "both last.",
    requires=(Capability.DURABLE, Capability.RAW_ACCESS),
)
async def raw_writes_survive_reopen(ctx: ClauseContext) -> None:
    # A repair tool rewrites a damaged body and reports success; a backend that changes only what
    # this process holds brings the damage back at the next start.
    workflow_name = ctx.workflow_name("raw-reopen")
    (checkpoint,) = await ctx.save_chain(workflow_name, 1)
    original = await ctx.storage.read_raw_body(checkpoint.checkpoint_id)
    ensure(isinstance(original, bytes), f"read_raw_body returned {type(original).__name__}, not bytes")
    damaged = b"\x00damaged by the kit\x00"
    await ctx.storage.write_raw_body(checkpoint.checkpoint_id, damaged)
    storage = await rebuilt(ctx)
    ensure_equal(
        await storage.read_raw_body(checkpoint.checkpoint_id),
        damaged,
        "read_raw_body after write_raw_body of other bytes and reopening",
    )
    await storage.write_raw_body(checkpoint.checkpoint_id, original)
    storage = await rebuilt(ctx)
    await expect_loads_equal(storage, checkpoint, "after write_raw_body of its original bytes and reopening")


_CHILD_TIMEOUT = 60.0
"""Seconds a child process gets to start, import the storage and do its part."""
_TOGETHER = 16
"""Checkpoints each process saves into one workflow at the same time."""


@dataclass(frozen=True, slots=True)
class _ChildRun:
    saved: list[str]
    """Ids the child acknowledged, in save order."""
    together: list[str]
    """Ids the child acknowledged while this process saved too."""
    deleted: dict[str, bool]
    """Ids the child deleted -> whether delete() said they existed."""
    read: dict[str, Any] | None
    """What it read: ``loaded`` (id -> fields or an error text), ``ids`` and ``latest``."""


def _process_opener(ctx: ClauseContext) -> str:
    opener = ctx.target.process_opener
    if callable(opener):
        opener = opener()
    if opener is None:
        not_applicable(
            "the target gives no process_opener (a storage URL or 'module:function'), so the kit "
            "cannot open the store in another process"
        )
    return opener


def _class_spec(cls: type[Any]) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _shared_fields(checkpoint: Any) -> dict[str, Any]:
    return {name: getattr(checkpoint, name) for name in SHARED_FIELDS}


async def _in_child(
    ctx: ClauseContext,
    request: dict[str, Any],
    what: str,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> _ChildRun:
    """Run the child process on ``request`` and parse what it printed; with ``meanwhile``, awaited
    once the child is ready, while it makes the saves ``request["together"]`` names."""
    request = {
        "opener": _process_opener(ctx),
        "checkpoint_class": _class_spec(ctx.target.checkpoint_class),
        **request,
    }
    # The child imports what this process can: its sys.path, with '' (the working directory) spelled out.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
    # Run as a script, not ``-m``: importing the conformance package would add to every start.
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        _process_child.__file__,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    early: list[bytes] = []

    async def converse() -> tuple[bytes, bytes]:
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(json.dumps(request).encode() + b"\n")
        if meanwhile is not None:
            while not early or b'"ready"' not in early[-1]:
                line = await child.stdout.readline()
                if not line:
                    break  # it ended early: its status and stderr say why
                early.append(line)
            child.stdin.write(b"go\n")
            await child.stdin.drain()
            await meanwhile()
        return await child.communicate()

    try:
        out, err = await asyncio.wait_for(converse(), _CHILD_TIMEOUT)
    except TimeoutError:
        fail(f"the child process that {what} did not finish within {_CHILD_TIMEOUT:g} s")
    finally:
        if child.returncode is None:  # timed out, or the clause was cancelled: leave no process behind
            child.kill()
            await child.wait()
    if child.returncode != 0:
        last_line = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
        fail(f"the child process that {what} exited with status {child.returncode}: {redact_text(last_line)}")
    saved: list[str] = []
    together: list[str] = []
    deleted: dict[str, bool] = {}
    read: dict[str, Any] | None = None
    for line in (b"".join(early) + out).decode(errors="replace").splitlines():
        if not line.startswith(MESSAGE_PREFIX):
            continue  # the storage's own output
        message = json.loads(line[len(MESSAGE_PREFIX) :])
        if "ready" in message:
            continue
        if "saved_together" in message:
            together.append(message["saved_together"])
        elif "saved" in message:
            saved.append(message["saved"])
        elif "deleted" in message:
            deleted[message["deleted"]] = message["existed"]
        else:
            read = message
    return _ChildRun(saved, together, deleted, read)


def _chain_fields(ctx: ClauseContext, workflow_name: str, previous: str, start: int) -> list[dict[str, Any]]:
    chain = []
    for index in range(start, start + 3):
        checkpoint = ctx.checkpoint(
            workflow_name,
            previous_checkpoint_id=previous,
            iteration_count=index,
            state={"step": index, "note": "written by another process"},
            metadata={"superstep": index},
        )
        chain.append(_shared_fields(checkpoint))
        previous = checkpoint.checkpoint_id
    return chain


@clause(
    "durability.across_processes",
    "Another process reads what an open handle saved; its deletes and saves show here (also in reads made "
    "here before them), its saves in commit order, and killed after they were acknowledged, without "
    "aclose(), it loses none of them; saves both processes make into one workflow at the same time are "
    "all listed, once each.",
    requires=_DURABLE,
    timeout=2 * _CHILD_TIMEOUT,
)
async def across_processes(ctx: ClauseContext) -> None:
    # One child process does both halves: starting an interpreter is most of the cost.
    here = ctx.workflow_name("saved-here")
    chain = await ctx.save_chain(here, 3, state={"step": "saved here"}, metadata={"k": [1, 2]})
    ids = [c.checkpoint_id for c in chain]
    # The child continues the same workflow, so its saves must also sort after this process's.
    written = _chain_fields(ctx, here, previous=ids[-1], start=len(ids))
    doomed = ids[0]
    # Read here first: what this process read before the other one wrote (a cache of latest or of
    # a listing) must not be what it reads after, and nothing this process writes comes between.
    ensure_equal(
        getattr(await ctx.storage.get_latest(workflow_name=here), "checkpoint_id", None),
        ids[-1],
        "get_latest() before another process wrote",
    )
    ensure_equal(
        list(await ctx.storage.list_checkpoint_ids(workflow_name=here)), ids, "listing before it wrote"
    )
    request = {
        "read": {"ids": ids, "workflow_name": here},
        "delete": [doomed],
        "save": written,
        "crash": True,
    }
    run = await _in_child(ctx, request, "read this process's saves, saved three more, deleted one and died")
    _check_read_elsewhere(run, chain, here)
    ensure_equal(run.deleted, {doomed: True}, "what delete() answered in the other process")
    await _expect_missing(ctx.storage, doomed, "after another process deleted it")
    ids = ids[1:]
    acknowledged = [fields["checkpoint_id"] for fields in written]
    ensure_equal(run.saved, acknowledged, "saves the writer process acknowledged before it died")
    for fields in written:
        try:
            loaded = await ctx.storage.load(fields["checkpoint_id"])
        except Exception as exc:
            fail(
                f"load({fields['checkpoint_id']!r}), acknowledged by a writer process that then died "
                f"without aclose(), raised {type(exc).__name__}: {exc} (are writes buffered until aclose?)"
            )
        ensure_equal(
            _shared_fields(loaded),
            fields,
            f"checkpoint {fields['checkpoint_id']!r} written by the dead process",
        )
    listed = await ctx.storage.list_checkpoint_ids(workflow_name=here)
    ensure_equal(
        list(listed),
        ids + acknowledged,
        f"list_checkpoint_ids({here!r}): this process's saves, then the dead writer's (did its sequence "
        "restart?)",
    )
    latest = await ctx.storage.get_latest(workflow_name=here)
    ensure_equal(
        getattr(latest, "checkpoint_id", None),
        acknowledged[-1],
        "get_latest() after the other process's saves",
    )
    await _saves_together(ctx)


async def _saves_together(ctx: ClauseContext) -> None:
    """Both processes save into one workflow at the same time: a store whose lock or transaction
    spans only one process's handles loses or duplicates some of them. A child of its own, after
    the reads above: this process's saves made before them would refresh any cache of its own."""
    shared = ctx.workflow_name("saved-together")
    theirs = [
        _shared_fields(ctx.checkpoint(shared, state={"by": "the other process"})) for _ in range(_TOGETHER)
    ]
    ours = [ctx.checkpoint(shared, state={"by": "this process"}) for _ in range(_TOGETHER)]

    async def save_ours() -> None:
        for checkpoint in ours:
            await ctx.storage.save(checkpoint)

    request = {"together": {"workflow_name": shared, "save": theirs}}
    run = await _in_child(ctx, request, "saved while this process saved", meanwhile=save_ours)
    ensure_equal(run.together, [f["checkpoint_id"] for f in theirs], "saves the other process acknowledged")
    listed_together = list(await ctx.storage.list_checkpoint_ids(workflow_name=shared))
    expected_together = {c.checkpoint_id for c in ours} | set(run.together)
    ensure(
        len(listed_together) == len(expected_together) and set(listed_together) == expected_together,
        f"list_checkpoint_ids({shared!r}) after two processes saved {_TOGETHER} checkpoints each at the "
        f"same time lists {len(listed_together)} ids, {len(set(listed_together))} distinct, missing "
        f"{sorted(expected_together - set(listed_together))[:3]} (does the store's lock span processes?)",
    )


def _check_read_elsewhere(run: _ChildRun, chain: list[Any], workflow_name: str) -> None:
    ensure(run.read is not None, "the child process printed nothing of what it read")
    assert run.read is not None
    ids = [c.checkpoint_id for c in chain]
    for checkpoint in chain:
        found = run.read["loaded"].get(checkpoint.checkpoint_id)
        if not isinstance(found, dict):
            fail(
                f"another process could not load {checkpoint.checkpoint_id!r}, saved (and acknowledged) "
                f"here through a handle still open: {found} (kept in this process only, or not yet written?)"
            )
        ensure_equal(
            found,
            _shared_fields(checkpoint),
            f"checkpoint {checkpoint.checkpoint_id!r} read by another process",
        )
    ensure_equal(run.read["ids"], ids, f"list_checkpoint_ids({workflow_name!r}) in another process")
    ensure_equal(run.read["latest"], ids[-1], "get_latest() in another process")
