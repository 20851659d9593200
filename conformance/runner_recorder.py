"""A storage proxy the CrewAI and Burr runner profiles hand their adapters: it notes the id of
every checkpoint saved, by workflow, in save order.

The observation comes from what the runner saved through it, not from the storage's listings, so
a storage whose listings are broken cannot hide its defect behind a wrong observation. Everything
else (the other methods, the capabilities, the extensions) is the wrapped storage's own.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any


class SaveRecorder:
    """Forwards to ``storage``; ``saved[workflow_name]`` lists the ids ``save`` returned."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self.saved: defaultdict[str, list[str]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._storage, name)

    async def save(self, checkpoint: Any, **options: Any) -> str:
        saved: str = await self._storage.save(checkpoint, **options)
        self.saved[checkpoint.workflow_name].append(saved)
        return saved


__all__ = ["SaveRecorder"]
