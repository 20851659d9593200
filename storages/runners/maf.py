"""Microsoft Agent Framework integration: the MAF types a real run puts in its checkpoints.

A MAF run saves more than plain data. ``messages`` holds ``WorkflowMessage`` dataclasses (with a
``MessageType`` enum), and a human-in-the-loop pause keeps ``WorkflowEvent`` objects in
``pending_request_info_events`` and inside response messages. Without these the safe codec refuses
the checkpoint, and MAF's runner only logs a warning when a save fails, so checkpoints would go
missing silently. Every :class:`~storages.codec.CheckpointCodec` therefore allows them, by
``"module:qualname"``, through the codec plug-in this module registers when imported (``import
storages`` imports it; the codec itself knows nothing of MAF). Nothing here imports
``agent_framework`` until a checkpoint that holds one of these types is saved or loaded, so
``import storages`` never imports MAF.

``WorkflowEvent`` is neither a dataclass nor a model, so it travels through encode/decode hooks.
Its request and response types are stored by name and resolved on load only to built-in value
types and types on the codec's allow-list; any other type is refused at save time, so a saved
checkpoint always loads back.

The MAF types allowed are exactly those listed in storages/allowlist.py (the ones MAF's runner and
executors write); an ``AgentExecutor``'s ``Message`` and ``Content`` objects travel through MAF's
own ``to_dict``/``from_dict``. No other class of the package is resolved from a stored body.

Application types registered with MAF's ``register_checkpoint_type`` are honoured too, when they
are enums, dataclasses or pydantic models: the codec allows them as if registered with it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, Final

from ..allowlist import MAF_PLAIN_TYPES, MAF_SERIALIZED_TYPES, MAF_WORKFLOW_EVENT, resolve_exact_class
from ..codec.plugins import PluginHost, register_codec_plugin
from ..codec.vocabulary import Unencodable, type_key
from ..errors import MissingDependencyError

_ENCODING_MODULE: Final = "agent_framework._workflows._checkpoint_encoding"
_CHECKPOINT_MODULE: Final = "agent_framework._workflows._checkpoint"
MAF_CHECKPOINT_TAG: Final = "maf"
"""How a body names MAF's ``WorkflowCheckpoint`` (part of the stored format)."""

WORKFLOW_EVENT: Final = MAF_WORKFLOW_EVENT

MAF_TYPES: Final[tuple[str, ...]] = tuple(sorted(MAF_PLAIN_TYPES))
"""MAF's enums and dataclasses that its runner stores in checkpoints (``WorkflowEvent`` aside)."""

_EVENT_FIELDS: Final = ("type", "data", "origin", "state", "details", "executor_id", "iteration")
"""Public attributes of a WorkflowEvent, stored as they are."""
_EVENT_PRIVATE_FIELDS: Final = ("request_id", "source_executor_id")
"""Attributes stored under ``_<name>`` (their properties raise for non-request events)."""
_EVENT_TYPE_FIELDS: Final = ("request_type", "response_type")
"""Attributes that hold classes; stored by ``"module:qualname"``."""

_BUILTIN_VALUE_TYPES: Final[Mapping[str, type[Any]]] = {
    type_key(cls): cls
    for cls in (str, int, float, bool, bytes, bytearray, dict, list, tuple, set, frozenset, type(None))
}
"""Request and response types a WorkflowEvent may name without any registration."""


@cache
def maf_available() -> bool:
    """True if ``agent_framework`` can be imported (checked once, without importing it)."""
    return importlib.util.find_spec("agent_framework") is not None


def runner_registered_type_keys() -> frozenset[str]:
    """Keys registered with MAF's ``register_checkpoint_type`` in this process.

    Reads MAF's registry only if MAF's encoding module is already imported: a process that never
    imported it has registered nothing there.
    """
    module = sys.modules.get(_ENCODING_MODULE)
    registry = getattr(module, "_REGISTERED_CHECKPOINT_TYPE_KEYS", None)
    return frozenset(registry) if isinstance(registry, (set, frozenset)) else frozenset()


def _to_dict(value: Any) -> Any:
    return value.to_dict()


def _from_dict_of(key: str) -> Callable[[Any], Any]:
    def from_dict(state: Any) -> Any:
        return resolve_exact_class(key).from_dict(state)

    return from_dict


