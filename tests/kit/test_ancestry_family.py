"""The ancestry family passes storages that walk correctly and catches walks that hide or loop."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, TypeVar

import pytest

from conformance import BackendReport, Outcome, StorageTarget, select_clauses
from storages import open_storage
from storages.backend import WalkRecords
from storages.contract import AncestryEnd, AncestryWalk, Capability, CheckpointID
from storages.engine import DEFAULT_MAX_DEPTH
from storages.errors import CheckpointNotFoundError
from storages.memory import InMemoryCheckpointStorage, MemoryBackend
from storages.sqlite import SQLiteBackend

from . import support
from .double import DoubleBackend, DoubleStorage
from .support import caught_only_by, failed

FAMILY = "ancestry"

T = TypeVar("T")


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


DURABLE_ONLY = {"ancestry.walk_after_reopen"}
"""The clauses an in-memory storage skips: they need the durable capability."""

WALK_ANCESTRY_ORDER_CLAUSES = {
    "ancestry.walk_to_root",
    "ancestry.long_chain",
    "ancestry.depth_limit",
    "ancestry.cycle_is_reported",
    "ancestry.dangling_link_is_missing",
    "ancestry.forks_stay_walkable",
    "ancestry.walks_through_nested",
    "ancestry.walk_from_other_handle",
    "ancestry.walks_across_workflow_names",
    "ancestry.dangling_link_kept_as_given",
}
"""Every clause that walks more than one checkpoint with walk_ancestry."""


# ---------------------------------------------------------------- mutants, one defect each


def _id_of(item: object) -> CheckpointID:
    """A walk item's id: the item itself in an id walk, its checkpoint_id in a checkpoint walk."""
    return str(getattr(item, "checkpoint_id", item))


class MissingLinkIsRoot(DoubleStorage):
    """Reports a walk that stops at a dangling previous id as reaching the root."""

    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[Any]:
        return _missing_as_root(await super().walk_ancestry(checkpoint_id, max_depth=max_depth))

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[CheckpointID]:
        return _missing_as_root(await super().walk_ancestry_ids(checkpoint_id, max_depth=max_depth))


def _missing_as_root(walk: AncestryWalk[T]) -> AncestryWalk[T]:
    if walk.end is not AncestryEnd.MISSING:
        return walk
    return AncestryWalk(walk.items, AncestryEnd.ROOT, _id_of(walk.items[-1]))


class LoopsOnCycles(DoubleStorage):
    """Follows previous ids with no memory of where it has been: a cycle goes round until max_depth."""

    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[Any]:
        return _round_and_round(await super().walk_ancestry(checkpoint_id, max_depth=max_depth), max_depth)

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[CheckpointID]:
        return _round_and_round(
            await super().walk_ancestry_ids(checkpoint_id, max_depth=max_depth), max_depth
        )


def _round_and_round(walk: AncestryWalk[T], max_depth: int) -> AncestryWalk[T]:
    if walk.end is not AncestryEnd.CYCLE:
        return walk
    ids = [_id_of(item) for item in walk.items]
    loop = walk.items[ids.index(str(walk.end_id)) :]
    items = walk.items + tuple(itertools.islice(itertools.cycle(loop), max_depth - len(walk.items)))
    return AncestryWalk(items, AncestryEnd.DEPTH_LIMIT, _id_of(items[-1]))


class WalkSkipsNested(DoubleBackend):
    """Walks only top-level records, as a walk over the workflow's own rows would."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        records = await super().walk(checkpoint_id, max_depth, with_bodies=with_bodies)
        top_level = {}
        for walked, previous in records.links.items():
            info = await self.info(walked)
            if info is not None and not info.nested:
                top_level[walked] = previous
        return WalkRecords(top_level, records.bodies, records.tombstones)


class IgnoresMaxDepth(DoubleStorage):
    """Accepts max_depth and walks to the end regardless."""

    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[Any]:
        return await super().walk_ancestry(checkpoint_id)

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[CheckpointID]:
        return await super().walk_ancestry_ids(checkpoint_id)


class WalkOldestFirst(DoubleStorage):
    """walk_ancestry returns its checkpoints root first (walk_ancestry_ids is right)."""

    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[Any]:
        walk = await super().walk_ancestry(checkpoint_id, max_depth=max_depth)
        return AncestryWalk(walk.items[::-1], walk.end, walk.end_id)


class UnknownStartIsEmptyWalk(DoubleStorage):
    """Answers a walk from an unknown id with an empty walk instead of raising not-found."""

    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[Any]:
        try:
            return await super().walk_ancestry(checkpoint_id, max_depth=max_depth)
        except CheckpointNotFoundError:
            return AncestryWalk((), AncestryEnd.MISSING, checkpoint_id)

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[CheckpointID]:
        try:
            return await super().walk_ancestry_ids(checkpoint_id, max_depth=max_depth)
        except CheckpointNotFoundError:
            return AncestryWalk((), AncestryEnd.MISSING, checkpoint_id)


class WalkCappedAt100(DoubleBackend):
    """Reads at most 100 records per walk, as a recursive query with a fixed LIMIT 100 would."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        return await super().walk(checkpoint_id, min(max_depth, 100), with_bodies=with_bodies)


