"""MAF's own storage tests, with our storages swapped in, on every backend.

The cases re-express, one function each and under MAF's test names, every storage-level test of
agent-framework-core 1.26's ``tests/workflow/test_checkpoint_storage_conformance.py`` (the
``CheckpointStorage`` ownership contract and the lineage tie-break) and the storage-level tests of
its ``tests/workflow/test_checkpoint.py`` (the ``test_memory_*`` and ``test_file_*`` cases that say
nothing about files, and the workflow tests that run MAF's runner on a storage). Where MAF's
module runs a case against ``InMemoryCheckpointStorage`` and ``FileCheckpointStorage``, it runs
here against memory, SQLite, Redis, S3 and PostgreSQL, and against MAF's two storages as the
reference (``maf-memory``, ``maf-file``): a case MAF's storages fail is not MAF's test.

What is left out, each with its reason, is listed in ``NOT_PORTED``; what behaves differently by
design is a case of its own that checks our documented behaviour (``DIFFERENCES``); both lists are
in docs/maf.md. Cases that need a MAF feature newer than the installed release name it in
``SINCE`` and are not generated on older releases (``test_every_case_runs_on_this_maf_release``
says which).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Never, cast

import pytest
from agent_framework import (
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    WorkflowBuilder,
    WorkflowCheckpoint,
    WorkflowCheckpointException,
    WorkflowContext,
    WorkflowEvent,
    WorkflowRunState,
    handler,
    response_handler,
)
from agent_framework._workflows._const import EDGE_STATE_KEY, INTERNAL_SOURCE_ID
from agent_framework._workflows._executor import Executor
from agent_framework._workflows._request_info_mixin import RequestInfoMixin
from agent_framework._workflows._runner_context import WorkflowMessage
from conftest import BACKENDS, StorageMaker
from packaging.version import Version

from storages import CheckpointTypeNotAllowedError, open_storage

pytestmark = pytest.mark.maf

MAF_VERSION = Version(importlib.metadata.version("agent-framework-core"))

OURS = ("memory", "sqlite", "redis", "s3", "postgres")
"""One store of each backend (each carries its backend's mark, so it runs in that tox environment)."""
REFERENCES = ("maf-memory", "maf-file")


# ---------------------------------------------------------------------- the storages under test


@dataclass
class Subject:
    """A storage the cases run against."""

    name: str
    storage: Any

    def allow(self, *types: type) -> None:
        """Allow ``types``: ``allowed_checkpoint_types`` for MAF's file storage (as MAF's tests
        pass it), the codec's allow-list for ours; MAF's memory storage keeps anything."""
        if isinstance(self.storage, FileCheckpointStorage):
            self.storage = FileCheckpointStorage(
                self.storage.storage_path, allowed_checkpoint_types=[_type_key(t) for t in types]
            )
        elif not isinstance(self.storage, InMemoryCheckpointStorage):
            self.storage.codec.allow(types=types)


def _type_key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


@pytest.fixture(params=OURS)
async def storage_maker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageMaker]:
    """One fresh store per backend (conftest marks each test with its backend by this name)."""
    async with BACKENDS[request.param].fresh_store(tmp_path) as maker:
        yield maker


@pytest.fixture
async def ours(storage_maker: StorageMaker) -> AsyncIterator[Subject]:
    async with storage_maker() as storage:
        yield Subject("ours", storage)


@pytest.fixture(params=REFERENCES)
def reference(request: pytest.FixtureRequest, tmp_path: Path) -> Subject:
    """MAF's own storages, which every case must pass for it to count as MAF's test."""
    if request.param == "maf-memory":
        return Subject(request.param, InMemoryCheckpointStorage())
    return Subject(request.param, FileCheckpointStorage(tmp_path / "conformance"))


# ---------------------------------------------------------------------- the data MAF's tests use


@dataclass
class _TestToolApprovalRequest:
    tool_name: str
    arguments: dict[str, Any]
    timestamp: datetime


@dataclass
class _TestExecutorState:
    counter: int
    history: list[str]


@dataclass
class _TestApprovalRequest:
    action: str
    params: tuple[Any, ...]


@dataclass
class _TestCustomData:
    name: str
    value: int
    tags: list[str]


@dataclass
class _AllowedTestState:
    name: str
    value: int


def _conformance_checkpoint(workflow_name: str = "conformance-workflow") -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash="conformance-hash",
        state={
            "shared": {"counter": 0, "history": ["initial"]},
            "_executor_state": {"executor1": {"visits": ["first"]}},
        },
        messages={
            "executor1": [
                WorkflowMessage(data={"text": "hello", "tags": ["initial"]}, source_id="src", target_id="tgt")
            ]
        },
        pending_request_info_events={
            "req1": WorkflowEvent.request_info(
                request_id="req1",
                source_executor_id="executor1",
                request_data={"payload": ["initial"]},
                response_type=str,
            )
        },
        metadata={"tags": ["initial"]},
    )


def _mutate(checkpoint: WorkflowCheckpoint) -> None:
    checkpoint.state["shared"]["counter"] = 999
    checkpoint.state["shared"]["history"].append("mutated")
    checkpoint.state["_executor_state"]["executor1"]["visits"].append("mutated")
    cast("dict[str, Any]", checkpoint.messages["executor1"][0].data)["tags"].append("mutated")
    cast("dict[str, Any]", checkpoint.pending_request_info_events["req1"].data)["payload"].append("mutated")
    checkpoint.metadata["tags"].append("mutated")


