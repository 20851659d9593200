"""The fourth blind batch (tests/kit/blind_batch_four.py) keeps the kit honest: every broken
storage in it is caught by the clause named here, the storages judged not to break the contract
and the honest ones (the worked example grown, the same on a JSON-lines journal, a delegating
wrapper and a six-method storage) pass the whole kit. What the kit caught before this batch's
clauses is in tests/kit/blind_batch_four.md."""

from __future__ import annotations

import pytest

from .blind_batch_four import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # own backend: the worked example grown
    "ListIdsByPrefix": "identifiers.distinct_workflow_names",
    "SignatureByPrefix": "signature.filter_is_exact",
    "SequenceAsText": "ordering.latest_with_equal_timestamps",
    "SequenceFromCount": "ordering.save_after_delete_is_latest",
    "IdKeyTruncated": "identifiers.long_ids_distinct_and_whole",
    "ControlCharactersStripped": "writes.logs_never_shadow_workflows",
    "FenceOnSignatureHead": "model.sequential_histories",
    "LatestFollowsAnySignature": "ordering.latest_is_the_lineage_tip",
    "RivalsNewestFirst": "ordering.rival_timestamps_compare_as_instants",
    "RivalsFirstCommitted": "ordering.latest_reads_the_rivals_committed_last",
    "PruneNewestOnly": "retention.prune_keeps_the_latest",
    "TombstonesByPrefix": "retention.delete_workflow_clears_tombstones",
    "DeleteWorkflowClearsAllTombstones": "retention.delete_workflow_clears_tombstones",
    "WalkStaysInWorkflow": "ancestry.walks_across_workflow_names",
    "WorkflowNamesNeverForget": "capabilities.list_workflows",
    "RecordsSequenceFromPosition": "concurrency.many_writers_number_once",
    "OrdersInsertsButYields": "ordering.concurrent_saves_commit_in_call_order",
    "RemoveAlwaysTrue": "contract.delete_missing_returns_false",
    # own backend: a JSON-lines journal
    "FileReopenOrdersById": "durability.sequence_continues",  # its ids sort against commit order
    "FileSequencesFromRecords": "durability.counter_survives_reopen",
    "FileForgetsTombstones": "retention.tombstones_survive_reopen",
    # wrappers
    "LatestCacheKeptOnDelete": "contract.delete_latest_promotes_previous",
    "LoadCachePerHandle": "nested.delete_cascades",
    "LoadCacheAliases": "isolation.loaded_is_caller_owned",
    "IdsCacheKeptOnPrune": "retention.prune_edge_counts",
    "MetricsStampsMetadata": "isolation.save_snapshots",
    "RetrySwallowsConflict": "contract.resave_conflict_raises",
    "RetryWrapsErrors": "contract.load_missing_raises",
    "ArchiveReadThrough": "contract.delete_removes",
    "EmptySignatureIsNoFilter": "signature.filter_is_exact",
    "LoadChecksSignatureItself": "signature.load_rejects_mismatch",
    "NestedDeleteReturnsFalse": "nested.delete_nested_refused",
    "NewHandleKeepsClosed": "lifecycle.closing_one_handle_leaves_others_working",
    "FencedByGetLatest": "fencing.fence_is_the_head_not_a_rival",
    "TimestampsToUtc": "model.sequential_histories",
    "SizeMetricsViaAsdict": "fidelity.nested_checkpoints",
    "WriteBehindOnSecondHandle": "ordering.commit_order_across_handles",
    "CancelledSaveCachedOverSQLite": "concurrency.cancelled_calls_leave_no_trace",
    # six-method storages
    "SixLatestByNewestTimestamp": "ordering.latest_ignores_older_timestamp",
    "SixLatestIsLastListed": "ordering.latest_is_the_lineage_tip",
    "SixListedByTimestamp": "ordering.list_is_commit_order",
    "SixFirstPageOnly": "model.long_histories",
    "SixEqualIsSame": "contract.resave_equal_values_of_other_types_conflicts",
    "SixShortIdInError": "contract.load_missing_raises",
    "SixDeleteReturnsNone": "contract.delete_missing_returns_false",
    "SixSaveReturnsCheckpoint": "contract.save_returns_id",
    "SixLockLeftHeldOnCancel": "contract.ids_are_global",
    "SixDeleteByPrefix": "identifiers.distinct_ids",
    "SixLatestSkipsUnparsable": "ordering.unparsable_timestamp_is_data",
    "TenantPrefix": "identifiers.long_workflow_names_distinct",
}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) >= 40


@pytest.mark.parametrize("name", sorted(BATCH))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


@pytest.mark.parametrize("name", sorted(name for name, _, _ in NOT_VIOLATIONS + HONEST))
def test_the_honest_storages_and_those_judged_correct_pass_the_whole_kit(name: str) -> None:
    factory = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}[name]
    passes_the_whole_kit(factory())
