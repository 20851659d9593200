"""Mutants of the test double, one realistic defect each, each caught by one clause of its family
alone: equality by bytes, truncated keys, walks that stop at a name, "repaired" dangling links,
and retention that deletes records embedded in other workflows' checkpoints."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from conformance import Outcome
from storages.backend import CheckpointRecord, InsertResult, WalkRecords, latest_record
from storages.contract import CheckpointID
from storages.errors import CheckpointConflictError

from . import support
from .double import DoubleBackend, DoubleState, DoubleStorage, Row, double_target
from .support import caught_only_by


class ConflictsOnDifferentBytes(DoubleBackend):
    """Calls a re-save a conflict whenever the encoded bytes differ, without comparing content."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await super().insert(records)
        if result is InsertResult.DIFFERENT_BODY:
            raise CheckpointConflictError(records[0].checkpoint_id, "the stored bytes differ")
        return result


class ConflictsOnDifferentNestedBytes(DoubleBackend):
    """Compares the container by content but its embedded records byte for byte."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        result = await super().insert(records)
        if result is not InsertResult.INSERTED and len(records) > 1:
            stored = await self.nested_bodies([records[0].checkpoint_id])
            if any(stored.get(r.checkpoint_id) != r.body for r in records[1:]):
                raise CheckpointConflictError(records[0].checkpoint_id, "an embedded record's bytes differ")
        return result


class TruncatesKeys(DoubleBackend):
    """Stores records under the first 240 characters of their id (a fixed-width key column)."""

    def _key(self, checkpoint_id: CheckpointID) -> str:
        return checkpoint_id[:240]


class TruncatesWorkflowNames(DoubleBackend):
    """Indexes workflows by the first 240 characters of their name."""

    def _rows(self, workflow_name: str, signature: str | None, include_nested: bool) -> list[Row]:
        return [
            row
            for row in self._read().rows.values()
            if row.record.workflow_name[:240] == workflow_name[:240]
            and (include_nested or not row.record.nested)
            and signature in (None, row.record.graph_signature_hash)
        ]


class WalkStopsAtWorkflowName(DoubleBackend):
    """Walks only through top-level records of the starting checkpoint's workflow (and nested ones)."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        state = self._read()
        start = state.rows.get(checkpoint_id)
        home = None if start is None else start.record.workflow_name
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            row = state.rows.get(current)
            if row is None:
                if current in state.tombstones:
                    tombstones.add(current)
                break
            if not row.record.nested and row.record.workflow_name != home:
                break
            links[current] = row.record.previous_checkpoint_id
            if with_bodies:
                bodies.update((m.record.checkpoint_id, m.record.body) for m in state.family(row))
            current = row.record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset(tombstones))


class TombstonesSeenOnlyInOwnWorkflow(DoubleBackend):
    """Looks tombstones up in the starting checkpoint's workflow only (a key per workflow)."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        walk = await super().walk(checkpoint_id, max_depth, with_bodies=with_bodies)
        state = self._read()
        home = state.rows[checkpoint_id].record.workflow_name if checkpoint_id in state.rows else None
        seen = frozenset(t for t in walk.tombstones if state.tombstones.get(t) == home)
        return WalkRecords(walk.links, walk.bodies, seen)


class RepairsDanglingLinks(DoubleBackend):
    """Indexes a previous id that resolves to nothing as the workflow's latest checkpoint instead."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0]
        state = self._read()
        previous = top.previous_checkpoint_id
        if previous is not None and previous not in state.rows and top.checkpoint_id not in state.rows:
            mine = state.top_level(top.workflow_name)
            if mine:
                top = top.replaced(previous_checkpoint_id=mine[-1].record.checkpoint_id)
        return await super().insert([top, *records[1:]])


class GraftsLinksOntoLatest(DoubleStorage):
    """Rewrites a previous id that names no top-level checkpoint to the workflow's latest: after a
    parent restore, the child's fork is grafted onto the abandoned branch (and still resolves)."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        previous = checkpoint.previous_checkpoint_id
        if previous is not None:
            info = await self.checkpoint_info(previous)
            if info is None or info.nested:
                ids = await self.list_checkpoint_ids(workflow_name=checkpoint.workflow_name)
                if ids and checkpoint.checkpoint_id not in ids:
                    checkpoint = dataclasses.replace(checkpoint, previous_checkpoint_id=ids[-1])
        return await super().save(checkpoint)


def _embedded_elsewhere(state: DoubleState, workflow_name: str) -> list[Row]:
    return [r for r in state.rows.values() if r.record.workflow_name == workflow_name and r.record.nested]


class PruneTakesEmbeddedRecords(DoubleBackend):
    """Prunes every record of the name, the ones embedded in other workflows' checkpoints too."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        count = await super().prune(workflow_name, keep_last)
        state = self._read()
        for row in _embedded_elsewhere(state, workflow_name):
            del state.rows[row.record.checkpoint_id]
            state.tombstones[row.record.checkpoint_id] = workflow_name
        self._commit(state)
        return count


