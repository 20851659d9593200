"""model: generated operation programs answer exactly as the contract's reference model does.

The other families check scenarios someone thought of. This one draws programs from a seed
(:mod:`conformance.model.program`), runs them on the storage and on a reference model written from
docs/contract.md alone (:mod:`conformance.model.spec`), and compares every answer: values with
their types, errors, order, isolation. A failure names the seed, the op, what the contract says and
what the storage did, a shrunk program and a runnable Python reproducer.

Seed and size: ``--model-seed`` / ``--model-budget`` (``StorageTarget.model_seed`` /
``model_budget``, the pytest base class's ``model_seed`` / ``model_budget``).
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

from storages.contract import Capability

from ..clause import clause, fail, not_applicable
from ..context import ClauseContext
from ..model import DEFAULT_SEED, Budget, parse_budget
from ..model.check import Failure, reproducer, run_program, shrink, summary
from ..model.execute import Subject
from ..model.program import Generator, Op, Settings, retag

LONG_HISTORY = 1_030
"""Checkpoints in the long program's chain: past 1,000, where listings page, batches split and
scripts meet their limits on every built-in backend."""

SHRINK_ATTEMPTS = 40
SHRINK_SECONDS = 10.0

_CLAUSE_SEEDS = {"sequential": 1, "handles": 2, "concurrent": 3, "long": 4}
_TIMEOUTS = {"sequential": 600.0, "handles": 600.0, "concurrent": 600.0, "long": 900.0}


def _seed(ctx: ClauseContext, label: str) -> int:
    base = ctx.target.model_seed if ctx.target.model_seed is not None else DEFAULT_SEED
    return base * 10 + _CLAUSE_SEEDS[label]


def _budget(ctx: ClauseContext) -> Budget:
    try:
        return parse_budget(ctx.target.model_budget)
    except ValueError as exc:
        fail(str(exc))


def _refuse_ttl(ctx: ClauseContext, timeout: float) -> None:
    """A time to live longer than the clause may run cannot expire anything it saves: the model
    (which keeps everything) applies. A shorter one would expire records mid-program."""
    if not ctx.has(Capability.TTL):
        return
    ttl = getattr(ctx.storage, "ttl", None)
    seconds = ttl.total_seconds() if isinstance(ttl, datetime.timedelta) else ttl
    limit = timeout * ctx.target.timeout_factor
    if not isinstance(seconds, (int, float)) or seconds <= limit:
        not_applicable(
            f"the storage's ttl ({seconds!r} s) could expire checkpoints within the {limit:g} s this "
            "clause may run, and the model keeps everything; the expiry family checks expiry (run "
            "this family with a ttl above that, or none)"
        )


async def _check(
    ctx: ClauseContext,
    label: str,
    settings: Settings,
    draw: Callable[[Generator], list[Op]],
    seconds: float | None = None,
) -> None:
    _refuse_ttl(ctx, _TIMEOUTS[label])
    settings.load_signature = ctx.accepts_keyword("load", "expected_graph_signature_hash")
    seed = _seed(ctx, label)
    tag = uuid.uuid4().hex[:6]
    generator = Generator(settings, seed, tag)
    ops = draw(generator)
    subject = _subject(ctx, generator.names.prefix)
    _track(ctx, generator)
    nested = Capability.NESTED in settings.capabilities
    deadline = None if seconds is None else time.monotonic() + seconds
    failure = await run_program(subject, ops, nested=nested, deadline=deadline)
    if failure is None or ctx.watch.stuck:
        return  # a stuck storage is reported by the runner; replaying programs on it proves nothing
    shrunk, found = ops[: failure.index + 1], failure
    if label != "long" and all(op.kind != "concurrent" for op in shrunk[:-1]):
        shrunk, found = await _shrunk(ctx, settings, shrunk, failure, tag, nested)
    seed_option = ctx.target.model_seed if ctx.target.model_seed is not None else DEFAULT_SEED
    header = (
        f"model.{label}: seed {seed_option} (--model-seed {seed_option}); the storage and the contract "
        f"first disagreed at op {failure.index + 1} of {len(ops)}"
    )
    code = reproducer(shrunk, found, ctx.target.checkpoint_class, header)
    fail(
        f"{header}:\n  {found.problem}\n"
        f"shrunk to {len(shrunk)} op(s):\n{summary(shrunk)}\n"
        f"reproducer:\n{code}"
    )


def _subject(ctx: ClauseContext, prefix: str) -> Subject:
    rebuild = ctx.rebuilder()

    async def reopen() -> Any:
        return await ctx.rebuild()

    return Subject(
        ctx.storage,
        ctx.other_handle,
        reopen if rebuild is not None else None,
        ctx.target.checkpoint_class,
        prefix,
        aliases=ctx.has(Capability.NESTED),
    )


def _track(ctx: ClauseContext, generator: Generator) -> None:
    for name in [*generator.workflows, *generator.children]:
        ctx.track_workflow(name)


async def _shrunk(
    ctx: ClauseContext, settings: Settings, ops: list[Op], failure: Failure, tag: str, nested: bool
) -> tuple[list[Op], Failure]:
    started = time.monotonic()

    async def replay(candidate: list[Op]) -> Failure | None:
        if time.monotonic() - started > SHRINK_SECONDS:
            return None
        fresh = uuid.uuid4().hex[:6]
        renamed = retag(candidate, tag, fresh)
        prefix = f"ck-m{fresh}-"
        for op in renamed:
            for call in [op, *op.round]:
                workflow = call.params.get("workflow")
                draft = call.params.get("draft")
                for name in (workflow, getattr(draft, "workflow_name", None)):
                    if isinstance(name, str):
                        ctx.track_workflow(name)

        async def reopen() -> Any:
            return await ctx.rebuild()

        rebuild = reopen if settings.rebuild else None
        handle = await _fresh_handle(ctx)
        subject = Subject(
            handle, ctx.other_handle, rebuild, ctx.target.checkpoint_class, prefix, aliases=nested
        )
        found = await run_program(subject, renamed, nested=nested)
        if found is None:
            return None
        # Report the program as it was drawn (the original names): same shape, same indexes.
        problem = found.problem.replace(fresh, tag)
        return Failure(found.index, candidate[found.index], problem, found.observations)

    return await shrink(ops, failure, replay, SHRINK_ATTEMPTS)


async def _fresh_handle(ctx: ClauseContext) -> Any:
    if ctx.has(Capability.SHARED):
        return await ctx.other_handle()
    return ctx.storage


@clause(
    "model.sequential_histories",
    "Generated programs of every declared operation, on one handle, get every answer, error and "
    "type the contract's reference model gives.",
    timeout=_TIMEOUTS["sequential"],
)
async def sequential_histories(ctx: ClauseContext) -> None:
    budget = _budget(ctx).share(0.3)
    settings = Settings(ctx.capabilities)
    await _check(ctx, "sequential", settings, lambda g: g.program(budget.operations), budget.seconds)


@clause(
    "model.handles_and_rebuilds",
    "Generated programs spread over three handles of one store, and over the store rebuilt from its "
    "settings where it is durable, answer as the reference model does.",
    requires=[Capability.SHARED],
    timeout=_TIMEOUTS["handles"],
)
async def handles_and_rebuilds(ctx: ClauseContext) -> None:
    budget = _budget(ctx).share(0.2)
    rebuild = ctx.has(Capability.DURABLE) and ctx.rebuilder() is not None
    settings = Settings(ctx.capabilities, handles=3, rebuild=rebuild)
    await _check(ctx, "handles", settings, lambda g: g.program(budget.operations), budget.seconds)


@clause(
    "model.concurrent_histories_linearize",
    "Calls started together on several handles (racing saves, fenced saves on one head, one id with "
    "two contents, reads and deletes) have answers some real-time order of them explains.",
    timeout=_TIMEOUTS["concurrent"],
)
async def concurrent_histories_linearize(ctx: ClauseContext) -> None:
    budget = _budget(ctx).share(0.2)
    handles = 3 if ctx.has(Capability.SHARED) else 1
    settings = Settings(ctx.capabilities, handles=handles)

    def draw(generator: Generator) -> list[Op]:
        ops: list[Op] = []
        while len(ops) < budget.operations:
            round_op = generator.concurrent_round()
            ops += [round_op, generator.observer(round_op), generator.next_op()]
        return ops

    await _check(ctx, "concurrent", settings, draw, budget.seconds)


@clause(
    "model.long_histories",
    f"A chain of {LONG_HISTORY:,} checkpoints beside a bystander with a colliding name lists, walks, "
    "filters by signature, prunes and deletes as the reference model says.",
    timeout=_TIMEOUTS["long"],
)
async def long_histories(ctx: ClauseContext) -> None:
    # Whole under an operations budget; under a time budget (the default's, on a slow store) it
    # stops where its share of the time runs out, having checked the listing along the way.
    budget = _budget(ctx).share(0.3)
    settings = Settings(ctx.capabilities)
    await _check(ctx, "long", settings, lambda g: list(g.long_program(LONG_HISTORY)), budget.seconds)
