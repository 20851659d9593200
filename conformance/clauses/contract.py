"""contract: MAF's six-method protocol behaves as MAF's runner expects.

These clauses use only the six methods MAF's runner calls. Where "latest" matters they give
checkpoints strictly increasing timestamps, so a storage that orders by timestamp is not judged
here; the ordering family covers that.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from storages.contract import Capability
from storages.errors import CheckpointConflictError, CheckpointStorageError

from ..clause import clause, ensure, ensure_equal, fail, not_applicable
from ..context import ClauseContext
from ._maf import is_not_found

_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def _at(second: int) -> str:
    """An ISO timestamp ``second`` seconds after a fixed epoch; later seconds sort later."""
    return (_EPOCH + timedelta(seconds=second)).isoformat()


def _ids(checkpoints: list[Any]) -> list[str]:
    return [c.checkpoint_id for c in checkpoints]


async def _expect_not_found(ctx: ClauseContext, checkpoint_id: str, when: str) -> None:
    try:
        loaded = await ctx.storage.load(checkpoint_id)
    except Exception as exc:
        if is_not_found(exc):
            # The error names the id, as MAF's does: a caller loading several learns which is missing.
            ensure(
                getattr(exc, "checkpoint_id", checkpoint_id) == checkpoint_id and checkpoint_id in str(exc),
                f"load({checkpoint_id!r}) {when} raised {type(exc).__name__}({str(exc)!r}), which does not "
                "name the id",
            )
            return
        fail(f"load({checkpoint_id!r}) {when} raised {type(exc).__name__}: {exc}")
    fail(f"load({checkpoint_id!r}) {when} returned {type(loaded).__name__} instead of raising")


@clause("contract.save_returns_id", "save() returns the checkpoint's own id.")
async def save_returns_id(ctx: ClauseContext) -> None:
    checkpoint = ctx.checkpoint(ctx.workflow_name())
    returned = await ctx.storage.save(checkpoint)
    ensure_equal(returned, checkpoint.checkpoint_id, "id returned by save()")


@clause(
    "contract.load_returns_saved", "load() returns a checkpoint equal to the one saved, of the same class."
)
async def load_returns_saved(ctx: ClauseContext) -> None:
    checkpoint = ctx.checkpoint(ctx.workflow_name(), state={"answer": 42}, iteration_count=3)
    await ctx.storage.save(checkpoint)
    loaded = await ctx.storage.load(checkpoint.checkpoint_id)
    ensure(
        type(loaded) is type(checkpoint),
        f"load() returned {type(loaded).__name__}, saved {type(checkpoint).__name__}",
    )
    ensure_equal(loaded, checkpoint, "loaded checkpoint")


@clause(
    "contract.load_missing_raises",
    "load() of an unknown id raises CheckpointNotFoundError naming the id (a WorkflowCheckpointException "
    "under MAF).",
)
async def load_missing_raises(ctx: ClauseContext) -> None:
    await _expect_not_found(ctx, f"missing-{ctx.workflow_name()}", "of an id never saved")


@clause(
    "contract.list_returns_workflow_checkpoints",
    "list_checkpoints() returns every checkpoint of the workflow exactly once, equal to what was saved, "
    "of the same class, and none of any other workflow.",
)
async def list_returns_workflow_checkpoints(ctx: ClauseContext) -> None:
    mine, other = ctx.workflow_name("mine"), ctx.workflow_name("other")
    saved: list[Any] = []
    for index in range(3):
        checkpoint = ctx.checkpoint(
            mine, iteration_count=index, state={"step": index}, timestamp=_at(2 * index)
        )
        await ctx.storage.save(checkpoint)
        saved.append(checkpoint)
        # Interleave another workflow so a storage that lists by position or prefix shows it.
        await ctx.storage.save(ctx.checkpoint(other, iteration_count=index, timestamp=_at(2 * index + 1)))
    listed = await ctx.storage.list_checkpoints(workflow_name=mine)
    strangers = [c.checkpoint_id for c in listed if c.workflow_name != mine]
    ensure(not strangers, f"list_checkpoints({mine!r}) includes checkpoints of other workflows: {strangers}")
    ensure_equal(sorted(_ids(listed)), sorted(_ids(saved)), f"ids listed by list_checkpoints({mine!r})")
    by_id = {c.checkpoint_id: c for c in listed}
    for checkpoint in saved:
        listed_one = by_id[checkpoint.checkpoint_id]
        ensure(
            type(listed_one) is type(checkpoint),
            f"list_checkpoints() returned {type(listed_one).__name__} for {checkpoint.checkpoint_id!r}, "
            f"saved {type(checkpoint).__name__}",
        )
        ensure_equal(listed_one, checkpoint, f"listed checkpoint {checkpoint.checkpoint_id!r}")


@clause(
    "contract.list_ids_match_list",
    "list_checkpoint_ids() returns the ids of list_checkpoints(), in the same order: oldest first.",
)
async def list_ids_match_list(ctx: ClauseContext) -> None:
    workflow, other = ctx.workflow_name(), ctx.workflow_name("other")
    saved: list[Any] = []
    for index in range(4):
        checkpoint = ctx.checkpoint(workflow, iteration_count=index, timestamp=_at(2 * index))
        await ctx.storage.save(checkpoint)
        saved.append(checkpoint)
        await ctx.storage.save(ctx.checkpoint(other, timestamp=_at(2 * index + 1)))
    listed = _ids(await ctx.storage.list_checkpoints(workflow_name=workflow))
    listed_ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow)
    ensure_equal(listed, _ids(saved), f"list_checkpoints({workflow!r}) ids, oldest first")
    ensure_equal(listed_ids, listed, f"list_checkpoint_ids({workflow!r}) against list_checkpoints()")


@clause(
    "contract.unknown_workflow_is_empty",
    "For a workflow with no checkpoints, list_checkpoints() and list_checkpoint_ids() return [] "
    "and get_latest() returns None.",
)
async def unknown_workflow_is_empty(ctx: ClauseContext) -> None:
    # Another workflow holds data, so "empty" cannot come from an empty store.
    await ctx.storage.save(ctx.checkpoint(ctx.workflow_name("neighbour")))
    unknown = ctx.workflow_name("never-saved")
    listed = await ctx.storage.list_checkpoints(workflow_name=unknown)
    ensure_equal(listed, [], f"list_checkpoints({unknown!r})")
    listed_ids = await ctx.storage.list_checkpoint_ids(workflow_name=unknown)
    ensure_equal(listed_ids, [], f"list_checkpoint_ids({unknown!r})")
    latest = await ctx.storage.get_latest(workflow_name=unknown)
    ensure(latest is None, f"get_latest({unknown!r}) returned {latest!r}, expected None")


@clause(
    "contract.latest_returns_saved",
    "get_latest() returns a checkpoint equal to the workflow's last save, of the same class.",
)
async def latest_returns_saved(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name()
    first = ctx.checkpoint(workflow, timestamp=_at(0), state={"step": 0})
    last = ctx.checkpoint(
        workflow, timestamp=_at(1), state={"step": 1}, previous_checkpoint_id=first.checkpoint_id
    )
    await ctx.storage.save(first)
    await ctx.storage.save(last)
    latest = await ctx.storage.get_latest(workflow_name=workflow)
    ensure(latest is not None, f"get_latest({workflow!r}) returned None after two saves")
    ensure(
        type(latest) is type(last),
        f"get_latest() returned {type(latest).__name__}, saved {type(last).__name__}",
    )
    ensure_equal(latest, last, f"get_latest({workflow!r})")


@clause(
    "contract.delete_removes",
    "delete() of a stored checkpoint returns True and removes it from load(), list_checkpoints(), "
    "list_checkpoint_ids() and get_latest(), leaving the workflow's other checkpoints intact.",
)
async def delete_removes(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name()
    keeper = ctx.checkpoint(workflow, timestamp=_at(0), state={"role": "keeper"})
    victim = ctx.checkpoint(workflow, timestamp=_at(1), state={"role": "victim"})
    await ctx.storage.save(keeper)
    await ctx.storage.save(victim)
    deleted = await ctx.storage.delete(victim.checkpoint_id)
    ensure(deleted is True, f"delete({victim.checkpoint_id!r}) of a stored checkpoint returned {deleted!r}")
    await _expect_not_found(ctx, victim.checkpoint_id, "after delete()")
    listed = _ids(await ctx.storage.list_checkpoints(workflow_name=workflow))
    ensure_equal(listed, [keeper.checkpoint_id], f"list_checkpoints({workflow!r}) after delete()")
    listed_ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow)
    ensure_equal(listed_ids, [keeper.checkpoint_id], f"list_checkpoint_ids({workflow!r}) after delete()")
    latest = await ctx.storage.get_latest(workflow_name=workflow)
    ensure_equal(latest, keeper, f"get_latest({workflow!r}) after deleting the newest checkpoint")
    ensure_equal(await ctx.storage.load(keeper.checkpoint_id), keeper, "the checkpoint not deleted")


@clause(
    "contract.resave_after_delete_is_new",
    "A checkpoint deleted and saved again under its id with other content is stored anew: load(), the "
    "listing and get_latest() give the new content, never the deleted one.",
)
async def resave_after_delete_is_new(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("resave-after-delete")
    deleted = ctx.checkpoint(workflow, state={"role": "deleted", "pad": "d" * 64})
    await ctx.storage.save(deleted)
    ensure(await ctx.storage.delete(deleted.checkpoint_id) is True, "delete() of a stored checkpoint")
    again = ctx.checkpoint(
        workflow, checkpoint_id=deleted.checkpoint_id, state={"role": "saved again"}, iteration_count=1
    )
    returned = await ctx.storage.save(again)
    ensure_equal(returned, again.checkpoint_id, "save() of a deleted id saved again with other content")
    ensure_equal(await ctx.storage.load(again.checkpoint_id), again, "load() of the id saved again")
    listed = await ctx.storage.list_checkpoints(workflow_name=workflow)
    ensure_equal(listed, [again], f"list_checkpoints({workflow!r}) after the id was saved again")
    latest = await ctx.storage.get_latest(workflow_name=workflow)
    ensure_equal(latest, again, "get_latest() after the id was saved again")


@clause(
    "contract.delete_missing_returns_false",
    "delete() returns False, without raising, for an id never stored and for one already deleted.",
)
async def delete_missing_returns_false(ctx: ClauseContext) -> None:
    never = f"never-{ctx.workflow_name()}"
    result = await ctx.storage.delete(never)
    ensure(result is False, f"delete({never!r}) of an id never stored returned {result!r}")
    checkpoint = ctx.checkpoint(ctx.workflow_name())
    await ctx.storage.save(checkpoint)
    first = await ctx.storage.delete(checkpoint.checkpoint_id)
    ensure(first is True, f"first delete({checkpoint.checkpoint_id!r}) returned {first!r}")
    second = await ctx.storage.delete(checkpoint.checkpoint_id)
    ensure(second is False, f"second delete({checkpoint.checkpoint_id!r}) returned {second!r}")


@clause(
    "contract.delete_latest_promotes_previous",
    "After delete() of a workflow's latest checkpoint, get_latest() returns the one saved before it; "
    "once all are deleted, None.",
)
async def delete_latest_promotes_previous(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name()
    saved = [ctx.checkpoint(workflow, timestamp=_at(index), iteration_count=index) for index in range(3)]
    for checkpoint in saved:
        await ctx.storage.save(checkpoint)
    for position in range(len(saved) - 1, 0, -1):
        await ctx.storage.delete(saved[position].checkpoint_id)
        latest = await ctx.storage.get_latest(workflow_name=workflow)
        ensure(
            latest is not None and latest.checkpoint_id == saved[position - 1].checkpoint_id,
            f"after deleting latest {saved[position].checkpoint_id!r}, get_latest() returned "
            f"{getattr(latest, 'checkpoint_id', None)!r}, expected {saved[position - 1].checkpoint_id!r}",
        )
    await ctx.storage.delete(saved[0].checkpoint_id)
    latest = await ctx.storage.get_latest(workflow_name=workflow)
    ensure(latest is None, f"get_latest() after deleting every checkpoint returned {latest!r}, expected None")


@clause(
    "contract.resave_identical_is_noop",
    "save() of an id already stored with equal content returns the id without raising and changes "
    "nothing: one listed entry, listing order and latest unchanged.",
)
async def resave_identical_is_noop(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name()
    first = ctx.checkpoint(workflow, timestamp=_at(0), state={"nested": {"items": [1, 2]}})
    second = ctx.checkpoint(workflow, timestamp=_at(1), previous_checkpoint_id=first.checkpoint_id)
    await ctx.storage.save(first)
    await ctx.storage.save(second)
    try:
        returned = await ctx.storage.save(copy.deepcopy(first))
    except Exception as exc:
        fail(f"re-saving {first.checkpoint_id!r} with equal content raised {type(exc).__name__}: {exc}")
    ensure_equal(returned, first.checkpoint_id, "id returned by the identical re-save")
    expected = [first.checkpoint_id, second.checkpoint_id]
    listed = await ctx.storage.list_checkpoint_ids(workflow_name=workflow)
    ensure_equal(listed, expected, f"list_checkpoint_ids({workflow!r}) after an identical re-save")
    listed_full = _ids(await ctx.storage.list_checkpoints(workflow_name=workflow))
    ensure_equal(listed_full, expected, f"list_checkpoints({workflow!r}) after an identical re-save")
    latest = await ctx.storage.get_latest(workflow_name=workflow)
    ensure_equal(
        getattr(latest, "checkpoint_id", None),
        second.checkpoint_id,
        "get_latest() after an identical re-save",
    )
    ensure_equal(await ctx.storage.load(first.checkpoint_id), first, "the re-saved checkpoint")


@clause(
    "contract.resave_conflict_raises",
    "save() of an id already stored with different content raises CheckpointConflictError "
    "and keeps the original.",
)
async def resave_conflict_raises(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name()
    original = ctx.checkpoint(workflow, timestamp=_at(0), state={"version": "original"})
    await ctx.storage.save(original)
    changed = copy.deepcopy(original)
    changed.state["version"] = "changed"
    try:
        await ctx.storage.save(changed)
    except CheckpointConflictError:
        pass
    except Exception as exc:
        fail(f"conflicting re-save of {original.checkpoint_id!r} raised {type(exc).__name__}: {exc}")
    else:
        stored = await ctx.storage.load(original.checkpoint_id)
        outcome = "overwrote the original" if stored == changed else "kept the original"
        fail(
            f"conflicting re-save of {original.checkpoint_id!r} returned instead of raising "
            f"CheckpointConflictError; it {outcome}"
        )
    ensure_equal(
        await ctx.storage.load(original.checkpoint_id), original, "checkpoint after a refused re-save"
    )
    listed = await ctx.storage.list_checkpoint_ids(workflow_name=workflow)
    ensure_equal(
        listed, [original.checkpoint_id], f"list_checkpoint_ids({workflow!r}) after a refused re-save"
    )


@clause(
    "contract.resave_equal_values_of_other_types_conflicts",
    "save() of an id stored with True, 1.0, -0.0, a frozenset or Decimal('1.0') where the stored one "
    "holds 1, 1, 0.0, a set or Decimal('1.00') (== but other values) raises CheckpointConflictError.",
)
async def resave_equal_values_of_other_types_conflicts(ctx: ClauseContext) -> None:
    # "The same content" is the codec's, never ==: a layer that skips a re-save whose stored
    # checkpoint compares equal turns True over 1 into a silent no-op.
    workflow = ctx.workflow_name("resave-equal")
    pairs: list[tuple[str, Any, Any]] = [
        ("bool-over-int", 1, True),
        ("float-over-int", 1, 1.0),
        ("negative-zero", 0.0, -0.0),
        ("frozenset-over-set", {1, 2}, frozenset({1, 2})),
        ("decimal-scale", Decimal("1.00"), Decimal("1.0")),
    ]
    for label, stored_value, other_value in pairs:
        original = ctx.checkpoint(
            workflow, checkpoint_id=f"{workflow}-{label}", timestamp=_at(0), state={"value": stored_value}
        )
        await ctx.storage.save(original)
        other = copy.deepcopy(original)
        other.state["value"] = other_value
        ensure(other == original, f"{label}: the two checkpoints compare equal with ==")
        try:
            await ctx.storage.save(other)
        except CheckpointConflictError:
            pass
        else:
            fail(
                f"re-save of {original.checkpoint_id!r} with state {{'value': {other_value!r}}} over "
                f"{{'value': {stored_value!r}}} returned instead of raising CheckpointConflictError: "
                "equal under == is not the same content"
            )
        kept = (await ctx.storage.load(original.checkpoint_id)).state.get("value")
        ensure(
            type(kept) is type(stored_value) and repr(kept) == repr(stored_value),
            f"{label}: load({original.checkpoint_id!r}) after the refused re-save holds {kept!r}, "
            f"not the stored {stored_value!r}",
        )


@clause(
    "contract.ids_are_global",
    "save() of an id stored under one workflow, under any of 16 other workflows, raises "
    "CheckpointConflictError; of 4 saves of one new id under 4 workflows made at once (through "
    "separate handles where shared), exactly one stores it.",
)
async def ids_are_global(ctx: ClauseContext) -> None:
    first = ctx.workflow_name("owner")
    # Several claimants: a store sharded by workflow name refuses the claims that land on the
    # owner's shard and takes the others, so one claimant would pass it about half the time.
    claimants = [ctx.workflow_name(f"claimant{index}") for index in range(16)]
    original = ctx.checkpoint(first, timestamp=_at(0), state={"same": "state"})
    await ctx.storage.save(original)
    for second in claimants:
        # The same id and content, only the workflow differs: a store keyed by (workflow, id) takes it.
        moved = copy.deepcopy(original)
        moved.workflow_name = second
        try:
            await ctx.storage.save(moved)
        except CheckpointConflictError:
            pass
        except Exception as exc:
            fail(
                f"saving {original.checkpoint_id!r} under workflow {second!r} raised "
                f"{type(exc).__name__}: {exc}"
            )
        else:
            fail(
                f"saving {original.checkpoint_id!r} under workflow {second!r}, another than its own, "
                "returned instead of raising CheckpointConflictError: one id now names two checkpoints"
            )
    ensure_equal(await ctx.storage.load(original.checkpoint_id), original, "load after the refused saves")
    for second in claimants:
        ensure_equal(
            await ctx.storage.list_checkpoint_ids(workflow_name=second),
            [],
            f"list_checkpoint_ids({second!r}) after the refused save",
        )
    ensure_equal(
        await ctx.storage.list_checkpoint_ids(workflow_name=first),
        [original.checkpoint_id],
        f"list_checkpoint_ids({first!r}) after the refused saves",
    )
    await _one_claim_wins(ctx)


RACING_CLAIMS = 4
"""Saves of one new id under as many workflows, made at once, in ``contract.ids_are_global``."""


async def _one_claim_wins(ctx: ClauseContext) -> None:
    """A store that checks an id is free and then claims it in two steps lets two workflows'
    saves of it both through, where the sequential saves above each see the other's claim."""
    handles = [ctx.storage]
    for _ in range(RACING_CLAIMS - 1):
        handles.append(await ctx.other_handle() if ctx.has(Capability.SHARED) else ctx.storage)
    names = [ctx.workflow_name(f"racing-claim{index}") for index in range(RACING_CLAIMS)]
    first = ctx.checkpoint(names[0], timestamp=_at(0), state={"racing": "claim"})
    claims = [first]
    for name in names[1:]:
        claim = copy.deepcopy(first)
        claim.workflow_name = name
        claims.append(claim)

    async def attempt(storage: Any, claim: Any) -> bool:
        try:
            await storage.save(claim)
        except CheckpointConflictError:
            return False
        return True

    stored = await asyncio.gather(*(attempt(h, c) for h, c in zip(handles, claims, strict=True)))
    winners = [c.workflow_name for c, won in zip(claims, stored, strict=True) if won]
    race = f"{RACING_CLAIMS} saves of new id {first.checkpoint_id!r} under {names} made at once"
    ensure(
        len(winners) == 1,
        f"{race}: {len(winners)} returned ({winners}), expected exactly one and CheckpointConflictError "
        "for the others: one id now names several checkpoints",
    )
    loaded = await ctx.storage.load(first.checkpoint_id)
    ensure_equal(
        loaded.workflow_name, winners[0], f"workflow_name of load({first.checkpoint_id!r}) after {race}"
    )
    for name in names:
        ensure_equal(
            await ctx.storage.list_checkpoint_ids(workflow_name=name),
            [first.checkpoint_id] if name == winners[0] else [],
            f"list_checkpoint_ids({name!r}) after {race}",
        )


