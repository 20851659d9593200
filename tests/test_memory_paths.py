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


async def test_listing_ids_by_the_keys_answers_as_the_general_path_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walked = {"entries": 0}
    entries = MemoryBackend._entries

    def counted(self: MemoryBackend, *args: Any) -> Any:
        walked["entries"] += 1
        return entries(self, *args)

    monkeypatch.setattr(MemoryBackend, "_entries", counted)
    results = []
    walks = []
    for general_path in (False, True):
        walked["entries"] = 0
        async with InMemoryCheckpointStorage() as storage:
            storage.backend.general_path = general_path
            answers = await _workload(storage)
            results.append((answers, _state(storage.backend)))
        walks.append(walked["entries"])
    # The hook holds: the general path walked the entries for every listing, the other for none.
    listings = sum(1 for answer in results[0][0] if isinstance(answer, list))
    assert walks[1] - walks[0] == listings, (walks, listings)
    (answers_both, state_both), (answers_general, state_general) = results
    assert answers_both == answers_general
    assert state_both == state_general
    assert any(len(answer) > 10 for answer in answers_both if isinstance(answer, list))
