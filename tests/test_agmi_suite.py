"""The independent tamper suite, agent-memory-integrity (``agmi``), run against our keyed storages.

tests/test_tamper_harness.py re-implements agmi's nine at-rest edits; this module runs agmi's own
attacks instead, through one adapter over ``CheckpointStore``. The adapter's application
side writes through a keyed storage and keeps each workflow's head anchor in the adapter object,
outside the store; its attacker side edits the store through the backend's own raw access with
no key. Every attack must come back "safe": agmi's word for "the tool detected the edit".
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from agmi.adapters.base import MemoryAdapter, Record
from agmi.attacks.at_rest import AT_REST_ATTACKS_WITH_SNAPSHOT
from conftest import StorageMaker

from storages import (
    AncestryEnd,
    CheckpointInfo,
    CheckpointStore,
    CheckpointTamperedError,
    IntegrityKeys,
    WorkflowCheckpoint,
)
from storages.integrity import is_sealed, split_sealed
from storages.tools.verify import verify

KEY = IntegrityKeys(b"agmi-suite-key-0123456789abcdefgh")
SIGNATURE = "sig-real"
RELABELLED_SIGNATURE = "sig-relabelled"
DETECTED = "safe"
"""AttackResult.status when verify() said no after the edit landed (see agmi.attacks.base)."""

T = TypeVar("T")


class CheckpointStorageAdapter(MemoryAdapter):
    """agmi's view of one workflow in a keyed checkpoint storage.

    A record is one checkpoint: its slot is its id, its owner the workflow its index entry names,
    its content the stored bytes. Records are listed in the order the application wrote them, so
    an edit that rewrites an index entry (delete and reinsert under the same id) keeps its slot.
    """

    name = "checkpoint-storages"
    supports_replay = True
    supports_metadata = True
    supports_snapshot = True

    def __init__(self, maker: StorageMaker, *, key: IntegrityKeys | None, anchored: bool) -> None:
        self._maker = maker
        self._key = key
        self._anchored = anchored
        # The adapter's own loop: agmi's hooks are synchronous, the storages are not.
        self._loop = asyncio.new_event_loop()
        self._handles: list[CheckpointStore] = []
        self._keyed: CheckpointStore | None = None
        self._attacker: CheckpointStore | None = None
        self._workflow = ""
        self._other_workflow = ""
        self._written_order: dict[str, int] = {}
        self._anchor: str | None = None
        """The application's head anchor, kept here and never in the store."""

    def close(self) -> None:
        self._loop.close()

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(work)

    @property
    def keyed(self) -> CheckpointStore:
        assert self._keyed is not None, "setup() first"
        return self._keyed

    @property
    def attacker(self) -> CheckpointStore:
        """The same store without the key: what someone with write access to it holds."""
        assert self._attacker is not None, "setup() first"
        return self._attacker

    # ------------------------------------------------------------------ lifecycle

    def setup(self) -> None:
        suffix = uuid.uuid4().hex[:12]
        self._workflow, self._other_workflow = f"agmi-{suffix}", f"agmi-other-{suffix}"
        self._written_order = {}
        self._anchor = None
        self._open()

    def _open(self) -> None:
        template = self._maker()
        self._keyed = template.with_integrity_key(self._key)
        self._attacker = template.with_integrity_key(None)
        self._handles = [self._keyed, self._attacker, template]

    def _close(self) -> None:
        async def close_all() -> None:
            for handle in self._handles:
                await handle.aclose()

        self._run(close_all())
        self._handles, self._keyed, self._attacker = [], None, None

    def teardown(self) -> None:
        self._close()

    def reload(self) -> None:
        self._close()
        self._open()

    # ------------------------------------------------------------------ the application's writes

    async def _write_chain(self, workflow: str, states: list[dict[str, Any]]) -> None:
        ids = [info.checkpoint_id for info in await self.keyed.list_records(workflow_name=workflow)]
        previous = ids[-1] if ids else None
        for state in states:
            checkpoint = WorkflowCheckpoint(
                workflow_name=workflow,
                graph_signature_hash=SIGNATURE,
                previous_checkpoint_id=previous,
                state=state,
            )
            await self.keyed.save(checkpoint)
            self._written_order[checkpoint.checkpoint_id] = len(self._written_order)
            previous = checkpoint.checkpoint_id
        if workflow == self._workflow and self._key is not None:
            self._anchor = await self.keyed.head_anchor(workflow_name=workflow)

    def seed(self, n: int) -> None:
        self._run(self._write_chain(self._workflow, [{"step": step} for step in range(n)]))

    def seed_other(self, n: int) -> None:
        self._run(self._write_chain(self._other_workflow, [{"other": step} for step in range(n)]))

    def append_genuine(self) -> None:
        self._run(self._write_chain(self._workflow, [{"step": "late"}]))

    # ------------------------------------------------------------------ the attacker's raw access

    async def _records(self, workflow: str) -> list[Record]:
        infos = await self.attacker.list_records(workflow_name=workflow)
        unknown = len(self._written_order)
        infos.sort(key=lambda info: self._written_order.get(info.checkpoint_id, unknown + info.sequence))
        return [Record(seq=seq, fields=await self._fields(info)) for seq, info in enumerate(infos)]

    async def _fields(self, info: CheckpointInfo) -> dict[str, Any]:
        body = await self.attacker.read_raw_body(info.checkpoint_id)
        assert body is not None, info.checkpoint_id
        return {
            "checkpoint_id": info.checkpoint_id,
            "workflow_name": info.workflow_name,
            "previous_checkpoint_id": info.previous_checkpoint_id,
            "graph_signature_hash": info.graph_signature_hash,
            "body": body.hex(),
        }

    def read_all_raw(self) -> list[Record]:
        return self._run(self._records(self._workflow))

    def read_other_raw(self) -> list[Record]:
        return self._run(self._records(self._other_workflow))

    def _slot(self, seq: int) -> str:
        return str(self.read_all_raw()[seq].fields["checkpoint_id"])

    def write_raw(self, record: Record) -> None:
        if record.seq < len(self.read_all_raw()):
            # write_raw_body recomputes the codec's checksum: the edit is a clean rewrite, not damage.
            body = bytes.fromhex(record.fields["body"])
            self._run(self.attacker.write_raw_body(self._slot(record.seq), body))
            return
        forged = WorkflowCheckpoint(
            workflow_name=self._workflow,
            graph_signature_hash=SIGNATURE,
            previous_checkpoint_id=record.fields["checkpoint_id"],
            state=record.fields["forged_state"],
        )
        self._run(self.attacker.save(forged))

    def delete_raw(self, seq: int) -> None:
        assert self._run(self.attacker.delete(self._slot(seq)))

    def replay_onto(self, victim_seq: int, donor: Record) -> None:
        body = bytes.fromhex(donor.fields["body"])
        self._run(self.attacker.write_raw_body(self._slot(victim_seq), body))

    def mutate_payload(self, record: Record) -> Record:
        checkpoint_id = record.fields["checkpoint_id"]
        raw = bytes.fromhex(record.fields["body"])
        # A signed body keeps its seal and MAC (the attacker has no key to make new ones).
        seal, body = (b"", raw)
        if is_sealed(raw):
            _, parts = split_sealed(checkpoint_id, raw)
            seal, body = parts.header + parts.mac, parts.body
        codec = self.attacker.codec
        # A signed body was framed for its seal (no checksum): the attacker reads it as it is.
        edited = codec.decode_checkpoint(body, checkpoint_id=checkpoint_id, sealed=bool(seal))
        edited.state = {"approved": True}
        record.fields["body"] = (seal + codec.encode_checkpoint(edited)).hex()
        return record

    def forge_record(self, template: Record) -> Record:
        """A checkpoint continuing the newest one, saved without the key (it cannot sign)."""
        return Record(
            seq=template.seq + 1,
            fields={"checkpoint_id": template.fields["checkpoint_id"], "forged_state": {"approved": True}},
        )

    def read_meta(self, seq: int) -> dict[str, Any]:
        fields = self.read_all_raw()[seq].fields
        return {"graph_signature_hash": fields["graph_signature_hash"]}

    def write_meta(self, seq: int, meta: dict[str, Any]) -> None:
        """Relabel the record's index entry (its graph signature) and keep its bytes.

        agmi marks the edit with a key of its own; what a checkpoint's index labels is its
        workflow and graph signature, so the edit lands as a relabelled signature.
        """
        if meta == self.read_meta(seq):
            return
        self._run(self._relabel(self.read_all_raw()[seq].fields))

    async def _relabel(self, fields: dict[str, Any]) -> None:
        checkpoint_id = fields["checkpoint_id"]
        assert await self.attacker.delete(checkpoint_id)
        stand_in = WorkflowCheckpoint(
            workflow_name=fields["workflow_name"],
            graph_signature_hash=RELABELLED_SIGNATURE,
            checkpoint_id=checkpoint_id,
            previous_checkpoint_id=fields["previous_checkpoint_id"],
        )
        await self.attacker.save(stand_in)
        await self.attacker.write_raw_body(checkpoint_id, bytes.fromhex(fields["body"]))

    def snapshot_store(self) -> object:
        """Every stored body of the workflow, as a copy of the store taken now would hold them."""
        return {record.fields["checkpoint_id"]: record.fields["body"] for record in self.read_all_raw()}

    def restore_store(self, token: object) -> None:
        assert isinstance(token, dict)
        self._run(self._restore(token))

    async def _restore(self, bodies: dict[str, str]) -> None:
        for info in await self.attacker.list_records(workflow_name=self._workflow):
            if info.checkpoint_id not in bodies:
                assert await self.attacker.delete(info.checkpoint_id)
        for checkpoint_id, body in bodies.items():
            await self.attacker.write_raw_body(checkpoint_id, bytes.fromhex(body))

    # ------------------------------------------------------------------ the guard's view

    def identity_of(self, record: Record) -> str:
        return str(record.fields["checkpoint_id"])

    def payload_of(self, record: Record) -> str:
        return str(record.fields["body"])

    def owner_of(self, record: Record) -> str | None:
        return str(record.fields["workflow_name"])

    # ------------------------------------------------------------------ the application's check

    def verify(self) -> bool:
        self.verify_detail = None
        try:
            problem = self._run(self._problem())
        except CheckpointTamperedError as refused:
            problem = f"{type(refused).__name__}: {refused}"
        self.verify_detail = problem
        return problem is None

    async def _problem(self) -> str | None:
        workflow, anchor = self._workflow, self._anchor if self._anchored else None
        latest = await self.keyed.get_latest(workflow_name=workflow, anchor=anchor)
        if latest is None:
            return "no checkpoint left"
        for checkpoint_id in await self.keyed.list_checkpoint_ids(workflow_name=workflow):
            await self.keyed.load(checkpoint_id, anchor=anchor)
        walk = await self.keyed.walk_ancestry(latest.checkpoint_id)
        if walk.end is not AncestryEnd.ROOT:
            return f"ancestry of {latest.checkpoint_id} ends {walk.end.value} at {walk.end_id}"
        report = await verify(
            self.keyed, workflow_name=workflow, anchors={} if anchor is None else {workflow: anchor}
        )
        if not report.ok:
            return f"verify: {report.counts()}"
        return None


