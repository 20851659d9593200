"""tamper: with an integrity key, every at-rest edit is refused by reads, walks or an anchor.

Each clause opens a handle with the kit's own key (``with_integrity_key``), saves through it,
and then edits the store as someone with write access but without the key would: through raw
access (``read_raw_body`` / ``write_raw_body``), deletes, and saves from a handle without a key.
These are the nine at-rest edits of external tamper suites (content, tail truncation, middle
deletion, reorder, forged insert, cross-context replay, rollback replay, metadata, whole-store
snapshot rollback), and a prune by a writer without the key (a deletion behind a tombstone).
Every clause has its controls: the unedited store verifies, and the edit
really landed (the keyless view shows it), so a pass is never a no-op.

Truncation, rollback replay and snapshot rollback leave only authentic records behind; no key
can see them from inside the store, so those clauses check that a read given an anchor (from
``head_anchor`` before the edit) refuses, and that the same read without one does not.

On a storage that declares ``ttl`` a record's absence is what expiry leaves, so no reader can
tell a deleted record, or a prune's missing receipt, from an expired one (docs/integrity.md,
"Under a TTL"): there the deletion clauses check what still holds (the walk ends ``missing`` at
the deleted record, never ``pruned`` behind a forged tombstone) and not that verify reports it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any

from storages.contract import AncestryEnd, Capability
from storages.errors import CheckpointNotFoundError, CheckpointTamperedError
from storages.integrity import IntegrityKeys, TamperKind, is_sealed, split_sealed

from ..clause import clause, ensure, ensure_equal, fail
from ..context import ClauseContext

KIT_KEY = b"conformance-kit-integrity-key-v1"
"""The key the kit signs with; a test key, never one for real data."""
ROTATED_KEY = b"conformance-kit-rotated-key-v2!!"
ATTACKER_KEY = b"someone-else-s-key-not-trusted!!"

_BASE = (Capability.RAW_ACCESS,)
"""The edits go through raw access; the keys come from ``with_integrity_key``, which every storage
on the shared engine offers (a storage with raw access but no keys fails: nothing stops an edit)."""


@asynccontextmanager
async def keyed(ctx: ClauseContext, keys: Any = None) -> AsyncIterator[Any]:
    """A handle on the clause's store that signs and verifies with ``keys`` (the kit key)."""
    with_key = getattr(ctx.storage, "with_integrity_key", None)
    if not callable(with_key):
        fail(
            f"{ctx.storage.__class__.__name__} exposes its stored bytes (raw_access) but offers no integrity "
            "keys (with_integrity_key): whoever can write the store can change any checkpoint unseen"
        )
    handle = with_key(keys if keys is not None else IntegrityKeys(KIT_KEY))
    try:
        yield handle
    finally:
        await handle.aclose()


@asynccontextmanager
async def keyless(storage: Any) -> AsyncIterator[Any]:
    """The attacker's handle: the same store, no key."""
    handle = storage.with_integrity_key(None)
    try:
        yield handle
    finally:
        await handle.aclose()


async def expect_tampered(
    what: str, read: Awaitable[Any], checkpoint_id: str, kinds: tuple[TamperKind, ...] = ()
) -> None:
    """``read`` must raise CheckpointTamperedError naming ``checkpoint_id`` (of one of ``kinds``)."""
    try:
        result = await read
    except CheckpointTamperedError as exc:
        ensure(
            exc.checkpoint_id == checkpoint_id,
            f"{what} raised CheckpointTamperedError naming {exc.checkpoint_id!r}, "
            f"not {checkpoint_id!r}: {exc}",
        )
        ensure(
            not kinds or exc.kind in {kind.value for kind in kinds},
            f"{what} raised CheckpointTamperedError of kind {exc.kind!r}, expected "
            f"{' or '.join(kind.value for kind in kinds)}: {exc}",
        )
        return
    except Exception as exc:
        fail(f"{what} raised {type(exc).__name__}: {exc}; expected CheckpointTamperedError")
    fail(f"{what} returned {_show(result)} after the edit; expected CheckpointTamperedError")


