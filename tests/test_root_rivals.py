"""Roots rival at the end of the order (docs/contract.md, "Latest"), on every backend.

Parallel steps that run before a run's first checkpoint build checkpoints with no previous id,
and their saves can commit in any order. The head is then a root, and its rivals are the leaf
roots of its signature committed right before it: the latest is the one with the newest
timestamp, as MAF 1.26 picks it. Any other record (a checkpoint with a previous id, a root some
checkpoint continues, another signature) ends the rivals, so runs that saved more than once
keep commit order whatever their clocks.

Each scenario states its expectations by hand and checks the reference rule
(``storages.backend``) agrees with them, then checks the backend: ``get_latest`` with and without
a signature, ``latest_id`` (the head, what fences compare with), and what ``prune`` keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from storages import WorkflowCheckpoint
from storages.backend import RIVALS_LIMIT, latest_record, resume_point, rivals_of
from storages.engine import CheckpointStore

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Save:
    """One save: an id, what it continues, its signature and its timestamp in seconds."""

    name: str
    previous: str | None = None
    signature: str = "sig"
    second: int = 0


@dataclass(frozen=True)
class Scenario:
    saves: tuple[Save, ...]
    latest: str
    """What get_latest() returns."""
    head: str
    """What latest_id() returns: the head, whatever the timestamps."""
    kept_by_prune: frozenset[str]
    """What prune(keep_last=1) keeps."""
    deleted: tuple[str, ...] = ()
    """Deleted after the saves, before anything is read."""
    latest_by_signature: dict[str, str] = field(default_factory=dict)


def _roots(names: str, seconds: Sequence[int]) -> tuple[Save, ...]:
    return tuple(Save(name, second=second) for name, second in zip(names.split(), seconds, strict=True))


SCENARIOS: dict[str, Scenario] = {
    "parallel first steps committed out of build order": Scenario(
        saves=_roots("r2 r3 r1", (2, 3, 1)),
        latest="r3",
        head="r1",
        kept_by_prune=frozenset({"r1", "r2", "r3"}),
    ),
    "two parallel roots, the one built last committed first": Scenario(
        saves=_roots("b a", (9, 1)), latest="b", head="a", kept_by_prune=frozenset({"a", "b"})
    ),
    "equal timestamps go to the root committed last": Scenario(
        saves=_roots("p q r", (5, 5, 5)), latest="r", head="r", kept_by_prune=frozenset({"p", "q", "r"})
    ),
    "a run that saved twice keeps commit order against a newer clock": Scenario(
        saves=(Save("old", second=50), Save("old-2", "old", second=51), Save("new", second=1)),
        latest="new",
        head="new",
        kept_by_prune=frozenset({"new"}),
    ),
    "a checkpoint with a previous id ends the roots": Scenario(
        saves=(
            Save("a0", second=1),
            Save("stray", second=90),
            Save("a1", "a0", second=2),
            Save("b1", second=3),
            Save("b2", second=4),
        ),
        latest="b2",
        head="b2",
        kept_by_prune=frozenset({"b1", "b2"}),
    ),
    "a continued root ends the roots": Scenario(
        saves=(
            Save("solo", second=99),
            Save("a1", "a0", second=2),
            Save("a0", second=1),
            Save("b1", second=3),
            Save("b2", second=4),
        ),
        latest="b2",
        head="b2",
        kept_by_prune=frozenset({"b1", "b2"}),
    ),
    "a root whose successor is deleted is a leaf again": Scenario(
        saves=(
            Save("solo", second=99),
            Save("a0", second=1),
            Save("a1", "a0", second=2),
            Save("b1", second=3),
            Save("b2", second=4),
        ),
        deleted=("a1",),
        latest="solo",
        head="b2",
        kept_by_prune=frozenset({"solo", "a0", "b1", "b2"}),
    ),
    "a root continued out of order is no rival": Scenario(
        saves=(
            Save("x1", "x0", second=3),
            Save("y", second=9),
            Save("x0", second=1),
        ),
        latest="x1",
        head="x1",
        kept_by_prune=frozenset({"x1"}),
    ),
    "another signature ends the roots": Scenario(
        saves=(
            Save("s1", second=9),
            Save("o", signature="other", second=5),
            Save("s2", second=1),
        ),
        latest="s2",
        head="s2",
        kept_by_prune=frozenset({"s2"}),
        latest_by_signature={"sig": "s2", "other": "o"},
    ),
    "a signature's head is its newest root, with the roots before it": Scenario(
        saves=(
            Save("s1", second=9),
            Save("s2", second=1),
            Save("o", signature="other", second=5),
        ),
        latest="o",
        head="o",
        kept_by_prune=frozenset({"o"}),
        latest_by_signature={"sig": "s1", "other": "o"},
    ),
    "deleting the newest root leaves the roots before it rivals": Scenario(
        saves=_roots("r1 r2 r3", (1, 3, 2)),
        deleted=("r3",),
        latest="r2",
        head="r2",
        kept_by_prune=frozenset({"r1", "r2"}),
    ),
    "siblings of a root's successor still rival by timestamp": Scenario(
        saves=(
            Save("p", second=0),
            Save("c2", "p", second=2),
            Save("c1", "p", second=1),
        ),
        latest="c2",
        head="c1",
        kept_by_prune=frozenset({"c1", "c2"}),
    ),
    f"only the {RIVALS_LIMIT} roots committed last rival": Scenario(
        saves=(
            Save("beyond", second=10_000),
            *(Save(f"r{n:02d}", second=n) for n in range(RIVALS_LIMIT)),
            Save("head", second=RIVALS_LIMIT // 2),
        ),
        latest=f"r{RIVALS_LIMIT - 1:02d}",
        head="head",
        kept_by_prune=frozenset({"head", *(f"r{n:02d}" for n in range(RIVALS_LIMIT))}),
    ),
}


def _checkpoint(workflow: str, save: Save) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow,
        save.signature,
        checkpoint_id=f"{workflow}-{save.name}",
        previous_checkpoint_id=None if save.previous is None else f"{workflow}-{save.previous}",
        timestamp=(_EPOCH + timedelta(seconds=save.second)).isoformat(),
    )


def _reference(scenario: Scenario, signature: str | None) -> tuple[str | None, str | None]:
    """(latest, head) by storages.backend's rule, as short names."""
    records = [_checkpoint("w", save) for save in scenario.saves if save.name not in scenario.deleted]
    head = latest_record(records, signature)
    if head is None:
        return None, None
    latest = resume_point([*rivals_of(records, head), head])
    return latest.checkpoint_id.removeprefix("w-"), head.checkpoint_id.removeprefix("w-")


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_reference_rule_gives_each_scenarios_answers(name: str) -> None:
    scenario = SCENARIOS[name]
    assert _reference(scenario, None) == (scenario.latest, scenario.head)
    for signature, latest in scenario.latest_by_signature.items():
        assert _reference(scenario, signature)[0] == latest


