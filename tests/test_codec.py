"""The checkpoint codec: what it stores faithfully, what it refuses, and how it detects damage."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import enum
import importlib
import math
import os
import struct
import sys
import uuid
import zlib
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pydantic
import pytest
import xxhash
from agent_framework import WorkflowCheckpoint as MafWorkflowCheckpoint

from storages import (
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointStore,
    CheckpointTypeNotAllowedError,
    MissingDependencyError,
    UnserializableValueError,
    WorkflowCheckpoint,
)
from storages.codec import HEADER_SIZE, TRAILER_SIZE, CheckpointCodec

SameTypes = Callable[[Any, Any], bool]


# ---------------------------------------------------------------------------- registered types


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mood(str, enum.Enum):
    HAPPY = "happy"


class Permission(enum.Flag):
    READ = 1
    WRITE = 2


class Shape(enum.Enum):
    SQUARE = (4, "sides")


@dataclasses.dataclass
class Point:
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class FrozenPoint:
    x: int
    y: int


@dataclasses.dataclass(slots=True)
class SlottedBox:
    items: list[Any]
    label: str = "box"


@dataclasses.dataclass(frozen=True, slots=True)
class FrozenSlottedKey:
    parts: tuple[Any, ...]


@dataclasses.dataclass
class WithDerived:
    base: int
    derived: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.derived = self.base * 2


@dataclasses.dataclass(frozen=True)
class FrozenWithDerived:
    base: int
    derived: int = dataclasses.field(init=False, default=0)


@dataclasses.dataclass
class Outer:
    inner: Point
    keys: frozenset[FrozenSlottedKey]
    by_color: dict[Color, list[FrozenPoint]]
    big: int = 2**100


class Address(pydantic.BaseModel):
    city: str
    zip_code: str = pydantic.Field(alias="zipCode")


class Person(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)

    name: str
    born: dt.date
    address: Address
    tags: frozenset[str] = frozenset()


class Loose(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    x: int


class Money:
    """Neither enum, dataclass nor model: storable only through hooks."""

    def __init__(self, amount: Decimal, currency: str) -> None:
        self.amount = amount
        self.currency = currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.amount, self.currency) == (other.amount, other.currency)

    def __hash__(self) -> int:
        return hash((self.amount, self.currency))


REGISTERED: list[Any] = [
    Color,
    Level,
    Mood,
    Permission,
    Shape,
    Point,
    FrozenPoint,
    SlottedBox,
    FrozenSlottedKey,
    WithDerived,
    FrozenWithDerived,
    Outer,
    Address,
    Person,
    Loose,
]


def full_codec(**options: Any) -> CheckpointCodec:
    codec = CheckpointCodec(allowed_types=REGISTERED, **options)
    codec.register(Money, encode=lambda money: (money.amount, money.currency), decode=lambda s: Money(*s))
    return codec


def checkpoint(**fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="sig", **fields)


RoundTrip = Callable[[Any], Any]


@pytest.fixture(params=["value", "checkpoint"])
def roundtrip(request: pytest.FixtureRequest) -> RoundTrip:
    """Encode and decode a value on its own, or inside a checkpoint's state."""
    codec = full_codec()

    def as_value(value: Any) -> Any:
        return codec.decode_value(codec.encode_value(value))

    def in_checkpoint(value: Any) -> Any:
        body = codec.encode_checkpoint(checkpoint(state={"v": value}))
        return codec.decode_checkpoint(body, checkpoint_id="rt").state["v"]

    return as_value if request.param == "value" else in_checkpoint


def assert_round_trips(roundtrip: RoundTrip, same_types: SameTypes, value: Any) -> Any:
    decoded = roundtrip(value)
    assert same_types(decoded, value), f"{value!r} came back as {decoded!r}"
    return decoded


# ---------------------------------------------------------------------------- the comparison itself


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, True),
        (1, 1.0),
        ((1,), [1]),
        ({1: "a"}, {True: "a"}),
        ({1, 2}, frozenset({1, 2})),
        (0.0, -0.0),
        (Decimal("1.0"), Decimal("1.00")),
        (b"a", bytearray(b"a")),
        ({"k": (1, 2)}, {"k": [1, 2]}),
        (
            dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC),
            dt.datetime(2024, 1, 1, 13, tzinfo=dt.timezone(dt.timedelta(hours=1))),
        ),
        (dt.datetime(2024, 1, 1, fold=0), dt.datetime(2024, 1, 1, fold=1)),
        (dt.datetime(2024, 1, 1, tzinfo=ZoneInfo("UTC")), dt.datetime(2024, 1, 1, tzinfo=dt.UTC)),
    ],
)
def test_same_types_tells_apart_equal_values_of_different_types(
    same_types: SameTypes, a: object, b: object
) -> None:
    assert not same_types(a, b)
    assert not same_types(b, a)
    assert same_types(a, a)


# ---------------------------------------------------------------------------- round trips: built-ins


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        1.5,
        "",
        "plain",
        [],
        {},
        [1, "a", None, [2.5, {"k": [True]}]],
        {"nested": {"deeper": {"deepest": [1, 2, 3]}}},
    ],
)
def test_json_natives_round_trip(roundtrip: RoundTrip, same_types: SameTypes, value: Any) -> None:
    assert_round_trips(roundtrip, same_types, value)


@pytest.mark.parametrize(
    "text",
    ["héllo wörld", "日本語のテキスト", "emoji 🎉🧪", "zero\x00width\u200b", "rtl \u202e", "\U0010ffff"],
)
def test_unicode_round_trips_as_value_and_as_key(
    roundtrip: RoundTrip, same_types: SameTypes, text: str
) -> None:
    assert_round_trips(roundtrip, same_types, {text: [text]})


