"""Allow-listed objects as the codec stores and rebuilds them: pickle's state, never a constructor
(storages/codec/objects.py). Pickle is the oracle: what MAF's own storages give back is what
``pickle.loads(pickle.dumps(value))`` gives back."""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import importlib
import math
import pickle
import sys
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import msgspec
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storages import (
    CheckpointCorruptedError,
    CheckpointTypeNotAllowedError,
    UnserializableValueError,
    WorkflowCheckpoint,
)
from storages.codec import TRAILER_SIZE, CheckpointCodec, OpaqueValue
from storages.codec.stack import MAX_NESTING
from storages.codec.values import EXT_DATACLASS, EXT_NAMEDTUPLE, EXT_PYDANTIC

CODEC = CheckpointCodec(allowed_modules=[__name__])
CALLS: collections.Counter[str] = collections.Counter()
"""What ran of the classes' own code: constructors, validators, __post_init__, __setstate__."""


def round_trip(value: Any, codec: CheckpointCodec = CODEC) -> Any:
    body = codec.encode_checkpoint(
        WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", state={"v": value})
    )
    return codec.decode_checkpoint(body, checkpoint_id="rt").state["v"]


def pickled(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value))


def state_of(value: Any) -> Any:
    """Everything an object holds (dict, slots, items), recursively: what pickle keeps."""
    cls = type(value)
    if isinstance(value, (list, tuple)) and cls in (list, tuple):
        return [state_of(item) for item in value]
    if cls is dict:
        return {key: state_of(item) for key, item in value.items()}
    if isinstance(value, pydantic.BaseModel):
        getstate = pydantic.BaseModel.__getstate__(value)
        return (
            cls,
            {
                key: state_of(item) if key != "__pydantic_fields_set__" else item
                for key, item in getstate.items()
            },
        )
    parts: dict[str, Any] = {}
    if isinstance(value, tuple):
        parts["items"] = [state_of(item) for item in value]
    for klass in cls.__mro__:
        for name in klass.__dict__.get("__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                parts[f"slot {name}"] = state_of(getattr(value, name))
    if hasattr(value, "__dict__") and not isinstance(value, type):
        parts["dict"] = {key: state_of(item) for key, item in vars(value).items()}
    return (cls, parts) if parts or dataclasses.is_dataclass(value) else value


# ---------------------------------------------------------------------- the zoo


@dataclasses.dataclass
class Positive:
    n: int

    def __post_init__(self) -> None:
        CALLS["Positive.__post_init__"] += 1
        if self.n <= 0:
            raise ValueError("n must be positive")


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: int
    b: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class Slotted:
    a: int
    b: int = dataclasses.field(init=False)


@dataclasses.dataclass(frozen=True, slots=True)
class FrozenSlotted:
    a: int
    doubled: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        CALLS["FrozenSlotted.__post_init__"] += 1
        object.__setattr__(self, "doubled", self.a * 2)


@dataclasses.dataclass
class WithInitVar:
    user: str
    password: dataclasses.InitVar[str]
    digest: str = dataclasses.field(init=False)
    kind: ClassVar[str] = "login"

    def __post_init__(self, password: str) -> None:
        CALLS["WithInitVar.__post_init__"] += 1
        self.digest = password[::-1]
        self._seen = {password}


class Base:
    __slots__ = ("base",)


@dataclasses.dataclass
class OnSlottedBase(Base):
    """Instances have a __dict__ and a slot from their base."""

    field_a: int = 0


@dataclasses.dataclass
class Cached:
    n: int

    @functools.cached_property
    def square(self) -> int:
        return self.n * self.n


@dataclasses.dataclass
class OwnState:
    """Its own __getstate__ / __setstate__: pickle keeps and gives back only what they say."""

    n: int
    cache: dict[str, int] = dataclasses.field(default_factory=dict)

    def __getstate__(self) -> dict[str, int]:
        return {"n": self.n}

    def __setstate__(self, state: dict[str, int]) -> None:
        CALLS["OwnState.__setstate__"] += 1
        self.n = state["n"]
        self.cache = {"rebuilt": 1}


@dataclasses.dataclass
class GetstateOnly:
    """Its own __getstate__ (leaves the cache out), pickle's default restore."""

    n: int
    cache: dict[str, int] = dataclasses.field(default_factory=dict)

    def __getstate__(self) -> dict[str, int]:
        return {"n": self.n}


@dataclasses.dataclass(slots=True)
class SlotsGetstatePair:
    """A __getstate__ returning pickle's (dict, slots) pair."""

    n: int

    def __getstate__(self) -> tuple[None, dict[str, int]]:
        return (None, {"n": self.n + 1000})


@dataclasses.dataclass
class GetstateList:
    """A __getstate__ only a __setstate__ of its own could restore, and none."""

    n: int

    def __getstate__(self) -> list[int]:
        return [self.n]


@dataclasses.dataclass
class NeedsArgsToBuild:
    """A __new__ that needs arguments: pickle (and so any load) cannot make one."""

    n: int

    def __new__(cls, n: int) -> NeedsArgsToBuild:
        return super().__new__(cls)


@dataclasses.dataclass
class StrictRestore:
    n: int

    def __getstate__(self) -> dict[str, int]:
        return {"n": self.n}

    def __setstate__(self, state: dict[str, int]) -> None:
        if state["n"] < 0:
            raise ValueError("negative")
        self.n = state["n"]


@dataclasses.dataclass(eq=False)
class Identity:
    n: int


class Bounded(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow", populate_by_name=True)

    lo: int
    hi: int = pydantic.Field(default=10, alias="upper")
    label: str = "x"
    _audit: list[str] = pydantic.PrivateAttr(default_factory=list)
    _unset: int = pydantic.PrivateAttr()

    @pydantic.field_validator("label")
    @classmethod
    def _label(cls, value: str) -> str:
        CALLS["Bounded._label"] += 1
        return value + "!"

    @pydantic.model_validator(mode="before")
    @classmethod
    def _before(cls, data: Any) -> Any:
        CALLS["Bounded._before"] += 1
        return data

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _wrap(cls, data: Any, handler: pydantic.ModelWrapValidatorHandler[Bounded]) -> Bounded:
        CALLS["Bounded._wrap"] += 1
        return handler(data)

    @pydantic.model_validator(mode="after")
    def _after(self) -> Bounded:
        CALLS["Bounded._after"] += 1
        if self.lo > self.hi:
            raise ValueError("lo > hi")
        return self

    def model_post_init(self, context: Any) -> None:
        CALLS["Bounded.model_post_init"] += 1

    @functools.cached_property
    def width(self) -> int:
        return self.hi - self.lo


class FrozenModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)

    items: tuple[int, ...]
    inner: Bounded | None = None


class Scores(pydantic.RootModel[dict[str, float]]):
    pass


class ModelOwnState(pydantic.BaseModel):
    """A model that keeps only part of itself, as pickle would."""

    keep: int
    drop: int = 0

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        state["__dict__"] = {"keep": self.keep, "drop": -1}
        return state


class Pair(NamedTuple):
    x: int
    y: int = 0


Legacy = collections.namedtuple("Legacy", ["a", "b"])


class Normalised(collections.namedtuple("Normalised", ["name"])):
    """A namedtuple whose __new__ normalises: pickle would run it again on every load."""

    __slots__ = ()

    def __new__(cls, name: str) -> Normalised:
        CALLS["Normalised.__new__"] += 1
        return super().__new__(cls, name + "#")


class PairWithDict(Pair):
    """A NamedTuple subclass without __slots__: its instances have a __dict__."""


class Level(enum.IntFlag):
    LOW = 1
    HIGH = 2


class NotANumber(enum.Enum):
    MISSING = math.nan


def zoo() -> dict[str, Any]:
    """One of each, several of them mutated into states their constructors refuse."""
    positive = Positive(1)
    positive.n = -3
    slotted = Slotted(1)  # b never assigned
    frozen_slotted = FrozenSlotted(2)
    object.__setattr__(frozen_slotted, "doubled", 99)
    login = WithInitVar("ada", password="secret")
    based = OnSlottedBase(1)
    based.base = "from the base's slot"
    cached = Cached(3)
    assert cached.square == 9  # now in __dict__, as pickle keeps it
    bounded = Bounded(lo=1, upper=5, label="a", extra_field=(1, 2))
    bounded.lo = 50  # the after-validator refuses this
    bounded._audit.append("changed")
    assert bounded.width == -45
    partial = Bounded.model_construct(lo=1)
    with_dict = PairWithDict(1, 2)
    with_dict.note = "attribute of a subclass"  # type: ignore[attr-defined]
    return {
        "positive": positive,
        "frozen": Frozen(1, [2]),
        "slotted": slotted,
        "frozen_slotted": frozen_slotted,
        "login": login,
        "based": based,
        "cached": cached,
        "own_state": OwnState(4, {"x": 1}),
        "getstate_only": GetstateOnly(5, {"y": 2}),
        "pair_state": SlotsGetstatePair(6),
        "identity": Identity(7),
        "bounded": bounded,
        "partial": partial,
        "frozen_model": FrozenModel(items=(1, 2), inner=Bounded(lo=0)),
        "scores": Scores({"a": 1.5}),
        "model_own_state": ModelOwnState(keep=1, drop=2),
        "pair": Pair(1),
        "legacy": Legacy(1, [2]),
        "normalised": Normalised("n"),
        "with_dict": with_dict,
        "flags": Level.LOW | Level.HIGH,
    }


# ---------------------------------------------------------------------- restored as pickle restores


@pytest.mark.parametrize("name", sorted(zoo()))
def test_each_object_comes_back_with_the_state_pickle_gives_back(name: str) -> None:
    value = zoo()[name]
    ours = round_trip(value)
    assert type(ours) is type(value)
    if name == "normalised":
        # pickle runs this __new__ again (name# -> name##); the codec gives back what was saved.
        assert state_of(pickled(value)) != state_of(value)
        assert state_of(ours) == state_of(value)
        return
    assert state_of(ours) == state_of(pickled(value))


def test_no_constructor_validator_or_post_init_runs_on_load() -> None:
    values = zoo()
    bodies = [CODEC.encode_value(value) for value in values.values()]
    CALLS.clear()
    for body in bodies:
        CODEC.decode_value(body)
    # Only what pickle runs too: a class's own __setstate__.
    assert set(CALLS) == {"OwnState.__setstate__"}


def test_save_after_save_gives_what_pickle_gives_and_nothing_drifts() -> None:
    ours, theirs = zoo(), zoo()
    for _ in range(3):
        ours, theirs = round_trip(ours), pickled(theirs)
    normalised = theirs.pop("normalised")
    assert normalised == ("n####",)  # pickle re-ran its __new__ each time
    assert ours.pop("normalised") == ("n#",)
    assert state_of(ours) == state_of(theirs)
    assert ours["bounded"].label == "a!"  # validated once, when the application built it


def test_model_fields_set_extra_and_private_attributes_are_kept() -> None:
    values = zoo()
    bounded, partial = round_trip(values["bounded"]), round_trip(values["partial"])
    assert bounded.model_fields_set == {"lo", "hi", "label", "extra_field"}
    assert bounded.model_extra == {"extra_field": (1, 2)}
    assert bounded._audit == ["changed"]
    assert not hasattr(bounded, "_unset")  # never assigned, so never stored
    assert bounded.lo == 50
    assert partial.model_fields_set == {"lo"}
    assert (partial.hi, partial.label) == (10, "x")  # model_construct's defaults, stored as values
    assert round_trip(values["model_own_state"]).drop == -1  # what its own __getstate__ kept


def test_a_namedtuple_is_rebuilt_without_its_new() -> None:
    value = Normalised("n")
    CALLS.clear()
    assert round_trip(value) == ("n#",)
    assert CALLS == {}


# ---------------------------------------------------------------------- a save refuses what a load would


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (GetstateList(1), "__getstate__ returns a list"),
        (NeedsArgsToBuild(1), "would not load back"),
        (StrictRestore(-1), "would not load back: ValueError: negative"),
        (NotANumber.MISSING, "would not find it on load"),
    ],
    ids=["getstate-without-setstate", "new-needs-arguments", "own-setstate-refuses", "nan-member"],
)
def test_a_value_no_load_could_rebuild_is_refused_at_save_naming_where(value: Any, reason: str) -> None:
    state = {"orders": [1, 2, 3, {"customer": value}]}
    with pytest.raises(UnserializableValueError, match=reason) as refused:
        CODEC.encode_checkpoint(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", state=state))
    assert refused.value.path == "checkpoint.state['orders'][3]['customer']"
    with pytest.raises(UnserializableValueError, match=reason):
        CODEC.encode_checkpoint_tree(
            WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", state=state)
        )


def test_hooks_whose_decode_refuses_are_refused_at_save() -> None:
    codec = CheckpointCodec()
    codec.register(
        complex, encode=lambda c: [c.real, c.imag], decode=lambda s: complex(*s) if s[1] else 1 / 0
    )
    assert round_trip(2 + 1j, codec) == 2 + 1j
    with pytest.raises(UnserializableValueError, match="ZeroDivisionError") as refused:
        codec.encode_value({"z": [complex(2, 0)]})
    assert refused.value.path == "value['z'][0]"


def test_the_same_bytes_are_rebuilt_once_and_a_refusal_every_time() -> None:
    rebuilt: list[Any] = []

    def decode(state: Any) -> complex:
        rebuilt.append(state)
        if state[1] == 0:
            raise ValueError("not complex")
        return complex(*state)

    codec = CheckpointCodec()
    codec.register(complex, encode=lambda c: [c.real, c.imag], decode=decode)
    for _ in range(3):  # a conversation saved again at every superstep
        codec.encode_value([1 + 1j, 2 + 2j])
    assert rebuilt == [[1.0, 1.0], [2.0, 2.0]]
    for _ in range(2):  # a refusal is never remembered: each save tries again
        before = len(rebuilt)
        with pytest.raises(UnserializableValueError, match="not complex"):
            codec.encode_value([3 + 0j])
        assert len(rebuilt) > before
        assert rebuilt[-1] == [3.0, 0.0]


def test_a_hooked_value_holding_an_embedded_checkpoint_is_rebuilt_at_save() -> None:
    seen: list[Any] = []

    class Envelope:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

    codec = CheckpointCodec()
    codec.register(
        Envelope, encode=lambda e: {"inner": e.inner}, decode=lambda s: seen.append(s) or Envelope(s["inner"])
    )
    inner = WorkflowCheckpoint(workflow_name="c", graph_signature_hash="g", checkpoint_id="inner")
    outer = WorkflowCheckpoint(
        workflow_name="w", graph_signature_hash="g", checkpoint_id="outer", state={"e": Envelope(inner)}
    )
    nodes = codec.encode_checkpoint_tree(outer)
    assert [node.checkpoint.checkpoint_id for node in nodes] == ["outer", "inner"]
    assert seen[0]["inner"] is inner  # the save's rebuild resolved the reference to the checkpoint saved
    loaded = codec.decode_checkpoint(nodes[0].body, checkpoint_id="outer", nested={"inner": nodes[1].body})
    assert loaded.state["e"].inner == inner


# ---------------------------------------------------------------------- forms and old bodies


def _ext(code: int, *parts: Any) -> msgspec.msgpack.Ext:
    return msgspec.msgpack.Ext(code, msgspec.msgpack.encode(list(parts)))


def _decode(ext: msgspec.msgpack.Ext, codec: CheckpointCodec = CODEC) -> Any:
    from storages.codec.frame import plain_frame

    return codec.decode_value(plain_frame(msgspec.msgpack.encode(ext), False))


def key(cls: type[Any]) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def test_bodies_written_before_keep_reading_as_they_did() -> None:
    # Every release wrote a model's fields and extra fields as one map, and no private attribute.
    old = _decode(_ext(EXT_PYDANTIC, key(Bounded), {"lo": 1, "hi": 2, "label": "a!", "extra_field": 3}))
    assert (old.lo, old.hi, old.label, old.model_extra) == (1, 2, "a!", {"extra_field": 3})
    assert old.model_fields_set == {"lo", "hi", "label", "extra_field"}
    assert old._audit == []  # private attributes as a new model has them
    # ... and a dataclass's fields as a map, a NamedTuple's items as a list.
    positive = _decode(_ext(EXT_DATACLASS, key(Positive), {"n": -1}))
    assert (type(positive), positive.n) == (Positive, -1)
    assert _decode(_ext(EXT_NAMEDTUPLE, key(Pair), [1, 2])) == Pair(1, 2)


def test_common_objects_are_stored_in_the_forms_every_release_wrote() -> None:
    for value, form in [
        (Frozen(1, [2]), [key(Frozen), {"a": 1, "b": [2]}]),
        (FrozenSlotted(3), [key(FrozenSlotted), {"a": 3, "doubled": 6}]),
        (Pair(1, 2), [key(Pair), [1, 2]]),
        (FrozenModel(items=(1,)), None),
    ]:
        wire = msgspec.msgpack.decode(
            CODEC.encode_value(value)[:-TRAILER_SIZE],
            ext_hook=lambda code, data: msgspec.msgpack.decode(data),
        )
        if form is not None:
            assert wire == form


# ---------------------------------------------------------------------- what a crafted body can do


def _crafted(code: int, *parts: Any) -> Any:
    return _decode(_ext(code, *parts))


@pytest.mark.parametrize(
    ("code", "parts", "match"),
    [
        (EXT_DATACLASS, (key(FrozenSlotted), {"a": 1, "nope": 2}), "no slot 'nope'"),
        (EXT_DATACLASS, (key(Positive), None, {"n": 1}), "__setstate__, which it does not define"),
        (EXT_DATACLASS, (key(Positive), [1, 2]), "not a map"),
        (EXT_DATACLASS, (key(Positive), 1, 2, 3), "not stored in a form"),
        (EXT_PYDANTIC, (key(Bounded), {"lo": 1}, "not a list", None, None), "not stored as a model's state"),
        (EXT_PYDANTIC, (key(Bounded), 1, 2), "not stored in a form"),
        (EXT_NAMEDTUPLE, (key(Pair), [1]), "not a NamedTuple of 2 fields"),
        (EXT_NAMEDTUPLE, (key(Pair), [1, 2], {"x": 3}), "no slot 'x'"),
        (EXT_DATACLASS, (key(Pair), {"x": 1}), "stored as a dataclass but is not one"),
    ],
)
def test_crafted_forms_are_corrupted_bodies(code: int, parts: tuple[Any, ...], match: str) -> None:
    with pytest.raises(CheckpointCorruptedError, match=match):
        _crafted(code, *parts)


def test_a_crafted_body_sets_no_attribute_beyond_the_state_it_names() -> None:
    # "__class__" in an instance's __dict__ is an entry, not the instance's class.
    value = _crafted(EXT_DATACLASS, key(Positive), {"n": 1, "__class__": "os:system", "__init__": 0})
    assert type(value) is Positive
    assert value.__dict__ == {"n": 1, "__class__": "os:system", "__init__": 0}
    assert callable(Positive.__init__)  # the class is untouched


def test_a_crafted_body_naming_a_class_outside_the_list_rebuilds_nothing() -> None:
    CALLS.clear()
    for code in (EXT_DATACLASS, EXT_PYDANTIC, EXT_NAMEDTUPLE):
        with pytest.raises(CheckpointTypeNotAllowedError):
            _decode(_ext(code, "collections:OrderedDict", {"a": 1}), CheckpointCodec())
    assert CALLS == {}


@pytest.mark.parametrize(
    "key", ["os:system", "builtins:eval", "collections:OrderedDict", "json.decoder:JSONDecoder"]
)
@pytest.mark.parametrize(
    ("code", "form"),
    [
        (EXT_DATACLASS, ({"a": 1},)),
        (EXT_DATACLASS, (None, {"a": 1})),
        (EXT_PYDANTIC, ({"a": 1}, ["a"], None, None)),
        (EXT_PYDANTIC, (None, {"__dict__": {}})),
        (EXT_NAMEDTUPLE, ([1], {"a": 1})),
        (EXT_NAMEDTUPLE, ([1], None, {"a": 1})),
    ],
)
def test_every_form_naming_a_key_outside_the_list_imports_and_calls_nothing(
    key: str, code: int, form: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    imported: list[str] = []
    monkeypatch.setattr(importlib, "import_module", lambda name, *args: imported.append(name))
    with pytest.raises(CheckpointTypeNotAllowedError, match=key):
        _decode(_ext(code, key, *form), CheckpointCodec())
    assert imported == []


def test_reads_without_constructing_types_show_every_form_opaquely() -> None:
    body = CODEC.encode_checkpoint(
        WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", state=zoo())
    )
    CALLS.clear()
    opaque = CODEC.decode_checkpoint(body, checkpoint_id="x", construct_types=False).state
    assert {type(item) for item in opaque.values()} == {OpaqueValue}
    assert opaque["pair"] == OpaqueValue(key(Pair), [1, 0])
    assert CALLS == {}


# ---------------------------------------------------------------------- nesting


def _chain(levels: int, wrap: Callable[[Any], Any], leaf: Any = 0) -> Any:
    value: Any = leaf
    for _ in range(levels):
        value = wrap(value)
    return value


NESTINGS: dict[str, tuple[Callable[[Any], Any], int]] = {
    "lists": (lambda v: [v], 1),
    "dicts": (lambda v: {"k": v}, 1),
    "tuples": (lambda v: (v,), 2),
    "int-keyed dicts": (lambda v: {1: v}, 1),
    "dataclasses": (lambda v: Frozen(0, [v]), 4),
    "lists in tuples": (lambda v: ([[v]],), 4),
}
"""Each shape and the levels of a payload one step of it takes."""
BOUNDED_BY_NESTING = {"lists", "dicts", "int-keyed dicts"}
"""Shapes a save refuses past MAX_NESTING; the others it refuses sooner, where its own walk runs
out of stack (on a fresh one), a walk deeper per level than a load's."""


def _deepest_encodable(wrap: Callable[[Any], Any], levels_per_step: int) -> tuple[int, bytes]:
    steps = (MAX_NESTING - 1) // levels_per_step
    while True:
        try:
            return steps, CODEC.encode_value(_chain(steps, wrap))
        except UnserializableValueError:
            steps -= 1


def _deep_call(levels: int, call: Callable[[], Any]) -> Any:
    return call() if levels == 0 else _deep_call(levels - 1, call)


@pytest.mark.parametrize("shape", sorted(NESTINGS))
def test_the_deepest_value_a_save_takes_loads_from_a_deep_stack(shape: str) -> None:
    wrap, levels_per_step = NESTINGS[shape]
    steps, body = _deepest_encodable(wrap, levels_per_step)
    assert steps * levels_per_step > MAX_NESTING // 2
    with pytest.raises(UnserializableValueError) as refused:
        CODEC.encode_value(_chain(steps + 2, wrap))
    if shape in BOUNDED_BY_NESTING:
        assert f"more than {MAX_NESTING} levels" in str(refused.value)
    depth = sys.getrecursionlimit() - 150
    decoded = _deep_call(depth, lambda: CODEC.decode_value(body))
    assert CODEC.same_value(decoded, _chain(steps, wrap))


def test_segments_ormsgpack_walks_cannot_add_up_past_the_bound() -> None:
    # Each tuple starts a new native walk, which allows 255 levels on its own.
    value: Any = 0
    for _ in range(8):
        value = (_chain(200, lambda v: [v], value),)
    with pytest.raises(UnserializableValueError, match=f"more than {MAX_NESTING} levels"):
        CODEC.encode_value(value)


def test_a_deep_value_saves_from_a_deep_stack() -> None:
    value = _chain(MAX_NESTING - 10, lambda v: [v])
    body = _deep_call(sys.getrecursionlimit() - 150, lambda: CODEC.encode_value(value))
    assert CODEC.decode_value(body) == value


# ---------------------------------------------------------------------- nothing saved fails to load


classes_in_any_state = st.sampled_from(
    [Positive, Frozen, Slotted, FrozenSlotted, OnSlottedBase, Identity, Pair]
)
leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | st.binary(max_size=5)


def _any_state(cls: type[Any], values: list[Any]) -> Any:
    """An instance whose attributes hold anything, set past every check (as mutation does)."""
    if issubclass(cls, tuple):
        return cls(*values[: len(cls._fields)], *([None] * (len(cls._fields) - len(values))))
    obj = object.__new__(cls)
    for field, item in zip(dataclasses.fields(cls), values, strict=False):
        object.__setattr__(obj, field.name, item)
    return obj


ZOO = zoo()
REWRITES_ITSELF = {"own_state", "getstate_only", "pair_state", "model_own_state"}
"""Classes whose own __getstate__ / __setstate__ give back other state, as pickle does too."""


def _objects(names: list[str]) -> st.SearchStrategy[Any]:
    def _from_zoo(name: str) -> Any:
        return ZOO[name]

    return st.sampled_from(names).map(_from_zoo)


def _anything(objects: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves | objects,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.lists(inner, max_size=3).map(tuple)
            | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=3)
            | st.builds(_any_state, classes_in_any_state, st.lists(inner, max_size=3))
            | st.builds(
                lambda lo, extra: Bounded.model_construct(lo=lo, **extra),
                inner,
                st.dictionaries(st.just("extra"), inner),
            )
        ),
        max_leaves=12,
    )


def _saved(value: Any) -> bytes | None:
    try:
        return CODEC.encode_value(value)
    except UnserializableValueError:
        return None  # refused at save, naming where: nothing was written for a load to refuse


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_anything(_objects(sorted(ZOO))))
def test_whatever_a_save_takes_a_load_takes(value: Any) -> None:
    body = _saved(value)
    if body is not None:
        CODEC.decode_value(body)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_anything(_objects(sorted(set(ZOO) - REWRITES_ITSELF))))
def test_whatever_a_save_takes_loads_back_as_the_same_value(value: Any) -> None:
    body = _saved(value)
    if body is not None:
        assert CODEC.same_value(CODEC.decode_value(body), value)
