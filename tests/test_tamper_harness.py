"""A tamper harness independent of the kit: the nine at-rest edits of agent-memory-integrity's
suite, applied to every backend through the backend's own store, by someone without the key.

Each edit runs on its own workflow of three chained checkpoints saved with a key. The harness
first checks the edit really landed (a keyless view shows it), then that the keyed storage
refuses it: with the key alone for the six in-store edits, with an anchor taken before the edit
for the three that leave only authentic records behind (truncation, rollback replay, snapshot
rollback). A nested record edited behind its container is refused too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import StorageMaker

from storages import (
    AncestryEnd,
    CheckpointStore,
    CheckpointTamperedError,
    IntegrityKeys,
    WorkflowCheckpoint,
)
from storages.integrity import split_sealed
from storages.tools.verify import FindingKind, verify

KEY = IntegrityKeys(b"harness-key-0123456789abcdefghij")
OTHER_KEY = IntegrityKeys(b"someone-else-0123456789abcdefghi")


@dataclass
class Scene:
    storage: CheckpointStore
    """Keyed."""
    attacker: CheckpointStore
    """The same store, no key."""
    workflow: str
    chain: list[WorkflowCheckpoint]
    anchor: str

    def ids(self) -> list[str]:
        return [c.checkpoint_id for c in self.chain]


async def raw(storage: CheckpointStore, checkpoint_id: str) -> bytes:
    body = await storage.read_raw_body(checkpoint_id)
    assert body is not None, checkpoint_id
    return body


async def reinsert(scene: Scene, raw_body: bytes, *, signature: str = "sig-real", **index: Any) -> None:
    """Stored bytes under an index entry of the attacker's choice (keyless save, then overwrite)."""
    stand_in = WorkflowCheckpoint(graph_signature_hash=signature, **index)
    await scene.attacker.save(stand_in)
    await scene.attacker.write_raw_body(stand_in.checkpoint_id, raw_body)


async def refused(read: Awaitable[Any], checkpoint_id: str | None = None) -> CheckpointTamperedError:
    with pytest.raises(CheckpointTamperedError) as caught:
        await read
    if checkpoint_id is not None:
        assert caught.value.checkpoint_id == checkpoint_id, caught.value
    assert KEY.signing_key()[1].hex() not in str(caught.value)
    return caught.value


# ---------------------------------------------------------------------- the nine edits


async def content_tamper(scene: Scene) -> None:
    target = scene.ids()[1]
    _, parts = split_sealed(target, await raw(scene.attacker, target))
    codec = scene.attacker.codec
    edited = codec.decode_checkpoint(parts.body, checkpoint_id=target, sealed=True)  # as stored: no checksum
    edited.state = {"approved": True}
    await scene.attacker.write_raw_body(target, parts.header + parts.mac + codec.encode_checkpoint(edited))
    landed = split_sealed(target, await raw(scene.attacker, target))[1].body
    assert codec.decode_checkpoint(landed, checkpoint_id=target).state == {"approved": True}
    await refused(scene.storage.load(target), target)
    await refused(scene.storage.list_checkpoints(workflow_name=scene.workflow), target)


async def tail_truncation(scene: Scene) -> None:
    newest = scene.ids()[-1]
    assert await scene.attacker.delete(newest)
    latest = await scene.storage.get_latest(workflow_name=scene.workflow)
    assert latest is not None
    assert latest.checkpoint_id == scene.ids()[-2]
    error = await refused(scene.storage.get_latest(workflow_name=scene.workflow, anchor=scene.anchor), newest)
    assert error.kind == "rolled_back"


async def middle_deletion(scene: Scene) -> None:
    middle, newest = scene.ids()[1], scene.ids()[2]
    assert await scene.attacker.delete(middle)
    walk = await scene.storage.walk_ancestry(newest)
    assert (walk.end, walk.end_id) == (AncestryEnd.MISSING, middle)
    report = await verify(scene.storage, workflow_name=scene.workflow)
    broken = report.of_kind(FindingKind.CHAIN_BROKEN)
    assert [f.checkpoint_ids for f in broken] == [(newest, middle)], report.counts()


