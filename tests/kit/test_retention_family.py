"""The retention family passes storages that prune and delete exactly and catches the ones that
prune the wrong checkpoints, orphan nested records, lose or keep tombstones, or delete too much."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conformance import BackendReport, Outcome, StorageTarget, select_clauses
from storages import open_storage
from storages.backend import StoredBody, pruned_records
from storages.contract import Capability, CheckpointID
from storages.errors import InvalidCheckpointError
from storages.memory import InMemoryCheckpointStorage, MemoryBackend
from storages.sqlite import SQLiteBackend

from . import support
from .double import DoubleBackend, DoubleStorage
from .support import caught_only_by, failed

FAMILY = "retention"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


DURABLE_ONLY = {"retention.tombstones_survive_reopen"}
"""The clauses an in-memory storage skips: they need the durable capability."""


# ---------------------------------------------------------------- mutants, one defect each
# Each breaks one primitive of the test double (tests/kit/double.py), as a backend's own code would.


class PruneWithoutTombstones(DoubleBackend):
    """Prunes the right checkpoints but leaves no tombstones behind."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        before = set(self._read().tombstones)
        count = await super().prune(workflow_name, keep_last)
        state = self._read()
        for pruned in set(state.tombstones) - before:
            del state.tombstones[pruned]
        self._commit(state)
        return count


class PrunesByTimestamp(DoubleBackend):
    """Keeps the checkpoints with the newest timestamps rather than the last ones committed."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        state = self._read()
        rows = state.top_level(workflow_name)
        decoded = [await self.decode(StoredBody(r.record.checkpoint_id, r.record.body)) for r in rows]
        clocks = {c.checkpoint_id: datetime.fromisoformat(c.timestamp) for c in decoded}
        by_clock = sorted(rows, key=lambda row: clocks[row.record.checkpoint_id])
        doomed = by_clock[: max(0, len(by_clock) - keep_last)]
        for row in doomed:
            for dropped in self._drop(state, row):
                state.tombstones[dropped] = workflow_name
        self._commit(state)
        return len(doomed)


class PruneKeepsTheNewestCommits(DoubleBackend):
    """Keeps the records committed last, even when the latest (a checkpoint committed before the
    parent it continues) is not among them."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        state = self._read()
        rows = state.top_level(workflow_name)
        doomed = rows[: max(0, len(rows) - keep_last)]
        for row in doomed:
            for dropped in self._drop(state, row):
                state.tombstones[dropped] = workflow_name
        self._commit(state)
        return len(doomed)


class PruneLeavesNestedOrphans(DoubleBackend):
    """Prunes top-level records only; the checkpoints embedded in them stay behind."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        state = self._read()
        rows = {row.record: row for row in state.top_level(workflow_name)}
        doomed = [rows[record] for record in pruned_records(list(rows), keep_last)]
        for row in doomed:
            checkpoint_id = row.record.checkpoint_id
            del state.rows[self._key(checkpoint_id)]
            state.tombstones[checkpoint_id] = workflow_name
        self._commit(state)
        return len(doomed)


class PruneSliceKeepsAllAtZero(DoubleBackend):
    """Cuts the list it prunes with ``[:-keep_last]``, and ``[:-0]`` is empty: keep_last=0
    deletes nothing (otherwise it prunes what the contract says)."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        state = self._read()
        rows = {row.record: row for row in state.top_level(workflow_name)}
        doomed = [rows[record] for record in pruned_records(list(rows), keep_last)]
        if keep_last == 0:
            doomed = doomed[:-keep_last]  # what the whole list cut at -keep_last gives
        for row in doomed:
            for dropped in self._drop(state, row):
                state.tombstones[dropped] = workflow_name
        self._commit(state)
        return len(doomed)


class LaxKeepLast(DoubleStorage):
    """Checks only that keep_last is not negative, so True counts as 1 and 1.5 gets through."""

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        if keep_last < 0:
            raise InvalidCheckpointError(f"keep_last must be >= 0, got {keep_last!r}", field="keep_last")
        return await super().prune(workflow_name=workflow_name, keep_last=int(keep_last))


