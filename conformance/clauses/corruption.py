"""corruption: damaged bodies raise CheckpointCorruptedError naming the id; nothing is skipped.

Each clause saves checkpoints, damages one stored body behind the storage's back with
``ctx.tamper`` (so it needs the raw_access capability), and checks how every read reacts. A read
that decodes the damaged body must raise CheckpointCorruptedError whose ``checkpoint_id`` is the
damaged id; silently returning something else, or skipping to an older checkpoint (MAF #8181),
hides data loss from the runner.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

from storages.contract import Capability
from storages.errors import CheckpointConflictError, CheckpointCorruptedError

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext
from .fidelity import first_difference

_RAW = (Capability.RAW_ACCESS,)


def truncate(body: bytes) -> bytes:
    """The first half of the body, as a write cut short leaves it."""
    return body[: len(body) // 2]


def garbage(body: bytes) -> bytes:
    """Random bytes of the same length (seeded, so a failure reproduces)."""
    return random.Random(len(body)).randbytes(max(len(body), 64))  # noqa: S311 - reproducible damage


def flip_middle_bit(body: bytes) -> bytes:
    """The body with one bit flipped in its middle byte, as a bad sector or bit rot leaves it."""
    damaged = bytearray(body)
    damaged[len(damaged) // 2] ^= 0x10
    return bytes(damaged)


def empty(body: bytes) -> bytes:
    """Nothing at all, as a crash between create and write leaves it."""
    return b""


async def expect_corrupted(what: str, read: Awaitable[Any], checkpoint_id: str) -> None:
    """``read`` must raise CheckpointCorruptedError naming ``checkpoint_id``."""
    try:
        result = await read
    except CheckpointCorruptedError as exc:
        named = getattr(exc, "checkpoint_id", None)
        if named != checkpoint_id:
            fail(
                f"{what} raised CheckpointCorruptedError naming {named!r}, not the damaged {checkpoint_id!r}"
            )
        return
    except Exception as exc:
        fail(
            f"{what} raised {type(exc).__name__}: {exc} for damaged checkpoint {checkpoint_id!r}; "
            "expected CheckpointCorruptedError"
        )
    fail(
        f"{what} returned {_show(result)} although checkpoint {checkpoint_id!r} is damaged; "
        "expected CheckpointCorruptedError"
    )


def _show(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


async def _saved(ctx: ClauseContext, label: str, count: int) -> list[Any]:
    return await ctx.save_chain(ctx.workflow_name(label), count, state={"payload": ("kept", 1, 2.5)})


async def _load_after(ctx: ClauseContext, damage: Callable[[bytes], bytes], label: str) -> None:
    (checkpoint,) = await _saved(ctx, label, 1)
    checkpoint_id = checkpoint.checkpoint_id
    await ctx.tamper(checkpoint_id, damage)
    await expect_corrupted(
        f"load({checkpoint_id!r}) of a {label} body", ctx.storage.load(checkpoint_id), checkpoint_id
    )


@clause(
    "corruption.truncated_body",
    "load() of a truncated body raises CheckpointCorruptedError naming the id.",
    requires=_RAW,
)
async def truncated_body(ctx: ClauseContext) -> None:
    await _load_after(ctx, truncate, "truncated")


@clause(
    "corruption.garbage_body",
    "load() of a body of random bytes raises CheckpointCorruptedError naming the id.",
    requires=_RAW,
)
async def garbage_body(ctx: ClauseContext) -> None:
    await _load_after(ctx, garbage, "garbage")


@clause(
    "corruption.flipped_bit",
    "load() of a body with one bit flipped in the middle raises CheckpointCorruptedError naming the id.",
    requires=_RAW,
)
async def flipped_bit(ctx: ClauseContext) -> None:
    await _load_after(ctx, flip_middle_bit, "bit-flipped")


@clause(
    "corruption.empty_body",
    "load() of an empty body raises CheckpointCorruptedError naming the id.",
    requires=_RAW,
)
async def empty_body(ctx: ClauseContext) -> None:
    await _load_after(ctx, empty, "empty")


@clause(
    "corruption.swapped_body",
    "load() of an id holding another checkpoint's intact body raises CheckpointCorruptedError naming the id.",
    requires=_RAW,
)
async def swapped_body(ctx: ClauseContext) -> None:
    first, second = await _saved(ctx, "swapped", 2)
    # A valid body under the wrong key: what a mixed-up rename or a bad restore leaves behind.
    other_body = await ctx.storage.read_raw_body(second.checkpoint_id)
    if not other_body:
        fail(f"read_raw_body({second.checkpoint_id!r}) found nothing right after a save")
    await ctx.tamper(first.checkpoint_id, lambda _: bytes(other_body))
    await expect_corrupted(
        f"load({first.checkpoint_id!r}) holding the body of {second.checkpoint_id!r}",
        ctx.storage.load(first.checkpoint_id),
        first.checkpoint_id,
    )


@clause(
    "corruption.get_latest_raises",
    "get_latest() raises CheckpointCorruptedError for a damaged latest body, never falling back to older.",
    requires=_RAW,
)
async def get_latest_raises(ctx: ClauseContext) -> None:
    older, latest = await _saved(ctx, "latest", 2)
    await ctx.tamper(latest.checkpoint_id, flip_middle_bit)
    await expect_corrupted(
        f"get_latest({latest.workflow_name!r}) with damaged latest {latest.checkpoint_id!r} "
        f"(older {older.checkpoint_id!r} intact)",
        ctx.storage.get_latest(workflow_name=latest.workflow_name),
        latest.checkpoint_id,
    )


@clause(
    "corruption.list_checkpoints_raises",
    "list_checkpoints() raises CheckpointCorruptedError naming a damaged checkpoint (garbage, or an emptied "
    "body) instead of dropping it.",
    requires=_RAW,
)
async def list_checkpoints_raises(ctx: ClauseContext) -> None:
    chain = await _saved(ctx, "listing", 3)
    damaged = chain[1].checkpoint_id
    await ctx.tamper(damaged, garbage)
    await expect_corrupted(
        f"list_checkpoints({chain[0].workflow_name!r}) with damaged {damaged!r}",
        ctx.storage.list_checkpoints(workflow_name=chain[0].workflow_name),
        damaged,
    )
    # A body too short to be read at all (emptied) is damage too, never a reason to leave it out.
    emptied = await _saved(ctx, "listing-emptied", 2)
    await ctx.tamper(emptied[0].checkpoint_id, empty)
    await expect_corrupted(
        f"list_checkpoints({emptied[0].workflow_name!r}) with emptied {emptied[0].checkpoint_id!r}",
        ctx.storage.list_checkpoints(workflow_name=emptied[0].workflow_name),
        emptied[0].checkpoint_id,
    )


@clause(
    "corruption.ids_still_listed",
    "list_checkpoint_ids() still lists a damaged checkpoint; it never decodes bodies.",
    requires=_RAW,
)
async def ids_still_listed(ctx: ClauseContext) -> None:
    chain = await _saved(ctx, "ids", 3)
    damaged = chain[1].checkpoint_id
    await ctx.tamper(damaged, truncate)
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=chain[0].workflow_name)
    ensure(damaged in ids, f"list_checkpoint_ids dropped damaged checkpoint {damaged!r}: {ids}")
    # Order is the ordering family's business; here only what is listed matters.
    ensure_equal(sorted(ids), sorted(c.checkpoint_id for c in chain), f"ids listed with {damaged!r} damaged")


@clause(
    "corruption.others_unaffected",
    "Damage to one body leaves every other checkpoint, of its workflow and of others, loadable and equal.",
    requires=_RAW,
)
async def others_unaffected(ctx: ClauseContext) -> None:
    chain = await _saved(ctx, "neighbours", 3)
    (bystander,) = await _saved(ctx, "bystander", 1)
    await ctx.tamper(chain[1].checkpoint_id, empty)
    for checkpoint in (chain[0], chain[2], bystander):
        loaded = await ctx.storage.load(checkpoint.checkpoint_id)
        problem = first_difference(checkpoint, loaded)
        if problem is not None:
            fail(f"load({checkpoint.checkpoint_id!r}) after damage to {chain[1].checkpoint_id!r}: {problem}")
    latest = await ctx.storage.get_latest(workflow_name=chain[0].workflow_name)
    ensure_equal(
        getattr(latest, "checkpoint_id", None),
        chain[2].checkpoint_id,
        f"get_latest id with the older {chain[1].checkpoint_id!r} damaged",
    )
    listed = await ctx.storage.list_checkpoints(workflow_name=bystander.workflow_name)
    ensure_equal(listed, [bystander], "list_checkpoints of another workflow")


@clause(
    "corruption.delete_damaged",
    "A damaged checkpoint refuses a save of other content under its id, can be deleted, after which "
    "get_latest() and list_checkpoints() work again.",
    requires=_RAW,
)
async def delete_damaged(ctx: ClauseContext) -> None:
    older, damaged = await _saved(ctx, "repair", 2)
    await ctx.tamper(damaged.checkpoint_id, garbage)
    await _other_content_refused(ctx, damaged)
    deleted = await ctx.storage.delete(damaged.checkpoint_id)
    ensure_equal(deleted, True, f"delete({damaged.checkpoint_id!r}) of a damaged checkpoint")
    latest = await ctx.storage.get_latest(workflow_name=older.workflow_name)
    ensure_equal(latest, older, f"get_latest after deleting damaged {damaged.checkpoint_id!r}")
    listed = await ctx.storage.list_checkpoints(workflow_name=older.workflow_name)
    ensure_equal(listed, [older], f"list_checkpoints after deleting damaged {damaged.checkpoint_id!r}")


async def _other_content_refused(ctx: ClauseContext, damaged: Any) -> None:
    """A save of other content under a damaged id: a backend that trusts what raw access wrote
    (or compares the wrong digest) takes it as the checkpoint already stored."""
    other = ctx.checkpoint(
        damaged.workflow_name,
        checkpoint_id=damaged.checkpoint_id,
        previous_checkpoint_id=damaged.previous_checkpoint_id,
        graph_signature_hash=damaged.graph_signature_hash,
        state={"payload": "other content"},
    )
    try:
        await ctx.storage.save(other)
    except (CheckpointConflictError, CheckpointCorruptedError):
        return
    except Exception as exc:
        fail(
            f"save() of other content under damaged id {damaged.checkpoint_id!r} raised "
            f"{type(exc).__name__}: {exc}; expected CheckpointConflictError or CheckpointCorruptedError"
        )
    fail(
        f"save() of other content under damaged id {damaged.checkpoint_id!r} was accepted as the "
        "checkpoint already stored"
    )


# A body that is intact but not the record it is stored as: what a writer with access to the
# store leaves when it moves bodies around and recomputes their checksums. Built with the
# storage's own public API (save, read the raw body, delete), so any raw-access backend can run it.


async def _body_as_saved(ctx: ClauseContext, checkpoint: Any) -> bytes:
    """The raw body ``checkpoint`` is stored as, leaving nothing stored."""
    await ctx.storage.save(checkpoint)
    body = await ctx.storage.read_raw_body(checkpoint.checkpoint_id)
    if not body:
        fail(f"read_raw_body({checkpoint.checkpoint_id!r}) found nothing right after a save")
    await ctx.storage.delete(checkpoint.checkpoint_id)
    return bytes(body)


async def _stored_with_body_of(ctx: ClauseContext, indexed: Any, impostor: Any) -> None:
    """Store ``indexed`` and replace its body with ``impostor``'s (same id, one field differs)."""
    body = await _body_as_saved(ctx, impostor)
    await ctx.storage.save(indexed)
    await ctx.tamper(indexed.checkpoint_id, lambda _: body)


