"""A write batch's id is a digest of its content: the codec-free key for plain batches must give
distinct content distinct keys (else a new batch would be taken for a stored one and lost), and
stay out of the way of anything msgpack would not tell apart."""

from __future__ import annotations

import enum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storages.codec import CheckpointCodec
from storages.contract import PendingWrite, WorkflowCheckpoint
from storages.engine.writes import (
    _batch_rows,
    _plain_rows_key,
    _writes_batch,
    _writes_batch_fields,
    writes_log_name,
)
from storages.errors import InvalidCheckpointError, InvalidCheckpointIdError
from storages.memory import InMemoryCheckpointStorage

_ATOMS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(),
)
_VALUES = st.one_of(_ATOMS, st.lists(_ATOMS, max_size=3))
_WRITES = st.builds(
    PendingWrite,
    task_id=st.text(min_size=1, max_size=5),
    index=st.integers(-4, 4),
    channel=st.text(min_size=1, max_size=5),
    value=_VALUES,
    task_path=st.text(max_size=5),
)


def _typed(value: Any) -> Any:
    """The value with every atom's type beside it: what the codec stores, compared exactly."""
    if type(value) is list:
        return ("list", tuple(_typed(item) for item in value))
    return (type(value).__name__, repr(value))


def _content(batch: list[PendingWrite]) -> Any:
    return [(w.task_id, w.index, w.channel, _typed(w.value), w.task_path) for w in batch]


@given(st.lists(_WRITES, min_size=1, max_size=3), st.lists(_WRITES, min_size=1, max_size=3))
def test_plain_batches_share_a_key_only_when_their_content_is_equal(
    first: list[PendingWrite], second: list[PendingWrite]
) -> None:
    first_key, second_key = _plain_rows_key(first), _plain_rows_key(second)
    assert first_key is not None
    assert second_key is not None
    assert (first_key == second_key) == (_content(first) == _content(second))


class _Index(enum.IntEnum):
    ZERO = 0


class _Text(str):
    pass


def test_what_msgpack_would_not_tell_apart_takes_the_codec_path() -> None:
    for write in (
        PendingWrite("task", 0, "out", ("a", b"b")),  # a tuple packs as a list would
        PendingWrite("task", _Index.ZERO, "out", 1),  # an IntEnum as its int
        PendingWrite(_Text("task"), 0, "out", 1),  # a str subclass as its str
        PendingWrite("task", 0, "out", _Text("v")),
        PendingWrite("task", 0, "out", {"a": 1}),  # containers beyond a flat list
        PendingWrite("task", 0, "out", [["nested"]]),
        PendingWrite("task", 0, "out", 2**64),  # beyond msgpack's ints
        PendingWrite("task", 0, "out", bytearray(b"x")),
    ):
        assert _plain_rows_key([write]) is None, write


async def test_a_tuple_batch_and_its_list_twin_are_both_kept() -> None:
    storage = InMemoryCheckpointStorage()
    await storage.put_writes("owner", [PendingWrite("task", -1, "__error__", ["a", b"b"])], workflow_name="w")
    await storage.put_writes("owner", [PendingWrite("task", -1, "__error__", ("a", b"b"))], workflow_name="w")
    (write,) = await storage.list_writes("owner", workflow_name="w")
    assert write.value == ("a", b"b")
    assert type(write.value) is tuple


@given(st.lists(_WRITES, min_size=1, max_size=3))
def test_a_plain_batch_encodes_alike_without_the_codecs_bin_check(batch: list[PendingWrite]) -> None:
    # put_writes tells the codec a plain batch's bin values are all bytes: the body must be the
    # one the codec's own check would have let through.
    codec = InMemoryCheckpointStorage().codec
    assert _plain_rows_key(batch) is not None
    draft = _writes_batch("\x1fwrites\x1fw", "owner", "batch", batch)
    assert codec.encode_checkpoint(draft, bin_from_bytes_only=True) == codec.encode_checkpoint(draft)


async def test_bytes_like_values_keep_their_type_through_put_writes() -> None:
    # A bytearray is written as msgpack bin, as bytes is: only the codec's check (which a plain
    # batch skips) keeps it from reading back as bytes.
    storage = InMemoryCheckpointStorage()
    values = [b"b", bytearray(b"a"), ["x", bytearray(b"y")], ["x", b"y"]]
    await storage.put_writes(
        "owner", [PendingWrite("task", i, "out", value) for i, value in enumerate(values)], workflow_name="w"
    )
    stored = [write.value for write in await storage.list_writes("owner", workflow_name="w")]
    assert stored == values
    assert [type(value) for value in stored] == [bytes, bytearray, list, list]
    assert type(stored[2][1]) is bytearray
    assert type(stored[3][1]) is bytes


