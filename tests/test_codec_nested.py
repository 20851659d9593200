"""The codec's tree encoding: embedded checkpoints become bodies of their own, referred to by id."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from storages.codec import CheckpointCodec, EncodedCheckpoint
from storages.codec import frame as framing
from storages.contract import WorkflowCheckpoint
from storages.errors import CheckpointCorruptedError, UnserializableValueError


@dataclasses.dataclass
class Holder:
    inner: Any


def checkpoint(name: str = "wf", **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name=name, graph_signature_hash=f"sig-{name}", **fields)


def three_levels() -> tuple[WorkflowCheckpoint, WorkflowCheckpoint, WorkflowCheckpoint]:
    leaf = checkpoint("leaf", state={"n": 3})
    middle = checkpoint("middle", messages={"m": [Holder(leaf)]})
    top = checkpoint("top", state={"_executor_state": {"sub": {"sub_workflow_checkpoint": middle}}})
    return top, middle, leaf


def nested_bodies(nodes: list[EncodedCheckpoint]) -> dict[str, bytes]:
    return {node.checkpoint.checkpoint_id: node.body for node in nodes[1:]}


def test_each_embedded_checkpoint_gets_its_own_body_in_containment_order() -> None:
    codec = CheckpointCodec(allowed_types=[Holder])
    top, middle, leaf = three_levels()
    nodes = codec.encode_checkpoint_tree(top)
    assert [node.checkpoint for node in nodes] == [top, middle, leaf]
    assert [node.container_id for node in nodes] == [None, top.checkpoint_id, middle.checkpoint_id]
    assert [codec.has_nested_refs(node.body) for node in nodes] == [True, True, False]
    assert codec.nested_ref_ids(nodes[0].body, checkpoint_id="top") == [middle.checkpoint_id]
    assert codec.nested_ref_ids(nodes[1].body, checkpoint_id="middle") == [leaf.checkpoint_id]


def test_a_tree_decodes_back_to_equal_objects_of_the_same_classes() -> None:
    codec = CheckpointCodec(allowed_types=[Holder])
    top, _, leaf = three_levels()
    nodes = codec.encode_checkpoint_tree(top)
    back = codec.decode_checkpoint(
        nodes[0].body, checkpoint_id=top.checkpoint_id, nested=nested_bodies(nodes)
    )
    assert back == top
    middle_back = back.state["_executor_state"]["sub"]["sub_workflow_checkpoint"]
    assert type(middle_back) is WorkflowCheckpoint
    assert type(middle_back.messages["m"][0].inner) is WorkflowCheckpoint
    assert middle_back.messages["m"][0].inner == leaf


def test_the_container_body_does_not_carry_the_embedded_payload() -> None:
    codec = CheckpointCodec()
    child = checkpoint("child", state={"blob": b"x" * 50_000})
    parent = checkpoint("parent", state={"child": child})
    nodes = codec.encode_checkpoint_tree(parent)
    assert len(nodes[0].body) < 1_000
    assert len(nodes[1].body) > 50_000
    assert len(codec.encode_checkpoint(parent)) > 50_000  # the inline form carries it


def test_an_aliased_checkpoint_is_stored_once_and_decodes_to_one_object() -> None:
    codec = CheckpointCodec()
    child = checkpoint("child")
    parent = checkpoint("parent", state={"a": child, "b": [child]}, metadata={"c": (child,)})
    nodes = codec.encode_checkpoint_tree(parent)
    assert len(nodes) == 2
    back = codec.decode_checkpoint(nodes[0].body, checkpoint_id="p", nested=nested_bodies(nodes))
    assert back.state["a"] is back.state["b"][0] is back.metadata["c"][0]


def test_two_different_checkpoints_under_one_id_are_refused_with_their_path() -> None:
    codec = CheckpointCodec()
    first = checkpoint("child", checkpoint_id="dup", state={"v": 1})
    second = checkpoint("child", checkpoint_id="dup", state={"v": 2})
    parent = checkpoint("parent", state={"first": first, "second": second})
    with pytest.raises(UnserializableValueError, match="'dup' has different content") as raised:
        codec.encode_checkpoint_tree(parent)
    assert raised.value.path == "checkpoint.state['second']"


def test_a_checkpoint_embedded_in_itself_is_refused() -> None:
    codec = CheckpointCodec()
    parent = checkpoint("parent")
    parent.state["me"] = dataclasses.replace(parent, state={})
    with pytest.raises(UnserializableValueError, match="embedded in itself"):
        codec.encode_checkpoint_tree(parent)


def test_an_unencodable_value_deep_in_a_nested_checkpoint_is_located_from_the_top() -> None:
    codec = CheckpointCodec()
    child = checkpoint("child", state={"bad": object()})
    parent = checkpoint("parent", state={"sub": child})
    with pytest.raises(UnserializableValueError) as raised:
        codec.encode_checkpoint_tree(parent)
    assert raised.value.path == "checkpoint.state['sub'].state['bad']"


def test_huge_ints_inside_a_nested_checkpoint_take_the_boxing_path_once() -> None:
    codec = CheckpointCodec()
    child = checkpoint("child", state={"big": 2**80})
    parent = checkpoint("parent", state={"sub": child, "other": -(2**70)})
    nodes = codec.encode_checkpoint_tree(parent)
    assert [node.checkpoint for node in nodes] == [parent, child]
    back = codec.decode_checkpoint(nodes[0].body, checkpoint_id="p", nested=nested_bodies(nodes))
    assert back == parent


def test_a_body_with_references_needs_its_nested_records() -> None:
    codec = CheckpointCodec()
    child = checkpoint("child")
    nodes = codec.encode_checkpoint_tree(checkpoint("parent", state={"sub": child}))
    with pytest.raises(CheckpointCorruptedError, match="read without its nested records"):
        codec.decode_checkpoint(nodes[0].body, checkpoint_id="p")
    with pytest.raises(CheckpointCorruptedError, match=f"{child.checkpoint_id!r} is missing"):
        codec.decode_checkpoint(nodes[0].body, checkpoint_id="p", nested={})


def test_a_damaged_nested_body_fails_the_container_naming_both() -> None:
    codec = CheckpointCodec()
    child = checkpoint("child")
    nodes = codec.encode_checkpoint_tree(checkpoint("parent", state={"sub": child}))
    inner = nodes[1].body
    damaged = {child.checkpoint_id: inner[:-13] + bytes([inner[-13] ^ 1]) + inner[-12:]}
    with pytest.raises(CheckpointCorruptedError) as raised:
        codec.decode_checkpoint(nodes[0].body, checkpoint_id="parent-id", nested=damaged)
    assert raised.value.checkpoint_id == "parent-id"
    assert child.checkpoint_id in raised.value.reason
    assert "checksum" in raised.value.reason


def test_a_nested_body_of_another_checkpoint_is_refused() -> None:
    codec = CheckpointCodec()
    child, impostor = checkpoint("child"), checkpoint("impostor")
    nodes = codec.encode_checkpoint_tree(checkpoint("parent", state={"sub": child}))
    swapped = {child.checkpoint_id: codec.encode_checkpoint(impostor)}
    with pytest.raises(CheckpointCorruptedError, match="resolved to a body of"):
        codec.decode_checkpoint(nodes[0].body, checkpoint_id="p", nested=swapped)


def test_the_nested_flag_and_the_payload_must_agree() -> None:
    codec = CheckpointCodec()
    plain = codec.encode_checkpoint(checkpoint("plain"))
    # Flagged and checked again (the flags seed the checksum): only the payload disagrees.
    flagged = framing.framed(plain[: -framing.TRAILER_SIZE], framing.FLAG_NESTED_REFS)
    with pytest.raises(CheckpointCorruptedError, match="announces nested records"):
        codec.decode_checkpoint(flagged, checkpoint_id="plain")


def test_inline_bodies_still_decode_without_nested_records() -> None:
    codec = CheckpointCodec()
    parent = checkpoint("parent", state={"sub": checkpoint("child")})
    body = codec.encode_checkpoint(parent)
    assert not codec.has_nested_refs(body)
    assert codec.decode_checkpoint(body, checkpoint_id="p") == parent