def _show(value: Any) -> str:
    checkpoint_id = getattr(value, "checkpoint_id", None)
    return f"checkpoint {checkpoint_id!r}" if checkpoint_id is not None else repr(value)[:120]


async def _chain(ctx: ClauseContext, storage: Any, label: str, length: int) -> list[Any]:
    workflow = ctx.workflow_name(label)
    chain: list[Any] = []
    previous: str | None = None
    for index in range(length):
        checkpoint = ctx.checkpoint(
            workflow, previous_checkpoint_id=previous, iteration_count=index, state={"step": index}
        )
        await storage.save(checkpoint)
        chain.append(checkpoint)
        previous = checkpoint.checkpoint_id
    return chain


async def _raw(storage: Any, checkpoint_id: str) -> bytes:
    raw = await storage.read_raw_body(checkpoint_id)
    if raw is None:
        fail(f"read_raw_body({checkpoint_id!r}) found nothing right after a save")
    return bytes(raw)


async def _reinsert(ctx: ClauseContext, attacker: Any, raw: bytes, **index: Any) -> None:
    """Put stored bytes back into the store under an index entry of the attacker's choosing: a
    keyless save of a stand-in with those index fields, then the bytes written over it."""
    stand_in = ctx.checkpoint(**index)
    await attacker.save(stand_in)
    await attacker.write_raw_body(stand_in.checkpoint_id, raw)


async def _latest_id(storage: Any, workflow: str, **options: Any) -> str | None:
    latest = await storage.get_latest(workflow_name=workflow, **options)
    return None if latest is None else str(latest.checkpoint_id)


@clause(
    "tamper.unedited_store_verifies",
    "Signed records reload on a new handle, verify, walk and anchor; a keyed handle's new_handle() signs "
    "its saves; an anchor accepts later saves.",
    requires=_BASE,
)
async def unedited_store_verifies(ctx: ClauseContext) -> None:
    async with keyed(ctx) as writer:
        chain = await _chain(ctx, writer, "plain", 3)
        workflow = chain[0].workflow_name
        anchor = await writer.head_anchor(workflow_name=workflow)
    async with keyed(ctx) as reader:
        for checkpoint in chain:
            raw = await _raw(reader, checkpoint.checkpoint_id)
            ensure(is_sealed(raw), f"checkpoint {checkpoint.checkpoint_id!r} is stored without a seal")
            loaded = await reader.load(checkpoint.checkpoint_id, anchor=anchor)
            ensure_equal(loaded.state, checkpoint.state, "state read back")
        ensure_equal(await _latest_id(reader, workflow, anchor=anchor), chain[-1].checkpoint_id, "latest")
        if ctx.has(Capability.ANCESTRY):
            walk = await reader.walk_ancestry(chain[-1].checkpoint_id)
            ensure(walk.intact and len(walk.items) == 3, f"the walk of an unedited chain ended {walk.end}")
        more = ctx.checkpoint(workflow, previous_checkpoint_id=chain[-1].checkpoint_id, iteration_count=3)
        # new_handle() keeps the key (docs/integrity.md, "Keys"): what a second handle of a keyed
        # one saves is signed, or the next reader refuses it as a forged insert.
        second = reader.new_handle()
        try:
            await second.save(more)
            raw = await _raw(second, more.checkpoint_id)
        finally:
            await second.aclose()
        ensure(
            is_sealed(raw),
            f"checkpoint {more.checkpoint_id!r}, saved through new_handle() of a keyed handle, is stored "
            "without a seal: new_handle() dropped the integrity key",
        )
    async with keyed(ctx) as fresh:
        # A later save continues from the anchored record: progress, not a rollback.
        ensure_equal(
            await _latest_id(fresh, workflow, anchor=anchor), more.checkpoint_id, "latest after a save"
        )
        if ctx.has(Capability.INSPECT):
            from storages.tools.verify import verify

            report = await verify(fresh, workflow_name=workflow, anchors={workflow: anchor})
            ensure(report.ok, f"verify found {[f.message for f in report.findings]} in an unedited store")


