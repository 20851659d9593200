"""The nested family passes correct storages and catches each way of mishandling embedded checkpoints."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conformance import BackendReport, Outcome, select_clauses, target_from_url
from storages.backend import CheckpointRecord, FenceCheck, InsertResult
from storages.contract import CHECKPOINT_FIELDS, CheckpointID, CheckpointInfo
from storages.errors import CheckpointConflictError, NestedCheckpointDeletionError
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .double import DoubleBackend, DoubleStorage, FencingDouble, InlineStorage, ReadsThrough
from .support import caught_only_by, failed

FAMILY = "nested"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


def _all_passed(backend: BackendReport) -> None:
    assert {r.clause_id: r.outcome for r in backend.results} == {
        c.id: Outcome.PASSED for c in select_clauses([FAMILY])
    }, [(r.clause_id, r.message) for r in backend.failures]


# ---------------------------------------------------------------- mutants, one defect each


def _as_dicts(value: Any) -> Any:
    """``value`` with every checkpoint inside it replaced by its to_dict(), at any depth."""
    if all(hasattr(value, name) for name in CHECKPOINT_FIELDS):
        return {name: _as_dicts(item) for name, item in value.to_dict().items()}
    if type(value) is dict:
        return {key: _as_dicts(item) for key, item in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_as_dicts(item) for item in value)
    return value


class NestedDecodedAsDicts(ReadsThrough):
    """A decoder hook that hands embedded checkpoints back as their to_dict() mappings."""

    def returned(self, checkpoint: Any) -> Any:
        for name in ("messages", "state", "pending_request_info_events", "metadata"):
            setattr(checkpoint, name, _as_dicts(getattr(checkpoint, name)))
        return checkpoint


class InlineOnly(InlineStorage):
    """Claims ``nested`` but encodes embedded checkpoints inline, recording nothing nested."""


class DeleteLeavesOrphans(DoubleBackend):
    """delete() removes the container's record only; its nested records stay behind."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        state = self._read()
        row = state.rows.get(self._key(checkpoint_id))
        if row is None:
            return False
        if row.record.container_id is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, row.record.container_id)
        del state.rows[self._key(checkpoint_id)]
        self._commit(state)
        return True


class ListsNestedWithoutFlag(DoubleBackend):
    """list_checkpoint_ids() includes nested records whether or not include_nested is set."""

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return await super().list_ids(workflow_name, graph_signature_hash, include_nested=True)


class NonAtomicFamilyInsert(DoubleBackend):
    """Writes the checkpoint, then its nested records one by one, stopping at a conflict."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await super().insert(records[:1])
        if result is not InsertResult.INSERTED:
            return result
        for record in records[1:]:
            if await super().insert((record,)) is not InsertResult.INSERTED:
                raise CheckpointConflictError(record.checkpoint_id, "an embedded checkpoint's id is taken")
        return result


class NestedDeletable(DoubleBackend):
    """delete() of a nested record deletes it (and what it holds) instead of refusing."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        state = self._read()
        row = state.rows.get(self._key(checkpoint_id))
        if row is None:
            return False
        self._drop(state, row)
        self._commit(state)
        return True


class ContainerIsRoot(DoubleBackend):
    """checkpoint_info() names the top-level checkpoint a record was saved with as its container."""

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        info = await super().info(checkpoint_id)
        row = self._read().rows.get(self._key(checkpoint_id))
        if info is None or row is None or not row.record.nested:
            return info
        return dataclasses.replace(info, container_id=row.record.root_id)


class ListNestedAllDescendants(DoubleBackend):
    """list_nested() names every record below a checkpoint, grandchildren too."""

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        state = self._read()
        row = state.rows.get(self._key(checkpoint_id))
        if row is None:
            return None
        return [member.record.checkpoint_id for member in state.family(row)[1:]]


