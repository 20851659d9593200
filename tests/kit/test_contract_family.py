"""The contract family passes a correct storage and catches storages broken in one way each."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import pytest

from conformance import BackendReport, Outcome, StorageTarget, select_clauses, validate
from storages.backend import CheckpointRecord, InsertResult, StoredBody
from storages.contract import CheckpointID, CheckpointInfo
from storages.engine import CheckpointStore
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .double import DoubleBackend
from .support import caught_only_by, failed

FAMILY = "contract"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


# ---------------------------------------------------------------- mutants, one defect each


class OverwritesOnConflict(DoubleBackend):
    """Saving an existing id with new content replaces the stored body (last writer wins)."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await super().insert(records)
        if result is InsertResult.DIFFERENT_BODY:
            await self.overwrite_body(records[0].checkpoint_id, records[0].body, records[0].digest)
            return InsertResult.INSERTED
        return result


class ConflictIsValueError(DoubleBackend):
    """Refuses a conflicting save, but with a ValueError MAF's runner does not catch."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await super().insert(records)
        if result is InsertResult.DIFFERENT_BODY:
            raise ValueError(f"{records[0].checkpoint_id} exists")
        return result


class UniquePerWorkflow(DoubleBackend):
    """Checks an id for conflicts within its workflow only (a unique key on workflow and id), so
    the same id saved under another workflow replaces the stored one."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        state = self._read()
        existing = state.rows.get(self._key(records[0].checkpoint_id))
        if existing is not None and existing.record.workflow_name == records[0].workflow_name:
            return InsertResult.of_stored_digest(existing.record.digest, records[0])
        state.rows.pop(self._key(records[0].checkpoint_id), None)
        self._write_family(state, records)
        return InsertResult.INSERTED


class DeleteAlwaysTrue(DoubleBackend):
    """delete() reports success for ids it never stored."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        await super().remove(checkpoint_id)
        return True


class ListsNewestFirst(DoubleBackend):
    """list_checkpoints() returns newest first while list_checkpoint_ids() returns oldest first."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[StoredBody]:
        return list(reversed(await super().list_bodies(workflow_name, graph_signature_hash)))


class StaleLatestAfterDelete(DoubleBackend):
    """Keeps a 'latest' pointer per workflow that save() updates and delete() forgets."""

    def __init__(self, *args: Any, **options: Any) -> None:
        # new_handle() passes the shared store on: a race through a second handle needs it.
        super().__init__(*args, **options)
        self._latest_pointer: dict[str, StoredBody] = {}

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await super().insert(records)
        if result is InsertResult.INSERTED:
            record = records[0]
            self._latest_pointer[record.workflow_name] = StoredBody(record.checkpoint_id, record.body)
        return result

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return self._latest_pointer.get(workflow_name)


# ---------------------------------------------------------------- tests


class StreamFedIndexBackend(MemoryBackend):
    """Answers checkpoint_info and workflow_names from an index a change stream feeds, one event
    (a record written or deleted) at the end of every call: the index keeps up with writes of one
    record and falls behind a write of several."""

    def __init__(self, store: Any = None) -> None:
        super().__init__(store)
        self.described: dict[str, CheckpointInfo] = {}
        self.named: set[str] = set()
        self.stream: deque[tuple[str, str]] = deque()

    async def apply_one(self) -> None:
        if not self.stream:
            return
        checkpoint_id, workflow_name = self.stream.popleft()
        info = await super().info(checkpoint_id)
        if info is None:
            self.described.pop(checkpoint_id, None)
        else:
            self.described[checkpoint_id] = info
        self.named.discard(workflow_name)
        if workflow_name in await super().workflow_names():
            self.named.add(workflow_name)

    async def streamed(self, records: Sequence[Any]) -> None:
        self.stream.extend((r.checkpoint_id, r.workflow_name) for r in records)
        await self.apply_one()

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await super().insert(records)
        await self.streamed(records)
        return result

    async def remove(self, checkpoint_id: str) -> bool:
        before = await self.records(None)
        removed = await super().remove(checkpoint_id)
        after = {r.checkpoint_id for r in await self.records(None)}
        await self.streamed([r for r in before if r.checkpoint_id not in after])
        return removed

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        before = await self.records(workflow_name)
        count = await super().prune(workflow_name, keep_last)
        after = {r.checkpoint_id for r in await self.records(workflow_name)}
        await self.streamed([r for r in before if r.checkpoint_id not in after])
        return count

    async def delete_workflow(self, workflow_name: str) -> int:
        before = await self.records(workflow_name)
        count = await super().delete_workflow(workflow_name)
        await self.streamed(before)
        return count

    async def info(self, checkpoint_id: str) -> CheckpointInfo | None:
        await self.apply_one()
        return self.described.get(checkpoint_id)

    async def workflow_names(self) -> list[str]:
        await self.apply_one()
        return sorted(self.named)


