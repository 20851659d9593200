"""Two ways to pack a value, one format.

:class:`NativePacker` lets ormsgpack walk the value in native code. Its passthrough options send
every type msgpack would otherwise flatten (tuples, datetimes, dataclasses, enums, UUIDs,
subclasses of built-ins) to a default hook, which reduces it to our extension; sets, decimals,
models and any other class reach the hook anyway. Dicts with keys other than ``str`` are refused,
never converted. What the native walk cannot represent faithfully it refuses, and the value is
redone by :class:`ExactPacker`, the Python walk the codec always had: dicts with non-``str``
keys, ints beyond 64 bits, strings that are not valid UTF-8, nesting deeper than ormsgpack's
limit, and a payload holding msgpack ``bin`` unless every bin in it came from ``bytes``
(ormsgpack writes ``bytearray`` and ``memoryview`` as ``bin`` too, which would read back as
``bytes``). Both packers write byte-identical
payloads for what both accept (tests/test_codec_fast_path.py), so a reader cannot tell them apart.

msgspec was the first candidate: its ``enc_hook`` is only called for types it does not support,
and it supports tuples, sets, datetimes and dataclasses natively (lossily for this format), so it
cannot walk a checkpoint faithfully. Decoding stays with msgspec (``ext_hook``).
"""

from __future__ import annotations

import gc
import secrets
import struct
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

import msgspec
import ormsgpack

from ..contract import CHECKPOINT_FIELDS
from .stack import MAX_NESTING
from .values import (
    EXT_DATETIME,
    EXT_DICT_PAIRS,
    EXT_TUPLE,
    Reducer,
    datetime_data,
    reduce_int_boxed,
)
from .vocabulary import TreeEncoding, Unencodable

ReducerLookup = Callable[[type[Any], Any], Reducer]
"""The reducer of a class that is not an atom (registering it on first use), or Unencodable."""

NATIVE_OPTIONS: Final = (
    ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_SUBCLASS
    | ormsgpack.OPT_PASSTHROUGH_TUPLE
    | ormsgpack.OPT_PASSTHROUGH_UUID
)
_BIN_MARKERS: Final = (b"\xc4", b"\xc5", b"\xc6")
"""msgpack's bin8/16/32 headers: a payload without these bytes holds no bin value at all."""

ATOMS: Final[frozenset[type[Any]]] = frozenset({str, int, float, bool, type(None), bytes})
KEY_ATOMS: Final[frozenset[type[Any]]] = frozenset({str, int})


_BIN_CHECK_DEPTH: Final = 64
"""How many levels :func:`bin_only_from_bytes` looks down before it leaves the answer to the exact
walk."""


def bin_only_from_bytes(value: Any, payload_size: int) -> bool:
    """True if every msgpack ``bin`` the native walk wrote for ``value`` (``payload_size`` bytes)
    came from ``bytes``.

    A payload holding bin bytes is only suspect because ``bytearray`` and ``memoryview`` are
    written as bin too; ``bytes`` reads back as itself. This proves the harmless case cheaply
    (checkpoints of runners that store serialized blobs, LangGraph's, hold bytes in every body,
    and bin-like bytes turn up inside ordinary UTF-8 text and floats): it looks through exact
    dicts, lists and tuples down to exact atoms and answers False, leaving the value to the exact
    walk, at anything else (a set, a dataclass, a subclass, a nested checkpoint) or past a depth;
    an exact datetime is a leaf (the hook writes it as an extension of its text).

    One level at a time, in native calls: the types of a level's values in one set, then the
    next level in one ``gc.get_referents`` call, which gives the items of an exact list or tuple,
    the values of an exact dict (and its keys, unless they are all ``str``), and nothing for an
    atom or a datetime. A Python loop over every value, with a call per container, cost 70 ns a
    value: on the benchmark state (217 values) a third of a small encode, and more than
    ormsgpack's own walk of a 1 MB blob. A long list of plain values (an embedding's floats, a
    series) is judged in one native call instead (:func:`_without_plain_lists`).
    """
    next_level = _next_level_of_large if payload_size >= _LARGE_PAYLOAD else _next_level
    level: list[Any] = [value]
    for _ in range(_BIN_CHECK_DEPTH):
        kinds = set(map(type, level))
        if kinds <= _WITHOUT_BIN:
            return True
        if not kinds <= _WALKED:
            return False
        level = next_level(level, kinds)
    return False


