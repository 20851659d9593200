"""The engine checks what a backend read against the id that was asked for, not only against the
id the backend says it read: a backend matching ids loosely cannot hand back another record."""

from __future__ import annotations

from dataclasses import replace
from typing import Self

import pytest

from storages import WorkflowCheckpoint
from storages.backend import StoredBody
from storages.contract import CheckpointID
from storages.errors import CheckpointCorruptedError
from tests.kit.double import Backing, DoubleBackend, storage_of


class FoldsIds(DoubleBackend):
    """Keys records by their id stripped and case-folded: ``Ck-A`` and ``ck-a `` find the same."""

    def _key(self, checkpoint_id: CheckpointID) -> str:
        return checkpoint_id.strip().casefold()


@pytest.mark.parametrize("near", ["ck-near-abc", "CK-NEAR-ABC", "ck-near-Abc "])
async def test_a_record_found_under_a_near_id_is_refused_naming_the_id_asked_for(near: str) -> None:
    storage = storage_of(FoldsIds())
    saved = WorkflowCheckpoint(workflow_name="wf", checkpoint_id="ck-near-Abc", graph_signature_hash="sig")
    await storage.save(saved)
    assert (await storage.load("ck-near-Abc")).checkpoint_id == "ck-near-Abc"
    for read in (storage.load, storage.read_raw_body, storage.checkpoint_info):
        with pytest.raises(CheckpointCorruptedError) as raised:
            await read(near)
        assert raised.value.checkpoint_id == near
        assert "'ck-near-Abc'" in str(raised.value)
    await storage.aclose()


class ReadsARival(DoubleBackend):
    """Reads, as the head's rival when it has none, the stored checkpoint ``rival_id``: one that
    does not belong among the head's rivals."""

    def __init__(self, rival_id: CheckpointID, backing: Backing | None = None) -> None:
        super().__init__(backing)
        self.rival_id = rival_id

    def new_handle(self) -> Self:
        return type(self)(self.rival_id, self.backing)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        stored = await super().latest(workflow_name, graph_signature_hash)
        if stored is None or stored.rivals:
            return stored
        rival = await self.load(self.rival_id)
        return stored if rival is None else replace(stored, rivals=[rival])


async def test_a_rival_outside_the_heads_group_is_refused_naming_it() -> None:
    storage = storage_of(ReadsARival("ck-parent"))  # the checkpoint the head continues
    parent = WorkflowCheckpoint(
        workflow_name="wf",
        checkpoint_id="ck-parent",
        graph_signature_hash="sig",
        timestamp="2030-01-01T00:00:00+00:00",
    )
    child = WorkflowCheckpoint(
        workflow_name="wf",
        checkpoint_id="ck-child",
        graph_signature_hash="sig",
        previous_checkpoint_id="ck-parent",
        timestamp="2020-01-01T00:00:00+00:00",
    )
    await storage.save(parent)
    await storage.save(child)
    with pytest.raises(CheckpointCorruptedError) as raised:
        await storage.get_latest(workflow_name="wf")
    assert raised.value.checkpoint_id == "ck-parent"
    assert "read as a rival of 'ck-child'" in str(raised.value)
    await storage.aclose()


async def test_a_rival_of_a_root_head_that_is_no_root_is_refused_naming_it() -> None:
    storage = storage_of(ReadsARival("ck-linked"))  # a checkpoint with a previous id
    linked = WorkflowCheckpoint(
        workflow_name="wf",
        checkpoint_id="ck-linked",
        graph_signature_hash="sig",
        previous_checkpoint_id="ck-elsewhere",
        timestamp="2030-01-01T00:00:00+00:00",
    )
    root = WorkflowCheckpoint(
        workflow_name="wf",
        checkpoint_id="ck-root",
        graph_signature_hash="sig",
        timestamp="2020-01-01T00:00:00+00:00",
    )
    await storage.save(linked)
    await storage.save(root)
    with pytest.raises(CheckpointCorruptedError) as raised:
        await storage.get_latest(workflow_name="wf")
    assert raised.value.checkpoint_id == "ck-linked"
    assert "read as a rival of 'ck-root', but it is not a root" in str(raised.value)
    await storage.aclose()
