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
* A save that **starts a branch** from a checkpoint restored through this handle (``load``; a
  checkpoint embedded in it counts too, as a sub-workflow resumes from its embedded checkpoint)
  is a fork: it is fenced with the workflow's latest *as seen at the restore*. If the latest has
  moved since only along that latest's own chain (the run B superseded kept saving between B's
  restore and B's first save), the fork takes over from there; any other move (another fork got
  there first, as when a stale run that had itself resumed saves late) refuses it. So B resuming
  from an older checkpoint succeeds.
* An entry checkpoint (no previous id: a fresh run, also on a workflow name with history) is not
  fenced.

The rule needs no memory of which run wrote what, only of what was restored, so one handle shared
by every run of a workflow (MAF's ``Workflow`` keeps one storage for all its runs, as in the seed's
race) fences as well as one handle per run. ``docs/contract.md`` ("Writer fencing") gives the
limits: among them, a stale save that lands after B's restore but before B's first save is not
refused (B's first save then takes over from it), two runs restoring from the same latest are told
apart only by which saves first, and two live runs under one workflow name cannot both advance it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

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

TAKEOVER_DEPTH: Final = 1_000
"""How far back a fork looks for the latest it saw at its restore when the latest has moved."""
_TAKEOVER_ATTEMPTS: Final = 3
"""Refusals a fork rides out while the run it supersedes keeps saving, before it gives up."""


class FencedStorage:
    """MAF's six methods over a ``fencing`` storage, fencing every save that continues a
    checkpoint with that checkpoint as the expected latest. Usable as MAF's
    ``checkpoint_storage`` (``workflow.run(..., checkpoint_storage=storage.fenced())``).

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
        """Save ``checkpoint``, fenced by its previous id unless it starts a branch; an explicit
        ``expected_latest_id`` is passed through as given."""
        if expected_latest_id is not UNFENCED:
            return await self._storage.save(checkpoint, expected_latest_id=expected_latest_id)
        previous = getattr(checkpoint, "previous_checkpoint_id", None)
        if previous is None:
            return await self._storage.save(checkpoint)
        if previous not in self._branch_points:
            return await self._storage.save(checkpoint, expected_latest_id=previous)
        saved = await self._fork(checkpoint, self._branch_points[previous])
        # One restore, one fork: a second continuation of the same checkpoint is fenced (and
        # finds the fork's first checkpoint as latest, which only its own retry passes).
        self._branch_points.pop(previous, None)
        return saved

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
