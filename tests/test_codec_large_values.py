"""Large values through the codec: a version-1 header's CRC is zlib's, a version-2 header's
check is XXH3-64, and a large encode does not fault in a fresh buffer every time (issue 29).

Both are counted, never timed: the checks by their values, the buffers by the process's minor page
faults (``getrusage``), in a fresh interpreter so nothing earlier in the test run has primed
the allocator.
"""

from __future__ import annotations

import os
import platform
import tracemalloc
import zlib
from typing import Any

import ormsgpack
import pytest
import xxhash

from bench.tails_bench import fresh_process_encode_faults
from storages.codec import CheckpointCodec
from storages.codec import frame as framing
from storages.codec.packing import _PLACEHOLDER, SPLICED_MIN_BYTES
from storages.contract import WorkflowCheckpoint
from storages.errors import CheckpointCorruptedError, InvalidCheckpointError


@pytest.mark.parametrize("size", [0, 1, 7, 64, 4097, 1 << 20])
def test_the_header_crc_is_zlibs_crc32(size: int) -> None:
    data = os.urandom(size)
    assert framing.crc32(data) == zlib.crc32(data)
    assert framing.crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_large_body_of_any_version_reads_and_a_flipped_byte_does_not(version: int) -> None:
    codec = CheckpointCodec()
    blob = os.urandom(300_000)
    checkpoint = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", state={"blob": blob})
    body = codec.encode_checkpoint(checkpoint)
    payload = body[: -framing.TRAILER_SIZE]
    assert body[-framing.TRAILER_SIZE :] == b"\x00" + xxhash.xxh3_64_digest(payload) + b"\x03CK"
    if version == 1:  # the header as any release before version 2 wrote it: zlib's CRC
        body = b"CK\x01\x00" + framing.CRC.pack(zlib.crc32(payload)) + payload
    elif version == 2:  # the header as releases from version 2 on wrote it: XXH3-64
        body = b"CK\x02\x00" + xxhash.xxh3_64_digest(payload) + payload
    assert codec.decode_checkpoint(body, checkpoint_id=checkpoint.checkpoint_id) == checkpoint
    damaged = body[:-1] + bytes([body[-1] ^ 0x01]) if version < 3 else bytes([body[0] ^ 0x01]) + body[1:]
    with pytest.raises(CheckpointCorruptedError, match="checksum"):
        codec.decode_checkpoint(damaged, checkpoint_id=checkpoint.checkpoint_id)


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="counts glibc's page faults (CI and this machine kind are glibc Linux)",
)
def test_a_repeated_one_megabyte_encode_reuses_its_buffer() -> None:
    """Without priming, each 1 MB encode faults in a fresh mapping of ormsgpack's buffer, one
    fault per 4 KiB page: about 250 to 640 per encode. Primed, the buffer comes from the heap
    and is reused: a few faults per encode."""
    faults = fresh_process_encode_faults(1 << 20, 20)
    assert faults < 64, f"{faults:.0f} page faults per 1 MB encode: its buffer is mapped afresh each time"


@pytest.mark.parametrize("form", ["version 3", "version 2", "version 1", "bytearray", "memoryview"])
def test_a_decode_copies_a_large_bytes_value_once(form: str) -> None:
    """The checksum and the decode read the stored body through a view: the only copy of a
    1 MiB ``bytes`` value a decode makes is the value it returns (traced allocations, counted)."""
    codec = CheckpointCodec()
    size = 1 << 20
    checkpoint = WorkflowCheckpoint(
        workflow_name="w", graph_signature_hash="g", state={"blob": os.urandom(size)}
    )
    body: Any = codec.encode_checkpoint(checkpoint)
    payload = body[: -framing.TRAILER_SIZE]
    if form == "version 1":
        body = framing.CRC32_PLAIN_PREFIX + framing.CRC.pack(zlib.crc32(payload)) + payload
    elif form == "version 2":
        body = framing.PLAIN_PREFIX + xxhash.xxh3_64_digest(payload) + payload
    elif form == "bytearray":
        body = bytearray(body)
    elif form == "memoryview":
        body = memoryview(body)
    codec.decode_checkpoint(body, checkpoint_id=checkpoint.checkpoint_id)  # warm: caches, imports
    tracemalloc.start()
    try:
        decoded = codec.decode_checkpoint(body, checkpoint_id=checkpoint.checkpoint_id)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoded == checkpoint
    assert size <= peak < size + size // 8, f"a decode of a 1 MiB value peaked at {peak:,} bytes traced"


# ------------------------------------------------- large state values joined by reference on encode


def _state_checkpoint(state: dict[str, Any]) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", state=state)


