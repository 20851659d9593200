"""A delegating wrapper of a storage: every call forwarded to an inner ``InMemoryCheckpointStorage``.

Written the way an outside author writes a metrics or logging wrapper: each method of the storage
API the kit calls is spelled out and forwarded with its arguments; anything else falls through
``__getattr__``. ``python -m bench.mutation --target wrapper`` mutates this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from storages.contract import Capability, CheckpointID, PendingWrite
from storages.memory import InMemoryCheckpointStorage


class DelegatingStorage:
    """Forwards to ``inner``; handles from :meth:`new_handle` wrap handles of the same store."""

    def __init__(self, inner: InMemoryCheckpointStorage | None = None) -> None:
        self.inner = inner if inner is not None else InMemoryCheckpointStorage()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self.inner.capabilities

    def new_handle(self) -> DelegatingStorage:
        return DelegatingStorage(self.inner.new_handle())

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> DelegatingStorage:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.inner.__aexit__(*exc_info)

    async def save(self, checkpoint: Any, **fence: Any) -> CheckpointID:
        return await self.inner.save(checkpoint, **fence)

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        return await self.inner.load(checkpoint_id, **options)

    async def list_checkpoints(self, *, workflow_name: str, **options: Any) -> list[Any]:
        return await self.inner.list_checkpoints(workflow_name=workflow_name, **options)

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        return await self.inner.list_checkpoint_ids(workflow_name=workflow_name, **options)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return await self.inner.delete(checkpoint_id)

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any:
        return await self.inner.get_latest(workflow_name=workflow_name, **options)

    async def walk_ancestry(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        return await self.inner.walk_ancestry(checkpoint_id, **options)

    async def walk_ancestry_ids(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        return await self.inner.walk_ancestry_ids(checkpoint_id, **options)

    async def list_nested(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        return await self.inner.list_nested(checkpoint_id)

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        return await self.inner.prune(workflow_name=workflow_name, keep_last=keep_last)

    async def delete_workflow(self, *, workflow_name: str) -> int:
        return await self.inner.delete_workflow(workflow_name=workflow_name)

    async def list_workflows(self) -> list[str]:
        return await self.inner.list_workflows()

    async def put_writes(
        self, checkpoint_id: CheckpointID, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None:
        await self.inner.put_writes(checkpoint_id, writes, workflow_name=workflow_name)

    async def list_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> list[PendingWrite]:
        return await self.inner.list_writes(checkpoint_id, workflow_name=workflow_name)

    async def delete_writes(self, checkpoint_id: CheckpointID, *, workflow_name: str) -> int:
        return await self.inner.delete_writes(checkpoint_id, workflow_name=workflow_name)

    async def read_raw_body(self, checkpoint_id: CheckpointID) -> bytes | None:
        return await self.inner.read_raw_body(checkpoint_id)

    async def write_raw_body(self, checkpoint_id: CheckpointID, body: bytes) -> None:
        await self.inner.write_raw_body(checkpoint_id, body)

    def iter_records(self, **options: Any) -> AsyncIterator[Any]:
        return self.inner.iter_records(**options)
