"""nested: embedded (sub-workflow) checkpoints are stored once, faithfully, addressable by their own id.

MAF's runner puts a sub-workflow's checkpoint inside its parent's, at
``state["_executor_state"][<executor id>]["sub_workflow_checkpoint"]``, with a fresh id and no
previous id, and never saves it on its own. A storage declaring ``nested`` stores each embedded
checkpoint once, as a record of its own that knows its container: the container's body refers to
it, it loads and walks by its own id, it is listed only with ``include_nested=True``, and it is
saved and deleted together with its container.

Every clause builds its checkpoints with fixed timestamps, so a rebuilt checkpoint is equal to
the one saved, and gives each embedded checkpoint a workflow name of its own and the id
``<workflow name>-cp``, so messages say which level is which.
"""

from __future__ import annotations

import asyncio
import copy
import os
from typing import Any

from storages.contract import AncestryEnd, Capability
from storages.errors import (
    CheckpointConflictError,
    InvalidCheckpointError,
    NestedCheckpointDeletionError,
    StaleWriterError,
)

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext
from ._maf import is_not_found
from .fidelity import assert_round_trip, first_difference

FIXED_TIMESTAMP = "2024-03-01T12:00:00+00:00"
"""Every checkpoint here carries this timestamp, so rebuilding one gives an equal checkpoint."""

INCOMPRESSIBLE_BYTES = 64 * 1024
"""Random bytes carried by the embedded checkpoint of the stored-once clause."""

SMALL_BODY_LIMIT = INCOMPRESSIBLE_BYTES // 8
"""A body that refers to that checkpoint instead of carrying it stays below this many bytes."""


def embedded(ctx: ClauseContext, label: str, **fields: Any) -> Any:
    """A checkpoint of a workflow of its own, with a readable id, shaped like MAF's sub-workflow
    checkpoints (no previous id unless given)."""
    workflow_name = ctx.workflow_name(label)
    fields.setdefault("checkpoint_id", f"{workflow_name}-cp")
    fields.setdefault("timestamp", FIXED_TIMESTAMP)
    fields.setdefault("graph_signature_hash", f"sig-{label}")
    return ctx.checkpoint(workflow_name, **fields)


def sub_workflow_state(child: Any, executor_id: str = "sub", **extra: Any) -> dict[str, Any]:
    """A parent state holding ``child`` where MAF's WorkflowExecutor keeps it."""
    return {"_executor_state": {executor_id: {"sub_workflow_checkpoint": child}}, **extra}


def three_levels(ctx: ClauseContext, label: str) -> tuple[Any, Any, Any, Any]:
    """A parent and three levels of checkpoint-in-checkpoint below it, each in a different spot.

    Returns (parent, level1, level2, level3); level1 is in the parent's state as MAF puts it,
    level2 in level1's messages, level3 in a tuple inside a list in level2's metadata.
    """
    level3 = embedded(ctx, f"{label}-l3", state={"leaf": True, "pair": (3, "three")}, iteration_count=3)
    level2 = embedded(
        ctx, f"{label}-l2", metadata={"deep": [("tuple", {"checkpoint": level3})]}, iteration_count=2
    )
    level1 = embedded(ctx, f"{label}-l1", messages={"executor-l1": [{"data": level2}]}, iteration_count=1)
    parent = embedded(ctx, f"{label}-parent", state=sub_workflow_state(level1, "executor-l1"))
    return parent, level1, level2, level3


def ids(checkpoints: list[Any]) -> list[str]:
    return [checkpoint.checkpoint_id for checkpoint in checkpoints]


def expect_same(expected: Any, actual: Any, source: str) -> None:
    """Fail unless ``actual`` is strictly equal to ``expected`` (class and fields, every depth)."""
    problem = first_difference(expected, actual)
    if problem is not None:
        fail(f"{source}: {problem}")


async def expect_loads(ctx: ClauseContext, expected: Any, when: str) -> None:
    checkpoint_id = expected.checkpoint_id
    try:
        loaded = await ctx.storage.load(checkpoint_id)
    except Exception as exc:
        fail(f"load({checkpoint_id!r}) {when} raised {type(exc).__name__}: {exc}")
    expect_same(expected, loaded, f"load({checkpoint_id!r}) {when}")


async def expect_not_found(ctx: ClauseContext, checkpoint_id: str, when: str, storage: Any = None) -> None:
    try:
        loaded = await (ctx.storage if storage is None else storage).load(checkpoint_id)
    except Exception as exc:
        if is_not_found(exc):
            return
        fail(
            f"load({checkpoint_id!r}) {when} raised {type(exc).__name__}: {exc}, not CheckpointNotFoundError"
        )
    fail(
        f"load({checkpoint_id!r}) {when} returned checkpoint {loaded.checkpoint_id!r}; "
        "it should raise CheckpointNotFoundError"
    )


