"""What a runner adapter last saw of each workflow, and the fenced save that continues it.

CrewAI and Burr call their persister with a flow or application id and the state, never with the
checkpoint a save continues. The adapters (storages.runners.crewai, storages.runners.burr)
remember it for them, per workflow, from what the runner read and wrote through the adapter:

* after a save, the saved checkpoint is both what the next save continues and the latest expected;
* after a read of the latest, the latest is both;
* after a read of an older checkpoint (Burr's ``load`` at a ``sequence_id``), the next save
  continues the checkpoint read, and the latest expected is the one found at that read.

Every save is then fenced on the latest expected (``save(..., expected_latest_id=...)``, when the
storage declares ``fencing``): a run that was dropped and superseded by another one, in this
process or any other, finds the latest moved on and is refused with
:class:`~storages.errors.StaleWriterError`, storing nothing. Where the adapter has seen nothing of
a workflow (its first save there, or a workflow it has forgotten), it reads the latest first.
A save's id is derived from the step it takes, so a second run taking the same step with other
content is refused the same way (the storage's CheckpointConflictError, reported as stale).

The memory is bounded (:data:`REMEMBERED_WORKFLOWS`, least recently used first out): a forgotten
workflow costs one more read at its next save, never a wrong fence.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

from ..contract import Capability, CheckpointID
from ..errors import CheckpointConflictError, StaleWriterError

REMEMBERED_WORKFLOWS: Final = 4096
"""Workflows an adapter remembers at once."""


@dataclass(frozen=True, slots=True)
class Seen:
    """What an adapter knows of one workflow."""

    previous: CheckpointID | None
    """The checkpoint the next save continues (its previous id), or None: the next save is a root."""
    expected: CheckpointID | None
    """The workflow's latest as last seen (None: it had none): the next save's fence."""
    iteration: int
    """The continued checkpoint's ``iteration_count`` (0 when there is none)."""
    carried: Any = None
    """Runner state a save carries forward from the continued checkpoint (CrewAI's pending feedback)."""


class Heads:
    """Per workflow, the :class:`Seen` of one adapter; saves through :meth:`save`."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self.fenced = Capability.FENCING in frozenset(storage.capabilities)
        """True when saves are fenced: the storage declares ``fencing``."""
        self._seen: OrderedDict[str, Seen] = OrderedDict()

    def get(self, workflow_name: str) -> Seen | None:
        seen = self._seen.get(workflow_name)
        if seen is not None:
            self._seen.move_to_end(workflow_name)
        return seen

    def remember(self, workflow_name: str, seen: Seen) -> None:
        self._seen[workflow_name] = seen
        self._seen.move_to_end(workflow_name)
        while len(self._seen) > REMEMBERED_WORKFLOWS:
            self._seen.popitem(last=False)

    def forget(self, workflow_name: str) -> None:
        self._seen.pop(workflow_name, None)

    def latest_seen(self, workflow_name: str, latest: Any | None, carried: Any = None) -> Seen:
        """Remember a read of the workflow's latest checkpoint (None: it has none)."""
        if latest is None:
            seen = Seen(None, None, 0)
        else:
            seen = Seen(latest.checkpoint_id, latest.checkpoint_id, latest.iteration_count, carried)
        self.remember(workflow_name, seen)
        return seen

    async def save(self, checkpoint: Any, expected: CheckpointID | None, carried: Any = None) -> CheckpointID:
        """Save ``checkpoint`` fenced on ``expected`` (when the storage fences) and remember it."""
        workflow_name = checkpoint.workflow_name
        try:
            if self.fenced:
                saved: CheckpointID = await self.storage.save(checkpoint, expected_latest_id=expected)
            else:
                saved = await self.storage.save(checkpoint)
        except StaleWriterError:
            raise
        except CheckpointConflictError as conflict:
            # The id names the step this save takes (derived from what it continues): another run
            # took that step with other content first, so this run is the stale one.
            latest = await self.storage.get_latest(workflow_name=workflow_name)
            raise StaleWriterError(
                workflow_name,
                checkpoint.checkpoint_id,
                expected,
                None if latest is None else latest.checkpoint_id,
            ) from conflict
        self.remember(workflow_name, Seen(saved, saved, checkpoint.iteration_count, carried))
        return saved


__all__ = ["REMEMBERED_WORKFLOWS", "Heads", "Seen"]
