"""The second blind batch (tests/kit/blind_batch_two.py) keeps the kit honest: every broken storage
in it is caught by the clause named here, the storages judged correct under the docs pass that
clause, and the honest storages the defects were written over pass the whole kit."""

from __future__ import annotations

import pytest

from conformance import StorageTarget

from .blind_batch_two import BATCH, EQUIVALENT, HONEST
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

CAUGHT_BY: dict[str, str] = {
    "keeps_empty_workflow_names": "capabilities.list_workflows",
    "prune_keeps_one_more": "retention.prune_keeps_newest",
    "prune_tombstones_top_only": "retention.walk_reaches_pruned_nested",
    "delete_workflow_prefix_tombstones": "retention.delete_workflow_clears_tombstones",
    "forgets_empty_workflow": "ordering.sequence_survives_emptying_a_workflow",
    "nested_ids_newest_first": "nested.list_nested_children",
    "rivals_not_filtered": "ancestry.forks_stay_walkable",
    "fence_against_newest_commit": "fencing.fence_follows_the_lineage",
    "fence_none_is_any": "fencing.expected_none_means_no_checkpoint_yet",
    "nested_conflict_after_top": "nested.save_is_atomic",
    "records_top_level_only": "nested.aliasing_stored_once",
    "tombstones_by_prefix": "retention.delete_workflow_clears_tombstones",
    "nested_listed_last": "nested.hidden_from_listing",
    "empty_signature_is_no_filter": "signature.filter_is_exact",
    "walk_without_nested_bodies": "ancestry.walks_through_nested",
    "chunked_bodies": "fidelity.large_payload",
    "journalled_dict": "concurrency.conflicting_saves",
    "case_insensitive_dict": "identifiers.distinct_workflow_names",
    "latest_cache": "contract.delete_latest_promotes_previous",
    "shallow_copy_cache": "isolation.loaded_is_caller_owned",
    "metrics_stamps_metadata": "isolation.save_snapshots",
    "retry_treats_conflict_as_done": "contract.resave_conflict_raises",
    "json_state_transform": "fidelity.collections",
    "compress_only_in_load": "isolation.listed_are_caller_owned",
    "sharded_by_workflow": "contract.ids_are_global",
    "write_behind": "isolation.save_snapshots",
    "replica_misses_prune": "retention.prune_keeps_newest",
    "timestamp_to_utc": "model.sequential_histories",
    "writes_cache_survives_delete_workflow": "writes.go_with_checkpoints",
    "load_errors_are_not_found": "corruption.truncated_body",
    "close_only_flushes_metrics": "lifecycle.closed_handle_refuses_every_operation",
    "delete_always_true": "contract.delete_missing_returns_false",
    "six_sorted_ids": "ordering.list_is_commit_order",
    "six_delete_cascades": "model.sequential_histories",
    "six_upsert": "contract.resave_conflict_raises",
    "six_key_prefix": "identifiers.distinct_workflow_names",
    "six_nfc_names": "identifiers.distinct_workflow_names",
    "six_latest_by_timestamp_text": "ordering.latest_ignores_older_timestamp",
    "six_latest_is_last_listed": "ordering.latest_is_the_lineage_tip",
    "six_keeps_callers_object": "isolation.save_snapshots",
    "six_own_index_read_modify_write": "model.concurrent_histories_linearize",
}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) >= 30


@pytest.mark.parametrize("name", sorted(BATCH))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, StorageTarget(name, BATCH[name]), CAUGHT_BY[name])


@pytest.mark.parametrize("name", sorted(HONEST) + sorted(EQUIVALENT))
def test_the_honest_bases_pass_the_whole_kit(name: str) -> None:
    """The bases, and the storages written as defects that the docs allow."""
    make = HONEST[name] if name in HONEST else EQUIVALENT[name][0]
    passes_the_whole_kit(StorageTarget(name, make))
