"""Real MAF workflows on every backend: checkpoints are saved (MAF only logs a failed save, so each
test counts them), restores continue exactly as an uninterrupted run, and a human-in-the-loop
pause resumes in a fresh process."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import maf_workflows as flows
import postgres_servers
import pytest
import redis_servers
from agent_framework import InMemoryCheckpointStorage as MafInMemoryCheckpointStorage
from agent_framework import WorkflowCheckpoint as MafWorkflowCheckpoint
from agent_framework._workflows._events import WorkflowEvent
from conftest import StorageMaker

from conformance import Outcome, StorageTarget, avalidate, select_clauses
from conformance.maf_profile import MafRunnerProfile
from storages import (
    CheckpointStore,
    CheckpointTypeNotAllowedError,
    InMemoryCheckpointStorage,
    UnserializableValueError,
    open_storage,
)
from storages.codec import CheckpointCodec
from storages.contract import AncestryEnd, Capability

pytestmark = pytest.mark.maf

WORKER = Path(__file__).with_name("maf_workflows.py")
REPO_ROOT = Path(__file__).resolve().parent.parent


def unique(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


async def chain(storage: CheckpointStore, newest: str) -> list[Any]:
    """Checkpoints from ``newest`` back to its root by load(); fails on a dangling link."""
    checkpoints: list[Any] = []
    current: str | None = newest
    while current is not None:
        checkpoint = await storage.load(current)  # raises on a dangling link
        checkpoints.append(checkpoint)
        current = checkpoint.previous_checkpoint_id
        assert len(checkpoints) < 1000, "the chain loops"
    return checkpoints


async def assert_walk_reaches_root(storage: CheckpointStore, newest: str) -> None:
    by_load = [checkpoint.checkpoint_id for checkpoint in await chain(storage, newest)]
    if Capability.ANCESTRY in storage.capabilities:
        walk = await storage.walk_ancestry_ids(newest)
        assert walk.end is AncestryEnd.ROOT
        assert list(walk.items) == by_load


# ---------------------------------------------------------------- on every backend


async def test_loop_workflow_checkpoints_every_superstep_and_resumes(storage_maker: StorageMaker) -> None:
    name, supersteps = unique("loop"), 5
    uninterrupted = (await flows.loop_workflow(name, supersteps).run(flows.LOOP_INPUT)).get_outputs()
    async with storage_maker() as storage:
        flows.allow_user_types(storage)
        first = await flows.loop_workflow(name, supersteps, storage).run(flows.LOOP_INPUT)
        assert first.get_outputs() == uninterrupted
        saved = await storage.list_checkpoints(workflow_name=name)
        # The entry checkpoint, then one per superstep, chained: none was dropped.
        assert [cp.iteration_count for cp in saved] == list(range(supersteps + 1))
        assert [cp.previous_checkpoint_id for cp in saved] == [None] + [cp.checkpoint_id for cp in saved[:-1]]
        assert all(type(cp) is MafWorkflowCheckpoint for cp in saved)
        mid = saved[2]
        (in_flight,) = mid.messages["accumulate"]
        assert in_flight.data == flows.Tally(2, 3, flows.Stage.DRAFT)
        assert mid.state["last_tally"] == flows.Tally(1, 3, flows.Stage.DRAFT)

    # A new handle and a workflow built without storage: restore through run(checkpoint_storage=...).
    async with storage_maker() as storage:
        flows.allow_user_types(storage)
        resumed = await flows.loop_workflow(name, supersteps).run(
            checkpoint_id=mid.checkpoint_id, checkpoint_storage=storage
        )
        assert resumed.get_outputs() == uninterrupted
        latest = await storage.get_latest(workflow_name=name)
        assert latest is not None
        assert latest.checkpoint_id not in {cp.checkpoint_id for cp in saved}
        fork = await chain(storage, latest.checkpoint_id)
        assert [cp.iteration_count for cp in fork] == [5, 4, 3, 2, 1, 0]
        assert fork[3].checkpoint_id == mid.checkpoint_id
        await assert_walk_reaches_root(storage, latest.checkpoint_id)


async def test_state_a_constructor_would_refuse_resumes_as_saved(storage_maker: StorageMaker) -> None:
    """The executor's budget is overspent (its __post_init__ refuses that) and a validator would
    append to the note on every load: MAF's own storage resumes both as saved, and so must ours."""
    name, supersteps = unique("spend"), 5
    uninterrupted = (await flows.spend_workflow(name, supersteps).run(flows.LOOP_INPUT)).get_outputs()
    assert uninterrupted == ["spent=15 of 5 note='plan [checked]'"]
    async with storage_maker() as storage:
        flows.allow_user_types(storage)
        await flows.spend_workflow(name, supersteps, storage).run(flows.LOOP_INPUT)
        saved = await storage.list_checkpoints(workflow_name=name)
        # Every superstep's checkpoint was saved (MAF only logs a failed save), and reads back.
        assert [cp.iteration_count for cp in saved] == list(range(supersteps + 1))
        mid = saved[3]
        budget = mid.state["_executor_state"]["spend"]["budget"]
        assert (type(budget), budget.limit, budget.spent) == (flows.Budget, 5, 9)
        assert mid.state["note"].text == "plan [checked]"

    reference = MafInMemoryCheckpointStorage()  # MAF's own storage: what a resume must give
    await flows.spend_workflow(name, supersteps, reference).run(flows.LOOP_INPUT)
    (maf_mid,) = [
        cp for cp in await reference.list_checkpoints(workflow_name=name) if cp.iteration_count == 3
    ]
    from_maf = await flows.spend_workflow(name, supersteps).run(
        checkpoint_id=maf_mid.checkpoint_id, checkpoint_storage=reference
    )
    expected = from_maf.get_outputs()
    assert expected == uninterrupted

    async with storage_maker() as storage:  # a new handle: a fresh read of every body
        flows.allow_user_types(storage)
        resumed = await flows.spend_workflow(name, supersteps).run(
            checkpoint_id=mid.checkpoint_id, checkpoint_storage=storage
        )
        assert resumed.get_outputs() == expected
        latest = await storage.get_latest(workflow_name=name)
        assert latest is not None
        assert latest.state["note"].text == "plan [checked]"
        assert latest.state["_executor_state"]["spend"]["budget"].spent == 15


