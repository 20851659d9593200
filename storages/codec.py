"""The safe checkpoint codec: msgpack (msgspec) with typed extensions, no pickle.

A body is ``header + payload``. The header carries a magic, the format version, flags (zstd,
nested refs) and a CRC-32 of the payload, so any damage to stored bytes is detected instead of
decoded into silently different data. The payload is msgpack; every non-JSON type travels as a
msgpack extension whose code names the type, so a user dict can never be mistaken for an envelope.

Decoding only ever constructs built-in value types, the checkpoint classes, and the types on the
codec's allow-list (see storages/allowlist.py for exactly what that list holds). A type that is
not allowed fails at save time, naming the type, where in the checkpoint it sits and the option
that allows it; a stored body naming a type that is not allowed raises
CheckpointTypeNotAllowedError (the data is intact), never CheckpointCorruptedError.

Decoding is bounded: a body is at most ``max_payload_bytes`` once decompressed, a compressed
payload must declare its size and expand at most ``max_compression_ratio`` times, and msgpack
lengths are checked against the bytes present before anything is allocated, so decoding a body
of n bytes builds at most about 128 x n bytes of Python objects (MAF types and allowed pydantic
models aside, which run their own validation).

Checkpoints embedded in a checkpoint (a sub-workflow's state inside its parent's) are encoded in
one of two ways. :meth:`CheckpointCodec.encode_checkpoint` writes them inline. A storage that keeps
nested records uses :meth:`CheckpointCodec.encode_checkpoint_tree` instead: every embedded
checkpoint becomes a body of its own, the container holds only a reference to its id, and the
``nested refs`` header flag says the body needs those records to decode.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import importlib
import inspect
import struct
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from decimal import Decimal
from typing import Any, Final, cast

import msgspec

from .allowlist import (
    TypeNotResolvable,
    module_allowed,
    normalise_modules,
    resolve_exact_class,
    split_key,
)
from .contract import CHECKPOINT_FIELDS, WorkflowCheckpoint
from .errors import (
    CheckpointCorruptedError,
    CheckpointTypeNotAllowedError,
    InvalidCheckpointError,
    MissingDependencyError,
    UnserializableValueError,
)

TypeRef = type[Any] | str
"""A type given by class or by ``"module:qualname"``."""

_MAGIC: Final = b"CK"
_FORMAT_VERSION: Final = 1
_FLAG_ZSTD: Final = 0x01
_FLAG_NESTED_REFS: Final = 0x02
"""The payload refers to embedded checkpoints stored as records of their own."""
_KNOWN_FLAGS: Final = _FLAG_ZSTD | _FLAG_NESTED_REFS
_FLAGS_OFFSET: Final = 3
_HEADER = struct.Struct(">2sBBI")  # magic, format version, flags, crc32 of payload
HEADER_SIZE: Final = _HEADER.size

# Extension codes. Stable: they are part of the stored format.
_EXT_TUPLE: Final = 1
_EXT_SET: Final = 2
_EXT_FROZENSET: Final = 3
_EXT_DATETIME: Final = 4
_EXT_DATE: Final = 5
_EXT_TIME: Final = 6
_EXT_TIMEDELTA: Final = 7
_EXT_UUID: Final = 8
_EXT_DECIMAL: Final = 9
_EXT_BIGINT: Final = 10
_EXT_BYTEARRAY: Final = 11
_EXT_DICT_PAIRS: Final = 12
_EXT_ENUM: Final = 13
_EXT_DATACLASS: Final = 14
_EXT_PYDANTIC: Final = 15
_EXT_CUSTOM: Final = 16
_EXT_CHECKPOINT: Final = 17
_EXT_NESTED_REF: Final = 18
_EXT_NAMEDTUPLE: Final = 19

DEFAULT_MAX_PAYLOAD_BYTES: Final = 256 * 1024 * 1024
"""Largest payload (after decompression) a codec writes or reads, unless configured otherwise."""
DEFAULT_MAX_COMPRESSION_RATIO: Final = 100
"""A compressed payload may expand at most this many times; the encoder stores a payload that
compresses better than this uncompressed, so every body it writes reads back."""

_NATIVE_CHECKPOINT_TAG: Final = "native"
_MAF_CHECKPOINT_TAG: Final = "maf"
_MAF_CHECKPOINT_MODULE: Final = "agent_framework._workflows._checkpoint"

_ATOMS: Final[frozenset[type[Any]]] = frozenset({str, int, float, bool, type(None), bytes})
_KEY_ATOMS: Final[frozenset[type[Any]]] = frozenset({str, int})
_INT64_MIN: Final = -(2**63)
_UINT64_MAX: Final = 2**64 - 1

Ext = msgspec.msgpack.Ext
_UNSET: Final = object()


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


class _Unencodable(Exception):
    def __init__(self, value: object, hint: str) -> None:
        super().__init__(hint)
        self.value = value
        self.hint = hint


class _Undecodable(Exception):
    pass


class _TypeNotAllowed(Exception):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class _CustomType:
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


@dataclasses.dataclass(slots=True)
class _Registration:
    """One allowed type: a class (resolved now or on first use) and, for custom types, hooks."""

    key: str
    cls: type[Any] | None
    custom: _CustomType | None = None

    def resolve(self) -> type[Any]:
        if self.cls is None:
            self.cls = resolve_exact_class(self.key)
        return self.cls


@dataclasses.dataclass(frozen=True, slots=True)
class EncodedCheckpoint:
    """One body of an encoded checkpoint tree."""

    checkpoint: Any
    body: bytes
    container_id: str | None
    """Id of the checkpoint this one is embedded in; None for the checkpoint being saved."""


@dataclasses.dataclass(slots=True)
class _TreeEncoding:
    """State of one encode_checkpoint_tree call, shared by the nested encoder calls it makes."""

    nodes: list[EncodedCheckpoint | None]
    containers: list[str]
    first_seen: dict[str, int]
    references: int = 0
    """References written so far; a body wrote some if this grew while it was encoded."""


@dataclasses.dataclass(slots=True)
class _NestedResolver:
    """State of one decode: the nested bodies it may use and what it already built from them."""

    bodies: Mapping[str, bytes]
    given: bool
    """False when the caller passed no nested records at all."""
    decoded: dict[str, Any] = dataclasses.field(default_factory=dict)
    in_progress: set[str] = dataclasses.field(default_factory=set)


# Context variables, not attributes: one codec serves many tasks and threads at once.
_TREE: ContextVar[_TreeEncoding | None] = ContextVar("checkpoint_tree_encoding", default=None)
_RESOLVER: ContextVar[_NestedResolver | None] = ContextVar("checkpoint_nested_resolver", default=None)
_OPAQUE: ContextVar[bool] = ContextVar("checkpoint_decode_opaque", default=False)


class CheckpointCodec:
    """Encodes checkpoints to bytes and back, allowing only known types.

    Args:
        allowed_types: enums, dataclasses, pydantic models and NamedTuples the codec may store, by
            class or ``"module:qualname"``. A string is imported only when a body that names it is
            decoded.
        allowed_checkpoint_types: the same, under the name MAF's FileCheckpointStorage uses.
        allowed_modules: modules whose classes (defined there or in submodules) may be stored
            without naming each one, e.g. ``["myapp"]``.
        trust_saved_types: allow any storable class when it is first saved, and let reads of this
            codec construct it (for stores whose bytes never leave the process: in-memory).
        checkpoint_classes: additional classes with the 11 checkpoint fields to accept and give
            back (ours and MAF's ``WorkflowCheckpoint`` are always accepted).
        compress_threshold: compress payloads of at least this many bytes with zstd
            (``None`` never compresses). Needs the ``zstd`` extra.
        compression_level: zstd level.
        max_payload_bytes: largest payload written or read (after decompression).
        max_compression_ratio: how many times a compressed payload may expand on reading.
    """

    def __init__(
        self,
        *,
        allowed_types: Iterable[TypeRef] = (),
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        trust_saved_types: bool = False,
        checkpoint_classes: Iterable[type[Any]] = (),
        compress_threshold: int | None = None,
        compression_level: int = 3,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_compression_ratio: int = DEFAULT_MAX_COMPRESSION_RATIO,
    ) -> None:
        limits = (("max_payload_bytes", max_payload_bytes), ("max_compression_ratio", max_compression_ratio))
        for name, limit in limits:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"{name} must be an int >= 1, got {limit!r}")
        self._max_payload_bytes = max_payload_bytes
        self._max_compression_ratio = max_compression_ratio
        self._allowed_modules = normalise_modules(allowed_modules)
        self._trust_saved_types = trust_saved_types
        self._by_key: dict[str, _Registration] = {}
        self._atoms: frozenset[type[Any]] = _ATOMS
        self._key_atoms: frozenset[type[Any]] = _KEY_ATOMS
        self._boxing: CheckpointCodec | None = None
        # Type -> encoder for one value; registered types are added as they are first met.
        self._encoders: dict[type[Any], Callable[[Any], Any]] = self._builtin_encoders()
        self._checkpoint_tags: dict[type[Any], str] = {WorkflowCheckpoint: _NATIVE_CHECKPOINT_TAG}
        self._checkpoint_classes: dict[str, type[Any]] = {_NATIVE_CHECKPOINT_TAG: WorkflowCheckpoint}
        for cls in checkpoint_classes:
            self.register_checkpoint_class(cls)
        from .maf import maf_available, register_maf_types

        if maf_available():
            # MAF's runner stores its own messages and events in every checkpoint; a codec that
            # refused them would make MAF drop checkpoints with nothing but a logged warning.
            register_maf_types(self)
        self._builtin_type_keys = frozenset(self._by_key)
        for ref in (*allowed_types, *allowed_checkpoint_types):
            self.register(ref)
        self._compress_threshold = compress_threshold
        self._compression_level = compression_level
        self._zstd: Any = None
        if compress_threshold is not None:
            try:
                import zstandard
            except ImportError as exc:
                raise MissingDependencyError("zstd compression", "zstd", "zstandard") from exc
            self._zstd = zstandard
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(ext_hook=self._ext_hook)
        self._decoders: dict[int, Callable[[Any], Any]] = {
            _EXT_TUPLE: tuple,
            _EXT_SET: set,
            _EXT_FROZENSET: frozenset,
            _EXT_DATETIME: _decode_datetime,
            _EXT_DATE: dt.date.fromisoformat,
            _EXT_TIME: _decode_time,
            _EXT_TIMEDELTA: _decode_timedelta,
            _EXT_DECIMAL: Decimal,
            _EXT_BIGINT: _decode_int_boxed,
            _EXT_DICT_PAIRS: _decode_pairs,
            _EXT_ENUM: self._decode_enum,
            _EXT_DATACLASS: self._decode_dataclass,
            _EXT_PYDANTIC: self._decode_pydantic,
            _EXT_CUSTOM: self._decode_custom,
            _EXT_CHECKPOINT: self._decode_checkpoint_payload,
            _EXT_NESTED_REF: self._decode_nested_ref,
            _EXT_NAMEDTUPLE: self._decode_namedtuple,
        }

    def _builtin_encoders(self) -> dict[type[Any], Callable[[Any], Any]]:
        return {
            tuple: self._encode_tuple,
            set: self._encode_set,
            frozenset: self._encode_frozenset,
            dt.datetime: _encode_datetime,
            dt.date: _encode_date,
            dt.time: _encode_time,
            dt.timedelta: _encode_timedelta,
            uuid.UUID: _encode_uuid,
            Decimal: _encode_decimal,
            bytearray: _encode_bytearray,
            WorkflowCheckpoint: self._encode_checkpoint_ext,
        }

    # ------------------------------------------------------------------ registration

    def register(
        self,
        type_ref: TypeRef,
        *,
        encode: Callable[[Any], Any] | None = None,
        decode: Callable[[Any], Any] | None = None,
    ) -> None:
        """Allow a type. Enums, dataclasses and pydantic models need no hooks; any other class
        needs ``encode`` (to a codec-encodable value) and ``decode`` (back to the object)."""
        if (encode is None) != (decode is None):
            raise TypeError("give both encode and decode, or neither")
        custom = _CustomType(encode, decode) if encode is not None and decode is not None else None
        if isinstance(type_ref, str):
            _resolve_key_syntax(type_ref)
            registration = _Registration(type_ref, None, custom)
        elif isinstance(type_ref, type):
            registration = _Registration(type_key(type_ref), type_ref, custom)
            if custom is None:
                _kind_of(type_ref)  # fail now, not at save time, for a class we cannot store
        else:
            raise TypeError(f"expected a class or 'module:qualname', got {type_ref!r}")
        self._by_key[registration.key] = registration
        if registration.cls is not None:
            self._encoders.pop(registration.cls, None)

    def register_checkpoint_class(self, cls: type[Any]) -> None:
        """Accept another class with the 11 checkpoint fields and give it back on load."""
        missing = [name for name in CHECKPOINT_FIELDS if name not in _field_names(cls)]
        if missing:
            raise TypeError(f"{type_key(cls)} lacks checkpoint fields {missing}")
        tag = type_key(cls)
        self._checkpoint_tags[cls] = tag
        self._checkpoint_classes[tag] = cls
        self._encoders[cls] = self._encode_checkpoint_ext

    def _implicit_registration(self, key: str, cls: type[Any] | None = None) -> _Registration | None:
        """Register ``key`` if an allowance covers it: MAF's ``register_checkpoint_type``, an
        allowed module, or (given the class at save, with ``trust_saved_types``) trust.

        At save (``cls`` given) a key allowed by name must find ``cls`` again by that exact name,
        so that a fresh process reading the body resolves the same class.
        """
        from .maf import runner_registered_type_keys

        try:
            module_name, _ = split_key(key)
        except ValueError:
            return None
        by_name = key in runner_registered_type_keys() or module_allowed(module_name, self._allowed_modules)
        if by_name and cls is not None:
            try:
                by_name = resolve_exact_class(key) is cls
            except TypeNotResolvable:
                by_name = False
        if by_name:
            self.register(key)
        elif cls is not None and self._trust_saved_types:
            self._by_key[key] = _Registration(key, cls)
        else:
            return None
        return self._by_key[key]

    @property
    def allowed_type_keys(self) -> frozenset[str]:
        """Keys of the types allowed beyond the built-in ones (MAF's own types, when installed)."""
        return frozenset(self._by_key) - self._builtin_type_keys

    @property
    def allowed_modules(self) -> tuple[str, ...]:
        return self._allowed_modules

    def allow(self, *, types: Iterable[TypeRef] = (), modules: Iterable[str] = ()) -> None:
        """Extend the allow-list: more types (as ``allowed_types``) and modules."""
        for ref in types:
            self.register(ref)
        self._allowed_modules = (*self._allowed_modules, *normalise_modules(modules))

    def allowed_class(self, key: str, cls: type[Any] | None = None) -> type[Any] | None:
        """The class ``key`` names if this codec may name it in a body, else None.

        For references to classes (a pending request's type) rather than values of them: with
        ``cls`` (at save) the allowances are checked for that class, without it (at load) the key
        is resolved exactly, importing its module only when the key is allowed.
        """
        registration = self._by_key.get(key) or self._implicit_registration(key, cls)
        if registration is None:
            return None
        if cls is not None:
            return cls if registration.cls in (None, cls) else None
        try:
            return registration.resolve()
        except TypeNotResolvable:
            return None

    # ------------------------------------------------------------------ public API

    def encode_checkpoint(self, checkpoint: Any) -> bytes:
        """Encode a checkpoint object to a self-checking body, embedded checkpoints inline."""
        tag = self._require_checkpoint_tag(checkpoint)
        return self._frame(self._encode_with_location(checkpoint, tag))

    def _require_checkpoint_tag(self, checkpoint: Any) -> str:
        tag = self._checkpoint_tag(type(checkpoint))
        if tag is None:
            raise UnserializableValueError(
                type_key(type(checkpoint)),
                "checkpoint",
                "not a checkpoint class this codec knows; register it with register_checkpoint_class()",
            )
        return tag

    def encode_checkpoint_tree(self, checkpoint: Any) -> list[EncodedCheckpoint]:
        """Encode a checkpoint and, as bodies of their own, the checkpoints embedded in it.

        Returns the checkpoint's body first, then one body per embedded checkpoint in the order
        they are met (containers before what they contain). An embedded checkpoint met twice is
        stored once when both encode alike; two different ones under one id are refused.
        """
        tag = self._require_checkpoint_tag(checkpoint)
        state = _TreeEncoding(nodes=[None], containers=[checkpoint.checkpoint_id], first_seen={})
        token = _TREE.set(state)
        try:
            payload = self._encode_with_location(checkpoint, tag)
        finally:
            _TREE.reset(token)
        top = EncodedCheckpoint(checkpoint, self._frame(payload, nested_refs=state.references > 0), None)
        state.nodes[0] = top
        return [node for node in state.nodes if node is not None]

    def decode_checkpoint(
        self,
        body: bytes,
        *,
        checkpoint_id: str,
        nested: Mapping[str, bytes] | None = None,
        construct_types: bool = True,
    ) -> Any:
        """Decode a body; damage raises CheckpointCorruptedError naming ``checkpoint_id``, a type
        that is not allowed CheckpointTypeNotAllowedError.

        ``nested`` maps ids to the bodies of the checkpoints embedded in this one, for bodies
        written by :meth:`encode_checkpoint_tree`; it may hold more than this body needs. With
        ``construct_types=False`` no enum, dataclass, model or MAF type is constructed: their
        values come back as :class:`OpaqueValue` and every checkpoint as this project's
        ``WorkflowCheckpoint``, so structure and links can be checked anywhere.
        """
        payload = self._unframe(body, checkpoint_id)
        resolver = _NestedResolver(nested or {}, given=nested is not None)
        token = _RESOLVER.set(resolver)
        opaque_token = _OPAQUE.set(not construct_types)
        try:
            wire = self._decoder.decode(payload)
            if not isinstance(wire, list):
                raise _Undecodable("payload is not a checkpoint record")
            checkpoint = self._build_checkpoint(wire)
            if self.has_nested_refs(body) and not resolver.decoded:
                # The flag and the payload disagree: one of them was altered.
                raise _Undecodable("the header announces nested records but the payload refers to none")
            return checkpoint
        except (CheckpointCorruptedError, MissingDependencyError):
            raise
        except _TypeNotAllowed as exc:
            raise CheckpointTypeNotAllowedError(exc.key, checkpoint_id, reason=exc.reason) from None
        except Exception as exc:
            raise CheckpointCorruptedError(checkpoint_id, _describe(exc)) from exc
        finally:
            _OPAQUE.reset(opaque_token)
            _RESOLVER.reset(token)

    @staticmethod
    def has_nested_refs(body: bytes) -> bool:
        """True if ``body`` refers to nested records (reads the header flag only)."""
        return len(body) > _FLAGS_OFFSET and bool(body[_FLAGS_OFFSET] & _FLAG_NESTED_REFS)

    @staticmethod
    def nested_ref_ids(body: bytes, *, checkpoint_id: str) -> list[str]:
        """Ids of the nested records ``body`` refers to directly, in order (for verify tooling)."""
        flags, payload = _check_frame(body, checkpoint_id)
        if not flags & _FLAG_NESTED_REFS:
            return []
        if flags & _FLAG_ZSTD:
            payload = memoryview(
                _decompress_bounded(
                    payload, checkpoint_id, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_COMPRESSION_RATIO
                )
            )
        found: list[str] = []

        def collect(code: int, data: memoryview) -> Any:
            if code == _EXT_NESTED_REF:
                found.append(msgspec.msgpack.decode(data))
            else:
                msgspec.msgpack.decode(data, ext_hook=collect)
            return None

        try:
            msgspec.msgpack.decode(payload, ext_hook=collect)
        except Exception as exc:
            raise CheckpointCorruptedError(checkpoint_id, _describe(exc)) from exc
        return found

    def encode_value(self, value: Any) -> bytes:
        """Encode any value the codec allows (used for state outside a checkpoint)."""
        return self._frame(self._encode_with_location(value, None))

    def decode_value(self, body: bytes, *, label: str = "value") -> Any:
        payload = self._unframe(body, label)
        try:
            return self._decoder.decode(payload)
        except (CheckpointCorruptedError, MissingDependencyError):
            raise
        except _TypeNotAllowed as exc:
            raise CheckpointTypeNotAllowedError(exc.key, label, reason=exc.reason) from None
        except Exception as exc:
            raise CheckpointCorruptedError(label, _describe(exc)) from exc

    @staticmethod
    def verify_frame(body: bytes, *, checkpoint_id: str) -> None:
        """Check the header and CRC only (cheap; decodes nothing)."""
        _check_frame(body, checkpoint_id)

    # ------------------------------------------------------------------ framing

    def _frame(self, payload: bytes, *, nested_refs: bool = False) -> bytes:
        if len(payload) > self._max_payload_bytes:
            raise InvalidCheckpointError(
                f"The checkpoint encodes to {len(payload)} bytes, over this codec's max_payload_bytes "
                f"({self._max_payload_bytes}); nothing was stored. Raise the limit: "
                "CheckpointCodec(max_payload_bytes=...)",
                field="checkpoint",
            )
        flags = _FLAG_NESTED_REFS if nested_refs else 0
        if self._compress_threshold is not None and len(payload) >= self._compress_threshold:
            compressed = self._zstd.ZstdCompressor(level=self._compression_level).compress(payload)
            # A payload that expands more than a reader allows is stored as it is, so every body
            # this codec writes is one it can read back.
            if len(compressed) * self._max_compression_ratio >= len(payload):
                payload = compressed
                flags |= _FLAG_ZSTD
        return _HEADER.pack(_MAGIC, _FORMAT_VERSION, flags, zlib.crc32(payload)) + payload

    def _unframe(self, body: bytes, checkpoint_id: str) -> bytes | memoryview:
        flags, payload = _check_frame(body, checkpoint_id)
        if flags & _FLAG_ZSTD:
            return _decompress_bounded(
                payload, checkpoint_id, self._max_payload_bytes, self._max_compression_ratio
            )
        if len(payload) > self._max_payload_bytes:
            raise CheckpointCorruptedError(
                checkpoint_id,
                f"payload of {len(payload)} bytes is over this codec's max_payload_bytes "
                f"({self._max_payload_bytes})",
            )
        return payload

    # ------------------------------------------------------------------ encoding

    def _encode_with_location(self, root: Any, checkpoint_tag: str | None) -> bytes:
        tree = _TREE.get()
        mark = (
            (len(tree.nodes), len(tree.containers), dict(tree.first_seen), tree.references)
            if tree is not None
            else None
        )
        try:
            try:
                return self._encoder.encode(self._wire(root, checkpoint_tag))
            except OverflowError:
                # An int outside msgpack's 64-bit range: redo on the slow path that boxes such ints,
                # forgetting the nested bodies the first attempt collected.
                if tree is not None and mark is not None:
                    del tree.nodes[mark[0] :]
                    del tree.containers[mark[1] :]
                    tree.first_seen = mark[2]
                    tree.references = mark[3]
                boxing = self._boxing_codec()
                return boxing._encoder.encode(boxing._wire(root, checkpoint_tag))
        except _Unencodable as exc:
            target = exc.value
            path = _locate(root, lambda value: value is target)
            raise UnserializableValueError(type_key(type(target)), path, exc.hint) from None
        except UnicodeEncodeError:
            path = _locate(root, _is_unencodable_str)
            raise UnserializableValueError(
                "builtins:str", path, "the string contains a lone surrogate, which is not valid UTF-8"
            ) from None
        except RecursionError:
            raise UnserializableValueError(
                type_key(type(root)),
                "checkpoint" if checkpoint_tag is not None else "value",
                "the value is nested too deeply or contains a reference cycle",
            ) from None

    def _wire(self, root: Any, checkpoint_tag: str | None) -> Any:
        if checkpoint_tag is None:
            return self._to_wire(root)
        return self._checkpoint_wire(root, checkpoint_tag)

    def _boxing_codec(self) -> CheckpointCodec:
        if self._boxing is None:
            boxing = CheckpointCodec.__new__(CheckpointCodec)
            boxing.__dict__.update(self.__dict__)
            boxing._atoms = _ATOMS - {int}
            boxing._key_atoms = frozenset({str})
            boxing._boxing = boxing
            boxing._encoders = {}
            boxing._encoders.update(boxing._builtin_encoders())
            boxing._encoders[int] = _encode_int_boxed
            self._boxing = boxing
        return self._boxing

    def _checkpoint_tag(self, cls: type[Any]) -> str | None:
        tag = self._checkpoint_tags.get(cls)
        if tag is None and cls.__name__ == "WorkflowCheckpoint" and cls.__module__ == _MAF_CHECKPOINT_MODULE:
            tag = _MAF_CHECKPOINT_TAG
            self._checkpoint_tags[cls] = tag
            self._checkpoint_classes[tag] = cls
            self._encoders[cls] = self._encode_checkpoint_ext
        return tag

    def _checkpoint_wire(self, checkpoint: Any, tag: str) -> list[Any]:
        to_wire = self._to_wire
        atoms = self._atoms
        wire: list[Any] = [_FORMAT_VERSION, tag]
        for name in CHECKPOINT_FIELDS:
            value = getattr(checkpoint, name)
            wire.append(value if type(value) in atoms else to_wire(value))
        return wire

    def _to_wire(self, value: Any) -> Any:
        # The hot path. Dicts and lists come back as they are unless something inside them needs
        # converting; only then is the container copied, so plain JSON-like state costs one type
        # test per item and no allocation.
        cls = type(value)
        atoms = self._atoms
        if cls is dict:
            key_atoms = self._key_atoms
            copied: dict[Any, Any] | None = None
            for key, item in value.items():
                if type(key) not in key_atoms:
                    return self._encode_pairs(value)
                if type(item) not in atoms:
                    wire = self._to_wire(item)
                    if wire is not item:
                        if copied is None:
                            copied = value.copy()
                        copied[key] = wire
            return value if copied is None else copied
        if cls is list:
            copied_list: list[Any] | None = None
            for index, item in enumerate(value):
                if type(item) not in atoms:
                    wire = self._to_wire(item)
                    if wire is not item:
                        if copied_list is None:
                            copied_list = value.copy()
                        copied_list[index] = wire
            return value if copied_list is None else copied_list
        if cls in atoms:
            return value
        encoder = self._encoders.get(cls)
        if encoder is None:
            encoder = self._encoder_for(cls, value)
        return encoder(value)

    def _encode_pairs(self, value: dict[Any, Any]) -> Any:
        to_wire = self._to_wire
        pairs = [[to_wire(key), to_wire(item)] for key, item in value.items()]
        return Ext(_EXT_DICT_PAIRS, self._encoder.encode(pairs))

    def _encode_tuple(self, value: tuple[Any, ...]) -> Any:
        to_wire = self._to_wire
        return Ext(_EXT_TUPLE, self._encoder.encode([to_wire(item) for item in value]))

    def _encode_set(self, value: set[Any]) -> Any:
        to_wire = self._to_wire
        return Ext(_EXT_SET, self._encoder.encode([to_wire(item) for item in value]))

    def _encode_frozenset(self, value: frozenset[Any]) -> Any:
        to_wire = self._to_wire
        return Ext(_EXT_FROZENSET, self._encoder.encode([to_wire(item) for item in value]))

    def _encode_checkpoint_ext(self, checkpoint: Any) -> Any:
        tag = self._checkpoint_tag(type(checkpoint))
        assert tag is not None
        tree = _TREE.get()
        if tree is None:
            return Ext(_EXT_CHECKPOINT, self._encoder.encode(self._checkpoint_wire(checkpoint, tag)))
        return self._encode_nested_record(checkpoint, tag, tree)

    def _encode_nested_record(self, checkpoint: Any, tag: str, tree: _TreeEncoding) -> Any:
        """Encode an embedded checkpoint as a body of its own; the container keeps its id."""
        checkpoint_id = checkpoint.checkpoint_id
        if not isinstance(checkpoint_id, str):
            raise _Unencodable(checkpoint, "an embedded checkpoint's checkpoint_id must be a str")
        if checkpoint_id in tree.containers:
            raise _Unencodable(checkpoint, f"checkpoint {checkpoint_id!r} is embedded in itself")
        container_id = tree.containers[-1]
        index = len(tree.nodes)
        references_before = tree.references
        tree.nodes.append(None)
        tree.containers.append(checkpoint_id)
        try:
            payload = self._encoder.encode(self._checkpoint_wire(checkpoint, tag))
        finally:
            tree.containers.pop()
        body = self._frame(payload, nested_refs=tree.references > references_before)
        first = tree.first_seen.get(checkpoint_id)
        if first is None:
            tree.first_seen[checkpoint_id] = index
            tree.nodes[index] = EncodedCheckpoint(checkpoint, body, container_id)
        else:
            earlier = tree.nodes[first]
            if earlier is not None and earlier.body != body:
                raise _Unencodable(
                    checkpoint, f"another embedded checkpoint with id {checkpoint_id!r} has different content"
                )
            # The same checkpoint met again (aliasing): stored once, referred to twice.
            del tree.nodes[index:]
        tree.references += 1
        return Ext(_EXT_NESTED_REF, self._encoder.encode(checkpoint_id))

    def _encoder_for(self, cls: type[Any], value: Any) -> Callable[[Any], Any]:
        if self._checkpoint_tag(cls) is not None:
            return self._encode_checkpoint_ext
        key = type_key(cls)
        registration = self._by_key.get(key) or self._implicit_registration(key, cls)
        if registration is None:
            raise _Unencodable(value, self._unregistered_hint(cls))
        if registration.cls is None:
            # Allowed by name: the name must lead a reader back to this very class.
            try:
                found: type[Any] | None = resolve_exact_class(key)
            except TypeNotResolvable:
                found = None
            if found is not cls:
                raise _Unencodable(
                    value,
                    f"it is allowed as {key!r}, but that name does not lead back to this class "
                    "(a class defined inside a function, or replaced after import), so no reader could "
                    "load it; define it at module level",
                )
            registration.cls = cls
        elif registration.cls is not cls:
            raise _Unencodable(value, "another class is registered under the same 'module:qualname'")
        try:
            encoder = self._make_encoder(registration)
        except TypeError as exc:
            # Registered by "module:qualname" without hooks, and not an enum, dataclass or model.
            raise _Unencodable(value, str(exc)) from None
        self._encoders[cls] = encoder
        return encoder

    def _make_encoder(self, registration: _Registration) -> Callable[[Any], Any]:
        key = registration.key
        encode = self._encoder.encode
        to_wire = self._to_wire
        custom = registration.custom
        if custom is not None:
            hook = custom.encode
            return lambda value: Ext(_EXT_CUSTOM, encode([key, to_wire(hook(value))]))
        kind = _kind_of(registration.resolve())
        if kind == _EXT_ENUM:
            return lambda value: Ext(_EXT_ENUM, encode([key, to_wire(value.value)]))
        if kind == _EXT_NAMEDTUPLE:
            return lambda value: Ext(_EXT_NAMEDTUPLE, encode([key, [to_wire(item) for item in value]]))
        if kind == _EXT_DATACLASS:
            names = [f.name for f in dataclasses.fields(registration.resolve())]

            def encode_dataclass(value: Any) -> Any:
                state = {}
                for name in names:
                    item = getattr(value, name, _UNSET)
                    if item is _UNSET:  # a field(init=False) never assigned
                        raise _Unencodable(value, f"field {name!r} is not set")
                    state[name] = to_wire(item)
                return Ext(_EXT_DATACLASS, encode([key, state]))

            return encode_dataclass

        def encode_model(value: Any) -> Any:
            state = {name: to_wire(getattr(value, name)) for name in type(value).model_fields}
            extra = getattr(value, "__pydantic_extra__", None)  # fields kept by extra="allow"
            if extra:
                state.update((name, to_wire(item)) for name, item in extra.items())
            return Ext(_EXT_PYDANTIC, encode([key, state]))

        return encode_model

    def _unregistered_hint(self, cls: type[Any]) -> str:
        key = type_key(cls)
        builtin_subclass = issubclass(cls, (dict, list, tuple, set, frozenset, str, int, float, bytes))
        if _is_namedtuple(cls) or not builtin_subclass:
            try:
                _kind_of(cls)
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

    # ------------------------------------------------------------------ decoding

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        if code == _EXT_UUID:
            return uuid.UUID(bytes=bytes(data))
        if code == _EXT_BYTEARRAY:
            return bytearray(data)
        decode = self._decoders.get(code)
        if decode is None:
            raise _Undecodable(f"unknown extension code {code}")
        return decode(self._decoder.decode(data))

    def _registered_class(self, key: Any) -> tuple[type[Any], _Registration]:
        if not isinstance(key, str):
            raise _Undecodable(f"a type key is {type(key).__name__}, not str")
        registration = self._by_key.get(key) or self._implicit_registration(key)
        if registration is None:
            raise _TypeNotAllowed(key, "it is not on this storage's allow-list")
        try:
            return registration.resolve(), registration
        except TypeNotResolvable as exc:
            raise _TypeNotAllowed(key, str(exc)) from None

    def _decode_enum(self, wire: Any) -> Any:
        key, value = wire
        if _OPAQUE.get():
            return OpaqueValue(key, value)
        cls, _ = self._registered_class(key)
        if not isinstance(cls, enum.EnumMeta):
            raise _Undecodable(f"{key} is stored as an enum but is not one")
        return cls(value)

    def _decode_namedtuple(self, wire: Any) -> Any:
        key, values = wire
        if _OPAQUE.get():
            return OpaqueValue(key, values)
        cls, _ = self._registered_class(key)
        if not _is_namedtuple(cls) or not isinstance(values, list) or len(values) != len(cls._fields):
            raise _Undecodable(f"{key} is not a NamedTuple of {len(values)} fields")
        return cls(*values)

    def _decode_dataclass(self, wire: Any) -> Any:
        key, values = wire
        if _OPAQUE.get():
            return OpaqueValue(key, values)
        cls, _ = self._registered_class(key)
        if not dataclasses.is_dataclass(cls) or not isinstance(values, dict):
            raise _Undecodable(f"{key} is stored as a dataclass but is not one")
        init_values: dict[str, Any] = {}
        late_values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in values:
                (init_values if f.init else late_values)[f.name] = values[f.name]
        unknown = set(values) - set(init_values) - set(late_values)
        if unknown:
            raise _Undecodable(f"{key} has no fields {sorted(unknown)}")
        obj = cls(**init_values)
        for name, value in late_values.items():
            object.__setattr__(obj, name, value)
        return obj

    def _decode_pydantic(self, wire: Any) -> Any:
        key, values = wire
        if _OPAQUE.get():
            return OpaqueValue(key, values)
        cls, _ = self._registered_class(key)
        if _kind_of_or_none(cls) != _EXT_PYDANTIC:
            raise _Undecodable(f"{key} is stored as a pydantic model but is not one")
        return cls.model_validate(values, **_validate_by_name(cls))

    def _decode_custom(self, wire: Any) -> Any:
        key, state = wire
        if _OPAQUE.get():
            return OpaqueValue(key, state)
        _, registration = self._registered_class(key)
        if registration.custom is None:
            raise _Undecodable(f"{key} was stored with hooks but is registered without them")
        return registration.custom.decode(state)

    def _decode_checkpoint_payload(self, wire: Any) -> Any:
        return self._build_checkpoint(wire)

    def _decode_nested_ref(self, checkpoint_id: Any) -> Any:
        resolver = _RESOLVER.get()
        if not isinstance(checkpoint_id, str):
            raise _Undecodable("a nested checkpoint reference is not a str id")
        if resolver is None or not resolver.given:
            raise _Undecodable(
                f"it refers to embedded checkpoint {checkpoint_id!r} but was read without its nested records"
            )
        done = resolver.decoded.get(checkpoint_id, _UNSET)
        if done is not _UNSET:
            return done  # one object for every reference, as when it was saved
        if checkpoint_id in resolver.in_progress:
            raise _Undecodable(f"embedded checkpoint {checkpoint_id!r} contains itself")
        body = resolver.bodies.get(checkpoint_id)
        if body is None:
            raise _Undecodable(f"embedded checkpoint {checkpoint_id!r} is missing from the storage")
        resolver.in_progress.add(checkpoint_id)
        try:
            payload = self._unframe(body, checkpoint_id)
            wire = self._decoder.decode(payload)
            if not isinstance(wire, list):
                raise _Undecodable("payload is not a checkpoint record")
            checkpoint = self._build_checkpoint(wire)
        except CheckpointCorruptedError as exc:
            raise _Undecodable(f"embedded checkpoint {checkpoint_id!r}: {exc.reason}") from exc
        except _Undecodable as exc:
            raise _Undecodable(f"embedded checkpoint {checkpoint_id!r}: {exc}") from exc
        finally:
            resolver.in_progress.discard(checkpoint_id)
        if checkpoint.checkpoint_id != checkpoint_id:
            raise _Undecodable(
                f"embedded checkpoint {checkpoint_id!r} resolved to a body of {checkpoint.checkpoint_id!r}"
            )
        resolver.decoded[checkpoint_id] = checkpoint
        return checkpoint

    def _build_checkpoint(self, wire: list[Any]) -> Any:
        if len(wire) != 2 + len(CHECKPOINT_FIELDS) or wire[0] != _FORMAT_VERSION:
            raise _Undecodable("not a checkpoint record of this format version")
        tag = wire[1]
        cls = WorkflowCheckpoint if _OPAQUE.get() else self._checkpoint_classes.get(tag)
        if cls is None:
            cls = self._load_checkpoint_class(tag)
        values = dict(zip(CHECKPOINT_FIELDS, wire[2:], strict=True))
        _check_checkpoint_field_types(values)
        return cls(**values)

    def _load_checkpoint_class(self, tag: str) -> type[Any]:
        if tag != _MAF_CHECKPOINT_TAG:
            raise _Undecodable(f"checkpoint class {tag!r} is not registered with this storage's codec")
        try:
            module = importlib.import_module(_MAF_CHECKPOINT_MODULE)
        except ImportError as exc:
            raise MissingDependencyError(
                "loading a checkpoint saved from Agent Framework", "maf", "agent-framework-core"
            ) from exc
        cls = cast("type[Any]", module.WorkflowCheckpoint)
        self._checkpoint_tag(cls)
        return cls


# ---------------------------------------------------------------------- value encoders


def _zone_key(tzinfo: dt.tzinfo | None) -> str | None:
    key = getattr(tzinfo, "key", None)
    return key if isinstance(key, str) and type(tzinfo).__module__ == "zoneinfo" else None


def _clock_wire(value: dt.datetime | dt.time) -> Any:
    """ISO text, or ``[text, zone, fold]`` when ISO text alone would lose the zone or the fold.

    ``zone`` is a zoneinfo key, ``[days, seconds, microseconds]`` of a fixed offset, or None (the
    offset, if any, is in ``text``).
    """
    zone = _zone_key(value.tzinfo)
    if zone is not None:
        return [value.replace(tzinfo=None).isoformat(), zone, value.fold]
    offset = value.utcoffset()
    if offset is not None and offset.microseconds:
        # fromisoformat() reads an offset of under one second as UTC (CPython 3.11); keep it exact.
        exact = [offset.days, offset.seconds, offset.microseconds]
        return [value.replace(tzinfo=None).isoformat(), exact, value.fold]
    if value.fold:  # isoformat() drops fold, which a naive local time needs
        return [value.isoformat(), None, value.fold]
    return value.isoformat()


def _zone_from_wire(zone: Any) -> dt.tzinfo:
    if isinstance(zone, str):
        from zoneinfo import ZoneInfo

        return ZoneInfo(zone)
    days, seconds, microseconds = zone
    return dt.timezone(dt.timedelta(days=days, seconds=seconds, microseconds=microseconds))


def _encode_datetime(value: dt.datetime) -> Any:
    return Ext(_EXT_DATETIME, msgspec.msgpack.encode(_clock_wire(value)))


def _decode_datetime(wire: Any) -> dt.datetime:
    if isinstance(wire, str):
        return dt.datetime.fromisoformat(wire)
    text, zone, fold = wire
    value = dt.datetime.fromisoformat(text)
    return value.replace(tzinfo=value.tzinfo if zone is None else _zone_from_wire(zone), fold=fold)


def _encode_date(value: dt.date) -> Any:
    return Ext(_EXT_DATE, msgspec.msgpack.encode(value.isoformat()))


def _encode_time(value: dt.time) -> Any:
    return Ext(_EXT_TIME, msgspec.msgpack.encode(_clock_wire(value)))


def _decode_time(wire: Any) -> dt.time:
    if isinstance(wire, str):
        return dt.time.fromisoformat(wire)
    text, zone, fold = wire
    value = dt.time.fromisoformat(text)
    return value.replace(tzinfo=value.tzinfo if zone is None else _zone_from_wire(zone), fold=fold)


def _encode_timedelta(value: dt.timedelta) -> Any:
    return Ext(_EXT_TIMEDELTA, msgspec.msgpack.encode([value.days, value.seconds, value.microseconds]))


def _decode_timedelta(wire: Any) -> dt.timedelta:
    days, seconds, microseconds = wire
    return dt.timedelta(days=days, seconds=seconds, microseconds=microseconds)


def _encode_uuid(value: uuid.UUID) -> Any:
    return Ext(_EXT_UUID, value.bytes)


def _encode_decimal(value: Decimal) -> Any:
    return Ext(_EXT_DECIMAL, msgspec.msgpack.encode(str(value)))


def _encode_bytearray(value: bytearray) -> Any:
    return Ext(_EXT_BYTEARRAY, bytes(value))


def _encode_int_boxed(value: int) -> Any:
    if _INT64_MIN <= value <= _UINT64_MAX:
        return value
    # Hex, not decimal: Python limits decimal int<->str conversion to 4300 digits, never hex.
    return Ext(_EXT_BIGINT, msgspec.msgpack.encode(format(value, "x")))


def _decode_int_boxed(wire: str) -> int:
    return int(wire, 16)


def _decode_pairs(wire: Any) -> dict[Any, Any]:
    return {key: value for key, value in wire}


# ---------------------------------------------------------------------- helpers


_VALIDATE_BY_NAME: dict[type[Any], dict[str, bool]] = {}


def _validate_by_name(model: type[Any]) -> dict[str, bool]:
    """model_validate options that accept the stored field names even for aliased fields."""
    options = _VALIDATE_BY_NAME.get(model)
    if options is None:
        # by_name exists from pydantic 2.11; earlier versions validate by alias only.
        by_name = "by_name" in inspect.signature(model.model_validate).parameters
        options = _VALIDATE_BY_NAME[model] = {"by_alias": False, "by_name": True} if by_name else {}
    return options


def _resolve_key_syntax(key: str) -> None:
    module_name, sep, qualname = key.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"type key {key!r} is not of the form 'module:qualname'")


def _is_namedtuple(cls: type[Any]) -> bool:
    return issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


def _kind_of_or_none(cls: type[Any]) -> int | None:
    try:
        return _kind_of(cls)
    except TypeError:
        return None


def _kind_of(cls: type[Any]) -> int:
    if isinstance(cls, enum.EnumMeta):
        return _EXT_ENUM
    if _is_namedtuple(cls):
        return _EXT_NAMEDTUPLE
    if dataclasses.is_dataclass(cls):
        return _EXT_DATACLASS
    if hasattr(cls, "model_fields") and hasattr(cls, "model_validate"):
        return _EXT_PYDANTIC
    raise TypeError(
        f"{type_key(cls)} is not an enum, dataclass, pydantic model or NamedTuple; "
        "register it with encode/decode hooks"
    )


def _field_names(cls: type[Any]) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(getattr(cls, "__annotations__", {}))


_FIELD_TYPES: Final[dict[str, type[Any] | tuple[type[Any], ...]]] = {
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


def _check_checkpoint_field_types(values: dict[str, Any]) -> None:
    for name, expected in _FIELD_TYPES.items():
        if not isinstance(values[name], expected):
            raise _Undecodable(f"field {name} has type {type(values[name]).__name__}")


def _check_frame(body: bytes, checkpoint_id: str) -> tuple[int, memoryview]:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise CheckpointCorruptedError(checkpoint_id, f"stored body is {type(body).__name__}, not bytes")
    if len(body) < HEADER_SIZE:
        raise CheckpointCorruptedError(checkpoint_id, f"body is {len(body)} bytes, shorter than its header")
    magic, version, flags, crc = _HEADER.unpack_from(body)
    if magic != _MAGIC:
        raise CheckpointCorruptedError(checkpoint_id, "body does not start with the checkpoint magic")
    if version != _FORMAT_VERSION:
        raise CheckpointCorruptedError(checkpoint_id, f"unknown body format version {version}")
    if flags & ~_KNOWN_FLAGS:
        # A flag this version does not know changes how the payload reads; never guess.
        raise CheckpointCorruptedError(checkpoint_id, f"unknown body flags {flags:#04x}")
    payload = memoryview(body)[HEADER_SIZE:]
    if zlib.crc32(payload) != crc:
        raise CheckpointCorruptedError(checkpoint_id, "checksum mismatch: stored bytes were altered")
    return flags, payload


def _decompress_bounded(
    payload: bytes | memoryview, checkpoint_id: str, max_payload_bytes: int, max_ratio: int
) -> bytes:
    """Decompress a zstd payload only if the size its frame declares is within both limits."""
    try:
        import zstandard
    except ImportError as exc:
        raise MissingDependencyError("reading zstd-compressed checkpoints", "zstd", "zstandard") from exc
    try:
        declared = zstandard.frame_content_size(payload)
    except zstandard.ZstdError as exc:
        raise CheckpointCorruptedError(checkpoint_id, f"zstd payload: {exc}") from exc
    if declared < 0:
        raise CheckpointCorruptedError(checkpoint_id, "zstd payload does not declare its decompressed size")
    limit = min(max_payload_bytes, max_ratio * len(payload))
    if declared > limit:
        raise CheckpointCorruptedError(
            checkpoint_id,
            f"zstd payload of {len(payload)} bytes declares {declared} bytes decompressed, over the limit of "
            f"{limit} (max_payload_bytes {max_payload_bytes}, max_compression_ratio {max_ratio})",
        )
    try:
        data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise CheckpointCorruptedError(checkpoint_id, f"zstd payload: {exc}") from exc
    if len(data) != declared:
        raise CheckpointCorruptedError(
            checkpoint_id, f"zstd payload decompressed to {len(data)} bytes, not the {declared} it declares"
        )
    return data


def _describe(exc: BaseException) -> str:
    if isinstance(exc, _Undecodable):
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
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            yield f".{name}", getattr(value, name, None)
    elif hasattr(type(value), "model_fields"):
        for name in type(value).model_fields:
            yield f".{name}", getattr(value, name, None)
        for name, item in (getattr(value, "__pydantic_extra__", None) or {}).items():
            yield f".{name}", item
    elif isinstance(value, enum.Enum):
        yield ".value", value.value


def _is_unencodable_str(value: object) -> bool:
    if type(value) is not str:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return True
    return False


def _locate(root: Any, is_target: Callable[[Any], bool]) -> str:
    """Path of the first value inside ``root`` (breadth first) that ``is_target``, for error messages."""
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


__all__ = [
    "DEFAULT_MAX_COMPRESSION_RATIO",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "HEADER_SIZE",
    "CheckpointCodec",
    "EncodedCheckpoint",
    "OpaqueValue",
    "TypeRef",
    "type_key",
]
