"""The twelfth blind batch (tests/kit/blind_batch_twelve.py) keeps the kit honest: every broken
storage in it is caught by the clause named here, and the honest ones (an adapter over
LangGraph's own InMemorySaver, a document per workflow with optimistic concurrency, an etcd-like
revisioned key-value store, a mirrored pair of in-memory stores with failover), with any judged
not to break the contract, pass the whole kit. What the kit caught before this batch's clauses is
in tests/kit/blind_batch_twelve.md."""

from __future__ import annotations

import pytest

from .blind_batch_twelve import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # an adapter over LangGraph's InMemorySaver
    "SaverListingOrder": "ordering.list_is_commit_order",
    "SaverDeleteThreadDropsCounter": "retention.save_after_delete_workflow",
    "SaverNestedInRootNamespace": "nested.hidden_from_listing",
    "SaverLatestFromGetTuple": "ordering.latest_is_the_lineage_tip",
    # a document per workflow
    "DocVersionNotChecked": "concurrency.many_saves_one_workflow",
    "DocClaimsNotChecked": "contract.ids_are_global",
    "DocExistingLookedUpInOwnDocument": "contract.ids_are_global",
    "DocTombstonesNotCarried": "retention.pruned_ancestor_leaves_tombstone",
    "DocSizeCapDropsOldest": "scale.history_is_kept",
    "DocSequenceFromLength": "ordering.save_after_delete_is_latest",
    "DocRecordsInKeyOrder": "contract.list_ids_match_list",
    "DocFenceOnStaleRead": "fencing.one_winner_per_head",
    "DocNestedNotInDirectory": "nested.loadable_by_own_id",
    "DocPruneCountsNested": "retention.prune_removes_nested",
    "DocDeleteKeepsDirectory": "retention.save_after_delete_workflow",
    # a revisioned key-value store
    "KvCompareOnRecordKeyOnly": "concurrency.many_saves_one_workflow",
    "KvRawNamesInKeys": "identifiers.hostile_names_round_trip",
    "KvSequenceUnpadded": "ordering.latest_with_equal_timestamps",
    "KvFenceComparesHeadKey": "fencing.one_winner_per_head",
    "KvRemoveKeepsIndexKey": "contract.delete_removes",
    "KvTombstoneRangeWithoutSeparator": "retention.delete_workflow_clears_tombstones",
    "KvWatchedLatestCache": "ordering.commit_order_across_handles",
    "KvRangeOnePage": "concurrency.many_saves_one_workflow",
    "KvOverwriteRenumbers": "ordering.raw_write_keeps_commit_order",
    # a mirrored pair
    "MirrorPruneOnPrimaryOnly": "retention.prune_edge_counts",
    "MirrorRemoveOnPrimaryOnly": "ordering.order_survives_delete",
    "MirrorOverwriteOnPrimaryOnly": "corruption.body_names_another_workflow",
    "MirrorFencedLoserReachesSecondary": "fencing.one_winner_per_head",
    "MirrorSecondaryWrittenLater": "contract.delete_removes",
    "MirrorNestedDroppedOnSecondary": "nested.loadable_by_own_id",
    "MirrorPruneReplayedAsRemoves": "retention.pruned_ancestor_leaves_tombstone",
    "MirrorDeleteWorkflowReplayedAsRemoves": "retention.delete_workflow_clears_tombstones",
}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 30


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


@pytest.mark.parametrize("name", [name for name, _, _ in sorted(NOT_VIOLATIONS + HONEST)])
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    factory = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}[name]
    passes_the_whole_kit(factory())
