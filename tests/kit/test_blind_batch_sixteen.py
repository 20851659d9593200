"""The sixteenth blind batch (tests/kit/blind_batch_sixteen.py) keeps the kit honest: every
broken storage in it is caught by the clause named here, and the honest ones (an index in the
author's own SQLite database with the bodies as blob files, a write-back cache in front of a
remote, a columnar store, a retry wrapper over a flaky store), with any judged not to break the
contract, pass the whole kit. What the kit caught before this batch's clauses is in
tests/kit/blind_batch_sixteen.md."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance import StorageTarget

from .blind_batch_sixteen import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # an index in SQLite, the bodies as blob files
    "SplitSignatureByLike": "signature.filter_is_exact",
    "SplitIdsIgnoreCase": "identifiers.distinct_ids",
    "SplitDeleteWorkflowDropsCounter": "retention.save_after_delete_workflow",
    "SplitIndexBeforeBlob": "concurrency.reads_see_whole_checkpoints",
    "SplitCleanupRacesWrite": "concurrency.conflicting_saves",
    "SplitReSaveReadsOldBlob": "contract.resave_after_delete_is_new",
    "SplitSequenceReadApart": "concurrency.many_writers_number_once",
    "SplitListsByLike": "identifiers.distinct_workflow_names",
    "SplitLoadsByGlob": "identifiers.hostile_ids_round_trip",
    "SplitSequenceAsText": "ordering.latest_with_equal_timestamps",
    "SplitInsertOrReplace": "nested.save_is_atomic",
    # a write-back cache in front of a remote
    "WriteBackPrunePlannedOnRemote": "retention.prune_keeps_newest",
    "WriteBackDeletesWriteThrough": "retention.delete_workflow_removes_all",
    "WriteBackTombstonesRemote": "retention.tombstones_listed",
    "WriteBackListsRemote": "contract.list_returns_workflow_checkpoints",
    "WriteBackLatestRemote": "contract.latest_returns_saved",
    "WriteBackWalkRemote": "ancestry.walk_to_root",
    "WriteBackNamesRemote": "capabilities.list_workflows",
    "WriteBackRemoveChecksRemote": "contract.delete_removes",
    "WriteBackFenceOnRemote": "fencing.one_winner_per_head",
    "WriteBackDuplicateOnRemote": "contract.resave_conflict_raises",
    "WriteBackCloseDropsBuffer": "lifecycle.closed_handle_refuses_every_operation",
    "WriteBackFlushesPutsFirst": "retention.save_after_delete_workflow",
    "WriteBackBufferPerHandle": "ordering.commit_order_across_handles",
    # a columnar store
    "ColumnNamesCountNestedRows": "capabilities.list_workflows",
    "ColumnScanStopsAtDead": "ordering.order_survives_delete",
    "ColumnIndexNotRemapped": "retention.prune_many_at_once",
    "ColumnScanIgnoresDead": "contract.delete_removes",
    "ColumnCompactionSkipsSignatures": "writes.go_with_checkpoints",
    "ColumnReusesDeadPositions": "ordering.save_after_delete_is_latest",
    "ColumnLoadIgnoresDead": "contract.delete_removes",
    "ColumnSequenceIsPosition": "ordering.save_after_delete_is_latest",
    "ColumnOverwriteAppends": "ordering.raw_write_keeps_commit_order",
    # a retry wrapper over a flaky store
    "RetryLostRemoveGoneIsTrue": "contract.delete_missing_returns_false",
    "RetryLostSaveFoundById": "contract.resave_equal_values_of_other_types_conflicts",
    "RetryFencedLostIsInserted": "fencing.superseded_resave_is_stale",
    "RetryRetriesCancellation": "concurrency.cancelled_calls_leave_no_trace",
    "RetryRemoveBlindly": "nested.delete_cascades",
    "RetryPruneBlindly": "retention.prune_keeps_the_latest",
    "RetryDeleteWorkflowBlindly": "retention.delete_workflow_clears_tombstones",
    "RetryLostLoadIsNotFound": "contract.resave_identical_is_noop",
    "RetryLostLatestIsNone": "ordering.latest_is_the_lineage_tip",
    "RetryLostWalkIsEmpty": "ancestry.walk_to_root",
    "RetryFenceReadBackOnHead": "fencing.retried_save_is_idempotent",
    "RetryFamilyOneAtATime": "nested.save_is_atomic",
    "RetryLostOverwriteIsAbsent": "ordering.raw_write_keeps_commit_order",
}


def lane(name: str) -> pytest.MarkDecorator:
    """Every style runs in process memory and temporary files (the SQLite index is the stdlib's
    ``sqlite3`` in a temporary directory, not the shipped SQLite backend): no server is needed."""
    return pytest.mark.memory


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 46


@pytest.mark.parametrize("name", [pytest.param(n, marks=lane(n)) for n in sorted(CAUGHT_BY)])
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


PASSING: dict[str, Callable[[], StorageTarget]] = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}


@pytest.mark.parametrize("name", [pytest.param(n, marks=lane(n)) for n in sorted(PASSING)])
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    passes_the_whole_kit(PASSING[name]())
