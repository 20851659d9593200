"""lifecycle: closed handles refuse work, close twice quietly, and leave no thread behind.

The contract: ``aclose()`` releases a handle's connections and is idempotent; every operation
after it raises ``StorageClosedError``; ``new_handle()`` works on a closed handle; closing one
handle leaves the other handles of the same backend working. A handle that keeps a connection
thread after ``aclose()`` keeps the interpreter from exiting (aiosqlite's threads are not
daemons), so the kit counts threads around many handles opened and closed, holding every closed
handle until the count is done (a thread stopped only by a handle's finalizer is a leak whenever
the garbage collector runs late, so the kit does not let it run first).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from storages.contract import Capability
from storages.errors import StorageClosedError

from ..bounded import unbound
from ..clause import clause, ensure, ensure_equal, fail, not_applicable
from ..context import ClauseContext
from ..verdicts import ClauseFailure
from ._loads import expect_loads_equal, loads_equal_or_absent

_HANDLES = 8
"""Handles the thread clause opens, uses and closes one after another."""
_SPARE_THREADS = 2
"""Threads a backend may still start lazily and keep (a shared executor's, say), whatever N is."""
_SETTLE_SECONDS = 5.0
"""How long closed handles' threads get to finish on a loaded machine."""

Operation = Callable[[Any], Awaitable[Any]]


def _operations(ctx: ClauseContext, workflow_name: str, stored_id: str) -> dict[str, Operation]:
    """Every operation a closed handle must refuse, each given one valid call."""
    fresh = ctx.checkpoint(workflow_name, previous_checkpoint_id=stored_id, iteration_count=9)
    operations: dict[str, Operation] = {
        "save": lambda s: s.save(fresh),
        "load": lambda s: s.load(stored_id),
        "get_latest": lambda s: s.get_latest(workflow_name=workflow_name),
        "list_checkpoints": lambda s: s.list_checkpoints(workflow_name=workflow_name),
        "list_checkpoint_ids": lambda s: s.list_checkpoint_ids(workflow_name=workflow_name),
        "delete": lambda s: s.delete(stored_id),
    }
    gated: dict[Capability, dict[str, Operation]] = {
        Capability.ANCESTRY: {"walk_ancestry_ids": lambda s: s.walk_ancestry_ids(stored_id)},
        Capability.NESTED: {"list_nested": lambda s: s.list_nested(stored_id)},
        Capability.PRUNE: {"prune": lambda s: s.prune(workflow_name=workflow_name, keep_last=0)},
        Capability.LIST_WORKFLOWS: {"list_workflows": lambda s: s.list_workflows()},
        Capability.INSPECT: {"checkpoint_info": lambda s: s.checkpoint_info(stored_id)},
        Capability.RAW_ACCESS: {"read_raw_body": lambda s: s.read_raw_body(stored_id)},
    }
    for capability, extra in gated.items():
        if ctx.has(capability):
            operations.update(extra)
    return operations


async def _expect_closed_error(storage: Any, name: str, operation: Operation, when: str) -> None:
    try:
        await operation(storage)
    except StorageClosedError:
        return
    except Exception as exc:
        fail(f"{name}() {when} raised {type(exc).__name__}: {exc}, not StorageClosedError")
    fail(f"{name}() {when} succeeded; it must raise StorageClosedError")


@clause(
    "lifecycle.closed_handle_refuses_every_operation",
    "After aclose(), every operation raises StorageClosedError and changes nothing, even on unused handles; "
    "calls in flight when aclose() runs end (answer or raise), and the saves that answered are kept.",
)
async def closed_handle_refuses_every_operation(ctx: ClauseContext) -> None:
    _require_aclose(ctx)
    workflow_name = ctx.workflow_name("closed")
    (stored,) = await ctx.save_chain(workflow_name, 1)
    used = ctx.storage
    await ctx.close(used)
    operations = _operations(ctx, workflow_name, stored.checkpoint_id)
    for name, operation in operations.items():
        await _expect_closed_error(used, name, operation, "on a closed handle")
    # A lazily connecting storage must not connect on first use after a close it never acted on.
    unused = await ctx.other_handle()
    await ctx.close(unused)
    for name, operation in operations.items():
        await _expect_closed_error(unused, name, operation, "on a handle closed before its first use")
    if _manages_context(ctx.storage):
        async with await ctx.other_handle() as managed:
            await managed.list_checkpoint_ids(workflow_name=workflow_name)
        ctx.release(managed)
        for name, operation in operations.items():
            await _expect_closed_error(managed, name, operation, "after `async with` exited")
    witness = await ctx.other_handle()
    await expect_loads_equal(witness, stored, "on a new handle, after a closed handle was asked to delete it")
    ids = await witness.list_checkpoint_ids(workflow_name=workflow_name)
    ensure(
        ids == [stored.checkpoint_id],
        f"list_checkpoint_ids({workflow_name!r}) after closed handles were asked to save, delete and prune: "
        f"expected only {stored.checkpoint_id!r}, got {ids!r}",
    )
    await _calls_in_flight_end(ctx, witness, stored)


_IN_FLIGHT = 6
"""Saves (and as many loads) in flight on a handle when it is closed."""


async def _calls_in_flight_end(ctx: ClauseContext, witness: Any, stored: Any) -> None:
    """A handle closed while calls on it are in flight (a shutdown) leaves none of them waiting
    for ever: each answers or raises, and a save that answered is stored."""
    bound = await ctx.other_handle()
    ctx.release(bound)  # closed here, once
    closing = unbound(bound)
    workflow_name = ctx.workflow_name("closed-in-flight")
    saves = [ctx.checkpoint(workflow_name, iteration_count=i) for i in range(_IN_FLIGHT)]
    calls = [asyncio.ensure_future(closing.save(c)) for c in saves]
    calls += [asyncio.ensure_future(closing.load(stored.checkpoint_id)) for _ in range(_IN_FLIGHT)]
    await asyncio.sleep(0)  # every call started
    with contextlib.suppress(Exception):  # how aclose() itself behaves is other clauses' to judge
        await closing.aclose()
    # Judged as every call of the kit is (conformance/bounded.py): waiting is stuck only once the
    # run's operation bound passes with none of the calls ending, however slow the machine.
    waiting: set[asyncio.Future[Any]] = set(calls)
    while waiting:
        ended, waiting = await asyncio.wait(
            waiting, timeout=ctx.watch.seconds, return_when=asyncio.FIRST_COMPLETED
        )
        if not ended:
            break
    for call in waiting:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)
    ensure(
        not waiting,
        f"{len(waiting)} of {len(calls)} calls in flight when aclose() ran had neither answered nor raised, "
        f"and none of them ended in {ctx.watch.seconds:g} s",
    )
    if not ctx.has(Capability.SHARED):
        return  # the witness would be another store
    for checkpoint, call in zip(saves, calls, strict=False):
        if not call.cancelled() and call.exception() is None:
            await expect_loads_equal(witness, checkpoint, "after its save answered while its handle closed")


