"""LangGraph's coordinates in what ``inspect`` shows: a thread and namespace instead of the
workflow name ``langgraph:<thread>:<ns>``, LangGraph's own checkpoint id instead of the stored
``<id>@<digest>``, a subgraph's run under the parent-graph checkpoint it started from, and a
checkpoint's state, metadata, interrupts and pending writes decoded through LangGraph's
serializer. Everything here needs the ``langgraph`` extra only when a LangGraph record is shown;
without it, LangGraph workflows are shown like any other."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ...contract import CheckpointID, CheckpointInfo, CheckpointStorage
from ...errors import CheckpointCorruptedError, CheckpointNotFoundError, CheckpointStorageError
from .lineage import LineageStart, LineageTree, index_pages, lineage_from_index
from .lineage_index import LineageIndex

WORKFLOW_PREFIX = "langgraph:"


class AmbiguousCheckpointIdError(CheckpointStorageError, ValueError):
    """A LangGraph checkpoint id stored in several threads or namespaces."""

    def __init__(self, given: str, candidates: list[CheckpointID]) -> None:
        shown = ", ".join(repr(candidate) for candidate in candidates[:5])
        more = "" if len(candidates) <= 5 else f" and {len(candidates) - 5} more"
        super().__init__(
            f"checkpoint id {given!r} is LangGraph's id of {len(candidates)} stored checkpoints "
            f"({shown}{more}); give the stored id"
        )


@functools.cache
def _parse_workflow() -> Callable[[str], tuple[str, str, str] | None] | None:
    try:
        from ...runners.langgraph.mapping import parse_workflow
    except ImportError:  # no langgraph extra: LangGraph workflows are shown as workflows
        return None
    return parse_workflow


def langgraph_place(workflow_name: str) -> tuple[str, str] | None:
    """(thread_id, checkpoint_ns) of a LangGraph workflow, else None."""
    if not workflow_name.startswith(WORKFLOW_PREFIX):
        return None
    parse = _parse_workflow()
    parsed = None if parse is None else parse(workflow_name)
    return None if parsed is None else (parsed[1], parsed[2])


def shown_id(checkpoint_id: CheckpointID, workflow_name: str) -> str:
    """LangGraph's own id for a LangGraph record (the stored id without its ``@digest``)."""
    if langgraph_place(workflow_name) is None:
        return checkpoint_id
    return checkpoint_id.rpartition("@")[0] or checkpoint_id


async def resolve_checkpoint_id(storage: CheckpointStorage, given: str) -> CheckpointID:
    """A stored id, or LangGraph's id of exactly one stored LangGraph checkpoint.

    Raises CheckpointNotFoundError, or AmbiguousCheckpointIdError naming the stored ids."""
    if await storage.checkpoint_info(given) is not None:
        return given
    candidates = [
        info.checkpoint_id
        async for page in index_pages(storage)
        for info in page
        if info.checkpoint_id.rpartition("@")[0] == given and langgraph_place(info.workflow_name) is not None
    ]
    if not candidates:
        raise CheckpointNotFoundError(given)
    if len(candidates) > 1:
        raise AmbiguousCheckpointIdError(given, candidates)
    return candidates[0]


async def thread_workflows(storage: CheckpointStorage, thread_id: str) -> list[str]:
    """The workflow names of every namespace of a LangGraph thread, root namespace first."""
    names = {
        info.workflow_name
        async for page in index_pages(storage)
        for info in page
        if (place := langgraph_place(info.workflow_name)) is not None and place[0] == thread_id
    }
    return sorted(names, key=lambda name: (langgraph_place(name) or ("", ""))[1])


async def build_thread_lineage(storage: CheckpointStorage, thread_id: str) -> LineageTree:
    """A LangGraph thread's lineage: the root namespace's checkpoints, each subgraph's run drawn
    under the parent checkpoint named in its metadata (``parents``), when LangGraph's serializer
    can read it; a subgraph run whose parent is unknown starts a line of its own."""
    names = await thread_workflows(storage, thread_id)
    in_thread = frozenset(names)
    root_name = names[0] if names and langgraph_place(names[0]) == (thread_id, "") else None
    workflow_name = root_name or (names[0] if names else f"{WORKFLOW_PREFIX}{thread_id}:")
    index = LineageIndex()
    async for page in index_pages(storage):  # a page at a time: memory stays flat
        index.add((info for info in page if info.workflow_name in in_thread), members=True)
    index.add_tombstones(await storage.list_tombstones())
    pruned = sum([len(await storage.list_tombstones(workflow_name=name)) for name in names])
    tree = lineage_from_index(index, workflow_name, pruned)
    tree.checkpoints = index.top_level_members()
    serde = _serde()
    if serde is None:
        return tree
    for root in list(tree.roots):
        info = tree.record(root)
        place = None if info is None else langgraph_place(info.workflow_name)
        if info is None or place is None or not place[1] or tree.start_of(root) is not LineageStart.ROOT:
            continue
        parent = await _parent_checkpoint(storage, serde, info, thread_id, place[1], tree)
        if parent is not None:
            tree.roots.remove(root)
            tree.subgraphs.setdefault(parent, []).append(root)
    return tree