def test_float_specials_round_trip(roundtrip: RoundTrip, same_types: SameTypes) -> None:
    decoded = assert_round_trips(roundtrip, same_types, [-0.0, 0.0, math.inf, -math.inf, math.nan, 5e-324])
    assert math.copysign(1.0, decoded[0]) == -1.0
    assert math.isnan(decoded[4])


@pytest.mark.parametrize("value", [b"", b"\x00\xff" * 100, bytearray(), bytearray(b"\x01\x02")])
def test_bytes_and_bytearray_round_trip(roundtrip: RoundTrip, same_types: SameTypes, value: Any) -> None:
    assert_round_trips(roundtrip, same_types, value)


@pytest.mark.parametrize(
    "value",
    [
        (),
        (1,),
        (1, (2, (3, ())), [4, (5,)]),
        set(),
        {1, "a", (2, 3), None},
        frozenset(),
        frozenset({frozenset({1}), frozenset({frozenset({2})})}),
        {frozenset({1, 2}), (frozenset(), ())},
        [{1, 2}, frozenset({3}), (4, {5})],
    ],
)
def test_tuples_sets_and_frozensets_keep_their_types(
    roundtrip: RoundTrip, same_types: SameTypes, value: Any
) -> None:
    assert_round_trips(roundtrip, same_types, value)


@pytest.mark.parametrize(
    "value",
    [
        dt.datetime(2024, 5, 6, 7, 8, 9, 123456),
        dt.datetime.min,
        dt.datetime.max,
        dt.datetime(2024, 5, 6, 7, 8, tzinfo=dt.UTC),
        dt.datetime(2024, 5, 6, 7, 8, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
        dt.datetime(2024, 5, 6, tzinfo=dt.timezone(-dt.timedelta(hours=9, minutes=45))),
        dt.datetime(2024, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=1, seconds=7, microseconds=5))),
        dt.datetime(2024, 5, 6, tzinfo=dt.timezone(dt.timedelta(microseconds=1))),
        dt.datetime(2024, 5, 6, tzinfo=dt.timezone(-dt.timedelta(microseconds=999999)), fold=1),
        dt.datetime(2024, 7, 1, 12, tzinfo=ZoneInfo("Europe/Paris")),
        dt.datetime(2024, 1, 1, 12, tzinfo=ZoneInfo("America/New_York")),
        # 02:30 happens twice in Paris on 2021-10-31; fold picks the second (UTC+1, not UTC+2).
        dt.datetime(2021, 10, 31, 2, 30, tzinfo=ZoneInfo("Europe/Paris"), fold=0),
        dt.datetime(2021, 10, 31, 2, 30, tzinfo=ZoneInfo("Europe/Paris"), fold=1),
        dt.datetime(2021, 10, 31, 2, 30, fold=1),
        dt.datetime(2021, 10, 31, 2, 30, tzinfo=dt.UTC, fold=1),
    ],
)
def test_datetimes_keep_wall_clock_zone_and_fold(
    roundtrip: RoundTrip, same_types: SameTypes, value: dt.datetime
) -> None:
    decoded = assert_round_trips(roundtrip, same_types, value)
    assert decoded.utcoffset() == value.utcoffset()


def test_zoneinfo_fold_selects_the_later_offset_after_a_round_trip(roundtrip: RoundTrip) -> None:
    first = dt.datetime(2021, 10, 31, 2, 30, tzinfo=ZoneInfo("Europe/Paris"), fold=0)
    second = first.replace(fold=1)
    assert roundtrip(first).utcoffset() == dt.timedelta(hours=2)
    assert roundtrip(second).utcoffset() == dt.timedelta(hours=1)


@pytest.mark.parametrize(
    "value",
    [
        dt.date(2024, 2, 29),
        dt.date.min,
        dt.date.max,
        dt.time(0, 0),
        dt.time(23, 59, 59, 999999),
        dt.time(12, 30, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
        dt.time(12, 30, tzinfo=ZoneInfo("Asia/Tokyo")),
        dt.time(1, 30, fold=1),
        dt.time(1, 30, tzinfo=dt.timezone(dt.timedelta(microseconds=-3))),
        dt.timedelta(0),
        dt.timedelta(days=-1, seconds=5, microseconds=7),
        -dt.timedelta(microseconds=1),
        dt.timedelta.max,
        dt.timedelta.min,
    ],
)
def test_dates_times_and_timedeltas_round_trip(
    roundtrip: RoundTrip, same_types: SameTypes, value: Any
) -> None:
    assert_round_trips(roundtrip, same_types, value)


@pytest.mark.parametrize(
    "value", [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1), uuid.uuid4(), uuid.uuid5(uuid.NAMESPACE_DNS, "x")]
)
def test_uuids_round_trip(roundtrip: RoundTrip, same_types: SameTypes, value: uuid.UUID) -> None:
    assert_round_trips(roundtrip, same_types, {value: value})


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-0",
        "1.50",
        "1E+2",
        "-1.5E-300",
        "123456789012345678901234567890.123",
        "NaN",
        "-NaN",
        "sNaN",
        "Infinity",
        "-Infinity",
    ],
)
def test_decimals_keep_sign_digits_and_exponent(
    roundtrip: RoundTrip, same_types: SameTypes, text: str
) -> None:
    decoded = assert_round_trips(roundtrip, same_types, Decimal(text))
    assert str(decoded) == str(Decimal(text))


