"""What a save checks before anything is encoded: a checkpoint's fields, a pending write's
fields, and the option values every backend takes (allow-lists, depths). Bad input raises a typed
error naming the field; nothing reaches a backend."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from ..codec.packing import ATOMS
from ..contract import CHECKPOINT_FIELDS, CheckpointID, PendingWrite, validate_identifier
from ..errors import InvalidCheckpointError

NUL_IN_SIGNATURE = "holds a NUL character (U+0000), which no graph signature may hold"
"""Why a signature is refused: PostgreSQL's text cannot hold NUL, and a signature one built-in
store cannot keep would make a copy between stores fail (docs/contract.md, "Graph signatures")."""

_DICT_FIELDS = ("messages", "state", "pending_request_info_events", "metadata")
_DICTS = (dict,) * len(_DICT_FIELDS)


_checkpoint_fields = operator.attrgetter(
    "workflow_name",
    "graph_signature_hash",
    "checkpoint_id",
    "previous_checkpoint_id",
    "timestamp",
    "messages",
    "state",
    "pending_request_info_events",
    "iteration_count",
    "metadata",
    "version",
)
"""The 11 field values in one native call, in the order check_fields unpacks them (every save
reads them; a Python loop over the names was a sixth of a memory save)."""


def check_fields(checkpoint: Any, *, embedded_in: CheckpointID | None = None) -> bool:
    """Raise if ``checkpoint`` lacks a field or has one of the wrong type (``embedded_in`` names
    the container of an embedded one, for the message).

    Returns True when it is plainly flat (:data:`FLAT_ITEMS`): every field an exact atom and each
    of its four dicts at most that many exact ``str`` keys to exact atoms. Nothing can be embedded
    in such a checkpoint and every bin-like value in it is ``bytes``, so its body is
    ``encode_checkpoint(checkpoint, bin_from_bytes_only=True)`` whatever the backend (a tree
    encode finds no node in it). False says nothing: the codec's own walk decides."""
    try:
        (
            workflow_name,
            signature,
            checkpoint_id,
            previous_id,
            timestamp,
            messages,
            state,
            pending,
            iteration_count,
            metadata,
            version,
        ) = _checkpoint_fields(checkpoint)
    except AttributeError:
        where = "" if embedded_in is None else f" (embedded in checkpoint {embedded_in!r})"
        missing = next(name for name in CHECKPOINT_FIELDS if not hasattr(checkpoint, name))
        raise InvalidCheckpointError(
            f"{type(checkpoint).__name__}{where} is not a checkpoint: missing field {missing!r}",
            field=missing,
        ) from None
    validate_identifier(workflow_name, "workflow_name")
    validate_identifier(checkpoint_id, "checkpoint_id")
    if previous_id is not None:
        validate_identifier(previous_id, "previous_checkpoint_id")
    if not (isinstance(signature, str) and isinstance(timestamp, str) and isinstance(version, str)):
        _expect_field(checkpoint_id, "graph_signature_hash", signature, str)
        _expect_field(checkpoint_id, "timestamp", timestamp, str)
        _expect_field(checkpoint_id, "version", version, str)
    if "\x00" in signature:
        where = "" if embedded_in is None else f" (embedded in checkpoint {embedded_in!r})"
        raise InvalidCheckpointError(
            f"Checkpoint {checkpoint_id!r}{where}: field graph_signature_hash {NUL_IN_SIGNATURE}",
            field="graph_signature_hash",
        )
    if isinstance(iteration_count, bool) or not isinstance(iteration_count, int):
        _expect_field(checkpoint_id, "iteration_count", iteration_count, int, got_bool=True)
    dicts = (messages, state, pending, metadata)
    if not all(map(isinstance, dicts, _DICTS)):
        for name, value in zip(_DICT_FIELDS, dicts, strict=True):
            _expect_field(checkpoint_id, name, value, dict)
    # The flatness look is bounded (FLAT_ITEMS per dict) so a large state costs no second walk:
    # it takes the codec's own path, as before.
    if not (
        type(signature) is str
        and type(timestamp) is str
        and type(version) is str
        and type(iteration_count) is int
        and type(workflow_name) is str
        and type(checkpoint_id) is str
        and (previous_id is None or type(previous_id) is str)
    ):
        return False
    atoms = ATOMS
    for values in dicts:
        if values:
            if type(values) is not dict or len(values) > FLAT_ITEMS:
                return False
            for key, value in values.items():
                if type(key) is not str or type(value) not in atoms:
                    return False
    return True


FLAT_ITEMS = 16
"""At most this many items per dict for check_fields to call a checkpoint flat (StorageSaver's
state has seven)."""


_UNCHECKED = object()
"""No task id checked yet (None is a task id to refuse)."""


def checked_writes(writes: Iterable[object]) -> list[PendingWrite]:
    """The writes of a put_writes call as a list, each checked (the first bad one raises)."""
    batch: list[Any] = list(writes)
    checked_task_id: object = _UNCHECKED
    for position, write in enumerate(batch):
        if not isinstance(write, PendingWrite):
            raise InvalidCheckpointError(
                f"writes[{position}] must be a PendingWrite, not {type(write).__name__}", field="writes"
            )
        # A call's writes are one task's: its id is checked once (a str is immutable).
        task_id = write.task_id
        if task_id is not checked_task_id:
            validate_identifier(task_id, "task_id")
            checked_task_id = task_id
        index = write.index
        if type(index) is not int and (isinstance(index, bool) or not isinstance(index, int)):
            raise InvalidCheckpointError(
                f"writes[{position}].index must be an int, not {type(index).__name__}", field="index"
            )
        channel = write.channel
        if not isinstance(channel, str) or not channel:
            raise InvalidCheckpointError(
                f"writes[{position}].channel must be a non-empty str", field="channel"
            )
        if not isinstance(write.task_path, str):
            raise InvalidCheckpointError(f"writes[{position}].task_path must be a str", field="task_path")
    return batch


def as_list(refs: Iterable[Any]) -> list[Any]:
    # One "a:B,c:D" string (as a URL option arrives) is a list of its comma-separated items.
    if isinstance(refs, str):
        return [item.strip() for item in refs.split(",") if item.strip()]
    return list(refs)


def _expect_field(
    checkpoint_id: str, name: str, value: object, expected: type[Any], *, got_bool: bool = False
) -> None:
    if got_bool or not isinstance(value, expected):
        raise InvalidCheckpointError(
            f"Checkpoint {checkpoint_id!r}: field {name} must be {expected.__name__}, "
            f"not {type(value).__name__}",
            field=name,
        )
