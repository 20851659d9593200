"""The fifth blind batch (tests/kit/blind_batch_five.py) keeps the kit honest: every broken
storage in it is caught by the clause named here, and the storages judged not to break the
contract and the honest ones (the worked example, the same on a JSON-lines journal shared by
processes, a delegating wrapper and a six-method storage) pass the whole kit. What the kit caught
before this batch's clauses is in tests/kit/blind_batch_five.md."""

from __future__ import annotations

import pytest

from .blind_batch_five import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # own backend: the worked example
    "LatestWithoutRivals": "ordering.latest_among_rivals_by_timestamp",
    "ListIdsNewestFirst": "ordering.list_is_commit_order",
    "ListBodiesPageSkipsOne": "model.long_histories",
    "LoadIgnoresCase": "identifiers.distinct_ids",
    "WorkflowNamesNfc": "identifiers.distinct_workflow_names",
    "WorkflowNamesCaseFolded": "identifiers.distinct_workflow_names",
    "KeyedByWorkflowAndId": "contract.ids_are_global",
    "FenceNoneIsNoFence": "fencing.expected_none_means_no_checkpoint_yet",
    "FenceOnNewestCommit": "fencing.fence_follows_the_lineage",
    "LatestFiltersAfterHead": "signature.latest_by_signature",
    "ListBodiesIgnoresSignature": "signature.list_by_signature",
    "InsertUpserts": "contract.resave_conflict_raises",
    # own durable backend: a journal shared by processes
    "DirDeletesNotJournaled": "durability.deletes_persist",
    "DirBodyAsText": "durability.survives_reopen",
    "DirRepairNotJournaled": "durability.raw_writes_survive_reopen",
    "DirJournalWrittenOnClose": "durability.across_processes",
    "DirReadsJournalOnOpenOnly": "durability.across_processes",
    "DirFileWorkOnLoopThread": "concurrency.no_file_opened_on_the_loop",
    # wrappers
    "IdsCacheIgnoresSignature": "signature.filter_is_exact",
    "LoadCacheSkipsSignatureCheck": "model.sequential_histories",
    "CloseTwiceRaises": "lifecycle.aclose_is_idempotent",
    "CloseLeavesInnerOpen": "lifecycle.closed_handle_refuses_every_operation",
    "NewHandleIsFresh": "ordering.commit_order_across_handles",
    "ClosedRaisesRuntimeError": "lifecycle.closed_handle_refuses_every_operation",
    "LoadMissingReturnsNone": "contract.load_missing_raises",
    "LatestRaisesWhenEmpty": "contract.unknown_workflow_is_empty",
    "SaveDropsNoneMetadata": "model.sequential_histories",
    "SaveJsonNormalisesState": "fidelity.collections",
    "TimestampsToSeconds": "fidelity.maf_fields",
    "PruneKeepsOneMore": "retention.prune_keeps_newest",
    "PruneZeroKeepsAll": "retention.prune_edge_counts",
    "SaveForwardsCheckpointOnly": "capabilities.fencing",
    "LatestDropsSignature": "signature.latest_by_signature",
    "IdsAlwaysIncludeNested": "nested.hidden_from_listing",
    "WritesSortedByTask": "writes.round_trip",
    "DeleteAlsoDropsWrites": "model.sequential_histories",
    "PutWritesOneByOne": "writes.all_or_nothing",
    "CancelRollsBack": "concurrency.cancelled_retry_keeps_stored",
    "LoadErrorsAsNotFound": "corruption.garbage_body",
    # six-method storages
    "SixResaveBecomesLatest": "contract.resave_identical_is_noop",
    "SixDeleteMissingRaises": "contract.delete_missing_returns_false",
    "SixResaveAlwaysConflicts": "contract.resave_identical_is_noop",
    "SixFireAndForgetSave": "contract.load_returns_saved",
    "SixLockBoundToFirstLoop": "lifecycle.works_across_event_loops",
    "SixIdsNfc": "identifiers.distinct_ids",
    "SixStripsWorkflowNames": "identifiers.distinct_workflow_names",
    "SixListsRecentHundred": "scale.history_is_kept",
    "SixLoadAcceptsPrefix": "model.sequential_histories",
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
