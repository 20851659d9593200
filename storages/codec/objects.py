"""Allow-listed objects travel as pickle keeps them: their state, never their constructor.

MAF's own storages pickle such values, and pickle rebuilds an object without calling its class:
it creates the instance with ``__new__`` and restores the state it saved, through the class's own
``__setstate__`` if it has one, else attribute by attribute. So a dataclass whose
``__post_init__``, or a pydantic model whose validator, would reject the state an object was
later mutated into still loads, and a normalising validator does not change the value on every
cycle: what is saved is what comes back. This module is that rule for the codec's three kinds of
object: dataclasses, pydantic models and NamedTuples (enums travel by value, a class registered
with hooks through its hooks).

The state is pickle's: a dataclass's ``__dict__`` with its slot values (fields, ``init=False``
fields, attributes ``__post_init__`` set, and nothing for a field never assigned), or what its own
``__getstate__`` returns; a model's fields, ``model_fields_set``, extra fields and private
attributes; a NamedTuple's items (and the state of a subclass that has one). A class's
``__reduce__`` is not followed (it would name a callable): such a class is stored by its state
like any other, or registered with hooks.

The forms, after the type key, in the extension's contents (part of the stored format):

* dataclass: ``[key, attrs]`` (restored as they are: a slot's value through the slot, the rest
  into ``__dict__``), or ``[key, None, state]`` (the class's own ``__setstate__(state)``);
* NamedTuple: ``[key, items]``, then ``attrs`` or ``None, state`` as above when it has state;
* pydantic model: ``[key, attrs]`` (fields and extra fields in one map, every field set, no private
  attribute: the form every release wrote), ``[key, fields, fields_set, extra, private]``, or
  ``[key, None, state]`` (a model with its own ``__getstate__`` or ``__setstate__``).

Rebuilding names no class and touches no attribute but the ones the state names: a slot of the
class, or an entry of the instance's ``__dict__``. Where a rebuild runs the class's own code (its
``__setstate__`` or ``__new__``), the encoder rebuilds the value once from the bytes it wrote, so
a save refuses what a load would refuse (storages/codec/registry.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any, Final

from .vocabulary import Undecodable, Unencodable

_PYDANTIC_STATE: Final = ("__dict__", "__pydantic_extra__", "__pydantic_fields_set__", "__pydantic_private__")
"""The keys of the state pydantic's ``BaseModel.__getstate__`` returns and its ``__setstate__`` takes."""
_PYDANTIC_STATE_KEYS: Final = frozenset(_PYDANTIC_STATE)
_DATACLASS_STATE_FUNCTIONS: Final = frozenset({"_dataclass_getstate", "_dataclass_setstate"})
"""What ``dataclass(frozen=True, slots=True)`` adds: field by field, as the default restore."""


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectShape:
    """How one class's instances are stored and rebuilt (computed once per class)."""

    cls: type[Any]
    slots: dict[str, Any]
    """Slot name -> its descriptor, for every slot of the class and its bases."""
    has_dict: bool
    """Instances have a ``__dict__``."""
    own_getstate: Callable[[Any], Any] | None
    """The class's ``__getstate__`` when it is not the default one (object's, the one dataclasses
    generate, or pydantic's for a model)."""
    own_setstate: Callable[[Any, Any], None] | None
    """The class's ``__setstate__`` likewise."""
    new: Callable[..., Any]
    """``__new__`` of the class: object's, unless the class defines its own."""
    runs_class_code: bool
    """A rebuild calls code of the class (its ``__new__`` or ``__setstate__``), which may refuse."""
    model: ModelShape | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ModelShape:
    """The pydantic side of a model's shape."""

    fields: frozenset[str]
    allows_extra: bool
    private: dict[str, Any]
    """Private attribute name -> its ``ModelPrivateAttr``."""
    setstate: Callable[[Any, Any], None]
    """The model's ``__setstate__``: pydantic's, or the model's own."""


_SHAPES: dict[type[Any], ObjectShape] = {}


def object_shape(cls: type[Any]) -> ObjectShape:
    """The shape of a dataclass, NamedTuple or pydantic model class."""
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = _shape_of(cls)
    return shape