class Int64Prune(DoubleBackend):
    """Hands keep_last to a database as a 64-bit integer, unchecked: a larger one overflows."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        if keep_last > 2**63 - 1:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return await super().prune(workflow_name, keep_last)


class KeepLastAsInt64(DoubleStorage):
    """Checks keep_last as the engine does, then passes it to its backend as given (the engine
    clamps it first)."""

    backend_class = Int64Prune

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
            raise InvalidCheckpointError(
                f"keep_last must be an int >= 0, got {keep_last!r}", field="keep_last"
            )
        return await self.backend.prune(workflow_name, keep_last)


class DeleteWorkflowByPrefix(DoubleBackend):
    """Deletes every workflow whose name starts with the given one, as ``LIKE 'wf1%'`` would."""

    async def delete_workflow(self, workflow_name: str) -> int:
        names = {r.record.workflow_name for r in self._read().rows.values()}
        deleted = 0
        for name in sorted(n for n in names if n.startswith(workflow_name)):
            deleted += await super().delete_workflow(name)
        return deleted


class DeleteWorkflowKeepsTombstones(DoubleBackend):
    """Deletes the workflow's checkpoints but leaves its tombstones."""

    async def delete_workflow(self, workflow_name: str) -> int:
        kept = {pruned: name for pruned, name in self._read().tombstones.items() if name == workflow_name}
        deleted = await super().delete_workflow(workflow_name)
        state = self._read()
        state.tombstones.update(kept)
        self._commit(state)
        return deleted


class DeleteWorkflowLeavesNested(DoubleBackend):
    """Deletes the workflow's top-level records and tombstones, but not what is embedded in them."""

    async def delete_workflow(self, workflow_name: str) -> int:
        state = self._read()
        doomed = state.top_level(workflow_name)
        for row in doomed:
            del state.rows[self._key(row.record.checkpoint_id)]
        for pruned in [i for i, name in state.tombstones.items() if name == workflow_name]:
            del state.tombstones[pruned]
        self._commit(state)
        return len(doomed)


class DeleteWorkflowForgetsSequence(DoubleBackend):
    """Drops the workflow's sequence counter with its checkpoints, so numbering starts again at 1."""

    async def delete_workflow(self, workflow_name: str) -> int:
        deleted = await super().delete_workflow(workflow_name)
        state = self._read()
        if not any(r.record.workflow_name == workflow_name for r in state.rows.values()):
            state.sequences.pop(workflow_name, None)
        self._commit(state)
        return deleted


class DeleteLeavesTombstone(DoubleBackend):
    """Tombstones an id on a plain delete, so a deliberate break looks like a prune."""

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        info = await self.info(checkpoint_id)
        removed = await super().remove(checkpoint_id)
        if removed and info is not None:
            state = self._read()
            state.tombstones[checkpoint_id] = info.workflow_name
            self._commit(state)
        return removed