@pytest.mark.parametrize("name", SCENARIOS)
async def test_latest_head_and_prune_follow_the_roots_rule(storage: CheckpointStore, name: str) -> None:
    scenario = SCENARIOS[name]
    workflow = f"roots-{sorted(SCENARIOS).index(name)}"
    for save in scenario.saves:
        await storage.save(_checkpoint(workflow, save))
    for deleted in scenario.deleted:
        assert await storage.delete(f"{workflow}-{deleted}")

    def short(checkpoint_id: str | None) -> str | None:
        return None if checkpoint_id is None else checkpoint_id.removeprefix(f"{workflow}-")

    latest = await storage.get_latest(workflow_name=workflow)
    assert latest is not None
    assert short(latest.checkpoint_id) == scenario.latest
    for signature, expected in scenario.latest_by_signature.items():
        by_signature = await storage.get_latest(workflow_name=workflow, graph_signature_hash=signature)
        assert by_signature is not None
        assert short(by_signature.checkpoint_id) == expected, signature
    assert short(await storage.latest_id(workflow_name=workflow)) == scenario.head

    await storage.prune(workflow_name=workflow, keep_last=1)
    kept = {short(i) for i in await storage.list_checkpoint_ids(workflow_name=workflow)}
    assert kept == scenario.kept_by_prune
    after_prune = await storage.get_latest(workflow_name=workflow)
    assert after_prune is not None
    assert short(after_prune.checkpoint_id) == scenario.latest