async def listed_ids(ctx: ClauseContext, workflow_name: str, *, include_nested: bool = False) -> list[str]:
    if include_nested:
        return list(await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name, include_nested=True))
    return list(await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name))


# ---------------------------------------------------------------------- clauses


@clause(
    "nested.round_trip_anywhere",
    "Checkpoints embedded in state, messages, pending events and metadata, in lists, tuples and dict "
    "values, load back as checkpoints of the same class with equal fields.",
    requires=[Capability.NESTED],
)
async def round_trip_anywhere(ctx: ClauseContext) -> None:
    children = [
        embedded(ctx, f"anywhere-{index}", state={"index": index, "pair": (index, f"child-{index}")})
        for index in range(8)
    ]
    parent = embedded(
        ctx,
        "anywhere-parent",
        state=sub_workflow_state(children[0], in_list=[1, children[1]], in_tuple=("x", children[2])),
        messages={"executor-a": [{"data": children[3]}], "executor-b": [(children[4],)]},
        pending_request_info_events={"request-1": {"data": {"checkpoint": children[5]}}},
        metadata={"deep": [{"k": ({"v": [children[6]]},)}], "dict_value": {"checkpoint": children[7]}},
    )
    # Reads the parent back through load, get_latest and list_checkpoints.
    await assert_round_trip(ctx, parent)


@clause(
    "nested.round_trip_deep",
    "Three levels of checkpoint-in-checkpoint nesting load back from the top with every level of the "
    "same class and with equal fields, graph signatures included.",
    requires=[Capability.NESTED],
)
async def round_trip_deep(ctx: ClauseContext) -> None:
    parent, *_ = three_levels(ctx, "deep")
    await assert_round_trip(ctx, parent)


@clause(
    "nested.loadable_by_own_id",
    "load() of an embedded checkpoint's own id, at every depth, returns it equal (its own embedded "
    "checkpoints included).",
    requires=[Capability.NESTED],
)
async def loadable_by_own_id(ctx: ClauseContext) -> None:
    parent, *levels = three_levels(ctx, "by-id")
    await ctx.storage.save(parent)
    for depth, level in enumerate(levels, start=1):
        await expect_loads(ctx, level, f"(embedded at depth {depth} in checkpoint {parent.checkpoint_id!r})")


@clause(
    "nested.list_nested_children",
    "list_nested(id) names the checkpoints embedded directly in id, in the order they are embedded "
    "(not by id, twelve of them), not deeper ones; an id deleted and saved again names only its new "
    "children; an unknown id raises CheckpointNotFoundError.",
    requires=[Capability.NESTED],
)
async def list_nested_children(ctx: ClauseContext) -> None:
    # Ids that sort neither in the order the children are embedded nor in its reverse: a backend
    # that lists a container's children by id (its primary key) instead of by position is seen.
    grandchildren = [embedded(ctx, f"children-g{index}") for index in (2, 3, 1)]
    first = embedded(ctx, "children-m", state={"subs": list(grandchildren)})
    second = embedded(ctx, "children-z")
    third = embedded(ctx, "children-b")
    # Past nine children: a position kept as text in a key ("10" before "2") is seen.
    more = [embedded(ctx, f"children-x{index}") for index in range(9)]
    parent = embedded(ctx, "children-parent", state={"subs": [first, second, third, *more]})
    await ctx.storage.save(parent)
    expected = {
        parent.checkpoint_id: ids([first, second, third, *more]),
        first.checkpoint_id: ids(grandchildren),
        second.checkpoint_id: [],
        grandchildren[0].checkpoint_id: [],
    }
    for container_id, children in expected.items():
        ensure_equal(await ctx.storage.list_nested(container_id), children, f"list_nested({container_id!r})")
    # A container's children go with it: its id, deleted and saved again with one child of its
    # own, names that one only (an index of children left behind by the delete is seen).
    await ctx.storage.delete(parent.checkpoint_id)
    newcomer = embedded(ctx, "children-new")
    again = embedded(ctx, "children-again", checkpoint_id=parent.checkpoint_id, state={"subs": [newcomer]})
    await ctx.storage.save(again)
    ensure_equal(
        await ctx.storage.list_nested(parent.checkpoint_id),
        [newcomer.checkpoint_id],
        f"list_nested({parent.checkpoint_id!r}) of an id deleted and saved again",
    )
    unknown = f"{parent.checkpoint_id}-unknown"
    try:
        result = await ctx.storage.list_nested(unknown)
    except Exception as exc:
        if is_not_found(exc):
            return
        fail(f"list_nested({unknown!r}) of an unknown id raised {type(exc).__name__}: {exc}")
    fail(f"list_nested({unknown!r}) of an unknown id returned {result!r}; it should raise not found")