async def reorder(scene: Scene) -> None:
    first, second = scene.ids()[1], scene.ids()[2]
    body_first, body_second = await raw(scene.attacker, first), await raw(scene.attacker, second)
    await scene.attacker.write_raw_body(first, body_second)
    await scene.attacker.write_raw_body(second, body_first)
    await refused(scene.storage.load(first), first)
    await refused(scene.storage.get_latest(workflow_name=scene.workflow), second)


async def forged_insert(scene: Scene) -> None:
    forged = WorkflowCheckpoint(
        workflow_name=scene.workflow, graph_signature_hash="sig", previous_checkpoint_id=scene.ids()[-1]
    )
    await scene.attacker.save(forged)
    landed = await scene.attacker.get_latest(workflow_name=scene.workflow)
    assert landed is not None
    assert landed.checkpoint_id == forged.checkpoint_id
    error = await refused(scene.storage.get_latest(workflow_name=scene.workflow), forged.checkpoint_id)
    assert error.kind == "unsigned"
    outsider = scene.storage.with_integrity_key(OTHER_KEY)
    try:
        foreign = WorkflowCheckpoint(workflow_name=scene.workflow, graph_signature_hash="sig")
        await outsider.save(foreign)
    finally:
        await outsider.aclose()
    assert (
        await refused(scene.storage.load(foreign.checkpoint_id), foreign.checkpoint_id)
    ).kind == "unknown_key"


async def cross_context_replay(scene: Scene) -> None:
    other = WorkflowCheckpoint(workflow_name=scene.workflow + "-other", graph_signature_hash="sig")
    await scene.storage.save(other)
    victim = scene.ids()[1]
    original = await raw(scene.attacker, victim)
    await scene.attacker.write_raw_body(victim, await raw(scene.attacker, other.checkpoint_id))
    await refused(scene.storage.load(victim), victim)
    _, own = split_sealed(victim, original)
    _, foreign = split_sealed(other.checkpoint_id, await raw(scene.attacker, other.checkpoint_id))
    await scene.attacker.write_raw_body(victim, foreign.header + own.mac + own.body)
    assert (await refused(scene.storage.load(victim), victim)).kind == "mac_mismatch"


async def rollback_replay(scene: Scene) -> None:
    stale = scene.chain[-1]
    stale_raw = await raw(scene.attacker, stale.checkpoint_id)
    await scene.storage.delete(stale.checkpoint_id)
    redo = WorkflowCheckpoint(
        workflow_name=scene.workflow, graph_signature_hash="sig", previous_checkpoint_id=scene.ids()[-2]
    )
    await scene.storage.save(redo)
    anchor = await scene.storage.head_anchor(workflow_name=scene.workflow)
    await reinsert(
        scene,
        stale_raw,
        workflow_name=scene.workflow,
        checkpoint_id=stale.checkpoint_id,
        previous_checkpoint_id=stale.previous_checkpoint_id,
    )
    latest = await scene.storage.get_latest(workflow_name=scene.workflow)
    assert latest is not None
    assert latest.checkpoint_id == stale.checkpoint_id
    await refused(scene.storage.get_latest(workflow_name=scene.workflow, anchor=anchor), redo.checkpoint_id)


async def metadata_tamper(scene: Scene) -> None:
    target = scene.chain[-1]
    target_raw = await raw(scene.attacker, target.checkpoint_id)
    assert await scene.attacker.delete(target.checkpoint_id)
    await reinsert(
        scene,
        target_raw,
        signature="sig",
        workflow_name=scene.workflow,
        checkpoint_id=target.checkpoint_id,
        previous_checkpoint_id=target.previous_checkpoint_id,
    )
    # The stand-in's index signature is "sig"; the body (signed) says "sig-real".
    ids = await scene.attacker.list_checkpoint_ids(workflow_name=scene.workflow, graph_signature_hash="sig")
    assert ids == [target.checkpoint_id]
    error = await refused(
        scene.storage.get_latest(workflow_name=scene.workflow, graph_signature_hash="sig"),
        target.checkpoint_id,
    )
    assert error.kind == "index_mismatch"