def _shape_of(cls: type[Any]) -> ObjectShape:
    model = _is_model(cls)
    getstate = _own(cls, "__getstate__", model)
    setstate = _own(cls, "__setstate__", model)
    new_definer = _definer(cls, "__new__")
    own_new = new_definer is not None and new_definer is not object and not issubclass(cls, tuple)
    new: Callable[..., Any] = cls.__new__ if own_new else object.__new__
    model_shape = None
    if model:
        model_shape = ModelShape(
            fields=frozenset(cls.model_fields),
            allows_extra=cls.model_config.get("extra") == "allow",
            private=dict(getattr(cls, "__private_attributes__", None) or {}),
            setstate=cls.__setstate__,
        )
    return ObjectShape(
        cls=cls,
        slots=_slot_descriptors(cls),
        has_dict=cls.__dictoffset__ != 0,
        own_getstate=getstate,
        own_setstate=setstate,
        new=new,
        # A model's state given to pydantic's __setstate__ runs no code of the model's, unless its
        # own __getstate__ made that state.
        runs_class_code=own_new or setstate is not None or (model and getstate is not None),
        model=model_shape,
    )


def _is_model(cls: type[Any]) -> bool:
    return any(_is_pydantic_base(klass) for klass in cls.__mro__)


def _is_pydantic_base(klass: type[Any]) -> bool:
    return klass.__module__ == "pydantic.main" and klass.__qualname__ == "BaseModel"


def _definer(cls: type[Any], name: str) -> type[Any] | None:
    """The class of ``cls``'s MRO whose namespace defines ``name``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def _own(cls: type[Any], name: str, model: bool) -> Any:
    """The class's ``name`` (``__getstate__`` / ``__setstate__``) if it is not a default one."""
    definer = _definer(cls, name)
    if definer is None or definer is object or (model and _is_pydantic_base(definer)):
        return None
    function = vars(definer)[name]
    if getattr(function, "__module__", None) == "dataclasses" and (
        getattr(function, "__qualname__", None) in _DATACLASS_STATE_FUNCTIONS
    ):
        return None
    return getattr(cls, name)


def _slot_descriptors(cls: type[Any]) -> dict[str, Any]:
    slots: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, attribute in vars(klass).items():
            if isinstance(attribute, types.MemberDescriptorType) and attribute.__objclass__ is klass:
                slots[name] = attribute
    return slots


# ---------------------------------------------------------------------- saving


def default_state(value: Any, shape: ObjectShape) -> dict[Any, Any]:
    """The state pickle's default ``__getstate__`` keeps: ``__dict__`` and the slots that are set,
    as one map (the live ``__dict__`` itself when there are no slots)."""
    instance_dict = object.__getattribute__(value, "__dict__") if shape.has_dict else None
    if not shape.slots:
        return instance_dict if instance_dict is not None else {}
    attrs: dict[Any, Any] = dict(instance_dict) if instance_dict else {}
    for name, descriptor in shape.slots.items():
        try:
            attrs[name] = descriptor.__get__(value)
        except AttributeError:  # a slot never assigned stays unassigned
            continue
    return attrs


def _pickle_state(value: Any, shape: ObjectShape) -> Any:
    """What pickle's default ``__getstate__`` returns: ``__dict__`` (None if empty), or with slots
    set, the pair (that, the map of slots)."""
    instance_dict = object.__getattribute__(value, "__dict__") if shape.has_dict else None
    state = instance_dict or None
    if shape.slots:
        slots = {name: item for name, item in default_state(value, shape).items() if name in shape.slots}
        if slots:
            return (state, slots)
    return state


def state_tail(value: Any, shape: ObjectShape) -> list[Any]:
    """The state part of a form: ``[attrs]``, or ``[None, state]`` for the class's own
    ``__setstate__``."""
    getstate, setstate = shape.own_getstate, shape.own_setstate
    if setstate is not None:
        state = getstate(value) if getstate is not None else _pickle_state(value, shape)
        # pickle calls __setstate__ only for a state that is not None.
        return [{}] if state is None else [None, state]
    if getstate is None:
        return [default_state(value, shape)]
    return [_attrs_of_state(value, getstate(value))]


