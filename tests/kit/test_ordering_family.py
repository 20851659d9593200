"""The ordering family passes a correct storage and catches storages that order by anything else."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Self

import pytest

from conformance import BackendReport, Outcome, StorageTarget, select_clauses, validate
from storages.backend import RIVALS_LIMIT, Backend, CheckpointRecord, InsertResult, StoredBody, latest_record
from storages.contract import Capability, CheckpointID
from storages.errors import CheckpointNotFoundError
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .blind_batch_three import OverwriteReinserts, over
from .double import DoubleBackend, DoubleStorage
from .support import SixMethodsOnly, caught_only_by, failed

FAMILY = "ordering"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


LATEST_CLAUSES = {
    "ordering.latest_ignores_older_timestamp",
    "ordering.latest_with_equal_timestamps",
    "ordering.list_is_commit_order",
    "ordering.order_survives_delete",
    "ordering.save_after_delete_is_latest",
}
"""The clauses whose checkpoints' timestamps sort otherwise than their commit order."""


# ---------------------------------------------------------------- mutants, one defect each


class LatestByTimestamp(DoubleBackend):
    """get_latest() picks the greatest timestamp, first saved on ties: MAF's in-memory rule."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        stored = await self.list_bodies(workflow_name, graph_signature_hash)
        if not stored:
            return None
        clocks = [datetime.fromisoformat((await self.decode(item)).timestamp) for item in stored]
        return stored[clocks.index(max(clocks))]  # the first of the greatest


class LatestByCommitOrder(DoubleBackend):
    """get_latest() is the checkpoint committed last, even when a checkpoint committed before it
    continues it (names it as previous): the rule before MAF 1.26's lineage tie-break."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        stored = await self.list_bodies(workflow_name, graph_signature_hash)
        return stored[-1] if stored else None


class RivalsByCommitOrder(DoubleBackend):
    """The lineage rule without rivals: of checkpoints continuing one checkpoint, the one
    committed last is latest, whatever their timestamps (parallel steps saved out of order)."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        stored = await super().latest(workflow_name, graph_signature_hash)
        return None if stored is None else replace(stored, rivals=())


class RootsNeverRival(DoubleBackend):
    """Rivals only for a head with a previous id: of roots committed one after another (parallel
    first steps saved out of order), the one committed last is latest, whatever their timestamps."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        stored = await super().latest(workflow_name, graph_signature_hash)
        if stored is None or (await self.decode(stored)).previous_checkpoint_id is not None:
            return stored
        return replace(stored, rivals=())


class ReadsOneRivalFewer(DoubleBackend):
    """Reads the 63 rivals committed last with the head, not 64 (``LIMIT 63``, an off-by-one)."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        stored = await super().latest(workflow_name, graph_signature_hash)
        if stored is None or len(stored.rivals) < RIVALS_LIMIT:
            return stored
        return replace(stored, rivals=stored.rivals[1:])


class SavesOvertakeEachOther(DoubleStorage):
    """A wrapper whose saves reach the store in the reverse of their call order when several run
    at once (each waits longer the earlier it was called), as a client pool on a slow network
    without ordering lets later saves overtake earlier ones."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        calls = self.__dict__.setdefault("calls", [0])
        calls[0] += 1
        for _ in range(max(0, 40 - 4 * calls[0])):
            await asyncio.sleep(0)
        checkpoint_id: CheckpointID = await super().save(checkpoint, **options)
        return checkpoint_id


class ListsInIdOrder(DoubleBackend):
    """Lists in lexicographic id order, as an object store's key listing returns them."""

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[StoredBody]:
        stored = await super().list_bodies(workflow_name, graph_signature_hash)
        return sorted(stored, key=lambda item: item.checkpoint_id)

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return sorted(await super().list_ids(workflow_name, graph_signature_hash))