@clause(
    "nested.records_container",
    "checkpoint_info() of an embedded checkpoint names the checkpoint directly containing it (not the "
    "top one); a checkpoint saved on its own names none.",
    requires=[Capability.NESTED, Capability.INSPECT],
)
async def records_container(ctx: ClauseContext) -> None:
    parent, level1, level2, level3 = three_levels(ctx, "container")
    await ctx.storage.save(parent)
    containers = [(parent, None), (level1, parent), (level2, level1), (level3, level2)]
    for checkpoint, container in containers:
        checkpoint_id = checkpoint.checkpoint_id
        info = await ctx.storage.checkpoint_info(checkpoint_id)
        ensure(info is not None, f"checkpoint_info({checkpoint_id!r}) returned None right after the save")
        ensure_equal(
            info.container_id,
            None if container is None else container.checkpoint_id,
            f"checkpoint_info({checkpoint_id!r}).container_id",
        )
        ensure_equal(
            (info.workflow_name, info.graph_signature_hash),
            (checkpoint.workflow_name, checkpoint.graph_signature_hash),
            f"checkpoint_info({checkpoint_id!r}): workflow name and graph signature",
        )


@clause(
    "nested.ancestry_through_nested",
    "An ancestry walk passes through an embedded checkpoint: a checkpoint whose previous id is an "
    "embedded one walks through it (and what it points to) to the root.",
    requires=[Capability.NESTED, Capability.ANCESTRY],
)
async def ancestry_through_nested(ctx: ClauseContext) -> None:
    # The sub-workflow saved root on its own, resumed inside its parent (the embedded checkpoint
    # points at root), then went on saving on its own from the embedded checkpoint.
    root = embedded(ctx, "walk-root")
    workflow_name = root.workflow_name
    resumed = ctx.checkpoint(
        workflow_name,
        checkpoint_id=f"{workflow_name}-resumed",
        previous_checkpoint_id=root.checkpoint_id,
        timestamp=FIXED_TIMESTAMP,
        iteration_count=1,
    )
    # Two levels down: the parent holds a middle sub-workflow that holds this one.
    middle = embedded(ctx, "walk-middle", state=sub_workflow_state(resumed))
    parent = embedded(ctx, "walk-parent", state=sub_workflow_state(middle))
    after = ctx.checkpoint(
        workflow_name,
        checkpoint_id=f"{workflow_name}-after",
        previous_checkpoint_id=resumed.checkpoint_id,
        timestamp=FIXED_TIMESTAMP,
        iteration_count=2,
    )
    for checkpoint in (root, parent, after):
        await ctx.storage.save(checkpoint)
    expected = [after, resumed, root]
    start = after.checkpoint_id
    walk_ids = await ctx.storage.walk_ancestry_ids(start)
    ensure_equal(
        (list(walk_ids.items), walk_ids.end, walk_ids.end_id),
        (ids(expected), AncestryEnd.ROOT, root.checkpoint_id),
        f"walk_ancestry_ids({start!r}) (items, end, end_id), through embedded {resumed.checkpoint_id!r}",
    )
    walk = await ctx.storage.walk_ancestry(start)
    ensure_equal(walk.end, AncestryEnd.ROOT, f"walk_ancestry({start!r}).end")
    ensure_equal(len(walk.items), len(expected), f"number of items walk_ancestry({start!r}) returned")
    for position, (want, got) in enumerate(zip(expected, walk.items, strict=True)):
        expect_same(want, got, f"walk_ancestry({start!r}).items[{position}]")
    from_nested = await ctx.storage.walk_ancestry_ids(resumed.checkpoint_id)
    ensure_equal(
        list(from_nested.items),
        ids([resumed, root]),
        f"walk_ancestry_ids({resumed.checkpoint_id!r}) starting at the embedded checkpoint",
    )


