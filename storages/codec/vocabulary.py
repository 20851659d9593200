"""The codec's vocabulary: type keys, registrations, results and the signals its parts raise."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from ..allowlist import resolve_exact_class
from ..contract import CHECKPOINT_FIELDS
from ..errors import InvalidCheckpointError, InvalidCheckpointIdError
from .values import EXT_DATACLASS, EXT_ENUM, EXT_NAMEDTUPLE, EXT_NESTED_REF, EXT_PYDANTIC, Packer

TypeRef = type[Any] | str
"""A type given by class or by ``"module:qualname"``."""

UNSET: Final = object()


def type_key(cls: type[Any]) -> str:
    """The ``"module:qualname"`` key the codec stores for a class."""
    return f"{cls.__module__}:{cls.__qualname__}"


@dataclasses.dataclass(frozen=True, slots=True)
class OpaqueValue:
    """A value of an application or MAF type, read without constructing the type.

    :meth:`CheckpointCodec.decode_checkpoint` returns these with ``construct_types=False``, so
    tools (``checkpoint-storages verify``) can check structure and links of checkpoints whose
    types are not importable or not allowed in the reading process.
    """

    type_key: str
    state: Any


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class EncodedCheckpoint:
    """One body of an encoded checkpoint tree."""

    checkpoint: Any
    body: bytes
    container_id: str | None
    """Id of the checkpoint this one is embedded in; None for the checkpoint being saved."""

    def __init__(self, checkpoint: Any, body: bytes, container_id: str | None) -> None:
        # Through the slots' own setters, as CheckpointRecord (storages/records.py): the generated
        # __init__ of a frozen class goes through object.__setattr__, and every save builds one.
        set_checkpoint, set_body, set_container_id = _ENCODED_SETTERS
        set_checkpoint(self, checkpoint)
        set_body(self, body)
        set_container_id(self, container_id)


_ENCODED_SETTERS: tuple[Callable[[EncodedCheckpoint, Any], None], ...] = tuple(
    vars(EncodedCheckpoint)[item.name].__set__ for item in dataclasses.fields(EncodedCheckpoint)
)


class Unencodable(Exception):
    """A value the codec refuses to store; ``hint`` says why and how to allow it."""

    def __init__(self, value: object, hint: str) -> None:
        super().__init__(hint)
        self.value = value
        self.hint = hint


class Undecodable(Exception):
    """A stored payload that does not read as this format."""


class TypeNotAllowed(Exception):
    """A stored payload naming a type the reading codec does not allow."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class CustomType:
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


@dataclasses.dataclass(slots=True)
class Registration:
    """One allowed type: a class (resolved now or on first use) and, for custom types, hooks."""

    key: str
    cls: type[Any] | None
    custom: CustomType | None = None

    def resolve(self) -> type[Any]:
        if self.cls is None:
            self.cls = resolve_exact_class(self.key)
        return self.cls


@dataclasses.dataclass(slots=True)
class TreeEncoding:
    """State of one encode_checkpoint_tree call: the packers of its walk hold it (their ``tree``)
    and its reducers reach it through them."""

    nodes: list[EncodedCheckpoint | None]
    containers: list[str]
    first_seen: dict[str, int]
    frame: Callable[..., bytes]
    """Frames each nested body (the codec's frame: its compression and limits)."""
    references: int = 0
    """References written so far; a body wrote some if this grew while it was encoded."""
    sealed: bool = False
    """Every body goes inside a seal of its own: framed without a checksum (frame.FLAG_SEALED)."""

    def embedded(self) -> dict[str, Any]:
        """The checkpoints encoded so far as bodies of their own, by id."""
        found: dict[str, Any] = {}
        for checkpoint_id, index in self.first_seen.items():
            node = self.nodes[index] if index < len(self.nodes) else None
            if node is not None:
                found[checkpoint_id] = node.checkpoint
        return found

    def mark(self) -> tuple[int, int, dict[str, int], int]:
        return len(self.nodes), len(self.containers), dict(self.first_seen), self.references

    def rewind(self, mark: tuple[int, int, dict[str, int], int]) -> None:
        """Forget the nested bodies collected since ``mark`` (an attempt being redone)."""
        del self.nodes[mark[0] :]
        del self.containers[mark[1] :]
        # A copy: the attempt after this one fills first_seen, and a further rewind to the same
        # mark (an exact walk that overflowed, redone boxing) must not see what it filled in.
        self.first_seen = dict(mark[2])
        self.references = mark[3]

    def nest(self, checkpoint: Any, plain: list[Any], packer: Packer) -> Any:
        """Encode an embedded checkpoint (``plain``: its record) as a body of its own; what its
        container keeps is a reference to its id."""
        checkpoint_id = checkpoint.checkpoint_id
        if checkpoint_id in self.containers:
            raise Unencodable(checkpoint, f"checkpoint {checkpoint_id!r} is embedded in itself")
        container_id = self.containers[-1]
        index = len(self.nodes)
        references_before = self.references
        self.nodes.append(None)
        self.containers.append(checkpoint_id)
        try:
            payload = packer.pack_nested(plain)
        finally:
            self.containers.pop()
        body = self.frame(payload, nested_refs=self.references > references_before, sealed=self.sealed)
        first = self.first_seen.get(checkpoint_id)
        if first is None:
            self.first_seen[checkpoint_id] = index
            self.nodes[index] = EncodedCheckpoint(checkpoint, body, container_id)
        else:
            earlier = self.nodes[first]
            if earlier is not None and earlier.body != body:
                raise Unencodable(
                    checkpoint, f"another embedded checkpoint with id {checkpoint_id!r} has different content"
                )
            # The same checkpoint met again (aliasing): stored once, referred to twice.
            del self.nodes[index:]
        self.references += 1
        return packer.ext(EXT_NESTED_REF, msgspec.msgpack.encode(checkpoint_id))


