"""A MAF functional workflow with parallel steps on a slow store (imports MAF).

MAF's functional workflows (``@workflow`` / ``@step``) save a checkpoint after every completed
step. Parallel steps (``asyncio.gather``) each build theirs as soon as they complete, continuing
the checkpoint the last finished save returned, so siblings continue the same checkpoint and the
one built last holds every completed step. Since 1.26 each save runs as a task of its own; on
1.23 the step awaits it; in both, a store with latency commits them in another order than they
were built.

:func:`run_parallel_steps` runs ``prepare`` and then ``left``, ``right`` and ``middle`` in
parallel, then ``finish``, which fails the first run (a crash after the parallel steps: no
checkpoint is saved after them). Every save passes through :class:`SlowSaves`, which sleeps a
random delay before delegating and mirrors the checkpoint into MAF's own
``InMemoryCheckpointStorage`` in the same order, so the run ends with the storage and MAF's storage
holding the same checkpoints. Then it asks both for ``get_latest``, and resumes a fresh run from
the storage's answer, counting the completed steps that run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from agent_framework import InMemoryCheckpointStorage, step, workflow

from .scenario import ParallelStepsObservation
from .six_methods import SixMethods

PARALLEL_STEPS = ("left", "right", "middle")
COMPLETED_STEPS = ("prepare", *PARALLEL_STEPS)
"""The steps the first run completes before ``finish`` fails it."""


class SlowSaves(SixMethods):
    """MAF's six methods over a storage; each save first sleeps a random delay (up to
    ``max_delay`` seconds), then goes to MAF's in-memory storage and to the storage."""

    def __init__(self, inner: Any, rng: random.Random, max_delay: float) -> None:
        super().__init__(inner)
        self.mirror = InMemoryCheckpointStorage()
        self._rng = rng
        self._max_delay = max_delay

    async def save(self, checkpoint: Any) -> str:
        await asyncio.sleep(self._rng.uniform(0.0, self._max_delay))
        await self.mirror.save(checkpoint)
        saved: str = await self.inner.save(checkpoint)
        return saved


class FinishFailed(RuntimeError):
    """The first run's ``finish`` step: the crash after the parallel steps."""


@dataclass
class _Journal:
    """What one scenario's steps did. The run's input names it (the input is checkpointed and
    replayed on resume), so a resumed run reaches the same journal without a closure, which MAF
    would count in the workflow's signature."""

    fail_finish: bool = True
    ran: list[str] = field(default_factory=list)


_JOURNALS: dict[str, _Journal] = {}


@step
async def prepare(run: str) -> int:
    _JOURNALS[run].ran.append("prepare")
    return 1


@step
async def left(run: str, value: int) -> int:
    _JOURNALS[run].ran.append("left")
    return value * 2


@step
async def right(run: str, value: int) -> int:
    _JOURNALS[run].ran.append("right")
    return value * 3


@step
async def middle(run: str, value: int) -> int:
    _JOURNALS[run].ran.append("middle")
    return value * 5


@step
async def finish(run: str, total: int) -> int:
    journal = _JOURNALS[run]
    journal.ran.append("finish")
    if journal.fail_finish:
        raise FinishFailed(f"run {run}: finish fails the first run")
    return total


def _definition(name: str, *, starts_parallel: bool) -> Any:
    if starts_parallel:

        @workflow(name=name)
        async def parallel_first(run: str) -> int:
            parts = await asyncio.gather(left(run, 1), right(run, 1), middle(run, 1))
            return await finish(run, sum(parts))

        return parallel_first

    @workflow(name=name)
    async def parallel_steps(run: str) -> int:
        value = await prepare(run)
        parts = await asyncio.gather(left(run, value), right(run, value), middle(run, value))
        return await finish(run, sum(parts))

    return parallel_steps


async def run_parallel_steps(
    storage: Any, workflow_name: str, *, seed: int, max_delay: float = 0.005, starts_parallel: bool = False
) -> ParallelStepsObservation:
    """Run the scenario once on ``storage`` (see the module docstring); ``starts_parallel`` leaves
    ``prepare`` out, so the parallel steps' checkpoints are the run's first (no previous id)."""
    run = uuid.uuid4().hex
    journal = _JOURNALS[run] = _Journal()
    try:
        slow = SlowSaves(storage, random.Random(seed), max_delay)  # noqa: S311 - delays, not secrets
        first = _definition(workflow_name, starts_parallel=starts_parallel).build(checkpoint_storage=slow)
        with contextlib.suppress(FinishFailed):
            await first.run(run)
        saved = len(await slow.mirror.list_checkpoint_ids(workflow_name=workflow_name))
        latest = await storage.get_latest(workflow_name=workflow_name)
        maf_latest = await slow.mirror.get_latest(workflow_name=workflow_name)
        latest_id = None if latest is None else latest.checkpoint_id
        rerun: tuple[str, ...] = ()
        if latest_id is not None:
            journal.fail_finish = False
            journal.ran.clear()
            definition = _definition(workflow_name, starts_parallel=starts_parallel)
            resumed = definition.build(checkpoint_storage=storage)
            await resumed.run(checkpoint_id=latest_id)
            rerun = tuple(name for name in journal.ran if name in COMPLETED_STEPS)
        return ParallelStepsObservation(
            saved=saved,
            latest_id=latest_id,
            runner_latest_id=None if maf_latest is None else maf_latest.checkpoint_id,
            rerun=rerun,
        )
    finally:
        del _JOURNALS[run]