@clause(
    "nested.stored_once",
    "An embedded checkpoint is stored once, as its own record: its containers' stored bodies refer to "
    "it instead of carrying a copy of its 64 KB of random bytes.",
    requires=[Capability.NESTED, Capability.RAW_ACCESS],
)
async def stored_once(ctx: ClauseContext) -> None:
    leaf = embedded(ctx, "once-leaf", state={"blob": os.urandom(INCOMPRESSIBLE_BYTES)})
    middle = embedded(ctx, "once-middle", state=sub_workflow_state(leaf))
    parent = embedded(ctx, "once-parent", state=sub_workflow_state(middle))
    await ctx.storage.save(parent)
    for container in (parent, middle):
        body = await ctx.storage.read_raw_body(container.checkpoint_id)
        ensure(
            body is not None,
            f"read_raw_body({container.checkpoint_id!r}) returned None; the embedded checkpoint "
            "has no stored body of its own",
        )
        ensure(
            len(body) < SMALL_BODY_LIMIT,
            f"the stored body of {container.checkpoint_id!r} is {len(body)} bytes; it holds a copy of "
            f"embedded {leaf.checkpoint_id!r} ({INCOMPRESSIBLE_BYTES} random bytes) instead of a reference "
            f"(expected under {SMALL_BODY_LIMIT} bytes)",
        )
    body = await ctx.storage.read_raw_body(leaf.checkpoint_id)
    ensure(
        body is not None,
        f"read_raw_body({leaf.checkpoint_id!r}) of the embedded checkpoint returned None; it has no record",
    )
    ensure(
        len(body) >= INCOMPRESSIBLE_BYTES,
        f"the stored body of embedded {leaf.checkpoint_id!r} is {len(body)} bytes, less than the "
        f"{INCOMPRESSIBLE_BYTES} random bytes it carries",
    )


_CONTAINER_WORKFLOWS = 6
"""Workflows whose parents embed hidden_from_listing's earliest records: all six share the
child's place on a four-shard store once in 4,096 runs."""


@clause(
    "nested.hidden_from_listing",
    "Embedded checkpoints are never get_latest() and are listed under their workflow name only with "
    "include_nested=True, in commit order.",
    requires=[Capability.NESTED],
)
async def hidden_from_listing(ctx: ClauseContext) -> None:
    storage = ctx.storage
    first = embedded(ctx, "hidden-child")
    workflow_name = first.workflow_name

    def child(role: str) -> Any:
        return ctx.checkpoint(
            workflow_name, checkpoint_id=f"{workflow_name}-{role}", timestamp=FIXED_TIMESTAMP
        )

    # The earliest records are embedded in parents of several workflows: a store that places
    # records by workflow name (shards, partitions) keeps a nested record with its container,
    # and with a single container workflow both names share a place by chance (one time in four
    # on four shards), hiding a listing that does not merge places by commit order.
    earliest = [first, *(child(f"early-{index}") for index in range(1, _CONTAINER_WORKFLOWS))]
    first_parent, *other_parents = [
        embedded(ctx, f"hidden-parent-{index}", state=sub_workflow_state(early))
        for index, early in enumerate(earliest)
    ]
    for parent in (first_parent, *other_parents):
        await storage.save(parent)
    when = (
        f"when its only checkpoints {ids(earliest)!r} are embedded in parents of "
        f"{len(earliest)} other workflows"
    )
    latest = await storage.get_latest(workflow_name=workflow_name)
    ensure(
        latest is None,
        f"get_latest({workflow_name!r}) {when} returned {getattr(latest, 'checkpoint_id', None)!r}, not None",
    )
    ensure_equal(await listed_ids(ctx, workflow_name), [], f"list_checkpoint_ids({workflow_name!r}) {when}")
    listed = await storage.list_checkpoints(workflow_name=workflow_name)
    ensure_equal(ids(listed), [], f"list_checkpoints({workflow_name!r}) {when}")

    own = child("own")
    second = child("second")
    second_parent = ctx.checkpoint(
        first_parent.workflow_name,
        checkpoint_id=f"{first_parent.workflow_name}-second",
        timestamp=FIXED_TIMESTAMP,
        state=sub_workflow_state(second),
    )
    await storage.save(own)
    await storage.save(second_parent)
    when = (
        f"after saving {own.checkpoint_id!r} on its own and then a parent embedding {second.checkpoint_id!r}"
    )
    latest = await storage.get_latest(workflow_name=workflow_name)
    ensure_equal(
        getattr(latest, "checkpoint_id", None), own.checkpoint_id, f"get_latest({workflow_name!r}) {when}"
    )
    ensure_equal(
        await listed_ids(ctx, workflow_name),
        [own.checkpoint_id],
        f"list_checkpoint_ids({workflow_name!r}) {when}",
    )
    listed = await storage.list_checkpoints(workflow_name=workflow_name)
    ensure_equal(ids(listed), [own.checkpoint_id], f"list_checkpoints({workflow_name!r}) {when}")
    everything = ids([*earliest, own, second])
    ensure_equal(
        await listed_ids(ctx, workflow_name, include_nested=True),
        everything,
        f"list_checkpoint_ids({workflow_name!r}, include_nested=True) {when}",
    )
    listed = await storage.list_checkpoints(workflow_name=workflow_name, include_nested=True)
    ensure_equal(ids(listed), everything, f"list_checkpoints({workflow_name!r}, include_nested=True) {when}")
    for want, got in zip([*earliest, own, second], listed, strict=True):
        expect_same(want, got, f"list_checkpoints({workflow_name!r}, include_nested=True)")
    parents = ids([first_parent, second_parent])
    ensure_equal(
        await listed_ids(ctx, first_parent.workflow_name),
        parents,
        f"list_checkpoint_ids({first_parent.workflow_name!r}) of the parents",
    )


