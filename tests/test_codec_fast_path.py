"""The native encoder writes exactly what the exact walk writes, and falls back where it must.

The codec packs with ormsgpack first and redoes with the Python walk what ormsgpack cannot write
faithfully (storages/codec/packing.py). These tests prove the two are one format: byte-identical
payloads wherever both accept a value, the committed bodies of format version 1 still read, and
every fall-back case keeps its fidelity guarantee.
"""

from __future__ import annotations

import datetime as dt
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storages.codec import TRAILER_SIZE, CheckpointCodec
from storages.codec.frame import CRC32_HEADER_SIZE
from storages.contract import WorkflowCheckpoint
from storages.errors import UnserializableValueError
from tests.test_codec_properties import checkpoints, values

DATA = Path(__file__).parent / "data"
# Bodies written by the codec before the native encoder existed (format version 1):
# codec-format-v1.body holds an int beyond 64 bits (so it was written by the boxing walk),
# codec-format-v1-plain.body the same content without it.
COMMITTED_V1_BODIES = ("codec-format-v1.body", "codec-format-v1-plain.body")


@pytest.mark.parametrize("name", COMMITTED_V1_BODIES)
def test_committed_format_v1_bodies_decode_and_reencode_to_the_same_payload(name: str) -> None:
    body = (DATA / name).read_bytes()
    assert body[2] == 1  # the header's format version
    codec = CheckpointCodec()
    checkpoint = codec.decode_checkpoint(body, checkpoint_id=name)
    state = checkpoint.state
    assert state["tuple"] == (1, "two", (3.0,))
    assert type(state["set"]) is set
    assert type(state["frozen"]) is frozenset
    assert state["int_keys"] == {1: "one", 2: "two"}
    assert state["tuple_keys"] == {(1, 2): "pair", None: "none"}
    assert str(state["aware"].tzinfo) == "Europe/Paris"
    assert state["offset"].utcoffset() == dt.timedelta(hours=5, minutes=30)
    assert type(state["bytearray"]) is bytearray
    assert isinstance(state["nested"], WorkflowCheckpoint)
    assert state["nested"].state == {"k": (1, 2)}
    assert ("big" in state) == (name == "codec-format-v1.body")
    # Written again, the payload is the same bytes before a version-3 trailer.
    again = codec.encode_checkpoint(checkpoint)
    assert again[-3] == 3
    assert again[:-TRAILER_SIZE] == body[CRC32_HEADER_SIZE:]


def _both_payloads(codec: CheckpointCodec, checkpoint: Any) -> tuple[bytes | None, bytes]:
    return codec.payload_paths(checkpoint)


@settings(max_examples=300, deadline=None)
@given(checkpoints(WorkflowCheckpoint))
def test_the_native_payload_is_byte_identical_to_the_exact_walk(checkpoint: Any) -> None:
    native, exact = _both_payloads(CheckpointCodec(), checkpoint)
    if native is not None:
        assert native == exact


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), values, max_size=6))
def test_json_like_state_takes_the_native_path_unless_it_holds_what_it_cannot_write(state: Any) -> None:
    codec = CheckpointCodec()
    checkpoint = WorkflowCheckpoint("wf", "sig", state=state)
    native, exact = _both_payloads(codec, checkpoint)
    assert native is None or native == exact
    assert codec.decode_checkpoint(codec.encode_checkpoint(checkpoint), checkpoint_id="x") == checkpoint


def test_the_benchmark_shape_takes_the_native_path() -> None:
    from bench.workload import template

    codec = CheckpointCodec()
    native, exact = _both_payloads(codec, template(WorkflowCheckpoint))
    assert native is not None, "the benchmark checkpoint fell back to the exact walk"
    assert native == exact


