"""Values from the codec's whole built-in domain, and a comparison that sees every lost detail.

The generator draws what docs/contract.md says every storage keeps (JSON values, ``bytes`` and
``bytearray``, integers of any size, floats including ``-0.0``, ``nan`` and the infinities,
tuples, sets, dicts with non-string keys, naive and aware datetimes, dates, times, timedeltas,
UUIDs, decimals), so the values that a lossy storage changes (``-0.0`` to ``0.0``, an integer past
2**53 to a float, a ``bytearray`` to ``bytes``, an offset to UTC) are in every run, in every
field: state, messages, pending events and metadata.

:func:`difference` is stricter than ``==``: the type of every value must be the type saved
(``True`` is not ``1``, a tuple is not a list), a float keeps its sign and NaN-ness, a decimal its
exponent, a datetime its zone and fold; it returns where the first difference is.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import uuid
import zoneinfo
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

_PARIS = zoneinfo.ZoneInfo("Europe/Paris")
_KOLKATA = dt.timezone(dt.timedelta(hours=5, minutes=30))

SCALARS: tuple[Callable[[random.Random], Any], ...] = (
    lambda r: None,
    lambda r: r.random() < 0.5,
    lambda r: r.randint(-1000, 1000),
    lambda r: r.choice((2**53 + 1, -(2**53) - 1, 2**63, 2**64 + 7, -(2**70), 10**30)),
    lambda r: r.choice((-0.0, 0.0, math.nan, math.inf, -math.inf, 5e-324, 1.5, -2.25e300, 0.1)),
    lambda r: r.choice(("", "plain", "é", "e\u0301", "𝄞 clef", "tab\there", "line\nbreak", "\x00nul", " ")),
    lambda r: r.choice((b"", b"\x00\xff", bytes(range(7)))),
    lambda r: bytearray(r.choice((b"", b"\x01\x02", b"mutable"))),
    lambda r: r.choice(
        (
            dt.datetime(2024, 2, 29, 12, 30, 15, 123456),
            dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
            dt.datetime(2023, 6, 1, 8, 0, tzinfo=_KOLKATA),
            dt.datetime(2024, 10, 27, 2, 30, tzinfo=_PARIS, fold=1),
        )
    ),
    lambda r: r.choice(
        (dt.date(1999, 12, 31), dt.time(23, 59, 59, 1), dt.timedelta(days=-1, microseconds=5))
    ),
    lambda r: uuid.UUID(int=r.getrandbits(128)),
    lambda r: r.choice((Decimal("1.10"), Decimal("-0"), Decimal("1E+3"), Decimal("NaN"))),
)

# Envelope look-alikes and key kinds that JSON cannot keep: a storage must keep them as they are.
_KEYS: tuple[Any, ...] = ("k", "__pickled__", "__type__", "", "é", 7, -1, (1, "a"), "$ref")


def draw_value(rng: random.Random, depth: int = 2) -> Any:
    """One value of the codec's built-in domain, nested at most ``depth`` containers deep."""
    if depth <= 0 or rng.random() < 0.45:
        return rng.choice(SCALARS)(rng)
    kind = rng.randrange(5)
    size = rng.randrange(4)
    if kind == 0:
        return [draw_value(rng, depth - 1) for _ in range(size)]
    if kind == 1:
        return tuple(draw_value(rng, depth - 1) for _ in range(size))
    if kind == 2:
        return {rng.choice(_KEYS): draw_value(rng, depth - 1) for _ in range(size)}
    if kind == 3:
        # No NaN, bools or floats in sets: they would collide with ints or never equal themselves.
        members = [rng.choice(("a", "b", "é", 3, 2**60, (1, 2))) for _ in range(size)]
        return set(members) if rng.random() < 0.5 else frozenset(members)
    return {f"n{index}": draw_value(rng, depth - 1) for index in range(size)}


def draw_mapping(rng: random.Random, entries: int, depth: int = 2) -> dict[str, Any]:
    """A dict with string keys (a checkpoint field's shape) of ``entries`` drawn values."""
    return {f"{rng.choice('abcdefgh')}{index}": draw_value(rng, depth) for index in range(entries)}


def difference(
    expected: Any,
    actual: Any,
    path: str = "",
    *,
    checkpoint_fields: tuple[str, ...] = (),
    aliases: bool = True,
) -> str:
    """Where ``actual`` differs from ``expected`` (empty when it does not), strictly by type.

    ``checkpoint_fields`` names the fields to compare on objects of a checkpoint class; with
    ``aliases``, one checkpoint object embedded twice must come back as one object twice."""
    return _Comparison(checkpoint_fields, aliases).of(expected, actual, path or "value")