@clause(
    "nested.delete_cascades",
    "Deleting a checkpoint deletes every checkpoint embedded in it, at any depth, leaving no orphan (on "
    "another handle that read them too); other checkpoints' embedded ones stay.",
    requires=[Capability.NESTED],
)
async def delete_cascades(ctx: ClauseContext) -> None:
    storage = ctx.storage
    doomed_parent, *doomed_levels = three_levels(ctx, "cascade")
    sibling = embedded(ctx, "cascade-sibling")
    doomed_parent.state["sibling"] = [sibling]
    kept_parent, *kept_levels = three_levels(ctx, "kept")
    await storage.save(doomed_parent)
    await storage.save(kept_parent)
    for checkpoint in [*doomed_levels, sibling, *kept_levels]:
        await expect_loads(ctx, checkpoint, "right after saving its container")
    # Another handle that read the embedded checkpoints before the delete must not find them after.
    other = await ctx.other_handle() if ctx.has(Capability.SHARED) else None
    if other is not None:
        for checkpoint in [*doomed_levels, sibling]:
            await other.load(checkpoint.checkpoint_id)
    deleted = await storage.delete(doomed_parent.checkpoint_id)
    ensure(deleted is True, f"delete({doomed_parent.checkpoint_id!r}) returned {deleted!r}, not True")
    when = f"after delete({doomed_parent.checkpoint_id!r}) of its container"
    for orphan in [*doomed_levels, sibling]:
        orphan_id = orphan.checkpoint_id
        await expect_not_found(ctx, orphan_id, when)
        if other is not None:
            await expect_not_found(ctx, orphan_id, f"through another handle {when}", other)
        remaining = await listed_ids(ctx, orphan.workflow_name, include_nested=True)
        ensure(
            orphan_id not in remaining,
            f"list_checkpoint_ids({orphan.workflow_name!r}, include_nested=True) {when} still lists "
            f"{orphan_id!r}",
        )
        if ctx.has(Capability.INSPECT):
            info = await storage.checkpoint_info(orphan_id)
            ensure(info is None, f"checkpoint_info({orphan_id!r}) {when} returned {info!r}, not None")
        if ctx.has(Capability.RAW_ACCESS):
            body = await storage.read_raw_body(orphan_id)
            if body is not None:
                fail(f"read_raw_body({orphan_id!r}) {when} returned {len(body)} bytes, not None")
    for survivor in [kept_parent, *kept_levels]:
        await expect_loads(ctx, survivor, f"(in another checkpoint) {when}")
    again = await storage.delete(doomed_parent.checkpoint_id)
    ensure(again is False, f"a second delete({doomed_parent.checkpoint_id!r}) returned {again!r}, not False")