def register_maf_types(codec: PluginHost) -> None:
    """Allow MAF's checkpoint types on ``codec`` (done by every codec when MAF is installed)."""
    for key in MAF_TYPES:
        codec.register(key)
    for key in sorted(MAF_SERIALIZED_TYPES):
        codec.register(key, encode=_to_dict, decode=_from_dict_of(key))
    encode, decode = _workflow_event_hooks(codec)
    codec.register(WORKFLOW_EVENT, encode=encode, decode=decode)


def _workflow_event_hooks(codec: PluginHost) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    def encode(event: Any) -> Any:
        state: dict[str, Any] = {name: getattr(event, name, None) for name in _EVENT_FIELDS}
        for name in _EVENT_PRIVATE_FIELDS:
            state[name] = getattr(event, f"_{name}", None)
        for name in _EVENT_TYPE_FIELDS:
            cls = getattr(event, f"_{name}", None)
            if cls is None:
                state[name] = None
                continue
            key = type_key(cls) if isinstance(cls, type) else repr(cls)
            if _resolvable_type(codec, key, cls if isinstance(cls, type) else None) is None:
                raise Unencodable(
                    event,
                    f"its {name} {key!r} is not a type this codec allows; register it "
                    "(CheckpointCodec(allowed_types=[...]) or MAF's register_checkpoint_type)",
                )
            state[name] = key
        return state

    def decode(state: Any) -> Any:
        cls = _import_attribute(WORKFLOW_EVENT, "loading a checkpoint with a pending request")
        event = cls.__new__(cls)
        for name in _EVENT_FIELDS:
            setattr(event, name, state[name])
        for name in _EVENT_PRIVATE_FIELDS:
            setattr(event, f"_{name}", state[name])
        for name in _EVENT_TYPE_FIELDS:
            key = state[name]
            resolved = None if key is None else _resolvable_type(codec, key)
            if key is not None and resolved is None:
                raise ValueError(f"WorkflowEvent {name} {key!r} is not a type this codec allows")
            setattr(event, f"_{name}", resolved)
        return event

    return encode, decode


def _resolvable_type(codec: PluginHost, key: str, cls: type[Any] | None = None) -> type[Any] | None:
    """The class ``key`` names if a stored WorkflowEvent may name it, else None (``cls``: the
    class itself, at save)."""
    builtin = _BUILTIN_VALUE_TYPES.get(key)
    if builtin is not None:
        return builtin
    return codec.allowed_class(key, cls)


class MafCodecPlugin:
    """MAF's part in every codec: its checkpoint class, its runner's types, its registry."""

    def install(self, codec: PluginHost) -> None:
        if maf_available():
            register_maf_types(codec)

    def runner_allows(self, key: str) -> bool:
        return key in runner_registered_type_keys()

    def checkpoint_tag(self, cls: type[Any]) -> str | None:
        if cls.__name__ == "WorkflowCheckpoint" and cls.__module__ == _CHECKPOINT_MODULE:
            return MAF_CHECKPOINT_TAG
        return None

    def checkpoint_class(self, tag: str) -> type[Any] | None:
        if tag != MAF_CHECKPOINT_TAG:
            return None
        try:
            module = importlib.import_module(_CHECKPOINT_MODULE)
        except ImportError as exc:
            raise MissingDependencyError(
                "loading a checkpoint saved from Agent Framework", "maf", "agent-framework-core"
            ) from exc
        cls: type[Any] = module.WorkflowCheckpoint
        return cls


CODEC_PLUGIN: Final = MafCodecPlugin()
register_codec_plugin(CODEC_PLUGIN)


def _import_attribute(key: str, purpose: str) -> Any:
    module_name, sep, qualname = key.partition(":")
    if not sep:
        raise ValueError(f"{key!r} is not a 'module:qualname' key")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        if module_name.startswith("agent_framework"):
            raise MissingDependencyError(purpose, "maf", "agent-framework-core") from exc
        raise
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


__all__ = [
    "CODEC_PLUGIN",
    "MAF_CHECKPOINT_TAG",
    "MAF_TYPES",
    "MafCodecPlugin",
    "WORKFLOW_EVENT",
    "maf_available",
    "register_maf_types",
    "runner_registered_type_keys",
]