ATTACKS = {attack.name: attack for attack in AT_REST_ATTACKS_WITH_SNAPSHOT}
GOING_BACK = ("truncate", "snapshot_rollback")
"""Edits that leave only authentic records behind: the store is just older. Only the anchor,
kept off the store, can tell."""
IN_STORE = tuple(name for name in ATTACKS if name not in GOING_BACK)


def run(storage_maker: StorageMaker, attack: str, *, key: IntegrityKeys | None, anchored: bool) -> Any:
    adapter = CheckpointStorageAdapter(storage_maker, key=key, anchored=anchored)
    try:
        return ATTACKS[attack]().run(adapter)
    finally:
        adapter.close()


@pytest.mark.parametrize("attack", IN_STORE)
def test_every_in_store_edit_is_detected_with_the_key_alone(storage_maker: StorageMaker, attack: str) -> None:
    result = run(storage_maker, attack, key=KEY, anchored=False)
    assert result.status == DETECTED, result


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_every_edit_is_detected_with_the_key_and_an_anchor(storage_maker: StorageMaker, attack: str) -> None:
    result = run(storage_maker, attack, key=KEY, anchored=True)
    assert result.status == DETECTED, result


@pytest.mark.parametrize("attack", GOING_BACK)
def test_going_back_passes_the_key_alone(storage_maker: StorageMaker, attack: str) -> None:
    """The suite can report a miss through this adapter, and the anchor is what catches these."""
    result = run(storage_maker, attack, key=KEY, anchored=False)
    assert result.status == "VULNERABLE", result


def test_a_content_edit_passes_a_storage_without_a_key(storage_maker: StorageMaker) -> None:
    """Without the key the codec's checksum is all there is, and the attacker recomputes it."""
    result = run(storage_maker, "tamper", key=None, anchored=False)
    assert result.status == "VULNERABLE", result