@clause(
    "tamper.content_edit",
    "A body re-encoded with other content and a recomputed checksum is refused by every read.",
    requires=_BASE,
)
async def content_edit(ctx: ClauseContext) -> None:
    async with keyed(ctx) as storage:
        chain = await _chain(ctx, storage, "content", 2)
        target = chain[-1]
        _, parts = split_sealed(target.checkpoint_id, await _raw(storage, target.checkpoint_id))
        # The attacker reads the body as it is stored: a keyed save framed it for its seal (no checksum).
        edited = storage.codec.decode_checkpoint(parts.body, checkpoint_id=target.checkpoint_id, sealed=True)
        edited.state = {"step": "approved by nobody"}
        forged_body = storage.codec.encode_checkpoint(edited)
        await storage.write_raw_body(target.checkpoint_id, parts.header + parts.mac + forged_body)
        landed = split_sealed(target.checkpoint_id, await _raw(storage, target.checkpoint_id))[1].body
        ensure(
            storage.codec.decode_checkpoint(landed, checkpoint_id=target.checkpoint_id).state == edited.state,
            "the edit did not land",
        )
        workflow = target.workflow_name
        await expect_tampered("load", storage.load(target.checkpoint_id), target.checkpoint_id)
        await expect_tampered("get_latest", storage.get_latest(workflow_name=workflow), target.checkpoint_id)
        await expect_tampered(
            "list_checkpoints", storage.list_checkpoints(workflow_name=workflow), target.checkpoint_id
        )


@clause(
    "tamper.tail_truncation",
    "Deleting the newest checkpoint is refused by get_latest and load given an anchor taken before "
    "(one taken right after that checkpoint's save, with an anchor taken before the save too).",
    requires=_BASE,
)
async def tail_truncation(ctx: ClauseContext) -> None:
    async with keyed(ctx) as storage:
        chain = await _chain(ctx, storage, "tail", 2)
        workflow = chain[0].workflow_name
        # A runner takes an anchor after each save: the one taken after the newest save must name
        # it, not the head an anchor taken a moment before named (an anchor kept in a cache).
        await storage.head_anchor(workflow_name=workflow)
        newest_saved = ctx.checkpoint(
            workflow, previous_checkpoint_id=chain[-1].checkpoint_id, iteration_count=2, state={"step": 2}
        )
        await storage.save(newest_saved)
        chain.append(newest_saved)
        anchor = await storage.head_anchor(workflow_name=workflow)
        async with keyless(storage) as attacker:
            ensure(await attacker.delete(chain[-1].checkpoint_id), "the delete did not land")
        # With the key alone the truncated store is authentic: the older checkpoint is served.
        ensure_equal(await _latest_id(storage, workflow), chain[-2].checkpoint_id, "latest without anchor")
        newest = chain[-1].checkpoint_id
        kinds = (TamperKind.ROLLED_BACK,)
        await expect_tampered(
            "get_latest(anchor=)", storage.get_latest(workflow_name=workflow, anchor=anchor), newest, kinds
        )
        await expect_tampered(
            "load(anchor=)", storage.load(chain[0].checkpoint_id, anchor=anchor), newest, kinds
        )