@pytest.mark.parametrize(
    "state",
    [
        pytest.param({"blob": os.urandom(SPLICED_MIN_BYTES - 1)}, id="one byte under the size"),
        pytest.param({"blob": os.urandom(SPLICED_MIN_BYTES)}, id="at the size"),
        pytest.param(
            {"a": os.urandom(100_000), "text": "é" * 10, "b": os.urandom(200_000), "n": [1, (2, 3)]},
            id="two among other values",
        ),
        pytest.param({"blob": os.urandom(1 << 20), "marks": b"\xc4\xc5\xc6"}, id="bin markers elsewhere"),
        pytest.param({"blob": os.urandom(100_000), "copy": _PLACEHOLDER}, id="the placeholder as a value"),
        pytest.param(
            {"blob": os.urandom(100_000), "deep": {"inner": os.urandom(100_000)}}, id="one below the top"
        ),
    ],
)
@pytest.mark.parametrize("sealed", [False, True])
def test_an_encode_with_large_state_bytes_writes_the_exact_walks_body(
    state: dict[str, Any], sealed: bool
) -> None:
    """Large values joined by reference change no byte of the body: it equals the body of the
    exact (reference) walk, and reads back. A codec joins them from the first encode that held
    one on, so the first and the second encode are both checked."""
    codec = CheckpointCodec()
    checkpoint = _state_checkpoint(state)
    exact = codec.exact_body(checkpoint)
    for _ in range(2):
        body = codec.encode_checkpoint(checkpoint, sealed=sealed)
        if sealed:
            assert body == exact[: -framing.TRAILER_SIZE] + framing.SEALED_TRAILER
        else:
            assert body == exact
        decoded = codec.decode_checkpoint(body, checkpoint_id=checkpoint.checkpoint_id, sealed=sealed)
        assert decoded == checkpoint


def test_a_large_state_value_beside_a_bytearray_still_reads_back_as_a_bytearray() -> None:
    codec = CheckpointCodec()
    checkpoint = _state_checkpoint({"blob": os.urandom(1 << 20), "buffer": [bytearray(b"\xc4\x01x")]})
    codec.encode_checkpoint(checkpoint)  # from here on the codec joins large values by reference
    body = codec.encode_checkpoint(checkpoint)
    assert body == codec.exact_body(checkpoint)
    decoded = codec.decode_checkpoint(body, checkpoint_id=checkpoint.checkpoint_id)
    assert type(decoded.state["buffer"][0]) is bytearray
    assert decoded == checkpoint


def test_a_large_state_value_over_the_payload_limit_is_refused_by_name() -> None:
    codec = CheckpointCodec(max_payload_bytes=2 * SPLICED_MIN_BYTES)
    codec.encode_checkpoint(_state_checkpoint({"blob": bytes(SPLICED_MIN_BYTES)}))  # joins from here on
    with pytest.raises(InvalidCheckpointError, match="max_payload_bytes"):
        codec.encode_checkpoint(_state_checkpoint({"blob": bytes(2 * SPLICED_MIN_BYTES)}))


def test_an_encode_copies_a_large_bytes_value_once() -> None:
    """A 1 MiB ``bytes`` value at the top of the state is copied only into the body: ormsgpack
    packs the rest, and the frame's join is the one copy (traced allocations, counted)."""
    codec = CheckpointCodec()
    size = 1 << 20
    checkpoint = _state_checkpoint({"blob": os.urandom(size)})
    codec.encode_checkpoint(checkpoint)  # warm: caches, imports, the allocator's priming
    tracemalloc.start()
    try:
        body = codec.encode_checkpoint(checkpoint)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert body == codec.exact_body(checkpoint)
    assert size <= peak < size + size // 8, f"an encode of a 1 MiB value peaked at {peak:,} bytes traced"


# ------------------------------------------------------------- the frame appended to the payload


def _fresh_payload() -> bytes:
    packed: bytes = ormsgpack.packb(["lorem ipsum " * 80] * 1200)
    return packed


def test_the_frame_appended_in_place_gives_the_payload_and_its_trailer() -> None:
    payload = _fresh_payload()
    expected = payload + framing.trailer(payload, 0)
    owned = [payload]
    del payload
    body = framing.append_frame(owned, framing.trailer(owned[0], 0))
    assert owned == []
    assert body == expected
    assert CheckpointCodec.verify_frame(body, checkpoint_id="x") is None


def test_the_frame_is_never_appended_to_a_payload_held_elsewhere() -> None:
    payload = _fresh_payload()
    before = bytes(bytearray(payload))  # an independent copy of its bytes
    end = framing.trailer(payload, 0)
    body = framing.append_frame([payload], end)
    assert payload == before  # the holder's bytes did not change
    assert body == before + end
    assert body is not payload


def test_a_large_text_body_is_its_payload_and_trailer_and_reads_back() -> None:
    codec = CheckpointCodec()
    text = "lorem ipsum dolor sit amet " * 37
    checkpoint = _state_checkpoint({"history": [{"content": f"{i}: {text}"} for i in range(1000)]})
    body = codec.encode_checkpoint(checkpoint)
    assert len(body) > framing.IN_PLACE_MIN
    assert body == codec.exact_body(checkpoint)
    assert codec.decode_checkpoint(body, checkpoint_id=checkpoint.checkpoint_id) == checkpoint
    sealed = codec.encode_checkpoint(checkpoint, sealed=True)
    assert sealed == body[: -framing.TRAILER_SIZE] + framing.SEALED_TRAILER