@pytest.mark.parametrize(
    "big",
    [2**64, -(2**63) - 1, 2**100, -(2**100), 10**5000, -(7**9000)],
    ids=["2**64", "-2**63-1", "2**100", "-2**100", "10**5000", "-7**9000"],
)
def test_ints_beyond_64_bits_round_trip_everywhere(
    roundtrip: RoundTrip, same_types: SameTypes, big: int
) -> None:
    value = {
        "value": big,
        big: "as key",
        "tuple": (big, 1),
        "set": {big, 1},
        "frozenset key": {frozenset({big}): big},
        "dataclass": Point(big, -big),
        "nested": [[{"deep": big}]],
        "small": 2**63 - 1,
    }
    assert_round_trips(roundtrip, same_types, value)


@pytest.mark.parametrize(
    "value",
    [
        {1: "int", "1": "str"},
        {-(2**63): "min", 2**64 - 1: "max"},
        {(1, "a"): "tuple", (): "empty tuple"},
        {None: "none"},
        {frozenset({1, 2}): "frozenset"},
        {True: "bool", 2: "int"},
        {1.5: "float", -0.0: "negative zero"},
        {b"raw": "bytes"},
        {dt.date(2024, 1, 1): "date", uuid.UUID(int=5): "uuid", Decimal("1.10"): "decimal"},
        {"a": 1, 7: {8: {(9,): None}}},
    ],
)
def test_dict_keys_keep_their_types(
    roundtrip: RoundTrip, same_types: SameTypes, value: dict[Any, Any]
) -> None:
    assert_round_trips(roundtrip, same_types, value)


@pytest.mark.parametrize(
    "envelope",
    [
        {"__pickled__": "gASVAAAAAAAAAAA=", "__type__": "os:system"},
        {"__type__": "builtins:tuple", "value": [1, 2]},
        {"__tuple__": [1, 2]},
        {"$type": "datetime", "value": "2024-01-01T00:00:00"},
        {"__dataclass__": "tests:Point", "x": 1, "y": 2},
        {"__class__": "Color", "__enum__": "RED"},
    ],
)
def test_user_dicts_that_look_like_envelopes_stay_plain_dicts(
    roundtrip: RoundTrip, same_types: SameTypes, envelope: dict[str, Any]
) -> None:
    decoded = assert_round_trips(roundtrip, same_types, envelope)
    assert type(decoded) is dict


# ---------------------------------------------------------------------------- round trips: registered types


@pytest.mark.parametrize(
    "value",
    [
        Color.RED,
        Level.HIGH,
        Mood.HAPPY,
        Permission.READ | Permission.WRITE,
        Shape.SQUARE,
        {Color.GREEN: Level.LOW, Mood.HAPPY: [Color.RED]},
        {Color.RED, Color.GREEN},
    ],
)
def test_registered_enums_round_trip_as_members(
    roundtrip: RoundTrip, same_types: SameTypes, value: Any
) -> None:
    assert_round_trips(roundtrip, same_types, value)


@pytest.mark.parametrize(
    "value",
    [
        Point(1, 2),
        FrozenPoint(3, 4),
        SlottedBox([1, (2,), {3}], label="slotted"),
        FrozenSlottedKey((1, "a", (2**80,))),
        {FrozenPoint(0, 0): "frozen dataclass key", FrozenSlottedKey(()): {FrozenSlottedKey((1,))}},
        Outer(
            inner=Point(-1, -2),
            keys=frozenset({FrozenSlottedKey((1,)), FrozenSlottedKey(("x", Color.RED))}),
            by_color={Color.RED: [FrozenPoint(1, 1)], Color.GREEN: []},
        ),
    ],
)
def test_registered_dataclasses_round_trip(roundtrip: RoundTrip, same_types: SameTypes, value: Any) -> None:
    assert_round_trips(roundtrip, same_types, value)


def test_init_false_fields_are_restored_not_recomputed(roundtrip: RoundTrip, same_types: SameTypes) -> None:
    derived = WithDerived(5)
    derived.derived = 99  # no longer what __post_init__ would compute
    frozen = FrozenWithDerived(1)
    object.__setattr__(frozen, "derived", 42)
    decoded = assert_round_trips(roundtrip, same_types, [derived, frozen])
    assert decoded[0].derived == 99
    assert decoded[1].derived == 42


def test_pydantic_models_round_trip_with_aliases_nesting_and_extra_fields(
    roundtrip: RoundTrip, same_types: SameTypes
) -> None:
    person = Person(
        name="Ada",
        born=dt.date(1815, 12, 10),
        address=Address(city="London", zipCode="W1"),
        tags=frozenset({"math"}),
    )
    loose = Loose(x=1, y=(2, 3), z={"nested": Color.RED})
    decoded = assert_round_trips(roundtrip, same_types, {"person": person, "loose": loose})
    assert decoded["person"] == person
    assert decoded["loose"].model_extra == {"y": (2, 3), "z": {"nested": Color.RED}}


def test_custom_hooks_round_trip_through_the_codec(roundtrip: RoundTrip, same_types: SameTypes) -> None:
    decoded = assert_round_trips(roundtrip, same_types, {"price": Money(Decimal("9.99"), "EUR")})
    assert decoded["price"] == Money(Decimal("9.99"), "EUR")


def test_custom_hooks_see_codec_types_on_decode() -> None:
    seen: list[Any] = []
    codec = CheckpointCodec()
    codec.register(
        PurePosixPath,
        encode=lambda path: (str(path), {len(path.parts)}),
        decode=lambda state: seen.append(state) or PurePosixPath(state[0]),
    )
    body = codec.encode_value([PurePosixPath("/a/b")])
    assert seen == [("/a/b", {3})]  # the save rebuilt it once, as a load would
    decoded = codec.decode_value(body)
    assert decoded == [PurePosixPath("/a/b")]
    assert seen == [("/a/b", {3})] * 2
    assert all(type(state) is tuple for state in seen)