@clause(
    "nested.delete_nested_refused",
    "delete() of an embedded checkpoint raises NestedCheckpointDeletionError while its container "
    "exists, and deletes nothing; calls made at the same time answer as they would alone.",
    requires=[Capability.NESTED],
)
async def delete_nested_refused(ctx: ClauseContext) -> None:
    parent, level1, level2, level3 = three_levels(ctx, "refuse")
    await ctx.storage.save(parent)
    for checkpoint, container in ((level1, parent), (level3, level2)):
        checkpoint_id = checkpoint.checkpoint_id
        try:
            result = await ctx.storage.delete(checkpoint_id)
        except NestedCheckpointDeletionError as exc:
            ensure(
                checkpoint_id in str(exc) and container.checkpoint_id in str(exc),
                f"NestedCheckpointDeletionError for {checkpoint_id!r} does not name it and its container "
                f"{container.checkpoint_id!r}: {exc}",
            )
        except Exception as exc:
            fail(
                f"delete({checkpoint_id!r}) of a checkpoint embedded in {container.checkpoint_id!r} raised "
                f"{type(exc).__name__}: {exc}, not NestedCheckpointDeletionError"
            )
        else:
            fail(
                f"delete({checkpoint_id!r}) of a checkpoint embedded in {container.checkpoint_id!r} returned "
                f"{result!r}; it must raise NestedCheckpointDeletionError"
            )
    for checkpoint in (parent, level1, level2, level3):
        await expect_loads(ctx, checkpoint, "after the refused deletes")
    ensure_equal(
        await ctx.storage.list_nested(parent.checkpoint_id),
        [level1.checkpoint_id],
        f"list_nested({parent.checkpoint_id!r}) after the refused deletes",
    )
    # A refusal is the refused call's own: calls made on the handle at the same time answer as
    # they would alone (a backend that batches calls must not fail the batch with it).
    bystander = ctx.checkpoint(ctx.workflow_name("refuse-bystander"))
    answers = await asyncio.gather(
        ctx.storage.save(bystander),
        ctx.storage.delete(level1.checkpoint_id),
        ctx.storage.load(parent.checkpoint_id),
        return_exceptions=True,
    )
    calls = (f"save({bystander.checkpoint_id!r})", "the refused delete", f"load({parent.checkpoint_id!r})")
    for call, answer in zip(calls, answers, strict=True):
        refused = isinstance(answer, NestedCheckpointDeletionError)
        if (call == "the refused delete") != refused:
            shown = (
                f"raised {type(answer).__name__}: {answer}"
                if isinstance(answer, BaseException)
                else f"answered {answer!r}"
            )
            fail(
                f"{call}, made at the same time as a delete of the embedded {level1.checkpoint_id!r}, {shown}"
            )
    await expect_loads(ctx, bystander, "after it was saved at the same time as a refused delete")


@clause(
    "nested.save_is_atomic",
    "A save whose embedded checkpoint collides with a stored id, or cannot be encoded, is refused with "
    "a typed error and stores neither the checkpoint nor any of its embedded ones; a fenced save "
    "(with `fencing`) whose last embedded checkpoint collides is refused naming that id, and under a "
    "stale fence with StaleWriterError: the fence decides before the collision.",
    requires=[Capability.NESTED],
)
async def save_is_atomic(ctx: ClauseContext) -> None:
    storage = ctx.storage
    existing = embedded(ctx, "atomic-existing", state={"original": True})
    await storage.save(existing)
    before = embedded(ctx, "atomic-before")
    clash = ctx.checkpoint(
        existing.workflow_name,
        checkpoint_id=existing.checkpoint_id,
        timestamp=FIXED_TIMESTAMP,
        state={"original": False},
    )
    after = embedded(ctx, "atomic-after")
    parent = embedded(ctx, "atomic-parent", state={"subs": [before, clash, after]})
    try:
        await storage.save(parent)
    except CheckpointConflictError:
        pass
    except Exception as exc:
        fail(
            f"save({parent.checkpoint_id!r}), whose second embedded checkpoint reuses stored id "
            f"{existing.checkpoint_id!r}, raised {type(exc).__name__}: {exc}, not CheckpointConflictError"
        )
    else:
        fail(
            f"save({parent.checkpoint_id!r}) was accepted although its second embedded checkpoint reuses "
            f"stored id {existing.checkpoint_id!r} with other content"
        )
    await _expect_nothing_stored(ctx, parent, [before, after], "after the save refused for an id collision")
    await expect_loads(ctx, existing, "(the checkpoint whose id was reused) after the refused save")

    unencodable = embedded(ctx, "atomic-bad", state={"fine": 1, "bad": [object()]})
    second = embedded(ctx, "atomic-second", state={"subs": [embedded(ctx, "atomic-good"), unencodable]})
    try:
        await storage.save(second)
    except InvalidCheckpointError:
        pass
    except Exception as exc:
        fail(
            f"save({second.checkpoint_id!r}), whose second embedded checkpoint holds an object(), raised "
            f"{type(exc).__name__}: {exc}, not UnserializableValueError"
        )
    else:
        fail(f"save({second.checkpoint_id!r}) was accepted although an embedded checkpoint holds an object()")
    good = second.state["subs"][0]
    await _expect_nothing_stored(ctx, second, [good], "after the save refused for an unencodable value")

    # Nothing was half written, so the corrected checkpoint saves cleanly.
    parent.state["subs"][1] = embedded(ctx, "atomic-fixed")
    await storage.save(parent)
    await expect_loads(ctx, parent, "after saving it again with the colliding id replaced")
    if ctx.has(Capability.FENCING):
        await _fenced_collision_refused(ctx, existing, clash)