@clause(
    "tamper.middle_deletion",
    "Deleting a checkpoint inside a chain ends walks through it and is reported by verify as signed "
    "(under a TTL, where it is indistinguishable from expiry, it ends walks).",
    requires=(*_BASE, Capability.ANCESTRY, Capability.INSPECT),
)
async def middle_deletion(ctx: ClauseContext) -> None:
    from storages.tools.verify import FindingKind, verify

    async with keyed(ctx) as storage:
        chain = await _chain(ctx, storage, "middle", 3)
        middle, last = chain[1].checkpoint_id, chain[2].checkpoint_id
        async with keyless(storage) as attacker:
            ensure(await attacker.delete(middle), "the delete did not land")
        try:
            await storage.load(middle)
            fail(f"checkpoint {middle!r} still loads after its delete")
        except CheckpointNotFoundError:
            pass
        walk = await storage.walk_ancestry(last)
        ensure(
            not walk.intact and walk.end_id == middle,
            f"the walk from {last!r} ended {walk.end} at {walk.end_id!r}, not missing at {middle!r}",
        )
        if ctx.has(Capability.TTL):
            return  # a record missing from a chain is what expiry leaves too
        report = await verify(storage, workflow_name=chain[0].workflow_name)
        ensure(
            any(last in f.checkpoint_ids for f in report.of_kind(FindingKind.CHAIN_BROKEN)),
            f"verify did not report {last!r} as signed after the deleted {middle!r}: {report.counts()}",
        )


@clause(
    "tamper.forged_prune",
    "Tombstones left by a prune without the key end walks missing and verify reports them (under a "
    "TTL, where a missing receipt may have expired, they end walks); keyed ones pass.",
    requires=(*_BASE, Capability.PRUNE, Capability.ANCESTRY),
)
async def forged_prune(ctx: ClauseContext) -> None:
    async with keyed(ctx) as storage:
        # Control: a keyed prune's tombstone ends a walk as pruned, and verifies.
        genuine = await _chain(ctx, storage, "prune-genuine", 3)
        await _expect_prune_end(ctx, storage, genuine, AncestryEnd.PRUNED, "a prune with the key")
        # The tombstones of a prune without the key (a deletion dressed as a prune), and of one
        # with a key this storage does not trust, vouch for nothing.
        async with keyless(storage) as attacker:
            forged = await _chain(ctx, storage, "prune-forged", 3)
            ensure_equal(
                await attacker.prune(workflow_name=forged[0].workflow_name, keep_last=2), 1, "pruned"
            )
            landed = await attacker.walk_ancestry_ids(forged[-1].checkpoint_id)
            ensure(
                landed.end is AncestryEnd.PRUNED and landed.end_id == forged[0].checkpoint_id,
                f"the forged prune did not land: the index walk ended {landed.end} at {landed.end_id!r}",
            )
            await _expect_prune_end(
                ctx,
                storage,
                forged,
                AncestryEnd.MISSING,
                "a prune without the key",
                pruned=True,
                unreceipted=True,
            )
        async with keyed(ctx, IntegrityKeys(ATTACKER_KEY)) as outsider:
            foreign = await _chain(ctx, storage, "prune-foreign", 3)
            await _expect_prune_end(
                ctx, outsider, foreign, AncestryEnd.MISSING, "a prune with an untrusted key", reader=storage
            )


async def _expect_prune_end(
    ctx: ClauseContext,
    pruner: Any,
    chain: list[Any],
    end: AncestryEnd,
    what: str,
    *,
    pruned: bool = False,
    unreceipted: bool = False,
    reader: Any = None,
) -> None:
    """Prune the oldest of ``chain`` through ``pruner`` (unless ``pruned``), then walk and verify
    through ``reader`` (default: ``pruner``): the walk must end ``end`` at the pruned record, and
    verify must report the record after it exactly when the walk ends missing, unless the prune
    left no receipt (``unreceipted``) on a storage with a TTL, where a receipt may have expired."""
    reader = pruner if reader is None else reader
    workflow, oldest, after = chain[0].workflow_name, chain[0].checkpoint_id, chain[1].checkpoint_id
    if not pruned:
        ensure_equal(
            await pruner.prune(workflow_name=workflow, keep_last=2), 1, f"{what}: checkpoints pruned"
        )
    walk = await reader.walk_ancestry(chain[-1].checkpoint_id)
    ensure(
        walk.end is end and walk.end_id == oldest,
        f"after {what}, the walk from {chain[-1].checkpoint_id!r} ended {walk.end} at {walk.end_id!r}, "
        f"not {end} at {oldest!r}",
    )
    if not ctx.has(Capability.INSPECT):
        return
    if unreceipted and ctx.has(Capability.TTL):
        return  # verify takes a missing receipt for an expired one
    from storages.tools.verify import FindingKind, verify

    report = await verify(reader, workflow_name=workflow)
    if end is AncestryEnd.PRUNED:
        ensure(report.ok, f"after {what}, verify found {[f.message for f in report.findings]}")
    else:
        ensure(
            any(after in f.checkpoint_ids for f in report.of_kind(FindingKind.CHAIN_BROKEN)),
            f"after {what}, verify did not report {after!r} as signed after {oldest!r}: {report.counts()}",
        )


