"""storages.tools.verify: every seeded defect is reported naming its ids, and a clean storage (forks,
nested records, a pruned workflow) gives nothing. Runs on every backend of the shared fixture."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import backend_url

from storages import (
    Capability,
    CheckpointStore,
    CheckpointTypeNotAllowedError,
    InMemoryCheckpointStorage,
    UnsupportedOperationError,
    WorkflowCheckpoint,
    open_storage,
)
from storages.codec import CheckpointCodec
from storages.memory import MemoryBackend
from storages.sqlite import SQLiteCheckpointStorage
from storages.tools.cli.main import main
from storages.tools.verify import FindingKind, VerifyReport, verify

SEEDABLE_BACKENDS = [
    pytest.param("memory", marks=pytest.mark.memory),
    pytest.param("sqlite", marks=pytest.mark.sqlite),
]
"""Backends where a test can remove one record behind the storage's back (remove_behind_the_back)."""


@pytest.fixture(params=SEEDABLE_BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[CheckpointStore]:
    """Overrides the shared fixture: an open, empty storage of each backend defects can be seeded in."""
    async with open_storage(backend_url(request.param, tmp_path)) as opened:
        yield opened


SIG_A = "a" * 64
SIG_B = "b" * 64
SIG_SUB = "5" * 64


def cp(workflow: str, checkpoint_id: str, previous: str | None = None, **fields: Any) -> WorkflowCheckpoint:
    fields.setdefault("graph_signature_hash", SIG_A)
    return WorkflowCheckpoint(
        workflow_name=workflow, checkpoint_id=checkpoint_id, previous_checkpoint_id=previous, **fields
    )


def sub(checkpoint_id: str, previous: str | None = None, **fields: Any) -> WorkflowCheckpoint:
    """A sub-workflow's checkpoint, as MAF embeds it in its parent's state."""
    return cp("sub", checkpoint_id, previous, graph_signature_hash=SIG_SUB, **fields)


def found(report: VerifyReport) -> set[tuple[FindingKind, tuple[str, ...]]]:
    return {(finding.kind, finding.checkpoint_ids) for finding in report.findings}


def assert_messages_name_their_ids(report: VerifyReport) -> None:
    for finding in report.findings:
        for checkpoint_id in finding.checkpoint_ids:
            assert repr(checkpoint_id) in finding.message or checkpoint_id in finding.message, finding


def remove_behind_the_back(storage: CheckpointStore, checkpoint_id: str) -> None:
    """Delete one record (and only it) bypassing the storage, which never leaves a nested record
    without its container or a container without its nested records on its own."""
    if isinstance(storage, InMemoryCheckpointStorage):
        # The backend's maps (its documented test hook) are the only way to break the memory
        # backend's invariants; a test of the tool that looks for broken invariants needs that.
        store = storage.backend.store
        entry = store.by_id.pop(checkpoint_id)
        workflow = store.workflows[entry.record.workflow_name]
        (workflow.nested if entry.record.nested else workflow.entries).pop(checkpoint_id)
        return
    path = getattr(storage, "path", None)
    assert path is not None, f"no way to remove a record behind {storage!r}'s back"
    with sqlite3.connect(path) as connection:
        deleted = connection.execute("DELETE FROM checkpoints WHERE checkpoint_id = ?", (checkpoint_id,))
        assert deleted.rowcount == 1
    connection.close()


async def save_clean_history(storage: CheckpointStore) -> int:
    """A run with a fork, nested records two levels deep and a pruned workflow; returns how many
    records remain stored."""
    await storage.save(cp("run", "r1"))
    await storage.save(cp("run", "r2", "r1", state={"executor": {"sub_workflow_checkpoint": sub("s1")}}))
    await storage.save(cp("run", "r3", "r2"))
    await storage.save(cp("run", "r3-fork", "r2"))
    inner = cp("inner", "i1", graph_signature_hash=SIG_B)
    await storage.save(cp("run", "r4", "r3", state={"sub": sub("s2", "s1", state={"inner": inner})}))
    for index in range(1, 5):
        previous = f"old{index - 1}" if index > 1 else None
        nested = {"sub": sub(f"old-sub{index}")}
        await storage.save(cp("old", f"old{index}", previous, state=nested))
    assert await storage.prune(workflow_name="old", keep_last=2) == 2
    assert await storage.list_tombstones(workflow_name="old") == ["old-sub1", "old-sub2", "old1", "old2"]
    return 5 + 3 + 2 * 2


async def test_a_clean_storage_has_no_findings(storage: CheckpointStore) -> None:
    stored = await save_clean_history(storage)

    report = await verify(storage)

    assert report.findings == []
    assert report.ok
    assert report.records_checked == stored
    data = json.loads(report.to_json())
    assert data["ok"] is True
    assert data["findings"] == []
    assert set(data["counts"]) == {kind.value for kind in FindingKind}
    for workflow in ("run", "old", "sub", "inner"):
        assert (await verify(storage, workflow_name=workflow)).findings == []


async def test_every_seeded_defect_is_found_naming_its_ids(storage: CheckpointStore) -> None:
    await save_clean_history(storage)
    # Dangling link: the previous id was never saved.
    await storage.save(cp("dangling", "d1", "never-saved"))
    # Cycle: A continues from B and B from A.
    await storage.save(cp("loop", "loop-a", "loop-b"))
    await storage.save(cp("loop", "loop-b", "loop-a"))
    # Corrupt body.
    await storage.save(cp("corrupt", "k1"))
    await storage.write_raw_body("k1", b"\x00garbage\xff")
    # Signature change in the middle of a chain.
    await storage.save(cp("resigned", "g1"))
    await storage.save(cp("resigned", "g2", "g1", graph_signature_hash=SIG_B))
    await storage.save(cp("resigned", "g3", "g2", graph_signature_hash=SIG_B))
    # Orphaned nested record: its container removed behind the storage's back.
    await storage.save(cp("orphaning", "p1", state={"sub": sub("n1")}))
    remove_behind_the_back(storage, "p1")

    report = await verify(storage)

    assert found(report) == {
        (FindingKind.DANGLING_LINK, ("d1", "never-saved")),
        (FindingKind.CYCLE, ("loop-a", "loop-b")),
        (FindingKind.UNDECODABLE_BODY, ("k1",)),
        (FindingKind.SIGNATURE_CHANGE, ("g2", "g1")),
        (FindingKind.ORPHANED_NESTED, ("n1", "p1")),
    }
    assert not report.ok
    assert_messages_name_their_ids(report)
    assert [f.kind for f in report.findings] == sorted(
        (f.kind for f in report.findings), key=list(FindingKind).index
    )
    by_kind = {f.kind: f for f in report.findings}
    assert by_kind[FindingKind.DANGLING_LINK].workflow_name == "dangling"
    assert "neither stored nor pruned" in by_kind[FindingKind.DANGLING_LINK].message
    assert "loop-a -> loop-b -> loop-a" in by_kind[FindingKind.CYCLE].message
    assert "no longer stored" in by_kind[FindingKind.ORPHANED_NESTED].message
    assert SIG_A[:8] + "…" in by_kind[FindingKind.SIGNATURE_CHANGE].message
    data = json.loads(report.to_json())
    assert data["ok"] is False
    assert data["counts"]["cycle"] == 1
    assert {"kind": "undecodable_body", "checkpoint_ids": ["k1"], "workflow_name": "corrupt"}.items() <= (
        next(f for f in data["findings"] if f["kind"] == "undecodable_body").items()
    )


async def test_a_deleted_ancestor_dangles_where_a_pruned_one_does_not(storage: CheckpointStore) -> None:
    for workflow in ("pruned", "deleted"):
        await storage.save(cp(workflow, f"{workflow}1"))
        await storage.save(cp(workflow, f"{workflow}2", f"{workflow}1"))
    await storage.prune(workflow_name="pruned", keep_last=1)
    assert await storage.delete("deleted1")

    report = await verify(storage)

    assert found(report) == {(FindingKind.DANGLING_LINK, ("deleted2", "deleted1"))}


async def test_broken_nested_records_and_bodies_that_disagree_with_the_index(
    storage: CheckpointStore,
) -> None:
    codec = storage.codec
    # A nested record whose body is corrupt: it cannot be decoded, nor can its container.
    await storage.save(cp("run", "c1", state={"sub": sub("c1-sub")}))
    await storage.write_raw_body("c1-sub", b"CK" + b"\x01" * 20)
    # A container whose nested record is gone.
    await storage.save(cp("run", "c2", state={"sub": sub("c2-sub")}))
    remove_behind_the_back(storage, "c2-sub")
    # A container whose body no longer embeds its nested record.
    await storage.save(cp("run", "c3", state={"sub": sub("c3-sub")}))
    await storage.write_raw_body("c3", codec.encode_checkpoint(cp("run", "c3")))
    # A body that belongs to another checkpoint, and one that moved to another chain.
    await storage.save(cp("run", "c4"))
    await storage.write_raw_body("c4", codec.encode_checkpoint(cp("run", "someone-else")))
    await storage.save(cp("run", "c5", "c4"))
    await storage.write_raw_body("c5", codec.encode_checkpoint(cp("run", "c5", "c3")))

    report = await verify(storage)

    assert found(report) == {
        (FindingKind.UNDECODABLE_BODY, ("c1-sub",)),
        (FindingKind.UNDECODABLE_BODY, ("c1", "c1-sub")),
        (FindingKind.NESTED_REF_MISSING, ("c2", "c2-sub")),
        (FindingKind.UNDECODABLE_BODY, ("c2",)),
        (FindingKind.UNREFERENCED_NESTED, ("c3-sub", "c3")),
        (FindingKind.UNDECODABLE_BODY, ("c4",)),
        (FindingKind.INDEX_MISMATCH, ("c5",)),
    }
    assert_messages_name_their_ids(report)
    messages = {f.checkpoint_ids: f.message for f in report.findings}
    assert "checksum" in messages[("c1-sub",)] or "format version" in messages[("c1-sub",)]
    assert "belongs to checkpoint 'someone-else'" in messages[("c4",)]
    assert "previous_checkpoint_id is 'c3' in the body but 'c4' in the index" in messages[("c5",)]


async def test_one_workflow_is_scanned_with_the_records_nested_in_it(storage: CheckpointStore) -> None:
    await storage.save(cp("mine", "m1", state={"sub": sub("m1-sub")}))
    await storage.save(cp("mine", "m2", "m1", graph_signature_hash=SIG_B))
    await storage.write_raw_body("m1-sub", b"not a checkpoint body")
    await storage.save(cp("theirs", "t1", "nowhere"))

    mine = await verify(storage, workflow_name="mine")
    theirs = await verify(storage, workflow_name="theirs")

    assert mine.workflow_name == "mine"
    assert mine.records_checked == 3
    assert found(mine) == {
        (FindingKind.UNDECODABLE_BODY, ("m1-sub",)),
        (FindingKind.UNDECODABLE_BODY, ("m1", "m1-sub")),
        (FindingKind.SIGNATURE_CHANGE, ("m2", "m1")),
    }
    assert found(theirs) == {(FindingKind.DANGLING_LINK, ("t1", "nowhere"))}
    assert (await verify(storage, workflow_name="nobody")).records_checked == 0


async def test_progress_reports_every_record(storage: CheckpointStore) -> None:
    stored = await save_clean_history(storage)
    calls: list[tuple[int, int]] = []

    report = await verify(storage, progress=lambda done, known: calls.append((done, known)))

    assert [done for done, _ in calls] == list(range(1, stored + 1))
    assert all(done <= known for done, known in calls)
    assert calls[-1] == (report.records_checked, stored)


class WithoutInspectBackend(MemoryBackend):
    capabilities = MemoryBackend.capabilities - {Capability.INSPECT}


class WithoutInspect(InMemoryCheckpointStorage):
    backend_class = WithoutInspectBackend


class WithoutRawAccessBackend(MemoryBackend):
    capabilities = MemoryBackend.capabilities - {Capability.RAW_ACCESS}


class WithoutRawAccess(InMemoryCheckpointStorage):
    backend_class = WithoutRawAccessBackend


@pytest.mark.parametrize(
    ("storage_class", "capability"), [(WithoutInspect, "inspect"), (WithoutRawAccess, "raw_access")]
)
async def test_a_storage_without_the_capabilities_gets_a_clear_error(
    storage_class: type[InMemoryCheckpointStorage], capability: str
) -> None:
    storage = storage_class()
    with pytest.raises(UnsupportedOperationError, match=rf"verify\(\).*'{capability}'") as raised:
        await verify(storage)
    assert raised.value.capability == capability


class CodecHidden(InMemoryCheckpointStorage):
    """A storage without a CheckpointCodec of ours: verify decodes through load() instead."""

    @property
    def codec(self) -> Any:
        return None

    @codec.setter
    def codec(self, value: Any) -> None:
        raise AttributeError("read only")


async def test_without_a_codec_bodies_are_checked_through_load() -> None:
    storage = CodecHidden(codec=CheckpointCodec())
    await storage.save(cp("run", "ok", state={"sub": sub("ok-sub")}))
    await storage.save(cp("run", "bad"))
    body = await storage.read_raw_body("bad")
    assert body is not None
    # Same frame, payload of a different length: the integrity check passes only if recomputed,
    # so flip one payload byte and expect the checksum to catch it through load().
    await storage.write_raw_body("bad", body[:-1] + bytes([body[-1] ^ 0xFF]))

    report = await verify(storage)

    assert found(report) == {(FindingKind.UNDECODABLE_BODY, ("bad",))}
    assert report.records_checked == 3


class LosesABody(InMemoryCheckpointStorage):
    """Lists 'gone' in its index but has no body for it; 'vanished' disappears mid-scan."""

    async def read_raw_body(self, checkpoint_id: str) -> bytes | None:
        if checkpoint_id == "vanished":
            assert await self.delete("vanished")
        if checkpoint_id in ("gone", "vanished"):
            return None
        return await super().read_raw_body(checkpoint_id)


async def test_a_listed_record_without_a_body_is_reported_and_a_vanished_one_is_not() -> None:
    storage = LosesABody()
    await storage.save(cp("run", "gone"))
    await storage.save(cp("run", "vanished"))
    await storage.save(cp("run", "kept"))

    report = await verify(storage)

    assert found(report) == {(FindingKind.UNDECODABLE_BODY, ("gone",))}
    assert "no stored body" in report.findings[0].message
    assert report.records_checked == 1


# ---------------------------------------------------------------------- types the codec refuses


@dataclass
class Ticket:
    """An application type: the writing process allows it; a process running verify may not."""

    number: int


TICKET = f"{__name__}:Ticket"


class RefusesTickets(CheckpointCodec):
    """Stands in for a codec that refuses a stored type, as the codec's type rule does: decoding
    a body that names ``Ticket`` raises CheckpointTypeNotAllowedError, everything else decodes."""

    def decode_checkpoint(
        self,
        body: bytes,
        *,
        checkpoint_id: str,
        nested: Any = None,
        construct_types: bool = True,
        sealed: bool = False,
    ) -> Any:
        holds_ticket = b"Ticket" in body or any(b"Ticket" in item for item in (nested or {}).values())
        if construct_types and holds_ticket:
            raise CheckpointTypeNotAllowedError(TICKET, checkpoint_id, "checkpoint.state['ticket']")
        return super().decode_checkpoint(
            body, checkpoint_id=checkpoint_id, nested=nested, construct_types=construct_types, sealed=sealed
        )


async def save_app_history(path: Path) -> None:
    """What an application allowing Ticket writes: a chain holding one, a nested record holding
    one, and one defect of each kind structure-only must still find."""
    async with SQLiteCheckpointStorage(path, codec=CheckpointCodec(allowed_types=[Ticket])) as writer:
        await writer.save(cp("app", "t1", state={"ticket": Ticket(1)}))
        await writer.save(cp("app", "t2", "t1", state={"sub": sub("t2-sub", state={"ticket": Ticket(2)})}))
        await writer.save(cp("app", "t3", "never-saved"))
        await writer.save(cp("app", "t4"))
        await writer.write_raw_body("t4", b"\x00garbage\xff")
        await writer.save(cp("app", "t5", "t4"))
        await writer.write_raw_body("t5", writer.codec.encode_checkpoint(cp("app", "t5", "t1")))


@pytest.mark.sqlite
async def test_a_refused_type_is_its_own_finding_saying_the_data_is_intact_and_how_to_allow_it(
    tmp_path: Path,
) -> None:
    await save_app_history(tmp_path / "app.db")
    async with SQLiteCheckpointStorage(tmp_path / "app.db", codec=RefusesTickets()) as reader:
        report = await verify(reader)

    assert found(report) == {
        (FindingKind.TYPE_NOT_ALLOWED, ("t1",)),
        (FindingKind.TYPE_NOT_ALLOWED, ("t2-sub",)),
        (FindingKind.TYPE_NOT_ALLOWED, ("t2",)),  # its nested record holds one: refused alike
        (FindingKind.DANGLING_LINK, ("t3", "never-saved")),
        (FindingKind.UNDECODABLE_BODY, ("t4",)),
        (FindingKind.INDEX_MISMATCH, ("t5",)),
    }
    assert_messages_name_their_ids(report)
    refused = report.of_kind(FindingKind.TYPE_NOT_ALLOWED)[0]
    assert "is intact" in refused.message
    assert f"Checkpoint deserialization blocked for type '{TICKET}'" in refused.message
    assert f"allowed_checkpoint_types=['{TICKET}']" in refused.message
    assert "--structure-only" in refused.message
    assert report.counts()["type_not_allowed"] == 3


@pytest.mark.sqlite
async def test_a_type_the_reading_codec_does_not_allow_is_reported_as_refused_not_corrupt(
    tmp_path: Path,
) -> None:
    await save_app_history(tmp_path / "app.db")
    async with SQLiteCheckpointStorage(tmp_path / "app.db") as reader:
        report = await verify(reader)
    assert (FindingKind.TYPE_NOT_ALLOWED, ("t1",)) in found(report)
    assert (FindingKind.UNDECODABLE_BODY, ("t1",)) not in found(report)


@pytest.mark.sqlite
async def test_structure_only_checks_links_and_bytes_without_the_applications_types(tmp_path: Path) -> None:
    await save_app_history(tmp_path / "app.db")
    async with SQLiteCheckpointStorage(tmp_path / "app.db", codec=RefusesTickets()) as reader:
        report = await verify(reader, structure_only=True)

    # No type is constructed, so none is refused; damaged bytes, links and bodies that disagree
    # with the index are still found.
    assert found(report) == {
        (FindingKind.DANGLING_LINK, ("t3", "never-saved")),
        (FindingKind.UNDECODABLE_BODY, ("t4",)),
        (FindingKind.INDEX_MISMATCH, ("t5",)),
    }
    assert report.records_checked == 6


@pytest.mark.sqlite
async def test_structure_only_reads_an_app_store_with_a_codec_that_allows_none_of_its_types(
    tmp_path: Path,
) -> None:
    await save_app_history(tmp_path / "app.db")
    async with SQLiteCheckpointStorage(tmp_path / "app.db") as reader:  # Ticket not allowed here
        report = await verify(reader, structure_only=True)

    assert (FindingKind.INDEX_MISMATCH, ("t5",)) in found(report)
    assert not report.of_kind(FindingKind.TYPE_NOT_ALLOWED)


@pytest.mark.sqlite
def test_the_cli_verifies_an_applications_store_structure_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "app.db"
    asyncio.run(save_app_history(path))
    status = main(["verify", f"sqlite:///{path}", "--structure-only", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert status == 1  # the seeded defects
    assert {finding["kind"] for finding in data["findings"]} == {
        "dangling_link",
        "undecodable_body",
        "index_mismatch",
    }