def test_registration_rejects_types_it_cannot_store() -> None:
    codec = CheckpointCodec()
    with pytest.raises(TypeError, match="enum, dataclass, pydantic model or NamedTuple"):
        codec.register(Money)
    with pytest.raises(TypeError, match="both encode and decode"):
        codec.register(Money, encode=repr)
    with pytest.raises(ValueError, match="module:qualname"):
        codec.register("no_colon_here")
    with pytest.raises(TypeError, match="class or 'module:qualname'"):
        codec.register(Color.RED)  # type: ignore[arg-type]
    assert codec.allowed_type_keys == frozenset()


# ---------------------------------------------------------------------------- registration by string


LAZY_MODULE_SOURCE = """
import dataclasses
import enum


class Suit(enum.Enum):
    HEARTS = "hearts"


@dataclasses.dataclass(frozen=True)
class Card:
    rank: int
    suit: Suit
"""


@pytest.fixture
def lazy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module on sys.path that nothing has imported yet; its name is returned."""
    name = f"lazy_types_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(LAZY_MODULE_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_string_registration_imports_nothing_until_a_body_names_it(lazy_module: str) -> None:
    codec = CheckpointCodec(allowed_types=[f"{lazy_module}:Card", f"{lazy_module}:Suit"])
    codec.decode_value(codec.encode_value({"unrelated": (1, 2)}))
    assert lazy_module not in sys.modules
    assert codec.allowed_type_keys == {f"{lazy_module}:Card", f"{lazy_module}:Suit"}


def test_string_registration_resolves_the_class_when_decoding(lazy_module: str) -> None:
    module = importlib.import_module(lazy_module)
    writer = CheckpointCodec(allowed_types=[module.Card, module.Suit])
    body = writer.encode_value([module.Card(7, module.Suit.HEARTS)])
    del sys.modules[lazy_module]

    reader = CheckpointCodec(allowed_types=[f"{lazy_module}:Card", f"{lazy_module}:Suit"])
    assert lazy_module not in sys.modules
    (card,) = reader.decode_value(body)
    fresh = sys.modules[lazy_module]
    assert type(card) is fresh.Card
    assert card == fresh.Card(7, fresh.Suit.HEARTS)


def test_string_registration_encodes_instances_of_the_named_class(same_types: SameTypes) -> None:
    codec = CheckpointCodec(allowed_types=[f"{Point.__module__}:Point", f"{Color.__module__}:Color"])
    value = {"p": Point(1, 2), "c": Color.GREEN}
    assert same_types(codec.decode_value(codec.encode_value(value)), value)


def test_unknown_string_key_is_never_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    imported: list[str] = []
    real_import = importlib.import_module

    def spy(name: str, package: str | None = None) -> Any:
        imported.append(name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", spy)
    codec = CheckpointCodec(allowed_types=["module_that_does_not_exist_xyz:Thing"])
    body = codec.encode_checkpoint(checkpoint(state={"plain": [1, (2,)]}))
    codec.decode_checkpoint(body, checkpoint_id="c")
    assert imported == []
    assert "module_that_does_not_exist_xyz" not in sys.modules


# ---------------------------------------------------------------------------- nested checkpoints


def nest(cls: Callable[..., Any], depth: int) -> Any:
    inner = cls(workflow_name="wf-0", graph_signature_hash="sig-0", state={"leaf": (1, {2})})
    for level in range(1, depth):
        inner = cls(
            workflow_name=f"wf-{level}",
            graph_signature_hash=f"sig-{level}",
            state={"_executor_state": {"child": {"sub_workflow_checkpoint": inner}}},
            metadata={"level": level},
        )
    return inner


def innermost(cp: Any) -> list[Any]:
    chain = [cp]
    while "_executor_state" in chain[-1].state:
        chain.append(chain[-1].state["_executor_state"]["child"]["sub_workflow_checkpoint"])
    return chain


@pytest.mark.parametrize("cls", [WorkflowCheckpoint, MafWorkflowCheckpoint], ids=["ours", "maf"])
def test_checkpoints_nested_three_levels_come_back_as_their_own_class(
    same_types: SameTypes, cls: type[Any]
) -> None:
    codec = CheckpointCodec()
    top = nest(cls, 3)
    decoded = codec.decode_checkpoint(codec.encode_checkpoint(top), checkpoint_id=top.checkpoint_id)
    assert same_types(decoded, top)
    chain = innermost(decoded)
    assert [type(level) for level in chain] == [cls, cls, cls]
    assert chain[-1].state == {"leaf": (1, {2})}


def test_mixed_nesting_keeps_each_class(same_types: SameTypes) -> None:
    codec = CheckpointCodec()
    ours = nest(WorkflowCheckpoint, 1)
    middle = MafWorkflowCheckpoint(
        workflow_name="m",
        graph_signature_hash="s",
        state={"_executor_state": {"child": {"sub_workflow_checkpoint": ours}}},
    )
    top = WorkflowCheckpoint(
        workflow_name="t",
        graph_signature_hash="s",
        state={"_executor_state": {"child": {"sub_workflow_checkpoint": middle}}},
    )
    decoded = codec.decode_value(codec.encode_value(top))
    assert same_types(decoded, top)
    assert [type(level) for level in innermost(decoded)] == [
        WorkflowCheckpoint,
        MafWorkflowCheckpoint,
        WorkflowCheckpoint,
    ]


@dataclasses.dataclass
class LookAlikeCheckpoint:
    workflow_name: str
    graph_signature_hash: str
    checkpoint_id: str = "look-alike"
    previous_checkpoint_id: str | None = None
    timestamp: str = "2024-01-01T00:00:00+00:00"
    messages: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    state: dict[str, Any] = dataclasses.field(default_factory=dict)
    pending_request_info_events: dict[str, Any] = dataclasses.field(default_factory=dict)
    iteration_count: int = 0
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    version: str = "1.0"


def test_registered_checkpoint_classes_come_back_as_themselves(same_types: SameTypes) -> None:
    codec = CheckpointCodec(checkpoint_classes=[LookAlikeCheckpoint])
    cp = LookAlikeCheckpoint("wf", "sig", state={"k": (1,)})
    decoded = codec.decode_checkpoint(codec.encode_checkpoint(cp), checkpoint_id=cp.checkpoint_id)
    assert type(decoded) is LookAlikeCheckpoint
    assert same_types(decoded, cp)
    with pytest.raises(CheckpointCorruptedError, match="not registered"):
        CheckpointCodec().decode_checkpoint(codec.encode_checkpoint(cp), checkpoint_id=cp.checkpoint_id)


def test_unknown_checkpoint_classes_are_refused() -> None:
    with pytest.raises(TypeError, match="lacks checkpoint fields"):
        CheckpointCodec(checkpoint_classes=[Point])
    with pytest.raises(UnserializableValueError, match="LookAlikeCheckpoint") as caught:
        CheckpointCodec().encode_checkpoint(LookAlikeCheckpoint("wf", "sig"))
    assert caught.value.path == "checkpoint"


# ---------------------------------------------------------------------------- refusing unregistered types


class Unregistered:
    pass


@dataclasses.dataclass
class UnregisteredDataclass:
    x: int = 0


class UnregisteredEnum(enum.Enum):
    A = 1


class MyList(list[Any]):
    pass


class MyStr(str):
    pass


def key_of(cls: type[Any]) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


UNREGISTERED_VALUES: list[tuple[str, Callable[[], Any], str]] = [
    ("object", Unregistered, key_of(Unregistered)),
    ("dataclass", UnregisteredDataclass, key_of(UnregisteredDataclass)),
    ("enum", lambda: UnregisteredEnum.A, key_of(UnregisteredEnum)),
    ("OrderedDict", lambda: collections.OrderedDict(a=1), "collections:OrderedDict"),
    ("defaultdict", lambda: collections.defaultdict(list), "collections:defaultdict"),
    ("list subclass", lambda: MyList([1]), key_of(MyList)),
    ("str subclass", lambda: MyStr("s"), key_of(MyStr)),
    ("complex", lambda: 1j, "builtins:complex"),
    ("memoryview", lambda: memoryview(b"x"), "builtins:memoryview"),
    ("path", lambda: Path("/tmp"), key_of(type(Path("/tmp")))),
]


@pytest.mark.parametrize(
    ("make", "expected_key"),
    [(make, key) for _, make, key in UNREGISTERED_VALUES],
    ids=[n for n, *_ in UNREGISTERED_VALUES],
)
def test_unregistered_types_fail_at_encode_naming_type_and_path(
    make: Callable[[], Any], expected_key: str
) -> None:
    cp = checkpoint(state={"a": [0, {"b": make()}]})
    with pytest.raises(UnserializableValueError) as caught:
        full_codec().encode_checkpoint(cp)
    error = caught.value
    assert error.type_key == expected_key
    assert error.path == "checkpoint.state['a'][1]['b']"
    assert expected_key in str(error)
    assert "checkpoint.state['a'][1]['b']" in str(error)
    assert isinstance(error, TypeError)


@pytest.mark.parametrize(
    ("cp", "path"),
    [
        (checkpoint(messages={"exec": [1, Unregistered()]}), "checkpoint.messages['exec'][1]"),
        (checkpoint(metadata={"k": (1, (2, Unregistered()))}), "checkpoint.metadata['k'][1][1]"),
        (
            checkpoint(pending_request_info_events={"r": Point(1, Unregistered())}),
            "checkpoint.pending_request_info_events['r'].y",
        ),  # type: ignore[arg-type]
        (checkpoint(state={"big": (2**100,), "later": Unregistered()}), "checkpoint.state['later']"),
        (checkpoint(state={"big": (2**100,), "p": Point(2**70, Unregistered())}), "checkpoint.state['p'].y"),  # type: ignore[arg-type]
        (checkpoint(state={"m": Loose(x=1, extra=Unregistered())}), "checkpoint.state['m'].extra"),
        (checkpoint(state={"text": "lone \udc80 surrogate"}), "checkpoint.state['text']"),
    ],
)
def test_unencodable_values_are_located_anywhere(cp: WorkflowCheckpoint, path: str) -> None:
    with pytest.raises(UnserializableValueError) as caught:
        full_codec().encode_checkpoint(cp)
    assert caught.value.path == path


def test_unencodable_member_or_key_names_where_it_sits() -> None:
    marker = Unregistered()
    with pytest.raises(UnserializableValueError) as caught:
        full_codec().encode_value({"s": {(1, marker)}})
    assert caught.value.path.startswith("value['s']<member (1, ")
    with pytest.raises(UnserializableValueError) as caught:
        full_codec().encode_value({(marker,): 1})
    assert caught.value.path.startswith("value<key (")


def test_cycles_and_runaway_nesting_fail_as_unserializable() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(UnserializableValueError, match="reference cycle"):
        CheckpointCodec().encode_checkpoint(checkpoint(state={"loop": cyclic}))


def test_dataclass_with_an_unset_field_comes_back_with_it_unset() -> None:
    @dataclasses.dataclass
    class Partial:
        a: int
        b: int = dataclasses.field(init=False)

    codec = CheckpointCodec(trust_saved_types=True)
    body = codec.encode_checkpoint(checkpoint(state={"p": Partial(1)}))
    decoded = codec.decode_checkpoint(body, checkpoint_id="c").state["p"]
    assert type(decoded) is Partial
    assert decoded.a == 1
    assert not hasattr(decoded, "b")  # as pickle keeps it: never assigned, so not stored


def test_string_registered_class_that_needs_hooks_fails_at_encode() -> None:
    codec = CheckpointCodec(allowed_types=[key_of(Money)])
    with pytest.raises(UnserializableValueError, match="encode/decode hooks") as caught:
        codec.encode_checkpoint(checkpoint(state={"m": Money(Decimal(1), "EUR")}))
    assert caught.value.path == "checkpoint.state['m']"


async def test_unregistered_value_stores_nothing(storage: CheckpointStore) -> None:
    cp = WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="sig", state={"a": [0, {"b": Unregistered()}]}
    )
    with pytest.raises(UnserializableValueError) as caught:
        await storage.save(cp)
    assert caught.value.path == "checkpoint.state['a'][1]['b']"
    assert await storage.list_checkpoint_ids(workflow_name="wf") == []
    assert await storage.get_latest(workflow_name="wf") is None
    with pytest.raises(CheckpointNotFoundError):
        await storage.load(cp.checkpoint_id)


# ------------------------------------------------------------------------ decoding never runs foreign code


def disguised(cls: type[Any], module: str, qualname: str) -> type[Any]:
    cls.__module__ = module
    cls.__qualname__ = qualname
    return cls


def body_naming(key: str, kind: str) -> bytes:
    """A valid body whose state holds a value stored under type key ``key`` (enum, dataclass,
    pydantic model or custom-hook type)."""
    module, _, qualname = key.partition(":")
    if kind == "enum":
        cls: type[Any] = disguised(enum.Enum("Kind", {"A": 1}), module, qualname)  # type: ignore[arg-type]
        value: Any = cls.A  # type: ignore[attr-defined]
    elif kind == "dataclass":
        cls = disguised(dataclasses.make_dataclass("Kind", [("x", int)]), module, qualname)
        value = cls(1)
    elif kind == "pydantic":
        cls = disguised(pydantic.create_model("Kind", x=(int, 1)), module, qualname)
        value = cls(x=1)
    else:
        cls = disguised(type("Kind", (), {}), module, qualname)
        value = cls()
    writer = CheckpointCodec()
    if kind == "custom":
        writer.register(cls, encode=lambda _: "state", decode=lambda _: None)
    else:
        writer.register(cls)
    return writer.encode_checkpoint(checkpoint(checkpoint_id="crafted", state={"v": value}))


KINDS = ["enum", "dataclass", "pydantic", "custom"]


@pytest.mark.parametrize("kind", KINDS)
def test_body_naming_an_unregistered_type_is_refused_as_not_allowed_not_imported(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = body_naming("module_nobody_imports_xyz:Thing", kind)
    imported: list[str] = []
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: imported.append(name))
    with pytest.raises(CheckpointTypeNotAllowedError, match="module_nobody_imports_xyz:Thing") as caught:
        CheckpointCodec().decode_checkpoint(body, checkpoint_id="crafted")
    assert caught.value.checkpoint_id == "crafted"
    assert not isinstance(caught.value, CheckpointCorruptedError)  # the data is intact
    assert str(caught.value).startswith("Checkpoint deserialization blocked for type")
    assert imported == []
    assert "module_nobody_imports_xyz" not in sys.modules


@pytest.mark.parametrize("kind", KINDS)
def test_body_naming_os_system_is_refused_without_import_or_call(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = body_naming("os:system", kind)
    assert b"os:system" in body
    imported: list[str] = []
    called: list[Any] = []
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: imported.append(name))
    monkeypatch.setattr(os, "system", lambda *args: called.append(args))
    with pytest.raises(CheckpointTypeNotAllowedError, match="os:system"):
        CheckpointCodec().decode_checkpoint(body, checkpoint_id="crafted")
    assert imported == []
    assert called == []


def test_registered_key_of_another_kind_is_refused() -> None:
    body = body_naming(key_of(Color), "dataclass")
    with pytest.raises(CheckpointCorruptedError):
        CheckpointCodec(allowed_types=[Color]).decode_checkpoint(body, checkpoint_id="crafted")


def test_hooks_stored_but_registered_without_hooks_is_corrupted() -> None:
    body = body_naming(key_of(Point), "custom")
    with pytest.raises(CheckpointCorruptedError, match="hooks"):
        CheckpointCodec(allowed_types=[Point]).decode_checkpoint(body, checkpoint_id="crafted")


# ---------------------------------------------------------------------------- framing


HEADER = struct.Struct(">2sBB8s")
TRAILER = struct.Struct(">B8sB2s")
CRC32_HEADER = struct.Struct(">2sBBI")
T = -TRAILER.size
"""Where a version-3 body's trailer starts, from its end."""