def _assert_pristine(checkpoint: WorkflowCheckpoint) -> None:
    assert checkpoint.state["shared"] == {"counter": 0, "history": ["initial"]}
    assert checkpoint.state["_executor_state"]["executor1"]["visits"] == ["first"]
    assert cast("dict[str, Any]", checkpoint.messages["executor1"][0].data)["tags"] == ["initial"]
    assert cast("dict[str, Any]", checkpoint.pending_request_info_events["req1"].data)["payload"] == [
        "initial"
    ]
    assert checkpoint.metadata["tags"] == ["initial"]


def _plain(**fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name="test-workflow", graph_signature_hash="test-hash", **fields)


# ------------------------------------------------------ test_checkpoint_storage_conformance.py

Case = Callable[[Subject], Awaitable[None]]
CASES: dict[str, Case] = {}
SINCE: dict[str, str] = {}


def case(since: str | None = None) -> Callable[[Case], Case]:
    """Register a case under MAF's test name (``maf_x`` is MAF's ``test_x``); ``since`` is the
    first MAF release whose own storages pass it."""

    def register(function: Case) -> Case:
        name = "test_" + function.__name__.removeprefix("maf_")  # MAF's name for the case
        CASES[name] = function
        if since is not None:
            SINCE[name] = since
        return function

    return register


@case()
async def maf_load_returns_caller_owned_copy(s: Subject) -> None:
    checkpoint = _conformance_checkpoint()
    await s.storage.save(checkpoint)
    _mutate(await s.storage.load(checkpoint.checkpoint_id))
    _assert_pristine(await s.storage.load(checkpoint.checkpoint_id))


@case()
async def maf_repeated_loads_are_independent(s: Subject) -> None:
    checkpoint = _conformance_checkpoint()
    await s.storage.save(checkpoint)
    first = await s.storage.load(checkpoint.checkpoint_id)
    second = await s.storage.load(checkpoint.checkpoint_id)
    assert first is not second
    _mutate(first)
    _assert_pristine(second)


@case()
async def maf_get_latest_returns_caller_owned_copy(s: Subject) -> None:
    checkpoint = _conformance_checkpoint()
    await s.storage.save(checkpoint)
    latest = await s.storage.get_latest(workflow_name=checkpoint.workflow_name)
    assert latest is not None
    _mutate(latest)
    reloaded = await s.storage.get_latest(workflow_name=checkpoint.workflow_name)
    assert reloaded is not None
    _assert_pristine(reloaded)


@case()
async def maf_list_checkpoints_returns_caller_owned_copies(s: Subject) -> None:
    checkpoint = _conformance_checkpoint()
    await s.storage.save(checkpoint)
    listed = await s.storage.list_checkpoints(workflow_name=checkpoint.workflow_name)
    assert len(listed) == 1
    _mutate(listed[0])
    relisted = await s.storage.list_checkpoints(workflow_name=checkpoint.workflow_name)
    assert len(relisted) == 1
    _assert_pristine(relisted[0])


@case()
async def maf_save_snapshots_at_call_time(s: Subject) -> None:
    checkpoint = _conformance_checkpoint()
    await s.storage.save(checkpoint)
    _mutate(checkpoint)
    _assert_pristine(await s.storage.load(checkpoint.checkpoint_id))


@case()
async def maf_list_checkpoints_filters_by_workflow_name(s: Subject) -> None:
    first = _conformance_checkpoint("workflow-a")
    second = _conformance_checkpoint("workflow-b")
    await s.storage.save(first)
    await s.storage.save(second)
    listed_a = await s.storage.list_checkpoints(workflow_name="workflow-a")
    listed_b = await s.storage.list_checkpoints(workflow_name="workflow-b")
    assert {c.checkpoint_id for c in listed_a} == {first.checkpoint_id}
    assert {c.checkpoint_id for c in listed_b} == {second.checkpoint_id}


@case()
async def maf_get_latest_returns_none_when_empty(s: Subject) -> None:
    assert await s.storage.get_latest(workflow_name="missing-workflow") is None


@case()
async def maf_load_missing_id_raises(s: Subject) -> None:
    with pytest.raises(WorkflowCheckpointException):
        await s.storage.load("does-not-exist")


@case()
async def maf_save_returns_id(s: Subject) -> None:
    checkpoint = _conformance_checkpoint()
    assert await s.storage.save(checkpoint) == checkpoint.checkpoint_id


async def _lineage_tie(s: Subject, order: str) -> None:
    ts = "2026-09-18T10:00:00+00:00"
    parent = WorkflowCheckpoint(
        workflow_name="conformance-workflow",
        graph_signature_hash="hash",
        checkpoint_id="parent-cp",
        timestamp=ts,
        iteration_count=1,
    )
    child = WorkflowCheckpoint(
        workflow_name="conformance-workflow",
        graph_signature_hash="hash",
        checkpoint_id="child-cp",
        timestamp=ts,
        iteration_count=1,
        previous_checkpoint_id="parent-cp",
    )
    for checkpoint in [parent, child] if order == "parent_first" else [child, parent]:
        await s.storage.save(checkpoint)
    latest = await s.storage.get_latest(workflow_name="conformance-workflow")
    assert latest is not None
    assert latest.checkpoint_id == "child-cp"


@case(since="1.26.0")
async def maf_get_latest_breaks_timestamp_ties_by_lineage_parent_first(s: Subject) -> None:
    await _lineage_tie(s, "parent_first")


@case(since="1.26.0")
async def maf_get_latest_breaks_timestamp_ties_by_lineage_child_first(s: Subject) -> None:
    await _lineage_tie(s, "child_first")


# ---------------------------------------------------------------------- test_checkpoint.py: storage cases