def _expected_error_base() -> tuple[type[BaseException], str]:
    if importlib.util.find_spec("agent_framework") is not None:
        from agent_framework.exceptions import WorkflowCheckpointException

        return WorkflowCheckpointException, "WorkflowCheckpointException"
    return CheckpointStorageError, "CheckpointStorageError"


@clause(
    "contract.errors_are_checkpoint_exceptions",
    "Errors from load() of a missing id, from an empty id and from a conflicting re-save derive from "
    "MAF's WorkflowCheckpointException (CheckpointStorageError when MAF is not installed).",
)
async def errors_are_checkpoint_exceptions(ctx: ClauseContext) -> None:
    # Whether each operation must raise is other clauses' business; here every error that is
    # raised must be one MAF's runner catches.
    base, base_name = _expected_error_base()
    workflow = ctx.workflow_name()
    original = ctx.checkpoint(workflow, state={"version": "original"})
    await ctx.storage.save(original)
    changed = copy.deepcopy(original)
    changed.state["version"] = "changed"
    empty_id = ctx.checkpoint(workflow, checkpoint_id="")
    attempts: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("load() of a missing id", lambda: ctx.storage.load(f"missing-{workflow}")),
        ("load('')", lambda: ctx.storage.load("")),
        ("save() of an empty id", lambda: ctx.storage.save(empty_id)),
        ("conflicting re-save", lambda: ctx.storage.save(changed)),
    ]
    raised: list[str] = []
    wrong: list[str] = []
    for what, attempt in attempts:
        try:
            await attempt()
        except Exception as exc:
            raised.append(what)
            if not isinstance(exc, base):
                wrong.append(f"{what} raised {type(exc).__name__}: {exc}")
    if "save() of an empty id" not in raised:
        # The storage kept a checkpoint under ''; remove it so later runs do not trip on it.
        await ctx.storage.delete("")
    ensure(not wrong, f"errors that are not a {base_name}: " + "; ".join(wrong))
    ensure(raised, "none of load(missing), load(''), save(empty id), conflicting save raised")


