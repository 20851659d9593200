"""The sixth blind batch (tests/kit/blind_batch_six.py) keeps the kit honest: every broken
storage in it is caught by the clause named here, and the honest ones (a backend written from
scratch on the standard library's sqlite3, a wrapper around the built-in SQLite storage and a
six-method storage over it) pass the whole kit. What the kit caught before this batch's clauses is
in tests/kit/blind_batch_six.md."""

from __future__ import annotations

import pytest

from .blind_batch_six import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.sqlite

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # a backend from scratch on sqlite3
    "SqlRemoveDirectChildrenOnly": "nested.delete_cascades",
    "SqlNestedNumberedInContainerWorkflow": "nested.hidden_from_listing",
    "SqlPruneTombstonesTopLevelOnly": "retention.walk_reaches_pruned_nested",
    "SqlNestedTombstoneUnderOwnWorkflow": "model.sequential_histories",
    "SqlPruneCountsNested": "retention.prune_removes_nested",
    "SqlNestedDeletionNamesRoot": "nested.delete_nested_refused",
    "SqlInfoSizeOfHex": "capabilities.inspect",
    "SqlRecordsAfterInclusive": "capabilities.inspect",
    "SqlRecordsAfterBySequence": "capabilities.inspect",
    "SqlWorkflowNamesCountNested": "model.sequential_histories",
    "SqlFenceCheckedBeforeTransaction": "fencing.one_winner_per_head",
    "SqlInsertRowByRow": "nested.save_is_atomic",
    "SqlSequenceIsRowid": "ordering.sequence_survives_emptying_a_workflow",
    "SqlRemoveLeftInTransaction": "durability.across_processes",
    "SqlTombstonesAllEqualsNull": "retention.tombstones_listed",
    "SqlRecordsAllEqualsNull": "capabilities.inspect",
    "SqlRootRivalsByPrevious": "ordering.latest_among_root_rivals_by_timestamp",
    "SqlRivalsAnySignature": "ordering.latest_among_rivals_by_timestamp",
    "SqlFairLockBoundToLoop": "lifecycle.works_across_event_loops",
    "SqlExecutorNotShutDown": "lifecycle.no_thread_left_per_handle",
    "SqlWalkBodiesWithoutNested": "ancestry.walks_through_nested",
    "SqlNestedIdsById": "nested.list_nested_children",
    "SqlCounterPerSignature": "model.sequential_histories",
    "SqlFenceAfterNestedCheck": "nested.save_is_atomic",
    "SqlWalkTopLevelOnly": "ancestry.walks_through_nested",
    "SqlDeleteWorkflowDropsCounter": "retention.save_after_delete_workflow",
    "SqlDeleteWorkflowByName": "retention.delete_workflow_removes_all",
    "SqlNestedListedAfterTopLevel": "nested.hidden_from_listing",
    "SqlNewHandleSharesConnection": "lifecycle.closing_one_handle_leaves_others_working",
    "SqlLoadWithoutEntry": "corruption.body_has_another_previous",
    "SqlInsertOrIgnore": "contract.resave_conflict_raises",
    # wrappers around the built-in SQLite storage
    "LatestCachedPerProcess": "durability.across_processes",
    "ConflictsConvertedToAppError": "fencing.one_winner_per_head",
    "EscapedSlashesInNames": "identifiers.hostile_names_round_trip",
    "MetricsSizeByPickle": "fidelity.user_types",
    "KeyProviderFlattened": "tamper.key_rotation",
    "NewHandleFromSettings": "tamper.unedited_store_verifies",
    "RetryTreatsCancelAsTransient": "concurrency.cancelled_calls_leave_no_trace",
    "DeleteWorkflowOneByOne": "retention.delete_workflow_clears_tombstones",
    "SignaturesLowercased": "signature.preserved_exactly",
    "SavesBatchedByTimestamp": "ordering.concurrent_saves_commit_in_call_order",
    "LatestIgnoresUnknownOptions": "tamper.tail_truncation",
    "LatestIdFromGetLatest": "fencing.fence_is_the_head_not_a_rival",
    "PutWritesJsonValues": "writes.round_trip",
    "InfoCachedForever": "capabilities.inspect",
    # six-method storages over the built-in SQLite storage
    "SixYieldsBeforeSnapshot": "isolation.save_snapshots",
    "SixListLoadsEach": "concurrency.listings_race_deletes",
    "SixIdsMustBeUuids": "identifiers.hostile_ids_round_trip",
    "SixStoresOwnClass": "contract.maf_checkpoint_class_round_trips",
    "SixConflictSavedUnderNewId": "contract.resave_conflict_raises",
    "SixLatestByIteration": "ordering.latest_is_the_lineage_tip",
    "SixListFollowsChain": "contract.list_returns_workflow_checkpoints",
    "SixDeleteSwallowsErrors": "identifiers.invalid_ids_rejected",
}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) >= 45


@pytest.mark.parametrize("name", sorted(BATCH))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


@pytest.mark.parametrize("name", sorted(name for name, _, _ in NOT_VIOLATIONS + HONEST))
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    factory = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}[name]
    passes_the_whole_kit(factory())
