"""The reading side of the codec: extensions back to values, bodies back to checkpoints.

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
from contextvars import ContextVar
from typing import Any

import msgspec

from ..allowlist import TypeNotResolvable
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
    Registration,
    TypeNotAllowed,
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

# Context variables, not attributes: one codec serves many tasks and threads at once.
RESOLVER: ContextVar[NestedResolver | None] = ContextVar("checkpoint_nested_resolver", default=None)
OPAQUE: ContextVar[bool] = ContextVar("checkpoint_decode_opaque", default=False)


def _is_model_class(cls: type[Any]) -> bool:
    return kind_of_or_none(cls) == EXT_PYDANTIC


class Decoding(TypeRegistry):
    """Extension hooks and checkpoint construction (a base of CheckpointCodec)."""

    _decoder: msgspec.msgpack.Decoder[Any]

    def _unframe(  # pragma: no cover
        self, body: bytes, checkpoint_id: str, sealed: bool = False
    ) -> bytes | memoryview:
        raise NotImplementedError

    def _decoders(self) -> dict[int, Callable[[Any], Any]]:
        return {
            **BUILTIN_DECODERS,
            EXT_ENUM: self._decode_enum,
            EXT_DATACLASS: self._decode_dataclass,
            EXT_PYDANTIC: self._decode_pydantic,
            EXT_CUSTOM: self._decode_custom,
            EXT_CHECKPOINT: self._build_checkpoint,
            EXT_NESTED_REF: self._decode_nested_ref,
            EXT_NAMEDTUPLE: self._decode_namedtuple,
        }

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        # Called once per extension value of every body read: the common codes are tested first
        # and inline (a method call per value was a tenth of a decode).
        if code == EXT_DATETIME and len(data) <= _REMEMBERED_DATA_BYTES:
            # datetimes are immutable, so one object may serve every body that stores the same
            # bytes (a workflow's state carries the same datetimes from superstep to superstep).
            key = bytes(data)
            value = _DATETIMES.get(key)
            if value is None:
                value = decode_datetime(self._decoder.decode(key))
                if len(_DATETIMES) >= _REMEMBERED_DATETIMES:
                    _DATETIMES.clear()
                _DATETIMES[key] = value
            return value
        if code == EXT_TUPLE:
            return tuple(self._decoder.decode(data))
        if code == EXT_UUID:
            return uuid.UUID(bytes=bytes(data))
        if code == EXT_BYTEARRAY:
            return bytearray(data)
        decode = self._ext_decoders.get(code)
        if decode is None:
            raise Undecodable(f"unknown extension code {code}")
        return decode(self._decoder.decode(data))

    _ext_decoders: dict[int, Callable[[Any], Any]]

    def _registered_class(self, key: Any) -> tuple[type[Any], Registration]:
        if not isinstance(key, str):
            raise Undecodable(f"a type key is {type(key).__name__}, not str")
        registration = self._by_key.get(key) or self._implicit_registration(key)
        if registration is None:
            raise TypeNotAllowed(key, "it is not on this storage's allow-list")
        try:
            return registration.resolve(), registration
        except TypeNotResolvable as exc:
            raise TypeNotAllowed(key, str(exc)) from None

    def _decode_enum(self, wire: Any) -> Any:
        key, value = wire
        if OPAQUE.get():
            return OpaqueValue(key, value)
        cls, _ = self._registered_class(key)
        if not isinstance(cls, enum.EnumMeta):
            raise Undecodable(f"{key} is stored as an enum but is not one")
        return cls(value)

    def _decode_namedtuple(self, wire: Any) -> Any:
        key, shape, form = self._object_wire(wire, "a NamedTuple", is_namedtuple)
        if shape is None:
            return form
        if not 1 <= len(form) <= 3:
            raise Undecodable(f"{key} is not stored in a form of this format")
        return rebuild_namedtuple(shape, key, form)

    def _decode_dataclass(self, wire: Any) -> Any:
        key, shape, form = self._object_wire(wire, "a dataclass", dataclasses.is_dataclass)
        return form if shape is None else rebuild(shape, key, form)

    def _decode_pydantic(self, wire: Any) -> Any:
        key, shape, form = self._object_wire(wire, "a pydantic model", _is_model_class)
        return form if shape is None else rebuild_model(shape, key, form)

    def _object_wire(
        self, wire: Any, kind: str, is_kind: Callable[[type[Any]], bool]
    ) -> tuple[str, ObjectShape | None, Any]:
        """An object extension's key, its class's shape and its form after the key; without
        constructing types, (key, None, the OpaqueValue)."""
        if type(wire) is not list or len(wire) < 2:
            raise Undecodable(f"{kind} is not stored as a list of its key and state")
        key = wire[0]
        if OPAQUE.get():
            return key, None, OpaqueValue(key, wire[1] if len(wire) == 2 else wire[1:])
        cls, _ = self._registered_class(key)
        if not is_kind(cls):
            raise Undecodable(f"{key} is stored as {kind} but is not one")
        return key, object_shape(cls), wire[1:]

    def _decode_custom(self, wire: Any) -> Any:
        key, state = wire
        if OPAQUE.get():
            return OpaqueValue(key, state)
        _, registration = self._registered_class(key)
        if registration.custom is None:
            raise Undecodable(f"{key} was stored with hooks but is registered without them")
        return registration.custom.decode(state)

    def _decode_nested_ref(self, checkpoint_id: Any) -> Any:
        resolver = RESOLVER.get()
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
            wire = self._decoder.decode(payload)
            if not isinstance(wire, list):
                raise Undecodable("payload is not a checkpoint record")
            checkpoint = self._build_checkpoint(wire)
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

    def _build_checkpoint(self, wire: Any) -> Any:
        if type(wire) is not list or len(wire) != _RECORD_LENGTH or wire[0] != RECORD_VERSION:
            raise Undecodable("not a checkpoint record of this format version")
        tag = wire[1]
        cls = WorkflowCheckpoint if OPAQUE.get() else self._checkpoint_classes.get(tag)
        if cls is None:
            cls = self._plugin_checkpoint_class(tag)
        values = wire[2:]
        if not all(map(isinstance, values, EXPECTED_FIELD_TYPES)):  # the common case, in line
            check_checkpoint_field_types(values)
        if cls is WorkflowCheckpoint:
            return WorkflowCheckpoint(*values)  # its fields are CHECKPOINT_FIELDS, in this order
        return cls(**dict(zip(CHECKPOINT_FIELDS, values, strict=True)))

    def _plugin_checkpoint_class(self, tag: Any) -> type[Any]:
        for plugin in self._plugins:
            cls = plugin.checkpoint_class(tag) if isinstance(tag, str) else None
            if cls is not None:
                self._add_checkpoint_class(cls, tag)
                return cls
        raise Undecodable(f"checkpoint class {tag!r} is not registered with this storage's codec")


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