def _set_in_order(*members: Any) -> set[Any]:
    """A set built by adding ``members`` in this order: 1 and 9 share a hash slot, so the set
    iterates in insertion order and two equal sets built differently encode differently."""
    built: set[Any] = set()
    for member in members:
        built.add(member)
    return built


def _reordered_state(flip: bool) -> dict[str, Any]:
    """Equal states whose sets iterate, and whose dicts are built, in another order when ``flip``."""
    order = (9, 1, 17) if flip else (1, 9, 17)
    keys = ("b", "a", "c") if flip else ("a", "b", "c")
    return {
        "members": _set_in_order(*order),
        "frozen": frozenset(_set_in_order(*order)),
        "mapping": {key: {"n": ord(key)} for key in keys},
        "deep": [{"tags": _set_in_order(*order)}],
    }


@clause(
    "contract.resave_equal_content_encoded_differently_is_noop",
    "Re-saving content equal after decoding but encoded differently (set iteration order, dict "
    "insertion order) is a no-op returning the id, not a conflict.",
)
async def resave_equal_content_encoded_differently_is_noop(ctx: ClauseContext) -> None:
    workflow = ctx.workflow_name("equal")
    child_id, child_workflow = f"{workflow}-embedded", ctx.workflow_name("equal-child")

    def build(flip: bool, *, reorder_top: bool) -> Any:
        # An embedded child too: with `nested` its body is a record of its own, compared on its own.
        child = ctx.checkpoint(
            child_workflow,
            checkpoint_id=child_id,
            timestamp=_at(0),
            state=_reordered_state(flip and not reorder_top),
        )
        top_flip = flip and reorder_top
        return ctx.checkpoint(
            workflow,
            checkpoint_id=f"{workflow}-{'top' if reorder_top else 'child'}",
            timestamp=_at(0),
            state={
                **_reordered_state(top_flip),
                "_executor_state": {"sub": {"sub_workflow_checkpoint": child}},
            },
            metadata={"y": 1, "x": 2} if top_flip else {"x": 2, "y": 1},
        )

    # First the container's sets and dicts reordered, then only the embedded child's.
    cases = [("its sets and dicts", True), ("its embedded checkpoint's sets", False)]
    saved: list[str] = []
    for what, reorder_top in cases:
        original, again = build(False, reorder_top=reorder_top), build(True, reorder_top=reorder_top)
        ensure(again == original, "the kit built unequal checkpoints; this is a kit bug")
        reordered = [
            c.state if reorder_top else c.state["_executor_state"]["sub"]["sub_workflow_checkpoint"].state
            for c in (original, again)
        ]
        ensure(
            list(reordered[0]["members"]) != list(reordered[1]["members"]),
            "the kit's two sets iterate in the same order; this is a kit bug",
        )
        if saved:
            # One embedded id may be stored once only; the second case embeds it in a fresh container.
            await ctx.storage.delete(saved[-1])
        await ctx.storage.save(original)
        saved.append(original.checkpoint_id)
        try:
            returned = await ctx.storage.save(again)
        except Exception as exc:
            fail(
                f"re-saving {original.checkpoint_id!r} with equal content in which {what} iterate in another "
                f"order raised {type(exc).__name__}: {exc}; equal after decoding is equal"
            )
        ensure_equal(
            returned, original.checkpoint_id, "id returned by the re-save of reordered equal content"
        )
        listed = await ctx.storage.list_checkpoint_ids(workflow_name=workflow)
        ensure_equal(listed, [original.checkpoint_id], f"list_checkpoint_ids({workflow!r}) after the re-save")
        ensure_equal(await ctx.storage.load(original.checkpoint_id), original, "the re-saved checkpoint")


