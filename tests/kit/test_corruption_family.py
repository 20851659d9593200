"""The corruption family passes the in-memory storage and catches storages that hide damage."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conformance import BackendReport, Outcome, all_clauses, target_from_url
from conformance.clauses.tamper import KIT_KEY
from storages.backend import CheckpointRecord, InsertResult, StoredBody
from storages.contract import Capability, CheckpointID, WorkflowCheckpoint
from storages.errors import CheckpointCorruptedError
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .double import DecodesItself, DoubleBackend, DoubleStorage
from .support import failed

FAMILY = "corruption"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


LOAD_CLAUSES = {
    "corruption.truncated_body",
    "corruption.garbage_body",
    "corruption.flipped_bit",
    "corruption.empty_body",
    "corruption.swapped_body",
}


class SkipsUndecodable(DoubleStorage):
    """get_latest and list_checkpoints skip bodies they cannot decode (MAF #8181)."""

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        for checkpoint_id in reversed(await self.list_checkpoint_ids(workflow_name=workflow_name)):
            try:
                return await self.load(checkpoint_id)
            except CheckpointCorruptedError:
                continue
        return None

    async def list_checkpoints(self, *, workflow_name: str, **_: Any) -> list[Any]:
        decodable = []
        for checkpoint_id in await self.list_checkpoint_ids(workflow_name=workflow_name):
            try:
                decodable.append(await self.load(checkpoint_id))
            except CheckpointCorruptedError:
                continue
        return decodable


class LoadReturnsDefault(DoubleStorage):
    """load() hands back an empty checkpoint when the body cannot be decoded."""

    async def load(self, checkpoint_id: str, *, expected_graph_signature_hash: str | None = None) -> Any:
        try:
            return await super().load(checkpoint_id)
        except CheckpointCorruptedError:
            return WorkflowCheckpoint(
                workflow_name="recovered", graph_signature_hash="", checkpoint_id=checkpoint_id
            )


class TrustsAnyBody(DecodesItself):
    """Decodes whatever body sits under an id without checking it belongs to that id."""


class ChecksOnlyIdAndWorkflowAskedFor(DecodesItself):
    """Checks a decoded body's id, and its workflow when a listing asked for one, but believes
    the body over the record's index entry (the engine before the hardening)."""

    def check(
        self, stored: StoredBody, checkpoint: Any, workflow_name: str | None, signature: str | None
    ) -> None:
        if checkpoint.checkpoint_id != stored.checkpoint_id or (
            workflow_name is not None and checkpoint.workflow_name != workflow_name
        ):
            raise CheckpointCorruptedError(stored.checkpoint_id, "not the record it is stored as")


class HidesDamagedIds(DoubleStorage):
    """list_checkpoint_ids drops ids whose bodies do not decode."""

    async def list_checkpoint_ids(self, *, workflow_name: str, **_: Any) -> list[str]:
        ids = []
        for checkpoint_id in await super().list_checkpoint_ids(workflow_name=workflow_name):
            try:
                await self.load(checkpoint_id)
            except CheckpointCorruptedError:
                continue
            ids.append(checkpoint_id)
        return ids


class NamesTheWrongId(DoubleStorage):
    """Reports corruption, but of some other checkpoint than the damaged one."""

    async def load(self, checkpoint_id: str, *, expected_graph_signature_hash: str | None = None) -> Any:
        try:
            return await super().load(checkpoint_id)
        except CheckpointCorruptedError as exc:
            raise CheckpointCorruptedError("some-other-id", exc.reason) from exc


def test_in_memory_storage_passes_every_corruption_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert len(backend.results) == len([c for c in all_clauses() if c.family == FAMILY])
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures


def test_a_keyed_in_memory_storage_passes_every_corruption_clause() -> None:
    # Its bodies carry no checksum (the seal's MAC covers them): damage fails the MAC instead, a
    # CheckpointTamperedError, which is the CheckpointCorruptedError naming the id the clauses ask for.
    def factory() -> InMemoryCheckpointStorage:
        return InMemoryCheckpointStorage(integrity_key=KIT_KEY)

    backend = run_family(factory)
    assert len(backend.results) == len([c for c in all_clauses() if c.family == FAMILY])
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures


@pytest.mark.sqlite
def test_a_sqlite_url_with_a_key_passes_every_corruption_clause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KIT_CORRUPTION_KEY", KIT_KEY.hex())
    backend = run_family(target_from_url(f"sqlite:///{tmp_path}/kit.db?integrity_key_env=KIT_CORRUPTION_KEY"))
    assert backend.results
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures


def test_corruption_clauses_need_raw_access() -> None:
    without_raw = MemoryBackend.capabilities - {Capability.RAW_ACCESS}
    backend = run_family(InMemoryCheckpointStorage, capabilities=without_raw)
    assert all(r.outcome is Outcome.SKIPPED for r in backend.results)


def test_skipping_undecodable_bodies_is_caught() -> None:
    backend = run_family(SkipsUndecodable)
    assert failed(backend) == {
        "corruption.get_latest_raises",
        "corruption.list_checkpoints_raises",
        # get_latest and list_checkpoints skip the impostor bodies too
        "corruption.body_names_another_workflow",
        "corruption.body_has_another_signature",
    }
    message = backend.result("corruption.get_latest_raises").message
    assert "returned" in message
    assert "expected CheckpointCorruptedError" in message


def test_load_returning_a_default_checkpoint_is_caught() -> None:
    backend = run_family(LoadReturnsDefault)
    assert failed(backend) >= LOAD_CLAUSES
    assert "recovered" in backend.result("corruption.flipped_bit").message


def test_a_body_of_another_checkpoint_is_caught() -> None:
    backend = run_family(TrustsAnyBody)
    assert failed(backend) == {
        "corruption.swapped_body",
        # checking nothing, it believes impostor bodies of the same id too
        "corruption.body_names_another_workflow",
        "corruption.body_has_another_signature",
        "corruption.body_has_another_previous",
    }
    assert "holding the body of" in backend.result("corruption.swapped_body").message


def test_believing_a_body_over_its_index_entry_is_caught() -> None:
    backend = run_family(ChecksOnlyIdAndWorkflowAskedFor)
    assert failed(backend) == {
        "corruption.body_names_another_workflow",
        "corruption.body_has_another_signature",
        "corruption.body_has_another_previous",
    }
    assert "names workflow" in backend.result("corruption.body_names_another_workflow").message
    assert "graph_signature_hash=" in backend.result("corruption.body_has_another_signature").message
    assert "links to" in backend.result("corruption.body_has_another_previous").message


def test_dropping_damaged_ids_from_the_id_listing_is_caught() -> None:
    backend = run_family(HidesDamagedIds)
    assert "corruption.ids_still_listed" in failed(backend)
    assert "dropped damaged checkpoint" in backend.result("corruption.ids_still_listed").message


def test_an_error_naming_the_wrong_checkpoint_is_caught() -> None:
    backend = run_family(NamesTheWrongId)
    assert failed(backend) >= LOAD_CLAUSES
    assert "naming 'some-other-id'" in backend.result("corruption.truncated_body").message


class TrustsOverwrittenIds(DoubleBackend):
    """Once raw access rewrote a body, a save under that id is taken as the checkpoint stored."""

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        written = await super().overwrite_body(checkpoint_id, body, digest)
        if written:
            _overwritten(self).add(checkpoint_id)
        return written

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        if records[0].checkpoint_id in _overwritten(self):
            return InsertResult.SAME_BODY
        return await super().insert(records)


def _overwritten(backend: DoubleBackend) -> set[CheckpointID]:
    """The ids raw access rewrote, kept with the backing every handle shares."""
    found: set[CheckpointID] = backend.backing.__dict__.setdefault("overwritten_ids", set())
    return found


def test_a_backend_trusting_overwritten_ids_is_caught() -> None:
    backend = run_family(TrustsOverwrittenIds)
    assert "corruption.delete_damaged" in failed(backend)
    message = backend.result("corruption.delete_damaged").message
    assert "was accepted as the checkpoint already stored" in message