class PruneOneBatchOnly(DoubleBackend):
    """Deletes the doomed records in one batch write of at most 25 (a DynamoDB BatchWriteItem)
    and ignores what the batch left unprocessed, yet counts every doomed record."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        state = self._read()
        rows = {row.record: row for row in state.top_level(workflow_name)}
        doomed = [rows[record] for record in pruned_records(list(rows), keep_last)]
        for row in doomed[:25]:
            for dropped in self._drop(state, row):
                state.tombstones[dropped] = workflow_name
        self._commit(state)
        return len(doomed)


# ---------------------------------------------------------------- tests


def _expected_outcomes(capabilities: frozenset[Capability]) -> dict[str, Outcome]:
    return {
        c.id: Outcome.PASSED if c.requires <= capabilities else Outcome.SKIPPED
        for c in select_clauses([FAMILY])
    }


def test_the_double_passes_every_retention_clause() -> None:
    # The mutants above each break one primitive of this correct storage.
    backend = run_family(DoubleBackend)
    outcomes = {r.clause_id: r.outcome for r in backend.results}
    assert outcomes == _expected_outcomes(DoubleBackend.capabilities)


def test_in_memory_storage_passes_every_retention_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    outcomes = {r.clause_id: r.outcome for r in backend.results}
    assert outcomes == _expected_outcomes(MemoryBackend.capabilities)
    assert {i for i, outcome in outcomes.items() if outcome is Outcome.SKIPPED} == DURABLE_ONLY
    assert len(outcomes) >= 13


@pytest.mark.sqlite
def test_sqlite_storage_passes_every_retention_clause(tmp_path: Path) -> None:
    # Declared, so that no clause of the family is skipped on SQLite.
    needed = {
        Capability.PRUNE,
        Capability.ANCESTRY,
        Capability.NESTED,
        Capability.INSPECT,
        Capability.DURABLE,
    }
    assert needed <= SQLiteBackend.capabilities
    url = f"sqlite:///{tmp_path}/retention.db"
    root = open_storage(url)
    backend = run_family(
        StorageTarget(
            name="sqlite (temp file)",
            factory=root.new_handle,
            cleanup=root.aclose,
            reopen=lambda: open_storage(url),
        )
    )
    assert {r.clause_id: (r.outcome, r.message) for r in backend.results} == {
        clause_id: (Outcome.PASSED, "") for clause_id in _expected_outcomes(frozenset(Capability))
    }


def test_prune_without_tombstones_fails_every_tombstone_clause() -> None:
    backend = run_family(PruneWithoutTombstones)
    assert failed(backend) == {
        "retention.pruned_ancestor_leaves_tombstone",
        "retention.tombstones_listed",
        "retention.prune_removes_nested",
        "retention.walk_reaches_pruned_nested",
        "retention.delete_workflow_clears_tombstones",
        "retention.prune_many_at_once",
    }
    assert (
        "walk_ancestry_ids(c4) after prune(keep_last=2) returned [c4, c3] ending missing at c2, "
        "expected [c4, c3] ending pruned at c2"
    ) in backend.result("retention.pruned_ancestor_leaves_tombstone").message
    assert (
        "after prune(keep_last=2), before delete_workflow returned [], expected [c0, c1]"
        in backend.result("retention.delete_workflow_clears_tombstones").message
    )


def test_prune_by_timestamp_fails_the_clauses_that_say_what_prune_keeps() -> None:
    backend = run_family(PrunesByTimestamp)
    assert failed(backend) == {
        "retention.prune_keeps_newest",
        "retention.prune_keeps_the_latest",
        "retention.prune_keeps_the_rivals",
    }
    assert "after prune(keep_last=2) returned [c2, c5], expected [c4, c5]" in (
        backend.result("retention.prune_keeps_newest").message
    )


def test_prune_keeping_the_newest_commits_fails_the_clauses_on_the_latest_and_its_rivals() -> None:
    backend = run_family(PruneKeepsTheNewestCommits)
    assert failed(backend) == {"retention.prune_keeps_the_latest", "retention.prune_keeps_the_rivals"}
    assert "then c1, and prune(keep_last=1) returned [c1], expected [c2]" in (
        backend.result("retention.prune_keeps_the_latest").message
    )


def test_prune_leaving_nested_orphans_fails_the_nested_prune_clauses() -> None:
    backend = run_family(PruneLeavesNestedOrphans)
    assert failed(backend) == {"retention.prune_removes_nested", "retention.walk_reaches_pruned_nested"}
    assert (
        "load(n0) after prune(keep_last=1) returned checkpoint n0; it should be gone"
        in backend.result("retention.prune_removes_nested").message
    )
    assert (
        "returned [r, n2, n1, n0] ending root at n0, expected [r, n2] ending pruned at n1"
        in backend.result("retention.walk_reaches_pruned_nested").message
    )


def test_prune_slice_bug_fails_prune_edge_counts_only() -> None:
    backend = run_family(PruneSliceKeepsAllAtZero)
    # The shared-name and similar-name clauses, and the tombstones' last prune, prune to
    # keep_last=0 as well.
    assert failed(backend) == {
        "retention.prune_edge_counts",
        "retention.tombstones_listed",
        "retention.prune_keeps_records_embedded_elsewhere",
        "retention.prune_spares_others",
    }
    assert (
        "keep_last=0) of 3 checkpoints: expected 3, got 0"
        in backend.result("retention.prune_edge_counts").message
    )


def test_lax_keep_last_check_fails_prune_invalid_keep_last_only() -> None:
    backend = run_family(LaxKeepLast)
    caught_only_by(
        backend,
        "retention.prune_invalid_keep_last",
        "keep_last=True) returned 2; expected it to raise InvalidCheckpointError",
    )


def test_delete_workflow_by_prefix_fails_the_clauses_with_a_longer_bystander() -> None:
    backend = run_family(DeleteWorkflowByPrefix)
    # The tombstone clause's bystander extends the cleared name, so it loses its records too.
    assert failed(backend) == {
        "retention.delete_workflow_spares_others",
        "retention.delete_workflow_clears_tombstones",
    }
    message = backend.result("retention.delete_workflow_spares_others").message
    assert "a longer name it is a prefix of returned [], expected [k0, k1]" in message


def test_delete_workflow_keeping_tombstones_fails_delete_workflow_clears_tombstones_only() -> None:
    backend = run_family(DeleteWorkflowKeepsTombstones)
    caught_only_by(
        backend,
        "retention.delete_workflow_clears_tombstones",
        "after delete_workflow returned [c0, c1], expected []",
    )


def test_delete_workflow_leaving_nested_fails_delete_workflow_removes_all_only() -> None:
    backend = run_family(DeleteWorkflowLeavesNested)
    caught_only_by(
        backend,
        "retention.delete_workflow_removes_all",
        "load(n0) after delete_workflow returned checkpoint n0; it should be gone",
    )


def test_sequence_restarting_after_delete_workflow_fails_save_after_delete_workflow_only() -> None:
    backend = run_family(DeleteWorkflowForgetsSequence)
    caught_only_by(
        backend,
        "retention.save_after_delete_workflow",
        "saved after delete_workflow are [1, 2, 3]; they must rise above 3",
    )


def test_tombstone_on_plain_delete_fails_delete_is_not_prune_and_the_raced_tombstones() -> None:
    backend = run_family(DeleteLeavesTombstone)
    assert failed(backend) == {"retention.delete_is_not_prune", "retention.tombstones_listed"}
    message = backend.result("retention.delete_is_not_prune").message
    assert (
        "after delete(c1) returned [c3, c2] ending pruned at c1, expected [c3, c2] ending missing at c1"
        in message
    )
    raced = backend.result("retention.tombstones_listed").message
    assert "after delete(c1) and prune(keep_last=1) made together" in raced


def test_keep_last_overflowing_a_64_bit_integer_fails_prune_edge_counts_only() -> None:
    backend = run_family(KeepLastAsInt64)
    caught_only_by(
        backend,
        "retention.prune_edge_counts",
        "keep_last=18446744073709551616) of 3 checkpoints raised OverflowError: Python int too large",
    )


class RivalsCountTowardKeepLast(MemoryBackend):
    """Counts the head's rivals inside keep_last, so siblings that fill it cost the commits before
    them (prune keeps the head, its rivals and keep_last - 1 others)."""

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        head = await self.latest(workflow_name, None)
        rivals = 0 if head is None else len(head.rivals)
        return await super().prune(workflow_name, max(1, keep_last - rivals) if keep_last else 0)


def test_rivals_counted_inside_keep_last_fail_the_rivals_prune_clause() -> None:
    caught_only_by(
        run_family(RivalsCountTowardKeepLast),
        "retention.prune_keeps_the_rivals",
        "prune(keep_last=2)",
    )


def test_prune_of_one_batch_only_fails_prune_many_at_once_only() -> None:
    caught_only_by(
        run_family(PruneOneBatchOnly),
        "retention.prune_many_at_once",
        "after prune(keep_last=1) of 70 checkpoints",
    )