@case()
async def maf_memory_checkpoint_storage_save_and_load(s: Subject) -> None:
    checkpoint = _plain(
        messages={"executor1": [{"data": "hello"}]},
        pending_request_info_events={"req123": {"data": "test"}},
    )
    assert await s.storage.save(checkpoint) == checkpoint.checkpoint_id
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    assert loaded.checkpoint_id == checkpoint.checkpoint_id
    assert loaded.workflow_name == checkpoint.workflow_name
    assert loaded.graph_signature_hash == checkpoint.graph_signature_hash
    assert loaded.messages == checkpoint.messages
    assert loaded.pending_request_info_events == checkpoint.pending_request_info_events


@case()
async def maf_memory_checkpoint_storage_list(s: Subject) -> None:
    one = WorkflowCheckpoint(workflow_name="workflow-1", graph_signature_hash="hash-1")
    two = WorkflowCheckpoint(workflow_name="workflow-1", graph_signature_hash="hash-2")
    three = WorkflowCheckpoint(workflow_name="workflow-2", graph_signature_hash="hash-3")
    for checkpoint in (one, two, three):
        await s.storage.save(checkpoint)
    ids = await s.storage.list_checkpoint_ids(workflow_name="workflow-1")
    assert sorted(ids) == sorted([one.checkpoint_id, two.checkpoint_id])
    listed = await s.storage.list_checkpoints(workflow_name="workflow-1")
    assert all(isinstance(c, WorkflowCheckpoint) for c in listed)
    assert {c.checkpoint_id for c in listed} == {one.checkpoint_id, two.checkpoint_id}
    assert await s.storage.list_checkpoint_ids(workflow_name="workflow-2") == [three.checkpoint_id]
    assert [c.checkpoint_id for c in await s.storage.list_checkpoints(workflow_name="workflow-2")] == [
        three.checkpoint_id
    ]
    assert await s.storage.list_checkpoint_ids(workflow_name="nonexistent-workflow") == []
    assert await s.storage.list_checkpoints(workflow_name="nonexistent-workflow") == []


@case()
async def maf_memory_checkpoint_storage_delete(s: Subject) -> None:
    checkpoint = _plain()
    await s.storage.save(checkpoint)
    assert await s.storage.load(checkpoint.checkpoint_id) is not None
    assert await s.storage.delete(checkpoint.checkpoint_id) is True
    with pytest.raises(WorkflowCheckpointException):
        await s.storage.load(checkpoint.checkpoint_id)
    assert await s.storage.delete(checkpoint.checkpoint_id) is False


@case()
async def maf_memory_checkpoint_storage_get_latest(s: Subject) -> None:
    one = WorkflowCheckpoint(workflow_name="workflow-1", graph_signature_hash="hash-1")
    await asyncio.sleep(0.01)
    two = WorkflowCheckpoint(workflow_name="workflow-1", graph_signature_hash="hash-2")
    await asyncio.sleep(0.01)
    three = WorkflowCheckpoint(workflow_name="workflow-2", graph_signature_hash="hash-3")
    for checkpoint in (one, two, three):
        await s.storage.save(checkpoint)
    latest = await s.storage.get_latest(workflow_name="workflow-1")
    assert latest is not None
    assert latest.checkpoint_id == two.checkpoint_id
    latest2 = await s.storage.get_latest(workflow_name="workflow-2")
    assert latest2 is not None
    assert latest2.checkpoint_id == three.checkpoint_id
    assert await s.storage.get_latest(workflow_name="nonexistent-workflow") is None


@case()
async def maf_memory_checkpoint_storage_roundtrip_json_native_types(s: Subject) -> None:
    checkpoint = _plain(
        state={
            "string": "hello world",
            "integer": 42,
            "negative_int": -100,
            "float": 3.14159,
            "negative_float": -2.71828,
            "bool_true": True,
            "bool_false": False,
            "null_value": None,
            "zero": 0,
            "empty_string": "",
        }
    )
    await s.storage.save(checkpoint)
    assert (await s.storage.load(checkpoint.checkpoint_id)).state == checkpoint.state


@case()
async def maf_memory_checkpoint_storage_roundtrip_datetime(s: Subject) -> None:
    now = datetime.now(UTC)
    specific = datetime(2025, 6, 15, 10, 30, 45, 123456, tzinfo=UTC)
    checkpoint = _plain(
        state={
            "current_time": now,
            "specific_time": specific,
            "nested": {"created_at": now, "updated_at": specific},
        }
    )
    await s.storage.save(checkpoint)
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    assert loaded.state["current_time"] == now
    assert loaded.state["specific_time"] == specific
    assert loaded.state["nested"]["created_at"] == now
    assert loaded.state["nested"]["updated_at"] == specific


@case()
async def maf_memory_checkpoint_storage_roundtrip_dataclass(s: Subject) -> None:
    s.allow(_TestCustomData)
    custom = _TestCustomData(name="test", value=42, tags=["a", "b", "c"])
    checkpoint = _plain(state={"custom_data": custom, "nested": {"inner_data": custom}})
    await s.storage.save(checkpoint)
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    assert loaded.state["custom_data"] == custom
    assert loaded.state["custom_data"].tags == ["a", "b", "c"]
    assert loaded.state["nested"]["inner_data"] == custom
    assert isinstance(loaded.state["custom_data"], _TestCustomData)


