"""StorageSaver: LangGraph's ``BaseCheckpointSaver`` over a storage that declares ``pending_writes``.

* Checkpoints and metadata go through the saver's ``serde`` (LangGraph's allow-list and
  EncryptedSerializer apply); the storage's codec carries the resulting bytes and the envelope.
* Pending writes use the storage's ``pending_writes`` capability: one batch per ``put_writes``
  call (atomic), per (task_id, idx) the first write kept and a special channel's latest.
* Reads ask the storage as little as they can: ``alist`` reads a workflow's writes in one
  ``list_workflow_writes`` call, and on a backend with I/O a load by id reads the checkpoint and
  its writes concurrently.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ...contract import CHECKPOINT_VERSION, Capability, PendingWrite, WorkflowCheckpoint
from ...engine import CheckpointStore
from ...errors import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    InvalidCheckpointError,
    UnsupportedOperationError,
)
from ...urls import open_storage
from .mapping import (
    GRAPH_SIGNATURE,
    config_for,
    config_target,
    older_than,
    parse_workflow,
    stored_id_for,
    supersteps_done,
    thread_prefix,
    workflow_for,
)
from .sync import SyncMethods

_Selection = list[tuple[str, str, str]]
"""(workflow name, thread_id, checkpoint_ns) triples; an alias because StorageSaver.list shadows list."""

_TYPE_KEYS = {"checkpoint": "checkpoint_type", "metadata": "metadata_type"}
"""Where a stored state keeps the serde type of each of its serialized values."""

_PER_CHECKPOINT_WRITES_UP_TO = 2
"""An ``alist`` whose limit is at most this reads each tuple's writes by its checkpoint; a longer
listing reads the workflow's whole writes log in one call."""


