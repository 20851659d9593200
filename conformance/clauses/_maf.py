"""MAF facts the clauses need without importing MAF when it is absent."""

from __future__ import annotations

import importlib.util

from storages.errors import CheckpointNotFoundError, CheckpointStorageError


def is_runner_checkpoint_error(exc: BaseException) -> bool:
    """True if ``exc`` is MAF's WorkflowCheckpointException (what MAF's own storages raise)."""
    if importlib.util.find_spec("agent_framework") is None:
        return False
    from agent_framework.exceptions import WorkflowCheckpointException

    return isinstance(exc, WorkflowCheckpointException)


def is_not_found(exc: BaseException) -> bool:
    """True if ``exc`` says "no such checkpoint": ours, or MAF's exception from a MAF storage.

    Our other errors (a corrupted body, say) also derive from MAF's exception, so they are
    excluded: they are not "not found".
    """
    if isinstance(exc, CheckpointNotFoundError):
        return True
    return is_runner_checkpoint_error(exc) and not isinstance(exc, CheckpointStorageError)