@case()
async def maf_memory_checkpoint_storage_roundtrip_tuple_and_set(s: Subject) -> None:
    checkpoint = _plain(
        state={
            "my_tuple": (1, "two", 3.0, None),
            "my_frozenset": frozenset({1, 2, 3}),
            "nested_tuple": {"inner": (10, 20, 30)},
        }
    )
    await s.storage.save(checkpoint)
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    assert loaded.state["my_tuple"] == (1, "two", 3.0, None)
    assert isinstance(loaded.state["my_tuple"], tuple)
    assert loaded.state["my_frozenset"] == frozenset({1, 2, 3})
    assert isinstance(loaded.state["my_frozenset"], frozenset)
    assert loaded.state["nested_tuple"]["inner"] == (10, 20, 30)
    assert isinstance(loaded.state["nested_tuple"]["inner"], tuple)


@case()
async def maf_memory_checkpoint_storage_roundtrip_complex_nested_structures(s: Subject) -> None:
    first, second, third = (datetime(2025, month, 1, tzinfo=UTC) for month in (1, 2, 3))
    state = {
        "level1": {
            "level2": {
                "level3": {
                    "deep_string": "hello",
                    "deep_int": 123,
                    "deep_datetime": first,
                    "deep_tuple": (1, 2, 3),
                }
            },
            "list_of_dicts": [{"a": 1, "b": second}, {"c": 2, "d": (4, 5, 6)}],
        },
        "mixed_list": ["string", 42, 3.14, True, None, third, (7, 8, 9)],
    }
    checkpoint = _plain(state=state)
    await s.storage.save(checkpoint)
    loaded = (await s.storage.load(checkpoint.checkpoint_id)).state
    level3 = loaded["level1"]["level2"]["level3"]
    assert (level3["deep_string"], level3["deep_int"], level3["deep_datetime"]) == ("hello", 123, first)
    assert level3["deep_tuple"] == (1, 2, 3)
    assert isinstance(level3["deep_tuple"], tuple)
    assert loaded["level1"]["list_of_dicts"][0] == {"a": 1, "b": second}
    assert loaded["level1"]["list_of_dicts"][1]["d"] == (4, 5, 6)
    assert isinstance(loaded["level1"]["list_of_dicts"][1]["d"], tuple)
    assert loaded["mixed_list"][:2] == ["string", 42]
    assert loaded["mixed_list"][5] == third
    assert loaded["mixed_list"][6] == (7, 8, 9)
    assert isinstance(loaded["mixed_list"][6], tuple)


@case()
async def maf_memory_checkpoint_storage_roundtrip_messages_with_complex_data(s: Subject) -> None:
    moment = datetime(2025, 1, 1, tzinfo=UTC)
    one = WorkflowMessage(data={"text": "hello", "timestamp": moment}, source_id="source", target_id="target")
    two = WorkflowMessage(data=(1, 2, 3), source_id="s2", target_id=None)
    three = WorkflowMessage(data="simple string", source_id="s3", target_id="t3")
    checkpoint = _plain(messages={"executor1": [one, two], "executor2": [three]})
    await s.storage.save(checkpoint)
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    assert len(loaded.messages["executor1"]) == 2
    (got1, got2), (got3,) = loaded.messages["executor1"], loaded.messages["executor2"]
    assert all(isinstance(message, WorkflowMessage) for message in (got1, got2, got3))
    assert got1.data == {"text": "hello", "timestamp": moment}
    assert (got1.source_id, got1.target_id) == ("source", "target")
    assert got2.data == (1, 2, 3)
    assert isinstance(got2.data, tuple)
    assert (got2.source_id, got2.target_id) == ("s2", None)
    assert (got3.data, got3.source_id, got3.target_id) == ("simple string", "s3", "t3")


@case()
async def maf_memory_checkpoint_storage_roundtrip_pending_request_info_events(s: Subject) -> None:
    s.allow(_TestToolApprovalRequest)
    moment = datetime(2025, 1, 1, tzinfo=UTC)
    first = WorkflowEvent.request_info(
        request_id="req123",
        source_executor_id="executor1",
        request_data="What is your name?",
        response_type=str,
    )
    second = WorkflowEvent.request_info(
        request_id="req456",
        source_executor_id="executor2",
        request_data=_TestToolApprovalRequest(
            tool_name="search", arguments={"query": "test"}, timestamp=moment
        ),
        response_type=bool,
    )
    checkpoint = _plain(pending_request_info_events={"req123": first, "req456": second})
    await s.storage.save(checkpoint)
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    got1, got2 = loaded.pending_request_info_events["req123"], loaded.pending_request_info_events["req456"]
    assert isinstance(got1, WorkflowEvent)
    assert isinstance(got2, WorkflowEvent)
    assert (got1.type, got1.request_id, got1.source_executor_id) == ("request_info", "req123", "executor1")
    assert got1.data == "What is your name?"
    assert got1.response_type is str
    assert (got2.type, got2.request_id, got2.source_executor_id) == ("request_info", "req456", "executor2")
    assert isinstance(got2.data, _TestToolApprovalRequest)
    assert (got2.data.tool_name, got2.data.arguments, got2.data.timestamp) == (
        "search",
        {"query": "test"},
        moment,
    )
    assert got2.response_type is bool


