"""CrewAI's and Burr's coordinates in what ``inspect`` shows: a checkpoint written by
``storages.runners.crewai`` shows its flow, the method that completed, the flow state and any pending
human feedback; one written by ``storages.runners.burr`` its partition, application, step (sequence_id),
position, status and the application state, as Burr serialized it. Both adapters store plain
values through our codec, so nothing here needs the runner installed."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from ...contract import CheckpointInfo

CREWAI_PREFIX = "crewai:"
BURR_PREFIX = "burr:"
_CREWAI_KEYS = ("flow_uuid", "method_name", "state", "pending")
_BURR_KEYS = ("partition_key", "app_id", "sequence_id", "position", "status", "state")


def runner_place(workflow_name: str) -> tuple[str, dict[str, str]] | None:
    """(runner, coordinates) of a workflow a CrewAI or Burr adapter writes, else None."""
    if workflow_name.startswith(CREWAI_PREFIX) and len(workflow_name) > len(CREWAI_PREFIX):
        return "crewai", {"flow_uuid": unquote(workflow_name[len(CREWAI_PREFIX) :])}
    if workflow_name.startswith(BURR_PREFIX):
        partition, separator, app = workflow_name[len(BURR_PREFIX) :].partition(":")
        if separator and app:
            return "burr", {"partition_key": unquote(partition), "app_id": unquote(app)}
    return None


def runner_fields(info: CheckpointInfo, checkpoint: Any) -> list[tuple[str, Any]]:
    """The runner's own fields of a CrewAI or Burr record, in the runner's terms; empty for any
    other record (or one whose state is not the adapter's: it is then shown as stored)."""
    place = runner_place(info.workflow_name)
    state = getattr(checkpoint, "state", None)
    if place is None or not isinstance(state, dict):
        return []
    runner, _ = place
    if runner == "crewai" and all(key in state for key in _CREWAI_KEYS):
        return [
            ("runner", "crewai"),
            ("flow_uuid", state["flow_uuid"]),
            ("method_name", state["method_name"]),
            ("flow_state", state["state"]),
            ("pending_feedback", state["pending"]),
        ]
    if runner == "burr" and all(key in state for key in _BURR_KEYS):
        return [
            ("runner", "burr"),
            *((key, state[key]) for key in ("partition_key", "app_id", "sequence_id", "position", "status")),
            ("app_state", state["state"]),
        ]
    return []


__all__ = ["BURR_PREFIX", "CREWAI_PREFIX", "runner_fields", "runner_place"]