@clause(
    "lifecycle.aclose_is_idempotent",
    "A second aclose() is a no-op, on a used handle, an unused one, and after `async with` closed it.",
)
async def aclose_is_idempotent(ctx: ClauseContext) -> None:
    _require_aclose(ctx)
    await ctx.save_chain(ctx.workflow_name("twice"), 1)
    handles = [("a used handle", ctx.storage, 2), ("an unused handle", await ctx.other_handle(), 2)]
    if _manages_context(ctx.storage):
        async with await ctx.other_handle() as managed:
            await managed.list_checkpoint_ids(workflow_name=ctx.workflow_name("managed"))
        ctx.release(managed)
        handles.append(("a handle closed by `async with`", managed, 1))
    for label, handle, closes in handles:
        ctx.release(handle)
        for attempt in ("first", "second")[2 - closes :]:
            try:
                await handle.aclose()
            except Exception as exc:
                fail(f"the {attempt} aclose() of {label} raised {type(exc).__name__}: {exc}")


@clause(
    "lifecycle.closing_one_handle_leaves_others_working",
    "Closing one handle leaves the other open handles of the backend working, and new_handle() of it works.",
)
async def closing_one_handle_leaves_others_working(ctx: ClauseContext) -> None:
    _require_aclose(ctx)
    workflow_name = ctx.workflow_name("siblings")
    first = ctx.storage
    (before,) = await ctx.save_chain(workflow_name, 1)
    # Made once the first handle is in use: what a handle opened (a connection) is its own, and
    # a second handle taking it over would lose it when the first closes.
    sibling = await ctx.other_handle()
    await expect_loads_equal(sibling, before, "on a second handle, before closing the first")
    await ctx.close(first)
    after = ctx.checkpoint(workflow_name, previous_checkpoint_id=before.checkpoint_id, iteration_count=1)
    try:
        await sibling.save(after)
        found = await loads_equal_or_absent(sibling, after, "on the second handle")
    except Exception as exc:
        fail(f"the second handle failed after the first was closed: {type(exc).__name__}: {exc}")
    ensure(found, f"the second handle saved {after.checkpoint_id!r} after the first closed, then lost it")
    reopened = await ctx.other_handle()  # new_handle() of the closed ctx.storage
    await expect_loads_equal(reopened, after, "on new_handle() of a closed handle")