async def test_sub_workflow_resumes_mid_run_with_its_chain_whole(storage_maker: StorageMaker) -> None:
    name, rounds = unique("parent"), 3
    child_name = f"{name}-child"
    uninterrupted = (await flows.sub_workflow(name, rounds).run(flows.LOOP_INPUT)).get_outputs()
    async with storage_maker() as storage:
        flows.allow_user_types(storage)
        first = await flows.sub_workflow(name, rounds, storage, child_storage=storage).run(flows.LOOP_INPUT)
        assert first.get_outputs() == uninterrupted
        parents = await storage.list_checkpoints(workflow_name=name)
        assert [cp.iteration_count for cp in parents] == list(range(2 * rounds + 1))
        assert await storage.list_checkpoint_ids(workflow_name=child_name)  # the child saved on its own
        # After the sub-workflow's second run: resuming must continue its state (value 4), not restart.
        mid = parents[3]
        embedded = mid.state["_executor_state"]["sub"]["sub_workflow_checkpoint"]
        assert type(embedded) is MafWorkflowCheckpoint
        assert embedded.state["_executor_state"]["double"] == {"value": 4}
        if Capability.NESTED in storage.capabilities:
            assert await storage.list_nested(mid.checkpoint_id) == [embedded.checkpoint_id]

    async with storage_maker() as storage:
        flows.allow_user_types(storage)
        resumed = await flows.sub_workflow(name, rounds, child_storage=storage).run(
            checkpoint_id=mid.checkpoint_id, checkpoint_storage=storage
        )
        assert resumed.get_outputs() == uninterrupted
        # The child's first checkpoint after the restore points at the embedded checkpoint's id;
        # in one shared storage that id resolves, so both chains reach their roots.
        child_latest = await storage.get_latest(workflow_name=child_name)
        assert child_latest is not None
        child_chain = await chain(storage, child_latest.checkpoint_id)
        assert embedded.checkpoint_id in [cp.checkpoint_id for cp in child_chain]
        await assert_walk_reaches_root(storage, child_latest.checkpoint_id)
        parent_latest = await storage.get_latest(workflow_name=name)
        assert parent_latest is not None
        await assert_walk_reaches_root(storage, parent_latest.checkpoint_id)


