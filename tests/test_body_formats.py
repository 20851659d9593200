"""Body format versions: bodies of every version ever written read, and each version's checksum
catches what it must.

Version 2 (written) checks its payload with XXH3-64, version 1 (every release before) with
CRC-32. The version-1 bodies under tests/data were written by the version-1 codec; they are read
here as stored, never regenerated.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
import xxhash

from storages.codec import HEADER_SIZE, CheckpointCodec
from storages.codec import frame as framing
from storages.contract import WorkflowCheckpoint
from storages.errors import CheckpointCorruptedError

DATA = Path(__file__).parent / "data"
TEXT = "lorem ipsum dolor sit amet " * 37


def v1_body(name: str) -> bytes:
    body = (DATA / f"codec-format-v1-{name}.body").read_bytes()
    assert body[:3] == b"CK\x01", f"{name}: not a version-1 body"
    return body


def test_a_large_version_1_body_reads_and_its_crc_is_zlibs() -> None:
    body = v1_body("large")
    payload = body[framing.CRC32_HEADER_SIZE :]
    assert body[framing.CHECK_OFFSET : framing.CRC32_HEADER_SIZE] == framing.CRC.pack(zlib.crc32(payload))
    checkpoint = CheckpointCodec().decode_checkpoint(body, checkpoint_id="v1-large")
    assert (checkpoint.checkpoint_id, checkpoint.previous_checkpoint_id) == ("v1-large", "v1-prev")
    assert checkpoint.state["blob"] == random.Random(43).randbytes(16_000)
    assert checkpoint.state["history"] == [{"role": "user", "content": f"{i}: {TEXT}"} for i in range(8)]
    assert checkpoint.state["step"] == 7
    CheckpointCodec.verify_frame(body, checkpoint_id="v1-large")


def test_a_compressed_version_1_body_reads() -> None:
    body = v1_body("zstd")
    assert body[framing.FLAGS_OFFSET] == framing.FLAG_ZSTD
    plain = CheckpointCodec().decode_checkpoint(v1_body("large"), checkpoint_id="v1-large")
    assert CheckpointCodec().decode_checkpoint(body, checkpoint_id="v1-large") == plain


def test_a_version_1_tree_reads_with_its_nested_body() -> None:
    outer, inner = v1_body("tree-outer"), v1_body("tree-inner")
    assert outer[framing.FLAGS_OFFSET] == framing.FLAG_NESTED_REFS
    assert CheckpointCodec.nested_ref_ids(outer, checkpoint_id="v1-outer") == ["v1-inner"]
    checkpoint = CheckpointCodec().decode_checkpoint(
        outer, checkpoint_id="v1-outer", nested={"v1-inner": inner}
    )
    assert checkpoint.state["n"] == 1
    assert checkpoint.state["inner"].checkpoint_id == "v1-inner"
    assert checkpoint.state["inner"].state == {"k": [1, 2]}
    with pytest.raises(CheckpointCorruptedError, match="v1-outer"):
        CheckpointCodec().decode_checkpoint(outer, checkpoint_id="v1-outer")


def test_a_version_1_body_framed_for_a_seal_reads_only_as_sealed() -> None:
    body = v1_body("sealed")
    assert body[framing.FLAGS_OFFSET] == framing.FLAG_SEALED
    checkpoint = CheckpointCodec().decode_checkpoint(body, checkpoint_id="v1-sealed", sealed=True)
    assert checkpoint.state == {"step": 1}
    with pytest.raises(CheckpointCorruptedError, match="without a verified seal"):
        CheckpointCodec().decode_checkpoint(body, checkpoint_id="v1-sealed")


# ------------------------------------------------------------- each version's checksum catches


def _small_checkpoint() -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="sig",
        checkpoint_id="small",
        state={"step": 3, "blob": bytes(range(40)), "note": "hello"},
    )


def _as_version(version: int, body: bytes) -> bytes:
    """``body`` (written now, version 2) with the header of ``version`` around the same payload."""
    payload = body[HEADER_SIZE:]
    if version == 2:
        return body
    return framing.CRC32_PLAIN_PREFIX + framing.CRC.pack(zlib.crc32(payload)) + payload


BODIES: dict[str, Callable[[], tuple[str, bytes]]] = {
    "v1 small": lambda: ("small", _as_version(1, CheckpointCodec().encode_checkpoint(_small_checkpoint()))),
    "v2 small": lambda: ("small", CheckpointCodec().encode_checkpoint(_small_checkpoint())),
    "v1 committed": lambda: ("v1-large", v1_body("large")),
    "v2 of the committed": lambda: (
        "v1-large",
        CheckpointCodec().encode_checkpoint(
            CheckpointCodec().decode_checkpoint(v1_body("large"), checkpoint_id="v1-large")
        ),
    ),
}


def _positions(body: bytes) -> range | list[int]:
    """Every byte of a small body; of a large one the header and a seeded sample of the rest."""
    if len(body) <= 512:
        return range(len(body))
    rest = random.Random(len(body)).sample(range(16, len(body)), 96)
    return [*range(16), *sorted(rest), len(body) - 1]


@pytest.mark.parametrize("which", list(BODIES))
def test_every_single_bit_flip_is_refused(which: str) -> None:
    checkpoint_id, body = BODIES[which]()
    version = body[2]
    assert version == (1 if which.startswith("v1") else 2)
    codec = CheckpointCodec()
    header_size = framing.HEADER_SIZE if version == 2 else framing.CRC32_HEADER_SIZE
    codec.decode_checkpoint(body, checkpoint_id=checkpoint_id)  # intact: reads
    for index in _positions(body):
        for bit in range(8):
            damaged = bytearray(body)
            damaged[index] ^= 1 << bit
            flipped = bytes(damaged)
            with pytest.raises(CheckpointCorruptedError, match=checkpoint_id):
                codec.decode_checkpoint(flipped, checkpoint_id=checkpoint_id)
            if index >= framing.CHECK_OFFSET:
                # In the checksum or the payload: the frame check alone refuses it, by the checksum.
                with pytest.raises(CheckpointCorruptedError, match="checksum mismatch"):
                    CheckpointCodec.verify_frame(flipped, checkpoint_id=checkpoint_id)
    assert len(body) > header_size


@pytest.mark.parametrize("which", list(BODIES))
def test_every_truncation_is_refused(which: str) -> None:
    checkpoint_id, body = BODIES[which]()
    codec = CheckpointCodec()
    lengths = _positions(body)
    for length in lengths:
        with pytest.raises(CheckpointCorruptedError, match=checkpoint_id):
            codec.decode_checkpoint(body[:length], checkpoint_id=checkpoint_id)
        with pytest.raises(CheckpointCorruptedError, match=checkpoint_id):
            CheckpointCodec.verify_frame(body[:length], checkpoint_id=checkpoint_id)


@pytest.mark.parametrize("version", [1, 2])
def test_a_payload_edited_with_its_checksum_recomputed_passes_the_frame(version: int) -> None:
    """The check is the one the format names (so the refusals above are its doing): a payload
    changed and checked again by the version's own function passes the frame check."""
    body = _as_version(version, CheckpointCodec().encode_checkpoint(_small_checkpoint()))
    header_size = framing.HEADER_SIZE if version == 2 else framing.CRC32_HEADER_SIZE
    payload = body[header_size:].replace(b"hello", b"HELLO")
    if version == 2:
        forged = body[: framing.CHECK_OFFSET] + xxhash.xxh3_64_digest(payload) + payload
    else:
        forged = body[: framing.CHECK_OFFSET] + framing.CRC.pack(zlib.crc32(payload)) + payload
    CheckpointCodec.verify_frame(forged, checkpoint_id="small")
    assert CheckpointCodec().decode_checkpoint(forged, checkpoint_id="small").state["note"] == "HELLO"
