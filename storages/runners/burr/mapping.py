"""How Apache Burr's persistence maps onto a storage's checkpoints (docs/burr.md, The mapping).

* (partition_key, app_id) is one workflow, ``burr:<partition_key>:<app_id>``, both parts
  percent-escaped: distinct pairs never share a workflow and a partition's apps share a prefix.
  A None partition key is Burr's default, the empty string, as Burr's own persisters store it.
* A step's checkpoint id is derived from the workflow, the application and its ``sequence_id``,
  so a save retried after an ambiguous failure stores nothing twice, and a second, different state
  for the same step is refused (reported as StaleWriterError) as Burr's SQLite persister refuses
  it (its primary key): continue an application from an older step in a new ``app_id`` (Burr's
  fork), not in the same one.
  A failed step's id also names the checkpoint it followed, so a step that fails again after a
  resume is a record of its own.
* The checkpoint's state holds the coordinates (partition_key, app_id, sequence_id, position,
  status) and Burr's own serialization of the application state (``State.serialize()``: JSON
  values, Burr's per-field serde applied); ``created_at`` is the checkpoint's timestamp and
  ``iteration_count`` the steps completed.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote, unquote

from ...contract import CHECKPOINT_VERSION, MAX_ID_LENGTH, WorkflowCheckpoint
from ...errors import CheckpointCorruptedError, InvalidCheckpointError, InvalidCheckpointIdError

WORKFLOW_PREFIX: Final = "burr:"
"""Every workflow the Burr adapter writes starts with this."""
GRAPH_SIGNATURE: Final = "burr"
"""Burr keeps no graph signature; every checkpoint carries this constant."""
PARTITION_KEY_DEFAULT: Final = ""
"""What a None partition key is stored as (Burr's SQLite and Redis persisters' default)."""
FAILED: Final = "failed"
"""The status of a step that raised: its state is the state before the step."""
STATE_KEYS: Final = ("partition_key", "app_id", "sequence_id", "position", "status", "state")
"""The keys of a stored checkpoint's state, all checked on every read."""


def partition_of(partition_key: Any) -> str:
    if partition_key is None:
        return PARTITION_KEY_DEFAULT
    if not isinstance(partition_key, str):
        raise InvalidCheckpointIdError("partition_key", partition_key, "must be a str or None")
    return partition_key


def partition_prefix(partition_key: str) -> str:
    """The start of the workflow name of every application of a partition."""
    return f"{WORKFLOW_PREFIX}{quote(partition_key, safe='')}:"


def workflow_for(partition_key: str, app_id: Any) -> str:
    """The workflow holding one application's steps."""
    if not isinstance(app_id, str) or not app_id:
        raise InvalidCheckpointIdError("app_id", app_id, "must be a non-empty str")
    name = partition_prefix(partition_key) + quote(app_id, safe="")
    if len(name) > MAX_ID_LENGTH:
        raise InvalidCheckpointIdError(
            "app_id",
            app_id,
            f"with partition_key {partition_key!r} escapes to a {len(name)}-character workflow name; "
            f"the limit is {MAX_ID_LENGTH}",
        )
    return name


def parse_workflow(name: str) -> tuple[str, str] | None:
    """(partition_key, app_id) of a workflow the adapter wrote, or None."""
    if not name.startswith(WORKFLOW_PREFIX):
        return None
    partition, separator, app = name[len(WORKFLOW_PREFIX) :].partition(":")
    if not separator or not app:
        return None
    return unquote(partition), unquote(app)


def sequence_of(sequence_id: Any) -> int:
    if isinstance(sequence_id, bool) or not isinstance(sequence_id, int) or sequence_id < 0:
        raise InvalidCheckpointError(
            f"Invalid sequence_id {sequence_id!r}: must be an int >= 0", field="sequence_id"
        )
    return sequence_id


def _digest(*parts: str, size: int = 16) -> str:
    digest = hashlib.blake2b(digest_size=size)
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


def step_id(workflow_name: str, partition_key: str, app_id: str, sequence_id: int) -> str:
    """The id of an application's step that completed (in the workflow holding it)."""
    return f"burr-{_digest(workflow_name, partition_key, app_id)}-{sequence_id:020d}"


def failed_step_id(
    workflow_name: str, partition_key: str, app_id: str, sequence_id: int, after: str | None
) -> str:
    """The id of an application's step that failed, after checkpoint ``after`` (None: none)."""
    return (
        f"{step_id(workflow_name, partition_key, app_id, sequence_id)}-failed-{_digest(after or '', size=8)}"
    )


def build_checkpoint(
    partition_key: str,
    app_id: str,
    sequence_id: int,
    position: str,
    status: str,
    state: dict[str, Any],
    *,
    workflow_name: str,
    previous_id: str | None,
) -> WorkflowCheckpoint:
    """The checkpoint of one step (positional, in field order)."""
    failed = status == FAILED
    checkpoint_id = (
        failed_step_id(workflow_name, partition_key, app_id, sequence_id, previous_id)
        if failed
        else step_id(workflow_name, partition_key, app_id, sequence_id)
    )
    return WorkflowCheckpoint(
        workflow_name,
        GRAPH_SIGNATURE,
        checkpoint_id,
        previous_id,
        datetime.now(UTC).isoformat(),
        {},
        {
            "partition_key": partition_key,
            "app_id": app_id,
            "sequence_id": sequence_id,
            "position": position,
            "status": status,
            "state": state,
        },
        {},
        sequence_id if failed else sequence_id + 1,
        {},
        CHECKPOINT_VERSION,
    )


def stored_step(stored: Any) -> dict[str, Any]:
    """A stored checkpoint's state, checked: every key, of the right types."""
    state = stored.state
    if not isinstance(state, dict) or any(key not in state for key in STATE_KEYS):
        raise CheckpointCorruptedError(stored.checkpoint_id, "not a Burr step (keys missing)")
    sequence = state["sequence_id"]
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise CheckpointCorruptedError(stored.checkpoint_id, "its Burr sequence_id is not an int")
    if not all(isinstance(state[key], str) for key in ("partition_key", "app_id", "position", "status")):
        raise CheckpointCorruptedError(stored.checkpoint_id, "its Burr coordinates are not strings")
    if not isinstance(state["state"], dict):
        raise CheckpointCorruptedError(stored.checkpoint_id, "its Burr state is not a dict")
    return state


__all__ = [
    "FAILED",
    "GRAPH_SIGNATURE",
    "PARTITION_KEY_DEFAULT",
    "STATE_KEYS",
    "WORKFLOW_PREFIX",
    "build_checkpoint",
    "failed_step_id",
    "parse_workflow",
    "partition_of",
    "partition_prefix",
    "sequence_of",
    "step_id",
    "stored_step",
    "workflow_for",
]
