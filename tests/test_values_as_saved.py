"""Values come back as they were saved, on every backend: objects are rebuilt as pickle rebuilds
them (MAF's own storages), never through a constructor, validator or ``__post_init__``; a value a
load would refuse is refused by the save, naming where it sits; and a re-save of an id compares
values as the codec stores them, not by ``==``."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import enum
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple

import pydantic
import pytest
from agent_framework import WorkflowCheckpoint as MafWorkflowCheckpoint

from storages import (
    CheckpointConflictError,
    CheckpointStore,
    UnserializableValueError,
    WorkflowCheckpoint,
)
from storages.codec.stack import MAX_NESTING

SameTypes = Callable[[Any, Any], bool]

# ---------------------------------------------------------------------- types whose constructors refuse


@dataclasses.dataclass
class Budget:
    """Refuses an overspent budget when built; the application overspends it later."""

    limit: int
    spent: int = 0

    def __post_init__(self) -> None:
        if self.spent > self.limit:
            raise ValueError(f"spent {self.spent} over limit {self.limit}")


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    """Frozen and slotted, a derived field; refuses an empty window when built."""

    start: int
    end: int
    width: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError("empty window")
        object.__setattr__(self, "width", self.end - self.start)


@dataclasses.dataclass
class Login:
    """An InitVar consumed by __post_init__, which also sets an attribute that is no field."""

    user: str
    password: dataclasses.InitVar[str]
    hashed: str = dataclasses.field(init=False)

    def __post_init__(self, password: str) -> None:
        if len(password) < 8:
            raise ValueError("password too short")
        self.hashed = password[::-1]
        self._attempts = 0


class Range(pydantic.BaseModel):
    """Model validators of every mode, and a field validator, that refuse lo > hi."""

    lo: int
    hi: int
    _checked_by: str = pydantic.PrivateAttr(default="nobody")

    @pydantic.field_validator("hi")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("hi < 0")
        return value

    @pydantic.model_validator(mode="before")
    @classmethod
    def _before(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("lo", 0) > data.get("hi", 0):
            raise ValueError("lo > hi (before)")
        return data

    @pydantic.model_validator(mode="wrap")
    @classmethod
    def _wrap(cls, data: Any, handler: pydantic.ModelWrapValidatorHandler[Range]) -> Range:
        model = handler(data)
        if model.lo > model.hi:
            raise ValueError("lo > hi (wrap)")
        return model

    @pydantic.model_validator(mode="after")
    def _after(self) -> Range:
        if self.lo > self.hi:
            raise ValueError("lo > hi (after)")
        return self


class Tagged(pydantic.BaseModel):
    """A normalising validator: every validation appends a suffix."""

    model_config = pydantic.ConfigDict(extra="allow")

    text: str
    count: int = 0

    @pydantic.field_validator("text")
    @classmethod
    def _suffix(cls, value: str) -> str:
        return value + " [checked]"

    def model_post_init(self, context: Any) -> None:
        self.count += 1  # counts constructions


class Span(NamedTuple):
    start: int
    end: int = 0


class Flavour(enum.Enum):
    PLAIN = "plain"
    SPICY = "spicy"


TYPES: tuple[type[Any], ...] = (Budget, Window, Login, Range, Tagged, Span, Flavour)


def allow(storage: CheckpointStore) -> CheckpointStore:
    storage.codec.allow(types=TYPES)
    return storage


TIMESTAMP = "2025-01-01T00:00:00+00:00"


def checkpoint(checkpoint_id: str, workflow: str = "values", **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=workflow,
        graph_signature_hash="sig",
        checkpoint_id=checkpoint_id,
        timestamp=fields.pop("timestamp", TIMESTAMP),
        **fields,
    )


def mutated_values() -> dict[str, Any]:
    """Objects mutated (as applications do) into states their constructors refuse."""
    budget = Budget(limit=5)
    budget.spent = 9
    window = Window(1, 4)
    object.__setattr__(window, "end", 0)
    login = Login("ada", password="correct horse")
    login._attempts = 3
    bounded = Range(lo=1, hi=2)
    bounded.lo = 7
    return {"budget": budget, "window": window, "login": login, "range": bounded, "spans": [Span(2, 1)]}


def model_states() -> dict[str, Any]:
    """Models whose state is more than their fields: set fields, private attributes, extra fields."""
    bounded = Range(lo=1, hi=2)
    bounded._checked_by = "auditor"
    partial = Range.model_construct(lo=3)  # hi never set: only lo in model_fields_set
    tagged = Tagged(text="plan", note=("extra", 1))
    return {"range": bounded, "partial": partial, "tagged": tagged, "flavour": Flavour.SPICY, "span": Span(5)}


def state_of(value: Any) -> Any:
    """Everything an object holds, as pickle would keep it: a plain structure to compare."""
    if isinstance(value, pydantic.BaseModel):
        return (type(value), value.__getstate__())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        slots = {name: getattr(value, name) for name in getattr(type(value), "__slots__", ())}
        return (type(value), {**getattr(value, "__dict__", {}), **slots})
    if isinstance(value, dict):
        return {key: state_of(item) for key, item in value.items()}
    if isinstance(value, list):
        return [state_of(item) for item in value]
    return (type(value), value)


async def reads(storage: CheckpointStore, checkpoint_id: str, workflow: str = "values") -> list[Any]:
    """The checkpoint by every read: load, get_latest, list_checkpoints."""
    loaded = await storage.load(checkpoint_id)
    latest = await storage.get_latest(workflow_name=workflow)
    listed = [
        cp
        for cp in await storage.list_checkpoints(workflow_name=workflow)
        if cp.checkpoint_id == checkpoint_id
    ]
    assert latest is not None
    assert latest.checkpoint_id == checkpoint_id
    return [loaded, latest, *listed]


# ---------------------------------------------------------------------- restored as saved


async def test_objects_their_constructors_would_refuse_load_as_saved(storage: CheckpointStore) -> None:
    allow(storage)
    values = mutated_values()
    await storage.save(
        checkpoint("refused-by-constructors", state=values, messages={"x": [values["budget"]]})
    )
    for read in await reads(storage, "refused-by-constructors"):
        assert state_of(read.state) == state_of(values)
        assert state_of(read.messages["x"][0]) == state_of(values["budget"])
        assert read.state["login"]._attempts == 3  # set by __post_init__, no field: kept as saved


async def test_models_come_back_with_fields_set_private_and_extra_as_saved(storage: CheckpointStore) -> None:
    allow(storage)
    values = model_states()
    await storage.save(checkpoint("model-states", state=values))
    for read in await reads(storage, "model-states"):
        restored = read.state
        assert state_of(restored) == state_of(values)
        assert restored["range"]._checked_by == "auditor"
        assert restored["partial"].model_fields_set == {"lo"}
        assert not hasattr(restored["partial"], "hi")
        assert restored["tagged"].model_extra == {"note": ("extra", 1)}
        assert restored["tagged"].count == 1  # model_post_init did not run again


async def test_normalising_validators_do_not_change_values_save_after_save(storage: CheckpointStore) -> None:
    allow(storage)
    tagged = Tagged(text="plan")
    assert tagged.text == "plan [checked]"
    state: dict[str, Any] = {"tagged": tagged, "span": Span(3, 1)}
    previous: str | None = None
    for cycle in range(3):  # as a runner does: load the latest, save it again under a new id
        checkpoint_id = f"cycle-{cycle}"
        await storage.save(checkpoint(checkpoint_id, previous_checkpoint_id=previous, state=state))
        (loaded, *_) = await reads(storage, checkpoint_id)
        state, previous = loaded.state, checkpoint_id
        assert state["tagged"].text == "plan [checked]"
        assert state["tagged"].count == 1
        assert state_of(state) == state_of({"tagged": tagged, "span": Span(3, 1)})


async def test_a_fresh_handle_reads_objects_as_saved(storage_maker: Callable[[], CheckpointStore]) -> None:
    values = {**model_states(), **mutated_values()}
    async with storage_maker() as writer:
        await allow(writer).save(checkpoint("fresh-handle", state=values))
    async with storage_maker() as reader:
        loaded = await allow(reader).load("fresh-handle")
    assert state_of(loaded.state) == state_of(values)


# ---------------------------------------------------------------------- refused at save, not at load


class Brittle:
    """Stored through hooks whose decode refuses what its encode wrote."""

    def __init__(self, value: int) -> None:
        self.value = value


def _brittle_decode(state: Any) -> Brittle:
    if state < 0:
        raise ValueError("negative")
    return Brittle(state)


class NotANumber(enum.Enum):
    """A member no load can find again: NaN is not equal to itself."""

    MISSING = math.nan


@dataclasses.dataclass
class Restoring:
    """Its own __setstate__ refuses what its __getstate__ gives for some states."""

    value: int

    def __getstate__(self) -> dict[str, int]:
        return {"value": self.value}

    def __setstate__(self, state: dict[str, int]) -> None:
        if state["value"] > 100:
            raise ValueError("too large to restore")
        self.value = state["value"]


def deep_list(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


async def test_a_value_a_load_would_refuse_is_refused_at_save_naming_it(storage: CheckpointStore) -> None:
    allow(storage)
    storage.codec.allow(types=[NotANumber, Restoring])
    storage.codec.register(Brittle, encode=lambda brittle: brittle.value, decode=_brittle_decode)
    cases = [
        ({"orders": [0, 1, 2, {"customer": Brittle(-1)}]}, "checkpoint.state['orders'][3]['customer']"),
        ({"flag": NotANumber.MISSING}, "checkpoint.state['flag']"),
        ({"restored": [Restoring(101)]}, "checkpoint.state['restored'][0]"),
        ({"deep": deep_list(MAX_NESTING)}, "checkpoint.state['deep']"),
    ]
    for index, (state, path) in enumerate(cases):
        with pytest.raises(UnserializableValueError) as refused:
            await storage.save(checkpoint(f"refused-{index}", state=state))
        assert refused.value.path.startswith(path), refused.value
        assert await storage.list_checkpoint_ids(workflow_name="values") == []
    # The same types in states a load takes are stored and read back.
    await storage.save(
        checkpoint("accepted", state={"b": Brittle(1), "r": Restoring(5), "deep": deep_list(MAX_NESTING - 4)})
    )
    loaded = await storage.load("accepted")
    assert loaded.state["b"].value == 1
    assert loaded.state["r"] == Restoring(5)


async def _from_deep_calls(levels: int, read: Callable[[], Any]) -> Any:
    """``await read()`` from ``levels`` coroutine frames down (a runner's stack)."""
    if levels == 0:
        return await read()
    return await _from_deep_calls(levels - 1, read)


async def test_a_deep_value_saved_loads_from_deep_inside_a_runner(storage: CheckpointStore) -> None:
    value = deep_list(MAX_NESTING - 4)  # the record, its state, the key: the deepest a state may hold
    await storage.save(checkpoint("deep", state={"deep": value}))
    loaded = await _from_deep_calls(700, lambda: storage.load("deep"))
    assert loaded.state["deep"] == value
    latest = await _from_deep_calls(700, lambda: storage.get_latest(workflow_name="values"))
    assert latest is not None
    assert latest.state["deep"] == value


# ---------------------------------------------------------------------- re-saves compare types


@dataclasses.dataclass
class Plain:
    value: int


@dataclasses.dataclass
class Twin:
    value: int


@dataclasses.dataclass(eq=False)
class Identity:
    """Compares by identity: two equal states are never == to each other."""

    value: int


class Priority(enum.IntEnum):
    LOW = 1


def _with_attributes(plain: Plain, **attributes: Any) -> Plain:
    plain.__dict__.update(attributes)
    return plain


UTC_NOON = dt.datetime(2025, 1, 1, 12, tzinfo=dt.UTC)

RESAVE_CONFLICTS: list[tuple[str, Any, Any]] = [
    ("bool over int", 1, True),
    ("float over int", 1, 1.0),
    ("int over float", 1.0, 1),
    ("list over tuple", (1, 2), [1, 2]),
    ("frozenset over set", {1, 2}, frozenset({1, 2})),
    ("-0.0 over 0.0", 0.0, -0.0),
    ("NaN over a number", 1.5, math.nan),
    ("the same instant at another offset", UTC_NOON, UTC_NOON.astimezone(dt.timezone(dt.timedelta(hours=1)))),
    ("a Decimal of another precision", Decimal("1.0"), Decimal("1.00")),
    ("a bool key over an int key", {1: "a"}, {True: "a"}),
    ("a float key over an int key", {1: "a"}, {1.0: "a"}),
    ("a str key over an int key", {1: "a"}, {"1": "a"}),
    ("an IntEnum member over its int", 1, Priority.LOW),
    ("an object with another attribute", Plain(1), _with_attributes(Plain(1), note=True)),
    ("an object of another class", Plain(1), Twin(1)),
    ("an object in another state", Plain(1), Plain(2)),
    ("a bool deep inside", {"a": [{"b": (1, {2})}]}, {"a": [{"b": (True, {2})}]}),
]
"""(what, stored, saved again): different values to the codec, most of them equal by ``==``."""

RESAVE_EQUAL: list[tuple[str, Any, Any]] = [
    ("NaN", math.nan, float("nan")),
    ("a set built in another order", {"a", "b", "c"}, {"c", "b", "a"}),
    ("a dict built in another order", {"x": 1, "y": 2}, {"y": 2, "x": 1}),
    ("an object compared by identity", Identity(3), Identity(3)),
    (
        "an object whose attributes were set in another order",
        _with_attributes(Plain(1), note=0),
        _with_attributes(Plain.__new__(Plain), note=0, value=1),
    ),
]
"""(what, stored, saved again): the same value to the codec, whether stored alike or not."""


async def test_resaving_an_id_compares_values_as_the_codec_stores_them(storage: CheckpointStore) -> None:
    allow(storage)
    storage.codec.allow(types=[Plain, Twin, Identity, Priority])
    for index, (what, stored, again) in enumerate(RESAVE_CONFLICTS):
        checkpoint_id = f"conflict-{index}"
        await storage.save(checkpoint(checkpoint_id, workflow=f"conflict-{index}", state={"x": stored}))
        try:
            await storage.save(checkpoint(checkpoint_id, workflow=f"conflict-{index}", state={"x": again}))
        except CheckpointConflictError:
            pass
        else:
            pytest.fail(f"re-saving {what} over it was taken as the stored value")
        kept = await storage.load(checkpoint_id)
        assert storage.codec.same_value(kept.state["x"], stored), what
    for index, (what, stored, again) in enumerate(RESAVE_EQUAL):
        checkpoint_id = f"equal-{index}"
        first = checkpoint(checkpoint_id, workflow=f"equal-{index}", state={"x": stored})
        assert await storage.save(first) == checkpoint_id
        returned = await storage.save(
            checkpoint(checkpoint_id, workflow=f"equal-{index}", state={"x": again})
        )
        assert returned == checkpoint_id, what
        assert await storage.list_checkpoint_ids(workflow_name=f"equal-{index}") == [checkpoint_id]


async def test_resaving_a_nested_checkpoint_compares_its_values_as_stored(storage: CheckpointStore) -> None:
    def container(inner_value: Any, inner_class: type[Any] = WorkflowCheckpoint) -> Any:
        inner = inner_class(
            workflow_name="child",
            graph_signature_hash="sig",
            checkpoint_id="embedded",
            timestamp=TIMESTAMP,
            state={"n": inner_value},
        )
        return checkpoint("parent", state={"_executor_state": {"sub": {"sub_workflow_checkpoint": inner}}})

    await storage.save(container(1))
    for changed in (container(True), container(1.0), container(1, MafWorkflowCheckpoint)):
        with pytest.raises(CheckpointConflictError):
            await storage.save(changed)
    assert await storage.save(container(1)) == "parent"
    loaded = await storage.load("parent")
    assert type(loaded.state["_executor_state"]["sub"]["sub_workflow_checkpoint"].state["n"]) is int


async def test_concurrent_equal_resaves_stay_no_ops(storage: CheckpointStore) -> None:
    first = checkpoint("retried", state={"members": {"a", "b", "c", "d"}, "when": UTC_NOON})
    await storage.save(first)
    again = [
        checkpoint("retried", state={"members": {"d", "c", "b", "a"}, "when": UTC_NOON}) for _ in range(4)
    ]
    assert await asyncio.gather(*(storage.save(cp) for cp in again)) == ["retried"] * 4