def _attrs_of_state(value: Any, state: Any) -> dict[Any, Any]:
    """A custom ``__getstate__``'s state as pickle's default restore takes it: None, a map of
    attributes, or a pair (map or None, map of slots)."""
    if state is None:
        return {}
    if type(state) is dict:
        return state
    if type(state) is tuple and len(state) == 2:
        attributes, slots = state
        if (attributes is None or type(attributes) is dict) and (slots is None or type(slots) is dict):
            return {**(attributes or {}), **(slots or {})}
    raise Unencodable(
        value,
        f"its __getstate__ returns a {type(state).__name__}, which only a __setstate__ of its own "
        "could restore (pickle's default restore takes None, a dict, or a pair of dicts); define one",
    )


def model_form(value: Any, shape: ObjectShape) -> list[Any]:
    """A pydantic model's form after its key: ``[attrs]``, ``[fields, fields_set, extra,
    private]`` or ``[None, state]``."""
    if shape.own_getstate is not None or shape.own_setstate is not None:
        return [None, value.__getstate__()]
    state = value.__getstate__()
    if type(state) is not dict or state.keys() != _PYDANTIC_STATE_KEYS:  # pragma: no cover - another pydantic
        return [None, state]
    fields = state["__dict__"]
    extra = state["__pydantic_extra__"]
    fields_set = state["__pydantic_fields_set__"]
    private = state["__pydantic_private__"]
    model = shape.model
    assert model is not None
    if private is None and fields.keys() <= model.fields:
        if not extra:
            if fields_set == fields.keys():
                return [fields]
        elif fields_set == fields.keys() | extra.keys() and extra.keys().isdisjoint(fields):
            return [{**fields, **extra}]
    try:
        names: list[Any] = sorted(fields_set)  # a set's order varies by process; a body should not
    except TypeError:
        names = list(fields_set)
    return [fields, names, extra, private]


def namedtuple_form(value: Any, shape: ObjectShape) -> list[Any]:
    """A NamedTuple's form after its key: ``[items]`` and any state."""
    items = list(value)
    if not shape.has_dict and shape.own_getstate is None:
        return [items]  # a NamedTuple proper: __slots__ = (), nothing but its items
    tail = state_tail(value, shape)
    return [items] if tail == [{}] else [items, *tail]


# ---------------------------------------------------------------------- loading


def rebuild(shape: ObjectShape, key: str, tail: list[Any], instance: Any = None) -> Any:
    """An instance of ``shape.cls`` (or ``instance``) given a dataclass's state part: ``[attrs]``
    or ``[None, state]``."""
    obj = shape.new(shape.cls) if instance is None else instance
    if len(tail) == 1:
        restore_attrs(obj, tail[0], shape, key)
    elif len(tail) == 2 and tail[0] is None:
        setstate = shape.own_setstate
        if setstate is None:
            raise Undecodable(f"{key} was stored with a state for __setstate__, which it does not define")
        setstate(obj, tail[1])
    else:
        raise Undecodable(f"{key} is not stored in a form of this format")
    return obj


def restore_attrs(obj: Any, attrs: Any, shape: ObjectShape, key: str) -> None:
    """Set each stored attribute as it is: a slot through its descriptor, anything else into the
    instance's ``__dict__``; nothing else is looked up."""
    if type(attrs) is not dict:
        raise Undecodable(f"{key}'s attributes are a {type(attrs).__name__}, not a map")
    if not shape.slots and shape.has_dict:
        object.__setattr__(obj, "__dict__", attrs)  # a fresh map from the decoder: kept as it is
        return
    instance_dict = object.__getattribute__(obj, "__dict__") if shape.has_dict else None
    for name, value in attrs.items():
        descriptor = shape.slots.get(name) if type(name) is str else None
        if descriptor is not None:
            descriptor.__set__(obj, value)
        elif instance_dict is not None:
            instance_dict[name] = value
        else:
            raise Undecodable(f"{key} has no slot {name!r}")


