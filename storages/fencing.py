"""Writer fencing for runners that cannot pass an expected latest: :class:`FencedStorage`.

The race (microsoft/agent-framework#9473, one layer down): run A is dropped mid-superstep; run B
restores an earlier checkpoint and continues; A's late finalizer, or a zombie worker on another
host, saves one more checkpoint. Commit-order latest then names A's abandoned branch and the next
resume continues the dead run. A storage with the ``fencing`` capability can refuse that save
when it is told which latest the writer expects; MAF's runner never says, so this handle says it
for the runner, from what the runner saves and restores:

* A save that **continues** a checkpoint (its ``previous_checkpoint_id`` is ``P``) is fenced with
  ``expected_latest_id=P``: it commits only while ``P`` is still the workflow's latest. A's late
  save continues A's last checkpoint, which B's checkpoints have superseded, so it is refused with
  :class:`~storages.errors.StaleWriterError`.
* A save that continues a checkpoint on the handle's own **line** is fenced on the handle's own
  last commit instead. The line is what this handle committed for the workflow since the run
  began here (at an entry checkpoint, a fork, or a save fenced on its previous id), and the
  checkpoint it began from. It is what a runner that saves several checkpoints at once continues:
  MAF's functional workflows save each completed step as a task of its own, so parallel steps
  save checkpoints that all continue the same one (siblings), and a later step continues
  whichever sibling's save returned last, not necessarily the one committed last. Fenced on the
  handle's own last commit, each commits only while nothing but this handle saved since, so a
  save of any other writer in between (another handle, another process) still refuses it. The
  handle's saves of one workflow take turns (the order they were called), so its last commit is
  known; the line keeps at most :data:`~storages.backend.RIVALS_LIMIT` ids, the newest.
* A save that **starts a branch** from a checkpoint restored through this handle (``load``; a
  checkpoint embedded in it counts too, as a sub-workflow resumes from its embedded checkpoint)
  is a fork: it is fenced with the workflow's latest *as seen at the restore*. If the latest has
  moved since only along that latest's own chain (the run B superseded kept saving between B's
  restore and B's first save), the fork takes over from there; any other move (another fork got
  there first, as when a stale run that had itself resumed saves late) refuses it. So B resuming
  from an older checkpoint succeeds. The fork begins a new line, from the restored checkpoint:
  the run it superseded is off the line, so its late saves are refused, while the fork's own
  parallel siblings (later continuations of the restored checkpoint) commit.
* An entry checkpoint (no previous id: a fresh run, also on a workflow name with history) is not
  fenced, and begins a new line.

The rule needs no memory of which run wrote what, only of what was restored and what this handle
committed since, so one handle shared by every run of a workflow (MAF's ``Workflow`` keeps one
storage for all its runs, as in the seed's race) fences as well as one handle per run, with one
exception it shares with the limits below: its line cannot tell two runs that continue the same
checkpoint apart. ``docs/contract.md`` ("Writer fencing") gives the limits: among them, a stale
save that lands after B's restore but before B's first save is not refused (B's first save then
takes over from it), two runs restoring from the same latest are told apart only by which saves
first, and two live runs under one workflow name cannot both advance it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from .backend import RIVALS_LIMIT
from .contract import (
    CHECKPOINT_FIELDS,
    UNFENCED,
    Capability,
    CheckpointID,
    CheckpointStorage,
    Unfenced,
)
from .errors import (
    CheckpointNotFoundError,
    StaleWriterError,
    UnsupportedOperationError,
)
from .save_order import SaveOrder, handed

TAKEOVER_DEPTH: Final = 1_000
"""How far back a fork looks for the latest it saw at its restore when the latest has moved."""
_TAKEOVER_ATTEMPTS: Final = 3
"""Refusals a fork rides out while the run it supersedes keeps saving, before it gives up."""
LINES_KEPT: Final = 1_024
"""Workflows whose line a handle keeps, the ones saved last; a workflow whose line was dropped is
fenced on each save's previous id until its next save begins a new one."""


@dataclass
class _Line:
    """One workflow's line through a handle: the checkpoint its run began from, and what the
    handle committed for it since, oldest first (at most RIVALS_LIMIT, the newest)."""

    began_from: CheckpointID | None
    commits: dict[CheckpointID, None] = field(default_factory=dict)

    @property
    def last(self) -> CheckpointID:
        """The handle's last commit: the workflow's head unless another writer saved since."""
        return next(reversed(self.commits))

    def continues(self, previous: CheckpointID) -> bool:
        return previous == self.began_from or previous in self.commits

    def add(self, checkpoint_id: CheckpointID) -> None:
        self.commits.pop(checkpoint_id, None)
        self.commits[checkpoint_id] = None
        while len(self.commits) > RIVALS_LIMIT:
            del self.commits[next(iter(self.commits))]


