"""The codec's tree encoding: embedded checkpoints become bodies of their own, referred to by id."""

from __future__ import annotations

import dataclasses
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from storages.codec import CheckpointCodec, EncodedCheckpoint
from storages.codec import frame as framing
from storages.contract import WorkflowCheckpoint
from storages.errors import CheckpointCorruptedError, UnserializableValueError


@dataclasses.dataclass
class Holder:
    inner: Any


@dataclasses.dataclass
class Probe:
    """Stored through a hook that encodes a tree of its own (a codec called from inside a walk)."""

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


def test_a_tree_encode_inside_another_keeps_its_own_bodies_and_hands_the_outer_one_back() -> None:
    codec = CheckpointCodec()
    inner_trees: list[list[str]] = []

    def encode_probe(probe: Probe) -> str:
        inner_trees.append(
            [node.checkpoint.checkpoint_id for node in codec.encode_checkpoint_tree(probe.inner)]
        )
        return "probed"

    codec.register(Probe, encode=encode_probe, decode=lambda _: Probe(None))
    first, second, third = checkpoint("first"), checkpoint("second"), checkpoint("third")
    other = checkpoint("other", state={"sub": second})
    # The hook runs between two embedded checkpoints of the outer walk: both must land in its tree.
    parent = checkpoint("parent", state={"a": first, "probe": Probe(other), "b": third})
    nodes = codec.encode_checkpoint_tree(parent)
    assert [node.checkpoint for node in nodes] == [parent, first, third]
    assert inner_trees
    assert all(ids == [other.checkpoint_id, second.checkpoint_id] for ids in inner_trees)
    back = codec.decode_checkpoint(nodes[0].body, checkpoint_id="p", nested=nested_bodies(nodes))
    assert back.state["a"] == first
    assert back.state["b"] == third


def test_tree_and_inline_encodes_on_many_threads_at_once_keep_to_their_own_walks() -> None:
    codec = CheckpointCodec()

    def parent(n: int) -> WorkflowCheckpoint:
        # An int key takes the exact walk, whose packers the threads share unless a tree's walk
        # has its own.
        child = checkpoint("child", state={"n": n, 1: "int key"})
        return checkpoint("parent", state={"sub": child, 2: [child.checkpoint_id]})

    parents = [parent(n) for n in range(8)]
    trees = [[node.body for node in codec.encode_checkpoint_tree(item)] for item in parents]
    inline = [codec.encode_checkpoint(item) for item in parents]
    assert all(len(tree) == 2 for tree in trees)
    start = threading.Barrier(len(parents))

    def encode_many(index: int) -> None:
        start.wait()
        item = parents[index]
        for _ in range(500):
            if index % 2:
                assert [node.body for node in codec.encode_checkpoint_tree(item)] == trees[index]
            else:
                assert codec.encode_checkpoint(item) == inline[index]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch inside walks, not only between them
    try:
        with ThreadPoolExecutor(len(parents)) as pool:
            list(pool.map(encode_many, range(len(parents))))
    finally:
        sys.setswitchinterval(interval)


def test_a_tree_holding_a_deep_value_saves_from_a_deep_stack() -> None:
    # Int keys take the exact walk, deep in calls: from a deep stack it is redone on a fresh one,
    # a thread of its own, which must still collect into this tree.
    codec = CheckpointCodec()
    deep: Any = "leaf"
    for _ in range(200):
        deep = {1: deep}
    child = checkpoint("child", state={"deep": deep})
    parent = checkpoint("parent", state={"sub": child})

    def from_depth(levels: int) -> list[EncodedCheckpoint]:
        return codec.encode_checkpoint_tree(parent) if levels == 0 else from_depth(levels - 1)

    nodes = from_depth(sys.getrecursionlimit() - 150)
    assert [node.checkpoint for node in nodes] == [parent, child]
    assert [node.body for node in nodes] == [node.body for node in codec.encode_checkpoint_tree(parent)]
    back = codec.decode_checkpoint(nodes[0].body, checkpoint_id="p", nested=nested_bodies(nodes))
    assert back == parent