@case()
async def maf_memory_checkpoint_storage_roundtrip_full_checkpoint(s: Subject) -> None:
    s.allow(_TestApprovalRequest, _TestExecutorState)
    moment = datetime(2025, 1, 1, tzinfo=UTC)
    started = datetime(2025, 6, 15, 11, 0, 0, tzinfo=UTC)
    checkpoint = WorkflowCheckpoint(
        checkpoint_id="full-test-checkpoint",
        workflow_name="comprehensive-test",
        graph_signature_hash="hash-abc123",
        previous_checkpoint_id="previous-checkpoint-id",
        timestamp=datetime(2025, 6, 15, 12, 0, 0, tzinfo=UTC).isoformat(),
        messages={
            "exec1": [WorkflowMessage(data="msg1", source_id="s", target_id="t")],
            "exec2": [WorkflowMessage(data=moment, source_id="a", target_id="b")],
        },
        state={
            "user_data": {"name": "test", "created": moment},
            "_executor_state": {"exec1": _TestExecutorState(counter=5, history=["a", "b", "c"])},
        },
        pending_request_info_events={
            "req1": WorkflowEvent.request_info(
                request_id="req1",
                source_executor_id="exec1",
                request_data=_TestApprovalRequest(action="approve", params=(1, 2, 3)),
                response_type=bool,
            )
        },
        iteration_count=10,
        metadata={"superstep": 5, "started_at": started},
        version="1.0",
    )
    await s.storage.save(checkpoint)
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    for field in (
        "checkpoint_id",
        "workflow_name",
        "graph_signature_hash",
        "previous_checkpoint_id",
        "timestamp",
        "iteration_count",
        "version",
    ):
        assert getattr(loaded, field) == getattr(checkpoint, field), field
    assert loaded.state["user_data"]["created"] == moment
    executor_state = loaded.state["_executor_state"]["exec1"]
    assert isinstance(executor_state, _TestExecutorState)
    assert (executor_state.counter, executor_state.history) == (5, ["a", "b", "c"])
    got1, got2 = loaded.messages["exec1"][0], loaded.messages["exec2"][0]
    assert isinstance(got1, WorkflowMessage)
    assert isinstance(got2, WorkflowMessage)
    assert (got1.data, got1.source_id, got2.data) == ("msg1", "s", moment)
    event = loaded.pending_request_info_events["req1"]
    assert isinstance(event, WorkflowEvent)
    assert (event.type, event.request_id) == ("request_info", "req1")
    assert isinstance(event.data, _TestApprovalRequest)
    assert event.data.params == (1, 2, 3)
    assert loaded.metadata == {"superstep": 5, "started_at": started}


@case()
async def maf_memory_checkpoint_storage_roundtrip_bytes(s: Subject) -> None:
    binary, text = b"\x00\x01\x02\xff\xfe\xfd", "Hello 世界".encode()
    checkpoint = _plain(
        state={"binary_data": binary, "unicode_bytes": text, "nested": {"inner_bytes": binary}}
    )
    await s.storage.save(checkpoint)
    loaded = (await s.storage.load(checkpoint.checkpoint_id)).state
    assert (loaded["binary_data"], loaded["unicode_bytes"], loaded["nested"]["inner_bytes"]) == (
        binary,
        text,
        binary,
    )
    assert isinstance(loaded["binary_data"], bytes)


@case()
async def maf_memory_checkpoint_storage_roundtrip_empty_collections(s: Subject) -> None:
    checkpoint = _plain(
        state={
            "empty_dict": {},
            "empty_list": [],
            "empty_tuple": (),
            "nested_empty": {"inner_dict": {}, "inner_list": []},
        },
        messages={},
        pending_request_info_events={},
    )
    await s.storage.save(checkpoint)
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    assert (loaded.state["empty_dict"], loaded.state["empty_list"]) == ({}, [])
    assert loaded.state["empty_tuple"] == ()
    assert isinstance(loaded.state["empty_tuple"], tuple)
    assert loaded.state["nested_empty"]["inner_dict"] == {}
    assert (loaded.messages, loaded.pending_request_info_events) == ({}, {})


@case(since="1.26.0")
async def maf_memory_get_latest_ties_broken_by_lineage_not_save_order(s: Subject) -> None:
    """MAF runs both save orders on one fresh storage each; one store serves both here, under two
    workflow names."""
    ts = datetime(2026, 9, 18, 10, 0, 0, tzinfo=UTC).isoformat()
    for name, reverse in (("w-forward", False), ("w-reverse", True)):
        parent = WorkflowCheckpoint(
            workflow_name=name,
            graph_signature_hash="h",
            checkpoint_id=f"{name}-parent",
            timestamp=ts,
            iteration_count=1,
        )
        child = WorkflowCheckpoint(
            workflow_name=name,
            graph_signature_hash="h",
            checkpoint_id=f"{name}-child",
            timestamp=ts,
            iteration_count=1,
            previous_checkpoint_id=f"{name}-parent",
        )
        for checkpoint in [child, parent] if reverse else [parent, child]:
            await s.storage.save(checkpoint)
        latest = await s.storage.get_latest(workflow_name=name)
        assert latest is not None
        assert latest.checkpoint_id == f"{name}-child"


@case()
async def maf_file_checkpoint_storage_save_and_load(s: Subject) -> None:
    checkpoint = _plain(
        messages={"executor1": [{"data": "hello", "source_id": "test", "target_id": None}]},
        state={"key": "value"},
        pending_request_info_events={"req123": {"data": "test"}},
    )
    assert await s.storage.save(checkpoint) == checkpoint.checkpoint_id
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    assert (loaded.checkpoint_id, loaded.workflow_name) == (
        checkpoint.checkpoint_id,
        checkpoint.workflow_name,
    )
    assert loaded.messages == checkpoint.messages
    assert loaded.state == checkpoint.state
    assert loaded.pending_request_info_events == checkpoint.pending_request_info_events


