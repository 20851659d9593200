"""fidelity: every value the codec supports comes back equal and of the same type.

Each clause saves one checkpoint and reads it back three ways (``load``, ``get_latest`` and
``list_checkpoints``), because a backend may decode each path differently. Values are compared
strictly: types must match at every depth (a tuple that comes back as a list is a failure, so is
an int key that comes back as a str), NaN matches NaN, and -0.0 keeps its sign.

Only types the built-in codec stores without registration are used, but for ``user_types``: the
kit cannot assume its target's codec knows any enum, dataclass or NamedTuple, so that clause adds
its own to the allow-list of the storage's ``codec`` (only the kit's types, for the run) and does
not apply to a storage that refuses them and exposes no codec.
"""

from __future__ import annotations

import datetime as dt
import enum
import math
import random
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple

from storages.contract import CHECKPOINT_FIELDS, Capability
from storages.engine import CheckpointStore
from storages.errors import UnserializableValueError

from ..clause import clause, ensure, ensure_equal, fail, not_applicable
from ..context import ClauseContext
from ._maf import is_not_found

LARGE_PAYLOAD_BYTES = 10 * 1024 * 1024
"""Size of the large-payload clause's checkpoint, roughly: half random bytes, half strings."""


# ---------------------------------------------------------------------- strict comparison


