"""Extension codes and the built-in value types that travel as extensions.

Every non-JSON type travels as a msgpack extension whose code names the type, so a user dict can
never be mistaken for an envelope. A *reducer* turns one value into its extension through a
:class:`Packer`, the part that packs the extension's contents: the same reducers serve the native
fast path and the exact walk (storages/codec/packing.py), so both write the same bytes.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final, Protocol

import msgspec

# Extension codes. Stable: they are part of the stored format.
EXT_TUPLE: Final = 1
EXT_SET: Final = 2
EXT_FROZENSET: Final = 3
EXT_DATETIME: Final = 4
EXT_DATE: Final = 5
EXT_TIME: Final = 6
EXT_TIMEDELTA: Final = 7
EXT_UUID: Final = 8
EXT_DECIMAL: Final = 9
EXT_BIGINT: Final = 10
EXT_BYTEARRAY: Final = 11
EXT_DICT_PAIRS: Final = 12
EXT_ENUM: Final = 13
EXT_DATACLASS: Final = 14
EXT_PYDANTIC: Final = 15
EXT_CUSTOM: Final = 16
EXT_CHECKPOINT: Final = 17
EXT_NESTED_REF: Final = 18
EXT_NAMEDTUPLE: Final = 19

INT64_MIN: Final = -(2**63)
UINT64_MAX: Final = 2**64 - 1


class Nesting(Protocol):
    """The bodies one tree encode is collecting (vocabulary.TreeEncoding): the walk that packs
    for it makes each checkpoint embedded in the value a body of its own."""

    def nest(self, checkpoint: Any, plain: list[Any], packer: Packer) -> Any:
        """The reference an embedded checkpoint (``plain``: its record) leaves in its container,
        its own body collected."""
        ...

    def embedded(self) -> dict[str, Any]:
        """The checkpoints collected so far as bodies of their own, by id."""
        ...


class Packer(Protocol):
    """Packs an extension's contents and builds the extension object its encoder takes."""

    @property
    def tree(self) -> Nesting | None:
        """The tree encode this walk packs for (None: embedded checkpoints go inline). On the
        packer, not in ambient state, so a walk's reducers see only the tree of their own walk."""
        ...

    def pack(self, value: Any) -> bytes: ...

    def pack_nested(self, value: Any) -> bytes:
        """A nested record's payload (a body of its own): the native packer checks it as a payload."""
        ...

    def ext(self, code: int, data: bytes) -> Any: ...


Reducer = Callable[[Any, Packer], Any]
"""One value -> its extension, packed by the given packer."""


def _sequence(code: int) -> Reducer:
    return lambda value, packer: packer.ext(code, packer.pack(list(value)))


_UTC: Final = dt.UTC


def _zone_key(tzinfo: dt.tzinfo | None) -> str | None:
    key = getattr(tzinfo, "key", None)
    return key if isinstance(key, str) and type(tzinfo).__module__ == "zoneinfo" else None


def _clock_wire(value: dt.datetime | dt.time) -> Any:
    """ISO text, or ``[text, zone, fold]`` when ISO text alone would lose the zone or the fold.

    ``zone`` is a zoneinfo key, ``[days, seconds, microseconds]`` of a fixed offset, or None (the
    offset, if any, is in ``text``).
    """
    if value.tzinfo is _UTC and not value.fold:  # the common case, and what the rules below give
        return value.isoformat()
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


_DATETIME_DATA: dict[tuple[dt.datetime, Any, int], bytes] = {}
_DATETIME_CACHE_SIZE: Final = 4096


