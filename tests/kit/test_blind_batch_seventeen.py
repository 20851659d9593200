"""The seventeenth blind batch (tests/kit/blind_batch_seventeen.py) keeps the kit honest: every
broken storage in it but the one listed in ``STILL_MISSED`` is caught by the clause named here,
and the honest ones (a Bitcask-like append-only file, a store served by a child process, the
author's own schema over aiosqlite, an adapter over LangGraph's AsyncSqliteSaver), with any
judged not to break the contract, pass the whole kit. What the kit caught before this batch's
clauses is in tests/kit/blind_batch_seventeen.md."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance import StorageTarget

from .blind_batch_seventeen import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # a Bitcask-like append-only file
    "BitcaskFirstEntryWins": "durability.raw_writes_survive_reopen",
    "BitcaskDeletesNotReplayed": "durability.deletes_persist",
    "BitcaskCounterFromLiveRecords": "durability.counter_survives_reopen",
    "BitcaskMergeDropsTombstones": "retention.delete_workflow_clears_tombstones",
    "BitcaskMergeDropsCounters": "durability.counter_survives_reopen",
    "BitcaskKeydirOnlyAtOpen": "ordering.commit_order_across_handles",
    # a store served by a child process
    "SidecarCancelLeavesReply": "concurrency.cancelled_calls_leave_no_trace",
    "SidecarLockBeforeReply": "concurrency.reads_see_whole_checkpoints",
    "SidecarErrorsAsNone": "nested.delete_nested_refused",
    "SidecarOwnChild": "ancestry.walk_from_other_handle",
    "SidecarRawBodyBytearray": "capabilities.raw_access",
    "SidecarIdsAsTuples": "contract.list_ids_match_list",
    # the author's own schema over aiosqlite
    "AioSqliteDeferredWrites": "concurrency.shared_handles_interleave",
    "AioSqliteFenceReadApart": "fencing.one_winner_per_head",
    "AioSqliteFamilyAutocommit": "nested.save_is_atomic",
    "AioSqliteSequenceFromRowid": "ordering.sequence_survives_emptying_a_workflow",
    "AioSqliteSequenceFromCount": "ordering.save_after_delete_is_latest",
    "AioSqliteCascadeAssumed": "nested.delete_cascades",
    "AioSqlitePruneCountsRows": "retention.prune_removes_nested",
    # an adapter over LangGraph's AsyncSqliteSaver
    "SaverSequenceFromSaverOrder": "ordering.list_is_commit_order",
    "SaverListingLimited": "scale.history_is_kept",
    "SaverDeleteThread": "retention.save_after_delete_workflow",
    "SaverNestedInContainerThread": "nested.hidden_from_listing",
    "SaverDeletedMarkerBlocksResave": "retention.save_after_delete_workflow",
    "SaverLatestFromGetTuple": "ordering.latest_is_the_lineage_tip",
}


def lane(name: str) -> pytest.MarkDecorator:
    """Every style runs in process memory, temporary files and a child process of the test's own
    (the Bitcask file, the aiosqlite and AsyncSqliteSaver SQLite files in temporary directories,
    the sidecar a 'forkserver' child): no server is needed."""
    return pytest.mark.memory


STILL_MISSED: dict[str, str] = {
    "BitcaskMergeOutsideLock": (
        "the merge's swap outside the lock loses another handle's append only when that append lands "
        "between the unlock and os.replace, on another worker thread: retention.tombstones_listed caught "
        "it in 8 runs of 30 alone and the whole kit in none of 5 (tests/kit/blind_batch_seventeen.md)"
    ),
}
"""Broken storages no clause catches every time: listed, not counted as caught."""


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted([*CAUGHT_BY, *STILL_MISSED]) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 27


@pytest.mark.parametrize("name", [pytest.param(n, marks=lane(n)) for n in sorted(CAUGHT_BY)])
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


PASSING: dict[str, Callable[[], StorageTarget]] = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}


@pytest.mark.parametrize("name", [pytest.param(n, marks=lane(n)) for n in sorted(PASSING)])
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    passes_the_whole_kit(PASSING[name]())
