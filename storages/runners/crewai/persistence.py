"""StorageFlowPersistence: CrewAI's ``FlowPersistence`` over any storage of this project.

CrewAI calls a flow persistence synchronously, from a plain thread or from a coroutine on its own
event loop. Every storage call here runs on the adapter's private loop (storages.runners.loop_thread), so
no call re-enters or blocks a loop other than by the wait CrewAI's synchronous API asks for.

Semantics (docs/crewai.md):

* ``load_state(flow_uuid)`` is the flow's latest state as the storage orders its checkpoints
  (commit order); ``save_state`` appends a checkpoint continuing the one this adapter last saw of
  the flow, fenced on it: a dropped run that saves late, after another run took the flow over,
  is refused with StaleWriterError and stores nothing (CrewAI reports it as a failed save).
* Pending human feedback travels inside the checkpoint that saves it, so saving it is one atomic
  save; it stays the flow's pending feedback, carried by later saves, until
  ``clear_pending_feedback`` saves a checkpoint without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Self, TypeVar

from crewai.flow.persistence.base import FlowPersistence
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ...engine import CheckpointStore
from ...errors import StorageConfigurationError
from ...redaction import redact_url
from ...urls import open_storage
from ..heads import Heads, Seen
from ..loop_thread import LoopPortal, LoopThread
from .mapping import build_checkpoint, state_dict, stored_state, workflow_for

if TYPE_CHECKING:
    from crewai.flow.async_feedback.types import PendingFeedbackContext

T = TypeVar("T")

CLEAR_METHOD = "clear_pending_feedback"
"""The method name of the checkpoint ``clear_pending_feedback`` saves (the state unchanged)."""


class StorageFlowPersistence(FlowPersistence):
    """CrewAI ``FlowPersistence`` over a storage URL or a storage you hold.

    ``StorageFlowPersistence("redis://127.0.0.1:6379/0?prefix=flows")`` opens the storage on the
    adapter's own loop; ``StorageFlowPersistence(storage)`` uses a new handle on a storage you hold
    (its ``new_handle()``; you keep closing yours). ``StorageFlowPersistence(storage, loop=loop)``
    uses that storage itself on ``loop``, the running loop it belongs to: flows then run in other
    threads (``await asyncio.to_thread(flow.kickoff, ...)``). Close the adapter with :meth:`close`.
    CrewAI may rebuild the adapter from its serialized form, which keeps the URL only.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    persistence_type: str = Field(default="StorageFlowPersistence")
    url: str | None = Field(default=None, repr=False, description="The storage URL, when built from one.")

    _storage: Any = PrivateAttr(default=None)
    _loop: LoopThread | LoopPortal | None = PrivateAttr(default=None)
    _heads: Heads | None = PrivateAttr(default=None)
    _restores: dict[str, Any] = PrivateAttr(default_factory=dict)
    _owned: bool = PrivateAttr(default=True)

    def __init__(
        self,
        storage: str | Any | None = None,
        /,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        **data: Any,
    ) -> None:
        if isinstance(storage, str):
            data["url"] = storage
            storage = None
        super().__init__(**data)
        if storage is None and self.url is None:
            raise StorageConfigurationError(
                "StorageFlowPersistence needs a storage URL or a storage: StorageFlowPersistence('sqlite:///flows.db')"
            )
        if loop is not None:
            if storage is None:
                raise StorageConfigurationError(
                    "StorageFlowPersistence(loop=...) needs the storage of that loop"
                )
            self._loop = LoopPortal(loop)
            self._owned = False
        elif storage is not None:
            new_handle = getattr(storage, "new_handle", None)
            self._owned = callable(new_handle)
            if callable(new_handle):
                storage = new_handle()
        self._storage = storage

    @classmethod
    def from_url(cls, url: str) -> Self:
        """The adapter over the storage at ``url``, opened on the adapter's own loop."""
        return cls(url)

    @classmethod
    def over(cls, storage: Any, *, loop: asyncio.AbstractEventLoop | None = None) -> Self:
        """The adapter over a storage you hold: a new handle of it on the adapter's own loop, or,
        with ``loop`` (the running loop the storage belongs to), the storage itself on that loop."""
        return cls(storage, loop=loop)

    @property
    def storage(self) -> Any:
        """The storage handle this adapter uses (opened on its own loop)."""
        if self._storage is None:
            assert self.url is not None
            self._storage = open_storage(self.url)
        return self._storage

    def __repr__(self) -> str:
        return f"<StorageFlowPersistence over {self.describe()}>"

    def describe(self) -> str:
        storage = self._storage
        if isinstance(storage, CheckpointStore):
            return storage.describe()
        return redact_url(self.url) if storage is None and self.url else type(storage).__name__

    def workflow_name(self, flow_uuid: str) -> str:
        """The workflow of one flow: :func:`storages.runners.crewai.mapping.workflow_for` (a subclass may
        name them otherwise)."""
        return workflow_for(flow_uuid)

    def restore(self, flow_uuid: str, checkpoint_id: str) -> dict[str, Any]:
        """Time travel: the flow's next ``load_state`` (its next ``kickoff(inputs={"id": ...})``)
        returns the state saved as ``checkpoint_id``, and its next save continues that checkpoint,
        fenced on the flow's latest as it is now (a fork; later saves follow it). Returns the state.

        CrewAI itself resumes a flow only from its latest state; this is the adapter's own.
        """

        async def read() -> dict[str, Any]:
            workflow_name = self.workflow_name(flow_uuid)
            restored, latest = await asyncio.gather(
                self.storage.load(checkpoint_id), self.storage.get_latest(workflow_name=workflow_name)
            )
            if restored.workflow_name != workflow_name:
                raise StorageConfigurationError(
                    f"checkpoint {checkpoint_id!r} belongs to workflow {restored.workflow_name!r}, "
                    f"not to flow {flow_uuid!r}"
                )
            state = stored_state(restored, flow_uuid)
            self._restores[flow_uuid] = state
            self._heads_here().remember(
                workflow_name,
                Seen(
                    restored.checkpoint_id,
                    None if latest is None else latest.checkpoint_id,
                    restored.iteration_count,
                    state["pending"],
                ),
            )
            return dict(state["state"])

        return self._run(read)

    # ------------------------------------------------------------------ CrewAI's interface

    def init_db(self) -> None:
        """Open the storage (it creates what it needs on first use)."""

        async def open_it() -> None:
            await self.storage.__aenter__()

        self._run(open_it)

    def save_state(self, flow_uuid: str, method_name: str, state_data: dict[str, Any] | BaseModel) -> None:
        state = state_dict(state_data)
        self._run(lambda: self._save(flow_uuid, method_name, state, keep_pending=True))

    def load_state(self, flow_uuid: str) -> dict[str, Any] | None:
        latest = self._run(lambda: self._latest(flow_uuid))
        return None if latest is None else dict(latest["state"])

    def save_pending_feedback(
        self, flow_uuid: str, context: PendingFeedbackContext, state_data: dict[str, Any] | BaseModel
    ) -> None:
        state = state_dict(state_data)
        pending = context.to_dict()
        self._run(lambda: self._save(flow_uuid, context.method_name, state, pending=pending))

    def load_pending_feedback(self, flow_uuid: str) -> tuple[dict[str, Any], PendingFeedbackContext] | None:
        from crewai.flow.async_feedback.types import PendingFeedbackContext

        latest = self._run(lambda: self._latest(flow_uuid))
        if latest is None or latest["pending"] is None:
            return None
        return dict(latest["state"]), PendingFeedbackContext.from_dict(dict(latest["pending"]))

    def clear_pending_feedback(self, flow_uuid: str) -> None:
        async def clear() -> None:
            latest = await self._latest(flow_uuid)
            if latest is not None and latest["pending"] is not None:
                await self._save(flow_uuid, CLEAR_METHOD, latest["state"], pending=None)

        self._run(clear)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the storage handle and the adapter's loop; idempotent."""
        loop, storage = self._loop, self._storage
        if loop is None:
            return
        loop.close(storage.aclose if storage is not None and self._owned else None)

    def __enter__(self) -> StorageFlowPersistence:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ on the adapter's loop

    def _run(self, call: Callable[[], Awaitable[T]]) -> T:
        loop = self._loop
        if loop is None:  # built by __init__ or rebuilt by CrewAI from its serialized form
            loop = self._loop = LoopThread(name=f"crewai-persistence {self.describe()}")
        return loop.run(call)

    def _heads_here(self) -> Heads:
        if self._heads is None:
            self._heads = Heads(self.storage)
        return self._heads

    async def _latest(self, flow_uuid: str) -> dict[str, Any] | None:
        restored: dict[str, Any] | None = self._restores.pop(flow_uuid, None)
        if restored is not None:
            return restored  # what restore() noted for the next save stays as it is
        workflow_name = self.workflow_name(flow_uuid)
        latest = await self.storage.get_latest(workflow_name=workflow_name)
        state = (
            None
            if latest is None or not self._belongs(latest, flow_uuid)
            else stored_state(latest, flow_uuid)
        )
        self._heads_here().latest_seen(workflow_name, latest, None if state is None else state["pending"])
        return state

    def _belongs(self, stored: Any, flow_uuid: str) -> bool:
        """True if the latest record of ``flow_uuid``'s workflow is that flow's. A workflow holds
        one flow only, so another flow's record there is corrupted: raise. (A subclass whose
        workflows hold several flows returns False: the flow has no state yet, and its next save
        continues that record, fenced on it.)"""
        stored_state(stored, flow_uuid)
        return True

    async def _save(
        self,
        flow_uuid: str,
        method_name: str,
        state: dict[str, Any],
        *,
        pending: dict[str, Any] | None = None,
        keep_pending: bool = False,
    ) -> None:
        workflow_name = self.workflow_name(flow_uuid)
        heads = self._heads_here()
        seen = heads.get(workflow_name)
        if seen is None:
            await self._latest(flow_uuid)
            seen = heads.get(workflow_name)
            assert isinstance(seen, Seen)
        carried = seen.carried if keep_pending else pending
        checkpoint = build_checkpoint(
            workflow_name,
            flow_uuid,
            method_name,
            state,
            previous_id=seen.previous,
            iteration=seen.iteration + 1,
            pending=carried,
        )
        await heads.save(checkpoint, seen.expected, carried)


__all__ = ["CLEAR_METHOD", "StorageFlowPersistence"]
