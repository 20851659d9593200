"""ordering: latest is commit order, decided by the backend, never by timestamps.

MAF's runner resumes from ``get_latest()``. Timestamps come from the clocks of whichever
process saved, so they tie (same millisecond) and go backwards (clock skew, NTP steps); ids are
random. The only order a storage can promise is the order its commits happened in, so every
clause here gives checkpoints ids and timestamps that sort differently from the commit order.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from storages.contract import Capability

from ..clause import clause, ensure
from ..context import ClauseContext

_EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)

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

    def make(self, checkpoint_id: str, timestamp: str) -> Any:
        checkpoint = self.ctx.checkpoint(
            self.workflow, checkpoint_id=checkpoint_id, timestamp=timestamp, iteration_count=len(self.names)
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
    "earlier checkpoint's (a clock that went backwards).",
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
    "A checkpoint saved after deletes (of a middle and of the newest checkpoint) is the latest and "
    "listed last.",
)
async def save_after_delete_is_latest(ctx: ClauseContext) -> None:
    # Catches sequence numbers derived from the number of stored checkpoints, which repeat
    # after a delete.
    run = _Run(ctx)
    saved = run.scrambled(6)
    first, later = saved[:4], saved[4:]
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


@clause(
    "ordering.workflows_are_independent",
    "Saves to another workflow, interleaved and with newer timestamps, never change this workflow's "
    "get_latest() or listing.",
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
            await ctx.storage.save(other.make(f"{other.workflow}-{position}-{extra}", _at(500 + position)))
        when = f"after saving {mine.name(checkpoint)} and then two checkpoints of another workflow"
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