class MaxDepthAsInt64(DoubleStorage):
    """Hands max_depth to a database as a 64-bit integer, unchecked: a larger one overflows."""

    async def walk_ancestry(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[Any]:
        _bind_int64(max_depth)
        return await super().walk_ancestry(checkpoint_id, max_depth=max_depth)

    async def walk_ancestry_ids(
        self, checkpoint_id: CheckpointID, *, max_depth: int = DEFAULT_MAX_DEPTH
    ) -> AncestryWalk[CheckpointID]:
        _bind_int64(max_depth)
        return await super().walk_ancestry_ids(checkpoint_id, max_depth=max_depth)


def _bind_int64(value: int) -> None:
    # Other bad values are left to the base's own check (invalid_max_depth).
    if isinstance(value, int) and value > 2**63 - 1:
        raise OverflowError("Python int too large to convert to SQLite INTEGER")


# ---------------------------------------------------------------- tests


def _expected_outcomes(capabilities: frozenset[Capability]) -> dict[str, Outcome]:
    return {
        c.id: Outcome.PASSED if c.requires <= capabilities else Outcome.SKIPPED
        for c in select_clauses([FAMILY])
    }


def test_the_double_passes_every_ancestry_clause() -> None:
    # The mutants above each break one step of this correct storage's walk.
    backend = run_family(DoubleBackend)
    assert {r.clause_id: r.outcome for r in backend.results} == _expected_outcomes(DoubleBackend.capabilities)


def test_in_memory_storage_passes_every_ancestry_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    outcomes = {r.clause_id: r.outcome for r in backend.results}
    assert outcomes == _expected_outcomes(MemoryBackend.capabilities)
    assert {i for i, outcome in outcomes.items() if outcome is Outcome.SKIPPED} == DURABLE_ONLY
    assert len(outcomes) >= 11


@pytest.mark.sqlite
def test_sqlite_storage_passes_every_ancestry_clause(tmp_path: Path) -> None:
    # Declared, so that no clause of the family is skipped on SQLite.
    needed = {Capability.ANCESTRY, Capability.NESTED, Capability.SHARED, Capability.DURABLE}
    assert needed <= SQLiteBackend.capabilities
    url = f"sqlite:///{tmp_path}/ancestry.db"
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


def test_missing_link_reported_as_root_fails_the_dangling_link_clauses() -> None:
    backend = run_family(MissingLinkIsRoot)
    assert failed(backend) == {
        "ancestry.dangling_link_is_missing",
        "ancestry.walk_from_other_handle",
        "ancestry.dangling_link_kept_as_given",
    }
    message = backend.result("ancestry.dangling_link_is_missing").message
    assert (
        "walk_ancestry_ids(c2) returned [c2, c1, c0] ending root at c0, "
        "expected [c2, c1, c0] ending missing at ghost" in message
    )


def test_looping_on_a_cycle_fails_cycle_is_reported_only() -> None:
    backend = run_family(LoopsOnCycles)
    assert failed(backend) == {"ancestry.cycle_is_reported"}
    message = backend.result("ancestry.cycle_is_reported").message
    assert (
        f"walk_ancestry_ids(A) returned [A, B, A, B, A, B, A, B, ... ({DEFAULT_MAX_DEPTH} items)] ending "
        "depth_limit at B, expected [A, B] ending cycle at A"
    ) in message


def test_walk_that_skips_nested_records_fails_walks_through_nested_only() -> None:
    backend = run_family(WalkSkipsNested)
    assert failed(backend) == {"ancestry.walks_through_nested"}
    message = backend.result("ancestry.walks_through_nested").message
    assert (
        "walk_ancestry_ids(r) returned [r] ending missing at n1, expected [r, n1, n0] ending root at n0"
        in message
    )


def test_ignoring_max_depth_fails_the_depth_clauses() -> None:
    backend = run_family(IgnoresMaxDepth)
    assert failed(backend) == {"ancestry.depth_limit", "ancestry.invalid_max_depth"}
    assert (
        "walk_ancestry_ids(c5, max_depth=1) returned [c5, c4, c3, c2, c1, c0] ending root at c0, "
        "expected [c5] ending depth_limit at c5"
    ) in backend.result("ancestry.depth_limit").message
    assert (
        "walk_ancestry_ids(c1, max_depth=0) returned AncestryWalk("
        in backend.result("ancestry.invalid_max_depth").message
    )


def test_walk_ancestry_oldest_first_fails_every_multi_item_walk() -> None:
    backend = run_family(WalkOldestFirst)
    assert failed(backend) == WALK_ANCESTRY_ORDER_CLAUSES
    message = backend.result("ancestry.walk_to_root").message
    assert (
        "walk_ancestry(c4) returned [c0, c1, c2, c3, c4] ending root at c0, expected [c4, c3, c2, c1, c0]"
        in message
    )


def test_empty_walk_from_an_unknown_id_fails_unknown_start_not_found_only() -> None:
    backend = run_family(UnknownStartIsEmptyWalk)
    caught_only_by(
        backend,
        "ancestry.unknown_start_not_found",
        "walk_ancestry_ids(never-saved) of a checkpoint never saved returned AncestryWalk(",
    )


def test_walk_capped_at_100_records_fails_long_chain_only() -> None:
    backend = run_family(WalkCappedAt100)
    assert failed(backend) == {"ancestry.long_chain"}
    assert (
        "walk_ancestry_ids(c299) returned [c299, c298, c297, c296, c295, c294, c293, c292, ... (100 items)] "
        "ending missing at c199, expected [c299, c298"
    ) in backend.result("ancestry.long_chain").message


def test_max_depth_overflowing_a_64_bit_integer_fails_depth_limit_only() -> None:
    backend = run_family(MaxDepthAsInt64)
    caught_only_by(
        backend,
        "ancestry.depth_limit",
        "walk_ancestry_ids(c5, max_depth=18446744073709551616) raised OverflowError: Python int too large",
    )
