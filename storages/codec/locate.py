"""Where in a checkpoint a refused value sits, for error messages (only on the failure path)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import InvalidCheckpointIdError, UnserializableValueError
from .objects import object_parts
from .vocabulary import ID_FIELDS, Undecodable, Unencodable, is_namedtuple, type_key


def describe(exc: BaseException) -> str:
    if isinstance(exc, Undecodable):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _children(value: Any) -> Iterator[tuple[str, Any]]:
    cls = type(value)
    if cls is dict:
        for key, item in value.items():
            yield f"[{key!r}]", item
            yield f"<key {key!r}>", key
    elif cls in (list, tuple):
        for index, item in enumerate(value):
            yield f"[{index}]", item
    elif cls in (set, frozenset):
        for item in value:
            yield f"<member {item!r}>", item
    elif isinstance(value, enum.Enum):
        yield ".value", value.value
    elif hasattr(value, "__dataclass_fields__") or hasattr(cls, "model_fields") or is_namedtuple(cls):
        try:
            yield from object_parts(value)  # the state the codec stores, as it reads it
        except Exception:  # the refusal names the object itself then
            return


def is_unencodable_str(value: object) -> bool:
    if type(value) is not str:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return True
    return False


def locate(root: Any, is_target: Callable[[Any], bool]) -> str:
    """Path of the first value inside ``root`` (breadth first) that ``is_target``."""
    root_name = "checkpoint" if hasattr(root, "checkpoint_id") else "value"
    frontier: list[tuple[str, Any]] = [(root_name, root)]
    seen: set[int] = set()
    while frontier:
        next_frontier: list[tuple[str, Any]] = []
        for path, value in frontier:
            if is_target(value):
                return path
            if id(value) in seen:
                continue
            seen.add(id(value))
            next_frontier.extend((path + step, child) for step, child in _children(value))
        frontier = next_frontier
    return root_name


def refusal(exc: BaseException, root: Any, *, checkpoint: bool) -> Exception:
    """The typed error an encode that failed with ``exc`` raises, naming where in ``root`` (a
    checkpoint, or a value) the refused value sits."""
    if isinstance(exc, Unencodable):
        target = exc.value
        path = locate(root, lambda value: value is target)
        return UnserializableValueError(type_key(type(target)), path, exc.hint)
    if isinstance(exc, UnicodeEncodeError):
        path = locate(root, is_unencodable_str)
        _, _, field = path.partition("checkpoint.")
        if checkpoint and field in ID_FIELDS:
            # An id the save would refuse by the same name (validate_identifier).
            return InvalidCheckpointIdError(
                field, getattr(root, field), "contains a lone surrogate, which is not valid UTF-8"
            )
        return UnserializableValueError(
            "builtins:str", path, "the string contains a lone surrogate, which is not valid UTF-8"
        )
    return UnserializableValueError(
        type_key(type(root)),
        "checkpoint" if checkpoint else "value",
        "the value is nested too deeply or contains a reference cycle",
    )