async def test_human_in_the_loop_pauses_and_resumes_with_a_new_workflow(storage_maker: StorageMaker) -> None:
    name = unique("hitl")
    reference = flows.hitl_workflow(name)
    paused = await reference.run(flows.LOOP_INPUT)
    (request,) = paused.get_request_info_events()
    uninterrupted = (await reference.run(responses={request.request_id: "yes"})).get_outputs()
    assert uninterrupted == ["total 1 at step 2: yes"]

    async with storage_maker() as storage:
        flows.allow_user_types(storage)
        first = await flows.hitl_workflow(name, storage).run(flows.LOOP_INPUT)
        (request,) = first.get_request_info_events()
        pause = await storage.get_latest(workflow_name=name)
        assert pause is not None
        assert pause.iteration_count == 2
        event = pause.pending_request_info_events[request.request_id]
        assert isinstance(event, WorkflowEvent)
        assert event.data == flows.Question("total 1", 2)
        assert (event.request_type, event.response_type) == (flows.Question, str)

    async with storage_maker() as storage:
        flows.allow_user_types(storage)
        resumed = await flows.hitl_workflow(name).run(
            checkpoint_id=pause.checkpoint_id,
            checkpoint_storage=storage,
            responses={request.request_id: "yes"},
        )
        assert resumed.get_outputs() == uninterrupted
        latest = await storage.get_latest(workflow_name=name)
        assert latest is not None
        await assert_walk_reaches_root(storage, latest.checkpoint_id)


async def test_runner_clauses_pass_through_maf(storage_maker: StorageMaker) -> None:
    """The kit's runner family, driven by real MAF workflows, with the child sharing the storage."""
    target = StorageTarget(name="maf", factory=storage_maker, runner=MafRunnerProfile())
    (backend,) = (await avalidate(target, clauses=["runner"])).backends
    assert not backend.error, backend.error
    assert {r.clause_id: r.outcome for r in backend.results} == {
        clause.id: Outcome.PASSED for clause in select_clauses(["runner"])
    }, [(r.clause_id, r.message) for r in backend.failures]


# ---------------------------------------------------------------- in a fresh process


def _worker(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("postgres", marks=pytest.mark.postgres),
    ],
)
async def test_human_in_the_loop_resumes_in_a_fresh_process(backend: str, tmp_path: Path) -> None:
    prefix = redis_servers.fresh_prefix("maf-hitl")
    url = {
        "sqlite": f"sqlite:///{tmp_path}/hitl.db",
        "redis": redis_servers.with_query(redis_servers.redis_url(), prefix=prefix),
        "postgres": postgres_servers.with_schema(
            postgres_servers.run_database_url(), prefix.replace("-", "_")
        ),
    }[backend]
    try:
        paused = _worker("pause", url)
        resumed = _worker("resume", url, paused["checkpoint_id"], paused["request_id"], "yes")
        assert resumed == {"outputs": ["total 1 at step 2: yes"]}
        async with open_storage(url) as storage:
            flows.allow_user_types(storage)
            ids = await storage.list_checkpoint_ids(workflow_name=flows.HITL_NAME)
            # entry, 2 supersteps, then after resume: the response entry and the superstep answering it
            assert len(ids) == 5
            assert (await storage.load(ids[3])).previous_checkpoint_id == paused["checkpoint_id"]
    finally:
        if backend == "redis":
            from redis.asyncio import Redis

            from storages.redis import delete_prefix

            client = Redis.from_url(redis_servers.redis_url())
            await delete_prefix(client, prefix)
            await client.aclose()
        if backend == "postgres":
            await postgres_servers.drop_schema(url.partition("?")[0], prefix.replace("-", "_"))


# ---------------------------------------------------------------- MAF's types and registry


def test_every_codec_allows_mafs_own_types() -> None:
    from agent_framework._workflows._runner_context import MessageType, WorkflowMessage

    codec = CheckpointCodec()
    event = WorkflowEvent.request_info("r1", "ask", flows.Question("t", 1), str)
    message = WorkflowMessage(
        data="hi", source_id="a", target_id="b", type=MessageType.RESPONSE, original_request_info_event=event
    )
    checkpoint = MafWorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="sig",
        messages={"a": [message]},
        pending_request_info_events={"r1": event},
    )
    codec.register(flows.Question)
    loaded = codec.decode_checkpoint(
        codec.encode_checkpoint(checkpoint), checkpoint_id=checkpoint.checkpoint_id
    )
    (got,) = loaded.messages["a"]
    assert dataclasses.replace(got, original_request_info_event=None) == dataclasses.replace(
        message, original_request_info_event=None
    )
    for restored in (got.original_request_info_event, loaded.pending_request_info_events["r1"]):
        assert isinstance(restored, WorkflowEvent)
        assert (restored.type, restored.request_id, restored.source_executor_id) == (
            "request_info",
            "r1",
            "ask",
        )
        assert (restored.data, restored.request_type, restored.response_type) == (
            flows.Question("t", 1),
            flows.Question,
            str,
        )
        assert restored.origin is event.origin