def _maf_checkpoint_class() -> type[Any]:
    if importlib.util.find_spec("agent_framework") is None:
        not_applicable("agent_framework is not installed, so there is no MAF checkpoint class to check")
    from agent_framework import WorkflowCheckpoint as MafWorkflowCheckpoint

    return MafWorkflowCheckpoint


@clause(
    "contract.maf_checkpoint_class_round_trips",
    "agent_framework.WorkflowCheckpoint, saved on its own or embedded, comes back as MAF's class, equal, "
    "from load, get_latest, list_checkpoints and walks.",
)
async def maf_checkpoint_class_round_trips(ctx: ClauseContext) -> None:
    # MAF's runner saves its own class whatever class the rest of the kit builds with.
    maf_class = _maf_checkpoint_class()
    workflow = ctx.workflow_name("maf-class")
    child = maf_class(workflow_name=ctx.workflow_name("maf-child"), graph_signature_hash="sig-child")
    first = maf_class(workflow_name=workflow, graph_signature_hash="sig-maf", state={"n": 1})
    second = maf_class(
        workflow_name=workflow,
        graph_signature_hash="sig-maf",
        previous_checkpoint_id=first.checkpoint_id,
        state={"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}},
        iteration_count=1,
    )
    for checkpoint in (first, second):
        await ctx.storage.save(checkpoint)
    reads: list[tuple[str, Any, Any]] = [
        (f"load({first.checkpoint_id!r})", await ctx.storage.load(first.checkpoint_id), first),
        (f"load({second.checkpoint_id!r})", await ctx.storage.load(second.checkpoint_id), second),
        ("get_latest()", await ctx.storage.get_latest(workflow_name=workflow), second),
    ]
    listed = await ctx.storage.list_checkpoints(workflow_name=workflow)
    ensure_equal(len(listed), 2, f"number of checkpoints list_checkpoints({workflow!r}) returned")
    reads += [("list_checkpoints()[0]", listed[0], first), ("list_checkpoints()[1]", listed[1], second)]
    if Capability.ANCESTRY in ctx.capabilities:
        walk = await ctx.storage.walk_ancestry(second.checkpoint_id)
        ensure_equal(len(walk.items), 2, f"number of items walk_ancestry({second.checkpoint_id!r}) returned")
        reads += [
            (f"walk_ancestry() item {i}", item, c)
            for i, (item, c) in enumerate(zip(walk.items, (second, first), strict=True))
        ]
    for where, got, expected in reads:
        ensure(
            type(got) is maf_class,
            f"{where} returned {type(got).__module__}.{type(got).__qualname__}, not MAF's WorkflowCheckpoint "
            "that was saved",
        )
        ensure_equal(got, expected, f"{where} of a MAF checkpoint")
    embedded = reads[1][1].state["_executor_state"]["sub"]["sub_workflow_checkpoint"]
    ensure(
        type(embedded) is maf_class,
        f"the checkpoint embedded in a MAF checkpoint came back as {type(embedded).__qualname__}, "
        "not MAF's class",
    )


Read = tuple[str, Callable[[], Awaitable[None]]]
"""One read a clause makes right after a write: what it reads, and the read with its check."""


@clause(
    "contract.reads_follow_each_write",
    "A read made first right after a write answers as of it (load, list_checkpoint_ids, get_latest, and "
    "where declared list_workflows, checkpoint_info, list_records), also after one changing several "
    "records at once (a nested save, a cascading delete, a prune, a workflow's deletion).",
)
async def reads_follow_each_write(ctx: ClauseContext) -> None:
    writes: list[Callable[[], Awaitable[list[Read]]]] = [lambda: _single_save(ctx)]
    if ctx.has(Capability.NESTED):
        writes += [lambda: _nested_save(ctx), lambda: _cascading_delete(ctx)]
    if ctx.has(Capability.PRUNE):
        writes += [lambda: _prune(ctx), lambda: _workflow_deletion(ctx)]
    for write in writes:
        await _each_read_first(write)


async def _each_read_first(write: Callable[[], Awaitable[list[Read]]]) -> None:
    """Makes the write once for each of its reads and makes that read first: an index fed behind
    the write (a stream, a queue, a cache) lags most on the read nothing came before."""
    first = 0
    while True:
        reads = await write()
        for _, read in [reads[first], *reads[:first], *reads[first + 1 :]]:
            await read()
        first += 1
        if first == len(reads):
            return


def _loaded(ctx: ClauseContext, checkpoint_id: str, stored: bool, after: str) -> list[Read]:
    async def read() -> None:
        if not stored:
            await _expect_not_found(ctx, checkpoint_id, f"read first right after {after}")
            return
        loaded = await ctx.storage.load(checkpoint_id)
        ensure_equal(
            getattr(loaded, "checkpoint_id", None),
            checkpoint_id,
            f"load({checkpoint_id!r}) read first right after {after}",
        )

    return [(f"load({checkpoint_id!r})", read)]


def _listed(ctx: ClauseContext, workflow_name: str, chain: list[Any], after: str) -> list[Read]:
    """list_checkpoint_ids of the workflow is ``chain``'s ids, and get_latest its last (or None)."""

    async def ids() -> None:
        ensure_equal(
            await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name),
            _ids(chain),
            f"list_checkpoint_ids({workflow_name!r}) read first right after {after}",
        )

    async def latest() -> None:
        found = await ctx.storage.get_latest(workflow_name=workflow_name)
        ensure_equal(
            getattr(found, "checkpoint_id", None),
            chain[-1].checkpoint_id if chain else None,
            f"get_latest({workflow_name!r}) id read first right after {after}",
        )

    return [("list_checkpoint_ids", ids), ("get_latest", latest)]