@clause(
    "tamper.reorder",
    "Two checkpoints' stored bodies swapped are refused by load, naming each.",
    requires=_BASE,
)
async def reorder(ctx: ClauseContext) -> None:
    async with keyed(ctx) as storage:
        chain = await _chain(ctx, storage, "reorder", 3)
        first, second = chain[1].checkpoint_id, chain[2].checkpoint_id
        body_first, body_second = await _raw(storage, first), await _raw(storage, second)
        await storage.write_raw_body(first, body_second)
        await storage.write_raw_body(second, body_first)
        ensure(await _raw(storage, first) == body_second, "the swap did not land")
        await expect_tampered("load", storage.load(first), first)
        await expect_tampered("load", storage.load(second), second)


@clause(
    "tamper.forged_insert",
    "A checkpoint saved without the key, or with an untrusted key, is refused by get_latest and load.",
    requires=_BASE,
)
async def forged_insert(ctx: ClauseContext) -> None:
    async with keyed(ctx) as storage:
        chain = await _chain(ctx, storage, "forged", 2)
        workflow = chain[0].workflow_name
        unsigned = ctx.checkpoint(workflow, previous_checkpoint_id=chain[-1].checkpoint_id, iteration_count=2)
        async with keyless(storage) as attacker:
            await attacker.save(unsigned)
            ensure_equal(await _latest_id(attacker, workflow), unsigned.checkpoint_id, "the forged insert")
        await expect_tampered(
            "get_latest", storage.get_latest(workflow_name=workflow), unsigned.checkpoint_id
        )
        await expect_tampered("load", storage.load(unsigned.checkpoint_id), unsigned.checkpoint_id)
        # Signed, but with a key this storage does not trust (a root: the outsider cannot verify,
        # so cannot chain onto, the records signed with the storage's key).
        foreign = ctx.checkpoint(workflow, iteration_count=3)
        async with keyed(ctx, IntegrityKeys(ATTACKER_KEY)) as outsider:
            await outsider.save(foreign)
        await expect_tampered("get_latest", storage.get_latest(workflow_name=workflow), foreign.checkpoint_id)
        await expect_tampered("load", storage.load(foreign.checkpoint_id), foreign.checkpoint_id)


@clause(
    "tamper.cross_context_replay",
    "A signed body replayed under another id, workflow or chain position is refused by load.",
    requires=_BASE,
)
async def cross_context_replay(ctx: ClauseContext) -> None:
    async with keyed(ctx) as storage:
        here = await _chain(ctx, storage, "context-a", 3)
        there = await _chain(ctx, storage, "context-b", 1)
        victim = here[1].checkpoint_id
        # Another workflow's signed record, whole, over this one.
        original = await _raw(storage, victim)
        await storage.write_raw_body(victim, await _raw(storage, there[0].checkpoint_id))
        await expect_tampered("load of a record replayed from another workflow", storage.load(victim), victim)
        # This record's own body and MAC, presented in another record's chain position.
        _, own = split_sealed(victim, original)
        _, elsewhere = split_sealed(there[0].checkpoint_id, await _raw(storage, there[0].checkpoint_id))
        await storage.write_raw_body(victim, elsewhere.header + own.mac + own.body)
        ensure(await _raw(storage, victim) != original, "the replay did not land")
        await expect_tampered(
            "load of a record moved to another chain position", storage.load(victim), victim
        )