async def _parent_checkpoint(
    storage: CheckpointStorage,
    serde: Any,
    info: CheckpointInfo,
    thread_id: str,
    namespace: str,
    tree: LineageTree,
) -> CheckpointID | None:
    """The stored id of the parent-graph checkpoint a subgraph run started from, if stored."""
    try:
        stored = await storage.load(info.checkpoint_id)
        metadata = _loads(serde, stored.state, "metadata")
    except (CheckpointStorageError, AttributeError):
        return None
    parents = metadata.get("parents") if isinstance(metadata, dict) else None
    if not isinstance(parents, dict):
        return None
    # The nearest enclosing namespace: "a:1|b:2" runs under "a:1", which runs under "".
    parent_ns = namespace.rpartition("|")[0]
    parent_id = parents.get(parent_ns)
    if not isinstance(parent_id, str):
        return None
    from ...runners.langgraph.mapping import stored_id_for, workflow_for

    stored_parent = stored_id_for(workflow_for(thread_id, parent_ns), parent_id)
    return stored_parent if tree.record(stored_parent) is not None else None


@functools.cache
def _serde() -> Any:
    try:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    except ImportError:
        return None
    return JsonPlusSerializer()


def _loads(serde: Any, state: Any, name: str) -> Any:
    typed = (state.get(f"{name}_type"), state.get(name)) if isinstance(state, dict) else None
    if not (typed and isinstance(typed[0], str) and isinstance(typed[1], bytes)):
        raise CheckpointCorruptedError("?", f"no LangGraph {name} in its state")
    return serde.loads_typed(typed)


async def langgraph_fields(
    storage: CheckpointStorage, info: CheckpointInfo, checkpoint: Any
) -> list[tuple[str, Any]]:
    """A LangGraph checkpoint's channel values, metadata, interrupts and pending writes, decoded
    with LangGraph's serializer; empty when the extra is missing or the record is not LangGraph's.
    What cannot be decoded is named as such, never raised."""
    place = langgraph_place(info.workflow_name)
    serde = _serde()
    if place is None or serde is None:
        return []
    shown: list[tuple[str, Any]] = [("thread_id", place[0]), ("checkpoint_ns", place[1])]
    shown.append(("langgraph_checkpoint_id", shown_id(info.checkpoint_id, info.workflow_name)))
    for name in ("checkpoint", "metadata"):
        try:
            value = _loads(serde, checkpoint.state, name)
        except Exception as exc:  # the app's own serde may differ (an encrypted one, say)
            shown.append(
                (name, f"<cannot be decoded with LangGraph's default serializer: {type(exc).__name__}>")
            )
            continue
        if name == "checkpoint" and isinstance(value, dict):
            shown.append(("channel_values", value.get("channel_values")))
            shown.append(("channel_versions", value.get("channel_versions")))
        else:
            shown.append((name, value))
    writes: list[tuple[str, str, Any]] = []
    interrupts: list[Any] = []
    list_writes = getattr(storage, "list_writes", None)
    if callable(list_writes):
        try:
            stored_writes = await list_writes(info.checkpoint_id, workflow_name=info.workflow_name)
        except CheckpointStorageError:
            stored_writes = []
        for write in stored_writes:
            try:
                value = serde.loads_typed(tuple(write.value))
            except Exception as exc:
                value = f"<cannot be decoded: {type(exc).__name__}>"
            writes.append((write.task_id, write.channel, value))
            if write.channel == "__interrupt__":
                # LangGraph writes a list of Interrupt objects: what was asked is each one's value.
                asked = value if isinstance(value, (list, tuple)) else [value]
                interrupts.extend(getattr(interrupt, "value", interrupt) for interrupt in asked)
    shown.append(("interrupts", interrupts))
    shown.append(("pending_writes", writes))
    return shown


__all__ = [
    "AmbiguousCheckpointIdError",
    "build_thread_lineage",
    "langgraph_fields",
    "langgraph_place",
    "resolve_checkpoint_id",
    "shown_id",
    "thread_workflows",
]