@case()
async def maf_file_checkpoint_storage_concurrent_saves_same_id(s: Subject) -> None:
    checkpoint = _plain(checkpoint_id="shared-id")
    results = await asyncio.gather(*(s.storage.save(checkpoint) for _ in range(50)), return_exceptions=True)
    errors = [result for result in results if isinstance(result, BaseException)]
    assert not errors, f"concurrent saves raised: {errors[:1]!r}"
    assert all(result == "shared-id" for result in results)
    loaded = await s.storage.load("shared-id")
    assert (loaded.workflow_name, loaded.graph_signature_hash) == (checkpoint.workflow_name, "test-hash")


@case()
async def maf_file_checkpoint_storage_list_ids_empty(s: Subject) -> None:
    assert await s.storage.list_checkpoint_ids(workflow_name="any-workflow") == []


@case()
async def maf_file_checkpoint_storage_json_serialization(s: Subject) -> None:
    """MAF's case also reads the JSON file back; the values are what a storage promises."""
    checkpoint = _plain(
        messages={"executor1": [{"data": {"nested": {"value": 42}}, "source_id": "test", "target_id": None}]},
        state={"list": [1, 2, 3], "dict": {"a": "b", "c": {"d": "e"}}, "bool": True, "null": None},
        pending_request_info_events={"req123": {"data": "test"}},
    )
    await s.storage.save(checkpoint)
    loaded = await s.storage.load(checkpoint.checkpoint_id)
    assert loaded.messages == checkpoint.messages
    assert loaded.state == checkpoint.state
    assert loaded.state["bool"] is True


# ------------------------------------------------------ test_checkpoint.py: MAF's runner on a storage