_LOOPS = 3
"""Event loops one handle is used from, one after another."""
_LOOP_SAVES = 4
"""Saves each loop makes at once, so that whatever makes them take turns is waited on."""
_LOOPS_SECONDS = 60.0


@clause(
    "lifecycle.works_across_event_loops",
    f"One handle, never closed, works from {_LOOPS} event loops in turn (asyncio.run(), a loop run by "
    "hand and left open, stopped, asyncio.run()), concurrent saves included.",
)
async def works_across_event_loops(ctx: ClauseContext) -> None:
    # MAF's storages have no aclose(), so a program that calls asyncio.run() per run keeps one
    # storage across loops: a lock or a connection bound to a finished loop must be replaced on
    # first use in the next, not raise there. The loops run in a worker thread, one after another
    # (the kit's own loop is not finished, but the handle is never used from it).
    workflow_name = ctx.workflow_name("loops")
    bound = await ctx.other_handle()
    handle = unbound(bound)
    rounds = [
        [ctx.checkpoint(f"{workflow_name}-{round_}-{index}") for index in range(_LOOP_SAVES)]
        for round_ in range(_LOOPS)
    ]

    async def one_loop(checkpoints: list[Any]) -> None:
        returned = await asyncio.gather(*(handle.save(checkpoint) for checkpoint in checkpoints))
        ensure_equal(
            list(returned), [c.checkpoint_id for c in checkpoints], "ids the concurrent saves returned"
        )
        for checkpoint in checkpoints:
            await expect_loads_equal(handle, checkpoint, "in the loop that saved it")
            ids = await handle.list_checkpoint_ids(workflow_name=checkpoint.workflow_name)
            ensure_equal(
                list(ids), [checkpoint.checkpoint_id], f"list_checkpoint_ids({checkpoint.workflow_name!r})"
            )

    def every_loop() -> None:
        # The second loop is run by hand and left open, stopped, until the last one has run (as
        # a test fixture or an embedding application may leave it): what the handle left on it
        # still looks alive in the next loop, and must be replaced there all the same.
        stopped = asyncio.new_event_loop()
        try:
            for number, checkpoints in enumerate(rounds, 1):
                try:
                    if number == 2:
                        stopped.run_until_complete(one_loop(checkpoints))
                    else:
                        asyncio.run(one_loop(checkpoints))
                except ClauseFailure:
                    raise
                except Exception as exc:
                    fail(f"the handle failed in event loop {number} of {_LOOPS}: {type(exc).__name__}: {exc}")
        finally:
            _finish_by_hand(stopped)

    try:
        await asyncio.wait_for(asyncio.to_thread(every_loop), _LOOPS_SECONDS)
    except TimeoutError:
        fail(
            f"{_LOOPS} event loops in turn did not finish within {_LOOPS_SECONDS:g} s "
            "(a lock bound to a loop?)"
        )
    for checkpoints in rounds:
        for checkpoint in checkpoints:
            await expect_loads_equal(bound, checkpoint, "in the kit's own loop, after the loops ended")