_BIN_LIKE_FLOATS = [
    struct.unpack(">d", bytes([0x3F, 0xC4, 0xC5, 0xC6, 0, 0, index >> 8, index & 0xFF]))[0]
    for index in range(300)
]
"""A list long enough to be tested in one native call, whose floats hold every bin marker."""
_PAYLOAD_SIZES = pytest.mark.parametrize(
    "padding", [{}, {"padding": "p" * 70_000}], ids=["small payload", "payload over 64 KiB"]
)
"""Long lists are looked for at different moments in small and large payloads: each case runs in
both."""


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({1: "int key"}, "ormsgpack refuses non-str keys"),
        ({"big": 2**70}, "ints beyond 64 bits"),
        ({"b": bytearray(b"x")}, "bytearray would be written as bin"),
        ({"b": [b"\xc4 bytes", (bytearray(b"y"),)]}, "a bytearray in a tuple beside bytes"),
        ({"b": b"\xc4 bytes", "s": {b"x"}}, "bytes beside a set: only exact containers are looked through"),
        ({"embedding": [*_BIN_LIKE_FLOATS, bytearray(b"x")]}, "a bytearray ending a long list of floats"),
        ({"embedding": [*_BIN_LIKE_FLOATS, (bytearray(b"x"),)]}, "a bytearray in a tuple in a long list"),
        ({"rows": [_BIN_LIKE_FLOATS, [*_BIN_LIKE_FLOATS, bytearray(b"x")]]}, "one of two long lists"),
    ],
)
@_PAYLOAD_SIZES
def test_what_the_native_walk_cannot_write_faithfully_goes_the_exact_way(
    value: Any, why: str, padding: dict[str, str]
) -> None:
    value = {**value, **padding}
    codec = CheckpointCodec()
    checkpoint = WorkflowCheckpoint("wf", "sig", state=value)
    native, _ = _both_payloads(codec, checkpoint)
    assert native is None, why
    decoded = codec.decode_checkpoint(codec.encode_checkpoint(checkpoint), checkpoint_id="x")
    assert decoded.state == value
    assert [type(item) for item in decoded.state.values()] == [type(item) for item in value.values()]


@pytest.mark.parametrize(
    "state",
    [
        {"blob": b"\xc4\x00" * 300, "type": "msgpack"},
        {"nested": [{"b": b"\xc5"}, (b"\xc6", 1.5, None)], "text": "\u0104\u0144"},
        {"text": "\u0104\u0144 has \\xc4 and \\xc5 in its UTF-8"},
        # An exact datetime is written as an extension of its text, never as bin: a large blob
        # beside the datetimes every workflow state holds took the exact walk, 4x the native one.
        {"blob": b"\xc4\xc5\xc6" * 1000, "at": dt.datetime(2025, 1, 1, tzinfo=dt.UTC)},
        {"blob": b"\xc4", "times": [dt.datetime(2025, 1, 1), (dt.datetime(2025, 1, 2), b"\xc5")]},
        # Floats hold bin markers by chance (an embedding of 120,000 holds thousands), and a long
        # list of them, or of other plain values, has nothing ormsgpack writes as bin.
        {"embedding": _BIN_LIKE_FLOATS},
        {"embedding": _BIN_LIKE_FLOATS, "messages": [{"role": "user", "content": "\u0104"}] * 3},
        {"series": [*_BIN_LIKE_FLOATS, 7, "label", None, True]},
        {"matrix": [_BIN_LIKE_FLOATS, _BIN_LIKE_FLOATS[::-1]]},
    ],
)
@_PAYLOAD_SIZES
def test_bytes_and_bin_lookalikes_keep_the_native_path(state: Any, padding: dict[str, str]) -> None:
    # Runners that store serialized blobs (LangGraph's saver) hold bytes in every body: their bin
    # must not send the value down the exact walk when nothing else would.
    codec = CheckpointCodec()
    checkpoint = WorkflowCheckpoint("wf", "sig", state={**state, **padding})
    native, exact = _both_payloads(codec, checkpoint)
    assert native is not None
    assert native == exact
    assert codec.decode_checkpoint(codec.encode_checkpoint(checkpoint), checkpoint_id="x") == checkpoint


class _Tag(str):
    """A subclass of ``str``: the native walk hands it to the hook, whatever list it is in."""


@_PAYLOAD_SIZES
def test_a_hooked_value_in_a_long_list_keeps_the_bytearray_its_hook_gives(padding: dict[str, str]) -> None:
    # The list passes the test of plain values (a subclass of str is one there), so the bin its
    # hook's bytearray makes must be caught where the hook's contents are packed.
    codec = CheckpointCodec()
    given_to_decode: list[type[Any]] = []

    def decode(data: Any) -> _Tag:
        given_to_decode.append(type(data))
        return _Tag(bytes(data).decode())

    codec.register(_Tag, encode=lambda tag: bytearray(tag.encode()), decode=decode)
    state = {"embedding": [*_BIN_LIKE_FLOATS, _Tag("tag")], **padding}
    checkpoint = WorkflowCheckpoint("wf", "sig", state=state)
    decoded = codec.decode_checkpoint(codec.encode_checkpoint(checkpoint), checkpoint_id="x")
    assert given_to_decode  # at save (the rebuild check) and at load
    assert set(given_to_decode) == {bytearray}
    assert decoded.state["embedding"][-1] == "tag"
    assert type(decoded.state["embedding"][-1]) is _Tag


def test_a_memoryview_is_refused_as_before_not_written_as_bytes() -> None:
    checkpoint = WorkflowCheckpoint("wf", "sig", state={"view": memoryview(b"abc")})
    with pytest.raises(UnserializableValueError, match="memoryview") as caught:
        CheckpointCodec().encode_checkpoint(checkpoint)
    assert "state['view']" in str(caught.value)