class _Start(Executor):
    @handler
    async def run(self, message: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(message + "-start")


class _Middle(Executor):
    @handler
    async def process(self, message: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(message + "-middle")


class _Finish(Executor):
    @handler
    async def finish(self, message: str, ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(message + "-done")


def _three_steps(name: str, storage: Any) -> Any:
    start, middle, finish = _Start(id="start"), _Middle(id="middle"), _Finish(id="finish")
    builder = WorkflowBuilder(name=name, max_iterations=10, start_executor=start, checkpoint_storage=storage)
    return builder.add_edge(start, middle).add_edge(middle, finish).build()


async def _by_timestamp(storage: Any, name: str) -> list[WorkflowCheckpoint]:
    return sorted(await storage.list_checkpoints(workflow_name=name), key=lambda c: c.timestamp)


@case()
async def maf_workflow_checkpoint_chaining_via_previous_checkpoint_id(s: Subject) -> None:
    workflow = _three_steps("chaining-test", s.storage)
    _ = [event async for event in workflow.run("hello", stream=True)]
    checkpoints = await _by_timestamp(s.storage, workflow.name)
    assert len(checkpoints) >= 2
    assert checkpoints[0].previous_checkpoint_id is None
    for earlier, later in itertools.pairwise(checkpoints):
        assert later.previous_checkpoint_id == earlier.checkpoint_id


@case()
async def maf_workflow_checkpoint_ancestry_preserved_after_resume(s: Subject) -> None:
    workflow = _three_steps("resume-ancestry-test", s.storage)
    _ = [event async for event in workflow.run("hello", stream=True)]
    initial = await _by_timestamp(s.storage, workflow.name)
    assert len(initial) >= 3
    initial_ids = {c.checkpoint_id for c in initial}
    resume_from = initial[len(initial) // 2]
    resumed = _three_steps("resume-ancestry-test", s.storage)
    _ = [event async for event in resumed.run(checkpoint_id=resume_from.checkpoint_id, stream=True)]
    every = await _by_timestamp(s.storage, workflow.name)
    new = [c for c in every if c.checkpoint_id not in initial_ids]
    assert new
    assert new[0].previous_checkpoint_id == resume_from.checkpoint_id
    for earlier, later in itertools.pairwise(new):
        assert later.previous_checkpoint_id == earlier.checkpoint_id
    by_id = {c.checkpoint_id: c for c in every}
    chain: list[str] = []
    cursor: str | None = new[-1].checkpoint_id
    while cursor is not None:
        chain.append(cursor)
        cursor = by_id[cursor].previous_checkpoint_id
    assert resume_from.checkpoint_id in chain
    assert chain[-1] == initial[0].checkpoint_id


@case()
async def maf_workflow_entry_checkpoint_records_input_and_replays(s: Subject) -> None:
    def build() -> Any:
        start, finish = _Start(id="start"), _Finish(id="finish")
        builder = WorkflowBuilder(
            name="entry-replay-test", max_iterations=10, start_executor=start, checkpoint_storage=s.storage
        )
        return builder.add_edge(start, finish).build()

    workflow = build()
    first_outputs = (await workflow.run("hello")).get_outputs()
    assert first_outputs == ["hello-start-done"]
    entry = [
        c for c in await s.storage.list_checkpoints(workflow_name=workflow.name) if c.iteration_count == 0
    ]
    assert len(entry) == 1
    assert entry[0].previous_checkpoint_id is None
    seeded = entry[0].messages.get(INTERNAL_SOURCE_ID("start"))
    assert seeded is not None
    assert len(seeded) == 1
    assert seeded[0].data == "hello"
    assert (await build().run(checkpoint_id=entry[0].checkpoint_id)).get_outputs() == first_outputs


@case()
async def maf_workflow_one_checkpoint_per_superstep_lineage_and_replay(s: Subject) -> None:
    workflow = _three_steps("per-superstep-test", s.storage)
    events = [event async for event in workflow.run("hello", stream=True)]
    outputs = [event.data for event in events if event.type == "output"]
    supersteps = sum(1 for event in events if event.type == "superstep_completed")
    assert outputs == ["hello-start-middle-done"]
    assert supersteps == 3
    checkpoints = sorted(
        await s.storage.list_checkpoints(workflow_name=workflow.name), key=lambda c: c.iteration_count
    )
    assert [c.iteration_count for c in checkpoints] == list(range(supersteps + 1))
    assert checkpoints[0].previous_checkpoint_id is None
    for earlier, later in itertools.pairwise(checkpoints):
        assert later.previous_checkpoint_id == earlier.checkpoint_id
    for checkpoint in checkpoints[:-1]:
        replay = _three_steps("per-superstep-test", s.storage)
        assert (await replay.run(checkpoint_id=checkpoint.checkpoint_id)).get_outputs() == outputs


class _Hil(Executor, RequestInfoMixin):
    @handler
    async def start(self, message: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(message, response_type=str, request_id="req1")

    @response_handler
    async def on_response(
        self, original_request: str, response: str, ctx: WorkflowContext[Never, str]
    ) -> None:
        await ctx.yield_output(f"{original_request}->{response}")


@case()
async def maf_workflow_response_entry_checkpoint_records_response_and_replays(s: Subject) -> None:
    def build() -> Any:
        return WorkflowBuilder(
            name="response-entry-test",
            max_iterations=10,
            start_executor=_Hil(id="hil"),
            checkpoint_storage=s.storage,
        ).build()

    workflow = build()
    result = await workflow.run("approve")
    (request,) = result.get_request_info_events()
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    before = await s.storage.list_checkpoints(workflow_name=workflow.name)
    pending = max(before, key=lambda c: c.iteration_count)
    assert pending.pending_request_info_events
    final = await workflow.run(responses={request.request_id: "yes"})
    assert final.get_outputs() == ["approve->yes"]
    before_ids = {c.checkpoint_id for c in before}
    new = [
        c
        for c in await s.storage.list_checkpoints(workflow_name=workflow.name)
        if c.checkpoint_id not in before_ids
    ]
    entry = next(c for c in new if c.iteration_count == pending.iteration_count)
    assert entry.checkpoint_id != pending.checkpoint_id
    assert entry.previous_checkpoint_id == pending.checkpoint_id
    assert not entry.pending_request_info_events
    assert entry.messages
    assert (await build().run(checkpoint_id=entry.checkpoint_id)).get_outputs() == ["approve->yes"]


class _Dispatcher(Executor):
    @handler
    async def dispatch(self, message: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(message)


class _Fast(Executor):
    @handler
    async def run(self, message: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(f"{message}-fast")


class _Relay(Executor):
    @handler
    async def run(self, message: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(message)


class _Slow(Executor):
    @handler
    async def run(self, message: str, ctx: WorkflowContext[str]) -> None:
        await ctx.send_message(f"{message}-slow")


class _Joiner(Executor):
    @handler
    async def join(self, messages: list[str], ctx: WorkflowContext[Never, str]) -> None:
        await ctx.yield_output(", ".join(sorted(messages)))


@case()
async def maf_workflow_resume_restores_partially_filled_fan_in_buffer(s: Subject) -> None:
    def build() -> Any:
        dispatcher, fast, relay = _Dispatcher(id="dispatcher"), _Fast(id="fast"), _Relay(id="relay")
        slow, joiner = _Slow(id="slow"), _Joiner(id="joiner")
        builder = WorkflowBuilder(
            name="fan-in-resume-test",
            max_iterations=10,
            start_executor=dispatcher,
            checkpoint_storage=s.storage,
        )
        builder = builder.add_edge(dispatcher, fast).add_edge(dispatcher, relay).add_edge(relay, slow)
        return builder.add_fan_in_edges([fast, slow], joiner).build()

    workflow = build()
    assert (await workflow.run("seed")).get_outputs() == ["seed-fast, seed-slow"]
    checkpoints = await s.storage.list_checkpoints(workflow_name=workflow.name)
    buffered = [c for c in checkpoints if EDGE_STATE_KEY in c.state]
    assert len(buffered) == 1
    resumed = (await build().run(checkpoint_id=buffered[0].checkpoint_id)).get_outputs()
    assert resumed == ["seed-fast, seed-slow"]


# ---------------------------------------------------------------------- by design, and left out

DIFFERENCES = {
    "test_file_checkpoint_storage_list_ids_matches_list_decode_filter": (
        "listing a workflow that holds a type the reader does not allow raises "
        "CheckpointTypeNotAllowedError naming the type (MAF's file storage leaves the checkpoint out)"
    ),
}
"""MAF's case -> what our durable storages do instead, by design (docs/maf.md, "Errors")."""

NOT_PORTED = {
    "test_workflow_checkpoint_default_values": "WorkflowCheckpoint's own defaults: no storage involved",
    "test_workflow_checkpoint_custom_values": "WorkflowCheckpoint's own constructor: no storage involved",
    "test_workflow_checkpoint_to_dict": "WorkflowCheckpoint.to_dict: no storage involved",
    "test_workflow_checkpoint_previous_checkpoint_id": "WorkflowCheckpoint's own field: no storage involved",
    "test_checkpoint_storage_protocol_compliance": "tests/test_maf_checkpoint.py checks every signature",
    "test_memory_checkpoint_storage_load_nonexistent": "the same case as test_load_missing_id_raises",
    "test_file_checkpoint_storage_load_nonexistent": "the same case as test_load_missing_id_raises",
    "test_file_checkpoint_storage_list": "the same case as test_memory_checkpoint_storage_list",
    "test_file_checkpoint_storage_delete": "the memory case, plus the file's path on disk",
    "test_file_checkpoint_storage_get_latest": "the same case as test_memory_checkpoint_storage_get_latest",
    "test_file_checkpoint_storage_roundtrip_*": "the memory storage's roundtrip cases above",
    "test_file_checkpoint_storage_directory_creation": "FileCheckpointStorage's directory",
    "test_file_checkpoint_storage_corrupted_file": (
        "writes a file into FileCheckpointStorage's directory; a stored body that cannot be decoded raises "
        "CheckpointCorruptedError here (tests/test_hostile_bodies.py), never skipped"
    ),
    "test_file_checkpoint_storage_list_ids_corrupted_file": "as test_file_checkpoint_storage_corrupted_file",
    "test_file_checkpoint_storage_load_invalid_json_raises": "FileCheckpointStorage's JSON file format",
    "test_file_checkpoint_storage_load_invalid_utf8_raises": "FileCheckpointStorage's JSON file format",
    "test_file_checkpoint_storage_destination_queue_registry_released": "FileCheckpointStorage's write queue",
    "test_file_checkpoint_storage_concurrent_saves_across_instances": "FileCheckpointStorage's write queue",
    "test_file_checkpoint_storage_concurrent_delete": "FileCheckpointStorage's unlink on one directory",
    "test_file_checkpoint_storage_cancel_*, *_queued_*, *_abandoned_*, *_shutdown_*, *_drain*, "
    "*_replace_retry_*, *_temp_cleanup_*, *_executor_shutdown_*, *_serializes_across_event_loops, "
    "*_failed_save_releases_*, *_cancelled_worker_task_*, *_graceful_shutdown_*, *_abandonment_mid_chain_*": (
        "FileCheckpointStorage's per-destination write queue and os.replace, patched in MAF's private module"
    ),
    "test_release_write_*, test_wait_for_signal_*, test_await_signal_through_cancellation_*": (
        "private helpers of FileCheckpointStorage's write queue"
    ),
    "test_select_latest_checkpoint_ties_broken_by_lineage": (
        "MAF's private selection function; its cases run through get_latest above"
    ),
}
"""MAF's cases (and globs of them) that test no storage behaviour a storage of ours could have."""


async def _save_good_and_blocked(storage: Any) -> WorkflowCheckpoint:
    """MAF's case, first half: the writer allows ``_AllowedTestState`` and saves two checkpoints of
    one workflow, one of them holding it."""
    good = WorkflowCheckpoint(workflow_name="wf-a", graph_signature_hash="h")
    await storage.save(good)
    blocked = WorkflowCheckpoint(
        workflow_name="wf-a",
        graph_signature_hash="h",
        checkpoint_id="orphan-blocked",
        state={"x": _AllowedTestState(name="x", value=1)},
    )
    await storage.save(blocked)
    return good


# ---------------------------------------------------------------------- the tests


def _applies(name: str) -> bool:
    return name not in SINCE or Version(SINCE[name]) <= MAF_VERSION


RUNNING = sorted(name for name in CASES if _applies(name))


@pytest.mark.parametrize("name", RUNNING)
async def test_mafs_case_passes_on_our_storage(ours: Subject, name: str) -> None:
    await CASES[name](ours)


@pytest.mark.parametrize("name", RUNNING)
async def test_mafs_case_passes_on_mafs_own_storage(reference: Subject, name: str) -> None:
    """The re-expression is MAF's test: MAF's own storages pass it."""
    await CASES[name](reference)


@pytest.mark.sqlite
async def test_a_listing_that_holds_a_disallowed_type_raises_on_our_storage(tmp_path: Path) -> None:
    """MAF's ``test_file_checkpoint_storage_list_ids_matches_list_decode_filter``, with our answer:
    a reader that does not allow the type (another process: a root of its own, so a codec of its
    own) gets ``CheckpointTypeNotAllowedError`` naming it from the listing, never a silently shorter
    list; the ids alone name no type and list both. Every backend reads through the same engine
    and codec, so one durable backend shows it."""
    url = f"sqlite:///{tmp_path}/t.db"
    async with open_storage(url) as writer:
        writer.codec.allow(types=[_AllowedTestState])
        good = await _save_good_and_blocked(writer)
    async with open_storage(url) as reader:
        with pytest.raises(CheckpointTypeNotAllowedError, match=_type_key(_AllowedTestState)):
            await reader.list_checkpoints(workflow_name="wf-a")
        assert await reader.list_checkpoint_ids(workflow_name="wf-a") == [
            good.checkpoint_id,
            "orphan-blocked",
        ]


async def test_a_listing_that_holds_a_disallowed_type_skips_it_on_mafs_file_storage(tmp_path: Path) -> None:
    """MAF's own expectation, on MAF's file storage: the checkpoint is left out of both listings."""
    writer = FileCheckpointStorage(tmp_path, allowed_checkpoint_types=[_type_key(_AllowedTestState)])
    good = await _save_good_and_blocked(writer)
    reader = FileCheckpointStorage(tmp_path)
    listed = await reader.list_checkpoints(workflow_name="wf-a")
    ids = await reader.list_checkpoint_ids(workflow_name="wf-a")
    assert [c.checkpoint_id for c in listed] == ids == [good.checkpoint_id]


def test_every_case_runs_on_this_maf_release() -> None:
    """Cases that need a newer MAF are the only ones not generated, and every case is accounted for."""
    assert set(CASES) - set(RUNNING) == {
        name for name, since in SINCE.items() if Version(since) > MAF_VERSION
    }
    assert not set(CASES) & (set(DIFFERENCES) | set(NOT_PORTED))
    assert (
        len(CASES) == 36
    )  # 11 of the conformance module (a parametrised one as two), 25 of test_checkpoint.py
