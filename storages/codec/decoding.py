"""The reading side of the codec: extensions back to values, bodies back to checkpoints.

A :class:`Reader` is one way of reading: whether types are constructed, and which nested bodies
references resolve to (with what each already became). That is the state of one decode call, so
it lives in the reader the call uses, never in the codec: the codec keeps one reader for each
stateless way (constructing types or not, no nested bodies) and builds one per call given nested
bodies.

Decoding only ever constructs built-in value types, the checkpoint classes, and the types on the
codec's allow-list, and rebuilds those objects from their stored state without calling their
classes (storages/codec/objects.py). msgpack lengths are checked by msgspec against the bytes
present before anything is allocated, so decoding a body of n bytes builds at most about 128 x n
bytes of Python objects (types with decode hooks aside, which build what they build).
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from ..contract import CHECKPOINT_FIELDS, WorkflowCheckpoint
from ..errors import CheckpointCorruptedError
from . import frame as framing
from .locate import describe
from .objects import ObjectShape, object_shape, rebuild, rebuild_model, rebuild_namedtuple
from .registry import TypeRegistry
from .values import (
    BUILTIN_DECODERS,
    EXT_BYTEARRAY,
    EXT_CHECKPOINT,
    EXT_CUSTOM,
    EXT_DATACLASS,
    EXT_DATETIME,
    EXT_ENUM,
    EXT_NAMEDTUPLE,
    EXT_NESTED_REF,
    EXT_PYDANTIC,
    EXT_TUPLE,
    EXT_UUID,
    decode_datetime,
)
from .vocabulary import (
    EXPECTED_FIELD_TYPES,
    UNSET,
    NestedResolver,
    OpaqueValue,
    Undecodable,
    check_checkpoint_field_types,
    is_namedtuple,
    kind_of_or_none,
)

_DATETIMES: dict[bytes, Any] = {}
_REMEMBERED_DATETIMES = 4096
_REMEMBERED_DATA_BYTES = 96
"""Only short extension data is remembered: a datetime's is about 30 bytes, and a hostile body
cannot make the memory grow past 4,096 x 96 bytes of keys."""

RECORD_VERSION = 1
"""First item of every checkpoint record in a payload."""
_RECORD_LENGTH = 2 + len(CHECKPOINT_FIELDS)
"""The record version, the checkpoint class's tag, then the fields."""

Unframe = Callable[[bytes, str, bool], bytes | memoryview]
"""The codec's frame check of a body (its id, whether its seal was verified) -> its payload."""


def _is_model_class(cls: type[Any]) -> bool:
    return kind_of_or_none(cls) == EXT_PYDANTIC