class FencedStorage:
    """MAF's six methods over a ``fencing`` storage, fencing every save that continues a
    checkpoint (module docstring: on the checkpoint it continues, on the handle's own last commit
    when it continues the handle's line, on the latest seen at a restore when it starts a
    branch). Usable as MAF's ``checkpoint_storage``
    (``workflow.run(..., checkpoint_storage=storage.fenced())``).

    The handle does not own the storage: closing the storage is its owner's business. Every other
    attribute (the extensions: walks, listings, a runner adapter's pending writes) is the
    storage's own; none of them moves a workflow's latest.
    """

    def __init__(self, storage: CheckpointStorage) -> None:
        if Capability.FENCING not in frozenset(storage.capabilities):
            raise UnsupportedOperationError(_describe(storage), "fenced", Capability.FENCING.value)
        self._storage = storage
        self._branch_points: dict[CheckpointID, CheckpointID | None] = {}
        """Id restored through this handle -> its workflow's latest at the restore; the next save
        continuing that id is a fork, fenced on that latest."""
        self._lines: dict[str, _Line] = {}
        """Workflow name -> its line, the workflow saved last at the end."""
        self._turns = SaveOrder()
        """One workflow's saves through this handle run one at a time, in the order they were
        called: each knows the handle's last commit, and commits while it is still the head."""

    @property
    def storage(self) -> CheckpointStorage:
        """The storage this handle fences."""
        return self._storage

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset(self._storage.capabilities)

    def describe(self) -> str:
        return f"fenced {_describe(self._storage)}"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("aclose", "__aenter__", "__aexit__"):
            raise AttributeError(name)  # private state, and the owner's lifecycle, stay private
        return getattr(self._storage, name)

    def __repr__(self) -> str:
        return f"<{self.describe()}>"

    async def save(
        self, checkpoint: Any, *, expected_latest_id: CheckpointID | Unfenced | None = UNFENCED
    ) -> CheckpointID:
        """Save ``checkpoint``, fenced on the handle's own last commit if it continues the
        handle's line, on the latest seen at the restore if it starts a branch, else on its
        previous id; an explicit ``expected_latest_id`` is passed through as given."""
        if expected_latest_id is not UNFENCED:
            return await self._storage.save(checkpoint, expected_latest_id=expected_latest_id)
        workflow_name = str(checkpoint.workflow_name)
        # The turn is taken before the first await, so the saves commit in the order they were
        # called (the order a runner built its checkpoints in).
        key, turn = self._turns.take(workflow_name)
        holding = turn is None
        try:
            if turn is not None:
                try:
                    await turn
                finally:
                    holding = handed(turn)
            return await self._save_in_turn(checkpoint, workflow_name)
        finally:
            if holding:
                self._turns.hand_on(key)

    async def _save_in_turn(self, checkpoint: Any, workflow_name: str) -> CheckpointID:
        # A save whose answer is lost (an error other than a refusal, a cancellation) is not
        # recorded: the line's last stays the last commit the handle knows of. A retry of it
        # takes the same path, and the storage returns the id if the lost save did commit (it
        # is then the head).
        previous = getattr(checkpoint, "previous_checkpoint_id", None)
        line = self._lines.pop(workflow_name, None)
        if line is not None:
            self._lines[workflow_name] = line  # saved last: kept longest
        if previous is None:
            saved = await self._storage.save(checkpoint)
        elif previous in self._branch_points:
            saved = await self._fork(checkpoint, self._branch_points[previous])
            # One restore, one fork: later continuations of the restored checkpoint are the
            # fork's siblings, on the line the fork begins.
            self._branch_points.pop(previous, None)
        elif line is not None and line.continues(previous):
            return await self._save_on_line(checkpoint, line)
        else:
            saved = await self._storage.save(checkpoint, expected_latest_id=previous)
        if line is None or saved not in line.commits:  # a re-save of a commit keeps its line
            self._begin_line(workflow_name, previous, saved)
        return saved

    async def _save_on_line(self, checkpoint: Any, line: _Line) -> CheckpointID:
        """A save continuing the handle's line: fenced on the handle's own last commit, which is
        the head exactly when no other writer saved since."""
        try:
            saved = await self._storage.save(checkpoint, expected_latest_id=line.last)
        except StaleWriterError as refused:
            checkpoint_id = checkpoint.checkpoint_id
            if getattr(refused, "already_stored", False) and checkpoint_id in line.commits:
                return str(checkpoint_id)  # a re-save of the handle's own commit: nothing to do
            raise
        line.add(saved)
        return saved

    def _begin_line(self, workflow_name: str, began_from: CheckpointID | None, saved: CheckpointID) -> None:
        line = self._lines[workflow_name] = _Line(began_from)
        line.add(saved)
        if len(self._lines) > LINES_KEPT:
            del self._lines[next(iter(self._lines))]

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        """Load a checkpoint and note each workflow's latest: the next save continuing it (or a
        checkpoint embedded in it) is a fork, fenced on that latest."""
        checkpoint = await self._storage.load(checkpoint_id, **options)
        restored = _checkpoints_in(checkpoint)
        heads = {name: await self._latest_id(name) for name in dict.fromkeys(restored.values())}
        self._branch_points.update((restored_id, heads[name]) for restored_id, name in restored.items())
        return checkpoint

    async def list_checkpoints(self, *, workflow_name: str, **options: Any) -> list[Any]:
        return await self._storage.list_checkpoints(workflow_name=workflow_name, **options)

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        return await self._storage.list_checkpoint_ids(workflow_name=workflow_name, **options)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return await self._storage.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any | None:
        return await self._storage.get_latest(workflow_name=workflow_name, **options)

    async def _fork(self, checkpoint: Any, head_at_restore: CheckpointID | None) -> CheckpointID:
        """The first save after a restore: fenced on the latest seen at the restore, taking over
        from a later latest only if that one descends from it (the superseded run saved on)."""
        expected = head_at_restore
        for _ in range(_TAKEOVER_ATTEMPTS):
            try:
                return await self._storage.save(checkpoint, expected_latest_id=expected)
            except StaleWriterError as refused:
                moved_to = refused.actual_latest_id
                if head_at_restore is None or moved_to is None:
                    raise
                if not await self._descends_from(moved_to, head_at_restore):
                    raise
                expected = moved_to
        return await self._storage.save(checkpoint, expected_latest_id=expected)

    async def _descends_from(self, checkpoint_id: CheckpointID, ancestor: CheckpointID) -> bool:
        """True if following previous ids from ``checkpoint_id`` reaches ``ancestor``."""
        try:
            if Capability.ANCESTRY in self.capabilities:
                walk = await self._storage.walk_ancestry_ids(checkpoint_id, max_depth=TAKEOVER_DEPTH)
                return ancestor in walk.items[1:]
            current: CheckpointID | None = checkpoint_id
            for _ in range(TAKEOVER_DEPTH):
                if current is None:
                    return False
                current = (await self._storage.load(current)).previous_checkpoint_id
                if current == ancestor:
                    return True
        except CheckpointNotFoundError:
            pass  # deleted meanwhile: no chain to take over from
        return False

    async def _latest_id(self, workflow_name: str) -> CheckpointID | None:
        # Restoring an older checkpoint because the latest is damaged must still work: a storage
        # that names its latest from the index (CheckpointStore.latest_id) never decodes it.
        latest_id = getattr(self._storage, "latest_id", None)
        if callable(latest_id):
            named: CheckpointID | None = await latest_id(workflow_name=workflow_name)
            return named
        latest = await self._storage.get_latest(workflow_name=workflow_name)
        return None if latest is None else str(latest.checkpoint_id)


def _checkpoints_in(checkpoint: Any) -> dict[CheckpointID, str]:
    """Id -> workflow name of ``checkpoint`` and of every checkpoint embedded in its state, at
    any depth, whether embedded as an object or as a mapping of the checkpoint fields."""
    found: dict[CheckpointID, str] = {}
    pending: list[Any] = [checkpoint]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Mapping):
            if set(CHECKPOINT_FIELDS) <= set(item) and isinstance(item["checkpoint_id"], str):
                found[item["checkpoint_id"]] = str(item["workflow_name"])
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif all(hasattr(item, name) for name in CHECKPOINT_FIELDS):
            if isinstance(item.checkpoint_id, str):
                found[item.checkpoint_id] = str(item.workflow_name)
            pending.append(item.state)
    return found


def _describe(storage: Any) -> str:
    describe = getattr(storage, "describe", None)
    return describe() if callable(describe) else type(storage).__name__


__all__ = ["FencedStorage"]
