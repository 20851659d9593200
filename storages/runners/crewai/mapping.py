"""How CrewAI Flows' persistence maps onto a storage's checkpoints (docs/crewai.md, The mapping).

* A flow's ``flow_uuid`` is one workflow, ``crewai:<flow_uuid>`` (percent-escaped), so every flow
  of a store is found by the prefix and distinct flow ids never share a workflow.
* Each ``save_state`` is one checkpoint continuing the flow's previous one, under a fresh id
  (``crewai-<uuid4 hex>``): two runs continuing the same checkpoint (a fork, or a stale run and
  its successor) never share an id, so the fence alone decides between them. A backend's retry of
  one save sends the same checkpoint, and a retried save that was applied is recognised as such.
* The checkpoint's state holds the flow id, the method that completed, the flow state as CrewAI's
  own SQLite persister stores it (JSON values: a pydantic state dumped in JSON mode) and, when a
  flow waits for human feedback, the pending context (``PendingFeedbackContext.to_dict()``).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote, unquote

from ...contract import CHECKPOINT_VERSION, MAX_ID_LENGTH, WorkflowCheckpoint
from ...errors import CheckpointCorruptedError, InvalidCheckpointIdError, UnserializableValueError

WORKFLOW_PREFIX: Final = "crewai:"
"""Every workflow the CrewAI adapter writes starts with this."""
GRAPH_SIGNATURE: Final = "crewai"
"""CrewAI keeps no graph signature; every checkpoint carries this constant."""
STATE_KEYS: Final = ("flow_uuid", "method_name", "state", "pending")
"""The keys of a stored checkpoint's state, all checked on every read."""


def workflow_for(flow_uuid: Any) -> str:
    """The workflow holding the states of one flow."""
    if not isinstance(flow_uuid, str) or not flow_uuid:
        raise InvalidCheckpointIdError("flow_uuid", flow_uuid, "must be a non-empty str")
    name = WORKFLOW_PREFIX + quote(flow_uuid, safe="")
    if len(name) > MAX_ID_LENGTH:
        raise InvalidCheckpointIdError(
            "flow_uuid",
            flow_uuid,
            f"escapes to a {len(name)}-character workflow name; the limit is {MAX_ID_LENGTH}",
        )
    return name


def flow_uuid_of(workflow_name: str) -> str | None:
    """The flow id a workflow name holds, or None for a workflow the adapter did not write."""
    if not workflow_name.startswith(WORKFLOW_PREFIX):
        return None
    return unquote(workflow_name[len(WORKFLOW_PREFIX) :])


def new_checkpoint_id() -> str:
    """A fresh id for the next save of a flow."""
    return f"crewai-{uuid.uuid4().hex}"


def state_dict(state_data: Any) -> dict[str, Any]:
    """The flow state as CrewAI's SQLite persister stores it: JSON values only.

    A pydantic state is dumped in JSON mode; a dict state is converted the same way (nested models,
    datetimes, tuples and sets become JSON values, as its ``json.dumps`` makes them). A value with
    no JSON form is refused with UnserializableValueError, where CrewAI's persister would store
    its ``str()``.
    """
    from pydantic import BaseModel
    from pydantic_core import PydanticSerializationError, to_jsonable_python

    if isinstance(state_data, BaseModel):
        source: Any = state_data
    elif isinstance(state_data, dict):
        source = state_data
    else:
        raise UnserializableValueError(
            type(state_data).__name__, "state_data", "CrewAI flow state must be a dict or a pydantic model"
        )
    try:
        converted = (
            source.model_dump(mode="json") if isinstance(source, BaseModel) else to_jsonable_python(source)
        )
    except (PydanticSerializationError, TypeError, ValueError) as error:
        raise UnserializableValueError(type(state_data).__name__, "state_data", str(error)) from error
    if not isinstance(converted, dict):
        raise UnserializableValueError(type(state_data).__name__, "state_data", "did not dump to a dict")
    return converted


def build_checkpoint(
    workflow_name: str,
    flow_uuid: str,
    method_name: str,
    state: dict[str, Any],
    *,
    previous_id: str | None,
    iteration: int,
    pending: dict[str, Any] | None,
) -> WorkflowCheckpoint:
    """The checkpoint of one save (positional, in field order)."""
    return WorkflowCheckpoint(
        workflow_name,
        GRAPH_SIGNATURE,
        new_checkpoint_id(),
        previous_id,
        datetime.now(UTC).isoformat(),
        {},
        {"flow_uuid": flow_uuid, "method_name": method_name, "state": state, "pending": pending},
        {},
        iteration,
        {},
        CHECKPOINT_VERSION,
    )


def stored_state(stored: Any, flow_uuid: str) -> dict[str, Any]:
    """A stored checkpoint's state, checked: it is this flow's and has every key."""
    state = stored.state
    if not isinstance(state, dict) or any(key not in state for key in STATE_KEYS):
        raise CheckpointCorruptedError(stored.checkpoint_id, "not a CrewAI flow state (keys missing)")
    if state["flow_uuid"] != flow_uuid:
        raise CheckpointCorruptedError(
            stored.checkpoint_id, f"stored for flow {state['flow_uuid']!r} but found as flow {flow_uuid!r}"
        )
    if not isinstance(state["state"], dict):
        raise CheckpointCorruptedError(stored.checkpoint_id, "its CrewAI flow state is not a dict")
    if state["pending"] is not None and not isinstance(state["pending"], dict):
        raise CheckpointCorruptedError(stored.checkpoint_id, "its pending feedback context is not a dict")
    return state


__all__ = [
    "GRAPH_SIGNATURE",
    "STATE_KEYS",
    "WORKFLOW_PREFIX",
    "build_checkpoint",
    "new_checkpoint_id",
    "flow_uuid_of",
    "state_dict",
    "stored_state",
    "workflow_for",
]
