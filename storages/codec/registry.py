"""The codec's allow-list: which types it may store and read, and how each registered type reduces.

A class becomes storable by registration (``allowed_types``, :meth:`TypeRegistry.register`), by an
allowed module, by a plug-in's runner registry (MAF's ``register_checkpoint_type``) or, on stores
whose bytes never leave the process, by trust. See storages/allowlist.py for the exact rules.

The registry is a component of CheckpointCodec, shared by its encoding (reducers), its decoding
(:meth:`TypeRegistry.registered_class`, :meth:`TypeRegistry.checkpoint_class`) and its fidelity
checks; it knows nothing of how checkpoints are framed or embedded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ..allowlist import TypeNotResolvable, module_allowed, normalise_modules, resolve_exact_class, split_key
from ..contract import CHECKPOINT_FIELDS, WorkflowCheckpoint
from .objects import ObjectShape, model_form, namedtuple_form, object_shape, state_tail
from .plugins import CodecPlugin
from .values import (
    BUILTIN_REDUCERS,
    EXT_CUSTOM,
    EXT_DATACLASS,
    EXT_ENUM,
    EXT_NAMEDTUPLE,
    EXT_PYDANTIC,
    Nesting,
    Packer,
    Reducer,
)
from .vocabulary import (
    CustomType,
    Registration,
    TypeNotAllowed,
    TypeRef,
    Undecodable,
    Unencodable,
    check_key_syntax,
    field_names,
    kind_of,
    type_key,
    unregistered_hint,
)

NATIVE_CHECKPOINT_TAG = "native"


class Rebuilds(Protocol):
    """What a reducer asks of the codec's save-time checks (storages/codec/fidelity.py): to rebuild
    what it just wrote as a load would, for values whose rebuild runs code of their class."""

    def try_rebuild(self, code: int, data: bytes, value: Any, tree: Nesting | None) -> None:
        """Rebuild ``value`` from ``data`` (its extension's contents, written for ``tree`` if the
        packer packs for one) as a load would; raise Unencodable, naming the value, if that fails."""

    def try_member(self, member: Any) -> None:
        """Find enum ``member`` again from its stored value as a load would, or raise Unencodable."""


class TypeRegistry:
    """Registrations, checkpoint classes and the reducers of registered types, for one codec."""

    def __init__(
        self, *, allowed_modules: Iterable[str], trust_saved_types: bool, plugins: tuple[CodecPlugin, ...]
    ) -> None:
        self._allowed_modules = normalise_modules(allowed_modules)
        self._trust_saved_types = trust_saved_types
        self._plugins = plugins
        self._by_key: dict[str, Registration] = {}
        self.reducers: dict[type[Any], Reducer] = dict(BUILTIN_REDUCERS)
        """Type -> reducer of one value: the built-in ones, and registered types as they are first
        met (:meth:`reducer_for`). The packers read it directly, one lookup per value."""
        self.checkpoint_tags: dict[type[Any], str] = {WorkflowCheckpoint: NATIVE_CHECKPOINT_TAG}
        """Checkpoint class -> the tag its records carry (read in line by every encode)."""
        self.checkpoint_classes: dict[str, type[Any]] = {NATIVE_CHECKPOINT_TAG: WorkflowCheckpoint}
        """Tag -> the checkpoint class a load gives back."""
        self._builtin_type_keys: frozenset[str] = frozenset()

    def register(
        self,
        type_ref: TypeRef,
        *,
        encode: Callable[[Any], Any] | None = None,
        decode: Callable[[Any], Any] | None = None,
    ) -> None:
        """Allow a type. Enums, dataclasses and pydantic models need no hooks; any other class
        needs ``encode`` (to a codec-encodable value) and ``decode`` (back to the object)."""
        if (encode is None) != (decode is None):
            raise TypeError("give both encode and decode, or neither")
        custom = CustomType(encode, decode) if encode is not None and decode is not None else None
        if isinstance(type_ref, str):
            check_key_syntax(type_ref)
            registration = Registration(type_ref, None, custom)
        elif isinstance(type_ref, type):
            registration = Registration(type_key(type_ref), type_ref, custom)
            if custom is None:
                kind_of(type_ref)  # fail now, not at save time, for a class we cannot store
        else:
            raise TypeError(f"expected a class or 'module:qualname', got {type_ref!r}")
        self._by_key[registration.key] = registration
        if registration.cls is not None:
            self.reducers.pop(registration.cls, None)

    def register_checkpoint_class(self, cls: type[Any]) -> None:
        """Accept another class with the 11 checkpoint fields and give it back on load."""
        missing = [name for name in CHECKPOINT_FIELDS if name not in field_names(cls)]
        if missing:
            raise TypeError(f"{type_key(cls)} lacks checkpoint fields {missing}")
        self._add_checkpoint_class(cls, type_key(cls))

    def _add_checkpoint_class(self, cls: type[Any], tag: str) -> None:
        self.checkpoint_tags[cls] = tag
        self.checkpoint_classes[tag] = cls
        # The codec reduces checkpoints itself; a reducer cached for ``cls`` as a value type goes.
        self.reducers.pop(cls, None)

    def checkpoint_tag(self, cls: type[Any]) -> str | None:
        """The tag records of checkpoint class ``cls`` carry, asking plug-ins about a class not
        registered; None if ``cls`` is no checkpoint class this codec knows."""
        tag = self.checkpoint_tags.get(cls)
        if tag is None:
            for plugin in self._plugins:
                tag = plugin.checkpoint_tag(cls)
                if tag is not None:
                    self._add_checkpoint_class(cls, tag)
                    break
        return tag

    def _implicit_registration(self, key: str, cls: type[Any] | None = None) -> Registration | None:
        """Register ``key`` if an allowance covers it: a plug-in's runner registry, an allowed
        module, or (given the class at save, with ``trust_saved_types``) trust.

        At save (``cls`` given) a key allowed by name must find ``cls`` again by that exact name,
        so that a fresh process reading the body resolves the same class.
        """
        try:
            module_name, _ = split_key(key)
        except ValueError:
            return None
        by_name = any(plugin.runner_allows(key) for plugin in self._plugins) or module_allowed(
            module_name, self._allowed_modules
        )
        if by_name and cls is not None:
            try:
                by_name = resolve_exact_class(key) is cls
            except TypeNotResolvable:
                by_name = False
        if by_name:
            self.register(key)
        elif cls is not None and self._trust_saved_types:
            self._by_key[key] = Registration(key, cls)
        else:
            return None
        return self._by_key[key]

    def count_registered_as_builtin(self) -> None:
        """Leave the types registered so far (plug-ins' own) out of :attr:`allowed_type_keys`."""
        self._builtin_type_keys = frozenset(self._by_key)

    @property
    def allowed_type_keys(self) -> frozenset[str]:
        """Keys of the types allowed beyond the built-in ones (plug-ins' types, MAF's when installed)."""
        return frozenset(self._by_key) - self._builtin_type_keys

    @property
    def allowed_modules(self) -> tuple[str, ...]:
        return self._allowed_modules

    def allow_modules(self, modules: Iterable[str]) -> None:
        """Extend the allow-list by more modules (as ``allowed_modules``)."""
        self._allowed_modules = (*self._allowed_modules, *normalise_modules(modules))

    def allowed_class(self, key: str, cls: type[Any] | None = None) -> type[Any] | None:
        """The class ``key`` names if this codec may name it in a body, else None.

        For references to classes (a pending request's type) rather than values of them: with
        ``cls`` (at save) the allowances are checked for that class, without it (at load) the key
        is resolved exactly, importing its module only when the key is allowed.
        """
        registration = self._by_key.get(key) or self._implicit_registration(key, cls)
        if registration is None:
            return None
        if cls is not None:
            return cls if registration.cls in (None, cls) else None
        try:
            return registration.resolve()
        except TypeNotResolvable:
            return None

    def registered_class(self, key: Any) -> tuple[type[Any], Registration]:
        """The class a stored type key names and its registration, for a load: raises
        TypeNotAllowed for a key the allow-list does not cover or that does not resolve."""
        if not isinstance(key, str):
            raise Undecodable(f"a type key is {type(key).__name__}, not str")
        registration = self._by_key.get(key) or self._implicit_registration(key)
        if registration is None:
            raise TypeNotAllowed(key, "it is not on this storage's allow-list")
        try:
            return registration.resolve(), registration
        except TypeNotResolvable as exc:
            raise TypeNotAllowed(key, str(exc)) from None

    def checkpoint_class(self, tag: Any) -> type[Any]:
        """The checkpoint class a stored record's tag names, asking plug-ins about a tag not
        registered; raises Undecodable for a tag no one knows."""
        cls = self.checkpoint_classes.get(tag)
        if cls is not None:
            return cls
        for plugin in self._plugins:
            cls = plugin.checkpoint_class(tag) if isinstance(tag, str) else None
            if cls is not None:
                self._add_checkpoint_class(cls, tag)
                return cls
        raise Undecodable(f"checkpoint class {tag!r} is not registered with this storage's codec")

    def reducer_for(
        self, cls: type[Any], value: Any, *, reduce_checkpoint: Reducer, rebuilds: Rebuilds
    ) -> Reducer:
        """The reducer of ``cls`` (``value`` is one of its values, named if it is refused),
        remembered in :attr:`reducers`: ``reduce_checkpoint`` for a checkpoint class, else the
        registered type's, whose ``rebuilds`` checks at save what a load would run of the class's
        code. Raises Unencodable for a class the allow-list does not cover."""
        if self.checkpoint_tag(cls) is not None:
            self.reducers[cls] = reduce_checkpoint
            return reduce_checkpoint
        key = type_key(cls)
        registration = self._by_key.get(key) or self._implicit_registration(key, cls)
        if registration is None:
            raise Unencodable(value, unregistered_hint(cls))
        if registration.cls is None:
            # Allowed by name: the name must lead a reader back to this very class.
            try:
                found: type[Any] | None = resolve_exact_class(key)
            except TypeNotResolvable:
                found = None
            if found is not cls:
                raise Unencodable(
                    value,
                    f"it is allowed as {key!r}, but that name does not lead back to this class "
                    "(a class defined inside a function, or replaced after import), so no reader could "
                    "load it; define it at module level",
                )
            registration.cls = cls
        elif registration.cls is not cls:
            raise Unencodable(value, "another class is registered under the same 'module:qualname'")
        try:
            reducer = _reducer_of(registration, rebuilds)
        except TypeError as exc:
            # Registered by "module:qualname" without hooks, and not an enum, dataclass or model.
            raise Unencodable(value, str(exc)) from None
        self.reducers[cls] = reducer
        return reducer


def _reducer_of(registration: Registration, rebuilds: Rebuilds) -> Reducer:
    key = registration.key
    custom = registration.custom
    if custom is not None:
        hook = custom.encode

        def reduce_custom(value: Any, packer: Packer) -> Any:
            data = packer.pack([key, hook(value)])
            rebuilds.try_rebuild(EXT_CUSTOM, data, value, packer.tree)  # the decode hook is the class's code
            return packer.ext(EXT_CUSTOM, data)

        return reduce_custom
    cls = registration.resolve()
    kind = kind_of(cls)
    if kind == EXT_ENUM:
        return _enum_reducer(key, rebuilds)
    shape = object_shape(cls)
    if not shape.runs_class_code and shape.own_getstate is None and not shape.slots:
        # The common objects, in one call each: a dataclass's __dict__ as it is, a NamedTuple's
        # items (what state_tail and namedtuple_form give for them).
        if kind == EXT_DATACLASS and shape.has_dict:
            return lambda value, packer: packer.ext(
                EXT_DATACLASS, packer.pack([key, _instance_dict(value, "__dict__")])
            )
        if kind == EXT_NAMEDTUPLE and not shape.has_dict:
            return lambda value, packer: packer.ext(EXT_NAMEDTUPLE, packer.pack([key, list(value)]))
    form = _FORMS[kind]

    def reduce_object(value: Any, packer: Packer) -> Any:
        data = packer.pack([key, *form(value, shape)])
        if shape.runs_class_code:
            rebuilds.try_rebuild(kind, data, value, packer.tree)
        return packer.ext(kind, data)

    return reduce_object


_instance_dict = object.__getattribute__

_FORMS: dict[int, Callable[[Any, ObjectShape], list[Any]]] = {
    EXT_DATACLASS: state_tail,
    EXT_NAMEDTUPLE: namedtuple_form,
    EXT_PYDANTIC: model_form,
}
"""Each object kind's form after its key, by its extension code (storages/codec/objects.py)."""


def _enum_reducer(key: str, rebuilds: Rebuilds) -> Reducer:
    """An enum member travels by its value and is found again by it (``cls(value)``, as pickle
    does): each member is tried once, the first time it is stored, so a member its value cannot
    find again (a NaN value) is refused at save, not at every load."""
    found_again: set[int] = set()  # ids of members: they live as long as their class

    def reduce_enum(value: Any, packer: Packer) -> Any:
        if id(value) not in found_again:
            rebuilds.try_member(value)
            found_again.add(id(value))
        return packer.ext(EXT_ENUM, packer.pack([key, value.value]))

    return reduce_enum
