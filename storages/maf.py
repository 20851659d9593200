"""Microsoft Agent Framework integration: the MAF types a real run puts in its checkpoints.

A MAF run saves more than plain data. ``messages`` holds ``WorkflowMessage`` dataclasses (with a
``MessageType`` enum), and a human-in-the-loop pause keeps ``WorkflowEvent`` objects in
``pending_request_info_events`` and inside response messages. Without these the safe codec refuses
the checkpoint, and MAF's runner only logs a warning when a save fails, so checkpoints would go
missing silently. Every :class:`~storages.codec.CheckpointCodec` therefore allows them, by
``"module:qualname"``: nothing here imports ``agent_framework`` until a checkpoint that holds one of
these types is saved or loaded, so ``import storages`` never imports MAF.

``WorkflowEvent`` is neither a dataclass nor a model, so it travels through encode/decode hooks.
Its request and response types are stored by name and resolved on load only to built-in value
types, MAF's own types, and types the codec (or MAF's ``register_checkpoint_type``) allows; any
other type is refused at save time, so a saved checkpoint always loads back.

Other classes of ``agent_framework`` itself (an ``AgentExecutor``'s conversation of ``Message``
objects, ``AgentExecutorRequest``, ``AgentResponse``...) are allowed when first met, as MAF's own
restricted unpickler allows its package: enums, dataclasses and pydantic models as such, classes
with MAF's ``to_dict``/``from_dict`` serialization through those methods. Nothing outside the
``agent_framework`` package is resolved this way.

Application types registered with MAF's ``register_checkpoint_type`` are honoured too, when they
are enums, dataclasses or pydantic models: the codec allows them as if registered with it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from .codec import type_key
from .errors import MissingDependencyError

if TYPE_CHECKING:
    from .codec import CheckpointCodec

_ENCODING_MODULE: Final = "agent_framework._workflows._checkpoint_encoding"
_EVENTS_MODULE: Final = "agent_framework._workflows._events"
_RUNNER_CONTEXT_MODULE: Final = "agent_framework._workflows._runner_context"
_WORKFLOW_EXECUTOR_MODULE: Final = "agent_framework._workflows._workflow_executor"

WORKFLOW_EVENT: Final = f"{_EVENTS_MODULE}:WorkflowEvent"

MAF_TYPES: Final[tuple[str, ...]] = (
    f"{_RUNNER_CONTEXT_MODULE}:WorkflowMessage",
    f"{_RUNNER_CONTEXT_MODULE}:MessageType",
    f"{_EVENTS_MODULE}:WorkflowEventSource",
    f"{_EVENTS_MODULE}:WorkflowRunState",
    f"{_EVENTS_MODULE}:WorkflowErrorDetails",
    f"{_WORKFLOW_EXECUTOR_MODULE}:SubWorkflowRequestMessage",
    f"{_WORKFLOW_EXECUTOR_MODULE}:SubWorkflowResponseMessage",
)
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


def runner_type_hooks(key: str) -> tuple[bool, Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
    """Whether the codec may allow ``key`` on MAF's behalf, and the hooks to store it with.

    Allowed: keys registered with MAF's ``register_checkpoint_type`` (stored as enums, dataclasses
    or pydantic models, hooks None), and classes of the ``agent_framework`` package (those with
    ``to_dict``/``from_dict`` and no other way to store them get those methods as hooks).
    """
    if key in runner_registered_type_keys():
        return True, None, None
    if not key.startswith("agent_framework.") or not maf_available():
        return False, None, None
    try:
        cls = _import_attribute(key, "storing an Agent Framework type")
    except (ImportError, AttributeError, ValueError):
        return False, None, None
    if not isinstance(cls, type):
        return False, None, None
    if _plain_kind(cls):
        return True, None, None
    to_dict, from_dict = getattr(cls, "to_dict", None), getattr(cls, "from_dict", None)
    if callable(to_dict) and callable(from_dict):
        return True, _to_dict, from_dict
    return False, None, None


def _to_dict(value: Any) -> Any:
    return value.to_dict()


def _plain_kind(cls: type[Any]) -> bool:
    import dataclasses
    import enum

    return (
        isinstance(cls, enum.EnumMeta)
        or dataclasses.is_dataclass(cls)
        or (hasattr(cls, "model_fields") and hasattr(cls, "model_validate"))
    )


def register_maf_types(codec: CheckpointCodec) -> None:
    """Allow MAF's checkpoint types on ``codec`` (done by every codec when MAF is installed)."""
    for key in MAF_TYPES:
        codec.register(key)
    encode, decode = _workflow_event_hooks(codec)
    codec.register(WORKFLOW_EVENT, encode=encode, decode=decode)


def _workflow_event_hooks(codec: CheckpointCodec) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
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
            if _resolvable_type(codec, key) is None:
                from .codec import _Unencodable

                raise _Unencodable(
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


def _resolvable_type(codec: CheckpointCodec, key: str) -> type[Any] | None:
    """The class ``key`` names if a stored WorkflowEvent may name it, else None."""
    builtin = _BUILTIN_VALUE_TYPES.get(key)
    if builtin is not None:
        return builtin
    allowed = (
        key.startswith("agent_framework.")
        or key in codec.allowed_type_keys
        or key in runner_registered_type_keys()
    )
    if not allowed:
        return None
    try:
        resolved = _import_attribute(key, "resolving a pending request's type")
    except (ImportError, AttributeError, ValueError):
        return None
    return resolved if isinstance(resolved, type) else None


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
    "MAF_TYPES",
    "WORKFLOW_EVENT",
    "maf_available",
    "register_maf_types",
    "runner_registered_type_keys",
    "runner_type_hooks",
]
