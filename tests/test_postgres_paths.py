"""The PostgreSQL save's two paths give the same answers and leave the same rows.

``save_one`` (a checkpoint with nothing nested) stands beside ``save_family`` (the general path)
because it pays (docs/postgres.md, "One path per operation"); this test holds it to the general
path: one workload runs on a store whose handle takes both paths and on one whose handle takes
``save_family`` alone (``PostgresBackend.general_path``), and every answer and every stored row,
tombstone and high-water mark must be the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import postgres_servers
import psycopg
import pytest

from storages import CheckpointConflictError, CheckpointNotFoundError, StaleWriterError, WorkflowCheckpoint
from storages.postgres import PostgresCheckpointStorage, commit

pytestmark = pytest.mark.postgres


def _checkpoints() -> dict[str, WorkflowCheckpoint]:
    child = WorkflowCheckpoint("child", "sig", checkpoint_id="child-1", timestamp="2026-01-01T00:00:00+00:00")
    root = WorkflowCheckpoint("wf", "sig", checkpoint_id="root", timestamp="2026-01-01T00:00:01+00:00")

    def after(previous: WorkflowCheckpoint, name: str, second: int, **fields: Any) -> WorkflowCheckpoint:
        return WorkflowCheckpoint(
            "wf",
            fields.pop("graph_signature_hash", "sig"),
            checkpoint_id=name,
            previous_checkpoint_id=previous.checkpoint_id,
            timestamp=f"2026-01-01T00:00:{second:02d}+00:00",
            **fields,
        )

    second = after(root, "second", 2, state={"n": 2})
    return {
        "root": root,
        "second": second,
        "rival": after(root, "rival", 3, state={"n": 3}),
        "family": after(
            second, "family", 4, state={"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}}
        ),
        "other-signature": after(second, "other-signature", 5, graph_signature_hash="sig2"),
        "fenced": after(second, "fenced", 6),
        "stale": after(second, "stale", 7),
        "late": after(second, "late", 8),
    }


async def _answer(call: Any) -> object:
    try:
        return await call
    except (CheckpointConflictError, CheckpointNotFoundError, StaleWriterError) as exc:
        return (type(exc).__name__, str(exc))


def _shown(value: object) -> object:
    if isinstance(value, WorkflowCheckpoint):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [_shown(item) for item in value]
    return value


async def _workload(storage: PostgresCheckpointStorage) -> list[object]:
    c = _checkpoints()
    answers: list[object] = []

    async def record(call: Any) -> None:
        answers.append(_shown(await _answer(call)))

    for name in ("root", "second", "rival", "family", "other-signature"):
        await record(storage.save(c[name]))
    await record(storage.save(c["second"]))  # the same bytes again: a no-op
    await record(storage.save(dataclasses.replace(c["second"], state={"n": "other"})))  # a conflict
    latest = await storage.get_latest(workflow_name="wf")
    answers.append(_shown(latest))
    assert latest is not None
    await record(storage.save(c["fenced"], expected_latest_id=latest.checkpoint_id))
    await record(storage.save(c["stale"], expected_latest_id=latest.checkpoint_id))  # stale now
    await record(storage.save(c["fenced"], expected_latest_id=latest.checkpoint_id))  # already stored
    await record(storage.save(c["late"], expected_latest_id="fenced"))
    for name in ("root", "family", "child-1", "stale", "never"):
        await record(storage.load(name))
    await record(storage.get_latest(workflow_name="wf"))
    await record(storage.get_latest(workflow_name="wf", graph_signature_hash="sig2"))
    await record(storage.list_checkpoint_ids(workflow_name="wf"))
    await record(storage.list_checkpoints(workflow_name="child"))
    await record(storage.delete("rival"))
    await record(storage.prune(workflow_name="wf", keep_last=2))
    await record(storage.list_checkpoint_ids(workflow_name="wf"))
    await record(storage.save(c["rival"]))  # after the delete: a sequence past the high-water mark
    await record(storage.list_checkpoint_ids(workflow_name="wf"))
    return answers


async def _rows(url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    queries = {
        "checkpoints": (
            "SELECT checkpoint_id, workflow_name, sequence, previous_checkpoint_id, graph_signature_hash, "
            "digest, body, nested, container_id, root_id, position FROM {}.checkpoints ORDER BY checkpoint_id"
        ),
        "tombstones": "SELECT checkpoint_id, workflow_name FROM {}.tombstones ORDER BY checkpoint_id",
        "workflows": "SELECT name, next_sequence FROM {}.workflows ORDER BY name",
    }
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        found = {}
        for name, query in queries.items():
            cursor = await connection.execute(query.format(f'"{schema}"'))
            found[name] = await cursor.fetchall()
        return found


@pytest.fixture
async def schemas() -> AsyncIterator[tuple[str, str, str]]:
    base = postgres_servers.server_url()
    both, general = postgres_servers.fresh_schema("both"), postgres_servers.fresh_schema("general")
    yield base, both, general
    for schema in (both, general):
        await postgres_servers.drop_schema(base, schema)


async def test_save_one_answers_and_stores_as_save_family_does(
    schemas: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, both, general = schemas
    calls = {"save_one": 0}
    arguments = commit.save_one_arguments

    def counted(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        calls["save_one"] += 1
        return arguments(*args, **kwargs)

    monkeypatch.setattr(commit, "save_one_arguments", counted)
    results = []
    for schema, general_path in ((both, False), (general, True)):
        calls["save_one"] = 0
        async with PostgresCheckpointStorage.from_url(postgres_servers.with_schema(base, schema)) as storage:
            storage.backend.general_path = general_path
            answers = await _workload(storage)
            results.append((answers, await _rows(base, schema)))
        # The hook holds: the first store took save_one for its lone saves, the second never did.
        assert (calls["save_one"] == 0) is general_path, calls
    (answers_both, rows_both), (answers_general, rows_general) = results
    assert answers_both == answers_general
    assert rows_both == rows_general
    assert len(rows_both["checkpoints"]) > 3  # the workload wrote, and pruned
    assert rows_both["tombstones"]
