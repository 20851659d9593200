"""What a stored body may name, and how a name becomes a class.

A body names a class by its ``"module:qualname"`` key (an enum, dataclass, pydantic model,
NamedTuple or a type with encode/decode hooks). Whoever can write the store can write any key, so
decoding resolves a key only if it is on the reading codec's allow-list, which is exactly:

1. the types registered with the codec: ``allowed_types`` / ``allowed_checkpoint_types`` (MAF's
   name for the same list) and :meth:`~storages.codec.CheckpointCodec.register`;
2. classes defined in a module the application allowed with ``allowed_modules=["myapp"]``: the
   module ``myapp`` and its submodules;
3. keys registered with MAF's ``register_checkpoint_type`` in this process;
4. :data:`MAF_CHECKPOINT_TYPES`: the MAF types MAF's own runner and executors write into
   checkpoints, listed one by one (not "any class of the package");
5. on the in-memory backend only, classes this process met while saving into that store (its bytes
   never leave the process, so the class object itself is the allowance).

Resolution never traverses attributes: the module must be the one that defines the class, and
each step of the qualname must be a class defined there under that qualname (nested classes
work; re-exports, module attributes, functions and instances do not). A module is imported only
to resolve a key that is already allowed, so a crafted key imports nothing.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from typing import Any, Final

_RUNNER_CONTEXT: Final = "agent_framework._workflows._runner_context"
_EVENTS: Final = "agent_framework._workflows._events"
_WORKFLOW_EXECUTOR: Final = "agent_framework._workflows._workflow_executor"
_AGENT_EXECUTOR: Final = "agent_framework._workflows._agent_executor"
_TYPES: Final = "agent_framework._types"

MAF_PLAIN_TYPES: Final[frozenset[str]] = frozenset(
    {
        f"{_RUNNER_CONTEXT}:WorkflowMessage",
        f"{_RUNNER_CONTEXT}:MessageType",
        f"{_EVENTS}:WorkflowEventSource",
        f"{_EVENTS}:WorkflowRunState",
        f"{_EVENTS}:WorkflowErrorDetails",
        f"{_WORKFLOW_EXECUTOR}:SubWorkflowRequestMessage",
        f"{_WORKFLOW_EXECUTOR}:SubWorkflowResponseMessage",
        f"{_AGENT_EXECUTOR}:AgentExecutorRequest",
        f"{_AGENT_EXECUTOR}:AgentExecutorResponse",
    }
)
"""MAF's enums and dataclasses that its runner and executors store: messages between executors,
sub-workflow requests and responses, an agent executor's requests and responses."""

MAF_SERIALIZED_TYPES: Final[frozenset[str]] = frozenset(
    {
        f"{_TYPES}:Message",
        f"{_TYPES}:Content",
        f"{_TYPES}:AgentResponse",
        f"{_TYPES}:AgentResponseUpdate",
    }
)
"""MAF's conversation types (an ``AgentExecutor``'s cache and conversation, its pending
requests), stored through their own ``to_dict`` / ``from_dict``."""

MAF_WORKFLOW_EVENT: Final = f"{_EVENTS}:WorkflowEvent"
"""A pending request; stored through hooks of storages/runners/maf.py."""

MAF_CHECKPOINT_TYPES: Final[frozenset[str]] = MAF_PLAIN_TYPES | MAF_SERIALIZED_TYPES | {MAF_WORKFLOW_EVENT}
"""Every MAF type a body may name without the application allowing it."""


class TypeNotResolvable(LookupError):
    """A key that is allowed names no class that can be found again by that exact name."""


def split_key(key: str) -> tuple[str, str]:
    module_name, sep, qualname = key.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"type key {key!r} is not of the form 'module:qualname'")
    return module_name, qualname


def normalise_modules(modules: Iterable[str]) -> tuple[str, ...]:
    """Check ``allowed_modules`` entries: dotted module names, no wildcards."""
    names: list[str] = []
    for name in modules:
        if not isinstance(name, str) or not name or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(
                f"allowed_modules entry {name!r} is not a dotted module name like 'myapp.models'"
            )
        names.append(name)
    return tuple(names)


def module_allowed(module_name: str, allowed_modules: tuple[str, ...]) -> bool:
    """True if ``module_name`` is one of ``allowed_modules`` or a submodule of one."""
    return any(module_name == allowed or module_name.startswith(allowed + ".") for allowed in allowed_modules)


def resolve_exact_class(key: str) -> type[Any]:
    """The class ``key`` names, defined in that module under that qualname; imports the module.

    Call only for a key that is allowed. Raises TypeNotResolvable naming what did not match.
    """
    module_name, qualname = split_key(key)
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise TypeNotResolvable(f"module {module_name!r} cannot be imported here ({exc})") from exc
    # vars(), not getattr(): a module's __getattr__ (lazy re-exports) or a class's descriptors
    # must not decide what a stored name means.
    owner: Any = module
    path: list[str] = []
    for part in qualname.split("."):
        path.append(part)
        found = vars(owner).get(part)
        if not isinstance(found, type):
            raise TypeNotResolvable(f"{module_name!r} defines no class {'.'.join(path)!r}")
        if found.__module__ != module_name or found.__qualname__ != ".".join(path):
            raise TypeNotResolvable(
                f"{'.'.join(path)!r} in {module_name!r} is {found.__module__}:{found.__qualname__}, "
                "defined elsewhere"
            )
        owner = found
    return owner  # type: ignore[no-any-return]


__all__ = [
    "MAF_CHECKPOINT_TYPES",
    "MAF_PLAIN_TYPES",
    "MAF_SERIALIZED_TYPES",
    "MAF_WORKFLOW_EVENT",
    "TypeNotResolvable",
    "module_allowed",
    "normalise_modules",
    "resolve_exact_class",
    "split_key",
]