def _next_level(level: list[Any], kinds: set[type[Any]]) -> list[Any]:
    """The values under ``level``'s containers (of ``kinds``), less those of its long lists of
    plain values, in a payload under 64 KiB.

    A set of the types of 120,000 floats costs 30 ns a float, ten times ormsgpack's write of
    them; msgspec's strict conversion to plain values tests a list's items where they are, in
    6 ns each (:func:`_without_plain_lists`). Here the level below is gathered first and lists
    are looked for only where a level of few values has 256 or more under it: looking costs
    about as much as a small level's whole step, so a small state's levels take none."""
    below = gc.get_referents(*level)
    if len(below) < _PLAIN_RUN or len(level) > _FEW_CONTAINERS or list not in kinds:
        return below
    without = _without_plain_lists(level)
    return below if without is None else without


def _next_level_of_large(level: list[Any], kinds: set[type[Any]]) -> list[Any]:
    """:func:`_next_level` in a payload of 64 KiB or more, where a level's lists are looked for
    before the level below is gathered: gathering a long list's items only to set them aside
    costs 85 instructions an item (a sixth of a 1 MB floats round trip), and looking is a few
    hundred nanoseconds, nothing beside encoding such a payload."""
    if len(level) > _FEW_CONTAINERS or list not in kinds:
        return gc.get_referents(*level)
    without = _without_plain_lists(level)
    return gc.get_referents(*level) if without is None else without


def _without_plain_lists(level: list[Any]) -> list[Any] | None:
    """The values under ``level``'s containers but its lists of 256 or more plain values; None
    if it holds no such list.

    msgspec's strict conversion passes exact atoms other than ``bytes``, and subclasses of
    ``int`` and ``str`` and ``Decimal``, which the native walk hands to the hook: their
    extensions' contents check their own bins (:meth:`NativePacker.pack`). It refuses
    ``bytes``, ``bytearray`` and ``memoryview`` alike, and every container, at the first such
    item."""
    plain = {
        id(each)
        for each in level
        if type(each) is list and len(each) >= _PLAIN_RUN and _plain_values_only(each)
    }
    if not plain:
        return None
    return gc.get_referents(*[each for each in level if id(each) not in plain])


_PLAIN_RUN: Final = 256
"""The shortest list whose items are tested by one conversion: below it a set of their types is
as cheap."""
_FEW_CONTAINERS: Final = 64
"""The most values a level may have for its lists to be looked at one by one."""
_LARGE_PAYLOAD: Final = 1 << 16
"""The payload size from which a level's lists are looked for before the level below is gathered."""
_PLAIN_VALUES: Final = list[float | int | str | bool | None]


def _plain_values_only(values: list[Any]) -> bool:
    try:
        msgspec.convert(values, _PLAIN_VALUES, strict=True)
    except msgspec.ValidationError:
        return False
    return True


_CONTAINERS: Final[frozenset[type[Any]]] = frozenset({dict, list, tuple})
_WITHOUT_BIN: Final[frozenset[type[Any]]] = ATOMS | {datetime}
"""What the native walk writes with no bin from anything but ``bytes``: the atoms, and an exact
datetime (an extension of its text, in the hook). Without datetime here, any checkpoint holding
both a datetime and a bin-like byte anywhere (a blob of 1 MB holds all three markers) took the
exact walk: four times the native one on a 1 MB blob."""
_WALKED: Final = _WITHOUT_BIN | _CONTAINERS
"""What :func:`bin_only_from_bytes` looks at or through; anything else answers False."""


class NeedsExactPath(Exception):
    """The native walk cannot write this value faithfully; redo it with the exact walk."""