@clause(
    "tamper.rollback_replay",
    "A deleted checkpoint put back after newer saves is refused by get_latest given an anchor.",
    requires=_BASE,
)
async def rollback_replay(ctx: ClauseContext) -> None:
    async with keyed(ctx) as storage:
        chain = await _chain(ctx, storage, "replay", 3)
        workflow = chain[0].workflow_name
        stale = chain[-1]
        stale_raw = await _raw(storage, stale.checkpoint_id)
        await storage.delete(stale.checkpoint_id)  # the application abandons that step
        # Built before the abandoned step's clock reading: the replayed step, its rival, is newer.
        redo = ctx.checkpoint(
            workflow,
            previous_checkpoint_id=chain[-2].checkpoint_id,
            iteration_count=9,
            timestamp=chain[-2].timestamp,
        )
        await storage.save(redo)
        anchor = await storage.head_anchor(workflow_name=workflow)
        async with keyless(storage) as attacker:
            await _reinsert(
                ctx,
                attacker,
                stale_raw,
                workflow_name=workflow,
                checkpoint_id=stale.checkpoint_id,
                previous_checkpoint_id=stale.previous_checkpoint_id,
            )
        # Authentic bytes: with the key alone the replayed step is what latest serves.
        ensure_equal(await _latest_id(storage, workflow), stale.checkpoint_id, "latest without anchor")
        await expect_tampered(
            "get_latest(anchor=)",
            storage.get_latest(workflow_name=workflow, anchor=anchor),
            redo.checkpoint_id,
            (TamperKind.ROLLED_BACK,),
        )


@clause(
    "tamper.metadata_edit",
    "A signed body listed under another workflow in the index is refused by that workflow's reads.",
    requires=_BASE,
)
async def metadata_edit(ctx: ClauseContext) -> None:
    async with keyed(ctx) as storage:
        chain = await _chain(ctx, storage, "metadata", 2)
        target = chain[-1]
        raw = await _raw(storage, target.checkpoint_id)
        elsewhere = ctx.workflow_name("metadata-forged")
        async with keyless(storage) as attacker:
            await attacker.delete(target.checkpoint_id)
            await _reinsert(
                ctx,
                attacker,
                raw,
                workflow_name=elsewhere,
                checkpoint_id=target.checkpoint_id,
                previous_checkpoint_id=target.previous_checkpoint_id,
            )
        ensure_equal(
            await storage.list_checkpoint_ids(workflow_name=elsewhere),
            [target.checkpoint_id],
            "the index edit",
        )
        await expect_tampered(
            "get_latest",
            storage.get_latest(workflow_name=elsewhere),
            target.checkpoint_id,
            (TamperKind.INDEX_MISMATCH,),
        )
        await expect_tampered(
            "list_checkpoints", storage.list_checkpoints(workflow_name=elsewhere), target.checkpoint_id
        )


@clause(
    "tamper.snapshot_rollback",
    "A whole store put back to an earlier snapshot is refused, per workflow, given anchors.",
    requires=_BASE,
)
async def snapshot_rollback(ctx: ClauseContext) -> None:
    async with keyed(ctx) as storage:
        chains = [await _chain(ctx, storage, f"snapshot-{n}", 2) for n in range(2)]
        later: list[Any] = []
        for chain in chains:
            step = ctx.checkpoint(
                chain[0].workflow_name, previous_checkpoint_id=chain[-1].checkpoint_id, iteration_count=2
            )
            await storage.save(step)
            later.append(step)
        anchors = {
            chain[0].workflow_name: await storage.head_anchor(workflow_name=chain[0].workflow_name)
            for chain in chains
        }
        async with keyless(storage) as attacker:  # the snapshot is restored: later saves vanish
            for step in later:
                ensure(await attacker.delete(step.checkpoint_id), "the restore did not land")
        for chain, step in zip(chains, later, strict=True):
            workflow = chain[0].workflow_name
            ensure_equal(
                await _latest_id(storage, workflow), chain[-1].checkpoint_id, "latest without anchor"
            )
            await expect_tampered(
                "get_latest(anchor=)",
                storage.get_latest(workflow_name=workflow, anchor=anchors[workflow]),
                step.checkpoint_id,
                (TamperKind.ROLLED_BACK,),
            )
        if ctx.has(Capability.INSPECT):
            from storages.tools.verify import FindingKind, verify

            rolled = set()
            for workflow, anchor in anchors.items():
                # One workflow at a time: the clause's cost must not grow with what other
                # clauses left in the store (a whole-store verify over moto took 30 s loaded).
                report = await verify(storage, workflow_name=workflow, anchors={workflow: anchor})
                rolled |= {f.workflow_name for f in report.of_kind(FindingKind.ROLLED_BACK)}
            ensure_equal(rolled, set(anchors), "workflows verify reports as rolled back")


