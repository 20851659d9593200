"""Redis's second paths against its one general path: the same operations, the same answers and
the same stored keys, values and TTLs.

A save takes the general save script, save_one, or a transaction staging a large body before
save_one; a load the load script, a transaction at a home the handle remembers, or the script
locating a large body for a transaction to read (storages/redis/commit.py ``Commits.path``,
storages/redis/loads.py ``Loads.path``: each choice made in that one place; docs/redis.md, "One
path per operation", has the figures that keep them). One workload of small and large bodies
runs on a store whose handles take every path they may and on one whose handles take the
general path alone (``commits.general_only``, ``loads.script_only``); on a cluster the choice is
the general path, whatever the handle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import redis_servers

from storages import CheckpointConflictError, CheckpointNotFoundError, StaleWriterError, WorkflowCheckpoint
from storages.redis import RedisCheckpointStorage, RedisKeys
from storages.redis.commit import STAGED_BODY_MIN, SavePath
from storages.redis.loads import INLINE_BODY_LIMIT, LoadPath

SMALL, LARGE = 2 * 1024, 2 * max(STAGED_BODY_MIN, INLINE_BODY_LIMIT)
WORKFLOW = "w:{x}%"


def _checkpoint(
    checkpoint_id: str, size: int, previous: str | None = None, **fields: Any
) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        WORKFLOW,
        "sig",
        checkpoint_id=checkpoint_id,
        previous_checkpoint_id=previous,
        state={"blob": bytes(range(256)) * (size // 256)},
        **fields,
    )


def _workload() -> list[tuple[str, Any]]:
    """The operations, built once so both stores are given the very same checkpoints."""
    child = WorkflowCheckpoint("child:{c}", "sig", checkpoint_id="child", state={"blob": b"c" * SMALL})
    root = _checkpoint("root", SMALL)
    big = _checkpoint("big", LARGE, "root")
    sibling = _checkpoint("sibling", SMALL, "root")
    parent = _checkpoint("parent", LARGE, "big")
    parent.state["_executor_state"] = {"sub": {"sub_workflow_checkpoint": child}}
    fenced = _checkpoint("fenced", LARGE, "parent")
    # Parallel first steps: roots committed last, the one built last (the rival) committed first.
    built_last = _checkpoint("built-last", SMALL, timestamp="2026-01-01T00:00:09+00:00")
    built_first = _checkpoint("built-first", LARGE, timestamp="2026-01-01T00:00:01+00:00")
    return [
        ("save", root),
        ("save", big),
        ("save", sibling),
        ("save", parent),
        ("save", root),  # the same again: a no-op
        ("save", dataclasses.replace(big, state={"blob": b"other"})),  # a conflict
        ("fenced", (fenced, "not-the-latest")),  # stale
        ("fenced", (fenced, None)),  # the expected latest is computed below
        ("load", "root"),
        ("load", "big"),
        ("load", "parent"),
        ("load", "child"),
        ("load", "never-stored"),
        ("fresh load", "root"),
        ("fresh load", "big"),
        ("fresh load", "parent"),
        ("latest", None),
        ("delete", "sibling"),
        ("load", "sibling"),
        ("fresh load", "sibling"),
        ("save", _checkpoint("big-2", LARGE, "fenced")),
        ("fresh load", "big-2"),
        ("prune", 2),
        ("fresh load", "big"),
        ("list", None),
        ("save", built_last),
        ("save", built_first),
        ("latest", None),
        ("prune", 1),
        ("list", None),
    ]


async def _answers(
    storage: RedisCheckpointStorage, fresh: RedisCheckpointStorage, workload: list[tuple[str, Any]]
) -> list[Any]:
    """What each operation of the workload answers; ``fresh`` is another handle on the store
    (its loads are of ids it never saw)."""
    answers: list[Any] = []
    for operation, argument in workload:
        try:
            if operation == "save":
                answers.append(await storage.save(argument))
            elif operation == "fenced":
                checkpoint, expected = argument
                if expected is None:
                    latest = await storage.get_latest(workflow_name=WORKFLOW)
                    expected = None if latest is None else latest.checkpoint_id
                answers.append(await storage.save(checkpoint, expected_latest_id=expected))
            elif operation in ("load", "fresh load"):
                reader = storage if operation == "load" else fresh
                if operation == "fresh load":
                    reader.backend.loads.homes.clear()
                answers.append(await reader.load(argument))
            elif operation == "latest":
                answers.append(await storage.get_latest(workflow_name=WORKFLOW))
            elif operation == "delete":
                answers.append(await storage.delete(argument))
            elif operation == "prune":
                answers.append(await storage.prune(workflow_name=WORKFLOW, keep_last=argument))
            else:
                answers.append(await storage.list_checkpoint_ids(workflow_name=WORKFLOW))
        except (CheckpointConflictError, CheckpointNotFoundError, StaleWriterError) as refused:
            answers.append(type(refused).__name__)
    return answers


async def _stored(client: Any, prefix: str) -> dict[str, Any]:
    """Every key under ``prefix``: its kind, value and whether it has a TTL."""
    found = sorted([key.decode() async for key in client.scan_iter(match=f"{prefix}:*")])
    dumped: dict[str, Any] = {}
    for key in found:
        kind = (await client.type(key)).decode()
        if kind == "hash":
            value: Any = await client.hgetall(key)
        elif kind == "zset":
            value = await client.zrange(key, 0, -1, withscores=True)
            if key == RedisKeys(prefix).workflows:  # scored with when it expires: the save's time
                value = [(member, score == float("inf")) for member, score in value]
        elif kind == "list":
            value = await client.lrange(key, 0, -1)
        elif kind == "set":
            value = sorted(await client.smembers(key))
        else:
            value = await client.get(key)
        dumped[key[len(prefix) :]] = (kind, value, await client.pttl(key) > 0)
    return dumped


def _recording(storage: RedisCheckpointStorage, taken: set[Any]) -> None:
    """Note every path ``storage``'s handle chooses in ``taken``."""
    for part in (storage.backend.commits, storage.backend.loads):
        choose: Callable[..., Any] = part.path

        def noted(*args: Any, choose: Callable[..., Any] = choose) -> Any:
            chosen = choose(*args)
            taken.add(chosen[0] if isinstance(chosen, tuple) else chosen)
            return chosen

        part.path = noted  # type: ignore[method-assign, assignment]