def _named(ctx: ClauseContext, workflow_name: str, listed: bool, after: str) -> list[Read]:
    if not ctx.has(Capability.LIST_WORKFLOWS):
        return []

    async def read() -> None:
        names = await ctx.storage.list_workflows()
        ensure(
            (workflow_name in names) == listed,
            f"list_workflows() read first right after {after} "
            f"{'lacks' if listed else 'still names'} {workflow_name!r}",
        )

    return [("list_workflows", read)]


def _described(ctx: ClauseContext, checkpoint: Any, stored: bool, after: str) -> list[Read]:
    """checkpoint_info of ``checkpoint``: its id under its workflow, or None when not ``stored``."""
    if not ctx.has(Capability.INSPECT):
        return []

    async def read() -> None:
        info = await ctx.storage.checkpoint_info(checkpoint.checkpoint_id)
        ensure_equal(
            None if info is None else (info.checkpoint_id, info.workflow_name),
            (checkpoint.checkpoint_id, checkpoint.workflow_name) if stored else None,
            f"checkpoint_info({checkpoint.checkpoint_id!r}) (id, workflow) read first right after {after}",
        )

    return [(f"checkpoint_info({checkpoint.checkpoint_id!r})", read)]


def _recorded(ctx: ClauseContext, workflow_name: str, chain: list[Any], after: str) -> list[Read]:
    if not ctx.has(Capability.INSPECT):
        return []

    async def read() -> None:
        records = await ctx.storage.list_records(workflow_name=workflow_name)
        ensure_equal(
            [r.checkpoint_id for r in records],
            _ids(chain),
            f"list_records(workflow_name={workflow_name!r}) ids read first right after {after}",
        )

    return [("list_records", read)]