_SEGMENT_LEVELS: Final = 255
"""ormsgpack's own limit: one ``packb`` call nests at most this many arrays and maps."""
_REMEMBERED_LEVELS: Final = 3
"""Levels an extension the native walk remembers may hold under its place (a datetime with a
fixed offset: the extension, ``[text, [days, seconds, microseconds], fold]``); every segment's
bound allows for them."""
_EXTENSION_LEVELS: Final = 1 + _REMEMBERED_LEVELS
"""A segment's levels besides its own call's: the extension (or reference) it sits under, and
room for remembered extensions inside it."""
_SEGMENTS_BUDGET: Final = MAX_NESTING - _SEGMENT_LEVELS - _REMEMBERED_LEVELS
"""The deepest bound a segment may have: what is left of MAX_NESTING under a payload's own call
at its deepest."""


_DEPTH: Final = 0
"""In a thread's cell: the exact walk's depth of the extension whose contents are being packed
(0: none). Per thread: a codec serves many threads, and a walk, which never awaits, is never
interleaved with another in its own thread."""
_THREAD: Final = threading.local()


def _new_cell() -> list[int]:
    cell = _THREAD.nesting = [0]
    return cell


def _walk_cell() -> list[int]:
    try:
        cell: list[int] = _THREAD.nesting
    except AttributeError:
        cell = _new_cell()
    return cell


def _too_deep(value: Any) -> Unencodable:
    return Unencodable(
        value,
        f"it nests more than {MAX_NESTING} levels deep (lists, maps and typed values counted alike) "
        "or holds a reference cycle, which no load could be sure to read back",
    )


_REMEMBERED_OBJECTS: Final = 4096
_REMEMBERED_DATA_BYTES: Final = 96
"""Only small extensions are remembered by object: 4,096 of at most 96 bytes of data each."""


def _atoms_only(value: tuple[Any, ...]) -> bool:
    for item in value:  # noqa: SIM110 (a loop: all() with a generator costs more per item)
        if type(item) not in ATOMS:
            return False
    return True


class _LargeOutputs:
    """Primes the C allocator for ormsgpack's large outputs, once per new largest size.

    ormsgpack allocates a payload's buffer up to about 2.5 times its final size (it doubles as
    it goes) and shrinks it when done. Above glibc's mmap threshold (128 KiB until a large block
    is freed) each such buffer is a fresh mapping whose every page faults on first write:
    packing 1 MB of ``bytes`` took 440 µs in a process that had freed no larger block, 15 µs in
    one that had (msgspec's encoder, which sizes its buffer differently, 15 µs in both). glibc
    raises its threshold to the size of a freed mapping, so one zeroed block of four times the
    payload, allocated (calloc: its pages are never touched) and freed at once, lets every later
    buffer up to that size come from the heap and be reused. Under another allocator it is one
    short-lived allocation per new largest size. tests/test_codec_large_values.py counts the
    page faults.
    """

    __slots__ = ("primed",)

    def __init__(self) -> None:
        self.primed = 128 * 1024
        """Payload size up to which the allocator needs nothing more."""

    def after(self, size: int) -> None:
        """Called with each payload's size; primes when it is the largest yet (one compare)."""
        if size > self.primed:
            block = min(4 * size, _GLIBC_MMAP_THRESHOLD_MAX)
            bytes(block)  # calloc'd and freed at once: glibc's threshold rises to its size
            self.primed = block // 4 if block < _GLIBC_MMAP_THRESHOLD_MAX else _UNBOUNDED


_GLIBC_MMAP_THRESHOLD_MAX: Final = 32 * 1024 * 1024
"""glibc never raises its mmap threshold past this (64-bit): larger payloads stay mappings."""
_UNBOUNDED: Final = 1 << 62
_LARGE_OUTPUTS: Final = _LargeOutputs()
"""One per process, as the allocator is."""


