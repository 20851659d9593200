"""Microsoft Agent Framework's own checkpoint class and protocol, on every built-in backend."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import os
from collections.abc import Callable
from typing import Any

import agent_framework
import pytest
from agent_framework import WorkflowCheckpoint as MafWorkflowCheckpoint
from agent_framework import WorkflowCheckpointException
from packaging.requirements import Requirement

from storages import CheckpointStore, WorkflowCheckpoint, open_storage
from storages.contract import MafCheckpointStorage

pytestmark = pytest.mark.maf

SameTypes = Callable[[Any, Any], bool]

MAF_METHODS = ("save", "load", "list_checkpoints", "list_checkpoint_ids", "delete", "get_latest")


def maf_checkpoint(checkpoint_id: str, previous: str | None = None, **fields: Any) -> MafWorkflowCheckpoint:
    """A checkpoint shaped like the ones MAF's runner writes, with plain-data messages and state."""
    return MafWorkflowCheckpoint(
        workflow_name="maf-wf",
        graph_signature_hash="a3f1" * 16,
        checkpoint_id=checkpoint_id,
        previous_checkpoint_id=previous,
        messages={"upper": [{"data": "HELLO", "source_id": "upper", "target_id": None}]},
        state={
            "_executor_state": {"upper": {"seen": 1}, "reverse": {}},
            "_workflow_run_kwargs": {},
            "counters": (1, 2),
        },
        iteration_count=1 if previous else 0,
        metadata={"superstep": 1},
        **fields,
    )


def test_maf_checkpoint_has_the_fields_our_contract_names() -> None:
    ours = [field.name for field in dataclasses.fields(WorkflowCheckpoint)]
    theirs = [field.name for field in dataclasses.fields(MafWorkflowCheckpoint)]
    assert ours == theirs


async def test_maf_checkpoints_load_back_as_mafs_class(
    storage: CheckpointStore, same_types: SameTypes
) -> None:
    root = maf_checkpoint("root")
    child = maf_checkpoint("child", previous="root")
    assert await storage.save(root) == "root"
    assert await storage.save(child) == "child"

    loaded = await storage.load("root")
    assert type(loaded) is MafWorkflowCheckpoint
    assert loaded == root
    assert same_types(loaded, root)

    latest = await storage.get_latest(workflow_name="maf-wf")
    assert type(latest) is MafWorkflowCheckpoint
    assert same_types(latest, child)

    listed = await storage.list_checkpoints(workflow_name="maf-wf")
    assert [type(cp) for cp in listed] == [MafWorkflowCheckpoint, MafWorkflowCheckpoint]
    assert same_types(listed, [root, child])
    assert await storage.list_checkpoint_ids(workflow_name="maf-wf") == ["root", "child"]


async def test_maf_sub_workflow_checkpoints_stay_mafs_class(
    storage: CheckpointStore, same_types: SameTypes
) -> None:
    inner = maf_checkpoint("inner")
    outer = maf_checkpoint("outer")
    outer.state["_executor_state"]["sub"] = {"sub_workflow_checkpoint": inner}
    await storage.save(outer)
    loaded = await storage.load("outer")
    embedded = loaded.state["_executor_state"]["sub"]["sub_workflow_checkpoint"]
    assert type(embedded) is MafWorkflowCheckpoint
    assert same_types(loaded, outer)


async def test_maf_and_our_checkpoints_share_a_storage(storage: CheckpointStore) -> None:
    await storage.save(maf_checkpoint("maf"))
    await storage.save(
        WorkflowCheckpoint(workflow_name="maf-wf", graph_signature_hash="s", checkpoint_id="ours")
    )
    listed = await storage.list_checkpoints(workflow_name="maf-wf")
    assert [(cp.checkpoint_id, type(cp)) for cp in listed] == [
        ("maf", MafWorkflowCheckpoint),
        ("ours", WorkflowCheckpoint),
    ]


async def test_maf_resave_semantics(storage: CheckpointStore) -> None:
    original = maf_checkpoint("c")
    await storage.save(original)
    assert await storage.save(dataclasses.replace(original)) == "c"
    with pytest.raises(WorkflowCheckpointException):
        await storage.save(dataclasses.replace(original, iteration_count=9))
    # Our class with identical field values is different content: load must give back MAF's class.
    ours = WorkflowCheckpoint(**{f.name: getattr(original, f.name) for f in dataclasses.fields(original)})
    with pytest.raises(WorkflowCheckpointException):
        await storage.save(ours)
    assert type(await storage.load("c")) is MafWorkflowCheckpoint


async def test_missing_checkpoint_raises_mafs_exception(storage: CheckpointStore) -> None:
    with pytest.raises(WorkflowCheckpointException):
        await storage.load("never-saved")


async def test_storages_satisfy_mafs_protocol(storage: CheckpointStore) -> None:
    assert isinstance(storage, MafCheckpointStorage)


@pytest.mark.parametrize("method", MAF_METHODS)
def test_every_maf_call_shape_is_accepted(storage_url: str, method: str) -> None:
    """Each parameter of MAF's protocol method exists on ours with the same name and kind, and
    every extra parameter of ours is optional."""
    storage_class = type(open_storage(storage_url))  # opening connects lazily: nothing to close
    theirs = inspect.signature(getattr(agent_framework.CheckpointStorage, method)).parameters
    ours = inspect.signature(getattr(storage_class, method)).parameters
    assert inspect.iscoroutinefunction(getattr(storage_class, method))
    for name, parameter in theirs.items():
        assert name in ours, f"{method}() lacks MAF's parameter {name!r}"
        assert ours[name].kind == parameter.kind, (
            f"{method}({name}) is {ours[name].kind}, MAF's {parameter.kind}"
        )
    for name in ours.keys() - theirs.keys():
        assert ours[name].default is not inspect.Parameter.empty, f"{method}({name}) must be optional"


def test_the_protocol_check_can_fail() -> None:
    class HalfStorage:
        async def save(self, checkpoint: Any) -> str:
            return "id"

    assert not isinstance(HalfStorage(), MafCheckpointStorage)


def _maf_requirement() -> Requirement:
    (requirement,) = {
        Requirement(text.split(";")[0])
        for text in importlib.metadata.requires("checkpoint-storages") or ()
        if text.startswith("agent-framework-core") and "extra == 'maf'" in text
    }
    return requirement


def test_the_installed_maf_is_one_the_maf_extra_accepts() -> None:
    """CI runs the MAF tests on the newest release the ``maf`` extra accepts and, in tox's
    ``maf_oldest`` (which names the version it pins in CHECKPOINT_MAF_VERSION), on the oldest: a
    resolver that quietly installed another release fails here instead of testing the wrong one."""
    installed = importlib.metadata.version("agent-framework-core")
    requirement = _maf_requirement()
    assert requirement.specifier.contains(installed), f"agent-framework-core {installed} not in {requirement}"
    pinned = os.environ.get("CHECKPOINT_MAF_VERSION")
    assert pinned in (None, installed), f"this environment pins {pinned}, not {installed}"
    assert pinned is None or requirement.specifier.contains(pinned)