async def _fenced_collision_refused(ctx: ClauseContext, existing: Any, clash: Any) -> None:
    """The collision in the last embedded checkpoint of a fenced save: a fence that looks up the
    family's last record instead of its top finds the stored id and blames the top."""
    fenced = embedded(ctx, "atomic-fenced", state={"subs": [embedded(ctx, "atomic-fenced-first"), clash]})
    try:
        await ctx.storage.save(fenced, expected_latest_id=None)
    except CheckpointConflictError as exc:
        ensure(
            getattr(exc, "checkpoint_id", None) == existing.checkpoint_id,
            f"save({fenced.checkpoint_id!r}, expected_latest_id=None), whose last embedded checkpoint "
            f"reuses stored id {existing.checkpoint_id!r}, raised {type(exc).__name__} naming "
            f"{getattr(exc, 'checkpoint_id', None)!r}, not the reused id",
        )
    else:
        fail(
            f"save({fenced.checkpoint_id!r}, expected_latest_id=None) was accepted although its last "
            f"embedded checkpoint reuses stored id {existing.checkpoint_id!r} with other content"
        )
    await _expect_nothing_stored(ctx, fenced, [], "after the fenced save refused for an id collision")
    # The same collision behind a stale fence: the top id is new, so the fence decides (a fence
    # whose stored-id check reads the last record finds the reused id and writes to collide).
    stale = f"{fenced.checkpoint_id}-not-latest"
    try:
        await ctx.storage.save(fenced, expected_latest_id=stale)
    except StaleWriterError:
        pass
    except Exception as exc:
        fail(
            f"save({fenced.checkpoint_id!r}, expected_latest_id={stale!r}) on a workflow with no latest, "
            f"whose last embedded checkpoint reuses stored id {existing.checkpoint_id!r}, raised "
            f"{type(exc).__name__}: {exc}, not StaleWriterError"
        )
    else:
        fail(
            f"save({fenced.checkpoint_id!r}, expected_latest_id={stale!r}) was accepted on a workflow "
            "with no latest"
        )
    await _expect_nothing_stored(ctx, fenced, [], "after the fenced save refused by a stale fence")


async def _expect_nothing_stored(ctx: ClauseContext, parent: Any, children: list[Any], when: str) -> None:
    await expect_not_found(ctx, parent.checkpoint_id, when)
    listed = await listed_ids(ctx, parent.workflow_name)
    ensure_equal(listed, [], f"list_checkpoint_ids({parent.workflow_name!r}) {when}")
    for child in children:
        await expect_not_found(ctx, child.checkpoint_id, f"(embedded in {parent.checkpoint_id!r}) {when}")
        listed = await listed_ids(ctx, child.workflow_name, include_nested=True)
        ensure_equal(listed, [], f"list_checkpoint_ids({child.workflow_name!r}, include_nested=True) {when}")


@clause(
    "nested.aliasing_stored_once",
    "One embedded checkpoint referred to several times (the same object, or an equal copy) is one "
    "record, and every reference loads back equal.",
    requires=[Capability.NESTED],
)
async def aliasing_stored_once(ctx: ClauseContext) -> None:
    child = embedded(ctx, "alias-child", state={"pair": (1, 2)})
    equal_copy = copy.deepcopy(child)
    parent = embedded(
        ctx,
        "alias-parent",
        state=sub_workflow_state(child, also=[child, {"again": child}]),
        messages={"executor": [{"data": equal_copy}]},
    )
    await assert_round_trip(ctx, parent)
    ensure_equal(
        await ctx.storage.list_nested(parent.checkpoint_id),
        [child.checkpoint_id],
        f"list_nested({parent.checkpoint_id!r}) of a parent referring to one checkpoint four times",
    )
    ensure_equal(
        await listed_ids(ctx, child.workflow_name, include_nested=True),
        [child.checkpoint_id],
        f"list_checkpoint_ids({child.workflow_name!r}, include_nested=True)",
    )
    if ctx.has(Capability.INSPECT):
        records = await ctx.storage.list_records(workflow_name=child.workflow_name)
        ensure_equal(
            [record.checkpoint_id for record in records],
            [child.checkpoint_id],
            f"list_records(workflow_name={child.workflow_name!r})",
        )