class PruneRanksEmbeddedRecords(DoubleBackend):
    """Ranks every record of the name, embedded ones too, when choosing the newest keep_last; then
    deletes the top-level records outside them."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        state = self._read()
        ranked = sorted(
            (r for r in state.rows.values() if r.record.workflow_name == workflow_name),
            key=lambda r: r.sequence,
        )
        outside = ranked[: max(0, len(ranked) - keep_last)]
        # The latest is kept wherever it ranks, in place of the oldest kept: that part is right.
        latest = latest_record([row.record for row in state.top_level(workflow_name)])
        if keep_last and any(row.record == latest for row in outside):
            outside = [row for row in outside if row.record != latest] + [ranked[len(ranked) - keep_last]]
        doomed = [row for row in outside if not row.record.nested]
        for row in doomed:
            for dropped in self._drop(state, row):
                state.tombstones[dropped] = workflow_name
        self._commit(state)
        return len(doomed)


class DeleteWorkflowTakesEmbeddedRecords(DoubleBackend):
    """delete_workflow() removes every record of the name, embedded ones included."""

    async def delete_workflow(self, workflow_name: str) -> int:
        count = await super().delete_workflow(workflow_name)
        state = self._read()
        for row in _embedded_elsewhere(state, workflow_name):
            del state.rows[row.record.checkpoint_id]
        self._commit(state)
        return count


@pytest.mark.parametrize("family", ["contract", "identifiers", "ancestry", "retention", "runner"])
def test_the_double_passes_the_families_its_mutants_break(family: str) -> None:
    backend = support.run_family(family, double_target())
    # The double declares no fencing: the stale-run race is a runner finding, not a failure.
    allowed = (Outcome.PASSED, Outcome.SKIPPED, Outcome.FINDING)
    assert all(r.outcome in allowed for r in backend.results), backend.failures


@pytest.mark.parametrize(
    ("mutant", "clause_id", "says"),
    [
        (
            ConflictsOnDifferentBytes,
            "contract.resave_equal_content_encoded_differently_is_noop",
            "raised CheckpointConflictError",
        ),
        (
            ConflictsOnDifferentNestedBytes,
            "contract.resave_equal_content_encoded_differently_is_noop",
            "in which its embedded checkpoint's sets iterate in another order",
        ),
        (TruncatesKeys, "identifiers.long_ids_distinct_and_whole", "(length 256)"),
        (TruncatesWorkflowNames, "identifiers.long_workflow_names_distinct", "long names collide"),
        (
            GraftsLinksOntoLatest,
            "runner.chain_whole_after_parent_restore",
            "not at the child checkpoint embedded in the restored parent",
        ),
        (
            TombstonesSeenOnlyInOwnWorkflow,
            "ancestry.walks_across_workflow_names",
            "ending missing at a0, expected [c1, c0, b0, a1] ending pruned at a0",
        ),
        (WalkStopsAtWorkflowName, "ancestry.walks_across_workflow_names", "expected [c1, c0, b0, a1, a0]"),
        (
            PruneTakesEmbeddedRecords,
            "retention.prune_keeps_records_embedded_elsewhere",
            "embedded checkpoint",
        ),
        (
            DeleteWorkflowTakesEmbeddedRecords,
            "retention.delete_workflow_keeps_records_embedded_elsewhere",
            "embedded checkpoint",
        ),
    ],
)
def test_double_mutants_are_caught(mutant: type[DoubleBackend], clause_id: str, says: str) -> None:
    family = clause_id.partition(".")[0]
    caught_only_by(support.run_family(family, double_target(mutant)), clause_id, says)


def test_a_prune_ranking_embedded_records_is_caught_keeping_too_few_of_its_own_and_no_rivals() -> None:
    # It keeps the latest but not its rivals: the rivals clause sees that side of it.
    backend = support.run_family("retention", double_target(PruneRanksEmbeddedRecords))
    assert support.failed(backend) == {
        "retention.prune_keeps_records_embedded_elsewhere",
        "retention.prune_keeps_the_rivals",
    }
    assert "it is the newest of the workflow's own" in (
        backend.result("retention.prune_keeps_records_embedded_elsewhere").message
    )


def test_a_repaired_dangling_link_is_caught_where_it_is_stored() -> None:
    # Other walks trip over the graft too; this clause names the stored previous id itself.
    backend = support.run_family("ancestry", double_target(RepairsDanglingLinks))
    assert "ancestry.dangling_link_kept_as_given" in support.failed(backend)
    message = backend.result("ancestry.dangling_link_kept_as_given").message
    # The double reads the index entry with the body, so the load itself reports the graft.
    assert "indexed with previous id" in message
    assert "-h2' but its body says" in message
    assert message.endswith("-ghost'")