async def snapshot_rollback(scene: Scene) -> None:
    later = WorkflowCheckpoint(
        workflow_name=scene.workflow, graph_signature_hash="sig-real", previous_checkpoint_id=scene.ids()[-1]
    )
    await scene.storage.save(later)
    anchor = await scene.storage.head_anchor(workflow_name=scene.workflow)
    assert await scene.attacker.delete(later.checkpoint_id)  # the store as it was before `later`
    await refused(scene.storage.get_latest(workflow_name=scene.workflow, anchor=anchor), later.checkpoint_id)
    await refused(scene.storage.load(scene.ids()[0], anchor=anchor), later.checkpoint_id)
    report = await verify(scene.storage, workflow_name=scene.workflow, anchors={scene.workflow: anchor})
    assert [f.workflow_name for f in report.of_kind(FindingKind.ROLLED_BACK)] == [scene.workflow]


async def forged_prune(scene: Scene) -> None:
    """A deletion dressed as a prune: a writer without the key prunes, so no receipt is signed."""
    oldest, after, newest = scene.ids()
    assert await scene.attacker.prune(workflow_name=scene.workflow, keep_last=2) == 1
    assert (await scene.attacker.walk_ancestry_ids(newest)).end is AncestryEnd.PRUNED  # it landed
    walk = await scene.storage.walk_ancestry(newest)
    assert (walk.end, walk.end_id) == (AncestryEnd.MISSING, oldest)
    report = await verify(scene.storage, workflow_name=scene.workflow)
    broken = report.of_kind(FindingKind.CHAIN_BROKEN)
    assert [f.checkpoint_ids for f in broken] == [(after, oldest)], report.counts()
    assert "unreceipted_tombstone" in broken[0].message


EDITS: dict[str, Callable[[Scene], Awaitable[None]]] = {
    "content_tamper": content_tamper,
    "tail_truncation": tail_truncation,
    "middle_deletion": middle_deletion,
    "reorder": reorder,
    "forged_insert": forged_insert,
    "cross_context_replay": cross_context_replay,
    "rollback_replay": rollback_replay,
    "metadata_tamper": metadata_tamper,
    "snapshot_rollback": snapshot_rollback,
    "forged_prune": forged_prune,
}


async def test_every_edit_is_refused(storage_maker: StorageMaker) -> None:
    template = storage_maker()
    storage = template.with_integrity_key(KEY)
    attacker = template.with_integrity_key(None)
    try:
        for name, edit in EDITS.items():
            workflow = f"harness-{name}"
            chain: list[WorkflowCheckpoint] = []
            previous: str | None = None
            for step in range(3):
                checkpoint = WorkflowCheckpoint(
                    workflow_name=workflow,
                    graph_signature_hash="sig-real",
                    previous_checkpoint_id=previous,
                    state={"step": step},
                )
                await storage.save(checkpoint)
                chain.append(checkpoint)
                previous = checkpoint.checkpoint_id
            anchor = await storage.head_anchor(workflow_name=workflow)
            # Control: the unedited workflow verifies, with its anchor, on a fresh keyed handle.
            fresh = storage.new_handle()
            try:
                latest = await fresh.get_latest(workflow_name=workflow, anchor=anchor)
                assert latest is not None, name
                assert latest.checkpoint_id == previous, name
                assert (await verify(fresh, workflow_name=workflow, anchors={workflow: anchor})).ok, name
            finally:
                await fresh.aclose()
            await edit(Scene(storage, attacker, workflow, chain, anchor))
    finally:
        await storage.aclose()
        await attacker.aclose()
        await template.aclose()


