"""Stores written by real MAF workflows and LangGraph graphs, and what "equal before and after a
copy" means: every listing (with and without nested records, per signature), latest (per
signature), walks, loads, nested lists, tombstones and pending writes."""

from __future__ import annotations

from typing import Any

from langgraph.types import Command
from maf_workflows import (
    LOOP_INPUT,
    Question,
    Tally,
    allow_user_types,
    hitl_workflow,
    loop_workflow,
    sub_workflow,
)

from conformance._langgraph_graphs import build_tour, thread_config
from storages import CheckpointStore
from storages.codec import CheckpointCodec
from storages.contract import CheckpointStorage, PendingWrite
from storages.runners.langgraph import StorageSaver

MAF_WORKFLOWS = ("copy-loop", "copy-sub", "copy-pruned", "copy-two-sigs")


async def write_maf_store(storage: CheckpointStore) -> None:
    """Real MAF runs: a loop forked from its third checkpoint, a parent with a sub-workflow
    (nested records) pruned to its last two, a loop pruned to its last three (tombstones), two
    graphs under one name (two signatures), and pending writes on two checkpoints."""
    allow_user_types(storage)
    await loop_workflow("copy-loop", 5, storage).run(LOOP_INPUT)
    ids = await storage.list_checkpoint_ids(workflow_name="copy-loop")
    await loop_workflow("copy-loop", 5).run(checkpoint_id=ids[2], checkpoint_storage=storage)
    await sub_workflow("copy-sub", 3, storage).run(LOOP_INPUT)
    await storage.prune(workflow_name="copy-sub", keep_last=2)
    await loop_workflow("copy-pruned", 6, storage).run(LOOP_INPUT)
    await storage.prune(workflow_name="copy-pruned", keep_last=3)
    await loop_workflow("copy-two-sigs", 3, storage).run(LOOP_INPUT)
    await hitl_workflow("copy-two-sigs", storage).run(LOOP_INPUT)
    first, *_, last = await storage.list_checkpoint_ids(workflow_name="copy-loop")
    await storage.put_writes(
        first,
        [PendingWrite("task-a", 0, "values", {"n": 1}), PendingWrite("task-a", -3, "__interrupt__", "ask")],
        workflow_name="copy-loop",
    )
    await storage.put_writes(last, [PendingWrite("task-b", 1, "values", (1, 2))], workflow_name="copy-loop")
    await storage.put_writes(last, [PendingWrite("task-b", 0, "other", b"x")], workflow_name="copy-loop")


_CODEC = CheckpointCodec()
_CODEC.register(Tally)
_CODEC.register(Question)


LANGGRAPH_THREADS = ("copy-tour", "copy-travel")


async def write_langgraph_store(storage: CheckpointStore) -> None:
    """Real LangGraph runs through StorageSaver: a graph with a subgraph interrupted and resumed
    (pending writes, subgraph namespaces), and a second thread forked by time travel."""
    saver = StorageSaver(storage)
    graph = build_tour(saver)
    tour, travel = LANGGRAPH_THREADS
    await graph.ainvoke({"steps": []}, thread_config(tour))  # paused at the subgraph's interrupt
    await graph.ainvoke({"steps": []}, thread_config(travel))
    await graph.ainvoke(Command(resume="red"), thread_config(travel))
    history = [snapshot async for snapshot in graph.aget_state_history(thread_config(travel))]
    (before_ask,) = [s for s in history if s.next == ("ask",)]
    await graph.ainvoke(None, thread_config(travel, before_ask.config["configurable"]["checkpoint_id"]))


async def observe_langgraph(storage: CheckpointStore) -> list[Any]:
    """What LangGraph reads of the threads: every tuple (config, checkpoint, metadata, parent,
    pending writes) of every namespace, and each thread's state with its subgraphs."""
    saver = StorageSaver(storage)
    graph = build_tour(saver)
    seen: list[Any] = []
    for thread in LANGGRAPH_THREADS:
        async for item in saver.alist({"configurable": {"thread_id": thread}}):
            seen.append(
                (item.config, item.checkpoint, item.metadata, item.parent_config, item.pending_writes)
            )
        state = await graph.aget_state(thread_config(thread), subgraphs=True)
        seen.append((state.values, state.next, [(t.name, t.interrupts) for t in state.tasks]))
    return seen


def comparable(checkpoint: Any) -> tuple[Any, ...]:
    """A checkpoint as comparable data: its class and its encoding (MAF's WorkflowEvent, held in
    pending request events, has no equality of its own)."""
    return (type(checkpoint).__name__, checkpoint.checkpoint_id, _CODEC.encode_checkpoint(checkpoint))


async def observe(storage: CheckpointStorage) -> dict[str, Any]:
    """Everything a reader can see of a store, sequence numbers and sizes aside."""
    records = await storage.list_records()
    names = sorted({*await storage.list_workflows(), *(r.workflow_name for r in records)})
    seen: dict[str, Any] = {"workflows": await storage.list_workflows()}
    for name in names:
        mine = [r for r in records if r.workflow_name == name]
        signatures = sorted({r.graph_signature_hash for r in mine})
        entry: dict[str, Any] = {
            "records": [
                (r.checkpoint_id, r.previous_checkpoint_id, r.graph_signature_hash, r.container_id)
                for r in sorted(mine, key=lambda r: r.sequence)
            ],
            "ids": await storage.list_checkpoint_ids(workflow_name=name),
            "ids_nested": await storage.list_checkpoint_ids(workflow_name=name, include_nested=True),
            "checkpoints": [
                comparable(c) for c in await storage.list_checkpoints(workflow_name=name, include_nested=True)
            ],
            "latest": _id(await storage.get_latest(workflow_name=name)),
            "tombstones": await storage.list_tombstones(workflow_name=name),
            "writes": await storage.list_workflow_writes(workflow_name=name),  # type: ignore[attr-defined]
        }
        for signature in signatures:
            entry[f"sig {signature}"] = (
                await storage.list_checkpoint_ids(workflow_name=name, graph_signature_hash=signature),
                await storage.list_checkpoint_ids(
                    workflow_name=name, graph_signature_hash=signature, include_nested=True
                ),
                [
                    comparable(c)
                    for c in await storage.list_checkpoints(
                        workflow_name=name, graph_signature_hash=signature
                    )
                ],
                _id(await storage.get_latest(workflow_name=name, graph_signature_hash=signature)),
            )
        seen[name] = entry
    for record in records:
        walk = await storage.walk_ancestry_ids(record.checkpoint_id)
        full = await storage.walk_ancestry(record.checkpoint_id)
        seen[f"record {record.checkpoint_id}"] = (
            comparable(await storage.load(record.checkpoint_id)),
            (walk.items, walk.end, walk.end_id),
            [comparable(item) for item in full.items],
            await storage.list_nested(record.checkpoint_id),
        )
    return seen


def _id(checkpoint: Any) -> str | None:
    return None if checkpoint is None else str(checkpoint.checkpoint_id)


class InjectedFailure(Exception):
    """What a :class:`FailingAfter` raises: the copy was cut here."""


class FailingAfter:
    """A storage that lets ``writes`` writes through (saves, pending writes, prunes), then raises
    on every one: a copy cut at that point."""

    WRITES = frozenset({"save", "put_writes", "prune", "delete", "delete_workflow", "write_raw_body"})

    def __init__(self, inner: CheckpointStore, writes: int) -> None:
        self.inner = inner
        self.left = writes
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name not in self.WRITES:
            return attribute

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if self.left <= 0:
                raise InjectedFailure(f"cut before {name}")
            self.left -= 1
            return await attribute(*args, **kwargs)

        return counted
