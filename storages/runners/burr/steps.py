"""The operations Burr's persisters perform, async, over one storage handle: :class:`StepRecords`.

Both persisters (storages.runners.burr.persister) run these: the async one on the caller's loop, the sync
one on its private loop. Semantics (docs/burr.md):

* ``load`` without a ``sequence_id`` is the application's latest completed step: the storage's
  latest checkpoint of the application (commit order), or, while that one is a failed step, the
  checkpoint it followed. With a ``sequence_id``, the step of that number that completed.
* A save continues the checkpoint the persister last saw of the application and is fenced on the
  latest it saw (storages.runners.heads): a run dropped mid-step whose save lands after another run
  resumed the application is refused with StaleWriterError and stores nothing. A persister that
  never read the application checks that the step follows the application's latest: the next
  ``sequence_id``, or the same one again after a failed step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Final

from burr.core.state import State

from ...contract import Capability
from ...errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    InvalidCheckpointError,
    StaleWriterError,
    UnsupportedOperationError,
)
from ..heads import Heads, Seen
from .mapping import (
    FAILED,
    build_checkpoint,
    parse_workflow,
    partition_of,
    partition_prefix,
    sequence_of,
    step_id,
    stored_step,
    workflow_for,
)

FAILED_STEPS_WALKED: Final = 10_000
"""Failed steps ``load`` passes over, at most, looking for the latest completed one."""

Naming = Callable[[str, str], str]
"""(partition_key, app_id) -> workflow name."""


class StepRecords:
    """Burr's load, save and listing over one storage handle (async, on the handle's loop)."""

    def __init__(
        self, storage: Any, *, serde_kwargs: Mapping[str, Any] | None = None, naming: Naming = workflow_for
    ) -> None:
        self.storage = storage
        self.serde_kwargs = dict(serde_kwargs or {})
        self.naming = naming
        self.heads = Heads(storage)

    # ------------------------------------------------------------------ reads

    async def load(self, partition_key: Any, app_id: Any, sequence_id: Any = None) -> dict[str, Any] | None:
        partition = partition_of(partition_key)
        if app_id is None:
            return await self._latest_in_partition(partition)
        workflow_name = self.naming(partition, app_id)
        if sequence_id is None:
            head = await self.storage.get_latest(workflow_name=workflow_name)
            self.heads.latest_seen(workflow_name, head, _coordinates(head))
            completed = await self._completed_from(head)
            return None if completed is None else self._data(completed)
        wanted = step_id(workflow_name, partition, app_id, sequence_of(sequence_id))
        loaded, head = await asyncio.gather(
            self._load_if_stored(wanted), self.storage.get_latest(workflow_name=workflow_name)
        )
        if loaded is None:
            return None
        step = stored_step(loaded)
        if (step["partition_key"], step["app_id"], step["sequence_id"]) != (partition, app_id, sequence_id):
            raise CheckpointCorruptedError(
                loaded.checkpoint_id,
                f"stored for {_coordinates(loaded)!r} but found as {(app_id, sequence_id)!r}",
            )
        # The next save continues the step read, fenced on the latest as it was at this read.
        self.heads.remember(
            workflow_name,
            Seen(
                loaded.checkpoint_id,
                None if head is None else head.checkpoint_id,
                loaded.iteration_count,
                _coordinates(loaded),
            ),
        )
        return self._data(loaded)

    async def list_app_ids(self, partition_key: Any) -> list[str]:
        """The partition's applications, most recently saved first."""
        latest = await self._latest_per_app(partition_of(partition_key))
        ordered = sorted(latest.items(), key=lambda item: item[1].timestamp, reverse=True)
        return [app_id for app_id, _ in ordered]

    # ------------------------------------------------------------------ writes

    async def save(
        self, partition_key: Any, app_id: Any, sequence_id: Any, position: Any, state: State[Any], status: Any
    ) -> None:
        partition = partition_of(partition_key)
        sequence = sequence_of(sequence_id)
        for field, value in (("position", position), ("status", status)):
            if not isinstance(value, str):
                raise InvalidCheckpointError(f"Invalid {field} {value!r}: must be a str", field=field)
        if not isinstance(state, State):
            raise InvalidCheckpointError(
                f"state must be a burr State, not {type(state).__name__}", field="state"
            )
        workflow_name = self.naming(partition, app_id)
        seen = self.heads.get(workflow_name)
        checked = seen is None
        if seen is None:
            head = await self.storage.get_latest(workflow_name=workflow_name)
            seen = self.heads.latest_seen(workflow_name, head, _coordinates(head))
        checkpoint = build_checkpoint(
            partition,
            app_id,
            sequence,
            position,
            status,
            state.serialize(**self.serde_kwargs),
            workflow_name=workflow_name,
            previous_id=seen.previous,
        )
        if not _follows(seen, app_id, sequence, first_read=checked):
            expected = step_id(workflow_name, partition, app_id, sequence - 1) if sequence else None
            raise StaleWriterError(workflow_name, checkpoint.checkpoint_id, expected, seen.expected)
        await self.heads.save(checkpoint, seen.expected, _coordinates(checkpoint))

    # ------------------------------------------------------------------ helpers

    async def _completed_from(self, head: Any | None) -> Any | None:
        if head is None:
            return None
        current = head
        for _ in range(FAILED_STEPS_WALKED):
            if current is None or stored_step(current)["status"] != FAILED:
                return current
            previous = current.previous_checkpoint_id
            current = None if previous is None else await self._load_if_stored(previous)
        raise CheckpointCorruptedError(
            head.checkpoint_id, f"more than {FAILED_STEPS_WALKED} failed steps in a row before it"
        )

    async def _load_if_stored(self, checkpoint_id: str) -> Any | None:
        try:
            return await self.storage.load(checkpoint_id)
        except CheckpointNotFoundError:
            return None

    async def _latest_per_app(self, partition: str) -> dict[str, Any]:
        if Capability.LIST_WORKFLOWS not in frozenset(self.storage.capabilities):
            raise UnsupportedOperationError(
                str(self.storage), "list_app_ids (Burr)", Capability.LIST_WORKFLOWS.value
            )
        prefix = partition_prefix(partition)
        names = [name for name in await self.storage.list_workflows() if name.startswith(prefix)]
        apps = [parsed[1] for name in names if (parsed := parse_workflow(name)) is not None]
        latest = await asyncio.gather(*(self.storage.get_latest(workflow_name=name) for name in names))
        return {app: stored for app, stored in zip(apps, latest, strict=True) if stored is not None}

    async def _latest_in_partition(self, partition: str) -> dict[str, Any] | None:
        latest = await self._latest_per_app(partition)
        if not latest:
            return None
        newest = max(latest.values(), key=lambda stored: stored.timestamp)
        completed = await self._completed_from(newest)
        return None if completed is None else self._data(completed)

    def _data(self, stored: Any) -> dict[str, Any]:
        step = stored_step(stored)
        try:
            state: State[Any] = State.deserialize(step["state"], **self.serde_kwargs)
        except Exception as error:
            raise CheckpointCorruptedError(
                stored.checkpoint_id, f"Burr cannot deserialize its state: {type(error).__name__}: {error}"
            ) from error
        return {
            "partition_key": step["partition_key"],
            "app_id": step["app_id"],
            "sequence_id": step["sequence_id"],
            "position": step["position"],
            "state": state,
            "created_at": stored.timestamp,
            "status": step["status"],
        }


def _coordinates(stored: Any | None) -> tuple[str, int, str] | None:
    """(app_id, sequence_id, status) of a stored step, or None."""
    if stored is None:
        return None
    step = stored_step(stored)
    return step["app_id"], step["sequence_id"], step["status"]


def _follows(seen: Seen, app_id: str, sequence: int, *, first_read: bool) -> bool:
    """Whether a step of ``app_id`` numbered ``sequence`` may follow what the persister saw.

    After its own reads and saves, a persister only refuses a step that does not advance the
    application past the one it saw (a run it has superseded, sharing the persister); the fence
    decides the rest. On a first read it also requires the step to follow the latest."""
    seen_step = seen.carried
    if seen_step is None:
        return True
    seen_app: str
    seen_sequence: int
    seen_status: str
    seen_app, seen_sequence, seen_status = seen_step
    if seen_app != app_id:
        # Another application's step: a workflow shared by several applications (a subclass's
        # naming). A first read accepts only a new application's first step there.
        return not first_read or sequence == 0
    retry = seen_sequence == sequence and seen_status == FAILED
    if first_read:
        return retry or seen_sequence == sequence - 1
    return retry or seen_sequence < sequence


__all__ = ["FAILED_STEPS_WALKED", "Naming", "StepRecords"]