def StreamFedIndex() -> CheckpointStore[MemoryBackend]:
    return CheckpointStore(StreamFedIndexBackend())


class BodyKeptPastDeleteBackend(MemoryBackend):
    """Keeps the body of a deleted record beside the store (a blob left to a cleanup pass) and
    writes a save of the same id with it, taking it for a retry's."""

    def __init__(self, store: Any = None) -> None:
        super().__init__(store)
        self.left: dict[str, bytes] = {}

    async def remove(self, checkpoint_id: str) -> bool:
        stored = await self.load(checkpoint_id)
        if stored is not None:
            self.left[checkpoint_id] = stored.body
        return await super().remove(checkpoint_id)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        left = self.left.pop(records[0].checkpoint_id, None)
        if left is not None:
            records = [records[0].replaced(body=left), *records[1:]]
        return await super().insert(records)


def BodyKeptPastDelete() -> CheckpointStore[MemoryBackend]:
    return CheckpointStore(BodyKeptPastDeleteBackend())


def test_in_memory_storage_passes_every_contract_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert {r.clause_id: r.outcome for r in backend.results} == {
        c.id: Outcome.PASSED for c in select_clauses([FAMILY])
    }
    assert len(backend.results) >= 13


def test_overwrite_on_conflict_fails_only_resave_conflict_raises() -> None:
    backend = run_family(OverwritesOnConflict)
    # Saving the id under another workflow, or with values == to the stored ones, overwrites it too.
    assert failed(backend) == {
        "contract.resave_conflict_raises",
        "contract.ids_are_global",
        "contract.resave_equal_values_of_other_types_conflicts",
    }
    assert "overwrote the original" in backend.result("contract.resave_conflict_raises").message


def test_an_id_unique_only_within_its_workflow_is_caught() -> None:
    caught_only_by(run_family(UniquePerWorkflow), "contract.ids_are_global", "one id now names two")


def test_conflict_raised_as_value_error_fails_the_typed_error_clauses() -> None:
    backend = run_family(ConflictIsValueError)
    # It also refuses a re-save whose bytes differ but whose content is equal (a reordered set).
    assert failed(backend) == {
        "contract.resave_conflict_raises",
        "contract.ids_are_global",
        "contract.errors_are_checkpoint_exceptions",
        "contract.resave_equal_content_encoded_differently_is_noop",
        "contract.resave_equal_values_of_other_types_conflicts",
    }
    message = backend.result("contract.errors_are_checkpoint_exceptions").message
    assert "conflicting re-save raised ValueError" in message


def test_delete_returning_true_for_missing_ids_fails_delete_missing_returns_false() -> None:
    backend = run_family(DeleteAlwaysTrue)
    caught_only_by(backend, "contract.delete_missing_returns_false", "never stored returned True")


def test_listing_newest_first_fails_the_order_checks() -> None:
    # list_returns_workflow_checkpoints compares sets, so only the clauses that promise
    # oldest-first order (directly, or after an identical re-save) catch this one.
    backend = run_family(ListsNewestFirst)
    assert failed(backend) == {
        "contract.list_ids_match_list",
        "contract.resave_identical_is_noop",
        "contract.maf_checkpoint_class_round_trips",  # checks list_checkpoints()[0] is the first saved
    }


def test_latest_that_survives_delete_fails_the_delete_clauses() -> None:
    backend = run_family(StaleLatestAfterDelete)
    assert failed(backend) == {
        "contract.delete_removes",
        "contract.delete_latest_promotes_previous",
        "contract.reads_follow_each_write",
    }
    assert "get_latest(" in backend.result("contract.delete_removes").message


@pytest.mark.maf
def test_maf_in_memory_storage_fails_only_the_immutability_clauses() -> None:
    """MAF's own in-memory storage meets MAF's protocol but overwrites on a conflicting re-save,
    under the same workflow or another."""
    agent_framework = pytest.importorskip("agent_framework")
    target = StorageTarget(
        name="agent_framework.InMemoryCheckpointStorage",
        factory=agent_framework.InMemoryCheckpointStorage,
        checkpoint_class=agent_framework.WorkflowCheckpoint,
    )
    backend = validate(target, clauses=[FAMILY]).backends[0]
    assert failed(backend) == {
        "contract.resave_conflict_raises",
        "contract.ids_are_global",
        "contract.resave_equal_values_of_other_types_conflicts",
    }
    assert backend.count(Outcome.PASSED) == len(backend.results) - 3


def test_an_index_lagging_behind_writes_of_several_records_is_caught() -> None:
    backend = run_family(StreamFedIndex)
    caught_only_by(backend, "contract.reads_follow_each_write", "read first right after")


def test_a_deleted_body_read_back_for_a_new_save_of_its_id_is_caught() -> None:
    caught_only_by(run_family(BodyKeptPastDelete), "contract.resave_after_delete_is_new", "saved again")