def test_agent_framework_classes_are_allowed_when_first_met() -> None:
    """An AgentExecutor keeps Message objects (MAF's to_dict/from_dict classes) and sends
    AgentExecutorRequest dataclasses; neither needs registering."""
    from agent_framework import AgentResponse, Message
    from agent_framework._workflows._agent_executor import AgentExecutorRequest

    question = Message(role="user", contents=["hello"])
    response = AgentResponse(messages=[Message(role="assistant", contents=["hi there"])])
    value = {"cache": [question], "request": AgentExecutorRequest(messages=[question]), "response": response}
    codec = CheckpointCodec()
    back = CheckpointCodec().decode_value(codec.encode_value(value))
    assert [type(back["cache"][0]), back["cache"][0].role, back["cache"][0].text] == [
        Message,
        "user",
        "hello",
    ]
    assert type(back["request"]) is AgentExecutorRequest
    assert back["request"].messages[0].text == "hello"
    assert type(back["response"]) is AgentResponse
    assert back["response"].text == "hi there"
    assert codec.allowed_type_keys == frozenset()  # allowed as MAF's, not listed as the user's


def test_only_the_listed_maf_types_are_allowed_that_way() -> None:
    codec = CheckpointCodec()
    with pytest.raises(UnserializableValueError, match="maf_workflows:Tally"):
        codec.encode_value(flows.Tally(1, 2, flows.Stage.DRAFT))
    body = CheckpointCodec(allowed_types=[flows.Tally]).encode_value(flows.Tally(1, 2, flows.Stage.DRAFT))
    with pytest.raises(CheckpointTypeNotAllowedError, match="Checkpoint deserialization blocked for type"):
        codec.decode_value(body)


def test_types_registered_with_mafs_registry_are_allowed() -> None:
    """flows.Stage is registered only with MAF's register_checkpoint_type."""
    codec = CheckpointCodec()
    assert codec.decode_value(codec.encode_value([flows.Stage.FINAL])) == [flows.Stage.FINAL]

    class Unlisted:
        pass

    with pytest.raises(UnserializableValueError, match="Unlisted"):
        codec.encode_value(Unlisted())


@dataclasses.dataclass
class Reply:
    text: str


def test_a_pending_request_with_an_unallowed_response_type_is_refused_at_save() -> None:
    codec = CheckpointCodec()
    event = WorkflowEvent.request_info("r1", "ask", "question", Reply)
    checkpoint = MafWorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="sig", pending_request_info_events={"r1": event}
    )
    with pytest.raises(UnserializableValueError, match="response_type") as caught:
        codec.encode_checkpoint(checkpoint)
    assert caught.value.path == "checkpoint.pending_request_info_events['r1']"
    codec.register(Reply)
    loaded = codec.decode_checkpoint(
        codec.encode_checkpoint(checkpoint), checkpoint_id=checkpoint.checkpoint_id
    )
    assert loaded.pending_request_info_events["r1"].response_type is Reply


async def test_an_unregistered_user_type_makes_maf_drop_checkpoints_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Why every test above counts the checkpoints: MAF logs a failed save and runs on."""
    name = unique("unregistered")
    # A codec that trusts no saved type (as every durable storage's); flows.Tally is not allowed.
    storage = InMemoryCheckpointStorage(codec=CheckpointCodec())
    with caplog.at_level(logging.WARNING, logger="agent_framework"):
        result = await flows.loop_workflow(name, 3, storage).run(flows.LOOP_INPUT)
    assert result.get_outputs()  # the run itself succeeded
    # Every checkpoint holds a Tally: in flight as a message, or in the shared state.
    assert await storage.list_checkpoint_ids(workflow_name=name) == []
    assert "maf_workflows:Tally" in caplog.text
    assert "Failed to create checkpoint" in caplog.text


def test_importing_storages_loads_no_maf_workflow_module() -> None:
    code = (
        "import sys, storages\n"
        "import storages.codec\nstorages.codec.CheckpointCodec(); storages.InMemoryCheckpointStorage()\n"
        "print(sorted(m for m in sys.modules if m.startswith('agent_framework._workflows')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert done.stdout.strip() == "[]"
