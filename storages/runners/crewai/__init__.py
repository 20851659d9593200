"""CrewAI Flows' persistence over any storage of this project: :class:`StorageFlowPersistence`.

``@persist(StorageFlowPersistence("redis://..."))`` on a flow or a method, or once for every flow:
``set_flow_persistence_factory(lambda: persistence)``. The mapping is in :mod:`.mapping`
(docs/crewai.md), the adapter in :mod:`.persistence`.
"""

from __future__ import annotations

from ...errors import MissingDependencyError

try:
    import crewai.flow.persistence.base  # noqa: F401 - the extra's presence, checked once
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("StorageFlowPersistence", "crewai", error.name or "crewai") from error

from .mapping import GRAPH_SIGNATURE, WORKFLOW_PREFIX, flow_uuid_of, workflow_for
from .persistence import CLEAR_METHOD, StorageFlowPersistence

__all__ = [
    "CLEAR_METHOD",
    "GRAPH_SIGNATURE",
    "WORKFLOW_PREFIX",
    "StorageFlowPersistence",
    "flow_uuid_of",
    "workflow_for",
]
