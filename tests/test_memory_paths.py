"""The memory backend's two ways to list ids give the same answers.

``list_ids`` copies a workflow's keys where it lists top-level ids of any signature, beside the
general walk of its entries, because the copy pays (docs/backends.md, "One path per operation");
this test holds it to the general path: one workload runs on a store whose handle takes both
paths and on one whose handle takes the general path alone (``MemoryBackend.general_path``), and
every answer and the stored state must be the same.
"""

from __future__ import annotations

from typing import Any

import pytest

from storages import WorkflowCheckpoint
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

pytestmark = pytest.mark.memory


def _checkpoint(name: str, previous: str | None = None, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        fields.pop("workflow_name", "wf"),
        fields.pop("graph_signature_hash", "sig"),
        checkpoint_id=name,
        previous_checkpoint_id=previous,
        timestamp="2026-01-01T00:00:00+00:00",
        **fields,
    )


async def _workload(storage: InMemoryCheckpointStorage) -> list[object]:
    answers: list[object] = []

    async def listed() -> None:
        for workflow_name in ("wf", "child", "never"):
            answers.append(await storage.list_checkpoint_ids(workflow_name=workflow_name))

    child = _checkpoint("child-1", workflow_name="child")
    saves = [
        _checkpoint("root"),
        _checkpoint("second", "root"),
        _checkpoint("rival", "root", state={"n": 3}),
        _checkpoint("family", "second", state={"_executor_state": {"s": {"sub_workflow_checkpoint": child}}}),
        _checkpoint("other-signature", "second", graph_signature_hash="sig2"),
        *(_checkpoint(f"step-{n}", "family" if n == 0 else f"step-{n - 1}") for n in range(20)),
    ]
    await listed()
    for saved in saves:
        await storage.save(saved)
        await listed()
    answers.append(await storage.delete("rival"))
    await listed()
    answers.append(await storage.prune(workflow_name="wf", keep_last=5))
    await listed()
    answers.append(await storage.delete_workflow(workflow_name="wf"))
    await listed()
    await storage.save(_checkpoint("again"))
    await listed()
    return answers


def _state(backend: MemoryBackend) -> object:
    store = backend.store
    return (
        {
            checkpoint_id: (entry.record, entry.sequence, entry.children)
            for checkpoint_id, entry in store.by_id.items()
        },
        {name: (list(w.entries), list(w.nested), w.next_sequence) for name, w in store.workflows.items()},
        dict(store.tombstones),
    )


async def _takes_the_copy(storage: InMemoryCheckpointStorage) -> bool:
    """Whether list_ids copies the keys: a key planted behind the store's back, naming a stored
    entry, is listed by the copy of the keys and not by the walk of the entries (which lists the
    entry's own id)."""
    entries = storage.backend.store.workflows["wf"].entries
    entries["planted"] = next(iter(entries.values()))
    try:
        return "planted" in await storage.list_checkpoint_ids(workflow_name="wf")
    finally:
        del entries["planted"]


async def test_listing_ids_by_the_keys_answers_as_the_general_path_does() -> None:
    results = []
    for general_path in (False, True):
        async with InMemoryCheckpointStorage() as storage:
            storage.backend.general_path = general_path
            answers = await _workload(storage)
            results.append((answers, _state(storage.backend)))
            assert await _takes_the_copy(storage) is not general_path  # the hook holds
    (answers_both, state_both), (answers_general, state_general) = results
    assert answers_both == answers_general
    assert state_both == state_general
    assert any(len(answer) > 10 for answer in answers_both if isinstance(answer, list))