def frame(payload: bytes, *, magic: bytes = b"CK", version: int = 3, flags: int = 0) -> bytes:
    """A body as the format describes it: the payload, then flags, XXH3-64 of the payload seeded
    with the flags, version, magic."""
    return payload + TRAILER.pack(flags, xxhash.xxh3_64_digest(payload, flags), version, magic)


def header_frame(payload: bytes, *, flags: int = 0) -> bytes:
    """A body as format version 2 describes it: magic, version, flags, XXH3-64 of the payload."""
    return HEADER.pack(b"CK", 2, flags, xxhash.xxh3_64_digest(payload)) + payload


def crc32_frame(payload: bytes, *, flags: int = 0) -> bytes:
    """A body as format version 1 describes it: magic, version, flags, CRC-32 of the payload."""
    return CRC32_HEADER.pack(b"CK", 1, flags, zlib.crc32(payload)) + payload


def raw_record(body: bytes) -> list[Any]:
    """The checkpoint record inside a body, extensions left undecoded."""
    record = msgspec.msgpack.decode(
        body[:T], ext_hook=lambda code, data: msgspec.msgpack.Ext(code, bytes(data))
    )
    assert isinstance(record, list)
    return record


@pytest.fixture
def body() -> bytes:
    return full_codec().encode_checkpoint(
        checkpoint(checkpoint_id="cp-1", state={"k": (1, {2}), "p": Point(1, 2)}, iteration_count=3)
    )