def rebuild_namedtuple(shape: ObjectShape, key: str, wire: list[Any]) -> Any:
    """A NamedTuple from ``[items, *state]``, without its class's ``__new__``."""
    items = wire[0]
    if type(items) is not list or len(items) != len(shape.cls._fields):
        raise Undecodable(f"{key} is not a NamedTuple of {len(shape.cls._fields)} fields")
    obj = tuple.__new__(shape.cls, items)
    if len(wire) > 1:
        rebuild(shape, key, wire[1:], obj)
    return obj


def rebuild_model(shape: ObjectShape, key: str, wire: list[Any]) -> Any:
    """A pydantic model from its form, through ``__setstate__`` as pickle rebuilds it: no
    validator, ``model_post_init`` or default factory of a field runs."""
    model = shape.model
    assert model is not None
    obj = shape.new(shape.cls)
    if len(wire) == 2 and wire[0] is None:
        model.setstate(obj, wire[1])
        return obj
    if len(wire) == 1:
        state = _state_of_attrs(model, key, wire[0])
    elif len(wire) == 4:
        fields, names, extra, private = wire
        if (
            type(fields) is not dict
            or type(names) is not list
            or not (extra is None or type(extra) is dict)
            or not (private is None or type(private) is dict)
        ):
            raise Undecodable(f"{key} is not stored as a model's state")
        state = {
            "__dict__": fields,
            "__pydantic_extra__": extra,
            "__pydantic_fields_set__": set(names),
            "__pydantic_private__": private,
        }
    else:
        raise Undecodable(f"{key} is not stored in a form of this format")
    model.setstate(obj, state)
    return obj


def _state_of_attrs(model: ModelShape, key: str, attrs: Any) -> dict[str, Any]:
    """The state of the one-map form: fields and extra fields, every one of them set."""
    if type(attrs) is not dict:
        raise Undecodable(f"{key}'s fields are a {type(attrs).__name__}, not a map")
    if attrs.keys() <= model.fields:
        fields, extra = attrs, {}
    else:
        fields = {name: value for name, value in attrs.items() if name in model.fields}
        extra = {name: value for name, value in attrs.items() if name not in model.fields}
        if not model.allows_extra:
            raise Undecodable(f"{key} has no fields {sorted(map(str, extra))}")
    return {
        "__dict__": fields,
        "__pydantic_extra__": extra if model.allows_extra else None,
        "__pydantic_fields_set__": set(attrs),
        "__pydantic_private__": _private_defaults(model, fields),
    }


def _private_defaults(model: ModelShape, fields: dict[str, Any]) -> dict[str, Any] | None:
    """Private attributes as pydantic gives a new model them (the one-map form stores none)."""
    if not model.private:
        return None
    from pydantic_core import PydanticUndefined

    private: dict[str, Any] = {}
    for name, attribute in model.private.items():
        if "call_default_factory" not in inspect.signature(attribute.get_default).parameters:
            default = attribute.get_default()  # pydantic before 2.10 calls the factory itself
        elif getattr(attribute, "default_factory_takes_validated_data", False):
            default = attribute.get_default(call_default_factory=True, validated_data={**fields, **private})
        else:
            default = attribute.get_default(call_default_factory=True)
        if default is not PydanticUndefined:
            private[name] = default
    return private


# ---------------------------------------------------------------------- locating


def object_parts(value: Any) -> Iterator[tuple[str, Any]]:
    """The parts of an object the codec stores, with the step that names each in a path."""
    shape = object_shape(type(value))
    if isinstance(value, tuple):
        for index, item in enumerate(value):
            yield f"[{index}]", item
        if not shape.has_dict and shape.own_getstate is None:
            return
    if shape.own_getstate is not None or (shape.model is not None and shape.own_setstate is not None):
        yield ".__getstate__()", value.__getstate__()
        return
    if shape.model is not None:
        state = value.__getstate__()
        for name, item in (state.get("__dict__") or {}).items():
            yield f".{name}", item
        for part in ("__pydantic_extra__", "__pydantic_private__"):
            for name, item in (state.get(part) or {}).items():
                yield f".{name}", item
        return
    for name, item in default_state(value, shape).items():
        yield f".{name}", item
