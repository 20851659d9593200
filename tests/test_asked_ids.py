"""The engine checks what a backend read against the id that was asked for, not only against the
id the backend says it read: a backend matching ids loosely cannot hand back another record."""

from __future__ import annotations

import pytest

from storages import WorkflowCheckpoint
from storages.contract import CheckpointID
from storages.errors import CheckpointCorruptedError
from tests.kit.double import DoubleBackend, storage_of


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