STATE_IN_RECORD: Final = 2 + CHECKPOINT_FIELDS.index("state")
"""Where a checkpoint record (format version, class tag, then the fields) holds the state."""
SPLICED_MIN_BYTES: Final = 1 << 16
"""A ``bytes`` value at the top of a checkpoint's state this large or larger is joined into the
body by reference (:meth:`NativePacker.pack_payload_pieces`), not first copied into ormsgpack's
payload; msgpack writes it as bin32 (bin8 and bin16 hold at most 65,535 bytes)."""
_BIN32: Final = struct.Struct(">BI")
_BIN32_MARKER: Final = 0xC6
_BIN32_MAX: Final = 0xFFFFFFFF
_PLACEHOLDER: Final = "spliced:" + secrets.token_hex(12)
"""Stands in the state for a spliced value while the rest is packed: 32 characters of which 24
random per process, so that a state cannot hold it by chance or by design."""
_PLACEHOLDER_PACKED: Final = ormsgpack.packb(_PLACEHOLDER)
"""Its msgpack (str8: ``0xd9``, its length, its ASCII text). Only its first byte is 0xd9, so no
two occurrences of it in a payload overlap: it occurs exactly once per placeholder written
unless the rest of the payload holds it too, which pack_payload_pieces checks."""


def spliced_keys(state: Any) -> list[Any]:
    """The keys of the values :meth:`NativePacker.pack_payload_pieces` joins by reference: exact
    ``bytes`` of SPLICED_MIN_BYTES or more at the top of an exact dict (a subclass goes through
    the hook, as a segment of its own)."""
    if type(state) is not dict:
        return []
    return [
        key
        for key, item in state.items()
        if type(item) is bytes and SPLICED_MIN_BYTES <= len(item) <= _BIN32_MAX
    ]


def holds_spliced_values(record: list[Any]) -> bool:
    """Whether a checkpoint record's state holds a value pack_payload_pieces would join by reference."""
    return bool(spliced_keys(record[STATE_IN_RECORD]))