def _record_reads(ctx: ClauseContext, checkpoints: list[Any], stored: bool, after: str) -> list[Read]:
    """One read a record: its index entry (where declared), then its load; each record's is first
    once, which is what a stream applying one record's change a call lags on."""
    reads: list[Read] = []
    for checkpoint in checkpoints:
        parts = [
            *_described(ctx, checkpoint, stored, after),
            *_loaded(ctx, checkpoint.checkpoint_id, stored, after),
        ]

        async def read(parts: list[Read] = parts) -> None:
            for _, part in parts:
                await part()

        reads.append((f"the record {checkpoint.checkpoint_id!r}", read))
    return reads


async def _single_save(ctx: ClauseContext) -> list[Read]:
    chain = await ctx.save_chain(ctx.workflow_name("fresh-single"), 1)
    workflow_name, after = chain[0].workflow_name, "a save"
    return [
        *_listed(ctx, workflow_name, chain, after),
        *_named(ctx, workflow_name, True, after),
        *_record_reads(ctx, chain, True, after),
    ]


async def _saved_family(ctx: ClauseContext, label: str) -> tuple[Any, list[Any]]:
    """A checkpoint embedding one checkpoint of each of two sub-workflows, saved."""
    embedded = [ctx.checkpoint(ctx.workflow_name(f"{label}-sub-{i}")) for i in range(2)]
    top = ctx.checkpoint(
        ctx.workflow_name(label),
        state={
            "_executor_state": {f"sub{i}": {"sub_workflow_checkpoint": c} for i, c in enumerate(embedded)}
        },
    )
    await ctx.storage.save(top)
    return top, embedded


