"""The eleventh blind batch (tests/kit/blind_batch_eleven.py) keeps the kit honest: every broken
storage in it is caught by the clause named here, and the honest ones (the author's own
PostgreSQL schema through psycopg's async API, a log-structured merge store, a store with
explicit secondary indexes, a multi-tenant wrapper over the in-memory backend), with the one
judged not to break the contract, pass the whole kit. What the kit caught before this batch's
clauses is in tests/kit/blind_batch_eleven.md."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .blind_batch_eleven import (
    ENTRIES,
    HONEST,
    NOT_VIOLATIONS,
    POSTGRES,
    TenantBackend,
    TenantTombstonesOfEveryTenant,
    drop_created_schemas,
    tenant_per_store_target,
)
from .support import caught_by_alone, passes_the_whole_kit

BATCH = {name: factory for name, factory, _ in ENTRIES}

CAUGHT_BY: dict[str, str] = {
    # the author's own PostgreSQL schema
    "PgCheckThenInsertUnlocked": "model.concurrent_histories_linearize",
    "PgNamesMatchedWithLike": "identifiers.hostile_names_round_trip",
    "PgEmptySignatureAsNull": "signature.filter_is_exact",
    "PgFenceLocksWorkflowRows": "fencing.one_winner_per_head",
    "PgIdsAsFixedChar": "identifiers.hostile_ids_round_trip",
    "PgUpsertThenCompare": "contract.resave_conflict_raises",
    # a log-structured merge store
    "LsmMergeOldestWins": "model.sequential_histories",
    "LsmMarkersDroppedEarly": "identifiers.hostile_ids_round_trip",
    "LsmFlushSkipsMarkers": "identifiers.hostile_ids_round_trip",
    "LsmScanIgnoresMarkers": "retention.tombstones_listed",
    "LsmCompactionRacesWrites": "concurrency.many_saves_one_workflow",
    "LsmLoadProbesSegmentsFirst": "nested.delete_cascades",
    "LsmMarkersAreTombstones": "retention.delete_is_not_prune",
    "LsmCounterFromScan": "ordering.sequence_survives_emptying_a_workflow",
    "LsmMergeRenumbers": "concurrency.many_saves_one_workflow",
    # a store with secondary indexes
    "IdxParentLeftAfterDelete": "corruption.delete_damaged",
    "IdxSignatureIndexOutlivesPrune": "model.sequential_histories",
    "IdxIndexedBeforePrimary": "concurrency.identical_saves",
    "IdxSignatureKeyConcatenated": "signature.filter_is_exact",
    "IdxSequenceFromIndexSize": "ordering.sequence_survives_emptying_a_workflow",
    "IdxParentAcrossWorkflows": "ordering.workflows_are_independent",
    "IdxTombstonesKeptByDelete": "retention.delete_workflow_clears_tombstones",
    "IdxSignatureListingById": "signature.list_by_signature",
    "IdxNestedTombstonesUnderOwnName": "model.sequential_histories",
    # a multi-tenant wrapper
    "TenantUnmapsBySplit": "identifiers.hostile_ids_round_trip",
    "TenantPreviousLeftBare": "ancestry.walk_to_root",
    "TenantContainerLeftBare": "nested.delete_cascades",
    "TenantPrefixWithoutSeparator": "capabilities.list_workflows",
    "TenantRecordsOfEveryTenant": "capabilities.inspect",
    "TenantEscapeNotInjective": "identifiers.distinct_ids",
    "TenantCutTo256": "identifiers.long_ids_distinct_and_whole",
    "TenantRivalsLeftMapped": "ordering.latest_among_rivals_by_timestamp",
    "TenantFenceReportsStoredLatest": "fencing.one_winner_per_head",
}

CAUGHT_WITH_A_TENANT_PER_STORE: dict[str, tuple[type[TenantBackend], str]] = {
    # Through the batch's own target (every storage the same tenant, neighbours seeded) the leaked
    # ids read as tombstones of workflows whose checkpoints are all gone: nothing a clause can ask
    # tells them apart. Where each store the target opens is a tenant of its own, a tombstone
    # pruned through another store is one to look for.
    "TenantTombstonesOfEveryTenant": (TenantTombstonesOfEveryTenant, "retention.tombstones_listed"),
}


def lane(name: str) -> Any:
    """The storage's name as a parameter marked for the lane whose server it needs."""
    return pytest.param(name, marks=pytest.mark.postgres if name in POSTGRES else pytest.mark.memory)


@pytest.fixture(autouse=True)
def no_schema_left() -> Iterator[None]:
    """Every schema a PostgreSQL storage of the batch made is dropped, whatever the test's end."""
    yield
    drop_created_schemas()


@pytest.mark.memory
def test_every_storage_of_the_batch_names_the_clause_that_catches_it() -> None:
    assert sorted([*CAUGHT_BY, *CAUGHT_WITH_A_TENANT_PER_STORE]) == sorted(BATCH)
    assert len(BATCH) + len(NOT_VIOLATIONS) >= 37


@pytest.mark.parametrize("name", [lane(name) for name in sorted(CAUGHT_BY)])
def test_the_kit_catches_each_broken_storage(name: str) -> None:
    caught_by_alone(name, BATCH[name](), CAUGHT_BY[name])


@pytest.mark.parametrize("name", [lane(name) for name, _, _ in sorted(NOT_VIOLATIONS + HONEST)])
def test_the_honest_storages_pass_the_whole_kit(name: str) -> None:
    factory = {n: f for n, f, _ in NOT_VIOLATIONS + HONEST}[name]
    passes_the_whole_kit(factory())


@pytest.mark.memory
@pytest.mark.parametrize("name", sorted(CAUGHT_WITH_A_TENANT_PER_STORE))
def test_the_kit_catches_it_where_each_store_is_a_tenant(name: str) -> None:
    backend_class, clause_id = CAUGHT_WITH_A_TENANT_PER_STORE[name]
    caught_by_alone(name, tenant_per_store_target(backend_class), clause_id)


@pytest.mark.memory
def test_the_honest_tenant_passes_the_whole_kit_as_a_tenant_per_store() -> None:
    passes_the_whole_kit(tenant_per_store_target(TenantBackend))
