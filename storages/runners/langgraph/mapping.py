"""How LangGraph's coordinates map onto a storage's (docs/langgraph.md, The mapping).

* (thread_id, checkpoint_ns) is one workflow, named ``langgraph:<thread>:<ns>`` with both parts
  percent-escaped, so distinct pairs never share a name and a thread's names share a prefix.
* A LangGraph checkpoint id is per thread; ours are global. The stored id is
  ``<langgraph id>@<digest of the workflow name>``, so ``copy_thread`` keeps LangGraph's ids in
  the new thread without colliding with the source's.
* The parent checkpoint is the previous id, so ancestry, pruning and verify see LangGraph's chain.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any
from urllib.parse import quote, unquote

from langchain_core.runnables import RunnableConfig

from ...contract import MAX_ID_LENGTH
from ...errors import InvalidCheckpointError, InvalidCheckpointIdError

WORKFLOW_PREFIX = "langgraph:"
"""Every workflow StorageSaver writes starts with this; other workflows of the store are ignored."""

GRAPH_SIGNATURE = "langgraph"
"""LangGraph has no graph signature; every stored checkpoint carries this constant instead."""

_ID_DIGEST_CHARS = 32
_NAME_CACHE_SIZE = 4096
"""Workflow names (and their digests) remembered: a few per thread in use, bounded."""


@functools.lru_cache(maxsize=_NAME_CACHE_SIZE)
def thread_prefix(thread_id: str) -> str:
    """The start of the workflow name of every namespace of ``thread_id``."""
    # Cached apart from workflow_for: a run names a new namespace at every subgraph superstep,
    # always under the same thread.
    return f"{WORKFLOW_PREFIX}{escape_part(thread_id)}:"


@functools.lru_cache(maxsize=_NAME_CACHE_SIZE)
def workflow_for(thread_id: str, checkpoint_ns: str) -> str:
    """The workflow holding the checkpoints of one (thread_id, checkpoint_ns)."""
    # Cached: every call of a run names the same few workflows, and escaping is most of the
    # cost of naming one (a refused name raises, and exceptions are not cached).
    name = thread_prefix(thread_id) + escape_part(checkpoint_ns)
    if len(name) > MAX_ID_LENGTH:
        raise InvalidCheckpointIdError(
            "thread_id",
            thread_id,
            f"with checkpoint_ns {checkpoint_ns!r} escapes to a {len(name)}-character workflow name; "
            f"the limit is {MAX_ID_LENGTH}",
        )
    return name


def stored_id_for(workflow_name: str, checkpoint_id: str) -> str:
    """The storage's (global) id of LangGraph checkpoint ``checkpoint_id`` in a workflow."""
    stored = f"{checkpoint_id}@{_workflow_digest(workflow_name)}"
    if not isinstance(checkpoint_id, str) or len(stored) > MAX_ID_LENGTH:
        raise InvalidCheckpointIdError(
            "checkpoint_id",
            checkpoint_id,
            f"must be a str of at most {MAX_ID_LENGTH - _ID_DIGEST_CHARS - 1} characters",
        )
    return stored


@functools.lru_cache(maxsize=_NAME_CACHE_SIZE)
def _workflow_digest(workflow_name: str) -> str:
    return hashlib.blake2b(workflow_name.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def escape_part(text: str) -> str:
    # quote(safe="") escapes ":" and "%", so the separator never occurs inside a part. ASCII text
    # (LangGraph's namespaces and most thread ids) takes a C-speed path giving quote's exact output:
    # the bytes it would escape, found by one bytes.translate, each replaced by its escape ("%"
    # first, so no escape is escaped again). LangGraph's namespaces hold one such character (":")
    # or a few; a per-character table (str.translate with a dict) cost five times more.
    if not text.isascii():
        return quote(text, safe="")
    unsafe = text.encode("ascii").translate(None, _ASCII_SAFE)
    if not unsafe:
        return text
    if len(unsafe) == 1:
        return text.replace(chr(unsafe[0]), _ASCII_QUOTED[unsafe[0]])
    codes = set(unsafe)
    if _PERCENT in codes:
        text = text.replace("%", _ASCII_QUOTED[_PERCENT])
        codes.discard(_PERCENT)
    for code in codes:
        text = text.replace(chr(code), _ASCII_QUOTED[code])
    return text


_ASCII_SAFE = bytes(code for code in range(128) if chr(code).isalnum() or chr(code) in "_.-~")
"""The ASCII characters ``quote(safe="")`` keeps: letters, digits and _.-~."""

_ASCII_QUOTED = {code: f"%{code:02X}" for code in range(128) if code not in _ASCII_SAFE}
"""What ``quote(safe="")`` makes of each ASCII character it escapes."""

_PERCENT = ord("%")


def supersteps_done(metadata: Any) -> int:
    """LangGraph's ``step`` (-1 for the input checkpoint) as our iteration count: the supersteps
    done when the checkpoint was taken."""
    step = metadata.get("step") if isinstance(metadata, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step > 0 else 0


def config_target(config: RunnableConfig) -> tuple[str, str, str | None]:
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        raise InvalidCheckpointError("the config has no configurable.thread_id", field="thread_id")
    checkpoint_ns = configurable.get("checkpoint_ns") or ""
    if not isinstance(checkpoint_ns, str):
        raise InvalidCheckpointError("configurable.checkpoint_ns must be a str", field="checkpoint_ns")
    checkpoint_id = configurable.get("checkpoint_id")
    return str(thread_id), checkpoint_ns, checkpoint_id or None


def config_for(thread_id: Any, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def parse_workflow(name: str) -> tuple[str, str, str] | None:
    if not name.startswith(WORKFLOW_PREFIX):
        return None
    thread, separator, namespace = name[len(WORKFLOW_PREFIX) :].partition(":")
    if not separator:
        return None
    return name, unquote(thread), unquote(namespace)


def older_than(newest_first: list[Any], workflow_name: str, before_id: str) -> list[Any]:
    """The checkpoints committed before the cursor when it is in this workflow; otherwise those
    with a smaller LangGraph id, as LangGraph's savers compare."""
    cursor = stored_id_for(workflow_name, before_id)
    for position, stored in enumerate(newest_first):
        if stored.checkpoint_id == cursor:
            return newest_first[position + 1 :]
    return [stored for stored in newest_first if stored.checkpoint_id.rpartition("@")[0] < before_id]


__all__ = [
    "GRAPH_SIGNATURE",
    "WORKFLOW_PREFIX",
    "config_for",
    "config_target",
    "escape_part",
    "older_than",
    "parse_workflow",
    "stored_id_for",
    "supersteps_done",
    "thread_prefix",
    "workflow_for",
]
