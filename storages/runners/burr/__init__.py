"""Apache Burr's state persistence over any storage of this project.

``StorageStatePersister("sqlite:///burr.db")`` (sync: ``build()``, ``run()``) or
``AsyncStorageStatePersister(url)`` (async: ``abuild()``, ``arun()``), passed to
``ApplicationBuilder.with_state_persister`` and ``initialize_from``. The mapping is in
:mod:`.mapping` (docs/burr.md), the operations in :mod:`.steps`, the persisters in :mod:`.persister`.
"""

from __future__ import annotations

from ...errors import MissingDependencyError

try:
    import burr.core.persistence  # noqa: F401 - the extra's presence, checked once
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "StorageStatePersister", "burr", error.name or "burr", distribution="checkpoint-storages"
    ) from error

from .mapping import GRAPH_SIGNATURE, PARTITION_KEY_DEFAULT, WORKFLOW_PREFIX, parse_workflow, workflow_for
from .persister import AsyncStorageStatePersister, StorageStatePersister

__all__ = [
    "GRAPH_SIGNATURE",
    "PARTITION_KEY_DEFAULT",
    "WORKFLOW_PREFIX",
    "AsyncStorageStatePersister",
    "StorageStatePersister",
    "parse_workflow",
    "workflow_for",
]
