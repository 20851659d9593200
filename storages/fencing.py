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
* A save that **starts a branch** is not fenced: a run's entry checkpoint (no previous id), and
  the first save continuing a checkpoint restored through this handle (``load``), including
  checkpoints embedded in the restored one (a sub-workflow's chain resumes from its embedded
  checkpoint). B resuming from an older checkpoint is a fork and succeeds.

The rule needs no memory of which run wrote what, so one handle shared by every run of a workflow
(MAF's ``Workflow`` keeps one storage for all its runs, as in the seed's race) fences as well as
one handle per run. ``docs/contract.md`` ("Writer fencing") gives the limits: among them, a stale
save that lands after B's restore but before B's first save is not refused (B's first save then
supersedes it), and two live runs under one workflow name cannot both advance it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .contract import (
    CHECKPOINT_FIELDS,
    UNFENCED,
    Capability,
    CheckpointID,
    CheckpointStorage,
    Unfenced,
)
from .errors import UnsupportedOperationError


class FencedStorage:
    """MAF's six methods over a ``fencing`` storage, fencing every save that continues a
    checkpoint with that checkpoint as the expected latest. Usable as MAF's
    ``checkpoint_storage`` (``workflow.run(..., checkpoint_storage=storage.fenced())``).

    The handle does not own the storage: closing the storage is its owner's business.
    """

    def __init__(self, storage: CheckpointStorage) -> None:
        if Capability.FENCING not in frozenset(storage.capabilities):
            raise UnsupportedOperationError(_describe(storage), "fenced", Capability.FENCING.value)
        self._storage = storage
        self._branch_points: set[CheckpointID] = set()
        """Ids restored through this handle whose next continuation starts a branch (a fork)."""

    @property
    def storage(self) -> CheckpointStorage:
        """The storage this handle fences."""
        return self._storage

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset(self._storage.capabilities)

    def describe(self) -> str:
        return f"fenced {_describe(self._storage)}"

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
        if previous in self._branch_points:
            saved = await self._storage.save(checkpoint)
            # One restore, one fork: a second continuation of the same checkpoint is fenced (and
            # finds the fork's first checkpoint as latest, which only its own retry passes).
            self._branch_points.discard(previous)
            return saved
        return await self._storage.save(checkpoint, expected_latest_id=previous)

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        """Load a checkpoint; the next save continuing it (or a checkpoint embedded in it) is a
        fork and starts a branch."""
        checkpoint = await self._storage.load(checkpoint_id, **options)
        self._branch_points.update(_checkpoint_ids_in(checkpoint))
        return checkpoint

    async def list_checkpoints(self, *, workflow_name: str, **options: Any) -> list[Any]:
        return await self._storage.list_checkpoints(workflow_name=workflow_name, **options)

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        return await self._storage.list_checkpoint_ids(workflow_name=workflow_name, **options)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return await self._storage.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any | None:
        return await self._storage.get_latest(workflow_name=workflow_name, **options)


def _checkpoint_ids_in(checkpoint: Any) -> set[CheckpointID]:
    """The id of ``checkpoint`` and of every checkpoint embedded in its state, at any depth,
    whether embedded as an object or as a mapping of the checkpoint fields."""
    found: set[CheckpointID] = set()
    pending: list[Any] = [checkpoint]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Mapping):
            if set(CHECKPOINT_FIELDS) <= set(item) and isinstance(item["checkpoint_id"], str):
                found.add(item["checkpoint_id"])
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif all(hasattr(item, name) for name in CHECKPOINT_FIELDS):
            if isinstance(item.checkpoint_id, str):
                found.add(item.checkpoint_id)
            pending.append(item.state)
    return found


def _describe(storage: Any) -> str:
    describe = getattr(storage, "describe", None)
    return describe() if callable(describe) else type(storage).__name__


__all__ = ["FencedStorage"]