class StorageSaver(SyncMethods):
    """LangGraph's ``BaseCheckpointSaver`` over a storage that declares ``pending_writes``.

    Async first. The sync methods, as LangGraph's own async savers provide them, run the async
    ones on the loop the saver was last used from, and only from another thread.
    """

    def __init__(self, storage: CheckpointStore, *, serde: SerializerProtocol | None = None) -> None:
        if Capability.PENDING_WRITES not in storage.capabilities:
            raise UnsupportedOperationError(
                storage.describe(), "StorageSaver (LangGraph pending writes)", Capability.PENDING_WRITES.value
            )
        super().__init__(serde=serde)
        self.storage = storage
        # A backend (or a test double, or a wrapper forwarding attributes) with a put_writes of
        # its own gets every batch through it.
        self._task_writes = getattr(type(storage), "put_writes", None) is CheckpointStore.put_writes
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str, *, serde: SerializerProtocol | None = None, **options: Any
    ) -> AsyncIterator[StorageSaver]:
        """Open the storage at ``url`` (options go to the backend), yield a saver, close it."""
        async with open_storage(url, **options) as storage:
            yield cls(storage, serde=serde)

    def __repr__(self) -> str:
        return f"<StorageSaver over {self.storage.describe()}>"

    def workflow_name(self, thread_id: str, checkpoint_ns: str) -> str:
        """The workflow of one (thread_id, checkpoint_ns): :func:`workflow_for`. A subclass may
        name them otherwise (the LangGraph runner profile does), but thread-wide operations
        (listing a whole thread, delete, copy, prune) find a thread by the default names."""
        return workflow_for(thread_id, checkpoint_ns)

    # ------------------------------------------------------------------ async interface

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self.loop = asyncio.get_running_loop()
        thread_id, checkpoint_ns, checkpoint_id = config_target(config)
        workflow_name = self.workflow_name(thread_id, checkpoint_ns)
        if checkpoint_id is None:
            stored = await self._latest(workflow_name, thread_id, checkpoint_ns)
            if stored is None:
                return None
            return await self._tuple(stored, thread_id, checkpoint_ns)
        stored_id = stored_id_for(workflow_name, checkpoint_id)
        if not self._reads_concurrently:
            stored = await self._load_if_stored(stored_id)
            return None if stored is None else await self._tuple(stored, thread_id, checkpoint_ns)
        # Both reads at once: the writes are found by the id asked for, not by the record.
        loaded, writes = await asyncio.gather(
            self._load_if_stored(stored_id),
            self.storage.list_writes(stored_id, workflow_name=workflow_name),
            return_exceptions=True,
        )
        if isinstance(loaded, BaseException):
            raise loaded
        if isinstance(writes, BaseException):
            raise writes
        if loaded is None:
            return None
        if loaded.workflow_name != workflow_name:
            writes = None  # not where it was looked for: _tuple reads (and checks) its own workflow
        return await self._tuple(loaded, thread_id, checkpoint_ns, writes=writes)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        self.loop = asyncio.get_running_loop()
        before_id = None if before is None else before.get("configurable", {}).get("checkpoint_id")
        remaining = limit
        for workflow_name, thread_id, checkpoint_ns in await self._workflows(config):
            if remaining is not None and remaining <= 0:
                return
            checkpoints = await self.storage.list_checkpoints(workflow_name=workflow_name)
            checkpoints.reverse()
            if before_id is not None:
                checkpoints = older_than(checkpoints, workflow_name, before_id)
            if not checkpoints:
                continue
            # The log is read after the checkpoints, as one list_writes per tuple would read it.
            writes_by_id: dict[str, list[PendingWrite]] | None = None
            if remaining is None or remaining > _PER_CHECKPOINT_WRITES_UP_TO:
                writes_by_id = await self.storage.list_workflow_writes(workflow_name=workflow_name)
            for stored in checkpoints:
                if remaining is not None and remaining <= 0:
                    return
                if not self._belongs(stored, thread_id, checkpoint_ns):
                    continue
                metadata = None
                if filter:
                    # Filter on the metadata alone, before the writes are read; the tuple reuses it.
                    metadata = self._loads(stored, "metadata")
                    if not isinstance(metadata, dict) or not all(
                        metadata.get(key) == value for key, value in filter.items()
                    ):
                        continue
                writes = None
                if writes_by_id is not None and stored.workflow_name == workflow_name:
                    writes = writes_by_id.get(stored.checkpoint_id, [])
                item = await self._tuple(stored, thread_id, checkpoint_ns, metadata, writes=writes)
                if remaining is not None:
                    remaining -= 1
                yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self.loop = asyncio.get_running_loop()
        thread_id, checkpoint_ns, parent_id = config_target(config)
        workflow_name = self.workflow_name(thread_id, checkpoint_ns)
        checkpoint_id = checkpoint["id"]
        full_metadata = get_checkpoint_metadata(config, metadata)
        checkpoint_type, checkpoint_bytes = self.serde.dumps_typed(checkpoint)
        metadata_type, metadata_bytes = self.serde.dumps_typed(full_metadata)
        # Flat: every value an atom, so our codec carries the state without walking it.
        state = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "checkpoint_type": checkpoint_type,
            "checkpoint": checkpoint_bytes,
            "metadata_type": metadata_type,
            "metadata": metadata_bytes,
        }
        # Positional, in field order (keywords and the default factories cost twice as much):
        # workflow, signature, id, previous id, timestamp, messages, state, pending requests,
        # iteration count, metadata, version.
        await self.storage.save(
            WorkflowCheckpoint(
                workflow_name,
                GRAPH_SIGNATURE,
                stored_id_for(workflow_name, checkpoint_id),
                None if parent_id is None else stored_id_for(workflow_name, parent_id),
                checkpoint["ts"],
                {},
                state,
                {},
                supersteps_done(full_metadata),
                {},
                CHECKPOINT_VERSION,
            )
        )
        return config_for(config["configurable"]["thread_id"], checkpoint_ns, checkpoint_id)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.loop = asyncio.get_running_loop()
        thread_id, checkpoint_ns, checkpoint_id = config_target(config)
        if checkpoint_id is None:
            raise InvalidCheckpointError(
                "put_writes needs a config with a checkpoint_id", field="checkpoint_id"
            )
        workflow_name = self.workflow_name(thread_id, checkpoint_ns)
        stored_id = stored_id_for(workflow_name, checkpoint_id)
        dumps = self.serde.dumps_typed
        if self._task_writes:
            # The engine's own put_writes: handed the task's writes as fields, it stores the batch
            # put_writes would, without a PendingWrite built per write (a tenth of this call).
            await self.storage.put_task_writes(
                stored_id,
                task_id,
                task_path,
                [
                    (WRITES_IDX_MAP.get(channel, position), channel, list(dumps(value)))
                    for position, (channel, value) in enumerate(writes)
                ],
                workflow_name,
            )
            return
        batch = [
            # Positional: a frozen dataclass's keyword call costs a third more, per write.
            PendingWrite(
                task_id, WRITES_IDX_MAP.get(channel, position), channel, list(dumps(value)), task_path
            )
            for position, (channel, value) in enumerate(writes)
        ]
        await self.storage.put_writes(stored_id, batch, workflow_name=workflow_name)

    async def adelete_thread(self, thread_id: str) -> None:
        self.loop = asyncio.get_running_loop()
        for workflow_name, _, _ in await self._thread_workflows(str(thread_id)):
            await self.storage.delete_workflow(workflow_name=workflow_name)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.loop = asyncio.get_running_loop()
        doomed = set(run_ids)
        if not doomed:
            return
        for workflow_name, _, _ in await self._workflows(None):
            for stored in await self.storage.list_checkpoints(workflow_name=workflow_name):
                metadata = self._loads(stored, "metadata")
                if isinstance(metadata, dict) and metadata.get("run_id") in doomed:
                    # Writes first, as delete_workflow does: never writes without their checkpoint.
                    await self.storage.delete_writes(stored.checkpoint_id, workflow_name=workflow_name)
                    await self.storage.delete(stored.checkpoint_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every namespace's whole chain, oldest first, keeping LangGraph's ids; each save
        and each write batch is idempotent, so an interrupted copy completes when run again."""
        self.loop = asyncio.get_running_loop()
        for source_name, _, checkpoint_ns in await self._thread_workflows(str(source_thread_id)):
            target_name = self.workflow_name(str(target_thread_id), checkpoint_ns)
            for stored in await self.storage.list_checkpoints(workflow_name=source_name):
                checkpoint_id = self._stored_field(stored, "checkpoint_id")
                previous = None
                if stored.previous_checkpoint_id is not None:
                    parent_id = stored.previous_checkpoint_id.rpartition("@")[0]
                    previous = stored_id_for(target_name, parent_id)
                copy_id = stored_id_for(target_name, checkpoint_id)
                await self.storage.save(
                    WorkflowCheckpoint(
                        workflow_name=target_name,
                        graph_signature_hash=GRAPH_SIGNATURE,
                        checkpoint_id=copy_id,
                        previous_checkpoint_id=previous,
                        timestamp=stored.timestamp,
                        state={**stored.state, "thread_id": str(target_thread_id)},
                    )
                )
                writes = await self.storage.list_writes(stored.checkpoint_id, workflow_name=source_name)
                if writes:
                    await self.storage.put_writes(copy_id, writes, workflow_name=target_name)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest`` keeps each namespace's latest checkpoint (commit order) and its writes,
        tombstoning the rest; ``delete`` deletes the threads."""
        self.loop = asyncio.get_running_loop()
        if strategy not in ("keep_latest", "delete"):
            raise InvalidCheckpointError(
                f"prune strategy must be 'keep_latest' or 'delete', got {strategy!r}", field="strategy"
            )
        for thread_id in thread_ids:
            for workflow_name, _, _ in await self._thread_workflows(str(thread_id)):
                if strategy == "delete":
                    await self.storage.delete_workflow(workflow_name=workflow_name)
                else:
                    await self.storage.prune(workflow_name=workflow_name, keep_last=1)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Zero-padded so versions sort as strings, as LangGraph's own savers make them."""
        if current is None:
            number = 0
        elif isinstance(current, (int, float)):
            number = int(current)
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"  # noqa: S311 - a tie-breaker, not a secret

    # ------------------------------------------------------------------ mapping

    def _belongs(self, stored: Any, thread_id: str, checkpoint_ns: str) -> bool:
        """True if a record found under (thread_id, checkpoint_ns)'s workflow is that pair's.

        A workflow holds one pair only, so any other record there is corrupted: raise. (A
        subclass whose workflows hold several pairs returns False to pass over the others.)"""
        place = (stored.state.get("thread_id"), stored.state.get("checkpoint_ns"))
        if place != (thread_id, checkpoint_ns):
            raise CheckpointCorruptedError(
                stored.checkpoint_id,
                f"stored for thread and namespace {place!r} but found as {(thread_id, checkpoint_ns)!r}",
            )
        return True

    def _latest(self, workflow_name: str, thread_id: str, checkpoint_ns: str) -> Awaitable[Any | None]:
        """The namespace's latest checkpoint: its workflow's, by commit order (a subclass may
        override it with a coroutine function)."""
        # The storage's own awaitable, not a coroutine around it: one layer less per lookup.
        return self.storage.get_latest(workflow_name=workflow_name)

    async def _workflows(self, config: RunnableConfig | None) -> _Selection:
        """(workflow, thread_id, checkpoint_ns) of what ``config`` selects, in name order."""
        configurable = {} if config is None else config.get("configurable", {})
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            names = await self.storage.list_workflows()
            return [parsed for name in names if (parsed := parse_workflow(name)) is not None]
        checkpoint_ns = configurable.get("checkpoint_ns")
        if checkpoint_ns is None:
            return await self._thread_workflows(str(thread_id))
        return [(self.workflow_name(str(thread_id), checkpoint_ns), str(thread_id), checkpoint_ns)]

    async def _thread_workflows(self, thread_id: str) -> _Selection:
        prefix = thread_prefix(thread_id)
        names = await self.storage.list_workflows()
        return [(name, thread_id, unquote(name[len(prefix) :])) for name in names if name.startswith(prefix)]

    @property
    def _reads_concurrently(self) -> bool:
        # A backend with I/O (every durable one) overlaps two reads' round trips; in memory,
        # the tasks gather would create cost more than the reads.
        return Capability.DURABLE in self.storage.capabilities

    async def _load_if_stored(self, stored_id: str) -> Any | None:
        try:
            return await self.storage.load(stored_id)
        except CheckpointNotFoundError:
            return None

    async def _tuple(
        self,
        stored: Any,
        thread_id: str,
        checkpoint_ns: str,
        metadata: Any | None = None,
        *,
        writes: Sequence[PendingWrite] | None = None,
    ) -> CheckpointTuple:
        """The tuple of a record; ``metadata``, when given, is its already loaded metadata, and
        ``writes`` its pending writes already read (else they are read here)."""
        checkpoint_id = self._stored_field(stored, "checkpoint_id")
        if not self._belongs(stored, thread_id, checkpoint_ns):
            raise CheckpointCorruptedError(stored.checkpoint_id, "stored for another thread or namespace")
        checkpoint = self._loads(stored, "checkpoint")
        if metadata is None:
            metadata = self._loads(stored, "metadata")
        if not isinstance(checkpoint, dict) or checkpoint.get("id") != checkpoint_id:
            raise CheckpointCorruptedError(
                stored.checkpoint_id, "its LangGraph checkpoint is not the one indexed"
            )
        if writes is None:
            writes = await self.storage.list_writes(stored.checkpoint_id, workflow_name=stored.workflow_name)
        pending = (
            sorted(writes, key=lambda write: writes_sort_key(write.task_path, write.task_id, write.index))
            if len(writes) > 1
            else writes  # nothing to order (most tuples of a history): no key function built
        )
        parent = None
        if stored.previous_checkpoint_id is not None:
            parent = config_for(thread_id, checkpoint_ns, stored.previous_checkpoint_id.rpartition("@")[0])
        return CheckpointTuple(
            config=config_for(thread_id, checkpoint_ns, checkpoint_id),
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=metadata if isinstance(metadata, dict) else {},  # type: ignore[arg-type]
            parent_config=parent,
            pending_writes=[
                (write.task_id, write.channel, self._loads_value(stored.checkpoint_id, write.value))
                for write in pending
            ],
        )

    def _stored_field(self, stored: Any, name: str) -> str:
        value = stored.state.get(name)
        if not isinstance(value, str):
            raise CheckpointCorruptedError(stored.checkpoint_id, f"no LangGraph {name} in its state")
        return value

    def _loads(self, stored: Any, name: str) -> Any:
        state = stored.state
        # The type's key from a table, not built per call: every tuple of a listing loads two.
        type_key = _TYPE_KEYS.get(name) or f"{name}_type"
        return self._loads_value(stored.checkpoint_id, (state.get(type_key), state.get(name)), name)

    def _loads_value(self, stored_id: str, typed: Any, what: str = "pending write") -> Any:
        if not (
            isinstance(typed, (list, tuple))
            and len(typed) == 2
            and isinstance(typed[0], str)
            and isinstance(typed[1], bytes)
        ):
            raise CheckpointCorruptedError(stored_id, f"its LangGraph {what} is not a (type, bytes) pair")
        try:
            return self.serde.loads_typed((typed[0], typed[1]))
        except Exception as error:
            raise CheckpointCorruptedError(
                stored_id, f"LangGraph's serde cannot load its {what}: {type(error).__name__}"
            ) from error


__all__ = ["StorageSaver"]
