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

import pytest
import xxhash

from bench.tails_bench import fresh_process_encode_faults
from storages.codec import CheckpointCodec
from storages.codec import frame as framing
from storages.contract import WorkflowCheckpoint
from storages.errors import CheckpointCorruptedError


@pytest.mark.parametrize("size", [0, 1, 7, 64, 4097, 1 << 20])
def test_the_header_crc_is_zlibs_crc32(size: int) -> None:
    data = os.urandom(size)
    assert framing.crc32(data) == zlib.crc32(data)
    assert framing.crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])


@pytest.mark.parametrize("version", [1, 2])
def test_a_large_body_of_either_version_reads_and_a_flipped_byte_does_not(version: int) -> None:
    codec = CheckpointCodec()
    blob = os.urandom(300_000)
    checkpoint = WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", state={"blob": blob})
    body = codec.encode_checkpoint(checkpoint)
    payload = body[framing.HEADER_SIZE :]
    assert body[:4] == b"CK\x02\x00"
    assert body[4:12] == xxhash.xxh3_64_digest(payload)
    if version == 1:  # the header as any release before version 2 wrote it: zlib's CRC
        body = b"CK\x01\x00" + framing.CRC.pack(zlib.crc32(payload)) + payload
    assert codec.decode_checkpoint(body, checkpoint_id=checkpoint.checkpoint_id) == checkpoint
    damaged = body[:-1] + bytes([body[-1] ^ 0x01])
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


@pytest.mark.parametrize("form", ["version 2", "version 1", "bytearray", "memoryview"])
def test_a_decode_copies_a_large_bytes_value_once(form: str) -> None:
    """The checksum and the decode read the stored body through a view: the only copy of a
    1 MiB ``bytes`` value a decode makes is the value it returns (traced allocations, counted)."""
    codec = CheckpointCodec()
    size = 1 << 20
    checkpoint = WorkflowCheckpoint(
        workflow_name="w", graph_signature_hash="g", state={"blob": os.urandom(size)}
    )
    body: Any = codec.encode_checkpoint(checkpoint)
    payload = body[framing.HEADER_SIZE :]
    if form == "version 1":
        body = framing.CRC32_PLAIN_PREFIX + framing.CRC.pack(zlib.crc32(payload)) + payload
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
