"""The engine's short paths for plain input (issue 16): a flat checkpoint is encoded without the
tree encode and the codec's bin look, and a plainly valid write batch is checked in the pass that
keys it. Each must take only what it may: anything else goes the long way, with the same result
and the same errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storages.contract import PendingWrite, WorkflowCheckpoint
from storages.engine.encoding import record_drafts
from storages.engine.validation import FLAT_ITEMS, check_fields
from storages.engine.writes import _plain_rows
from storages.errors import InvalidCheckpointError
from storages.memory import InMemoryCheckpointStorage


def _checkpoint(state: dict[Any, Any], **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="sig", state=state, **fields)


class _Text(str):
    pass


def test_a_langgraph_like_state_is_flat() -> None:
    state = {"thread_id": "t", "checkpoint": b"\xc4\x01", "n": 1, "f": 1.5, "b": True, "none": None}
    assert check_fields(_checkpoint(state)) is True
    assert check_fields(_checkpoint({str(i): i for i in range(FLAT_ITEMS)})) is True


@pytest.mark.parametrize(
    ("state", "fields"),
    [
        ({"v": bytearray(b"x")}, {}),  # would read back as bytes through bin_from_bytes_only
        ({"v": memoryview(b"x")}, {}),
        ({"v": [b"x"]}, {}),  # containers: the codec's walk decides
        ({"v": {"w": 1}}, {}),
        ({"v": (1,)}, {}),
        ({"v": _Text("x")}, {}),  # a subclass may encode otherwise
        ({1: "x"}, {}),  # a key that is not a str
        ({"v": _checkpoint({})}, {}),  # an embedded checkpoint: a record of its own
        ({str(i): i for i in range(FLAT_ITEMS + 1)}, {}),  # bounded: a large state is not walked twice
        ({}, {"metadata": {"m": bytearray(b"x")}}),
        ({}, {"timestamp": _Text("2024")}),
        ({}, {"checkpoint_id": _Text("id-1")}),
    ],
)
def test_anything_else_is_not_flat(state: dict[Any, Any], fields: dict[str, Any]) -> None:
    assert check_fields(_checkpoint(state, **fields)) is False


def test_flat_bodies_are_the_long_paths_bodies() -> None:
    # Each way a save builds its records (nested-capable or not, keyed or not) gives a flat
    # checkpoint the body the codec's full encode gives it.
    storage = InMemoryCheckpointStorage()
    checkpoint = _checkpoint({"checkpoint": b"\xc4\xc5\xc6 bin markers", "type": "msgpack", "step": 3})
    codec = storage.codec
    expected = codec.encode_checkpoint_tree(checkpoint)[0].body
    assert expected == codec.encode_checkpoint(checkpoint)
    for nested in (True, False):
        ((*_, body, _, _, _),) = record_drafts(codec, checkpoint, nested=nested, sealed=False)
        assert body == expected
    # Keyed drafts are framed for their seal: the same body with the sealed flag and no checksum.
    ((*_, body, _, _, _),) = record_drafts(codec, checkpoint, nested=True, sealed=True)
    assert body == codec.encode_checkpoint(checkpoint, sealed=True)
    assert body == codec.encode_checkpoint_tree(checkpoint, sealed=True)[0].body


def test_bin_like_values_and_embedded_checkpoints_keep_their_way() -> None:
    # Fails if the flat test lets a bytearray through (it would come back as bytes) or an
    # embedded checkpoint (it would be stored inline, not as a nested record).
    async def scenario() -> None:
        async with InMemoryCheckpointStorage() as storage:
            await storage.save(_checkpoint({"v": bytearray(b"x")}, checkpoint_id="a"))
            assert type((await storage.load("a")).state["v"]) is bytearray
            inner = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="sig", checkpoint_id="in")
            await storage.save(_checkpoint({"v": inner}, checkpoint_id="b"))
            assert await storage.list_nested("b") == ["in"]

    asyncio.run(scenario())


class _Write(PendingWrite):
    __slots__ = ()


@pytest.mark.parametrize(
    ("writes", "field"),
    [
        ([PendingWrite("t", 0, "", [b"x"])], "channel"),
        ([PendingWrite("t", 0, "c", [b"x"]), PendingWrite("", 1, "c", [b"x"])], "task_id"),
        ([PendingWrite("t\n", 0, "c", [b"x"])], "task_id"),
        ([PendingWrite("t", 0, "c", [b"x"]), ("t", 1, "c", [b"x"])], "writes"),
        ([PendingWrite("t", True, "c", [b"x"])], "index"),
        ([PendingWrite("t", 0, "c", [b"x"], None)], "task_path"),  # type: ignore[arg-type]
    ],
)
def test_the_one_pass_refuses_what_checked_writes_refuses(writes: list[Any], field: str) -> None:
    # Fails if the one pass accepts a write checked_writes would refuse (the channel and task id
    # checks are its own; the rest are its exact types).
    assert _plain_rows(writes, check=True) is None

    async def scenario() -> None:
        async with InMemoryCheckpointStorage() as storage:
            with pytest.raises(InvalidCheckpointError) as raised:
                await storage.put_writes("cp", writes, workflow_name="wf")
            assert raised.value.field == field
            assert await storage.list_writes("cp", workflow_name="wf") == []

    asyncio.run(scenario())


def test_the_one_pass_takes_a_plain_batch_and_leaves_subclasses() -> None:
    plain = [PendingWrite("t", 0, "c", ["msgpack", b"x"]), PendingWrite("t", -1, "__error__", None, "p")]
    assert _plain_rows(plain, check=True) == _plain_rows(plain)
    assert _plain_rows(plain, check=True) is not None
    subclassed = [_Write("t", 0, "c", ["msgpack", b"x"])]
    assert _plain_rows(subclassed, check=True) is None

    async def scenario() -> None:
        async with InMemoryCheckpointStorage() as storage:
            await storage.put_writes("cp", subclassed, workflow_name="wf")
            assert await storage.list_writes("cp", workflow_name="wf") == [
                PendingWrite("t", 0, "c", ["msgpack", b"x"])
            ]

    asyncio.run(scenario())
