"""What the scripts return, decoded: redis-py gives bytes (the client must not decode
responses), '' or nil where a script has nothing.

Every id, name and digest in a reply was read from the store, which is hostile: bytes that are
not UTF-8 (no value this storage writes) raise CheckpointCorruptedError naming the value and
where it was found, never a bare UnicodeDecodeError."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backend import IndexEntry
from ..contract import CheckpointID
from ..errors import CheckpointCorruptedError, InvalidCheckpointIdError

ANYWHERE = "a reply of the Redis store"


def text(value: Any, where: str = ANYWHERE) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise not_text(value, where) from None
    return str(value)


def not_text(value: bytes, where: str) -> CheckpointCorruptedError:
    """The error for an id (or a value standing for one) read from ``where`` that is not UTF-8:
    the checkpoint it would name is the bytes' repr, as ``info_from_index`` names one."""
    return CheckpointCorruptedError(
        repr(value)[:256], f"{where} holds it, but it is not UTF-8 text (no id this storage writes)"
    )


def decoded_ids(values: Sequence[Any], where: str) -> list[CheckpointID]:
    """Ids read from ``where``, decoded: one C-level pass, the named error only on failure."""
    try:
        return list(map(bytes.decode, values))
    except (UnicodeDecodeError, TypeError):
        return [text(value, where) for value in values]


def workflow_name(value: Any, where: str) -> str:
    """A workflow name read from the store (in the workflow index, or a key SCAN found): not UTF-8
    is reported, naming where, as the InvalidCheckpointIdError a name failing the identifier
    rules gets."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise InvalidCheckpointIdError(
                "workflow_name",
                value,
                f"is not UTF-8 text: {where} holds a name no storage writes (a damaged or hostile store)",
            ) from None
    return str(value)


def optional_text(value: Any, where: str = ANYWHERE) -> str | None:
    return None if value is None else text(value, where)


def optional_id(value: Any) -> CheckpointID | None:
    """An id from a script, where '' stands for none."""
    return optional_text(value) or None


def pairs(flat: Sequence[Any]) -> list[tuple[str, CheckpointID]]:
    """(workflow, id) pairs from a flat {workflow, id, ...} reply."""
    return [(text(flat[i]), text(flat[i + 1])) for i in range(0, len(flat), 2)]


def body_pairs(flat: Sequence[Any], start: int = 0, where: str = ANYWHERE) -> dict[CheckpointID, bytes]:
    """{id: body} from a flat {id, body, ...} reply, from position ``start``; a body the scripts
    found missing from a stored record comes as nil, and is that record's corruption."""
    pairs: dict[CheckpointID, bytes] = {}
    for i in range(start, len(flat), 2):
        checkpoint_id, body = text(flat[i], where), flat[i + 1]
        if body is None:
            raise no_body(checkpoint_id)
        pairs[checkpoint_id] = bytes(body)
    return pairs


def lost_record(checkpoint_id: CheckpointID, home: str) -> CheckpointCorruptedError:
    """An id whose location pointer is stored without its record: saves and deletes write and
    remove both in one script, so without a TTL the record was lost (evicted, or deleted outside
    the storage). Reported, never answered as "not found": a listing may still name the id."""
    return CheckpointCorruptedError(
        checkpoint_id,
        f"its location pointer names workflow {home!r}, but its record is gone from the server: "
        "evicted by its maxmemory-policy, or deleted outside this storage",
    )


def no_body(checkpoint_id: CheckpointID) -> CheckpointCorruptedError:
    """A record whose hash is stored (its index fields are there) without its body field: no
    save writes one, so the store was damaged; it is not a checkpoint that is not stored."""
    return CheckpointCorruptedError(
        checkpoint_id, "its record is stored without its body (a damaged store: no save writes that)"
    )


def index_entry(
    checkpoint_id: CheckpointID, workflow_name: bytes, previous_id: bytes | None, signature: bytes
) -> IndexEntry:
    """A record's index fields as the engine checks its body against them; fields that are not
    UTF-8 text (no value this storage writes: a hostile or damaged store) make the record
    corrupted, named, rather than a UnicodeDecodeError."""
    try:
        return IndexEntry(
            workflow_name.decode(), None if previous_id is None else previous_id.decode(), signature.decode()
        )
    except UnicodeDecodeError as exc:
        raise CheckpointCorruptedError(
            checkpoint_id, "its index fields (workflow, previous id, signature) are not UTF-8 text"
        ) from exc