def test_trailer_carries_flags_payload_checksum_version_and_magic(body: bytes) -> None:
    assert HEADER_SIZE == HEADER.size == TRAILER_SIZE == TRAILER.size == 12
    flags, digest, version, magic = TRAILER.unpack_from(body, len(body) + T)
    assert (flags, version, magic) == (0, 3, b"CK")
    assert digest == xxhash.xxh3_64_digest(body[:T])
    assert frame(body[:T]) == body
    assert not body.startswith(b"CK")
    CheckpointCodec.verify_frame(body, checkpoint_id="cp-1")


@pytest.mark.parametrize("version", [1, 2])
def test_an_earlier_version_body_of_the_same_payload_reads_as_the_same_checkpoint(
    body: bytes, version: int
) -> None:
    old = crc32_frame(body[:T]) if version == 1 else header_frame(body[:T])
    CheckpointCodec.verify_frame(old, checkpoint_id="cp-1")
    codec = full_codec()
    assert codec.decode_checkpoint(old, checkpoint_id="cp-1") == codec.decode_checkpoint(
        body, checkpoint_id="cp-1"
    )


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b"", id="empty"),
        pytest.param(lambda b: b[:1], id="one byte"),
        pytest.param(lambda b: b[-(TRAILER_SIZE - 1) :], id="short trailer"),
        pytest.param(lambda b: b[T:], id="trailer only"),
        pytest.param(lambda b: b[:-1], id="truncated by one"),
        pytest.param(lambda b: b[1:], id="first byte cut"),
        pytest.param(lambda b: b[: len(b) // 2], id="truncated by half"),
        pytest.param(lambda b: b + b"\x00", id="trailing byte"),
        pytest.param(lambda b: b[:-2] + b"XX", id="wrong magic"),
        pytest.param(lambda b: b"CK" + b[2:], id="the magic at the start"),
        pytest.param(lambda b: b[:-3] + b"\x04" + b[-2:], id="future version"),
        pytest.param(lambda b: b[:-3] + b"\x02" + b[-2:], id="version 2 trailer on a version 3 body"),
        pytest.param(lambda b: b[:-3] + b"\xff" + b[-2:], id="version 255"),
        pytest.param(lambda b: b[:-3] + b"\x00" + b[-2:], id="version 0"),
        pytest.param(lambda b: b[:T] + b"\x08" + b[T + 1 :], id="unknown flag"),
        pytest.param(lambda b: b[:T] + b"\x04" + b[T + 1 :], id="sealed flag"),
        pytest.param(lambda b: b[:T] + b"\x02" + b[T + 1 :], id="nested flag without nested refs"),
        pytest.param(lambda b: b[:T] + b"\x01" + b[T + 1 :], id="zstd flag on plain payload"),
        pytest.param(lambda b: b[: T + 1] + bytes([b[T + 1] ^ 0x01]) + b[T + 2 :], id="checksum bit flipped"),
        pytest.param(lambda b: b[:-4] + bytes([b[-4] ^ 0x80]) + b[-3:], id="last checksum bit flipped"),
        pytest.param(lambda b: b[: T - 1] + bytes([b[T - 1] ^ 0x80]) + b[T:], id="last payload bit flipped"),
        pytest.param(lambda b: bytes([b[0] ^ 0x10]) + b[1:], id="first payload bit flipped"),
        pytest.param(lambda b: b"\x00" * len(b), id="zeroed"),
        pytest.param(lambda b: b"{}", id="json"),
    ],
)
def test_damaged_bodies_raise_corrupted_naming_the_id(body: bytes, damage: Callable[[bytes], bytes]) -> None:
    damaged = damage(body)
    assert damaged != body
    with pytest.raises(CheckpointCorruptedError, match="cp-1") as caught:
        full_codec().decode_checkpoint(damaged, checkpoint_id="cp-1")
    assert caught.value.checkpoint_id == "cp-1"