def test_a_refusal_inside_the_native_walk_names_its_path_as_the_exact_walk_does() -> None:
    class NotAllowed:
        pass

    checkpoint = WorkflowCheckpoint("wf", "sig", state={"deep": [(1, NotAllowed())]})
    with pytest.raises(UnserializableValueError) as caught:
        CheckpointCodec().encode_checkpoint(checkpoint)
    assert "state['deep'][0][1]" in str(caught.value)


def test_remembered_datetimes_keep_their_zone_and_fold() -> None:
    from zoneinfo import ZoneInfo

    codec = CheckpointCodec()
    utc = dt.datetime(2025, 10, 26, 0, 30, tzinfo=dt.UTC)
    same_instant = [
        utc,
        utc.astimezone(dt.timezone(dt.timedelta(hours=2))),
        utc.astimezone(ZoneInfo("Europe/Paris")),
        dt.datetime(2025, 10, 26, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Paris")),
    ]
    for _ in range(2):  # the second round reads what the first remembered
        checkpoint = WorkflowCheckpoint("wf", "sig", state={"times": same_instant})
        decoded = codec.decode_checkpoint(codec.encode_checkpoint(checkpoint), checkpoint_id="x")
        times = decoded.state["times"]
        assert [str(value.tzinfo) for value in times] == [str(value.tzinfo) for value in same_instant]
        assert [value.fold for value in times] == [value.fold for value in same_instant]
        assert [value.isoformat() for value in times] == [value.isoformat() for value in same_instant]


def test_a_tuple_holding_a_mutable_value_is_encoded_afresh_each_time() -> None:
    # Tuples are remembered by object only when every item is an immutable atom: this one holds
    # a list, so a change to the list must reach the next body.
    codec = CheckpointCodec()
    items = [1]
    pair = ("items", items)
    checkpoint = WorkflowCheckpoint("wf", "sig", state={"pair": pair})
    first = codec.decode_checkpoint(codec.encode_checkpoint(checkpoint), checkpoint_id="x")
    items.append(2)
    second = codec.decode_checkpoint(codec.encode_checkpoint(checkpoint), checkpoint_id="x")
    assert first.state["pair"] == ("items", [1])
    assert second.state["pair"] == ("items", [1, 2])


def test_objects_remembered_by_id_are_never_confused_with_later_objects_at_that_address() -> None:
    # Each fresh tuple and datetime is dropped after its encode, so CPython hands its memory (and
    # so its id) to the next one: a memo keyed by id that did not hold its objects would answer
    # for the new value with the old one's bytes.
    codec = CheckpointCodec()
    for index in range(300):
        value = tuple([index, str(index)])
        moment = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=index)
        checkpoint = WorkflowCheckpoint("wf", "sig", state={"t": value, "d": moment})
        body = codec.encode_checkpoint(checkpoint)
        assert body == codec.exact_body(checkpoint)
        decoded = codec.decode_checkpoint(body, checkpoint_id="x").state
        assert decoded == {"t": (index, str(index)), "d": moment}
        del value, moment, checkpoint


def test_a_remembered_tuple_still_encodes_exactly_as_the_exact_walk() -> None:
    codec = CheckpointCodec()
    shared = (1, "two", 3.0, None, True, b"six")
    nested = (shared, (shared,))
    checkpoint = WorkflowCheckpoint("wf", "sig", state={"a": shared, "b": nested, "c": [shared]})
    bodies = {codec.encode_checkpoint(checkpoint) for _ in range(3)}
    (body,) = bodies
    assert body == codec.exact_body(checkpoint)
    assert codec.decode_checkpoint(body, checkpoint_id="x").state == {"a": shared, "b": nested, "c": [shared]}


def test_a_tree_redone_twice_keeps_its_nested_records() -> None:
    # A nested checkpoint sends the tree to the exact walk after the native one, and an int beyond
    # 64 bits sends it on to the boxing walk: each redo must start from an empty tree again. A
    # rewind that kept what the overflowed walk recorded returned the parent without its child.
    codec = CheckpointCodec()
    child = WorkflowCheckpoint("wf", "s", checkpoint_id="child", state={"t": (1, 2)})
    parent = WorkflowCheckpoint("wf", "s", checkpoint_id="parent", state={"a": child, "z": 2**70})
    nodes = codec.encode_checkpoint_tree(parent)
    assert [node.checkpoint.checkpoint_id for node in nodes] == ["parent", "child"]
    nested = {node.checkpoint.checkpoint_id: node.body for node in nodes[1:]}
    decoded = codec.decode_checkpoint(nodes[0].body, checkpoint_id="parent", nested=nested)
    assert decoded.state == {"a": child, "z": 2**70}
