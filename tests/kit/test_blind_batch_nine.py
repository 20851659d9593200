"""The ninth blind batch (tests/kit/blind_batch_nine.py) keeps the kit honest: every broken
storage in it is caught by the clause named here, and the honest ones (an actor answering every
primitive from one task per handle, an event-sourced store with snapshots, a time to live over
the built-in in-memory backend, an author's own Redis key layout on fakeredis), with the one
judged not to break the contract, pass the whole kit. What the kit caught before this batch's
clauses is in tests/kit/blind_batch_nine.md."""

from __future__ import annotations

import pytest

from .blind_batch_nine import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

BATCH = {name: factory for name, factory, _ in ENTRIES}

EXPIRY = "expiry.checkpoints_expire_after_ttl"

CAUGHT_BY: dict[str, str] = {
    # an actor per handle, batching what it finds queued
    "ActorBatchCoalescesById": "concurrency.conflicting_saves",
    "ActorBatchSortedById": "ordering.concurrent_saves_commit_in_call_order",
    "ActorBatchErrorFailsAll": "nested.delete_nested_refused",
    "ActorAcksOnEnqueue": "contract.resave_conflict_raises",
    "ActorCloseDropsQueued": "lifecycle.closed_handle_refuses_every_operation",
    "ActorSharedByHandles": "tamper.unedited_store_verifies",
    "ActorDiesOnRefusal": "nested.delete_nested_refused",
    "ActorLatestCountsNested": "nested.hidden_from_listing",
    "ActorOverwriteRenumbers": "ordering.raw_write_keeps_commit_order",
    "ActorFenceCheckedInOwnMessage": "fencing.one_winner_per_head",
    # an event log with snapshots, a projection per handle
    "EventOverwriteNotReplayed": "tamper.metadata_edit",
    "EventReadsFromProjection": "ordering.commit_order_across_handles",
    "EventSnapshotWithoutTombstones": "scale.history_is_kept",
    "EventFenceWithoutCatchUp": "fencing.stale_save_after_fork_is_refused",
    "EventReplayedRemoveKeepsNested": "nested.delete_cascades",
    "EventReplayedDeleteKeepsTombstones": "retention.delete_workflow_clears_tombstones",
    "EventLaggingHandleSkipsToBase": "concurrency.many_writers_number_once",
    "EventSnapshotSharesTables": "scale.history_is_kept",
    "EventDecidesBeforeCatchUp": "concurrency.conflicting_saves",
    "EventSnapshotMissesLastEvent": "concurrency.many_writers_number_once",
    # a time to live over the built-in in-memory backend
    "TtlDeadlineRoundedDown": EXPIRY,
    "TtlResaveExtends": EXPIRY,
    "TtlLoadChecksOwnDeadline": EXPIRY,
    "TtlListingsShowExpired": EXPIRY,
    "TtlLatestSkipsSweep": EXPIRY,
    "TtlWorkflowNamesSkipSweep": EXPIRY,
    "TtlLostOnNewHandle": EXPIRY,
    "TtlWalkSkipsSweep": EXPIRY,
    "TtlDeadlinePerWorkflow": EXPIRY,
    "TtlInspectShowsExpired": EXPIRY,
    "TtlFencedSavesNeverExpire": EXPIRY,
    # an author's own Redis key layout
    "RedisFenceRaceUnavailable": "fencing.one_winner_per_head",
    "RedisFenceWatchesRecordOnly": "fencing.one_winner_per_head",
    "RedisPreviousStoredAsText": "identifiers.hostile_ids_round_trip",
    "RedisLatestReadsTwice": "model.concurrent_histories_linearize",
    "RedisNamesSetUnprefixed": "capabilities.list_workflows",
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