class ResaveComparesContainerOnly(DoubleStorage):
    """Treats a re-save as a no-op when the container's own body matches, ignoring its children."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        try:
            saved: CheckpointID = await super().save(checkpoint, **options)
        except CheckpointConflictError:
            container = self.codec.encode_checkpoint_tree(checkpoint)[0].body
            if await self.read_raw_body(checkpoint.checkpoint_id) == container:
                return checkpoint.checkpoint_id
            raise
        return saved


# ---------------------------------------------------------------- tests


def test_the_double_passes_every_nested_clause() -> None:
    # The mutants below each break one primitive of this correct storage.
    _all_passed(run_family(DoubleBackend))


def test_in_memory_storage_passes_every_nested_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    _all_passed(backend)
    assert len(backend.results) >= 14


@pytest.mark.sqlite
def test_sqlite_storage_passes_every_nested_clause(tmp_path: Path) -> None:
    # A temp-file store reached by URL, as the CLI checks it.
    _all_passed(run_family(target_from_url(f"sqlite:///{tmp_path.as_posix()}/nested.db")))


def test_embedded_checkpoints_decoded_as_dicts_fail_every_clause_reading_them() -> None:
    backend = run_family(NestedDecodedAsDicts)
    assert failed(backend) == {
        "nested.round_trip_anywhere",
        "nested.round_trip_deep",
        "nested.loadable_by_own_id",
        "nested.delete_cascades",
        "nested.delete_nested_refused",
        "nested.save_is_atomic",
        "nested.aliasing_stored_once",
        "nested.resave_identical_is_noop",
        "nested.resave_changed_child_conflicts",
    }
    message = backend.result("nested.round_trip_deep").message
    assert "should be WorkflowCheckpoint" in message
    assert "came back as dict" in message


def test_inline_only_storage_fails_every_clause_that_needs_a_record() -> None:
    backend = run_family(InlineOnly)
    assert failed(backend) == {c.id for c in select_clauses([FAMILY])} - {
        # Inline bodies still round trip from the top.
        "nested.round_trip_anywhere",
        "nested.round_trip_deep",
    }
    assert "it holds a copy of embedded" in backend.result("nested.stored_once").message


def test_delete_leaving_orphans_fails_delete_cascades() -> None:
    backend = run_family(DeleteLeavesOrphans)
    # list_nested_children deletes a container and saves its id again: the orphans are listed.
    assert failed(backend) == {"nested.delete_cascades", "nested.list_nested_children"}
    assert "it should raise CheckpointNotFoundError" in backend.result("nested.delete_cascades").message
    assert "of an id deleted and saved again" in backend.result("nested.list_nested_children").message


def test_listing_nested_records_without_the_flag_fails_hidden_from_listing() -> None:
    backend = run_family(ListsNestedWithoutFlag)
    assert failed(backend) == {"nested.hidden_from_listing"}
    message = backend.result("nested.hidden_from_listing").message
    assert "list_checkpoint_ids(" in message
    assert "expected [], got [" in message


def test_non_atomic_family_insert_fails_save_is_atomic() -> None:
    backend = run_family(NonAtomicFamilyInsert)
    assert failed(backend) == {"nested.save_is_atomic"}
    # The parent was written although its save raised; its collided child is not its own.
    message = backend.result("nested.save_is_atomic").message
    assert message.startswith("load('ck-atomic-parent-")
    assert "after the save refused for an id collision" in message


def test_deletable_nested_record_fails_delete_nested_refused() -> None:
    backend = run_family(NestedDeletable)
    assert failed(backend) == {"nested.delete_nested_refused"}
    assert (
        "must raise NestedCheckpointDeletionError" in backend.result("nested.delete_nested_refused").message
    )


def test_root_named_as_container_fails_records_container() -> None:
    backend = run_family(ContainerIsRoot)
    caught_only_by(backend, "nested.records_container", ".container_id: expected '")


def test_listing_grandchildren_as_children_fails_list_nested_children() -> None:
    backend = run_family(ListNestedAllDescendants)
    assert failed(backend) == {"nested.list_nested_children", "nested.delete_nested_refused"}


def test_resave_comparing_the_container_only_fails_resave_changed_child_conflicts() -> None:
    backend = run_family(ResaveComparesContainerOnly)
    assert failed(backend) == {"nested.resave_changed_child_conflicts"}
    assert "was accepted; checkpoints are immutable" in (
        backend.result("nested.resave_changed_child_conflicts").message
    )


class FenceLooksUpTheLastRecord(FencingDouble):
    """A fenced insert that looks for the family's last record instead of its top: a taken
    embedded id is reported as the top id saved again with other content."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        state = self._read()
        latest = self.latest_id(state, records[0].workflow_name)
        existing = self.stored_digest(state, records[-1].checkpoint_id)
        if existing is not None:
            return FenceCheck(latest, InsertResult.of_stored_digest(existing, records[0]))
        return await super().insert_fenced(records, expected_latest_id)


def test_the_fencing_double_passes_every_nested_clause() -> None:
    _all_passed(run_family(FencingDouble))


def test_a_fence_looking_up_the_last_record_is_caught() -> None:
    caught_only_by(run_family(FenceLooksUpTheLastRecord), "nested.save_is_atomic", "not the reused id")


class FenceLetsStoredLastRecordsThrough(FencingDouble):
    """A fence that lets a save through to the write when the family's last record is stored
    (meaning the top, as a retry of a save that won): a stale save whose last embedded id is taken
    collides in the write instead of being refused by the fence."""

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        state = self._read()
        if self.stored_digest(state, records[-1].checkpoint_id) is not None:
            expected_latest_id = self.latest_id(state, records[0].workflow_name)
        return await super().insert_fenced(records, expected_latest_id)


def test_a_collision_deciding_before_a_stale_fence_is_caught() -> None:
    caught_only_by(
        run_family(FenceLetsStoredLastRecordsThrough), "nested.save_is_atomic", "not StaleWriterError"
    )


class ReplacesFamilyWithNewEmbeddedIds(MemoryBackend):
    """Takes a family whose last embedded id is not stored for a new save, and replaces the stored
    checkpoint of the same id with it."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        if len(records) > 1 and await self.load(records[-1].checkpoint_id) is None:
            await self.remove(records[0].checkpoint_id)
        return await super().insert(records)


def test_a_family_with_new_embedded_ids_replacing_the_stored_one_is_caught() -> None:
    caught_only_by(
        run_family(ReplacesFamilyWithNewEmbeddedIds),
        "nested.resave_changed_child_conflicts",
        "was accepted; checkpoints are immutable",
    )