async def test_a_nested_record_edited_behind_its_container_is_refused(storage_maker: StorageMaker) -> None:
    storage = storage_maker().with_integrity_key(KEY)
    try:
        child = WorkflowCheckpoint(workflow_name="harness-sub", graph_signature_hash="sig")
        parent = WorkflowCheckpoint(
            workflow_name="harness-parent", graph_signature_hash="sig", state={"sub": child}
        )
        await storage.save(parent)
        seal, parts = split_sealed(child.checkpoint_id, await raw(storage, child.checkpoint_id))
        assert seal.container_id == parent.checkpoint_id
        assert seal.position == 1
        codec = storage.codec
        edited = codec.decode_checkpoint(parts.body, checkpoint_id=child.checkpoint_id, sealed=True)
        edited.state = {"injected": True}
        await storage.write_raw_body(
            child.checkpoint_id, parts.header + parts.mac + codec.encode_checkpoint(edited)
        )
        await refused(storage.load(parent.checkpoint_id), child.checkpoint_id)
        await refused(storage.load(child.checkpoint_id), child.checkpoint_id)
        report = await verify(storage)
        assert child.checkpoint_id in {f.checkpoint_ids[0] for f in report.of_kind(FindingKind.TAMPERED)}
    finally:
        await storage.aclose()


async def test_a_keyed_prune_vouches_for_its_nested_records_and_a_keyless_one_does_not(
    storage_maker: StorageMaker,
) -> None:
    template = storage_maker()
    storage = template.with_integrity_key(KEY)
    attacker = template.with_integrity_key(None)
    try:
        for pruner, end in ((storage, AncestryEnd.PRUNED), (attacker, AncestryEnd.MISSING)):
            parent_workflow = f"harness-prune-parent-{end.value}"
            child = WorkflowCheckpoint(
                workflow_name=f"harness-prune-sub-{end.value}", graph_signature_hash="s"
            )
            first = WorkflowCheckpoint(
                workflow_name=parent_workflow, graph_signature_hash="s", state={"sub": child}
            )
            await storage.save(first)
            # A checkpoint continuing from the nested one, as a sub-workflow resumed from it saves.
            resumed = WorkflowCheckpoint(
                workflow_name=child.workflow_name,
                graph_signature_hash="s",
                previous_checkpoint_id=child.checkpoint_id,
            )
            await storage.save(resumed)
            second = WorkflowCheckpoint(
                workflow_name=parent_workflow,
                graph_signature_hash="s",
                previous_checkpoint_id=first.checkpoint_id,
            )
            await storage.save(second)
            assert await pruner.prune(workflow_name=parent_workflow, keep_last=1) == 1
            for walked, pruned in ((second, first), (resumed, child)):
                walk = await storage.walk_ancestry(walked.checkpoint_id)
                assert (walk.end, walk.end_id) == (end, pruned.checkpoint_id), walked.workflow_name
            broken = {
                f.checkpoint_ids
                for workflow in (parent_workflow, child.workflow_name)
                for f in (await verify(storage, workflow_name=workflow)).of_kind(FindingKind.CHAIN_BROKEN)
            }
            expected = (
                set()
                if end is AncestryEnd.PRUNED
                else {
                    (second.checkpoint_id, first.checkpoint_id),
                    (resumed.checkpoint_id, child.checkpoint_id),
                }
            )
            assert broken == expected
        assert "harness-prune-parent-pruned" in await storage.list_workflows()
        assert not [name for name in await storage.list_workflows() if not name.startswith("harness")]
        await storage.delete_workflow(workflow_name="harness-prune-parent-pruned")
        assert not await storage.list_tombstones(workflow_name="harness-prune-parent-pruned")
    finally:
        await storage.aclose()
        await attacker.aclose()
        await template.aclose()
