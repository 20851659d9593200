"""Decoded values as JSON a script can use: ``inspect --checkpoint ID --json`` and ``diff --json``
carry a checkpoint's values, not their abbreviations.

JSON's own types go through as they are. Everything else becomes JSON that says what it was:

* ``bytes`` -> ``{"$bytes": "<base64>"}``; a float JSON cannot hold (NaN, infinities) ->
  ``{"$float": "nan"}``;
* a dict with a key that is not a string -> ``{"$dict": [[key, value], ...]}``; a tuple, set or
  frozenset -> a list (a set's members in their sorted order when they have one);
* ``datetime``, ``date``, ``time`` -> ISO 8601 text; ``UUID``, ``Decimal`` and ``Path`` -> text;
  an enum member -> ``{"$enum": "module:Class.NAME", "value": ...}``;
* an embedded checkpoint -> ``{"$checkpoint": "<id>"}`` (it is a record of its own);
* a dataclass, NamedTuple or pydantic model -> ``{"$type": "module:qualname", <field>: ...}``;
* anything else -> ``{"$type": "module:qualname", "$repr": "<its repr, at most 1,000 chars>"}``.

A store's data is hostile: the walk is iterative (no recursion limit to hit) and stops at
:data:`MAX_DEPTH` levels, below which a value is given as ``{"$type", "$repr"}``.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import decimal
import enum
import math
import pathlib
import uuid
from typing import Any

MAX_DEPTH = 64
"""Containers below this many levels are given by their repr."""
REPR_WIDTH = 1000
"""Longest repr kept for a value JSON cannot hold."""

_TEXT_TYPES = (uuid.UUID, decimal.Decimal, pathlib.PurePath)
_TIME_TYPES = (datetime.datetime, datetime.date, datetime.time)


def type_key(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}:{kind.__qualname__}"


def is_checkpoint(value: Any) -> bool:
    if isinstance(value, type):
        return False
    return hasattr(value, "checkpoint_id") and hasattr(value, "graph_signature_hash")


def json_value(value: Any) -> Any:
    """``value`` as JSON data (see the module docstring); never raises for a value it meets."""
    root: list[Any] = [None]
    # (value, the container to put its JSON in, the key or index there, depth)
    pending: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    while pending:
        item, into, at, depth = pending.pop()
        into[at] = _convert(item, depth, pending)
    return root[0]


def _convert(item: Any, depth: int, pending: list[tuple[Any, Any, Any, int]]) -> Any:
    """The JSON of ``item`` itself; its members are pushed on ``pending`` to fill in."""
    if item is None or isinstance(item, (bool, str)):
        return item
    if isinstance(item, int) and not isinstance(item, enum.Enum):
        return int(item)
    if isinstance(item, float) and not isinstance(item, enum.Enum):
        return float(item) if math.isfinite(item) else {"$float": repr(float(item))}
    if isinstance(item, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(item)).decode("ascii")}
    if isinstance(item, _TIME_TYPES):
        return item.isoformat()
    if isinstance(item, _TEXT_TYPES):
        return str(item)
    if is_checkpoint(item):
        return {"$checkpoint": str(item.checkpoint_id)}
    if depth >= MAX_DEPTH:
        return _opaque(item)
    if isinstance(item, enum.Enum):
        converted: dict[str, Any] = {"$enum": f"{type_key(item)}.{item.name}", "value": None}
        pending.append((item.value, converted, "value", depth + 1))
        return converted
    if isinstance(item, dict):
        if all(isinstance(key, str) for key in item):
            mapping: dict[str, Any] = dict.fromkeys(item)
            pending.extend((member, mapping, key, depth + 1) for key, member in item.items())
            return mapping
        pairs: list[Any] = [[None, None] for _ in item]
        for pair, (key, member) in zip(pairs, item.items(), strict=True):
            pending.append((key, pair, 0, depth + 1))
            pending.append((member, pair, 1, depth + 1))
        return {"$dict": pairs}
    fields = _fields(item)
    if fields is not None:
        record: dict[str, Any] = {"$type": type_key(item), **dict.fromkeys(name for name, _ in fields)}
        pending.extend((member, record, name, depth + 1) for name, member in fields)
        return record
    if isinstance(item, (list, tuple, set, frozenset)):
        members = list(item)
        if isinstance(item, (set, frozenset)):
            with contextlib.suppress(TypeError):  # members without an order keep the set's
                members.sort()
        listed: list[Any] = [None] * len(members)
        pending.extend((member, listed, index, depth + 1) for index, member in enumerate(members))
        return listed
    return _opaque(item)


def _fields(item: Any) -> list[tuple[str, Any]] | None:
    """A record's fields by name: a dataclass's, a NamedTuple's, a pydantic model's."""
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [(field.name, getattr(item, field.name, None)) for field in dataclasses.fields(item)]
    names = getattr(type(item), "_fields", None)
    if isinstance(item, tuple) and isinstance(names, tuple):
        return list(zip(names, item, strict=False))
    model_fields = getattr(type(item), "model_fields", None)
    if isinstance(model_fields, dict) and hasattr(item, "model_dump"):
        return [(name, getattr(item, name, None)) for name in model_fields]
    return None


def _opaque(item: Any) -> dict[str, str]:
    try:
        shown = repr(item)
    except Exception as exc:  # a repr that raises: say so rather than fail the whole answer
        shown = f"<repr raised {type(exc).__name__}>"
    if len(shown) > REPR_WIDTH:
        shown = shown[: REPR_WIDTH - 1] + "…"
    return {"$type": type_key(item), "$repr": shown}


__all__ = ["MAX_DEPTH", "REPR_WIDTH", "is_checkpoint", "json_value", "type_key"]
