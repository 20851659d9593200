"""CheckpointCodec: the public encode/decode API, composed of the frame, the type registry, the
packers, the readers and the fidelity checks (each a module of this package)."""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from ..contract import CHECKPOINT_FIELDS
from ..errors import (
    CheckpointCorruptedError,
    CheckpointTypeNotAllowedError,
    MissingDependencyError,
    UnserializableValueError,
)
from . import frame as framing
from .decoding import RECORD_VERSION, Reader, nested_ref_ids
from .fidelity import Fidelity
from .locate import describe, refusal
from .packing import (
    SPLICED_MIN_BYTES,
    STATE_IN_RECORD,
    ExactPacker,
    NativePacker,
    NeedsExactPath,
    holds_spliced_values,
)
from .plugins import codec_plugins
from .registry import TypeRegistry
from .stack import at_walk_floor, on_fresh_stack, ran_out_of_stack
from .values import EXT_CHECKPOINT, Packer, Reducer
from .vocabulary import (
    EXPECTED_FIELD_TYPES,
    EncodedCheckpoint,
    NestedResolver,
    TreeEncoding,
    TypeNotAllowed,
    TypeRef,
    Undecodable,
    Unencodable,
    refuse_field_types,
    type_key,
)

_checkpoint_fields = operator.attrgetter(*CHECKPOINT_FIELDS)
"""A checkpoint's field values in record order, read in one native call."""
_TRAILER_SIZE = framing.TRAILER_SIZE
_TRAILER_END = framing.TRAILER_END
"""Format version and magic: what every body this codec writes ends with (a version-1 or -2 body
takes unframe's checks)."""
_MAGIC = framing.MAGIC
_SEALED_TRAILER = framing.SEALED_TRAILER
_PLAIN_FLAGS = bytes(1)
"""A plain body's flags byte, which starts its trailer (its checksum then is the unseeded one)."""
_IN_PLACE_MIN = framing.IN_PLACE_MIN
_join = b"".join
"""One join of the payload and the trailer's three parts: fewer instructions than concatenating
them (a plain small body's frame, under callgrind: 4,290 against 4,705 with the checksum)."""
_SLOW_FLAGS = 0xFF & ~(framing.FLAG_SEALED | framing.FLAG_NESTED_REFS)
"""Flags a sealed body's in-line decode leaves to unframe: zstd, and any it does not know."""


def _record(tag: str, fields: tuple[Any, ...]) -> list[Any]:
    """A checkpoint's record (format version, class tag, field values), refused as a decode
    would refuse it: a field of a type no decode accepts raises the typed error a save gets,
    naming the field, so no body is written that its own codec cannot read."""
    if not all(map(isinstance, fields, EXPECTED_FIELD_TYPES)):  # one C-level pass when all is well
        checkpoint_id = fields[_ID_POSITION]
        refuse_field_types(fields, f"checkpoint {checkpoint_id!r}")
    return [RECORD_VERSION, tag, *fields]