class _Comparison:
    def __init__(self, checkpoint_fields: tuple[str, ...], aliases: bool) -> None:
        self.fields = checkpoint_fields
        self.keep_aliases = aliases
        self.aliases: dict[int, Any] = {}

    def of(self, expected: Any, actual: Any, path: str) -> str:
        if type(expected) is not type(actual):
            wanted, got = type(expected).__name__, type(actual).__name__
            return f"{path}: expected a {wanted} {_show(expected)}, got a {got} {_show(actual)}"
        if isinstance(expected, float):
            same = (math.isnan(expected) and math.isnan(actual)) or (
                expected == actual and math.copysign(1.0, expected) == math.copysign(1.0, actual)
            )
            return "" if same else f"{path}: expected {expected!r}, got {actual!r}"
        if isinstance(expected, Decimal):
            return "" if str(expected) == str(actual) else f"{path}: expected {expected!r}, got {actual!r}"
        if isinstance(expected, (dt.datetime, dt.time)):
            same = (
                expected.replace(tzinfo=None) == actual.replace(tzinfo=None)
                and expected.tzinfo == actual.tzinfo
                and expected.fold == actual.fold
            )
            return "" if same else f"{path}: expected {expected!r}, got {actual!r}"
        if isinstance(expected, (list, tuple)):
            if len(expected) != len(actual):
                sizes = f"expected {len(expected)} items {_show(expected)}, got {len(actual)}"
                return f"{path}: {sizes} {_show(actual)}"
            for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
                found = self.of(want, got, f"{path}[{index}]")
                if found:
                    return found
            return ""
        if isinstance(expected, (set, frozenset)):
            members = {(type(item), item) for item in expected}
            returned = {(type(item), item) for item in actual}
            return "" if members == returned else f"{path}: expected {_show(expected)}, got {_show(actual)}"
        if isinstance(expected, Mapping):
            return self.mapping(expected, actual, path)
        if self.fields and all(hasattr(expected, name) for name in self.fields):
            return self.checkpoint(expected, actual, path)
        return "" if expected == actual else f"{path}: expected {_show(expected)}, got {_show(actual)}"

    def mapping(self, expected: Mapping[Any, Any], actual: Mapping[Any, Any], path: str) -> str:
        actual_keys = {(type(key), key): key for key in actual}
        for key, want in expected.items():
            if (type(key), key) not in actual_keys:
                return f"{path}: key {key!r} ({type(key).__name__}) is missing; keys are {list(actual)!r}"
            found = self.of(want, actual[actual_keys[type(key), key]], f"{path}[{key!r}]")
            if found:
                return found
        extra = [key for key in actual if (type(key), key) not in {(type(k), k) for k in expected}]
        return f"{path}: unexpected keys {extra!r}" if extra else ""

    def checkpoint(self, expected: Any, actual: Any, path: str) -> str:
        seen = self.aliases.get(id(expected))
        if seen is not None and self.keep_aliases:
            # One object embedded twice must come back as one object.
            return (
                ""
                if seen is actual
                else f"{path}: an embedded checkpoint saved twice (one object) came back as two objects"
            )
        self.aliases[id(expected)] = actual
        for name in self.fields:
            found = self.of(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
            if found:
                return found
        return ""


def _show(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def copy_value(value: Any, rebuild: Callable[[Any], Any] | None = None) -> Any:
    """A structural copy (new containers, same scalars); ``rebuild`` maps objects it recognises."""
    if rebuild is not None:
        replaced = rebuild(value)
        if replaced is not _KEEP:
            return replaced
    if isinstance(value, dict):
        return {key: copy_value(item, rebuild) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_value(item, rebuild) for item in value]
    if isinstance(value, tuple):
        return tuple(copy_value(item, rebuild) for item in value)
    if isinstance(value, bytearray):
        return bytearray(value)
    if isinstance(value, set):
        return set(value)
    return value


class _Keep:
    """What a ``rebuild`` callback returns for an object it leaves to :func:`copy_value`."""


_KEEP: Any = _Keep()
KEEP = _KEEP


def mutate_everywhere(value: Any) -> None:
    """Change every mutable container reachable from ``value`` in place (the isolation probe)."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            stack.extend(item.values())
            item["ck-mutated"] = True
        elif isinstance(item, list):
            stack.extend(item)
            item.append("ck-mutated")
        elif isinstance(item, bytearray):
            item.extend(b"!")
        elif isinstance(item, set):
            item.add("ck-mutated")
        elif isinstance(item, tuple):
            stack.extend(item)
        elif hasattr(item, "state") and hasattr(item, "checkpoint_id"):
            for name in ("messages", "state", "pending_request_info_events", "metadata"):
                stack.append(getattr(item, name))


__all__ = ["KEEP", "copy_value", "difference", "draw_mapping", "draw_value", "mutate_everywhere"]