async def _run(
    url: str, ttl: str, workload: list[tuple[str, Any]], *, general: bool
) -> tuple[list[Any], dict[str, Any], set[Any]]:
    prefix = redis_servers.fresh_prefix("paths")
    options = {"prefix": prefix, **({"ttl": ttl} if ttl else {})}
    storage = RedisCheckpointStorage.from_url(redis_servers.with_query(url, **options))
    fresh = RedisCheckpointStorage.from_url(redis_servers.with_query(url, **options))
    taken: set[Any] = set()
    for handle in (storage, fresh):
        handle.backend.commits.general_only = general
        handle.backend.loads.script_only = general
        _recording(handle, taken)
    try:
        answers = await _answers(storage, fresh, workload)
        stored = {} if storage.backend.cluster else await _stored(storage.backend.client, prefix)
    finally:
        await storage.aclose()
        await fresh.aclose()
        await redis_servers.wipe(url, prefix)
    return answers, stored, taken


@pytest.mark.redis
@pytest.mark.parametrize("ttl", ["", "3600"])
async def test_every_path_answers_and_stores_what_the_general_path_does(ttl: str) -> None:
    url = redis_servers.redis_url()
    workload = _workload()
    answers, stored, taken = await _run(url, ttl, workload, general=False)
    general_answers, general_stored, general_taken = await _run(url, ttl, workload, general=True)
    assert taken == {*SavePath, *LoadPath}  # the workload reached every path
    assert general_taken == {SavePath.SCRIPT, LoadPath.SCRIPT}
    assert answers == general_answers
    assert stored == general_stored
    # The workload is not empty of meaning: loads answered, refusals refused, large bodies whole.
    assert {"CheckpointConflictError", "CheckpointNotFoundError", "StaleWriterError"} <= {
        answer for answer in answers if isinstance(answer, str)
    }
    assert any(isinstance(answer, WorkflowCheckpoint) and answer.checkpoint_id == "big" for answer in answers)
    # The roots committed last rival: the one built last is the latest, and prune keeps both.
    latest_of_roots, _, listed = answers[-3:]
    assert (latest_of_roots.checkpoint_id, listed) == ("built-last", ["built-last", "built-first"])


@pytest.mark.redis_cluster
async def test_a_cluster_takes_the_general_path_and_answers_as_plain_redis_does() -> None:
    workload = _workload()
    answers, _, taken = await _run(redis_servers.shared_cluster().url, "", workload, general=False)
    assert taken == {SavePath.SCRIPT, LoadPath.SCRIPT}
    plain_answers, _, _ = await _run(redis_servers.redis_url(), "", workload, general=True)
    assert answers == plain_answers