def _finish_by_hand(loop: asyncio.AbstractEventLoop) -> None:
    """End a loop run by hand as asyncio.run() ends its own: what the handle left running there
    (a pool's workers) is cancelled and run to its end before the loop closes, so that nothing is
    destroyed pending when the loop is collected."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def _require_aclose(ctx: ClauseContext) -> None:
    if not callable(getattr(ctx.storage, "aclose", None)):
        not_applicable(
            f"{ctx.storage.__class__.__name__} has no aclose() (MAF's six-method protocol has none): there "
            "is no close to check; the process-exit checks of tests/test_lifecycle.py still apply"
        )


def _manages_context(storage: Any) -> bool:
    """Whether ``async with storage:`` works (a storage with aclose() may still lack it)."""
    return callable(getattr(storage, "__aenter__", None)) and callable(getattr(storage, "__aexit__", None))


def _live_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.is_alive()]


async def _settled_new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The live threads not in ``before``, once at most the spare ones remain, or after the settle
    time. Counted apart from ``before``: threads of earlier handles that end meanwhile (their
    handles freed by the garbage collector now) must not make room for new ones."""
    deadline = time.monotonic() + _SETTLE_SECONDS
    while True:
        new = [t for t in _live_threads() if t not in before]
        if len(new) <= _SPARE_THREADS or time.monotonic() > deadline:
            return new
        await asyncio.sleep(0.05)


async def _open_use_close(ctx: ClauseContext, workflow_name: str) -> Any:
    """Open, use and close a handle; returns it, for the caller to hold until its count is done."""
    handle = await ctx.other_handle()
    checkpoint = ctx.checkpoint(workflow_name)
    await handle.save(checkpoint)
    await expect_loads_equal(handle, checkpoint, "on a handle opened for the thread count")
    await ctx.close(handle)
    return handle


@clause(
    "lifecycle.no_thread_left_per_handle",
    f"Opening, using and closing {_HANDLES} handles leaves no more threads than before (a leak blocks exit).",
)
async def no_thread_left_per_handle(ctx: ClauseContext) -> None:
    _require_aclose(ctx)
    workflow_name = ctx.workflow_name("threads")
    # The closed handles are held until the count is done: aclose() must stop a handle's threads,
    # and a thread stopped only when the garbage collector frees its handle would pass or fail
    # with the collector's timing.
    held: list[Any] = []
    # One handle first, so threads a backend starts once and keeps (an executor) are counted in.
    held.append(await _open_use_close(ctx, workflow_name))
    before = set(_live_threads())
    for _ in range(_HANDLES):
        held.append(await _open_use_close(ctx, workflow_name))
    new = await _settled_new_threads(before)
    held.clear()
    if len(new) > _SPARE_THREADS:
        names = ", ".join(sorted({t.name for t in new})) or "none named"
        fail(
            f"{len(new)} more threads alive {_SETTLE_SECONDS:g} s after opening, using and closing "
            f"{_HANDLES} handles ({len(before)} before; new: {names}); aclose() must stop every "
            "thread a handle started"
        )


@clause(
    "lifecycle.describe_shows_no_credentials",
    "describe() and repr() of a handle show no credential: nothing in them is a password or secret "
    "option that storages.redaction hides.",
)
async def describe_shows_no_credentials(ctx: ClauseContext) -> None:
    # What names a store in messages, reports and logs is shown wherever the storage is: a
    # password in it (a connection string's userinfo, a secret query option) leaks with it.
    from storages.redaction import redact_text, redact_url

    shown: list[tuple[str, str]] = [("repr()", repr(ctx.storage))]
    describe = getattr(ctx.storage, "describe", None)
    if callable(describe):
        shown.append(("describe()", str(describe())))
    for what, text in shown:
        ensure(
            redact_url(text) == text and redact_text(text) == text,
            f"{what} of the storage shows a credential: it reads {redact_url(redact_text(text))!r} "
            "once storages.redaction hides it",
        )
