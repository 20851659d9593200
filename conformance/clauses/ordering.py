"""ordering: latest is the newest commit resolved through its lineage; timestamps decide only
between rivals.

MAF's runner resumes from ``get_latest()``. Timestamps come from the clocks of whichever
process saved, so they tie (same millisecond) and go backwards (clock skew, NTP steps); ids are
random. What a storage can promise is the order its commits happened in, and the lineage the
checkpoints name: a checkpoint that another stored one continues (names as its previous id) is
not where a run resumes, whichever was committed first (MAF 1.26 resolves latest the same way).
Only rivals (leaves that continue one checkpoint, or leaf roots committed one after another at
the end of the order: parallel steps) are ranked by timestamp, as MAF ranks them.

So every clause here gives checkpoints ids and timestamps that sort differently from the commit
order, and the lineage clauses commit checkpoints before the ones they continue. The checkpoints
of the commit-order clauses each continue a checkpoint of their own that is not stored (as after
a prune): none rivals another, so only commit order can rank them.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from storages.contract import Capability

from ..clause import clause, ensure
from ..context import ClauseContext, unstored_parent

_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)

# Commit position -> (id suffix, timestamp rank). In the first three or more, neither the ids nor
# the timestamps sort, ascending or descending, into commit order; in the first five and in all
# six, the last one has neither the greatest nor the smallest id or timestamp.
_SCRAMBLE: tuple[tuple[str, int], ...] = (("c", 3), ("f", 1), ("a", 5), ("d", 0), ("b", 2), ("e", 4))


def _at(rank: int) -> str:
    return (_EPOCH + timedelta(seconds=rank)).isoformat()


class _Run:
    """Checkpoints of one workflow named c0, c1, ... by commit position, for readable messages."""

    def __init__(self, ctx: ClauseContext, label: str = "wf") -> None:
        self.ctx = ctx
        self.workflow = ctx.workflow_name(label)
        self.names: dict[str, str] = {}

    def scrambled(self, count: int) -> list[Any]:
        """``count`` checkpoints whose ids and timestamps sort in an order other than their index."""
        return [self.make(f"{self.workflow}-{suffix}", _at(rank)) for suffix, rank in _SCRAMBLE[:count]]

    def make(self, checkpoint_id: str, timestamp: str, *, root: bool = False) -> Any:
        """A checkpoint continuing one of its own that is not stored, so that it rivals no other
        (a clause links it otherwise by setting its previous id); with ``root``, none."""
        checkpoint = self.ctx.checkpoint(
            self.workflow,
            checkpoint_id=checkpoint_id,
            previous_checkpoint_id=None if root else unstored_parent(checkpoint_id),
            timestamp=timestamp,
            iteration_count=len(self.names),
        )
        self.names[checkpoint_id] = f"c{len(self.names)}"
        return checkpoint

    @property
    def legend(self) -> str:
        return f"(cN is the checkpoint saved N-th, from c0, in workflow {self.workflow!r})"

    def show(self, ids: list[str]) -> str:
        return "[" + ", ".join(self.names.get(i, repr(i)) for i in ids) + "]"

    def name(self, checkpoint: Any) -> str:
        if checkpoint is None:
            return "None"
        return self.names.get(checkpoint.checkpoint_id, repr(checkpoint.checkpoint_id))

    async def expect_latest(self, expected: Any, when: str, storage: Any = None) -> None:
        storage = self.ctx.storage if storage is None else storage
        latest = await storage.get_latest(workflow_name=self.workflow)
        ensure(
            latest is not None and latest.checkpoint_id == expected.checkpoint_id,
            f"get_latest() {when} returned {self.name(latest)}, expected {self.name(expected)} {self.legend}",
        )

    async def expect_listed(self, expected: list[Any], when: str, storage: Any = None) -> None:
        storage = self.ctx.storage if storage is None else storage
        wanted = [c.checkpoint_id for c in expected]
        listed = [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name=self.workflow)]
        ensure(
            listed == wanted,
            f"list_checkpoints() {when} returned {self.show(listed)}, "
            f"expected {self.show(wanted)} {self.legend}",
        )
        listed_ids = await storage.list_checkpoint_ids(workflow_name=self.workflow)
        ensure(
            listed_ids == wanted,
            f"list_checkpoint_ids() {when} returned {self.show(listed_ids)}, "
            f"expected {self.show(wanted)} {self.legend}",
        )


@clause(
    "ordering.latest_ignores_older_timestamp",
    "get_latest() returns the checkpoint saved last even when its timestamp is older than every "
    "earlier checkpoint's (a clock that went backwards), of checkpoints that rival none.",
)
async def latest_ignores_older_timestamp(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    for position, (suffix, _) in enumerate(_SCRAMBLE):
        checkpoint = run.make(f"{run.workflow}-{suffix}", _at(1000 - position * 100))
        await ctx.storage.save(checkpoint)
        await run.expect_latest(checkpoint, f"after saving {run.name(checkpoint)} with the oldest timestamp")


@clause(
    "ordering.latest_with_equal_timestamps",
    "When checkpoints carry the identical timestamp, get_latest() returns the one saved last, "
    "checked after each of 20 saves.",
)
async def latest_with_equal_timestamps(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    same_millisecond = "2024-01-01T00:00:00.000+00:00"
    for position in range(20):
        # 7 and 20 are coprime: the ids 00, 07, 14, 01, ... are a permutation that is neither
        # ascending nor descending, so neither max(id) nor min(id) can stand in for "last".
        checkpoint = run.make(f"{run.workflow}-{position * 7 % 20:02d}", same_millisecond)
        await ctx.storage.save(checkpoint)
        await run.expect_latest(checkpoint, f"after saving {run.name(checkpoint)} with the same timestamp")


@clause(
    "ordering.list_is_commit_order",
    "list_checkpoints() and list_checkpoint_ids() return checkpoints in commit order, oldest first, "
    "not in timestamp or id order.",
)
async def list_is_commit_order(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    saved = run.scrambled(5)
    for checkpoint in saved:
        await ctx.storage.save(checkpoint)
    await run.expect_listed(saved, "after five saves")
    await run.expect_latest(saved[-1], "after five saves")


@clause(
    "ordering.order_survives_delete",
    "After deleting the middle, the newest and the oldest checkpoint in turn, listing and get_latest() "
    "keep the commit order of those left.",
)
async def order_survives_delete(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    saved = run.scrambled(5)
    for checkpoint in saved:
        await ctx.storage.save(checkpoint)
    remaining = list(saved)
    for victim in (saved[2], saved[4], saved[0]):
        await ctx.storage.delete(victim.checkpoint_id)
        remaining.remove(victim)
        when = f"after deleting {run.name(victim)}"
        await run.expect_listed(remaining, when)
        await run.expect_latest(remaining[-1], when)


@clause(
    "ordering.save_after_delete_is_latest",
    "A checkpoint saved after deletes (of a middle and of the newest checkpoint, then of the two "
    "oldest) is the latest and listed last.",
)
async def save_after_delete_is_latest(ctx: ClauseContext) -> None:
    # Catches sequence numbers derived from the number of stored checkpoints, which repeat
    # after a delete: a repeat ties with a stored one (which a stable sort may hide) or, once the
    # oldest are gone, falls below the newest.
    run = _Run(ctx)
    saved = [*run.scrambled(6), run.make(f"{run.workflow}-g", _at(-1))]
    first, later = saved[:4], saved[4:6]
    for checkpoint in first:
        await ctx.storage.save(checkpoint)
    for victim in (first[1], first[3]):
        await ctx.storage.delete(victim.checkpoint_id)
    remaining = [first[0], first[2]]
    for checkpoint in later:
        await ctx.storage.save(checkpoint)
        remaining.append(checkpoint)
        when = f"after deleting c1 and c3, then saving {run.name(checkpoint)}"
        await run.expect_latest(checkpoint, when)
        await run.expect_listed(remaining, when)
    for victim in remaining[:2]:
        await ctx.storage.delete(victim.checkpoint_id)
    last = saved[-1]
    await ctx.storage.save(last)
    when = f"after deleting the two oldest, then saving {run.name(last)}"
    await run.expect_latest(last, when)
    await run.expect_listed([*remaining[2:], last], when)


@clause(
    "ordering.sequence_survives_emptying_a_workflow",
    "After delete() of every checkpoint of a workflow, the next save's sequence (checkpoint_info) is "
    "above every one handed out before: a workflow's counter outlives its checkpoints.",
    requires=[Capability.INSPECT],
)
async def sequence_survives_emptying_a_workflow(ctx: ClauseContext) -> None:
    # Catches a backend that drops an emptied workflow's state (its counter with it) to save
    # space: numbering restarts, and a reader that resumes "after sequence N" (a copy, a
    # follower) skips the new checkpoints while two records of one workflow share a number.
    workflow_name = ctx.workflow_name("emptied")
    chain = await ctx.save_chain(workflow_name, 2)
    before = [r.sequence for r in await ctx.storage.list_records(workflow_name=workflow_name)]
    for checkpoint in chain:
        await ctx.storage.delete(checkpoint.checkpoint_id)
    again = ctx.checkpoint(workflow_name, checkpoint_id=f"{workflow_name}-again", iteration_count=9)
    await ctx.storage.save(again)
    info = await ctx.storage.checkpoint_info(again.checkpoint_id)
    sequence = getattr(info, "sequence", None)
    ensure(
        isinstance(sequence, int) and sequence > max(before),
        f"checkpoint_info({again.checkpoint_id!r}).sequence is {sequence!r} after deleting every checkpoint "
        f"of {workflow_name!r} (sequences {before}); it must be above {max(before)}: sequences never go back",
    )


@clause(
    "ordering.raw_write_keeps_commit_order",
    "write_raw_body of an older checkpoint keeps its place in commit order: listings and get_latest() "
    "are what they were before.",
    requires=[Capability.RAW_ACCESS],
)
async def raw_write_keeps_commit_order(ctx: ClauseContext) -> None:
    # A rewrite is a repair, not a save: a backend that makes it a delete and an insert moves the
    # checkpoint to the end of the order, and a run resumes from it.
    run = _Run(ctx, "rewritten")
    saved = run.scrambled(6)
    for checkpoint in saved:
        await ctx.storage.save(checkpoint)
    # Older records a storage moved behind the saves (a colder tier) are rewritten in place too.
    await ctx.settle()
    oldest = saved[0].checkpoint_id
    body = await ctx.storage.read_raw_body(oldest)
    ensure(isinstance(body, bytes), f"read_raw_body({oldest!r}) returned {type(body).__name__}, not bytes")
    await ctx.storage.write_raw_body(oldest, body)
    when = "after write_raw_body of c0 with its own bytes"
    await run.expect_listed(saved, when)
    await run.expect_latest(saved[-1], when)


@clause(
    "ordering.workflows_are_independent",
    "Saves to another workflow, interleaved, with newer timestamps and continuing this workflow's "
    "checkpoints, never change this workflow's get_latest() or listing.",
)
async def workflows_are_independent(ctx: ClauseContext) -> None:
    mine, other = _Run(ctx, "mine"), _Run(ctx, "other")
    saved_mine: list[Any] = []
    for position in range(3):
        checkpoint = mine.make(f"{mine.workflow}-{position}", _at(position))
        await ctx.storage.save(checkpoint)
        saved_mine.append(checkpoint)
        # The other workflow's checkpoints are newer by timestamp and saved after mine.
        for extra in range(2):
            theirs = other.make(f"{other.workflow}-{position}-{extra}", _at(500 + position))
            # The second names mine as its previous id: lineage stays within a workflow.
            theirs.previous_checkpoint_id = checkpoint.checkpoint_id if extra else None
            await ctx.storage.save(theirs)
        when = (
            f"after saving {mine.name(checkpoint)} and then two checkpoints of another workflow, "
            "the second naming it as previous"
        )
        await mine.expect_latest(checkpoint, when)
        await mine.expect_listed(saved_mine, when)


@clause(
    "ordering.commit_order_across_handles",
    "Saves alternating between two handles on one store are listed and returned as latest in commit "
    "order, as seen from either handle.",
    requires=[Capability.SHARED],
)
async def commit_order_across_handles(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    handles = (ctx.storage, await ctx.other_handle())
    saved = run.scrambled(len(_SCRAMBLE))
    for position, checkpoint in enumerate(saved):
        await handles[position % 2].save(checkpoint)
        for reader_index, reader in enumerate(handles):
            when = (
                f"on handle {reader_index + 1} after handle {position % 2 + 1} saved {run.name(checkpoint)}"
            )
            await run.expect_latest(checkpoint, when, storage=reader)
            await run.expect_listed(saved[: position + 1], when, storage=reader)


@clause(
    "ordering.latest_is_the_lineage_tip",
    "A checkpoint saved after one that names it as previous (same workflow and signature) is not "
    "the latest: get_latest() follows the newest commit to the tip of its lineage (a chain saved "
    "in reverse, a fork, a parent saved after two continued children, a successor of another "
    "signature that does not count, a cycle of previous ids followed until it comes back).",
)
async def latest_is_the_lineage_tip(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    # A parent saved after its child, with equal timestamps (MAF's own conformance case).
    child = ctx.checkpoint(run.workflow, checkpoint_id=f"{run.workflow}-child", timestamp=_at(0))
    parent = ctx.checkpoint(run.workflow, checkpoint_id=f"{run.workflow}-parent", timestamp=_at(0))
    child.previous_checkpoint_id = parent.checkpoint_id
    for checkpoint in (child, parent):
        run.names[checkpoint.checkpoint_id] = f"c{len(run.names)}"
        await ctx.storage.save(checkpoint)
    await run.expect_latest(child, "after saving c0, then c1, which c0 names as its previous")
    # A chain of four continuing the child, saved newest first: the tip stays latest throughout.
    chain = [run.make(f"{run.workflow}-{suffix}", _at(rank)) for suffix, rank in _SCRAMBLE[:4]]
    previous = child.checkpoint_id
    for checkpoint in chain:
        checkpoint.previous_checkpoint_id = previous
        previous = checkpoint.checkpoint_id
    for checkpoint in reversed(chain):
        await ctx.storage.save(checkpoint)
        tip = chain[-1]
        await run.expect_latest(tip, f"after saving {run.name(checkpoint)} of a chain saved tip first")
    # Two forks from the tip, saved before a checkpoint between: the fork committed last wins
    # (its timestamp is the newer: rivals are ordering.latest_among_rivals_by_timestamp's).
    middle = run.make(f"{run.workflow}-middle", _at(9))
    middle.previous_checkpoint_id = tip.checkpoint_id
    forks = [run.make(f"{run.workflow}-fork{n}", _at(n)) for n in (1, 2)]
    for fork in forks:
        fork.previous_checkpoint_id = middle.checkpoint_id
        await ctx.storage.save(fork)
    await ctx.storage.save(middle)
    await run.expect_latest(
        forks[-1],
        f"after saving forks {run.name(forks[0])} and {run.name(forks[1])} "
        f"of {run.name(middle)}, then {run.name(middle)}",
    )
    # A successor of another graph signature does not supersede: it is not where this graph resumes.
    other = run.make(f"{run.workflow}-other-graph", _at(3))
    other.previous_checkpoint_id = f"{run.workflow}-last"
    other.graph_signature_hash = f"{other.graph_signature_hash}-changed"
    last = run.make(f"{run.workflow}-last", _at(4))
    last.previous_checkpoint_id = forks[-1].checkpoint_id
    await ctx.storage.save(other)
    await ctx.storage.save(last)
    await run.expect_latest(
        last, f"after saving {run.name(other)} (another graph signature) naming {run.name(last)}, then it"
    )
    if ctx.has(Capability.SIGNATURE_FILTER):
        found = await ctx.storage.get_latest(
            workflow_name=run.workflow, graph_signature_hash=other.graph_signature_hash
        )
        ensure(
            found is not None and found.checkpoint_id == other.checkpoint_id,
            f"get_latest(graph_signature_hash=<{run.name(other)}'s>) returned {run.name(found)}, "
            f"expected {run.name(other)} {run.legend}",
        )
    await _latest_through_a_cycle(ctx)
    await _latest_through_two_continued_children(ctx)


async def _latest_through_two_continued_children(ctx: ClauseContext) -> None:
    """c0 and c2 continue c4, c1 continues c0 and c3 continues c2; c4 is committed last. From c4
    the rule moves to its successor committed last (c2), then to c3: the first branch, whose tip
    has the newer timestamp, is not where the run resumes."""
    run = _Run(ctx, "branches")
    root = ctx.checkpoint(run.workflow, checkpoint_id=f"{run.workflow}-root", timestamp=_at(0))
    first, first_tip = run.make(f"{run.workflow}-b1", _at(1)), run.make(f"{run.workflow}-b1-tip", _at(9))
    second, second_tip = run.make(f"{run.workflow}-b2", _at(2)), run.make(f"{run.workflow}-b2-tip", _at(3))
    first.previous_checkpoint_id = second.previous_checkpoint_id = root.checkpoint_id
    first_tip.previous_checkpoint_id, second_tip.previous_checkpoint_id = (
        first.checkpoint_id,
        second.checkpoint_id,
    )
    run.names[root.checkpoint_id] = "c4"
    for checkpoint in (first, first_tip, second, second_tip, root):
        await ctx.storage.save(checkpoint)
    await run.expect_latest(
        second_tip, "after saving c0 and c2 continuing c4, c1 continuing c0, c3 continuing c2, then c4"
    )


@clause(
    "ordering.latest_among_rivals_by_timestamp",
    "Checkpoints that continue one checkpoint and that none continues (parallel steps) are rivals: "
    "get_latest() returns the one with the newest timestamp whatever order they were committed in, "
    "the one committed last on equal timestamps; a rival that is continued stops being one, and one of "
    "another signature never is one.",
)
async def latest_among_rivals_by_timestamp(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    entry = run.make(f"{run.workflow}-entry", _at(0))
    await ctx.storage.save(entry)
    # Built in the order 2, 3, 1 (their timestamps), committed in the order 1, 2, 3.
    rivals = [
        run.make(f"{run.workflow}-{suffix}", _at(rank)) for suffix, rank in (("x", 3), ("y", 1), ("z", 2))
    ]
    for rival in rivals:
        rival.previous_checkpoint_id = entry.checkpoint_id
        await ctx.storage.save(rival)
    await run.expect_latest(rivals[0], "after saving c1, c2 and c3, which all continue c0 (c1 the newest)")
    tied = run.make(f"{run.workflow}-w", _at(3))
    tied.previous_checkpoint_id = entry.checkpoint_id
    await ctx.storage.save(tied)
    await run.expect_latest(tied, f"after saving {run.name(tied)}, a rival as new as c1")
    # A run resumed from the oldest rival and went on: that rival has a successor, so the fork,
    # however old its clock, is where the next resume continues.
    onwards = run.make(f"{run.workflow}-v", _at(-5))
    onwards.previous_checkpoint_id = rivals[1].checkpoint_id
    await ctx.storage.save(onwards)
    await run.expect_latest(onwards, f"after saving {run.name(onwards)}, which continues c2")
    # Rivals share the head's signature: a sibling saved by another graph, however new its clock,
    # is not a parallel step of this one.
    graphs = _Run(ctx, "rivals-other-graph")
    base = graphs.make(f"{graphs.workflow}-entry", _at(0))
    foreign = graphs.make(f"{graphs.workflow}-foreign", _at(9))
    head = graphs.make(f"{graphs.workflow}-head", _at(1))
    foreign.graph_signature_hash = f"{base.graph_signature_hash}-another-graph"
    for checkpoint in (foreign, head):
        checkpoint.previous_checkpoint_id = base.checkpoint_id
    for checkpoint in (base, foreign, head):
        await ctx.storage.save(checkpoint)
    await graphs.expect_latest(
        head, "after saving c1 (another graph, the newer clock) and c2, both continuing c0"
    )


@clause(
    "ordering.latest_among_root_rivals_by_timestamp",
    "Checkpoints without a previous id that none continues, committed one after another at the end "
    "of the order (parallel first steps), are rivals: get_latest() returns the newest timestamp; a "
    "checkpoint with a previous id, or a root that is continued, ends them.",
)
async def latest_among_root_rivals_by_timestamp(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    # An earlier run that saved twice, with the newest clock of all: it never rivals.
    earlier = run.make(f"{run.workflow}-earlier", _at(50), root=True)
    earlier_next = run.make(f"{run.workflow}-earlier-next", _at(51))
    earlier_next.previous_checkpoint_id = earlier.checkpoint_id
    # Built in the order 2, 3, 1 (their timestamps), committed in the order 1, 2, 3.
    roots = [
        run.make(f"{run.workflow}-{suffix}", _at(rank), root=True)
        for suffix, rank in (("x", 3), ("y", 1), ("z", 2))
    ]
    for checkpoint in (earlier, earlier_next, *roots):
        await ctx.storage.save(checkpoint)
    await run.expect_latest(
        roots[0], "after saving c0, c1 continuing it, then roots c2, c3 and c4 (c2 the newest)"
    )
    # The run resumed from the oldest root and went on: the continued root stops being a rival.
    onwards = run.make(f"{run.workflow}-v", _at(-5))
    onwards.previous_checkpoint_id = roots[1].checkpoint_id
    await ctx.storage.save(onwards)
    await run.expect_latest(onwards, f"after saving {run.name(onwards)}, which continues c3")
    # A root after it rivals nothing: the checkpoint before it has a previous id.
    later = run.make(f"{run.workflow}-later", _at(-9), root=True)
    await ctx.storage.save(later)
    await run.expect_latest(later, f"after saving root {run.name(later)}, the oldest clock of all")
    # A root after a continued root rivals nothing either, whatever its clock.
    parent = run.make(f"{run.workflow}-parent", _at(90), root=True)
    child = run.make(f"{run.workflow}-child", _at(91))
    child.previous_checkpoint_id = parent.checkpoint_id
    last = run.make(f"{run.workflow}-last", _at(-20), root=True)
    for checkpoint in (child, parent, last):
        await ctx.storage.save(checkpoint)
    await run.expect_latest(
        last,
        f"after saving {run.name(child)}, then root {run.name(parent)} which it continues, "
        f"then root {run.name(last)}",
    )


@clause(
    "ordering.rival_timestamps_compare_as_instants",
    "Rivals' timestamps compare as instants (an offset, Z, or none for UTC), one that does not "
    "parse ranks below every one that does, and of rivals tied on the newest the one committed "
    "last is the latest, also when it is not the newest commit.",
)
async def rival_timestamps_compare_as_instants(ctx: ClauseContext) -> None:
    # Each case: the rivals' timestamps in commit order (the last one is the head), and which wins.
    cases = (
        ("two rivals tied on the newest timestamp, then an older one", (_at(10), _at(10), _at(5)), 1),
        (
            "rivals at 08:00Z written with +02:00, at 09:00 with Z, then 07:00 without an offset",
            ("2024-01-01T10:00:00+02:00", "2024-01-01T09:00:00Z", "2024-01-01T07:00:00"),
            1,
        ),
        ("a rival with a timestamp, then one whose timestamp does not parse", (_at(0), "not a time"), 0),
    )
    for number, (shape, stamps, winner) in enumerate(cases):
        run = _Run(ctx, f"case{number}")
        entry = run.make(f"{run.workflow}-entry", _at(-100))
        await ctx.storage.save(entry)
        rivals = [run.make(f"{run.workflow}-{position}", stamp) for position, stamp in enumerate(stamps)]
        for rival in rivals:
            rival.previous_checkpoint_id = entry.checkpoint_id
            await ctx.storage.save(rival)
        await run.expect_latest(rivals[winner], f"after saving c0, then {shape} continuing it")


@clause(
    "ordering.unparsable_timestamp_is_data",
    "A checkpoint whose timestamp does not parse, with no rival, is the latest where it is the head: "
    "after a chain's root, and as a workflow's only checkpoint.",
)
async def unparsable_timestamp_is_data(ctx: ClauseContext) -> None:
    # Outside rivals, timestamps are data: a reader that skips "bad" timestamps resumes from an
    # older checkpoint, or from none.
    run = _Run(ctx, "chain")
    root = run.make(f"{run.workflow}-root", _at(0))
    head = run.make(f"{run.workflow}-head", "not a time")
    head.previous_checkpoint_id = root.checkpoint_id
    for checkpoint in (root, head):
        await ctx.storage.save(checkpoint)
    await run.expect_latest(head, "after saving c0, then c1 continuing it with the timestamp 'not a time'")
    alone = _Run(ctx, "alone")
    only = alone.make(f"{alone.workflow}-only", "yesterday")
    await ctx.storage.save(only)
    await alone.expect_latest(only, "after saving one checkpoint whose timestamp is 'yesterday'")


@clause(
    "ordering.latest_reads_the_rivals_committed_last",
    "With more rivals than the 64 a latest reads, the rivals read are exactly the 64 committed "
    "last: the newest of them by timestamp is the latest, not a newer one committed before them.",
)
async def latest_reads_the_rivals_committed_last(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    entry = run.make(f"{run.workflow}-entry", _at(-100))
    await ctx.storage.save(entry)
    # 70 rivals, the head (70th) with an old timestamp: the 64 read before it are the 6th to the
    # 69th. The 6th, the oldest read, is the newest of them; the 5th, just before, newer still, so
    # reading one rival more or one fewer (or the first 64) answers another.
    ranks = [*range(1, 5), 900, 800, *range(5, 68), 0]
    rivals = [run.make(f"{run.workflow}-{position:02d}", _at(rank)) for position, rank in enumerate(ranks)]
    for rival in rivals:
        rival.previous_checkpoint_id = entry.checkpoint_id
        await ctx.storage.save(rival)
    await run.expect_latest(
        rivals[5],
        "after saving 70 rivals continuing c0 (c6 the newest of the 64 committed last before the "
        "head c70, c5 newer but committed before them)",
    )


async def _latest_through_a_cycle(ctx: ClauseContext) -> None:
    """c0 names c1 as previous and c1 names c0: from c1 (committed last) the rule moves to c0,
    whose successor c1 was visited, so c0 is the latest, not None and not a spin."""
    run = _Run(ctx, "cycle")
    first, second = run.make(f"{run.workflow}-a", _at(0)), run.make(f"{run.workflow}-b", _at(1))
    first.previous_checkpoint_id, second.previous_checkpoint_id = second.checkpoint_id, first.checkpoint_id
    await ctx.storage.save(first)
    await ctx.storage.save(second)
    await run.expect_latest(first, "after saving c0 naming c1 as previous, then c1 naming c0")


@clause(
    "ordering.concurrent_saves_commit_in_call_order",
    "Saves of one workflow started together on one handle commit in the order save() was called "
    "(a runner's parallel steps), whatever their timestamps: listed in that order, the last one called "
    "is the latest.",
)
async def concurrent_saves_commit_in_call_order(ctx: ClauseContext) -> None:
    run = _Run(ctx)
    # Siblings: each continues the same entry checkpoint, as parallel steps built before either
    # save returned do; built in call order (ascending timestamps), with scrambled ids.
    saved = [run.make(f"{run.workflow}-{suffix}", _at(10 + n)) for n, (suffix, _) in enumerate(_SCRAMBLE)]
    entry = run.make(f"{run.workflow}-entry", _at(0))
    await ctx.storage.save(entry)
    for checkpoint in saved:
        checkpoint.previous_checkpoint_id = entry.checkpoint_id
    tasks = [asyncio.ensure_future(ctx.storage.save(checkpoint)) for checkpoint in saved]
    await asyncio.gather(*tasks)
    await run.expect_listed([entry, *saved], "after six saves started together")
    await run.expect_latest(saved[-1], "after six saves started together")
    # A chain whose clock went backwards, its saves started together: call order, not timestamp
    # order, is commit order (a layer that batches saves and sorts a batch by time reorders it).
    chain_run = _Run(ctx, "call-order-chain")
    chain = [
        chain_run.make(f"{chain_run.workflow}-{suffix}", _at(100 - n), root=n == 0)
        for n, (suffix, _) in enumerate(_SCRAMBLE)
    ]
    for previous, checkpoint in itertools.pairwise(chain):
        checkpoint.previous_checkpoint_id = previous.checkpoint_id
    await asyncio.gather(*(asyncio.ensure_future(ctx.storage.save(c)) for c in chain))
    await chain_run.expect_listed(chain, "after a chain's six saves, newest timestamp first, started at once")
    await chain_run.expect_latest(chain[-1], "after a chain's six saves started together")
