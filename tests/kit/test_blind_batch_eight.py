"""The eighth blind batch (tests/kit/blind_batch_eight.py) keeps the kit honest: every broken
storage in it is caught by the clause named here, and the honest ones (a backend keeping one file
per record, a backend over ``dbm.dumb``, and layers over the built-in in-memory backend: a plain
one, a read replica, shards, compression, encryption, a tenant prefix, an audit log, a load
cache), with the one judged not to break the contract, pass the whole kit. What the kit caught
before this batch's clauses is in tests/kit/blind_batch_eight.md."""

from __future__ import annotations

import pytest

from .blind_batch_eight import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

pytestmark = pytest.mark.memory

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # one file per record
    "FileNamesCasefolded": "identifiers.distinct_ids",
    "FileNamesNormalizedNfc": "identifiers.distinct_ids",
    "FileNamesQuotedTruncated": "identifiers.long_ids_distinct_and_whole",
    "FileSlashReplaced": "identifiers.distinct_ids",
    "FileIndexNamedByQuotedName": "identifiers.hostile_names_round_trip",
    "FileListIdsByMtime": "ordering.raw_write_keeps_commit_order",
    "FileThreadLockOnly": "durability.across_processes",
    "FileUnlinkDeferred": "contract.delete_removes",
    "FileWorkflowNamesScannedOnce": "capabilities.list_workflows",
    "FileWalkWithinWorkflowIndex": "ancestry.walks_across_workflow_names",
    "FileRemoveIndexesTopLevelOnly": "nested.delete_cascades",
    "FilePruneMarksOnlyInIndex": "retention.pruned_ancestor_leaves_tombstone",
    "FileExistsThenReplace": "concurrency.conflicting_saves",
    "FileRecordWrittenInPlace": "concurrency.reads_see_whole_checkpoints",
    # a dbm.dumb database
    "DbmKeysLatin1": "identifiers.long_ids_distinct_and_whole",
    "DbmSyncOnlyOnClose": "ordering.commit_order_across_handles",
    "DbmOpenedOncePerHandle": "ordering.commit_order_across_handles",
    "DbmIndexOrderCommaJoined": "identifiers.hostile_ids_round_trip",
    "DbmDigestKeyOutlivesRecord": "nested.list_nested_children",
    "DbmOpenedWithFlagN": "durability.survives_reopen",
    "DbmWorkflowNamesKeepEmptied": "capabilities.list_workflows",
    "DbmTombstonesOneKey": "retention.tombstones_listed",
    "DbmRivalsAmongSignature": "signature.latest_root_rivals_across_signatures",
    "DbmOverwriteCreatesMissing": "capabilities.raw_access",
    # layers over the built-in in-memory backend
    "ReplicaKeepsDeleted": "nested.delete_cascades",
    "ReplicaMissesRawWrites": "corruption.truncated_body",
    "ReplicaPerHandle": "model.handles_and_rebuilds",
    "ReplicaPruneKeepsNested": "retention.prune_removes_nested",
    "ShardIdsCheckedInOwnShard": "contract.ids_are_global",
    "CompressNestedBodiesLeftPacked": "fidelity.nested_checkpoints",
    "CompressWalkBodiesLeftPacked": "capabilities.ancestry",
    "CompressRawWritesRefused": "capabilities.raw_access",
    "EncryptKeyPerHandle": "ordering.commit_order_across_handles",
    "EncryptRivalsLeftSealed": "ordering.latest_among_rivals_by_timestamp",
    "EncryptListingSkipsUnreadable": "corruption.list_checkpoints_raises",
    "TenantNamesLeftPrefixed": "capabilities.list_workflows",
    "TenantNestedLeftBare": "nested.hidden_from_listing",
    "TenantTombstonesAskedBare": "retention.tombstones_listed",
    "AuditAppendsFileOnLoop": "concurrency.no_file_opened_on_the_loop",
    "AuditErrorsAsUnavailable": "nested.delete_nested_refused",
    "CacheRemembersMisses": "nested.save_is_atomic",
    "CacheKeepsDeletedWorkflows": "retention.delete_workflow_removes_all",
    "CachePrunesTopLevelOnly": "retention.prune_removes_nested",
}

STILL_MISSED: dict[str, str] = {}


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted([*CAUGHT_BY, *STILL_MISSED]) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 40


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


@pytest.mark.parametrize("name", sorted(name for name, _, _ in NOT_VIOLATIONS + HONEST))
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    factory = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}[name]
    passes_the_whole_kit(factory())
