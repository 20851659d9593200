"""What "the same value" means to the codec: two values are the same when they would be stored
alike, but for what no body can keep (storages/engine/resaves.py decides re-saves by it)."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from .packing import ATOMS, ExactPacker
from .values import (
    EXT_DICT_PAIRS,
    EXT_FROZENSET,
    EXT_SET,
    EXT_TUPLE,
    INT64_MIN,
    UINT64_MAX,
    reduce_int_boxed,
)

_ONE_NAN: Final = float("nan")
_KEY_ORDER: Final = {str: 0, int: 1}


class CanonicalPacker(ExactPacker):
    """The exact walk in one order, for telling whether two values are the same value to the
    codec: they are when this packs them to the same bytes (storages/engine/resaves.py).

    What the codec keeps apart stays apart (bool, int and float; tuple and list; set and
    frozenset; -0.0 and 0.0; a datetime's offset; a Decimal's digits; a dict key's type; an
    object's class and state), and only what no body can keep is ignored: the order of set
    members and dict entries (sorted) and a NaN's bits (every NaN is one value, equal to itself).
    It compares values already read, so it bounds no depth, and it walks containers in one call
    per level (the exact walk takes more for a tuple or a set).
    """

    __slots__ = ()

    def to_wire(self, value: Any, depth: int = 1) -> Any:
        cls = type(value)
        # Loops in line, not comprehensions or helpers: each would be one more call a level.
        if cls is dict:
            if _plain_keys(value):
                entries: dict[Any, Any] = {}
                for key, item in sorted(value.items(), key=_map_order):
                    entries[key] = self.to_wire(item, depth + 1)
                return entries
            return self._pairs(value, depth)
        if cls is list or cls is tuple:
            items = []
            for item in value:
                items.append(self.to_wire(item, depth + 1))
            return items if cls is list else msgspec.msgpack.Ext(EXT_TUPLE, self._encode(items))
        if cls is set or cls is frozenset:
            encode, to_wire = self._encode, self.to_wire
            members = sorted(encode(to_wire(member, depth + 2)) for member in value)
            code = EXT_SET if cls is set else EXT_FROZENSET
            return msgspec.msgpack.Ext(code, encode([msgspec.Raw(member) for member in members]))
        if cls is float:
            return value if value == value else _ONE_NAN
        if cls is int:
            return value if INT64_MIN <= value <= UINT64_MAX else reduce_int_boxed(value, self)
        if cls in ATOMS:
            return value
        reducer = self._reducers.get(cls)
        if reducer is None:
            reducer = self._reducer_for(cls, value)
        return reducer(value, self)

    def _pairs(self, value: dict[Any, Any], depth: int) -> Any:
        """A dict with keys other than str and 64-bit ints: its pairs, sorted by their bytes."""
        encode, to_wire = self._encode, self.to_wire
        pairs = sorted(
            (encode(to_wire(key, depth + 3)), encode(to_wire(item, depth + 3))) for key, item in value.items()
        )
        raw = [[msgspec.Raw(key), msgspec.Raw(item)] for key, item in pairs]
        return msgspec.msgpack.Ext(EXT_DICT_PAIRS, encode(raw))


def _plain_keys(value: dict[Any, Any]) -> bool:
    """Every key a str or an int msgpack holds: the map keeps them (in key order, str first)."""
    for key in value:
        kind = _KEY_ORDER.get(type(key))
        if kind is None or (kind and not INT64_MIN <= key <= UINT64_MAX):
            return False
    return True


def _map_order(entry: tuple[Any, Any]) -> tuple[int, Any]:
    key = entry[0]
    return (_KEY_ORDER[type(key)], key)