@clause(
    "nested.resave_identical_is_noop",
    "Saving a checkpoint with embedded ones again, the same object or an equal rebuilt one, returns its "
    "id and adds, moves or changes no record.",
    requires=[Capability.NESTED],
)
async def resave_identical_is_noop(ctx: ClauseContext) -> None:
    parent, *levels = three_levels(ctx, "resave")
    await ctx.storage.save(parent)
    for level in levels:
        await expect_loads(ctx, level, "right after saving its container")
    before = await _snapshot(ctx, [parent, *levels])
    for attempt, label in ((parent, "the same object"), (copy.deepcopy(parent), "an equal copy")):
        returned = await ctx.storage.save(attempt)
        ensure_equal(
            returned, parent.checkpoint_id, f"save() of {label} of {parent.checkpoint_id!r} returned"
        )
        after = await _snapshot(ctx, [parent, *levels])
        ensure_equal(after, before, f"records after saving {label} of {parent.checkpoint_id!r} again")
    for checkpoint in (parent, *levels):
        await expect_loads(ctx, checkpoint, "after saving its container again")


async def _snapshot(ctx: ClauseContext, checkpoints: list[Any]) -> dict[str, Any]:
    """What the storage says about these checkpoints, to compare before and after a re-save."""
    names = sorted({checkpoint.workflow_name for checkpoint in checkpoints})
    snapshot: dict[str, Any] = {
        f"list_checkpoint_ids({name!r}, include_nested=True)": await listed_ids(
            ctx, name, include_nested=True
        )
        for name in names
    }
    for checkpoint in checkpoints:
        checkpoint_id = checkpoint.checkpoint_id
        snapshot[f"list_nested({checkpoint_id!r})"] = await ctx.storage.list_nested(checkpoint_id)
        if ctx.has(Capability.INSPECT):
            snapshot[f"checkpoint_info({checkpoint_id!r})"] = await ctx.storage.checkpoint_info(checkpoint_id)
    return snapshot


@clause(
    "nested.resave_changed_child_conflicts",
    "Saving a checkpoint again with an embedded checkpoint changed under the same id, or replaced by "
    "one under a new id, raises CheckpointConflictError and changes nothing stored.",
    requires=[Capability.NESTED],
)
async def resave_changed_child_conflicts(ctx: ClauseContext) -> None:
    child = embedded(ctx, "changed-child", state={"value": 1})
    parent = embedded(ctx, "changed-parent", state=sub_workflow_state(child))
    await ctx.storage.save(parent)
    changed_child = ctx.checkpoint(
        child.workflow_name,
        checkpoint_id=child.checkpoint_id,
        timestamp=FIXED_TIMESTAMP,
        graph_signature_hash=child.graph_signature_hash,
        state={"value": 2},
    )
    # Only the embedded checkpoint differs: the parent's own fields, and so a body that refers
    # to the child by id, are the same.
    changed_parent = ctx.checkpoint(
        parent.workflow_name,
        checkpoint_id=parent.checkpoint_id,
        timestamp=FIXED_TIMESTAMP,
        graph_signature_hash=parent.graph_signature_hash,
        state=sub_workflow_state(changed_child),
    )
    try:
        await ctx.storage.save(changed_parent)
    except CheckpointConflictError:
        pass
    except Exception as exc:
        fail(
            f"save() of {parent.checkpoint_id!r} again with embedded {child.checkpoint_id!r} changed raised "
            f"{type(exc).__name__}: {exc}, not CheckpointConflictError"
        )
    else:
        fail(
            f"save() of {parent.checkpoint_id!r} again with embedded {child.checkpoint_id!r} changed "
            "(state value 1 -> 2) was accepted; checkpoints are immutable"
        )
    await expect_loads(ctx, parent, "after the conflicting save")
    await expect_loads(ctx, child, "after the conflicting save of its container")
    renamed_child = embedded(ctx, "renamed-child", state={"value": 1})
    renamed_parent = ctx.checkpoint(
        parent.workflow_name,
        checkpoint_id=parent.checkpoint_id,
        timestamp=FIXED_TIMESTAMP,
        graph_signature_hash=parent.graph_signature_hash,
        state=sub_workflow_state(renamed_child),
    )
    what = (
        f"save() of {parent.checkpoint_id!r} again with {renamed_child.checkpoint_id!r} "
        f"embedded in place of {child.checkpoint_id!r}"
    )
    try:
        await ctx.storage.save(renamed_parent)
    except CheckpointConflictError:
        pass
    except Exception as exc:
        fail(f"{what} raised {type(exc).__name__}: {exc}, not CheckpointConflictError")
    else:
        fail(f"{what} was accepted; checkpoints are immutable")
    await expect_loads(ctx, parent, "after the save that embedded another checkpoint")
    await expect_loads(ctx, child, "after the save of its container that embedded another checkpoint")