async def _nested_save(ctx: ClauseContext) -> list[Read]:
    top, embedded = await _saved_family(ctx, "fresh-nested")
    after = "a save embedding two checkpoints"
    return [
        *_listed(ctx, top.workflow_name, [top], after),
        *_named(ctx, top.workflow_name, True, after),
        *_record_reads(ctx, [top, *embedded], True, after),
    ]


async def _cascading_delete(ctx: ClauseContext) -> list[Read]:
    top, embedded = await _saved_family(ctx, "fresh-cascade")
    await ctx.storage.delete(top.checkpoint_id)
    after = "the delete of a checkpoint embedding two"
    return [
        *_listed(ctx, top.workflow_name, [], after),
        *_named(ctx, top.workflow_name, False, after),
        *_record_reads(ctx, [top, *embedded], False, after),
    ]


async def _prune(ctx: ClauseContext) -> list[Read]:
    chain = await ctx.save_chain(ctx.workflow_name("fresh-prune"), 4)
    workflow_name = chain[0].workflow_name
    await ctx.storage.prune(workflow_name=workflow_name, keep_last=1)
    after = "a prune of three checkpoints"
    return [
        *_listed(ctx, workflow_name, chain[-1:], after),
        *_recorded(ctx, workflow_name, chain[-1:], after),
        *_record_reads(ctx, chain[-2::-1], False, after),
    ]


async def _workflow_deletion(ctx: ClauseContext) -> list[Read]:
    chain = await ctx.save_chain(ctx.workflow_name("fresh-deleted"), 3)
    workflow_name = chain[0].workflow_name
    await ctx.storage.delete_workflow(workflow_name=workflow_name)
    after = "delete_workflow of three checkpoints"
    return [
        *_listed(ctx, workflow_name, [], after),
        *_named(ctx, workflow_name, False, after),
        *_recorded(ctx, workflow_name, [], after),
        *_record_reads(ctx, chain[::-1], False, after),
    ]