class OneLatestPointerPerStore(DoubleStorage):
    """Remembers the last save of the whole store (not per workflow) and serves it as latest."""

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        checkpoint_id: CheckpointID = await super().save(checkpoint, **options)
        self.__dict__["last_saved"] = checkpoint_id  # per handle
        return checkpoint_id

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any | None:
        pointer = self.__dict__.get("last_saved")
        if pointer is not None:
            try:
                return await self.load(pointer)
            except CheckpointNotFoundError:
                pass
        return await super().get_latest(
            workflow_name=workflow_name, graph_signature_hash=graph_signature_hash
        )


@dataclass
class _Row:
    record: CheckpointRecord
    sequence: int


class SequenceFromCount(Backend):
    """Numbers each save by how many checkpoints its workflow holds, so numbers repeat after a
    delete; latest is the highest number, the earliest stored winning a tie."""

    capabilities = frozenset({Capability.SHARED})

    def __init__(self, rows: dict[CheckpointID, _Row] | None = None) -> None:
        self._rows: dict[CheckpointID, _Row] = {} if rows is None else rows

    def new_handle(self) -> Self:
        return type(self)(self._rows)

    def _workflow(self, workflow_name: str) -> list[_Row]:
        return [row for row in self._rows.values() if row.record.workflow_name == workflow_name]

    def _ordered(self, workflow_name: str) -> list[_Row]:
        return sorted(self._workflow(workflow_name), key=lambda row: row.sequence)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        existing = self._rows.get(record.checkpoint_id)
        if existing is not None:
            return InsertResult.of_stored_digest(existing.record.digest, record)
        self._rows[record.checkpoint_id] = _Row(record, len(self._workflow(record.workflow_name)))
        return InsertResult.INSERTED

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        row = self._rows.get(checkpoint_id)
        return None if row is None else StoredBody(checkpoint_id, row.record.body)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        # Its own order, the earliest stored winning a tie, resolved through the lineage.
        rows = list(enumerate(self._workflow(workflow_name)))
        ordered = [row for _, row in sorted(rows, key=lambda pair: (pair[1].sequence, -pair[0]))]
        top = latest_record([row.record for row in ordered])
        return None if top is None else StoredBody(top.checkpoint_id, top.body)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [StoredBody(row.record.checkpoint_id, row.record.body) for row in self._ordered(workflow_name)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return [row.record.checkpoint_id for row in self._ordered(workflow_name)]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return self._rows.pop(checkpoint_id, None) is not None


# ---------------------------------------------------------------- tests


def test_in_memory_storage_passes_every_ordering_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert Capability.SHARED in MemoryBackend.capabilities  # so nothing is skipped
    assert {r.clause_id: r.outcome for r in backend.results} == {
        c.id: Outcome.PASSED for c in select_clauses([FAMILY])
    }
    assert len(backend.results) >= 7


def test_latest_by_timestamp_fails_every_clause_that_reorders_timestamps() -> None:
    # workflows_are_independent gives this workflow rising timestamps, so it has nothing to catch.
    backend = run_family(LatestByTimestamp)
    assert failed(backend) == {
        *LATEST_CLAUSES,
        "ordering.commit_order_across_handles",
        "ordering.latest_is_the_lineage_tip",
        "ordering.latest_among_rivals_by_timestamp",  # the first saved of equal timestamps
        "ordering.latest_among_root_rivals_by_timestamp",
        "ordering.rival_timestamps_compare_as_instants",
        "ordering.latest_reads_the_rivals_committed_last",  # a newer rival before the 64 read
        "ordering.unparsable_timestamp_is_data",  # a parsing timestamp before the head
        "ordering.concurrent_saves_commit_in_call_order",  # a chain whose clock went backwards
        "ordering.raw_write_keeps_commit_order",  # the newest clock of six is not the last commit
    }
    message = backend.result("ordering.latest_with_equal_timestamps").message
    assert "after saving c1 with the same timestamp returned c0, expected c1" in message


def test_latest_by_commit_order_fails_the_lineage_and_rivals_clauses_only() -> None:
    backend = run_family(LatestByCommitOrder)
    assert failed(backend) == {
        "ordering.latest_is_the_lineage_tip",
        "ordering.latest_among_rivals_by_timestamp",
        "ordering.latest_among_root_rivals_by_timestamp",
        "ordering.rival_timestamps_compare_as_instants",
        "ordering.latest_reads_the_rivals_committed_last",
    }
    assert "after saving c0, then c1, which c0 names as its previous returned c1, expected c0" in (
        backend.result("ordering.latest_is_the_lineage_tip").message
    )


def test_rivals_by_commit_order_fail_the_rivals_clauses_only() -> None:
    backend = run_family(RivalsByCommitOrder)
    assert failed(backend) == {
        "ordering.latest_among_rivals_by_timestamp",
        "ordering.latest_among_root_rivals_by_timestamp",
        "ordering.rival_timestamps_compare_as_instants",
        "ordering.latest_reads_the_rivals_committed_last",
    }
    assert "after saving c1, c2 and c3, which all continue c0 (c1 the newest) returned c3, expected c1" in (
        backend.result("ordering.latest_among_rivals_by_timestamp").message
    )


def test_roots_that_never_rival_fail_the_root_rivals_clause_only() -> None:
    backend = run_family(RootsNeverRival)
    caught_only_by(
        backend,
        "ordering.latest_among_root_rivals_by_timestamp",
        "then roots c2, c3 and c4 (c2 the newest) returned c4, expected c2",
    )


def test_reading_one_rival_fewer_fails_the_rivals_limit_clause_only() -> None:
    backend = run_family(ReadsOneRivalFewer)
    caught_only_by(
        backend,
        "ordering.latest_reads_the_rivals_committed_last",
        "before the head c70, c5 newer but committed before them) returned c69, expected c6",
    )


def test_saves_overtaking_each_other_fail_the_call_order_clause_only() -> None:
    backend = run_family(SavesOvertakeEachOther)
    caught_only_by(
        backend,
        "ordering.concurrent_saves_commit_in_call_order",
        "after six saves started together returned",
    )


def test_listing_in_id_order_fails_the_listing_clauses_only() -> None:
    backend = run_family(ListsInIdOrder)
    assert failed(backend) == {
        "ordering.list_is_commit_order",
        "ordering.order_survives_delete",
        "ordering.save_after_delete_is_latest",
        "ordering.raw_write_keeps_commit_order",
        "ordering.commit_order_across_handles",
        "ordering.concurrent_saves_commit_in_call_order",
    }
    assert "list_checkpoints() after five saves returned [c2, c4, c0, c3, c1]" in (
        backend.result("ordering.list_is_commit_order").message
    )


def test_sequence_numbers_reused_after_delete_fail_save_after_delete_is_latest() -> None:
    backend = run_family(SequenceFromCount)
    # It reads no rivals with the head either (a backend written before them).
    assert failed(backend) == {
        "ordering.save_after_delete_is_latest",
        "ordering.latest_among_rivals_by_timestamp",
        "ordering.latest_among_root_rivals_by_timestamp",
        "ordering.rival_timestamps_compare_as_instants",
        "ordering.latest_reads_the_rivals_committed_last",
    }
    assert (
        "then saving c4 returned c2, expected c4"
        in backend.result("ordering.save_after_delete_is_latest").message
    )


def test_one_latest_pointer_for_all_workflows_fails_workflows_are_independent() -> None:
    # The pointer lives in the handle, so the two-handle clause sees it go stale as well.
    backend = run_family(OneLatestPointerPerStore)
    # It serves the checkpoint saved last, so it cannot follow a lineage either.
    assert failed(backend) == {
        "ordering.workflows_are_independent",
        "ordering.commit_order_across_handles",
        "ordering.latest_is_the_lineage_tip",
        "ordering.latest_among_rivals_by_timestamp",
        "ordering.latest_among_root_rivals_by_timestamp",
        "ordering.rival_timestamps_compare_as_instants",
        "ordering.latest_reads_the_rivals_committed_last",
    }
    assert (
        "the second naming it as previous returned 'ck-other-"
        in backend.result("ordering.workflows_are_independent").message
    )
    # Within one workflow on one handle the pointer is right, so those clauses pass.
    for clause_id in LATEST_CLAUSES:
        assert backend.result(clause_id).outcome is Outcome.PASSED, clause_id


@pytest.mark.maf
def test_maf_in_memory_storage_fails_ordering_by_timestamp() -> None:
    """MAF's InMemoryCheckpointStorage decides latest by max timestamp (MAF issue #8513)."""
    agent_framework = pytest.importorskip("agent_framework")
    backend = run_family(
        StorageTarget(
            name="agent_framework.InMemoryCheckpointStorage",
            factory=agent_framework.InMemoryCheckpointStorage,
            checkpoint_class=agent_framework.WorkflowCheckpoint,
        )
    )
    # Its lineage rule (1.26) breaks timestamp ties only: the newest timestamp still decides, and
    # equal timestamps without lineage go to the greatest id.
    assert failed(backend) == {
        *LATEST_CLAUSES,
        "ordering.latest_is_the_lineage_tip",
        "ordering.latest_among_rivals_by_timestamp",
        "ordering.latest_among_root_rivals_by_timestamp",
        "ordering.rival_timestamps_compare_as_instants",
        "ordering.latest_reads_the_rivals_committed_last",
        "ordering.unparsable_timestamp_is_data",
        "ordering.concurrent_saves_commit_in_call_order",  # a chain whose clock went backwards
    }
    assert backend.result("ordering.workflows_are_independent").outcome is Outcome.PASSED
    # MAF's storage declares no capabilities, so the two-handle clause cannot run.
    assert backend.result("ordering.commit_order_across_handles").outcome is Outcome.SKIPPED
    assert "returned c0, expected c1" in backend.result("ordering.latest_ignores_older_timestamp").message


def test_clauses_read_capabilities_from_the_target_not_the_storage() -> None:
    """A six-method storage declares nothing: the lineage and many-writer clauses run on it."""
    root = InMemoryCheckpointStorage()
    target = StorageTarget("six", lambda: SixMethodsOnly(root.new_handle()), capabilities=frozenset())
    clauses = ["ordering.latest_is_the_lineage_tip", "concurrency.many_saves_one_workflow"]
    (backend,) = validate(target, clauses=clauses).backends
    assert not backend.error, backend.error
    assert {r.clause_id: r.outcome for r in backend.results} == dict.fromkeys(clauses, Outcome.PASSED)


class LatestLostInACycle(SixMethodsOnly):
    """get_latest follows the lineage rule over the listing, but answers None where it meets a
    checkpoint it already visited instead of stopping at the one it is on."""

    async def get_latest(self, *, workflow_name: str) -> Any:
        listed = await self.inner.list_checkpoints(workflow_name=workflow_name)
        if not listed:
            return None
        current, seen = listed[-1], {listed[-1].checkpoint_id}
        while True:
            following = [
                c
                for c in listed
                if c.previous_checkpoint_id == current.checkpoint_id
                and c.graph_signature_hash == current.graph_signature_hash
            ]
            if not following:
                return current
            if following[-1].checkpoint_id in seen:
                return None
            current = following[-1]
            seen.add(current.checkpoint_id)


def test_latest_lost_in_a_cycle_is_caught() -> None:
    root = InMemoryCheckpointStorage()
    target = StorageTarget("cycle", lambda: LatestLostInACycle(root.new_handle()), capabilities=frozenset())
    (backend,) = validate(target, clauses=["ordering.latest_is_the_lineage_tip"]).backends
    (result,) = backend.results
    assert result.outcome is Outcome.FAILED
    assert "after saving c0 naming c1 as previous, then c1 naming c0" in result.message


def test_a_raw_write_made_a_delete_and_insert_fails_the_raw_write_clause_only() -> None:
    backend = run_family(over(OverwriteReinserts))
    caught_only_by(
        backend,
        "ordering.raw_write_keeps_commit_order",
        "after write_raw_body of c0 with its own bytes returned [c1, c2, c3, c4, c5, c0], "
        "expected [c0, c1, c2, c3, c4, c5]",
    )
