"""In-memory storage: ``InMemoryCheckpointStorage`` over ``MemoryBackend`` (backend.py)."""

from __future__ import annotations

from .backend import MemoryBackend
from .storage import URL_OPTIONS, InMemoryCheckpointStorage

__all__ = ["URL_OPTIONS", "InMemoryCheckpointStorage", "MemoryBackend"]