def first_difference(expected: Any, actual: Any, path: str = "checkpoint") -> str | None:
    """Where ``actual`` differs from ``expected`` in value or type, or None if it does not.

    Stricter than ``==``: types must match exactly at every depth (dict keys and set members
    included), floats compare sign and NaN, datetimes compare their zone, Decimals their digits,
    and checkpoint objects compare field by field.
    """
    if type(expected) is not type(actual):
        return (
            f"{path} should be {type(expected).__name__} {_show(expected)} "
            f"but came back as {type(actual).__name__} {_show(actual)}"
        )
    kind = type(expected)
    if kind is float:
        return _float_difference(expected, actual, path)
    if kind is dict:
        return _dict_difference(expected, actual, path)
    if kind in (list, tuple):
        return _sequence_difference(expected, actual, path)
    if kind in (set, frozenset):
        return _set_difference(expected, actual, path)
    if kind in (dt.datetime, dt.time):
        return _clock_difference(expected, actual, path)
    if kind is Decimal:
        # Decimal("1.10") == Decimal("1.1"), but the stored digits are part of the value.
        return None if str(expected) == str(actual) else f"{path} should be {expected!r}, got {actual!r}"
    if _is_checkpoint(expected):
        for name in CHECKPOINT_FIELDS:
            problem = first_difference(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
            if problem is not None:
                return problem
        return None
    if expected != actual:
        return f"{path} should be {_show(expected)}, got {_show(actual)}"
    return None


def _float_difference(expected: float, actual: float, path: str) -> str | None:
    if math.isnan(expected):
        return None if math.isnan(actual) else f"{path} should be nan, got {actual!r}"
    if expected != actual or math.copysign(1.0, expected) != math.copysign(1.0, actual):
        return f"{path} should be {expected!r}, got {actual!r}"
    return None


def _dict_difference(expected: dict[Any, Any], actual: dict[Any, Any], path: str) -> str | None:
    # Maps each key to the stored key object equal to it, to compare the key types too.
    actual_keys = {key: key for key in actual}
    for key, value in expected.items():
        if key not in actual_keys:
            return f"{path} lost key {key!r}; its keys came back as {_show(list(actual))}"
        problem = first_difference(key, actual_keys[key], f"{path} key {key!r}")
        if problem is None:
            problem = first_difference(value, actual[actual_keys[key]], f"{path}[{key!r}]")
        if problem is not None:
            return problem
    if len(actual) != len(expected):
        extra = [key for key in actual if key not in expected]
        return f"{path} came back with extra keys {_show(extra)}"
    return None


def _sequence_difference(expected: Any, actual: Any, path: str) -> str | None:
    if len(expected) != len(actual):
        return f"{path} should have {len(expected)} items, came back with {len(actual)}"
    for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
        problem = first_difference(want, got, f"{path}[{index}]")
        if problem is not None:
            return problem
    return None


def _set_difference(expected: Any, actual: Any, path: str) -> str | None:
    actual_members = {member: member for member in actual}
    for member in expected:
        if member not in actual_members:
            return f"{path} lost member {member!r}; came back as {_show(actual)}"
        problem = first_difference(member, actual_members[member], f"{path} member {member!r}")
        if problem is not None:
            return problem
    if len(actual) != len(expected):
        return f"{path} came back with extra members: {_show(actual)}"
    return None


def _clock_difference(expected: Any, actual: Any, path: str) -> str | None:
    # Aware datetimes in different zones compare equal at the same instant; the zone is data too.
    if expected != actual or _zone(expected) != _zone(actual) or expected.fold != actual.fold:
        return f"{path} should be {expected!r}, got {actual!r}"
    return None


def _zone(value: Any) -> tuple[Any, ...]:
    tzinfo = value.tzinfo
    if tzinfo is None:
        return ()
    return (type(tzinfo), getattr(tzinfo, "key", None), value.utcoffset())


def _is_checkpoint(value: Any) -> bool:
    return all(hasattr(value, name) for name in CHECKPOINT_FIELDS)


def _show(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------- round trips


async def read_back(ctx: ClauseContext, checkpoint: Any) -> list[tuple[str, Any]]:
    """The saved ``checkpoint`` as load, get_latest and list_checkpoints return it."""
    storage = ctx.storage
    checkpoint_id = checkpoint.checkpoint_id
    workflow_name = checkpoint.workflow_name
    copies: list[tuple[str, Any]] = [(f"load({checkpoint_id!r})", await storage.load(checkpoint_id))]
    latest = await storage.get_latest(workflow_name=workflow_name)
    ensure(
        latest is not None,
        f"get_latest({workflow_name!r}) returned None right after saving {checkpoint_id!r}",
    )
    ensure_equal(latest.checkpoint_id, checkpoint_id, f"id of get_latest({workflow_name!r})")
    copies.append((f"get_latest({workflow_name!r})", latest))
    listed = await storage.list_checkpoints(workflow_name=workflow_name)
    matching = [item for item in listed if item.checkpoint_id == checkpoint_id]
    ensure(
        len(matching) == 1,
        f"list_checkpoints({workflow_name!r}) holds checkpoint {checkpoint_id!r} "
        f"{len(matching)} times, not once",
    )
    copies.append((f"list_checkpoints({workflow_name!r})", matching[0]))
    return copies


async def assert_round_trip(ctx: ClauseContext, checkpoint: Any) -> None:
    """Save ``checkpoint``; every read of it must be strictly equal to it."""
    await ctx.storage.save(checkpoint)
    for source, copy in await read_back(ctx, checkpoint):
        problem = first_difference(checkpoint, copy)
        if problem is not None:
            fail(f"{source} of checkpoint {checkpoint.checkpoint_id!r}: {problem}")


async def _round_trip_state(ctx: ClauseContext, label: str, state: dict[str, Any]) -> None:
    await assert_round_trip(ctx, ctx.checkpoint(ctx.workflow_name(label), state=state))


# ---------------------------------------------------------------------- clauses


@clause(
    "fidelity.json_natives",
    "str (any unicode), int, bool, None, lists and str-keyed dicts round trip exactly.",
)
async def json_natives(ctx: ClauseContext) -> None:
    await _round_trip_state(
        ctx,
        "json",
        {
            "ascii": "plain text",
            "unicode": "naïve café 日本語 Ελληνικά עברית 🙂👩‍👩‍👧 e\u0301 \u200b\ufeff",
            "escapes": 'quote " backslash \\ slash / nul \x00 newline \n tab \t',
            "empty_string": "",
            "ints": [0, 1, -1, 2**31, -(2**31), 2**63 - 1, -(2**63), 2**64 - 1],
            "bools": [True, False],
            "none": None,
            "empty_list": [],
            "empty_dict": {},
            "nested": {"a": [1, [2, [3, {"b": [None, True, "x"]}]]], "": "empty key", "🔑": "emoji key"},
            "mixed_list": [1, "1", 1.5, None, False, [], {}],
        },
    )


@clause("fidelity.special_floats", "inf, -inf, NaN, -0.0, subnormals and float extremes round trip exactly.")
async def special_floats(ctx: ClauseContext) -> None:
    await _round_trip_state(
        ctx,
        "floats",
        {
            "values": [0.0, -0.0, 0.1, -2.5, math.inf, -math.inf, math.nan, 5e-324, 2.2250738585072014e-308],
            "max": 1.7976931348623157e308,
            "negative_zero": -0.0,
            "nan": math.nan,
            "in_tuple": (math.inf, -0.0),
        },
    )


@clause("fidelity.big_ints", "Integers beyond 64 bits, positive and negative, round trip exactly.")
async def big_ints(ctx: ClauseContext) -> None:
    await _round_trip_state(
        ctx,
        "bigints",
        {
            "just_over_u64": 2**64,
            "just_under_i64": -(2**63) - 1,
            "googol": 10**100,
            "negative_googol": -(10**100),
            "in_list": [1, 2**200, -(2**200), 3],
            "in_tuple": (2**65, 0),
        },
    )


@clause(
    "fidelity.bytes", "bytes and bytearray (empty, binary, every byte value) round trip with their types."
)
async def bytes_values(ctx: ClauseContext) -> None:
    await _round_trip_state(
        ctx,
        "bytes",
        {
            "empty": b"",
            "every_byte": bytes(range(256)),
            "utf8_lookalike": "é🙂".encode(),
            "invalid_utf8": b"\xff\xfe\x00\xc3(",
            "bytearray": bytearray(b"\x00mutable\xff"),
            "in_list": [b"a", bytearray(b"b"), b""],
        },
    )


@clause(
    "fidelity.collections",
    "tuples, sets and frozensets (empty, nested, mixed) come back as the same types, not lists.",
)
async def collections(ctx: ClauseContext) -> None:
    await _round_trip_state(
        ctx,
        "collections",
        {
            "tuple": (1, "two", 3.0),
            "empty_tuple": (),
            "one_tuple": ("solo",),
            "nested_tuples": ((1, (2, (3, ()))), [4, (5,)]),
            "tuple_of_lists": ([1, 2], [], {"k": (1,)}),
            "set": {1, 2, 3},
            "empty_set": set(),
            "frozenset": frozenset({"a", "b"}),
            "set_of_tuples": {(1, 2), (3, (4, 5))},
            "set_of_frozensets": {frozenset({1}), frozenset({2, 3}), frozenset()},
            "frozenset_of_mixed": frozenset({1, "1", (1,), b"1"}),
            "list_of_sets": [set(), {None}, frozenset({0})],
        },
    )


@clause(
    "fidelity.datetimes",
    "datetime (naive, UTC, fixed offset, IANA zone), date, time and timedelta round trip with their zones.",
)
async def datetimes(ctx: ClauseContext) -> None:
    state: dict[str, Any] = {
        "naive": dt.datetime(2024, 2, 29, 23, 59, 59, 999_999),
        "utc": dt.datetime(2024, 2, 29, 12, 0, tzinfo=dt.UTC),
        "plus_0530": dt.datetime(2024, 1, 1, 9, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
        "minus_0345": dt.datetime(
            1999, 12, 31, 23, 0, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=-3, minutes=-45))
        ),
        "min": dt.datetime.min,
        "max": dt.datetime.max,
        "date": dt.date(2000, 1, 1),
        "time": dt.time(23, 59, 59, 123_456),
        "aware_time": dt.time(8, 15, tzinfo=dt.timezone(dt.timedelta(hours=-8))),
        "midnight": dt.time(0, 0),
        "timedelta": dt.timedelta(days=-3, seconds=7, microseconds=11),
        "zero_delta": dt.timedelta(0),
        "big_delta": dt.timedelta(days=999_999_999),
        "in_tuple": (dt.date(1970, 1, 1), dt.timedelta(microseconds=1)),
    }
    zone = _iana_zone("Europe/Paris")
    # Without a zone database (no tzdata), no process can hold such a value, so there is nothing
    # to store; every other value is still checked.
    if zone is not None:
        state["iana"] = dt.datetime(2024, 7, 14, 10, 0, tzinfo=zone)
        # 02:30 on 2023-10-29 happens twice in Paris; fold=1 is the second one.
        state["iana_fold"] = dt.datetime(2023, 10, 29, 2, 30, fold=1, tzinfo=zone)
    await _round_trip_state(ctx, "datetimes", state)


def _iana_zone(key: str) -> dt.tzinfo | None:
    try:
        from zoneinfo import ZoneInfo
    except ImportError:  # pragma: no cover - Python 3.8 only
        return None
    try:
        return ZoneInfo(key)
    except Exception:
        return None


@clause(
    "fidelity.uuid_and_decimal",
    "UUID and Decimal (digits, exponent, sign, infinity, NaN) round trip exactly.",
)
async def uuid_and_decimal(ctx: ClauseContext) -> None:
    await _round_trip_state(
        ctx,
        "uuid-decimal",
        {
            "uuid4": uuid.UUID("9f3c1b5e-8d2a-4e6f-b1c7-0a9e8d7c6b5a"),
            "nil_uuid": uuid.UUID(int=0),
            "max_uuid": uuid.UUID(int=2**128 - 1),
            "decimal": Decimal("3.14159265358979323846264338327950288419716939937510"),
            "trailing_zero": Decimal("1.10"),
            "negative_zero": Decimal("-0"),
            "exponent": Decimal("1E+3"),
            "tiny": Decimal("-1.5E-400"),
            "infinity": Decimal("-Infinity"),
            "nan": Decimal("NaN"),
            "in_set": frozenset({uuid.UUID(int=7), Decimal("2.50")}),
        },
    )


@clause(
    "fidelity.non_string_keys",
    "Dicts keyed by int, bool, float, None, tuple, frozenset, bytes or big int keep their key types.",
)
async def non_string_keys(ctx: ClauseContext) -> None:
    await _round_trip_state(
        ctx,
        "keys",
        {
            "int_keys": {1: "one", 2: "two", -7: "minus seven"},
            "int_and_str": {1: "int", "1": "str"},
            "bool_key": {True: "yes", "True": "str"},
            "float_key": {1.5: "one and a half"},
            "none_key": {None: "nothing"},
            "tuple_keys": {(1, 2): "pair", ("a", (3,)): "nested"},
            "frozenset_key": {frozenset({1, 2}): "set"},
            "bytes_key": {b"\x00": "byte"},
            "big_int_key": {2**70: "big", -(2**70): "negative big"},
            "nested": [{0: {1: {2: "deep"}}}],
        },
    )


@clause(
    "fidelity.envelope_lookalikes",
    "A user dict shaped like a codec envelope ({'__pickled__': ..., '__type__': ...}) stays a plain dict.",
)
async def envelope_lookalikes(ctx: ClauseContext) -> None:
    await _round_trip_state(
        ctx,
        "envelopes",
        {
            "maf_pickle": {"__pickled__": "x", "__type__": "y"},
            "maf_pickle_base64": {"__pickled__": "gASVBQAAAAAAAACMAXiULg==", "__type__": "builtins:str"},
            "ext": {"__ext__": 1, "data": "AAE="},
            "typed": {"__type__": "datetime.datetime", "value": "2024-01-01T00:00:00"},
            "tuple_marker": {"__tuple__": [1, 2]},
            "set_marker": {"__set__": [1], "$type": "set"},
            "model_marker": {"__af_model__": "module:Class", "value": {}},
            "dataclass_marker": {"__af_dataclass__": "module:Class", "value": {}},
            "checkpoint_shaped": {name: None for name in CHECKPOINT_FIELDS},
            "in_list": [{"__pickled__": "x", "__type__": "y"}],
        },
    )


@dataclass
class KitRecord:
    """A user dataclass, defined at module level."""

    name: str
    items: tuple[int, ...]


class KitColour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class KitPoint(NamedTuple):
    x: int
    y: int


def _class_defined_in_a_function() -> type[Any]:
    """A dataclass defined inside a function, as applications do (pickle cannot name it; the
    codec stores it by the class itself once it is allowed)."""

    @dataclass
    class LocalRecord:
        label: str
        point: KitPoint

    return LocalRecord


@clause(
    "fidelity.user_types",
    "A dataclass, an enum member and a NamedTuple, one class defined inside a function, round trip with "
    "their types once allowed on the storage's codec; a storage that refuses them and has no codec does not "
    "apply.",
)
async def user_types(ctx: ClauseContext) -> None:
    local = _class_defined_in_a_function()
    allow = getattr(getattr(ctx.storage, "codec", None), "allow", None)
    if callable(allow):
        allow(types=[KitRecord, KitColour, KitPoint, local])
    checkpoint = ctx.checkpoint(
        ctx.workflow_name("user-types"),
        state={
            "record": KitRecord("kit", (1, 2)),
            "colour": KitColour.BLUE,
            "point": KitPoint(3, 4),
            "local": local("defined in a function", KitPoint(5, 6)),
            "in_a_list": [KitColour.RED, KitPoint(0, 0), KitRecord("", ())],
        },
    )
    try:
        await ctx.storage.save(checkpoint)
    except Exception as exc:
        if not callable(allow):
            not_applicable(
                f"the storage refused the kit's types ({type(exc).__name__}) and has no codec to allow them"
            )
        fail(f"save() of user types allowed on the storage's codec raised {type(exc).__name__}: {exc}")
    for source, copy in await read_back(ctx, checkpoint):
        problem = first_difference(checkpoint, copy)
        if problem is not None:
            fail(f"{source} of checkpoint {checkpoint.checkpoint_id!r}: {problem}")


@clause(
    "fidelity.nested_checkpoints",
    "Checkpoints nested three deep in state come back as checkpoints of the same class with equal fields.",
)
async def nested_checkpoints(ctx: ClauseContext) -> None:
    inner: Any = None
    for depth in (3, 2, 1):
        state: dict[str, Any] = {"depth": depth, "marker": (depth, f"level-{depth}")}
        if inner is not None:
            # Where MAF puts a sub-workflow's checkpoint: state["_executor_state"][<executor id>].
            state["_executor_state"] = {f"sub-{depth}": {"sub_workflow_checkpoint": inner}}
        inner = ctx.checkpoint(
            ctx.workflow_name(f"nested-{depth}"),
            graph_signature_hash=f"sig-level-{depth}-✓",
            state=state,
            messages={f"executor-{depth}": [{"text": f"hello from {depth}"}]},
            metadata={"depth": depth},
            iteration_count=depth,
        )
    parent = ctx.checkpoint(
        ctx.workflow_name("nested-parent"),
        state={"_executor_state": {"sub-0": {"sub_workflow_checkpoint": inner}}, "also_in_list": [inner]},
    )
    await assert_round_trip(ctx, parent)


@clause(
    "fidelity.maf_fields",
    "MAF's fields (messages, pending events, metadata, iteration_count, version, previous id...) round trip.",
)
async def maf_fields(ctx: ClauseContext) -> None:
    checkpoint = ctx.checkpoint(
        ctx.workflow_name("fields"),
        previous_checkpoint_id=f"parent-of-{ctx.workflow_name('x')}",
        timestamp="2024-02-29T23:59:59.999999+00:00",
        messages={
            "executor-a": [{"source_id": "a", "target_id": "b", "data": {"text": "hi", "n": (1, 2)}}],
            "executor-b": [],
            "executor-é🙂": [{"data": b"\x00\x01"}, {"data": dt.date(2024, 1, 1)}],
        },
        state={"counter": 3},
        pending_request_info_events={
            "request-1": {
                "request_id": "request-1",
                "data": {"question": "continue?", "options": ("y", "n")},
            },
        },
        iteration_count=2**40,
        metadata={"superstep": 7, "tags": frozenset({"a", "b"}), "started": dt.datetime(2024, 1, 1, 0, 0)},
        version="2.5-custom",
    )
    await assert_round_trip(ctx, checkpoint)


ODD_SIGNATURE = "sha256:ÄÖ/\\..*?[]{}'\"%20%;--  \u00a0日本🙂" + "0123456789abcdef" * 12 + " "
"""A graph signature with every character class a backend might mangle, and a trailing space."""


@clause(
    "fidelity.graph_signature",
    "graph_signature_hash comes back character for character, odd characters included, and filters by it.",
)
async def graph_signature(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("signature")
    checkpoint = ctx.checkpoint(workflow_name, graph_signature_hash=ODD_SIGNATURE)
    await assert_round_trip(ctx, checkpoint)
    if ctx.has(Capability.SIGNATURE_FILTER):
        # Signatures used as keys or query parameters are where odd characters get mangled.
        ids = await ctx.storage.list_checkpoint_ids(
            workflow_name=workflow_name, graph_signature_hash=ODD_SIGNATURE
        )
        ensure_equal(ids, [checkpoint.checkpoint_id], "list_checkpoint_ids filtered by the odd signature")
        latest = await ctx.storage.get_latest(workflow_name=workflow_name, graph_signature_hash=ODD_SIGNATURE)
        ensure(
            latest is not None and latest.checkpoint_id == checkpoint.checkpoint_id,
            f"get_latest filtered by the odd signature returned {latest!r}, not {checkpoint.checkpoint_id!r}",
        )


@clause(
    "fidelity.large_payload",
    "A checkpoint of about 10 MB (random bytes, 50,000 strings, one 1 MiB string) round trips exactly.",
    timeout=120.0,
)
async def large_payload(ctx: ClauseContext) -> None:
    rng = random.Random(20240229)  # noqa: S311 - reproducible data
    half = LARGE_PAYLOAD_BYTES // 2
    line_count = 50_000
    filler = "x" * (half // line_count - 16)
    state = {
        # Random bytes do not compress, so a compressing backend still moves the full size.
        "blob": rng.randbytes(half),
        "lines": [f"line {index:08d} {filler}" for index in range(line_count)],
        # One value far over the 64 KiB a text column or a value slot is often capped at: a store
        # that truncates values one by one keeps a body that still decodes.
        "text": "".join(rng.choices("abcdefgh\u00e9\u4e2d", k=1024 * 1024)),
    }
    await _round_trip_state(ctx, "large", state)


@clause(
    "fidelity.unencodable_rejected",
    "save() of an unencodable value raises (UnserializableValueError naming its path) and stores nothing.",
)
async def unencodable_rejected(ctx: ClauseContext) -> None:
    workflow_name = ctx.workflow_name("unencodable")
    checkpoint = ctx.checkpoint(workflow_name, state={"fine": 1, "nested": {"inner": [1, object()]}})
    checkpoint_id = checkpoint.checkpoint_id
    try:
        await ctx.storage.save(checkpoint)
    except UnserializableValueError as exc:
        where = f"{exc.path} {exc}"
        ensure(
            "nested" in where and "inner" in where,
            f"UnserializableValueError for checkpoint {checkpoint_id!r} does not name the path "
            f"state['nested']['inner'][1]: {exc}",
        )
    except Exception as exc:
        # Our engine's codec names the value's path; a storage of another design may raise anything.
        if isinstance(ctx.storage, CheckpointStore):
            fail(
                f"save() of checkpoint {checkpoint_id!r} raised {type(exc).__name__}: {exc}, "
                "not UnserializableValueError"
            )
    else:
        fail(
            f"save() accepted checkpoint {checkpoint_id!r} although "
            "state['nested']['inner'][1] is an object()"
        )
    ids = await ctx.storage.list_checkpoint_ids(workflow_name=workflow_name)
    ensure_equal(ids, [], f"list_checkpoint_ids({workflow_name!r}) after the refused save")
    latest = await ctx.storage.get_latest(workflow_name=workflow_name)
    ensure(latest is None, f"get_latest({workflow_name!r}) returned {latest!r} after the refused save")
    try:
        loaded = await ctx.storage.load(checkpoint_id)
    except Exception as exc:
        if is_not_found(exc):
            return
        fail(f"load({checkpoint_id!r}) after the refused save raised {type(exc).__name__}: {exc}")
    fail(f"load({checkpoint_id!r}) returned {_show(loaded)} although its save was refused")