class Reader:
    """Reads payloads for one decode: types constructed or not (``construct_types``), references
    to nested records resolved through ``resolver`` (None: the call was given none)."""

    __slots__ = (
        "_checkpoint_classes",
        "_ext_decoders",
        "_registry",
        "_unframe",
        "construct_types",
        "decode",
        "resolver",
    )

    def __init__(
        self,
        registry: TypeRegistry,
        unframe: Unframe,
        *,
        construct_types: bool = True,
        resolver: NestedResolver | None = None,
    ) -> None:
        self._registry = registry
        self._checkpoint_classes = registry.checkpoint_classes
        self._unframe = unframe
        self.construct_types = construct_types
        self.resolver = resolver
        decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(ext_hook=self._ext_hook)
        self.decode = decoder.decode
        """Payload -> value, every extension read by this reader."""
        objects: dict[int, Callable[[Any], Any]]
        if construct_types:
            objects = {
                EXT_ENUM: self._decode_enum,
                EXT_DATACLASS: self._decode_dataclass,
                EXT_PYDANTIC: self._decode_pydantic,
                EXT_CUSTOM: self._decode_custom,
                EXT_NAMEDTUPLE: self._decode_namedtuple,
            }
        else:
            objects = {
                EXT_ENUM: _opaque_pair,
                EXT_DATACLASS: _opaque_object("a dataclass"),
                EXT_PYDANTIC: _opaque_object("a pydantic model"),
                EXT_CUSTOM: _opaque_pair,
                EXT_NAMEDTUPLE: _opaque_object("a NamedTuple"),
            }
        self._ext_decoders: dict[int, Callable[[Any], Any]] = {
            **BUILTIN_DECODERS,
            **objects,
            EXT_CHECKPOINT: self.checkpoint,
            EXT_NESTED_REF: self._decode_nested_ref,
        }

    def rebuild(self, code: int, data: bytes) -> Any:
        """The value extension ``code`` with contents ``data`` reads back as."""
        return self._ext_decoders[code](self.decode(data))

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        # Called once per extension value of every body read: the common codes are tested first
        # and inline (a method call per value was a tenth of a decode).
        if code == EXT_DATETIME and len(data) <= _REMEMBERED_DATA_BYTES:
            # datetimes are immutable, so one object may serve every body that stores the same
            # bytes (a workflow's state carries the same datetimes from superstep to superstep).
            key = bytes(data)
            value = _DATETIMES.get(key)
            if value is None:
                value = decode_datetime(self.decode(key))
                if len(_DATETIMES) >= _REMEMBERED_DATETIMES:
                    _DATETIMES.clear()
                _DATETIMES[key] = value
            return value
        if code == EXT_TUPLE:
            return tuple(self.decode(data))
        if code == EXT_UUID:
            return uuid.UUID(bytes=bytes(data))
        if code == EXT_BYTEARRAY:
            return bytearray(data)
        decode = self._ext_decoders.get(code)
        if decode is None:
            raise Undecodable(f"unknown extension code {code}")
        return decode(self.decode(data))

    def _decode_enum(self, wire: Any) -> Any:
        key, value = wire
        cls, _ = self._registry.registered_class(key)
        if not isinstance(cls, enum.EnumMeta):
            raise Undecodable(f"{key} is stored as an enum but is not one")
        return cls(value)

    def _decode_namedtuple(self, wire: Any) -> Any:
        key, shape, form = self._object_wire(wire, "a NamedTuple", is_namedtuple)
        if not 1 <= len(form) <= 3:
            raise Undecodable(f"{key} is not stored in a form of this format")
        return rebuild_namedtuple(shape, key, form)

    def _decode_dataclass(self, wire: Any) -> Any:
        key, shape, form = self._object_wire(wire, "a dataclass", dataclasses.is_dataclass)
        return rebuild(shape, key, form)

    def _decode_pydantic(self, wire: Any) -> Any:
        key, shape, form = self._object_wire(wire, "a pydantic model", _is_model_class)
        return rebuild_model(shape, key, form)

    def _object_wire(
        self, wire: Any, kind: str, is_kind: Callable[[type[Any]], bool]
    ) -> tuple[str, ObjectShape, Any]:
        """An object extension's key, its class's shape and its form after the key."""
        _check_object_wire(wire, kind)
        key = wire[0]
        cls, _ = self._registry.registered_class(key)
        if not is_kind(cls):
            raise Undecodable(f"{key} is stored as {kind} but is not one")
        return key, object_shape(cls), wire[1:]

    def _decode_custom(self, wire: Any) -> Any:
        key, state = wire
        _, registration = self._registry.registered_class(key)
        if registration.custom is None:
            raise Undecodable(f"{key} was stored with hooks but is registered without them")
        return registration.custom.decode(state)

    def _decode_nested_ref(self, checkpoint_id: Any) -> Any:
        resolver = self.resolver
        if not isinstance(checkpoint_id, str):
            raise Undecodable("a nested checkpoint reference is not a str id")
        if resolver is None or not resolver.given:
            raise Undecodable(
                f"it refers to embedded checkpoint {checkpoint_id!r} but was read without its nested records"
            )
        done = resolver.decoded.get(checkpoint_id, UNSET)
        if done is not UNSET:
            return done  # one object for every reference, as when it was saved
        if checkpoint_id in resolver.in_progress:
            raise Undecodable(f"embedded checkpoint {checkpoint_id!r} contains itself")
        body = resolver.bodies.get(checkpoint_id)
        if body is None:
            raise Undecodable(f"embedded checkpoint {checkpoint_id!r} is missing from the storage")
        resolver.in_progress.add(checkpoint_id)
        try:
            payload = self._unframe(body, checkpoint_id, resolver.sealed)
            wire = self.decode(payload)
            if not isinstance(wire, list):
                raise Undecodable("payload is not a checkpoint record")
            checkpoint = self.checkpoint(wire)
        except CheckpointCorruptedError as exc:
            raise Undecodable(f"embedded checkpoint {checkpoint_id!r}: {exc.reason}") from exc
        except Undecodable as exc:
            raise Undecodable(f"embedded checkpoint {checkpoint_id!r}: {exc}") from exc
        finally:
            resolver.in_progress.discard(checkpoint_id)
        if checkpoint.checkpoint_id != checkpoint_id:
            raise Undecodable(
                f"embedded checkpoint {checkpoint_id!r} resolved to a body of {checkpoint.checkpoint_id!r}"
            )
        resolver.decoded[checkpoint_id] = checkpoint
        return checkpoint

    def checkpoint(self, wire: Any) -> Any:
        """The checkpoint a decoded record stands for (without constructing types, always this
        project's WorkflowCheckpoint)."""
        if type(wire) is not list or len(wire) != _RECORD_LENGTH or wire[0] != RECORD_VERSION:
            raise Undecodable("not a checkpoint record of this format version")
        if self.construct_types:
            tag = wire[1]
            cls = self._checkpoint_classes.get(tag) or self._registry.checkpoint_class(tag)
        else:
            cls = WorkflowCheckpoint
        values = wire[2:]
        if not all(map(isinstance, values, EXPECTED_FIELD_TYPES)):  # the common case, in line
            check_checkpoint_field_types(values)
        if cls is WorkflowCheckpoint:
            return WorkflowCheckpoint(*values)  # its fields are CHECKPOINT_FIELDS, in this order
        return cls(**dict(zip(CHECKPOINT_FIELDS, values, strict=True)))


