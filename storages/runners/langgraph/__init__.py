"""A LangGraph checkpointer over any storage of this project: :class:`StorageSaver`.

``StorageSaver(storage)`` or ``async with StorageSaver.from_url("redis://...") as saver:`` then
``builder.compile(checkpointer=saver)``. The mapping is in :mod:`.mapping` (docs/langgraph.md),
the async interface in :mod:`.saver`, the sync one in :mod:`.sync`.
"""

from __future__ import annotations

from ...errors import MissingDependencyError

try:
    import langchain_core.runnables  # noqa: F401 - the extra's presence, checked once
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("StorageSaver", "langgraph", error.name or "langgraph") from error

from .mapping import GRAPH_SIGNATURE, WORKFLOW_PREFIX, escape_part, stored_id_for, thread_prefix, workflow_for
from .saver import StorageSaver

__all__ = [
    "GRAPH_SIGNATURE",
    "WORKFLOW_PREFIX",
    "StorageSaver",
    "escape_part",
    "stored_id_for",
    "thread_prefix",
    "workflow_for",
]