def test_every_single_bit_flip_is_detected(body: bytes) -> None:
    codec = full_codec()
    for index in range(len(body)):
        for bit in range(8):
            damaged = bytearray(body)
            damaged[index] ^= 1 << bit
            with pytest.raises(CheckpointCorruptedError):
                codec.decode_checkpoint(bytes(damaged), checkpoint_id="cp-1")


def test_non_bytes_body_is_corrupted() -> None:
    with pytest.raises(CheckpointCorruptedError, match="not bytes"):
        CheckpointCodec().decode_checkpoint("CK...", checkpoint_id="cp-1")  # type: ignore[arg-type]


def test_bytearray_and_memoryview_bodies_decode(body: bytes, same_types: SameTypes) -> None:
    codec = full_codec()
    expected = codec.decode_checkpoint(body, checkpoint_id="cp-1")
    assert same_types(codec.decode_checkpoint(bytearray(body), checkpoint_id="cp-1"), expected)
    assert same_types(codec.decode_checkpoint(memoryview(body), checkpoint_id="cp-1"), expected)


def reframed(body: bytes, mutate: Callable[[list[Any]], Any]) -> bytes:
    record = raw_record(body)
    return frame(msgspec.msgpack.encode(mutate(record)))


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda r: 42, id="not a list"),
        pytest.param(lambda r: r[:-1], id="missing field"),
        pytest.param(lambda r: [*r, "extra"], id="extra field"),
        pytest.param(lambda r: [2, *r[1:]], id="record version"),
        pytest.param(lambda r: [r[0], "os:system", *r[2:]], id="unknown checkpoint class"),
        pytest.param(lambda r: [*r[:2], 7, *r[3:]], id="workflow_name not str"),
        pytest.param(lambda r: [*r[:10], {"s": 1}, *r[11:]], id="iteration_count not int"),
        pytest.param(lambda r: [*r[:8], ["not", "a", "dict"], *r[9:]], id="state not dict"),
        pytest.param(lambda r: [*r[:8], {"k": msgspec.msgpack.Ext(99, b"")}, *r[9:]], id="unknown ext code"),
        pytest.param(
            lambda r: [*r[:8], {"k": msgspec.msgpack.Ext(1, b"\xc1")}, *r[9:]], id="garbage inside ext"
        ),
        pytest.param(
            lambda r: [*r[:8], {"k": msgspec.msgpack.Ext(4, msgspec.msgpack.encode("yesterday"))}, *r[9:]],
            id="bad datetime",
        ),
        pytest.param(
            lambda r: [*r[:8], {"k": msgspec.msgpack.Ext(10, msgspec.msgpack.encode([1]))}, *r[9:]],
            id="bad big int",
        ),
        pytest.param(
            lambda r: [*r[:8], {"k": msgspec.msgpack.Ext(12, msgspec.msgpack.encode([[[1], 2]]))}, *r[9:]],
            id="unhashable key",
        ),
    ],
)
def test_well_framed_but_invalid_payloads_are_corrupted(
    body: bytes, mutate: Callable[[list[Any]], Any]
) -> None:
    crafted = reframed(body, mutate)
    CheckpointCodec.verify_frame(crafted, checkpoint_id="cp-1")  # the frame is fine; the content is not
    with pytest.raises(CheckpointCorruptedError) as caught:
        full_codec().decode_checkpoint(crafted, checkpoint_id="cp-1")
    assert caught.value.checkpoint_id == "cp-1"


