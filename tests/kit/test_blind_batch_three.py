"""The third blind batch (tests/kit/blind_batch_three.py) keeps the kit honest: every broken storage
in it is caught by the clause named here, and its honest storages (a list searched linearly, the
same behind an LRU cache, the same with bodies kept compressed) pass the whole kit."""

from __future__ import annotations

import pytest

from conformance import StorageTarget

from .blind_batch_three import BATCH, HONEST
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

CAUGHT_BY: dict[str, str] = {
    "sequence_sorted_as_text": "ordering.latest_with_equal_timestamps",
    "list_ids_case_folded": "identifiers.distinct_workflow_names",
    "workflow_names_nfc": "model.handles_and_rebuilds",
    "ids_stripped": "identifiers.distinct_ids",
    "latest_cache_survives_prune": "retention.prune_edge_counts",
    "signature_index_outlives_delete": "model.handles_and_rebuilds",
    "root_rivals_over_filtered_rows": "signature.latest_root_rivals_across_signatures",
    "walk_nested_as_roots": "nested.ancestry_through_nested",
    "prune_keeps_one_fewer": "retention.prune_keeps_newest",
    "body_cut_at_64kib": "fidelity.large_payload",
    "list_bodies_reuse_one_buffer": "contract.list_returns_workflow_checkpoints",
    "close_releases_shared_store": "lifecycle.closed_handle_refuses_every_operation",
    "nested_delete_raises_value_error": "nested.delete_nested_refused",
    "counter_race_across_await": "concurrency.many_writers_number_once",
    "fence_on_handle_memo": "fencing.stale_save_after_fork_is_refused",
    "records_after_case_folded_order": "capabilities.inspect",
    "nested_bodies_one_level": "nested.round_trip_deep",
    "list_bodies_top_level_only": "nested.hidden_from_listing",
    "load_matches_nfc": "identifiers.distinct_ids",
    "overwrite_reinserts": "ordering.raw_write_keeps_commit_order",
    "info_sequence_is_position": "ordering.sequence_survives_emptying_a_workflow",
    "prune_all_is_delete_workflow": "retention.tombstones_listed",
    "walk_without_tombstones": "retention.pruned_ancestor_leaves_tombstone",
    "latest_among_nested": "nested.hidden_from_listing",
    "sleeps_in_insert": "concurrency.waits_yield_to_the_loop",
    "insert_awaits_between_records": "model.concurrent_histories_linearize",
    "new_handle_fresh_store": "concurrency.shared_handles_interleave",
    "refuses_control_characters": "writes.round_trip",
    "remove_one_level": "nested.delete_cascades",
    "workflow_names_per_record": "model.sequential_histories",
    "put_writes_drops_tail_chunk": "writes.large_call_whole",
    "timestamps_to_seconds": "fidelity.maf_fields",
    "latest_falls_back_on_corruption": "corruption.get_latest_raises",
    "load_drops_signature_keyword": "signature.load_rejects_mismatch",
    "new_handle_is_self": "lifecycle.closing_one_handle_leaves_others_working",
    "list_writes_sorted": "writes.round_trip",
    # Many saves listed: a set's order matches commit order by chance only for a handful.
    "list_ids_deduplicated_by_set": "concurrency.many_saves_one_workflow",
}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) >= 24


@pytest.mark.parametrize("name", sorted(BATCH))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, StorageTarget(name, BATCH[name]), CAUGHT_BY[name])


@pytest.mark.parametrize("name", sorted(HONEST))
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    passes_the_whole_kit(StorageTarget(name, HONEST[name]))
