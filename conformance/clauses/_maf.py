"""MAF facts the clauses need without importing MAF when it is absent."""

from __future__ import annotations

import importlib.util


def is_runner_checkpoint_error(exc: BaseException) -> bool:
    """True if ``exc`` is MAF's WorkflowCheckpointException (what MAF's own storages raise)."""
    if importlib.util.find_spec("agent_framework") is None:
        return False
    from agent_framework.exceptions import WorkflowCheckpointException

    return isinstance(exc, WorkflowCheckpointException)