class NativePacker:
    """ormsgpack's native walk; our reducers only for the types it passes through.

    One per thread (CheckpointCodec keeps them): a walk keeps its count of nesting and its
    :attr:`tree` on its packer, and a walk, which never awaits, is never interleaved with another
    in its own thread."""

    __slots__ = ("_below", "_default", "_reducer_for", "_reducers", "tree")

    def __init__(self, reducers: dict[type[Any], Reducer], reducer_for: ReducerLookup) -> None:
        self._reducers = reducers
        self._reducer_for = reducer_for
        self.tree: TreeEncoding | None = None
        """The tree encode under way on this thread, if any: CheckpointCodec.encode_checkpoint_tree
        sets it for its walk and puts back what was there (an encode inside it, from a hook)."""
        self._below = 0
        """The deepest bound of the segments packed so far under the one being packed."""
        # The extension of a datetime, or of a tuple of atoms, by the object's id: a workflow's
        # state keeps the same objects from superstep to superstep, and the hook's work for them
        # was a fifth of an encode. Both are immutable all the way down (a tuple only when every
        # item is an exact atom), so one object always encodes alike; each entry holds its object,
        # so its id cannot be reused by another while the entry exists.
        remembered: dict[int, tuple[Any, Any]] = {}

        def remember(value: Any, ext: Any) -> Any:
            if len(remembered) >= _REMEMBERED_OBJECTS:
                remembered.clear()
            remembered[id(value)] = (value, ext)
            return ext

        def default(value: Any) -> Any:
            known = remembered.get(id(value))
            if known is not None and known[0] is value:
                return known[1]
            cls = type(value)
            # The two extensions checkpoints carry most, inline: what their reducers in values.py
            # write, without the reducer's and the packer's calls per value.
            if cls is tuple:
                data = self.pack(list(value))
                ext = ormsgpack.Ext(EXT_TUPLE, data)
                if len(data) <= _REMEMBERED_DATA_BYTES and _atoms_only(value):
                    remember(value, ext)
                return ext
            if cls is datetime:
                return remember(value, ormsgpack.Ext(EXT_DATETIME, datetime_data(value)))
            reducer = reducers.get(cls)
            if reducer is None:
                reducer = reducer_for(cls, value)
            return reducer(value, self)

        self._default = default

    # How deep a payload nests is known only to ormsgpack, which nests at most _SEGMENT_LEVELS
    # levels in one call. So each call under the payload's (a segment: an extension's contents,
    # or a nested record) is bounded by that or by its length in bytes (every level takes one),
    # plus the deepest bound of the segments packed inside it; one whose bound would take the
    # payload past MAX_NESTING, whatever the payload's own call nests, sends it to the exact walk,
    # which counts. The payload's own call keeps no count: a payload of extensions it remembers,
    # or of none, costs nothing more.

    def pack(self, value: Any) -> bytes:
        """An extension's contents (one segment)."""
        outer = self._below
        self._below = 0
        try:
            data: bytes = ormsgpack.packb(value, default=self._default, option=NATIVE_OPTIONS)
        except BaseException:
            self._below = outer
            raise
        size = len(data)
        bound = (size if size < _SEGMENT_LEVELS else _SEGMENT_LEVELS) + self._below + _EXTENSION_LEVELS
        self._below = bound if bound > outer else outer
        if bound > _SEGMENTS_BUDGET:
            raise NeedsExactPath
        # Each extension's contents answer for their own bins, so the payload's check may pass a
        # value the hook wrote (a subclass of int or str) without looking inside it.
        if (
            _BIN_MARKERS[0] in data or _BIN_MARKERS[1] in data or _BIN_MARKERS[2] in data
        ) and not bin_only_from_bytes(value, size):
            raise NeedsExactPath
        return data

    def pack_nested(self, value: Any) -> bytes:
        """A nested record's payload: a segment (it decodes under the reference its container
        holds), bounded and checked for bins as every segment is."""
        payload = self.pack(value)
        _LARGE_OUTPUTS.after(len(payload))
        return payload

    def pack_payload(self, value: Any, *, bin_checked: bool = False) -> bytes:
        """A whole payload; NeedsExactPath if the native walk may have lost a type on the way,
        or may nest deeper than MAX_NESTING. ``bin_checked``: the caller knows every bin in it
        comes from ``bytes``."""
        try:
            payload = ormsgpack.packb(value, default=self._default, option=NATIVE_OPTIONS)
        except (TypeError, ormsgpack.MsgpackEncodeError) as exc:
            raise NeedsExactPath from exc
        size = len(payload)
        if size > _LARGE_OUTPUTS.primed:  # the compare in line: a call for it on every encode
            _LARGE_OUTPUTS.after(size)
        if bin_checked:
            return payload
        if (
            _BIN_MARKERS[0] in payload or _BIN_MARKERS[1] in payload or _BIN_MARKERS[2] in payload
        ) and not bin_only_from_bytes(value, size):
            raise NeedsExactPath
        return payload

    def pack_payload_pieces(self, record: list[Any], *, bin_checked: bool = False) -> list[bytes] | None:
        """A checkpoint record's payload as pieces whose join is :meth:`pack_payload`'s, byte
        for byte, with each ``bytes`` value of at least SPLICED_MIN_BYTES at the top of its state
        a piece of its own, by reference; None when the state holds none (pack the payload then).

        A large value is otherwise copied into ormsgpack's payload, whose buffer it grows (and
        so reallocates) on the way. Here ormsgpack packs the record with a placeholder in the value's
        place, the payload is split at the placeholders, and each value's bin32 header and the
        value itself go between the parts: the frame's one join is the value's only copy, and its
        checksum reads the pieces in order (a streamed XXH3 is the one-shot's value)."""
        state = record[STATE_IN_RECORD]
        large = spliced_keys(state)
        if not large:
            return None
        spliced = state.copy()
        for key in large:
            spliced[key] = _PLACEHOLDER
        with_placeholders = record.copy()  # the caller's record, untouched, is the exact walk's
        with_placeholders[STATE_IN_RECORD] = spliced
        # The bin check reads the rest only: each spliced value is exact bytes.
        parts = self.pack_payload(with_placeholders, bin_checked=bin_checked).split(_PLACEHOLDER_PACKED)
        if len(parts) != len(large) + 1:
            return None  # the placeholder's bytes occur elsewhere too: no piece can be told apart
        pieces = [parts[0]]
        for key, part in zip(large, parts[1:], strict=True):
            value = state[key]
            pieces += (_BIN32.pack(_BIN32_MARKER, len(value)), value, part)
        _LARGE_OUTPUTS.after(sum(map(len, pieces)))  # the body joined next is the large buffer
        return pieces

    def ext(self, code: int, data: bytes) -> Any:
        return ormsgpack.Ext(code, data)