@clause(
    "corruption.body_names_another_workflow",
    "Reads refuse a checksummed body whose workflow name differs from its record (CheckpointCorruptedError).",
    requires=_RAW,
)
async def body_names_another_workflow(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("moved")
    indexed = ctx.checkpoint(workflow_name)
    impostor = ctx.checkpoint(ctx.workflow_name("elsewhere"), checkpoint_id=indexed.checkpoint_id)
    await _stored_with_body_of(ctx, indexed, impostor)
    checkpoint_id = indexed.checkpoint_id
    await expect_corrupted(
        f"load({checkpoint_id!r}) whose body names workflow {impostor.workflow_name!r}",
        ctx.storage.load(checkpoint_id),
        checkpoint_id,
    )
    await expect_corrupted(
        f"get_latest({workflow_name!r}) whose body names another workflow",
        ctx.storage.get_latest(workflow_name=workflow_name),
        checkpoint_id,
    )
    await expect_corrupted(
        f"list_checkpoints({workflow_name!r}) whose body names another workflow",
        ctx.storage.list_checkpoints(workflow_name=workflow_name),
        checkpoint_id,
    )


@clause(
    "corruption.body_has_another_signature",
    "Reads, filtered by signature or not, refuse a body whose graph signature differs from the record's.",
    requires=(Capability.RAW_ACCESS, Capability.SIGNATURE_FILTER),
)
async def body_has_another_signature(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("resigned")
    signature = "sig-" + "a" * 60
    indexed = ctx.checkpoint(workflow_name, graph_signature_hash=signature)
    impostor = ctx.checkpoint(
        workflow_name, checkpoint_id=indexed.checkpoint_id, graph_signature_hash="sig-" + "b" * 60
    )
    await _stored_with_body_of(ctx, indexed, impostor)
    checkpoint_id = indexed.checkpoint_id
    await expect_corrupted(
        f"get_latest({workflow_name!r}, graph_signature_hash={signature!r}) whose body has another signature",
        ctx.storage.get_latest(workflow_name=workflow_name, graph_signature_hash=signature),
        checkpoint_id,
    )
    await expect_corrupted(
        f"list_checkpoints({workflow_name!r}, graph_signature_hash=...) whose body has another signature",
        ctx.storage.list_checkpoints(workflow_name=workflow_name, graph_signature_hash=signature),
        checkpoint_id,
    )
    await expect_corrupted(
        f"load({checkpoint_id!r}) whose body has another signature than its record",
        ctx.storage.load(checkpoint_id),
        checkpoint_id,
    )


@clause(
    "corruption.body_has_another_previous",
    "load() and walk_ancestry() refuse a body whose previous id differs from the record's link.",
    requires=_RAW,
)
async def body_has_another_previous(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("relinked")
    first, second = await ctx.save_chain(workflow_name, 2)
    indexed = ctx.checkpoint(workflow_name, previous_checkpoint_id=second.checkpoint_id)
    impostor = ctx.checkpoint(
        workflow_name, checkpoint_id=indexed.checkpoint_id, previous_checkpoint_id=first.checkpoint_id
    )
    await _stored_with_body_of(ctx, indexed, impostor)
    checkpoint_id = indexed.checkpoint_id
    await expect_corrupted(
        f"load({checkpoint_id!r}) whose body links to {first.checkpoint_id!r}, its record to "
        f"{second.checkpoint_id!r}",
        ctx.storage.load(checkpoint_id),
        checkpoint_id,
    )
    if ctx.has(Capability.ANCESTRY):
        await expect_corrupted(
            f"walk_ancestry({checkpoint_id!r}) through a body whose previous id disagrees with its link",
            ctx.storage.walk_ancestry(checkpoint_id),
            checkpoint_id,
        )