def datetime_data(value: dt.datetime) -> bytes:
    """A datetime's extension data, remembered: a workflow's state carries the same datetimes
    from superstep to superstep, and formatting them was a quarter of a memory save.

    The key holds the tzinfo and the fold besides the instant, because aware datetimes in
    different zones compare equal; only exact ``datetime`` values get here (subclasses are not
    the type the reducer is registered for).
    """
    try:
        key = (value, value.tzinfo, value.fold)
        data = _DATETIME_DATA.get(key)
    except TypeError:  # a tzinfo that cannot be hashed
        return _pack_plain(_clock_wire(value))
    if data is None:
        data = _pack_plain(_clock_wire(value))
        if len(_DATETIME_DATA) >= _DATETIME_CACHE_SIZE:
            _DATETIME_DATA.clear()
        _DATETIME_DATA[key] = data
    return data


def _pack_plain(value: Any) -> bytes:
    """Contents made only of str, int, list and None: packed directly, on either path."""
    return msgspec.msgpack.encode(value)


BUILTIN_REDUCERS: Final[dict[type[Any], Reducer]] = {
    tuple: _sequence(EXT_TUPLE),
    set: _sequence(EXT_SET),
    frozenset: _sequence(EXT_FROZENSET),
    dt.datetime: lambda value, packer: packer.ext(EXT_DATETIME, datetime_data(value)),
    dt.date: lambda value, packer: packer.ext(EXT_DATE, _pack_plain(value.isoformat())),
    dt.time: lambda value, packer: packer.ext(EXT_TIME, _pack_plain(_clock_wire(value))),
    dt.timedelta: lambda value, packer: packer.ext(
        EXT_TIMEDELTA, _pack_plain([value.days, value.seconds, value.microseconds])
    ),
    uuid.UUID: lambda value, packer: packer.ext(EXT_UUID, value.bytes),
    Decimal: lambda value, packer: packer.ext(EXT_DECIMAL, _pack_plain(str(value))),
    bytearray: lambda value, packer: packer.ext(EXT_BYTEARRAY, bytes(value)),
}
"""Reducers of the built-in types the codec carries beyond msgpack's own."""


def reduce_int_boxed(value: int, packer: Packer) -> Any:
    """An int outside msgpack's 64-bit range, as an extension (the exact walk's boxing mode)."""
    if INT64_MIN <= value <= UINT64_MAX:
        return value
    # Hex, not decimal: Python limits decimal int<->str conversion to 4300 digits, never hex.
    return packer.ext(EXT_BIGINT, _pack_plain(format(value, "x")))


def decode_datetime(wire: Any) -> dt.datetime:
    if isinstance(wire, str):
        return dt.datetime.fromisoformat(wire)
    text, zone, fold = wire
    value = dt.datetime.fromisoformat(text)
    return value.replace(tzinfo=value.tzinfo if zone is None else _zone_from_wire(zone), fold=fold)


def decode_time(wire: Any) -> dt.time:
    if isinstance(wire, str):
        return dt.time.fromisoformat(wire)
    text, zone, fold = wire
    value = dt.time.fromisoformat(text)
    return value.replace(tzinfo=value.tzinfo if zone is None else _zone_from_wire(zone), fold=fold)


def decode_timedelta(wire: Any) -> dt.timedelta:
    days, seconds, microseconds = wire
    return dt.timedelta(days=days, seconds=seconds, microseconds=microseconds)


def decode_int_boxed(wire: str) -> int:
    return int(wire, 16)


def decode_pairs(wire: Any) -> dict[Any, Any]:
    return {key: value for key, value in wire}


BUILTIN_DECODERS: Final[dict[int, Callable[[Any], Any]]] = {
    EXT_TUPLE: tuple,
    EXT_SET: set,
    EXT_FROZENSET: frozenset,
    EXT_DATETIME: decode_datetime,
    EXT_DATE: dt.date.fromisoformat,
    EXT_TIME: decode_time,
    EXT_TIMEDELTA: decode_timedelta,
    EXT_DECIMAL: Decimal,
    EXT_BIGINT: decode_int_boxed,
    EXT_DICT_PAIRS: decode_pairs,
}
"""Decoders of the built-in extensions whose data is msgpack (UUID and bytearray are raw)."""