@given(st.lists(_WRITES, min_size=1, max_size=3))
def test_a_batch_encoded_from_its_fields_is_the_body_of_the_batch_built(batch: list[PendingWrite]) -> None:
    # put_writes hands the codec the batch's field values, not a WorkflowCheckpoint: the body
    # must be the one encode_checkpoint makes of the object, on the fast path and on each fallback
    # (a compressing codec, a value the native walk refuses).
    rows = _batch_rows(batch)
    fields = _writes_batch_fields("\x1fwrites\x1fw", "owner", "batch", rows)
    draft = _writes_batch("\x1fwrites\x1fw", "owner", "batch", batch)
    for codec in (CheckpointCodec(), CheckpointCodec(compress_threshold=1)):
        assert codec.encode_checkpoint_fields(WorkflowCheckpoint, fields) == codec.encode_checkpoint(draft)
    assert CheckpointCodec().encode_checkpoint_fields(
        WorkflowCheckpoint, ("w", "s", "id", None, "t", {}, {"big": 2**70}, {}, 0, {}, "1.0")
    ) == CheckpointCodec().encode_checkpoint(
        WorkflowCheckpoint("w", "s", "id", None, "t", {}, {"big": 2**70}, {}, 0, {}, "1.0")
    )


async def test_a_plain_batch_is_stored_once_and_read_back() -> None:
    # A plain batch's id is one digest of the names and its packed rows: a retry stores nothing
    # new, another owner or other content is another batch.
    storage = InMemoryCheckpointStorage()
    batch = [PendingWrite("task", 0, "out", ["msgpack", b"\x01"]), PendingWrite("task", -1, "__error__", "e")]
    for _ in range(2):
        await storage.put_writes("owner", batch, workflow_name="w")
    await storage.put_writes("other", batch, workflow_name="w")
    await storage.put_writes(
        "owner", [PendingWrite("task", 1, "out", ["msgpack", b"\x02"])], workflow_name="w"
    )
    log = await storage.backend.list_ids(writes_log_name("w"), None)
    assert len(log) == 3
    assert await storage.list_writes("owner", workflow_name="w") == [
        *batch,
        PendingWrite("task", 1, "out", ["msgpack", b"\x02"]),
    ]


async def test_task_writes_are_the_batch_put_writes_stores() -> None:
    # StorageSaver's field-wise call stores the very batch put_writes would, under the same id:
    # a retry through either entry point stores nothing new.
    storage = InMemoryCheckpointStorage()
    fields = [(0, "out", ["msgpack", b"\x01"]), (-1, "__error__", "e")]
    await storage.put_task_writes("owner", "task", "path", fields, "w")
    batch = [PendingWrite("task", index, channel, value, "path") for index, channel, value in fields]
    await storage.put_writes("owner", batch, workflow_name="w")
    assert len(await storage.backend.list_ids(writes_log_name("w"), None)) == 1
    assert await storage.list_writes("owner", workflow_name="w") == batch


@pytest.mark.parametrize(
    ("task_id", "fields", "error"),
    [
        ("bad\ntask", [(0, "out", 1)], InvalidCheckpointIdError),
        ("task", [(0, "", 1)], InvalidCheckpointError),
        ("task", [(True, "out", 1)], InvalidCheckpointError),
        (None, [(0, "out", 1)], InvalidCheckpointIdError),
    ],
)
async def test_task_writes_refuse_what_put_writes_refuses(task_id: Any, fields: Any, error: type) -> None:
    storage = InMemoryCheckpointStorage()
    with pytest.raises(error):
        await storage.put_task_writes("owner", task_id, "", fields, "w")
    with pytest.raises(InvalidCheckpointIdError):
        await storage.put_task_writes("bad\nowner", "task", "", [(0, "out", 1)], "w")
    assert await storage.backend.list_ids(writes_log_name("w"), None) == []


async def test_task_writes_that_are_not_plain_take_the_codecs_path() -> None:
    storage = InMemoryCheckpointStorage()
    await storage.put_task_writes("owner", "task", "", [(0, "out", {"a": (1, 2)})], "w")
    (write,) = await storage.list_writes("owner", workflow_name="w")
    assert write.value == {"a": (1, 2)}
    assert type(write.value["a"]) is tuple