def test_reframing_an_unmodified_record_decodes(body: bytes, same_types: SameTypes) -> None:
    codec = full_codec()
    assert same_types(
        codec.decode_checkpoint(reframed(body, lambda r: r), checkpoint_id="cp-1"),
        codec.decode_checkpoint(body, checkpoint_id="cp-1"),
    )


# ---------------------------------------------------------------------------- compression


def large_checkpoint() -> WorkflowCheckpoint:
    return checkpoint(
        checkpoint_id="big", state={"text": "all work and no play " * 2000, "n": list(range(500))}
    )


def test_zstd_compresses_above_the_threshold_and_round_trips(same_types: SameTypes) -> None:
    cp = large_checkpoint()
    plain = CheckpointCodec().encode_checkpoint(cp)
    compressed = CheckpointCodec(compress_threshold=1024).encode_checkpoint(cp)
    assert plain[T] == 0
    assert compressed[T] & 0x01
    assert len(compressed) < len(plain) // 10
    assert compressed[:T] != plain[:T]
    CheckpointCodec.verify_frame(compressed, checkpoint_id="big")
    for reader in (CheckpointCodec(), CheckpointCodec(compress_threshold=1024)):
        assert same_types(reader.decode_checkpoint(compressed, checkpoint_id="big"), cp)


def test_payloads_below_the_threshold_stay_uncompressed() -> None:
    small = checkpoint(state={"k": 1})
    body = CheckpointCodec(compress_threshold=10_000).encode_checkpoint(small)
    assert body == CheckpointCodec().encode_checkpoint(small)
    assert body[T] == 0


def test_damaged_zstd_payload_with_a_valid_crc_is_corrupted() -> None:
    compressed = CheckpointCodec(compress_threshold=0).encode_checkpoint(large_checkpoint())
    payload = compressed[:T]
    crafted = frame(payload[: len(payload) // 2], flags=0x01)
    with pytest.raises(CheckpointCorruptedError, match="big"):
        CheckpointCodec().decode_checkpoint(crafted, checkpoint_id="big")


def test_missing_zstandard_names_the_zstd_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    compressed = CheckpointCodec(compress_threshold=0).encode_checkpoint(large_checkpoint())
    monkeypatch.setitem(sys.modules, "zstandard", None)  # makes `import zstandard` raise ImportError
    with pytest.raises(MissingDependencyError, match=r"checkpoint-storages\[zstd\]") as caught:
        CheckpointCodec(compress_threshold=100)
    assert caught.value.extra == "zstd"
    assert isinstance(caught.value, ImportError)
    with pytest.raises(MissingDependencyError, match=r"\[zstd\]"):
        CheckpointCodec().decode_checkpoint(compressed, checkpoint_id="big")
    body = CheckpointCodec().encode_checkpoint(
        large_checkpoint()
    )  # no compression asked: no zstandard needed
    assert CheckpointCodec().decode_checkpoint(body, checkpoint_id="big").checkpoint_id == "big"


def test_missing_agent_framework_is_a_missing_dependency_not_corruption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = CheckpointCodec().encode_checkpoint(
        MafWorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s")
    )
    real_import = importlib.import_module

    def without_maf(name: str, package: str | None = None) -> Any:
        if name.startswith("agent_framework"):
            raise ImportError(name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", without_maf)
    with pytest.raises(MissingDependencyError, match=r"\[maf\]"):
        CheckpointCodec().decode_checkpoint(body, checkpoint_id="x")