@dataclasses.dataclass(slots=True)
class NestedResolver:
    """State of one decode: the nested bodies it may use and what it already built from them."""

    bodies: Mapping[str, bytes]
    given: bool
    """False when the caller passed no nested records at all."""
    sealed: bool = False
    """The caller verified every body's seal (decode_checkpoint's ``sealed``)."""
    decoded: dict[str, Any] = dataclasses.field(default_factory=dict)
    in_progress: set[str] = dataclasses.field(default_factory=set)


def check_key_syntax(key: str) -> None:
    module_name, sep, qualname = key.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"type key {key!r} is not of the form 'module:qualname'")


def is_namedtuple(cls: type[Any]) -> bool:
    return issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


def kind_of_or_none(cls: type[Any]) -> int | None:
    try:
        return kind_of(cls)
    except TypeError:
        return None


def kind_of(cls: type[Any]) -> int:
    """The extension code a registered class without hooks travels under."""
    if isinstance(cls, enum.EnumMeta):
        return EXT_ENUM
    if is_namedtuple(cls):
        return EXT_NAMEDTUPLE
    if dataclasses.is_dataclass(cls):
        return EXT_DATACLASS
    if hasattr(cls, "model_fields") and hasattr(cls, "model_validate"):
        return EXT_PYDANTIC
    raise TypeError(
        f"{type_key(cls)} is not an enum, dataclass, pydantic model or NamedTuple; "
        "register it with encode/decode hooks"
    )


def field_names(cls: type[Any]) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(getattr(cls, "__annotations__", {}))


def unregistered_hint(cls: type[Any]) -> str:
    """Why a class cannot be stored, and the option that would allow it."""
    key = type_key(cls)
    builtin_subclass = issubclass(cls, (dict, list, tuple, set, frozenset, str, int, float, bytes))
    if is_namedtuple(cls) or not builtin_subclass:
        try:
            kind_of(cls)
        except TypeError:
            return (
                "it is not an enum, dataclass, pydantic model or NamedTuple; convert it to one, "
                "or register it with encode/decode hooks: codec.register(cls, encode=..., decode=...)"
            )
        module_name = key.partition(":")[0]
        return (
            f"the type is not on this storage's allow-list. Fix: pass allowed_checkpoint_types=[{key!r}] "
            f"(or allowed_modules=[{module_name!r}]) to the storage, or add "
            f"allowed_checkpoint_types={key} to its URL"
        )
    return (
        f"{cls.__name__} is a subclass of a built-in type; convert it to the plain type "
        "or register it with encode/decode hooks"
    )


_TYPE_OF_FIELD: Final[dict[str, type[Any] | tuple[type[Any], ...]]] = {
    "workflow_name": str,
    "graph_signature_hash": str,
    "checkpoint_id": str,
    "previous_checkpoint_id": (str, type(None)),
    "timestamp": str,
    "messages": dict,
    "state": dict,
    "pending_request_info_events": dict,
    "iteration_count": int,
    "metadata": dict,
    "version": str,
}
_FIELD_TYPES: Final = tuple((name, _TYPE_OF_FIELD[name]) for name in CHECKPOINT_FIELDS)
"""Each checkpoint field's name and type, in the order records store the fields."""
EXPECTED_FIELD_TYPES: Final = tuple(expected for _, expected in _FIELD_TYPES)
"""The field types alone, for one ``map(isinstance, values, EXPECTED_FIELD_TYPES)`` pass."""


ID_FIELDS: Final = frozenset({"workflow_name", "checkpoint_id", "previous_checkpoint_id"})
"""The fields that hold ids: a refusal of one is an InvalidCheckpointIdError, as a save's."""


def refuse_field_types(values: tuple[Any, ...], whose: str) -> None:
    """Raise, for a checkpoint being encoded, what :func:`check_checkpoint_field_types` refuses
    on decoding, as the typed error a save gets: ``InvalidCheckpointIdError`` for an id or
    workflow name, ``InvalidCheckpointError`` for any other field, each naming the field.
    ``whose`` names the checkpoint in the message (``checkpoint 'a'``)."""
    for value, (name, expected) in zip(values, _FIELD_TYPES, strict=True):
        if not isinstance(value, expected):
            wanted = "str or None" if name == "previous_checkpoint_id" else _type_name(expected)
            if name in ID_FIELDS:
                raise InvalidCheckpointIdError(name, value, f"must be a {wanted}, not {type(value).__name__}")
            raise InvalidCheckpointError(
                f"Cannot encode {whose}: field {name} must be {wanted}, not {type(value).__name__}",
                field=name,
            )


def _type_name(expected: type[Any] | tuple[type[Any], ...]) -> str:
    return expected.__name__ if isinstance(expected, type) else " or ".join(t.__name__ for t in expected)


def check_checkpoint_field_types(values: list[Any]) -> None:
    """Raise Undecodable unless a record's field values, in CHECKPOINT_FIELDS order, have the
    field types."""
    # One C-level pass for the common case (every field right); the loop only names the wrong one.
    if len(values) == len(EXPECTED_FIELD_TYPES) and all(map(isinstance, values, EXPECTED_FIELD_TYPES)):
        return
    for value, (name, expected) in zip(values, _FIELD_TYPES, strict=True):
        if not isinstance(value, expected):
            raise Undecodable(f"field {name} has type {type(value).__name__}")
