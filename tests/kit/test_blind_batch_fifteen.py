"""The fifteenth blind batch (tests/kit/blind_batch_fifteen.py) keeps the kit honest: every
broken storage in it is caught by the clause named here, and the honest ones (a DynamoDB-like
single table, an author's own S3 key layout on in-process moto, a soft-delete store with a
vacuum, an MVCC store), with any judged not to break the contract, pass the whole kit. What the
kit caught before this batch's clauses is in tests/kit/blind_batch_fifteen.md."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance import StorageTarget

from .blind_batch_fifteen import ENTRIES, HONEST, NOT_VIOLATIONS
from .support import caught_by_alone, passes_the_whole_kit

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # a DynamoDB-like single table
    "DynamoQueryFirstPageOnly": "identifiers.distinct_ids",
    "DynamoResumeRepeatsLastItem": "identifiers.distinct_ids",
    "DynamoLoadFromIndex": "nested.loadable_by_own_id",
    "DynamoDuplicateCheckOnIndex": "contract.resave_equal_content_encoded_differently_is_noop",
    "DynamoFamilyPutOneByOne": "nested.save_is_atomic",
    "DynamoCounterWithoutCondition": "concurrency.many_writers_number_once",
    "DynamoDeleteWithoutCondition": "nested.delete_nested_refused",
    "DynamoPruneIgnoresUnprocessed": "retention.prune_many_at_once",
    "DynamoWorkflowNamesFromIndex": "contract.reads_follow_each_write",
    "DynamoInfoFromIndex": "contract.reads_follow_each_write",
    # an S3 key layout on moto
    "S3IncrementalListing": "tamper.forged_prune",
    "S3EscapesSlashOnly": "identifiers.distinct_ids",
    "S3SequenceKeysUnpadded": "identifiers.distinct_ids",
    "S3ListThenGetEach": "concurrency.listings_race_deletes",
    "S3OverwriteKeepsCache": "corruption.truncated_body",
    # a soft-delete store
    "SoftLoadIgnoresFlag": "contract.delete_removes",
    "SoftListingIgnoresFlag": "contract.delete_latest_promotes_previous",
    "SoftLatestIgnoresFlag": "contract.delete_latest_promotes_previous",
    "SoftWalkIgnoresFlag": "retention.delete_is_not_prune",
    "SoftVacuumDeletesListedIds": "contract.resave_equal_content_encoded_differently_is_noop",
    "SoftSequenceFromRowCount": "ordering.sequence_survives_emptying_a_workflow",
    "SoftDeleteWorkflowKeepsTombstones": "retention.delete_workflow_clears_tombstones",
    "SoftRemoveFlagsTopOnly": "nested.delete_cascades",
    "SoftWorkflowNamesIgnoreFlag": "capabilities.list_workflows",
    "SoftRemoveWritesTombstone": "retention.tombstones_listed",
    # an MVCC store
    "MvccLastCommitterWins": "concurrency.conflicting_saves",
    "MvccFenceReadAtSnapshot": "fencing.one_winner_per_head",
    "MvccReaderRegistersLate": "concurrency.listings_race_deletes",
    "MvccSnapshotOfHandle": "concurrency.reads_follow_other_handles",
    "MvccSnapshotBelowCommitted": "concurrency.reads_see_whole_checkpoints",
    "MvccTombstonesCollected": "retention.tombstones_listed",
    "MvccGcKeepsLatestOnly": "concurrency.listings_race_deletes",
}


def lane(name: str) -> pytest.MarkDecorator:
    """The S3 layout runs on in-process moto; the other styles in process memory."""
    return pytest.mark.s3 if name.startswith("S3") else pytest.mark.memory


def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted(CAUGHT_BY) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 32


@pytest.mark.parametrize("name", [pytest.param(n, marks=lane(n)) for n in sorted(CAUGHT_BY)])
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


PASSING: dict[str, Callable[[], StorageTarget]] = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}


@pytest.mark.parametrize("name", [pytest.param(n, marks=lane(n)) for n in sorted(PASSING)])
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    passes_the_whole_kit(PASSING[name]())
