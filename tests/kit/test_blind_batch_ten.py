"""The tenth blind batch (tests/kit/blind_batch_ten.py) keeps the kit honest: every broken
storage in it is caught by the clause named here, and the honest ones (a sharded router, a
client of a JSON-lines server that loses answers, a copy-on-write store published by
compare-and-swap, a tiered store with a background flusher), with the one judged not to break the
contract, pass the whole kit. What the kit caught before this batch's clauses is in
tests/kit/blind_batch_ten.md."""

from __future__ import annotations

import pytest

from .blind_batch_ten import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # a sharded router
    "ShardFoldedNames": "identifiers.distinct_workflow_names",
    "ShardSaltPerHandle": "concurrency.many_saves_one_workflow",
    "ShardCountersPerShard": "model.sequential_histories",
    "ShardMergeConcatenates": "nested.hidden_from_listing",
    "ShardDirectoryOutlivesDeletes": "retention.save_after_delete_workflow",
    "ShardWalkStaysOnShard": "ancestry.walks_across_workflow_names",
    "ShardNamesFromCounters": "capabilities.list_workflows",
    "ShardCheckThenWrite": "concurrency.conflicting_saves",
    "ShardRecordsFromHome": "capabilities.inspect",
    "ShardChildrenAtRecordHome": "nested.list_nested_children",
    # a client of a JSON-lines server
    "ClientResendsUnderNewId": "identifiers.hostile_ids_round_trip",
    "ClientAnswersInSendOrder": "concurrency.reads_see_whole_checkpoints",
    "ClientConnectionKeptAcrossLoops": "lifecycle.works_across_event_loops",
    "ClientOneRequestAtATime": "concurrency.cancelled_calls_leave_no_trace",
    "ClientIdsRestartPerConnection": "model.long_histories",
    "ClientServerKeysAnswersByRequestId": "concurrency.shared_handles_interleave",
    "ClientServerSplitsLines": "identifiers.hostile_ids_round_trip",
    "ClientRetriesPastCancellation": "concurrency.cancelled_calls_leave_no_trace",
    "ClientLostReadsAnswerEmpty": "model.long_histories",
    # a copy-on-write store
    "CowReadsOwnLastRoot": "ordering.commit_order_across_handles",
    "CowBlindPublish": "concurrency.many_saves_one_workflow",
    "CowRetryKeepsFirstAnswer": "concurrency.conflicting_saves",
    "CowLatestAcrossTwoRoots": "model.concurrent_histories_linearize",
    "CowSharesInnerLists": "retention.tombstones_listed",
    "CowPruneReplacesTombstones": "retention.tombstones_listed",
    "CowCountersPerHandle": "concurrency.many_saves_one_workflow",
    "CowFenceOnFirstRoot": "fencing.one_winner_per_head",
    "CowRawWriteInPlace": "capabilities.raw_access",
    "CowNewHandleCopiesCell": "ordering.commit_order_across_handles",
    # a tiered store with a background flusher
    "TierDemotesInTwoSteps": "concurrency.reads_see_whole_checkpoints",
    "TierFlushSortsById": "ordering.concurrent_saves_commit_in_call_order",
    "TierColdDropsSignature": "concurrency.many_saves_one_workflow",
    "TierPromotesOnLoad": "model.concurrent_histories_linearize",
    "TierLatestFromHot": "model.concurrent_histories_linearize",
    "TierPruneHotOnly": "retention.prune_keeps_newest",
    "TierCloseDropsBuffer": "lifecycle.closed_handle_refuses_every_operation",
    "TierOverwriteHotOnly": "ordering.raw_write_keeps_commit_order",
    "TierColdPrunedUnmarked": "retention.tombstones_listed",
    "TierRecordsHotOnly": "tamper.unedited_store_verifies",
}

STILL_MISSED: dict[str, str] = {}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted([*CAUGHT_BY, *STILL_MISSED]) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 37


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


@pytest.mark.parametrize("name", sorted(name for name, _, _ in NOT_VIOLATIONS + HONEST))
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    factory = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}[name]
    passes_the_whole_kit(factory())
