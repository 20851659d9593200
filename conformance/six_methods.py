"""MAF's six storage methods forwarded to another storage: the base of every wrapper the kit
puts between a runner and the storage under test (a slow store, a recorder, a held save)."""

from __future__ import annotations

from typing import Any


class SixMethods:
    """``save``, ``load``, ``list_checkpoints``, ``list_checkpoint_ids``, ``delete`` and
    ``get_latest``, each forwarded to ``inner`` as MAF calls it; a wrapper overrides the one it
    changes. Nothing else is exposed: no capabilities, no ``aclose``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def save(self, checkpoint: Any) -> str:
        return str(await self.inner.save(checkpoint))

    async def load(self, checkpoint_id: str) -> Any:
        return await self.inner.load(checkpoint_id)

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        return list(await self.inner.list_checkpoints(workflow_name=workflow_name))

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        return list(await self.inner.list_checkpoint_ids(workflow_name=workflow_name))

    async def delete(self, checkpoint_id: str) -> bool:
        return bool(await self.inner.delete(checkpoint_id))

    async def get_latest(self, *, workflow_name: str) -> Any | None:
        return await self.inner.get_latest(workflow_name=workflow_name)


__all__ = ["SixMethods"]