_ID_POSITION = CHECKPOINT_FIELDS.index("checkpoint_id")


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
        max_payload_bytes: int = framing.DEFAULT_MAX_PAYLOAD_BYTES,
        max_compression_ratio: int = framing.DEFAULT_MAX_COMPRESSION_RATIO,
    ) -> None:
        limits = (("max_payload_bytes", max_payload_bytes), ("max_compression_ratio", max_compression_ratio))
        for name, limit in limits:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(f"{name} must be an int >= 1, got {limit!r}")
        plugins = codec_plugins()
        self._registry = registry = TypeRegistry(
            allowed_modules=allowed_modules, trust_saved_types=trust_saved_types, plugins=plugins
        )
        self._checkpoint_tags = registry.checkpoint_tags
        """The registry's table, read in line by every encode."""
        self._max_payload_bytes = max_payload_bytes
        self._max_compression_ratio = max_compression_ratio
        for cls in checkpoint_classes:
            self.register_checkpoint_class(cls)
        for plugin in plugins:
            # MAF's runner stores its own messages and events in every checkpoint; a codec that
            # refused them would make MAF drop checkpoints with nothing but a logged warning.
            plugin.install(self)
        registry.count_registered_as_builtin()
        for ref in (*allowed_types, *allowed_checkpoint_types):
            self.register(ref)
        self._compress_threshold = compress_threshold
        self._compressor: Any = None
        self._splicing = False
        """Whether encode_checkpoint looks for large ``bytes`` values at the top of each state to
        join by reference: from the first encode that held one on. The look is a Python loop over
        the state's top values, 1% of a small encode, which most codecs would pay for nothing."""
        if compress_threshold is not None:
            try:
                import zstandard
            except ImportError as exc:
                raise MissingDependencyError("zstd compression", "zstd", "zstandard") from exc
            self._compressor = lambda: zstandard.ZstdCompressor(level=compression_level)
        self._natives = threading.local()  # a NativePacker per thread: a walk counts on its packer
        self._exact = ExactPacker(registry.reducers, self._reducer_for)
        self._boxing: ExactPacker | None = None
        # The readers of the stateless decodes, shared by every call (one per call given nested
        # bodies: it records what each reference became).
        self._reader = Reader(registry, self._unframe)
        self._opaque_reader = Reader(registry, self._unframe, construct_types=False)
        self._fidelity = Fidelity(
            reducers=registry.reducers,
            reducer_for=self._reducer_for,
            exact=self._exact,
            boxing=self._boxing_packer,
            reader=self._reader,
            reader_with=self._reader_with,
        )

    # ------------------------------------------------------------------ the allow-list

    def register(
        self,
        type_ref: TypeRef,
        *,
        encode: Callable[[Any], Any] | None = None,
        decode: Callable[[Any], Any] | None = None,
    ) -> None:
        """Allow a type. Enums, dataclasses and pydantic models need no hooks; any other class
        needs ``encode`` (to a codec-encodable value) and ``decode`` (back to the object)."""
        self._registry.register(type_ref, encode=encode, decode=decode)

    def register_checkpoint_class(self, cls: type[Any]) -> None:
        """Accept another class with the 11 checkpoint fields and give it back on load."""
        self._registry.register_checkpoint_class(cls)

    def allow(self, *, types: Iterable[TypeRef] = (), modules: Iterable[str] = ()) -> None:
        """Extend the allow-list: more types (as ``allowed_types``) and modules."""
        for ref in types:
            self.register(ref)
        self._registry.allow_modules(modules)

    def allowed_class(self, key: str, cls: type[Any] | None = None) -> type[Any] | None:
        """The class ``key`` names if this codec may name it in a body, else None.

        For references to classes (a pending request's type) rather than values of them: with
        ``cls`` (at save) the allowances are checked for that class, without it (at load) the key
        is resolved exactly, importing its module only when the key is allowed.
        """
        return self._registry.allowed_class(key, cls)

    @property
    def allowed_type_keys(self) -> frozenset[str]:
        """Keys of the types allowed beyond the built-in ones (plug-ins' types, MAF's when installed)."""
        return self._registry.allowed_type_keys

    @property
    def allowed_modules(self) -> tuple[str, ...]:
        return self._registry.allowed_modules

    def same_value(self, first: Any, second: Any) -> bool:
        """True if ``first`` and ``second`` are one value to this codec: each would be stored as
        the other (storages/codec/fidelity.py says what that allows and refuses). False for a
        value it could not store."""
        return self._fidelity.same_value(first, second)

    # ------------------------------------------------------------------ public API

    def encode_checkpoint(
        self, checkpoint: Any, *, bin_from_bytes_only: bool = False, sealed: bool = False
    ) -> bytes:
        """Encode a checkpoint object to a self-checking body, embedded checkpoints inline.

        ``bin_from_bytes_only``: the caller has checked that no ``bytearray`` or ``memoryview``
        is anywhere in it (every bin-like value is exact ``bytes``), which spares the codec its
        own look for them (engine/writes.py checks a plain batch's exact types anyway). The body
        is the same either way; a caller that is wrong gets such a value back as ``bytes``.

        ``sealed``: the body goes inside a seal, whose MAC covers it (a keyed storage's save): it
        is framed without a checksum (frame.FLAG_SEALED), and only a decode given ``sealed=True``
        reads it.
        """
        tag = self._checkpoint_tags.get(type(checkpoint)) or self._require_checkpoint_tag(checkpoint)
        try:  # this thread's packer, in line: a call for it was a hundredth of an encode
            native = self._natives.packer
        except AttributeError:
            native = self._native()
        # A tree is set only when a hook encodes from inside a tree encode's walk: that path below.
        if native.tree is None:
            # The common encode in line: the native walk, then the plain frame.
            plain = _record(tag, _checkpoint_fields(checkpoint))
            try:
                if self._splicing and type(state := plain[STATE_IN_RECORD]) is dict:
                    # A large bytes value at the top of the state is joined into the body by
                    # reference (pack_payload_pieces): one look at each top value finds it.
                    for item in state.values():
                        if type(item) is bytes and len(item) >= SPLICED_MIN_BYTES:
                            pieces = native.pack_payload_pieces(plain, bin_checked=bin_from_bytes_only)
                            if pieces is not None:
                                return self._frame_pieces(pieces, sealed)
                            break
                payload: bytes = native.pack_payload(plain, bin_checked=bin_from_bytes_only)
            except NeedsExactPath:
                return self._frame(self._encode_exactly(checkpoint, tag, plain, None, None), sealed=sealed)
            if self._compress_threshold is None and len(payload) <= self._max_payload_bytes:
                if len(payload) >= SPLICED_MIN_BYTES and not self._splicing:
                    self._splicing = holds_spliced_values(plain)
                if len(payload) < _IN_PLACE_MIN:  # framing.framed, in line
                    if sealed:
                        return payload + _SEALED_TRAILER
                    return _join((payload, _PLAIN_FLAGS, framing.checksum(payload), _TRAILER_END))
                # The trailer appended in place: the list is the payload's only holder.
                owned = [payload]
                del payload
                flags = framing.FLAG_SEALED if sealed else 0
                return framing.append_frame(owned, framing.trailer(owned[0], flags))
            return self._frame(payload, sealed=sealed)
        return self._frame(
            self._encode_with_location(checkpoint, tag, bin_checked=bin_from_bytes_only), sealed=sealed
        )

    def encode_checkpoint_fields(
        self, checkpoint_class: type[Any], fields: tuple[Any, ...], *, bin_from_bytes_only: bool = False
    ) -> bytes:
        """``encode_checkpoint(checkpoint_class(*fields))`` without building the checkpoint:
        ``fields`` are its field values in record order (``CHECKPOINT_FIELDS``). The same body.

        For an engine-built record (a pending-writes batch), whose values need no checks a
        checkpoint's constructor or field read would add: building the object and reading its
        fields back was a sixth of such a write."""
        tag = self._checkpoint_tags.get(checkpoint_class)
        if (
            tag is not None
            and self._compress_threshold is None
            and type(self).encode_checkpoint is CheckpointCodec.encode_checkpoint
        ):
            try:
                native = self._natives.packer
            except AttributeError:
                native = self._native()
            if native.tree is None:
                try:
                    payload = native.pack_payload(_record(tag, fields), bin_checked=bin_from_bytes_only)
                except NeedsExactPath:
                    pass
                else:
                    if len(payload) <= self._max_payload_bytes:
                        return framing.plain_frame(payload, False)
        # Anything else (a tree encode under way, compression, a subclass's own encode, a value
        # the native walk cannot take): the object, through encode_checkpoint.
        return self.encode_checkpoint(checkpoint_class(*fields), bin_from_bytes_only=bin_from_bytes_only)

    def encode_checkpoint_tree(self, checkpoint: Any, *, sealed: bool = False) -> list[EncodedCheckpoint]:
        """Encode a checkpoint and, as bodies of their own, the checkpoints embedded in it.

        Returns the checkpoint's body first, then one body per embedded checkpoint in the order
        they are met (containers before what they contain). An embedded checkpoint met twice is
        stored once when both encode alike; two different ones under one id are refused.
        ``sealed``: every body goes inside a seal of its own (see :meth:`encode_checkpoint`).
        """
        tag = self._checkpoint_tags.get(type(checkpoint)) or self._require_checkpoint_tag(checkpoint)
        state = TreeEncoding([None], [checkpoint.checkpoint_id], {}, self._frame, sealed=sealed)
        native = self._native()
        # The walk's packer carries the tree to the reducers it calls; a tree encode inside this
        # one (from a hook) sets its own and this one's is put back after it.
        outer, native.tree = native.tree, state
        try:
            # The native walk in line (as encode_checkpoint): nothing is collected before it, so
            # a refused attempt rewinds to the empty state rather than to a copied mark.
            plain = _record(tag, _checkpoint_fields(checkpoint))
            try:
                payload = native.pack_payload(plain)
            except NeedsExactPath:
                empty: tuple[int, int, dict[str, int], int] = (1, 1, {}, 0)
                state.rewind(empty)
                payload = self._encode_exactly(checkpoint, tag, plain, state, empty)
        finally:
            native.tree = outer
        top = EncodedCheckpoint(
            checkpoint, self._frame(payload, nested_refs=state.references > 0, sealed=sealed), None
        )
        if len(state.nodes) == 1:
            return [top]  # nothing embedded: most checkpoints
        state.nodes[0] = top
        return [node for node in state.nodes if node is not None]

    def decode_checkpoint(
        self,
        body: bytes,
        *,
        checkpoint_id: str,
        nested: Mapping[str, bytes] | None = None,
        construct_types: bool = True,
        sealed: bool = False,
    ) -> Any:
        """Decode a body; damage raises CheckpointCorruptedError naming ``checkpoint_id``, a type
        that is not allowed CheckpointTypeNotAllowedError.

        ``nested`` maps ids to the bodies of the checkpoints embedded in this one, for bodies
        written by :meth:`encode_checkpoint_tree`; it may hold more than this body needs. With
        ``construct_types=False`` no enum, dataclass, model or MAF type is constructed: their
        values come back as :class:`OpaqueValue` and every checkpoint as this project's
        ``WorkflowCheckpoint``, so structure and links can be checked anywhere.

        ``sealed``: the caller has just verified the seal MAC around ``body`` and around every
        body in ``nested`` (or, for one stored without a seal, checked its frame: a keyed
        storage's reads do). Their checksums are then not computed again, and bodies framed for a
        seal (written with ``sealed=True``) are read; without it such a body is refused.
        """
        payload: bytes | memoryview | None = None
        flags = 0
        end = len(body) - _TRAILER_SIZE
        if type(body) is not bytes or end < 0 or not body.endswith(_TRAILER_END):
            pass  # not a version-3 body of bytes: unframe's checks
        elif sealed:
            # The MAC covered every byte: the checksum (none in a body framed for a seal) is not
            # computed. Compressed bodies, earlier versions and any failed check take unframe's.
            # A body that starts with the magic has a header instead: its end only looks like a
            # trailer by chance.
            flags = body[end]
            if not flags & _SLOW_FLAGS and end <= self._max_payload_bytes and not body.startswith(_MAGIC):
                payload = memoryview(body)[:end]
        # The common body (bytes, version 3, no flags, intact) in line, its payload a view (the
        # checksum and the decode each read it once, nothing copies it); any other takes
        # unframe's checks.
        elif not body[end]:
            payload = memoryview(body)[:end]
            if end > self._max_payload_bytes or not body.startswith(framing.checksum(payload), end + 1):
                payload = None
        if payload is None:
            payload = self._unframe(body, checkpoint_id, sealed)
            flags = framing.flags_of(body)
        if nested is None:
            reader = self._reader if construct_types else self._opaque_reader
            resolver = None
        else:
            resolver = NestedResolver(nested, given=True, sealed=sealed)
            reader = self._reader_with(resolver, construct_types=construct_types)
        try:
            checkpoint = reader.checkpoint(reader.decode(payload))
            refers = resolver is not None and bool(resolver.decoded)
            if flags & framing.FLAG_NESTED_REFS and not refers:
                # The flag and the payload disagree: one of them was altered.
                raise Undecodable("the frame announces nested records but the payload refers to none")
            return checkpoint
        except (CheckpointCorruptedError, MissingDependencyError):
            raise
        except TypeNotAllowed as exc:
            raise CheckpointTypeNotAllowedError(exc.key, checkpoint_id, reason=exc.reason) from None
        except Exception as exc:
            if ran_out_of_stack(exc):  # a deep body read from deep inside a runner's calls
                again = partial(self.decode_checkpoint, body, checkpoint_id=checkpoint_id, nested=nested)
                return on_fresh_stack(partial(again, construct_types=construct_types, sealed=sealed))
            raise CheckpointCorruptedError(checkpoint_id, describe(exc)) from exc

    @staticmethod
    def has_nested_refs(body: bytes) -> bool:
        """True if ``body`` refers to nested records (reads the frame's flag only)."""
        return framing.has_nested_refs(body)

    @staticmethod
    def nested_ref_ids(body: bytes, *, checkpoint_id: str, sealed: bool = False) -> list[str]:
        """Ids of the nested records ``body`` refers to directly, in order (for verify tooling);
        ``sealed`` as in :meth:`decode_checkpoint`."""
        return nested_ref_ids(body, checkpoint_id, sealed)

    def encode_value(self, value: Any) -> bytes:
        """Encode any value the codec allows (used for state outside a checkpoint)."""
        return self._frame(self._encode_with_location(value, None))

    def decode_value(self, body: bytes, *, label: str = "value") -> Any:
        payload = self._unframe(body, label)
        try:
            return self._reader.decode(payload)
        except (CheckpointCorruptedError, MissingDependencyError):
            raise
        except TypeNotAllowed as exc:
            raise CheckpointTypeNotAllowedError(exc.key, label, reason=exc.reason) from None
        except Exception as exc:
            if ran_out_of_stack(exc):
                return on_fresh_stack(lambda: self.decode_value(body, label=label))
            raise CheckpointCorruptedError(label, describe(exc)) from exc

    @staticmethod
    def verify_frame(body: bytes, *, checkpoint_id: str) -> None:
        """Check the frame and checksum only (cheap; decodes nothing)."""
        framing.check_frame(body, checkpoint_id)

    # ------------------------------------------------------------------ framing

    def payload_paths(self, checkpoint: Any) -> tuple[bytes | None, bytes]:
        """A test hook (tests/test_codec_fast_path.py): the checkpoint's payload by the native
        packer (None where it hands the value to the exact one) and by the exact packer, which a
        save of plain values must agree on byte for byte."""
        plain = self._checkpoint_plain(checkpoint, "native")
        try:
            native: bytes | None = self._native().pack_payload(plain)
        except NeedsExactPath:
            native = None
        try:
            exact = self._exact.pack(plain)
        except OverflowError:
            exact = self._boxing_packer().pack(plain)
        return native, exact

    def exact_body(self, checkpoint: Any) -> bytes:
        """A test hook: the body the exact (reference) packer gives, which every save must equal."""
        return self._frame(self._exact.pack(self._checkpoint_plain(checkpoint, "native")))

    def _frame(self, payload: bytes, *, nested_refs: bool = False, sealed: bool = False) -> bytes:
        if self._compress_threshold is None and len(payload) <= self._max_payload_bytes:
            if sealed:
                return framing.sealed_frame(payload, nested_refs)
            return framing.plain_frame(payload, nested_refs)
        return framing.frame(
            payload,
            nested_refs=nested_refs,
            max_payload_bytes=self._max_payload_bytes,
            max_compression_ratio=self._max_compression_ratio,
            compress_threshold=self._compress_threshold,
            compressor=self._compressor,
            sealed=sealed,
        )

    def _frame_pieces(self, pieces: list[bytes], sealed: bool) -> bytes:
        """``_frame(b"".join(pieces), sealed=sealed)`` of an uncompressing codec, joined once."""
        if sum(map(len, pieces)) > self._max_payload_bytes:
            return self._frame(b"".join(pieces), sealed=sealed)  # refused there, by name
        return framing.plain_frame_of_pieces(pieces, sealed)

    def _unframe(self, body: bytes, checkpoint_id: str, sealed: bool = False) -> bytes | memoryview:
        return framing.unframe(
            body, checkpoint_id, self._max_payload_bytes, self._max_compression_ratio, sealed
        )

    def _reader_with(self, resolver: NestedResolver, *, construct_types: bool = True) -> Reader:
        """A reader of one decode given nested bodies: ``resolver`` records what each became."""
        return Reader(self._registry, self._unframe, construct_types=construct_types, resolver=resolver)

    # ------------------------------------------------------------------ encoding

    def _require_checkpoint_tag(self, checkpoint: Any) -> str:
        tag = self._registry.checkpoint_tag(type(checkpoint))
        if tag is None:
            raise UnserializableValueError(
                type_key(type(checkpoint)),
                "checkpoint",
                "not a checkpoint class this codec knows; register it with register_checkpoint_class()",
            )
        return tag

    def _encode_with_location(
        self, root: Any, checkpoint_tag: str | None, *, bin_checked: bool = False
    ) -> bytes:
        plain = root if checkpoint_tag is None else _record(checkpoint_tag, _checkpoint_fields(root))
        native = self._native()
        tree = native.tree  # set when this encode runs inside a tree encode's walk (from a hook)
        mark = tree.mark() if tree is not None else None
        try:
            return native.pack_payload(plain, bin_checked=bin_checked)
        except NeedsExactPath:
            if tree is not None and mark is not None:
                tree.rewind(mark)  # the nested bodies the native attempt collected
        return self._encode_exactly(root, checkpoint_tag, plain, tree, mark)

    def _encode_exactly(
        self,
        root: Any,
        checkpoint_tag: str | None,
        plain: Any,
        tree: TreeEncoding | None,
        mark: tuple[int, int, dict[str, int], int] | None,
    ) -> bytes:
        """The exact walk, for what the native one refused (``tree`` rewound to ``mark`` already)."""
        exact = self._exact if tree is None else self._tree_packer(tree)
        try:
            try:
                return at_walk_floor(lambda: exact.pack(plain))
            except OverflowError:
                # An int outside msgpack's 64-bit range: redo on the walk that boxes such ints,
                # forgetting the nested bodies the first attempt collected.
                if tree is not None and mark is not None:
                    tree.rewind(mark)
                boxing = self._boxing_packer() if tree is None else self._tree_packer(tree, boxing=True)
                return at_walk_floor(lambda: boxing.pack(plain))
        except (Unencodable, UnicodeEncodeError, RecursionError) as exc:
            if ran_out_of_stack(exc):  # a deep value saved from deep inside a runner's calls
                if tree is not None and mark is not None:
                    tree.rewind(mark)
                return on_fresh_stack(lambda: self._encode_exactly(root, checkpoint_tag, plain, tree, mark))
            raise refusal(exc, root, checkpoint=checkpoint_tag is not None) from None

    def _native(self) -> NativePacker:
        try:
            packer: NativePacker = self._natives.packer
        except AttributeError:
            packer = self._natives.packer = NativePacker(self._registry.reducers, self._reducer_for)
        return packer

    def _tree_packer(self, tree: TreeEncoding, *, boxing: bool = False) -> ExactPacker:
        """An exact packer of one tree encode's walk, carrying its tree: the codec's own exact
        packers serve every thread at once, so none of them can carry one."""
        return ExactPacker(self._registry.reducers, self._reducer_for, boxing=boxing, tree=tree)

    def _boxing_packer(self) -> ExactPacker:
        if self._boxing is None:
            self._boxing = ExactPacker(self._registry.reducers, self._reducer_for, boxing=True)
        return self._boxing

    def _reducer_for(self, cls: type[Any], value: Any) -> Reducer:
        """The packers' reducer of a class not in the registry's table yet."""
        return self._registry.reducer_for(
            cls, value, reduce_checkpoint=self._reduce_checkpoint, rebuilds=self._fidelity
        )

    @staticmethod
    def _checkpoint_plain(checkpoint: Any, tag: str) -> list[Any]:
        return _record(tag, _checkpoint_fields(checkpoint))

    def _reduce_checkpoint(self, checkpoint: Any, packer: Packer) -> Any:
        """An embedded checkpoint: inline, or (in an encode_checkpoint_tree) a body of its own."""
        tag = self._registry.checkpoint_tag(type(checkpoint))
        assert tag is not None
        tree = packer.tree
        if tree is None:
            return packer.ext(EXT_CHECKPOINT, packer.pack(self._checkpoint_plain(checkpoint, tag)))
        return tree.nest(checkpoint, self._checkpoint_plain(checkpoint, tag), packer)
