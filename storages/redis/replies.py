"""What the scripts return, decoded: redis-py gives bytes (the client must not decode
responses), '' or nil where a script has nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..contract import CheckpointID


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def optional_text(value: Any) -> str | None:
    return None if value is None else text(value)


def optional_id(value: Any) -> CheckpointID | None:
    """An id from a script, where '' stands for none."""
    return optional_text(value) or None


def pairs(flat: Sequence[Any]) -> list[tuple[str, CheckpointID]]:
    """(workflow, id) pairs from a flat {workflow, id, ...} reply."""
    return [(text(flat[i]), text(flat[i + 1])) for i in range(0, len(flat), 2)]


def body_pairs(flat: Sequence[Any], start: int = 0) -> dict[CheckpointID, bytes]:
    """{id: body} from a flat {id, body, ...} reply, from position ``start``."""
    return {text(flat[i]): bytes(flat[i + 1]) for i in range(start, len(flat), 2)}
