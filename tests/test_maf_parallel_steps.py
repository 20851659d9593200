"""MAF functional workflows with parallel steps on a slow store: after a run that fails past its
parallel steps, ``get_latest`` must name the checkpoint MAF's ``InMemoryCheckpointStorage`` would
resume from, and resuming from it must run no completed step again
(``MafRunnerProfile.run_parallel_steps``, ``conformance/_maf_parallel_steps.py``).

Saves that reach the storage in the order MAF built the checkpoints agree with MAF on every
backend, and so do saves delayed at random *in front of* the storage (a wrapper that sleeps before
it delegates), which reach it in another order: the parallel steps' checkpoints all continue the
same checkpoint and none continues them, so they are rivals, and the one with the newest timestamp
(the one MAF built last, which holds every completed step) is the latest (docs/contract.md,
"Latest"). Parallel steps that are a run's first build checkpoints that continue none: roots
committed one after another at the end of the order rival the same way. Through a fenced handle
(``storage.fenced()``) the same runs commit every step and resume where MAF would: the siblings
continue the handle's own line, so each is fenced on the handle's own last commit rather than on
the checkpoint a sibling has already moved on from.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage
from conftest import BACKENDS, StorageMaker

from conformance._maf_parallel_steps import run_parallel_steps
from conformance.maf_profile import MafRunnerProfile

pytestmark = pytest.mark.maf

PROFILE = MafRunnerProfile()
SEEDS = range(8)
"""Eight runs: with three parallel steps, commit order follows build order in about a third of
the runs with delays, so eight runs that all agree by chance are rarer than 1 in 5,000."""


@pytest.fixture(params=("memory", "sqlite", "redis", "s3", "postgres"))
async def storage_maker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageMaker]:
    """One fresh store per backend (conftest marks each test with its backend by this name)."""
    async with BACKENDS[request.param].fresh_store(tmp_path) as maker:
        yield maker


async def _disagreements(storage: Any, max_delay: float, workflow_prefix: str = "parallel") -> list[str]:
    found = []
    for seed in SEEDS:
        workflow_name = f"{workflow_prefix}-{seed}"
        run = await PROFILE.run_parallel_steps(storage, workflow_name, seed=seed, max_delay=max_delay)
        assert run.saved == 4, run  # prepare and the three parallel steps
        if run.latest_id != run.runner_latest_id or run.rerun:
            found.append(
                f"run {seed}: get_latest {run.latest_id!r}, MAF's {run.runner_latest_id!r}, "
                f"resume ran {list(run.rerun)} again"
            )
    return found


async def test_saves_in_build_order_resume_where_maf_would(storage: Any) -> None:
    assert await _disagreements(storage, max_delay=0.0) == []


async def test_saves_delayed_in_front_of_the_storage_resume_where_maf_would(storage: Any) -> None:
    assert await _disagreements(storage, max_delay=0.005) == []


async def test_mafs_own_storage_resumes_where_it_would_with_delayed_saves() -> None:
    """The scenario's reference: MAF's in-memory storage as the storage under test agrees with
    itself and resumes without running a completed step again."""
    assert await _disagreements(InMemoryCheckpointStorage(), max_delay=0.005) == []


async def test_parallel_steps_save_through_a_fenced_handle(storage: Any) -> None:
    """The siblings continue the checkpoint ``prepare`` saved, on the handle's own line: each is
    fenced on the handle's last commit, so all commit, in whatever order they reach it."""
    fenced = storage.fenced()
    assert await _disagreements(fenced, max_delay=0.0, workflow_prefix="in-order") == []
    assert await _disagreements(fenced, max_delay=0.005, workflow_prefix="delayed") == []


async def test_parallel_first_steps_delayed_in_front_of_the_storage_resume_where_maf_would(
    storage: Any,
) -> None:
    found = []
    for seed in SEEDS:
        run = await run_parallel_steps(storage, f"parallel-first-{seed}", seed=seed, starts_parallel=True)
        assert run.saved == 3, run
        if run.latest_id != run.runner_latest_id or run.rerun:
            found.append(f"run {seed}: get_latest {run.latest_id!r}, MAF's {run.runner_latest_id!r}")
    assert found == []
