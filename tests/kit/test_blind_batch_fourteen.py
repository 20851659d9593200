"""The fourteenth blind batch (tests/kit/blind_batch_fourteen.py) keeps the kit honest: every
broken storage in it is caught by the clause named here, and the honest ones (a synchronous store
run through ``asyncio.to_thread``, a group commit, an author's wrapper around the built-in Redis
backend, a MAF user's six-method storage), with any judged not to break the contract, pass the
whole kit. What the kit caught before this batch's clauses is in
tests/kit/blind_batch_fourteen.md."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance import StorageTarget

from .blind_batch_fourteen import ENTRIES, HONEST, NOT_VIOLATIONS, REDIS_NAMES
from .support import caught_by_alone, passes_the_whole_kit

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # a synchronous store through asyncio.to_thread
    "ThreadFenceCheckThenWrite": "fencing.one_winner_per_head",
    "ThreadSequenceReadThenWrite": "concurrency.many_writers_number_once",
    "ThreadExistsCheckThenWrite": "concurrency.conflicting_saves",
    "ThreadBodiesReadPerId": "concurrency.listings_race_deletes",
    "ThreadCancelUndoesInsert": "concurrency.cancelled_retry_keeps_stored",
    "ThreadCancelAwaitsThread": "concurrency.cancelled_calls_leave_no_trace",
    "ThreadOwnPool": "lifecycle.no_thread_left_per_handle",
    "ThreadCloseSkipsInFlight": "lifecycle.closed_handle_refuses_every_operation",
    # a group commit
    "GroupBatchNewestFirst": "ordering.concurrent_saves_commit_in_call_order",
    "GroupFailureFailsBatch": "nested.delete_nested_refused",
    "GroupSnapshotBeforeBatch": "contract.load_returns_saved",
    "GroupFenceAtEnqueue": "fencing.one_winner_per_head",
    "GroupCloseCancelsFlusher": "lifecycle.closed_handle_refuses_every_operation",
    "GroupAnswersCancelledCallers": "concurrency.cancelled_calls_leave_no_trace",
    "GroupSequenceAtEnqueue": "concurrency.many_writers_number_once",
    "GroupBatchSharesNumber": "ordering.concurrent_saves_commit_in_call_order",
    # an author's wrapper around the built-in Redis backend
    "RedisLoadCache": "nested.delete_cascades",
    "RedisRetryPastCancellation": "concurrency.cancelled_calls_leave_no_trace",
    "RedisMetricsBlockingPush": "concurrency.no_blocking_socket_on_the_loop",
    "RedisMetricsRebuildsLatest": "ordering.latest_among_rivals_by_timestamp",
    "RedisWriteBehind": "ordering.commit_order_across_handles",
    "RedisCloseDeletesKeys": "durability.survives_reopen",
    "RedisIdsThroughSet": "ordering.list_is_commit_order",
    "RedisPrefixPerHandle": "ordering.commit_order_across_handles",
    # a MAF user's six-method storage
    "RowLatestByTimestamp": "ordering.latest_ignores_older_timestamp",
    "RowLatestByInsertion": "ordering.latest_is_the_lineage_tip",
    "RowLatestAsMaf126": "ordering.latest_ignores_older_timestamp",
    "RowLatestWithoutRivals": "ordering.latest_among_rivals_by_timestamp",
    "RowNamesFolded": "identifiers.distinct_workflow_names",
    "RowListedByTimestamp": "ordering.list_is_commit_order",
    "RowCounterReadBeforeWrite": "concurrency.conflicting_saves",
    "RowLoadKeepsDecoded": "isolation.loaded_is_caller_owned",
    "RowEncodesAfterAwait": "isolation.save_snapshots",
    "RowDeleteAlwaysTrue": "contract.delete_missing_returns_false",
}


def lane(name: str) -> pytest.MarkDecorator:
    """The Redis wrappers run on the machine's Redis; the other styles in process memory."""
    return pytest.mark.redis if name in REDIS_NAMES else pytest.mark.memory


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 34


@pytest.mark.parametrize("name", [pytest.param(n, marks=lane(n)) for n in sorted(CAUGHT_BY)])
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


PASSING: dict[str, Callable[[], StorageTarget]] = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}


@pytest.mark.parametrize("name", [pytest.param(n, marks=lane(n)) for n in sorted(PASSING)])
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    passes_the_whole_kit(PASSING[name]())