class ExactPacker:
    """The Python walk: every container visited, every value converted exactly as the format says.

    With ``boxing`` ints outside msgpack's 64-bit range travel as extensions (and so int keys as
    pairs); the codec uses it only after a plain walk overflowed. With ``tree`` it packs for that
    tree encode: one such packer per walk (the codec's shared ones, serving every thread, have none).
    """

    __slots__ = ("_atoms", "_encode", "_key_atoms", "_reducer_for", "_reducers", "tree")

    def __init__(
        self,
        reducers: dict[type[Any], Reducer],
        reducer_for: ReducerLookup,
        *,
        boxing: bool = False,
        tree: TreeEncoding | None = None,
    ) -> None:
        self.tree = tree
        self._encode = msgspec.msgpack.Encoder().encode
        self._reducers = {**reducers, int: reduce_int_boxed} if boxing else reducers
        self._reducer_for = reducer_for
        self._atoms = ATOMS - {int} if boxing else ATOMS
        self._key_atoms = frozenset({str}) if boxing else KEY_ATOMS

    def pack(self, value: Any) -> bytes:
        """An extension's contents, or a payload: one level under the extension being packed."""
        return self._encode(self.to_wire(value, _walk_cell()[_DEPTH] + 1))

    pack_payload = pack
    pack_nested = pack

    def ext(self, code: int, data: bytes) -> Any:
        return msgspec.msgpack.Ext(code, data)

    def to_wire(self, value: Any, depth: int = 1) -> Any:
        """``value`` as msgspec writes it, ``depth`` levels deep in the payload (refused deeper
        than MAX_NESTING)."""
        # Dicts and lists come back as they are unless something inside them needs converting;
        # only then is the container copied, so plain JSON-like state costs one type test per
        # item and no allocation.
        cls = type(value)
        atoms = self._atoms
        if cls is dict:
            if depth > MAX_NESTING:
                raise _too_deep(value)
            key_atoms = self._key_atoms
            copied: dict[Any, Any] | None = None
            for key, item in value.items():
                if type(key) not in key_atoms:
                    return self._pairs(value, depth)
                if type(item) not in atoms:
                    wire = self.to_wire(item, depth + 1)
                    if wire is not item:
                        if copied is None:
                            copied = value.copy()
                        copied[key] = wire
            return value if copied is None else copied
        if cls is list:
            if depth > MAX_NESTING:
                raise _too_deep(value)
            copied_list: list[Any] | None = None
            for index, item in enumerate(value):
                if type(item) not in atoms:
                    wire = self.to_wire(item, depth + 1)
                    if wire is not item:
                        if copied_list is None:
                            copied_list = value.copy()
                        copied_list[index] = wire
            return value if copied_list is None else copied_list
        if cls in atoms:
            return value
        reducer = self._reducers.get(cls)
        if reducer is None:
            reducer = self._reducer_for(cls, value)
        if depth > MAX_NESTING:
            raise _too_deep(value)
        cell = _walk_cell()
        outer = cell[_DEPTH]
        cell[_DEPTH] = depth
        try:
            return reducer(value, self)
        finally:
            cell[_DEPTH] = outer

    def _pairs(self, value: dict[Any, Any], depth: int) -> Any:
        # The extension, its array of pairs, each pair, then each key and item.
        to_wire = self.to_wire
        pairs = [[to_wire(key, depth + 3), to_wire(item, depth + 3)] for key, item in value.items()]
        return msgspec.msgpack.Ext(EXT_DICT_PAIRS, self._encode(pairs))
