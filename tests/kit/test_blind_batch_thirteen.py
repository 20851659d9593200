"""The thirteenth blind batch (tests/kit/blind_batch_thirteen.py) keeps the kit honest: every
broken storage in it is caught by the clause named here, and the honest ones (content-addressed
chunks with reference counts, a time-partitioned store, a compressing and encrypting wrapper over
the built-in SQLite backend, a leader with asynchronous read replicas), with any judged not to
break the contract, pass the whole kit. What the kit caught before this batch's clauses is in
tests/kit/blind_batch_thirteen.md."""

from __future__ import annotations

import pytest

from .blind_batch_thirteen import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = [pytest.mark.memory, pytest.mark.sqlite]

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # content-addressed chunks
    "CasDeleteFreesSharedChunks": "contract.delete_removes",
    "CasDedupWithoutReference": "contract.delete_removes",
    "CasOverwriteInPlace": "corruption.list_checkpoints_raises",
    "CasRepeatedChunkCountedOnce": "identifiers.hostile_ids_round_trip",
    "CasLastChunkPadded": "capabilities.raw_access",
    "CasSizeFromChunkCount": "capabilities.inspect",
    "CasBodyCache": "nested.delete_cascades",
    "CasManifestThenChunks": "concurrency.listings_race_deletes",
    "CasUploadThenLink": "concurrency.many_writers_number_once",
    # a time-partitioned store
    "PartMetaDroppedWithLastPartition": "ordering.sequence_survives_emptying_a_workflow",
    "PartNamesSortedAsText": "concurrency.many_saves_one_workflow",
    "PartLatestFromNewestPartition": "ordering.latest_is_the_lineage_tip",
    "PartRivalsFromHeadPartition": "ordering.latest_among_rivals_by_timestamp",
    "PartPruneWholePartitions": "retention.prune_keeps_newest",
    "PartTombstonesInPartition": "retention.pruned_ancestor_leaves_tombstone",
    "PartOverwriteToNewestPartition": "ordering.raw_write_keeps_commit_order",
    "PartLookupInRecentPartitions": "identifiers.distinct_ids",
    "PartWalkStopsAtPartitionEdge": "ancestry.long_chain",
    "PartNestedInContainerPartition": "nested.hidden_from_listing",
    # compressed and encrypted bodies over SQLite
    "SealOverwriteStoresPlain": "capabilities.raw_access",
    "SealNestedBodiesLeftSealed": "fidelity.nested_checkpoints",
    "SealRivalsLeftSealed": "ordering.latest_among_rivals_by_timestamp",
    "SealWalkBodiesLeftSealed": "ancestry.walk_to_root",
    "SealSizeOfSealedBody": "capabilities.inspect",
    "SealOpensWithCurrentKey": "identifiers.distinct_ids",
    "SealDecompressCapped": "fidelity.large_payload",
    "SealNestedStoredPlain": "fidelity.nested_checkpoints",
    "SealFencedStoredPlain": "fencing.one_winner_per_head",
    "SealKeyringPerHandle": "ordering.commit_order_across_handles",
    # a leader with read replicas
    "ReplicaTokenPerHandle": "ancestry.walk_from_other_handle",
    "ReplicaTokenFromLastSave": "contract.delete_removes",
    "ReplicaSavesReplicatedFirst": "corruption.body_names_another_workflow",
    "ReplicaFailoverWithoutCatchUp": "concurrency.many_saves_one_workflow",
    "ReplicaInspectFromAnyFollower": "capabilities.inspect",
    "ReplicaFenceCheckedOnFollower": "fencing.one_winner_per_head",
    "ReplicaLatestFromAnyFollower": "contract.latest_returns_saved",
    "ReplicaLagOfOneAllowed": "contract.load_returns_saved",
    "ReplicaNestedBodiesFromAnyFollower": "retention.delete_workflow_removes_all",
}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 35


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


@pytest.mark.parametrize("name", [name for name, _, _ in sorted(NOT_VIOLATIONS + HONEST)])
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    factory = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}[name]
    passes_the_whole_kit(factory())
