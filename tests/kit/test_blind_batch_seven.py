"""The seventh blind batch (tests/kit/blind_batch_seven.py) keeps the kit honest: every broken
storage in it is caught by the clause named here, and the honest ones (a backend in the style of
an object store, a wrapper around the built-in in-memory storage and a six-method storage of
pydantic rows), with the two judged not to break the contract, pass the whole kit. What the kit
caught before this batch's clauses is in tests/kit/blind_batch_seven.md."""

from __future__ import annotations

import pytest

from .blind_batch_seven import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # a backend in the style of an object store
    "ObjQuoteKeepsSlash": "identifiers.hostile_names_round_trip",
    "ObjNamesQuotePlus": "model.sequential_histories",
    "ObjWorkflowNamesLeftQuoted": "writes.go_with_checkpoints",
    "ObjTombstoneIdsLeftQuoted": "model.sequential_histories",
    "ObjChildPositionUnpadded": "nested.list_nested_children",
    "ObjChildPrefixUnterminated": "model.sequential_histories",
    "ObjChildKeysUnderRoot": "nested.list_nested_children",
    "ObjRemoveLeavesChildKeys": "nested.list_nested_children",
    "ObjTombstonePrefixUnterminated": "retention.delete_workflow_clears_tombstones",
    "ObjDeleteWorkflowLeavesTombstoneIndex": "retention.delete_workflow_clears_tombstones",
    "ObjTombstoneOnRemove": "retention.delete_is_not_prune",
    "ObjWalkKeysUnquoted": "model.sequential_histories",
    "ObjCompactDocuments": "signature.preserved_exactly",
    "ObjNestedIdsMissingAsEmpty": "nested.list_nested_children",
    "ObjNestedBodiesDirectOnly": "nested.round_trip_deep",
    "ObjRecordsLeaveNestedOut": "nested.aliasing_stored_once",
    "ObjSequenceFromEtag": "capabilities.inspect",
    "ObjDescribeShowsSecret": "lifecycle.describe_shows_no_credentials",
    "ObjNestedCheckedAfterContainer": "nested.save_is_atomic",
    "ObjLeaseKeptOnError": "nested.save_is_atomic",
    "ObjRemoveOrderKeyFromCounter": "ordering.order_survives_delete",
    "ObjDocumentCachePerHandle": "nested.delete_cascades",
    "ObjListContinuesFromPageStart": "model.long_histories",
    "ObjOrderValuesLatin1": "identifiers.hostile_ids_round_trip",
    # wrappers around the built-in in-memory storage
    "BreakerCountsDomainErrors": "identifiers.invalid_ids_rejected",
    "RateLimitSleepsOnLoop": "concurrency.waits_yield_to_the_loop",
    "FenceRebasedOnStale": "fencing.one_winner_per_head",
    "ConflictWithSameTimestampIsRetry": "contract.resave_conflict_raises",
    "SigningKeyCachedFromProvider": "tamper.key_rotation",
    "KeylessHandleKeepsKey": "tamper.forged_insert",
    "WithKeyRekeysInPlace": "tamper.unedited_store_verifies",
    "LoadDropsAnchor": "tamper.tail_truncation",
    "HeadAnchorCachedBriefly": "tamper.tail_truncation",
    "TimeoutPerCall": "concurrency.cancelled_calls_leave_no_trace",
    # six-method storages of pydantic rows
    "SixRowTimestampAsDatetime": "ordering.unparsable_timestamp_is_data",
    "SixRowConfigStripsStrings": "identifiers.hostile_ids_round_trip",
    "SixConvertsToMafClass": "contract.load_returns_saved",
    "SixResaveComparesIndexFields": "contract.resave_conflict_raises",
    "SixResaveComparesBytes": "contract.resave_equal_content_encoded_differently_is_noop",
    "SixResumePointHeadFirst": "ordering.latest_among_rivals_by_timestamp",
    "SixRivalsByTimestampText": "ordering.rival_timestamps_compare_as_instants",
    "SixLoadsWithFreshCodec": "fidelity.user_types",
    "SixPreviousIdNotChecked": "identifiers.invalid_previous_id_rejected",
}

STILL_MISSED: dict[str, str] = {
    "ObjLatestWithoutLease": (
        "a read without the lease can mix moments only when it runs slower than a delete_workflow "
        "racing it; the kit's races never schedule it so (tests/kit/blind_batch_seven.md)"
    ),
}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted([*CAUGHT_BY, *STILL_MISSED]) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 45


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


@pytest.mark.parametrize("name", sorted(name for name, _, _ in NOT_VIOLATIONS + HONEST))
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    factory = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}[name]
    passes_the_whole_kit(factory())
