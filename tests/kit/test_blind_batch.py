"""The blind batch (tests/kit/blind_batch.py) keeps the kit honest: every broken storage in it is
caught by the clause named here, and the honest storages its defects were written over pass the
whole kit. A storage the kit stops catching fails here with the clause that let it through."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance import StorageTarget

from .blind_batch import BATCH, HEALTHY
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

CAUGHT_BY: dict[str, str] = {
    "DictLikeWorkflow": "identifiers.distinct_workflow_names",
    "DictIdsPageLimit": "model.long_histories",
    "DictRivalsNewestFirst": "ordering.rival_timestamps_compare_as_instants",
    "DictRivalsFirst64": "ordering.latest_reads_the_rivals_committed_last",
    "DictRivalsIncludeContinued": "ancestry.forks_stay_walkable",
    "DictSuccessorAnySignature": "ordering.latest_is_the_lineage_tip",
    "DictSuccessorFirstCommitted": "ordering.latest_is_the_lineage_tip",
    "DictSuccessorsStoreWide": "ordering.workflows_are_independent",
    "DictSequenceFromCount": "ordering.save_after_delete_is_latest",
    "DictWalkOneShort": "ancestry.depth_limit",
    "DictNamesFromCounters": "capabilities.list_workflows",
    "DictOverwriteCreates": "capabilities.raw_access",
    "DictCheckThenInsert": "concurrency.conflicting_saves",
    "MemFenceBySignature": "model.sequential_histories",
    "MemFenceStoredIdIsLatest": "model.handles_and_rebuilds",
    "MemFenceCheckThenWrite": "fencing.one_winner_per_head",
    "MemPruneDropsRivals": "model.handles_and_rebuilds",
    "MemPruneTombstonesTopOnly": "retention.walk_reaches_pruned_nested",
    "MemPruneCountsNested": "retention.prune_removes_nested",
    "MemPruneLike": "retention.prune_spares_others",
    "MemTombstoneUnderOwnWorkflow": "model.sequential_histories",
    "MemTombstoneBlocksResave": "model.sequential_histories",
    "MemRecordsTopLevelOnly": "nested.aliasing_stored_once",
    "MemNestedIdsReversed": "nested.list_nested_children",
    "MemNestedBodiesOneLevel": "fidelity.nested_checkpoints",
    "MemNestedListedLast": "nested.hidden_from_listing",
    "MemSignedIdsTopOnly": "signature.nested_keep_own",
    "MemNamesWithNestedOnly": "model.sequential_histories",
    "MemPageFromInclusive": "capabilities.inspect",
    "MemPageFiltersLogs": "capabilities.inspect",
    "CacheIdsBySignatureless": "signature.list_by_signature",
    "CacheLatestBySignatureless": "signature.latest_by_signature",
    "CacheLoadsKeptOverPrune": "retention.prune_keeps_records_embedded_elsewhere",
    "CacheLatestKeptOverPrune": "ordering.commit_order_across_handles",
    "ResaveSkippedWhenEqual": "model.sequential_histories",
    "ResaveConflictWhenUnequal": "model.sequential_histories",
    "ResaveSkippedByJsonFingerprint": "model.sequential_histories",
    "NotFoundWithoutId": "contract.load_missing_raises",
    "SignatureFilterTruthy": "signature.filter_is_exact",
    "RetryTakesConflictAsLanded": "contract.resave_conflict_raises",
    "DeleteNestedCountedAsMiss": "nested.delete_nested_refused",
    "NoHandleAfterClose": "lifecycle.closing_one_handle_leaves_others_working",
    "WritesCachedByCheckpoint": "writes.round_trip",
    "IdsPagedOffByOne": "scale.history_is_kept",
    "ExpectedSignatureCaseless": "signature.load_rejects_mismatch",
    "JsonBodyAsText": "durability.survives_reopen",
    "JsonRowsById": "durability.sequence_continues",
    "JsonDeleteNotWritten": "durability.deletes_persist",
    "SixTimestampsAsText": "ordering.rival_timestamps_compare_as_instants",
    "SixUnparsedRanksFirst": "ordering.rival_timestamps_compare_as_instants",
    "SixResaveByEquality": "model.concurrent_histories_linearize",
    "SixListDropsEmptyPrevious": "model.sequential_histories",
}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) >= 30


@pytest.mark.parametrize("name", sorted(BATCH))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_the_honest_bases_pass_the_whole_kit(name: str) -> None:
    make: Callable[[], StorageTarget] = HEALTHY[name]
    passes_the_whole_kit(make())
