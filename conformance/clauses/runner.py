"""runner: a superstep runner with a sub-workflow restores, rejects changed graphs, and keeps chains whole.

These clauses drive a whole runner against the storage (the target's ``runner`` profile, or the
reference :class:`~conformance.scenario.ScenarioRunner`) and check what a user of MAF would see:
the sub-workflow's mid-run state survives a parent restore, a changed graph is refused without
touching the store, the chains of previous ids stay whole across the fork a restore creates, and
resuming from ``get_latest()`` continues that fork.

The clauses use MAF's six methods, so they run against every storage; extensions are used when
declared (``include_nested`` listings, ``walk_ancestry_ids``) to check more. One clause needs a
capability: after a parent restore the child's next checkpoint points at the id of the child
checkpoint embedded in the restored parent checkpoint (MAF's protocol), and only a storage that
stores embedded checkpoints as records of their own (``nested``) can resolve that id. So
``runner.chain_whole_after_parent_restore`` requires ``nested``: a storage without it is reported
as skipped (it cannot keep that chain whole, and says so by not declaring ``nested``), while a
storage that declares ``nested`` and still leaves the link dangling fails.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storages.contract import AncestryEnd, Capability, CheckpointID
from storages.fencing import FencedStorage

from ..clause import ClauseFailure, RunnerFinding, clause, ensure, ensure_runner, fail
from ..context import ClauseContext
from ..scenario import ChildStorageMode, GraphChange, RunnerProfile, RunObservation, Scenario, ScenarioRunner
from ..six_methods import SixMethods
from ._maf import is_not_found

_SUPERSTEPS = 4
"""Supersteps of the uninterrupted run each clause starts with."""
_RESTORE_AT = 2
"""The iteration of the mid-run parent checkpoint the clauses restore."""
_WALK_LIMIT = 10_000


def runner_profile(ctx: ClauseContext) -> RunnerProfile:
    """The target's runner, or the reference driver building the target's checkpoint class."""
    runner = ctx.target.runner
    return runner if runner is not None else ScenarioRunner(ctx.target.checkpoint_class)


class _Story:
    """One parent workflow and its sub-workflow, with names no other clause uses."""

    def __init__(self, ctx: ClauseContext, child_storage: ChildStorageMode) -> None:
        self.ctx = ctx
        self.profile = runner_profile(ctx)
        self.child_storage = child_storage
        self.parent_workflow = ctx.workflow_name("parent")
        self.child_workflow = ctx.workflow_name("child")

    async def run(
        self,
        supersteps: int,
        *,
        resume_from: str | None = None,
        changed_graph: GraphChange = GraphChange.NONE,
    ) -> RunObservation:
        return await self.profile.run(
            Scenario(
                storage=self.ctx.storage,
                parent_workflow=self.parent_workflow,
                child_workflow=self.child_workflow,
                supersteps=supersteps,
                child_storage=self.child_storage,
                resume_from=resume_from,
                changed_graph=changed_graph,
            )
        )

    async def fresh_run(self) -> RunObservation:
        """The uninterrupted run, checked for what the other checks rely on."""
        run = await self.run(_SUPERSTEPS)
        progress = list(run.child_progress)
        ensure(
            len(progress) == _SUPERSTEPS and all(b > a for a, b in itertools.pairwise(progress)),
            f"runner {self.profile.name!r}: a fresh run of {_SUPERSTEPS} supersteps reported child progress "
            f"{progress}; expected one strictly growing value per superstep",
        )
        if self.child_storage is not ChildStorageMode.NONE:
            ensure(
                run.child_saved,
                f"runner {self.profile.name!r}: with the child sharing the storage, the child saved no "
                "checkpoint of its own",
            )
        return run

    async def mid_run_checkpoint(self, run: RunObservation) -> str:
        """The parent checkpoint of ``run`` taken after superstep ``_RESTORE_AT``."""
        iterations: list[int] = []
        for checkpoint_id in run.parent_saved:
            checkpoint = await self.ctx.storage.load(checkpoint_id)
            if checkpoint.iteration_count == _RESTORE_AT:
                return checkpoint_id
            iterations.append(checkpoint.iteration_count)
        fail(
            f"runner {self.profile.name!r} saved parent checkpoints {list(run.parent_saved)} with iteration "
            f"counts {iterations}, none at iteration {_RESTORE_AT} to restore"
        )

    def mode(self) -> str:
        return f"child storage {self.child_storage}"


async def _loads(storage: Any, checkpoint_id: str) -> Any | None:
    """The checkpoint stored under ``checkpoint_id``, or None if the storage says it has none."""
    try:
        return await storage.load(checkpoint_id)
    except Exception as exc:
        if is_not_found(exc):
            return None
        raise


@clause(
    "runner.nested_state_survives_parent_restore",
    "After the parent is restored from a mid-run checkpoint, the sub-workflow continues from its mid-run "
    "state (as an uninterrupted run did), not from empty, whether or not it saves on its own.",
)
async def nested_state_survives_parent_restore(ctx: ClauseContext) -> None:
    for mode in (ChildStorageMode.NONE, ChildStorageMode.SHARED):
        story = _Story(ctx, mode)
        fresh = await story.fresh_run()
        mid = await story.mid_run_checkpoint(fresh)
        resumed = await story.run(_SUPERSTEPS - _RESTORE_AT, resume_from=mid)
        expected = list(fresh.child_progress[_RESTORE_AT:])
        got = list(resumed.child_progress)
        if got == expected:
            continue
        if got == list(fresh.child_progress[: len(got)]):
            why = "the child restarted from empty instead of from the state embedded in that checkpoint"
        elif got and got[0] > fresh.child_progress[-1]:
            why = "the child continued from a later state than the one embedded in that checkpoint"
        else:
            why = "the child did not continue from the state embedded in that checkpoint"
        fail(
            f"({story.mode()}) after restoring parent checkpoint {mid!r} (iteration {_RESTORE_AT} of "
            f"{_SUPERSTEPS}), the child's progress over the next {len(expected)} supersteps was {got}, "
            f"expected {expected} as in the uninterrupted run: {why}"
        )


@dataclass
class _Snapshot:
    """What a rejected restore must leave as it was: listings, latest and bodies of both workflows."""

    ids: dict[str, list[str]] = field(default_factory=dict)
    latest: dict[str, str | None] = field(default_factory=dict)
    bodies: dict[str, Any] = field(default_factory=dict)


async def _snapshot(ctx: ClauseContext, workflows: tuple[str, ...]) -> _Snapshot:
    storage = ctx.storage
    # Nested records (the child states embedded in parent checkpoints) are compared too, when listable.
    listing: dict[str, Any] = {"include_nested": True} if ctx.has(Capability.NESTED) else {}
    snapshot = _Snapshot()
    for workflow in workflows:
        ids = list(await storage.list_checkpoint_ids(workflow_name=workflow, **listing))
        snapshot.ids[workflow] = ids
        latest = await storage.get_latest(workflow_name=workflow)
        snapshot.latest[workflow] = None if latest is None else latest.checkpoint_id
        for checkpoint_id in ids:
            snapshot.bodies[checkpoint_id] = await storage.load(checkpoint_id)
    return snapshot


async def _changed_graph_is_rejected(ctx: ClauseContext, change: GraphChange) -> None:
    story = _Story(ctx, ChildStorageMode.SHARED)
    fresh = await story.fresh_run()
    mid = await story.mid_run_checkpoint(fresh)
    workflows = (story.parent_workflow, story.child_workflow)
    before = await _snapshot(ctx, workflows)
    what = f"restoring parent checkpoint {mid!r} with a changed {change} graph"
    try:
        resumed = await story.run(_SUPERSTEPS - _RESTORE_AT, resume_from=mid, changed_graph=change)
    except Exception as exc:
        ensure(
            story.profile.is_signature_rejection(exc),
            f"{what} raised {type(exc).__name__}: {exc}; expected runner {story.profile.name!r}'s "
            "graph signature error",
        )
    else:
        fail(
            f"{what} was not rejected: the run continued and saved parent checkpoints "
            f"{list(resumed.parent_saved)} and child checkpoints {list(resumed.child_saved)}"
        )
    after = await _snapshot(ctx, workflows)
    for workflow in workflows:
        added = [i for i in after.ids[workflow] if i not in before.ids[workflow]]
        removed = [i for i in before.ids[workflow] if i not in after.ids[workflow]]
        ensure(
            after.ids[workflow] == before.ids[workflow],
            f"{what} was rejected but changed the ids listed for workflow {workflow!r}: "
            f"added {added}, removed {removed}, now {after.ids[workflow]}",
        )
        ensure(
            after.latest[workflow] == before.latest[workflow],
            f"{what} was rejected but get_latest(workflow_name={workflow!r}) went from "
            f"{before.latest[workflow]!r} to {after.latest[workflow]!r}",
        )
    changed = [i for i, checkpoint in before.bodies.items() if after.bodies[i] != checkpoint]
    ensure(not changed, f"{what} was rejected but load() now returns different content for {changed}")


@clause(
    "runner.changed_parent_graph_is_rejected",
    "Restoring a parent checkpoint into a changed parent graph fails with the runner's graph signature "
    "error and leaves the storage untouched (listings, latest and bodies of both workflows).",
)
async def changed_parent_graph_is_rejected(ctx: ClauseContext) -> None:
    await _changed_graph_is_rejected(ctx, GraphChange.PARENT)


@clause(
    "runner.changed_child_graph_is_rejected",
    "Restoring a parent checkpoint when only the sub-workflow's graph changed fails with the runner's "
    "graph signature error and leaves the storage untouched (listings, latest and bodies of both workflows).",
)
async def changed_child_graph_is_rejected(ctx: ClauseContext) -> None:
    await _changed_graph_is_rejected(ctx, GraphChange.CHILD)


async def _walk_by_load(
    ctx: ClauseContext, start: str, role: str, embedded: list[str], storage: Any = None
) -> list[str]:
    """Follow previous ids from ``start`` with load() on ``storage`` (default: the target's);
    fail on a dangling link or a cycle."""
    storage = ctx.storage if storage is None else storage
    path: list[str] = []
    current: str | None = start
    while current is not None:
        if current in path:
            fail(f"the walk from the newest {role} checkpoint {start!r} loops to {current!r} after {path}")
        if len(path) >= _WALK_LIMIT:
            fail(f"the walk from the newest {role} checkpoint {start!r} is longer than {_WALK_LIMIT} links")
        checkpoint = await _loads(storage, current)
        if checkpoint is None:
            fail(
                f"the walk from the newest {role} checkpoint {start!r} reaches {current!r} after {path}, "
                f"which the storage cannot load{_why_dangling(current, embedded)}"
            )
        path.append(current)
        current = checkpoint.previous_checkpoint_id
    return path


def _embedded_ids(value: Any, workflow: str) -> list[str]:
    """Ids of the checkpoints of ``workflow`` embedded anywhere in ``value``, whatever the runner's layout."""
    found: list[str] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif getattr(item, "workflow_name", None) == workflow and isinstance(
            getattr(item, "checkpoint_id", None), str
        ):
            found.append(item.checkpoint_id)
            pending.append(getattr(item, "state", None))
    return found


def _why_dangling(missing: str, embedded: list[str]) -> str:
    """What the clause can tell about an id that does not resolve, as the end of a sentence."""
    if missing in embedded:
        return (
            ": a dangling link to the child checkpoint embedded in the restored parent checkpoint, "
            "which a storage declaring 'nested' must load by its own id"
        )
    if embedded:
        return (
            f": a dangling link; the child checkpoint embedded in the restored parent checkpoint is "
            f"{embedded[0]!r}, so the child links to an id that was never saved"
        )
    return ": a dangling link"


def _never_saved_because(missing: str, embedded: list[str]) -> str:
    if missing in embedded:
        return (
            ": it is the id of the child checkpoint embedded in the restored parent checkpoint, which the "
            "runner restored the child from and stored only inside the parent's checkpoint, in the parent's "
            "storage; with a storage of its own, the child's chain cannot be whole"
        )
    return ""


@clause(
    "runner.chain_whole_after_parent_restore",
    "After a parent restore, with the child sharing the parent's storage, every checkpoint the parent "
    "and the child save links to a previous id the storage resolves, and walks from the newest reach a root.",
    requires=[Capability.NESTED],
)
async def chain_whole_after_parent_restore(ctx: ClauseContext) -> None:
    story = _Story(ctx, ChildStorageMode.SHARED)
    fresh = await story.fresh_run()
    mid = await story.mid_run_checkpoint(fresh)
    resumed = await story.run(_SUPERSTEPS - 1, resume_from=mid)
    after = f"saved after restoring parent checkpoint {mid!r}"
    runner = f"runner {story.profile.name!r}"
    ensure(resumed.parent_saved, f"{runner} saved no parent checkpoint after restoring {mid!r}")
    ensure(resumed.child_saved, f"{runner}: the child saved no checkpoint after restoring {mid!r}")
    embedded = _embedded_ids((await ctx.storage.load(mid)).state, story.child_workflow)
    # A profile may give the child a storage of its own (RunObservation.child_storage) to show
    # what its runner does then; the child's checkpoints are read from there.
    child_store = resumed.child_storage
    for role, saved in (("parent", resumed.parent_saved), ("child", resumed.child_saved)):
        store = child_store if role == "child" and child_store is not None else ctx.storage
        for checkpoint_id in saved:
            checkpoint = await _loads(store, checkpoint_id)
            if checkpoint is None:
                fail(f"{role} checkpoint {checkpoint_id!r} was {after} but does not load")
            previous = checkpoint.previous_checkpoint_id
            ensure(
                previous is not None,
                f"{role} checkpoint {checkpoint_id!r}, {after}, has no previous id: the {role}'s chain "
                "restarted instead of continuing from the restored state",
            )
            if store is not ctx.storage:
                ensure_runner(
                    previous in fresh.child_saved + resumed.child_saved,
                    f"runner finding, not a storage defect: {role} checkpoint {checkpoint_id!r}, {after} "
                    f"into the child's own storage, points at previous id {previous!r}, which {runner} never "
                    f"saved there{_never_saved_because(previous, embedded)}",
                )
            ensure(
                await _loads(store, previous) is not None,
                f"{role} checkpoint {checkpoint_id!r}, {after}, points at previous id {previous!r}, which "
                f"the storage cannot load{_why_dangling(previous, embedded)}",
            )
    first_parent = await ctx.storage.load(resumed.parent_saved[0])
    ensure(
        first_parent.previous_checkpoint_id == mid,
        f"the parent's first checkpoint {resumed.parent_saved[0]!r} {after} points at "
        f"{first_parent.previous_checkpoint_id!r}, not at the restored checkpoint",
    )
    if child_store is None:
        # Resolving is not enough: a storage that "repairs" the link (to the child's latest, say)
        # grafts the fork onto the abandoned branch, and that chain resolves too.
        first_child = await ctx.storage.load(resumed.child_saved[0])
        ensure(
            first_child.previous_checkpoint_id in embedded,
            f"the child's first checkpoint {resumed.child_saved[0]!r} {after} points at "
            f"{first_child.previous_checkpoint_id!r}, not at the child checkpoint embedded in the restored "
            f"parent ({', '.join(map(repr, embedded)) or 'none found'})",
        )
    for role, newest in (("child", resumed.child_saved[-1]), ("parent", resumed.parent_saved[-1])):
        store = child_store if role == "child" and child_store is not None else ctx.storage
        path = await _walk_by_load(ctx, newest, role, embedded, store)
        if store is not ctx.storage or not ctx.has(Capability.ANCESTRY):
            continue
        walk = await ctx.storage.walk_ancestry_ids(newest)
        ensure(
            walk.end is AncestryEnd.ROOT,
            f"walk_ancestry_ids({newest!r}) from the newest {role} checkpoint ended {walk.end} at "
            f"{walk.end_id!r} after {list(walk.items)}; following previous ids with load() reaches the root "
            f"{path[-1]!r}",
        )
        ensure(
            list(walk.items) == path,
            f"walk_ancestry_ids({newest!r}) returned {list(walk.items)}; following previous ids with load() "
            f"gives {path}",
        )


@clause(
    "runner.resume_from_latest_continues",
    "After a parent restore forks the run, get_latest() returns the fork's newest parent and child "
    "checkpoints, and resuming from the parent's latest continues the child as an uninterrupted run would.",
)
async def resume_from_latest_continues(ctx: ClauseContext) -> None:
    # The fork ends at a lower iteration than the first run did, so "latest" by iteration count,
    # by depth or by anything but commit order picks the abandoned branch.
    story = _Story(ctx, ChildStorageMode.SHARED)
    fresh = await story.fresh_run()
    mid = await story.mid_run_checkpoint(fresh)
    fork = await story.run(1, resume_from=mid)
    ensure(
        fork.parent_saved and fork.child_saved,
        f"runner {story.profile.name!r} saved no parent or no child checkpoint after restoring {mid!r}",
    )
    latest_ids: list[str] = []
    for role, workflow, expected, abandoned in (
        ("parent", story.parent_workflow, fork.parent_saved[-1], fresh.parent_saved[-1]),
        ("child", story.child_workflow, fork.child_saved[-1], fresh.child_saved[-1]),
    ):
        own = fork.child_storage if role == "child" else None
        latest = await (ctx.storage if own is None else own).get_latest(workflow_name=workflow)
        got = None if latest is None else latest.checkpoint_id
        note = " (the newest checkpoint of the abandoned first run)" if got == abandoned else ""
        ensure(
            got == expected,
            f"after restoring parent checkpoint {mid!r} and running one superstep, get_latest("
            f"workflow_name={workflow!r}) returned {got!r}{note}, expected the fork's newest {role} "
            f"checkpoint {expected!r}",
        )
        latest_ids.append(expected)
    latest_id = latest_ids[0]
    resumed = await story.run(1, resume_from=latest_id)
    expected_progress = list(fresh.child_progress[_RESTORE_AT + 1 : _RESTORE_AT + 2])
    ensure(
        list(resumed.child_progress) == expected_progress,
        f"resuming from the latest parent checkpoint {latest_id!r} (iteration {_RESTORE_AT + 1}) gave child "
        f"progress {list(resumed.child_progress)}, expected {expected_progress} as in the uninterrupted run",
    )


_PARALLEL_RUNS = 8
"""With three parallel steps, commit order follows build order in about a third of runs with
delays: eight runs that all agree by chance are rarer than 1 in 5,000."""


@clause(
    "runner.parallel_steps_resume_where_the_runner_would",
    "After parallel steps whose saves reach the storage after random delays, in another order than "
    "they were built (after a first step, and as a run's first steps), get_latest() names the "
    "checkpoint the runner's own storage would, and resuming from it runs no completed step again.",
)
async def parallel_steps_resume_where_the_runner_would(ctx: ClauseContext) -> None:
    profile = runner_profile(ctx)
    if (
        not isinstance(profile, ScenarioRunner)
        and type(profile).run_parallel_steps is RunnerProfile.run_parallel_steps
    ):
        profile = ScenarioRunner(ctx.target.checkpoint_class)  # the runner has no parallel steps
    for starts_parallel in (False, True):
        shape = "parallel-first" if starts_parallel else "parallel"
        for seed in range(_PARALLEL_RUNS):
            workflow = ctx.workflow_name(f"{shape}-{seed}")
            run = await profile.run_parallel_steps(
                ctx.storage, workflow, seed=seed, starts_parallel=starts_parallel
            )
            ensure(run is not None, f"runner {profile.name!r} ran no parallel-steps scenario")
            assert run is not None
            ensure(
                run.latest_id == run.runner_latest_id and not run.rerun,
                f"runner {profile.name!r}, {shape} run {seed} of workflow {workflow!r}: get_latest() "
                f"returned {run.latest_id!r}, the runner's own storage {run.runner_latest_id!r}; resuming "
                f"from it ran {list(run.rerun)} again",
            )


class _HeldSave(SixMethods):
    """MAF's six methods over a storage, holding one parent save until released: the save of a
    run dropped mid-superstep, whose late finalizer runs after a successor has taken over
    (microsoft/agent-framework#9473)."""

    def __init__(self, inner: Any, workflow: str, iteration: int) -> None:
        super().__init__(inner)
        self._workflow = workflow
        self._iteration = iteration
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        # Everything but the six methods (capabilities, extensions a runner's adapter needs, such
        # as LangGraph's pending writes) is the wrapped storage's own.
        return getattr(self.inner, name)

    async def save(self, checkpoint: Any, **options: Any) -> CheckpointID:
        if checkpoint.workflow_name == self._workflow and checkpoint.iteration_count == self._iteration:
            self.holding.set()
            await self.release.wait()
        saved: CheckpointID = await self.inner.save(checkpoint, **options)
        return saved


@clause(
    "runner.stale_run_cannot_clobber_successor",
    "A dropped run's late save, landing after a successor restored an earlier checkpoint and continued, "
    "leaves get_latest() on the successor's branch (with fencing, through FencedStorage); without "
    "fencing a clobber is reported as a finding and the clause skipped.",
)
async def stale_run_cannot_clobber_successor(ctx: ClauseContext) -> None:
    fenced = ctx.has(Capability.FENCING)
    # A handle per run, each on a connection of its own where handles share a store (A may be a
    # zombie on another host).
    run_a_storage: Any = ctx.storage
    run_b_storage: Any = await ctx.other_handle() if ctx.has(Capability.SHARED) else ctx.storage
    if fenced:
        run_a_storage, run_b_storage = FencedStorage(run_a_storage), FencedStorage(run_b_storage)
    story = _Story(ctx, ChildStorageMode.NONE)
    runner = f"runner {story.profile.name!r}"

    def scenario(on: Any, supersteps: int, resume_from: str | None = None) -> Scenario:
        return Scenario(on, story.parent_workflow, story.child_workflow, supersteps, resume_from=resume_from)

    held = _HeldSave(run_a_storage, story.parent_workflow, _SUPERSTEPS)
    stale_run = asyncio.create_task(story.profile.run(scenario(held, _SUPERSTEPS)))
    holding = asyncio.create_task(held.holding.wait())
    await asyncio.wait({stale_run, holding}, return_when=asyncio.FIRST_COMPLETED)
    if not holding.done():
        stale_run.result()  # raises what the run raised
        fail(f"{runner} finished run A without saving a parent checkpoint at iteration {_SUPERSTEPS}")
    try:
        ids = await ctx.storage.list_checkpoint_ids(workflow_name=story.parent_workflow)
        mid = await story.mid_run_checkpoint(RunObservation(tuple(ids), (), ()))
        successor = await story.profile.run(scenario(run_b_storage, 1, resume_from=mid))
        ensure(successor.parent_saved, f"{runner}: run B saved no parent checkpoint after restoring {mid!r}")
    except ClauseFailure:
        held.release.set()
        await stale_run  # a run A that failed says why
        raise
    finally:
        held.release.set()
    expected = successor.parent_saved[-1]
    try:
        await stale_run
    except Exception as exc:  # the reference driver lets a refused save raise; MAF logs it
        refusal: BaseException | None = exc
    else:
        refusal = None
    latest = await ctx.storage.get_latest(workflow_name=story.parent_workflow)
    got = None if latest is None else latest.checkpoint_id
    race = (
        f"run A was dropped before its iteration-{_SUPERSTEPS} save; run B restored {mid!r} (iteration "
        f"{_RESTORE_AT}) and saved {expected!r}; then A's late save ran"
    )
    if got == expected:
        if fenced:
            after = await ctx.storage.list_checkpoint_ids(workflow_name=story.parent_workflow)
            extra = [i for i in after if i not in ids and i not in successor.parent_saved]
            ensure(
                not extra, f"{race}: latest stayed on B's branch, but the refused late save stored {extra}"
            )
        return
    if fenced:
        fail(
            f"{race}: get_latest() is {got!r}, not B's {expected!r}, although the storage declares 'fencing' "
            f"and each run saved through a FencedStorage of its own (A's late save ended with {refusal!r})"
        )
    # Not a defect of what the storage declares, so not a failure (a storage declaring only MAF's
    # six methods passes every clause it can run): a runner finding, with its own status.
    raise RunnerFinding(
        f"the storage does not declare 'fencing': {race}, and get_latest() moved to {got!r}, "
        "A's abandoned branch: the next resume continues the dead run. A storage with 'fencing' used "
        "through FencedStorage refuses that save"
    )