def _check_object_wire(wire: Any, kind: str) -> None:
    if type(wire) is not list or len(wire) < 2:
        raise Undecodable(f"{kind} is not stored as a list of its key and state")


def _opaque_pair(wire: Any) -> OpaqueValue:
    """An enum member or a value with hooks, read without constructing its type."""
    key, state = wire
    return OpaqueValue(key, state)


def _opaque_object(kind: str) -> Callable[[Any], OpaqueValue]:
    """The reader of an object extension of ``kind`` that constructs no type: its key and form."""

    def read(wire: Any) -> OpaqueValue:
        _check_object_wire(wire, kind)
        return OpaqueValue(wire[0], wire[1] if len(wire) == 2 else wire[1:])

    return read


def nested_ref_ids(body: bytes, checkpoint_id: str, sealed: bool) -> list[str]:
    """Ids of the nested records ``body`` refers to directly, in order, read without decoding
    anything else (CheckpointCodec.nested_ref_ids)."""
    flags, payload = framing.check_frame(body, checkpoint_id, sealed)
    if not flags & framing.FLAG_NESTED_REFS:
        return []
    if flags & framing.FLAG_ZSTD:
        payload = memoryview(
            framing.decompress_bounded(
                payload,
                checkpoint_id,
                framing.DEFAULT_MAX_PAYLOAD_BYTES,
                framing.DEFAULT_MAX_COMPRESSION_RATIO,
            )
        )
    found: list[str] = []

    def collect(code: int, data: memoryview) -> Any:
        if code == EXT_NESTED_REF:
            found.append(msgspec.msgpack.decode(data))
        else:
            msgspec.msgpack.decode(data, ext_hook=collect)
        return None

    try:
        msgspec.msgpack.decode(payload, ext_hook=collect)
    except Exception as exc:
        raise CheckpointCorruptedError(checkpoint_id, describe(exc)) from exc
    return found