@clause(
    "tamper.key_rotation",
    "After a rotation old records verify by their key id; a record whose key is not trusted is refused; "
    "a key provider is asked at every save, so one rotated live signs the next save with its new key.",
    requires=_BASE,
)
async def key_rotation(ctx: ClauseContext) -> None:
    old_keys = IntegrityKeys(KIT_KEY)
    new_keys = IntegrityKeys(ROTATED_KEY, verifying_keys=[KIT_KEY])
    async with keyed(ctx, old_keys) as before:
        (old,) = await _chain(ctx, before, "rotation", 1)
    async with keyed(ctx, new_keys) as rotated:
        try:
            reloaded = await rotated.load(old.checkpoint_id)
        except CheckpointTamperedError as exc:
            fail(
                f"a record signed with key id {old_keys.signing_key()[0]!r} is refused after a rotation "
                f"that kept that key for verifying: {exc}"
            )
        ensure_equal(reloaded.state, old.state, "an old record after rotation")
        new = ctx.checkpoint(old.workflow_name, previous_checkpoint_id=old.checkpoint_id, iteration_count=1)
        await rotated.save(new)
        seal, _ = split_sealed(new.checkpoint_id, await _raw(rotated, new.checkpoint_id))
        ensure_equal(seal.key_id, new_keys.signing_key()[0], "the key id a new record is signed with")
    async with keyed(ctx, IntegrityKeys(ROTATED_KEY)) as retired_old:
        await expect_tampered(
            "load of a record signed with a retired key",
            retired_old.load(old.checkpoint_id),
            old.checkpoint_id,
            (TamperKind.UNKNOWN_KEY,),
        )
        ensure_equal((await retired_old.load(new.checkpoint_id)).state, new.state, "a new record")
    await _rotated_live(ctx, new_keys)


class _LiveKeys:
    """A key provider rotated in place, as one reading a secret manager is."""

    def __init__(self, keys: IntegrityKeys) -> None:
        self.current = keys

    def signing_key(self) -> tuple[str, bytes]:
        return self.current.signing_key()

    def verifying_key(self, key_id: str) -> bytes | None:
        return self.current.verifying_key(key_id)


async def _rotated_live(ctx: ClauseContext, rotated_keys: IntegrityKeys) -> None:
    """A provider that rotates while a handle holds it signs the handle's next save with the new
    key (docs/integrity.md, "Keys": asked on every save and read); a layer that asked it once
    keeps signing with a key the operator is retiring."""
    live = _LiveKeys(IntegrityKeys(KIT_KEY))
    async with keyed(ctx, live) as storage:
        (first,) = await _chain(ctx, storage, "live-rotation", 1)
        live.current = rotated_keys
        later = ctx.checkpoint(
            first.workflow_name, previous_checkpoint_id=first.checkpoint_id, iteration_count=1
        )
        await storage.save(later)
        seal, _ = split_sealed(later.checkpoint_id, await _raw(storage, later.checkpoint_id))
        ensure_equal(
            seal.key_id,
            rotated_keys.signing_key()[0],
            "the key id of a record saved after its key provider rotated live",
        )


__all__ = ["ATTACKER_KEY", "KIT_KEY", "ROTATED_KEY", "expect_tampered", "keyed", "keyless"]
