"""The scale family passes a store whose latest and walks are constant round trips, and catches a
latest that scans the history (counted, and timed where nothing is counted), a store that drops old
checkpoints to make room, and a hop-by-hop walk."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from conformance import BackendReport, Outcome
from storages.backend import CheckpointRecord, StoredBody, WalkRecords
from storages.contract import CheckpointID

from . import support
from .double import DoubleBackend, DoubleState, DoubleStorage, double_target
from .support import caught_only_by, failed

FAMILY = "scale"


def run_family(storage_class: type[DoubleBackend], **target: Any) -> BackendReport:
    return support.run_family(FAMILY, double_target(storage_class, **target))


class LatestReadsEveryBody(DoubleBackend):
    """Finds the latest by reading each checkpoint of the workflow in turn (one request each)."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        found = None
        for checkpoint_id in await self.list_ids(workflow_name, graph_signature_hash):
            stored = await self.load(checkpoint_id)
            if stored is not None:
                found = stored
        return found


class FilteredLatestReadsEveryBody(DoubleBackend):
    """Answers get_latest(graph_signature_hash=...) by reading bodies newest first until one matches,
    and reads them all before choosing."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        if graph_signature_hash is None:
            return await super().latest(workflow_name, None)
        matching = None
        for checkpoint_id in await self.list_ids(workflow_name, None):
            stored = await self.load(checkpoint_id)
            if stored is None:
                continue
            if (await self.decode(stored)).graph_signature_hash == graph_signature_hash:
                matching = stored
        return matching


class LatestDecodesEverything(DoubleStorage):
    """get_latest() is the last of list_checkpoints(): one request, but every body decoded."""

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        listed = await self.list_checkpoints(workflow_name=workflow_name)
        return listed[-1] if listed else None


class WalksHopByHop(DoubleBackend):
    """Walks by fetching one record per hop."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            row = self._read().rows.get(current)
            if row is None:
                break
            links[current] = row.record.previous_checkpoint_id
            bodies[current] = row.record.body
            current = row.record.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset())


class LoadsEachHop(DoubleBackend):
    """Walks by loading one record per hop, each a call of its own load primitive (a round trip)."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        current: CheckpointID | None = checkpoint_id
        while current is not None and current not in links and len(links) < max_depth:
            stored = await self.load(current)
            if stored is None or stored.entry is None:
                break
            links[current] = stored.entry.previous_checkpoint_id
            bodies[current] = stored.body
            current = stored.entry.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset())


class SpinsCycles(DoubleBackend):
    """Walks a hop at a time without remembering where it has been: a cycle is followed round and
    round until max_depth hops (the links it returns are right; only the cost tells)."""

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        current: CheckpointID | None = checkpoint_id
        for _ in range(max_depth):
            if current is None:
                break
            stored = await self.load(current)
            if stored is None or stored.entry is None:
                break
            links[current] = stored.entry.previous_checkpoint_id
            bodies[current] = stored.body
            current = stored.entry.previous_checkpoint_id
        return WalkRecords(links, bodies, frozenset())


class KeepsTheNewestThousand(DoubleBackend):
    """Drops the oldest records once it holds 1,000, as an LRU cache or a capped list would."""

    def _write_family(self, state: DoubleState, records: Sequence[CheckpointRecord]) -> None:
        super()._write_family(state, records)
        while len(state.rows) > 1000:
            del state.rows[next(iter(state.rows))]
        self._commit(state)


def test_a_constant_cost_double_passes_counted_and_timed() -> None:
    counted = run_family(DoubleBackend)
    assert all(r.outcome is Outcome.PASSED for r in counted.results), counted.failures
    timed = run_family(DoubleBackend, round_trips=None)
    assert timed.result("scale.latest_is_constant_cost").outcome is Outcome.PASSED
    # Uncounted by the target, the engine's backend calls are counted instead.
    assert timed.result("scale.walk_is_one_round_trip").outcome is Outcome.PASSED
    assert timed.result("scale.cycle_walk_stops_at_the_cycle").outcome is Outcome.PASSED


@pytest.mark.parametrize(
    ("mutant", "target", "clause_id", "says"),
    [
        (LatestReadsEveryBody, {}, "scale.latest_is_constant_cost", "round trips at 60 checkpoints"),
        (
            FilteredLatestReadsEveryBody,
            {},
            "scale.latest_is_constant_cost",
            "get_latest(graph_signature_hash=...)",
        ),
        (
            LatestDecodesEverything,
            {"round_trips": None},
            "scale.latest_is_constant_cost",
            "records at 60 checkpoints",
        ),
        (WalksHopByHop, {}, "scale.walk_is_one_round_trip", "a hop at a time"),
        (LoadsEachHop, {"round_trips": None}, "scale.walk_is_one_round_trip", "backend calls at depth 80"),
        (KeepsTheNewestThousand, {}, "scale.history_is_kept", "lacks"),
    ],
)
def test_scale_mutants_are_caught(
    mutant: type[DoubleBackend], target: dict[str, Any], clause_id: str, says: str
) -> None:
    caught_only_by(run_family(mutant, **target), clause_id, says)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ({}, "10000 round trips with max_depth=10,000"),
        ({"round_trips": None}, "backend calls with max_depth=10,000"),
    ],
    ids=["counted-by-the-target", "counted-by-the-kit"],
)
def test_a_walk_spinning_a_cycle_to_max_depth_is_caught_by_its_count(
    target: dict[str, Any], says: str
) -> None:
    # A walk a hop at a time, so walk_is_one_round_trip fails too; the cycle clause says why it costs.
    backend = run_family(SpinsCycles, **target)
    assert "scale.cycle_walk_stops_at_the_cycle" in failed(backend)
    assert says in backend.result("scale.cycle_walk_stops_at_the_cycle").message
