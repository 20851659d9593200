"""Body format versions: bodies of every version ever written read, and each version's checksum
catches what it must.

Version 3 (written) puts its frame after the payload, a trailer whose XXH3-64 is seeded with the
flags; version 2 put it before, a header with the payload's XXH3-64; version 1 (every release
before those) a header with its CRC-32. The version-1 and version-2 bodies under tests/data were
written by the codec of that version; they are read here as stored, never regenerated.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
import xxhash

from storages.codec import CheckpointCodec
from storages.codec import frame as framing
from storages.contract import WorkflowCheckpoint
from storages.errors import CheckpointCorruptedError

DATA = Path(__file__).parent / "data"
TEXT = "lorem ipsum dolor sit amet " * 37


def committed_body(version: int, name: str) -> bytes:
    body = (DATA / f"codec-format-v{version}-{name}.body").read_bytes()
    assert body[:3] == b"CK" + bytes((version,)), f"{name}: not a version-{version} body"
    return body


def v1_body(name: str) -> bytes:
    return committed_body(1, name)


@pytest.mark.parametrize("version", [1, 2])
def test_a_large_committed_body_reads_and_its_check_is_the_versions(version: int) -> None:
    body = committed_body(version, "large")
    if version == 1:
        payload = body[framing.CRC32_HEADER_SIZE :]
        check = framing.CRC.pack(zlib.crc32(payload))
    else:
        payload = body[framing.HEADER_SIZE :]
        check = xxhash.xxh3_64_digest(payload)
    assert body[framing.CHECK_OFFSET : framing.CHECK_OFFSET + len(check)] == check
    assert payload == v1_body("large")[framing.CRC32_HEADER_SIZE :]  # one payload encoding
    checkpoint = CheckpointCodec().decode_checkpoint(body, checkpoint_id="v1-large")
    assert (checkpoint.checkpoint_id, checkpoint.previous_checkpoint_id) == ("v1-large", "v1-prev")
    assert checkpoint.state["blob"] == random.Random(43).randbytes(16_000)
    assert checkpoint.state["history"] == [{"role": "user", "content": f"{i}: {TEXT}"} for i in range(8)]
    assert checkpoint.state["step"] == 7
    CheckpointCodec.verify_frame(body, checkpoint_id="v1-large")
    again = CheckpointCodec().encode_checkpoint(checkpoint)
    assert again == payload + framing.trailer(payload, 0)  # written again: version 3, same payload


@pytest.mark.parametrize("version", [1, 2])
def test_a_compressed_committed_body_reads(version: int) -> None:
    body = committed_body(version, "zstd")
    assert body[framing.FLAGS_OFFSET] == framing.FLAG_ZSTD
    plain = CheckpointCodec().decode_checkpoint(v1_body("large"), checkpoint_id="v1-large")
    assert CheckpointCodec().decode_checkpoint(body, checkpoint_id="v1-large") == plain


@pytest.mark.parametrize("version", [1, 2])
def test_a_committed_tree_reads_with_its_nested_body(version: int) -> None:
    outer, inner = committed_body(version, "tree-outer"), committed_body(version, "tree-inner")
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


@pytest.mark.parametrize("version", [1, 2])
def test_a_committed_body_framed_for_a_seal_reads_only_as_sealed(version: int) -> None:
    body = committed_body(version, "sealed")
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
    """``body`` (written now, version 3) framed as ``version`` around the same payload."""
    payload = body[: -framing.TRAILER_SIZE]
    if version == 3:
        return body
    if version == 2:
        return framing.PLAIN_PREFIX + xxhash.xxh3_64_digest(payload) + payload
    return framing.CRC32_PLAIN_PREFIX + framing.CRC.pack(zlib.crc32(payload)) + payload


def _small(version: int) -> tuple[str, bytes]:
    return "small", _as_version(version, CheckpointCodec().encode_checkpoint(_small_checkpoint()))


def _committed_again() -> tuple[str, bytes]:
    decoded = CheckpointCodec().decode_checkpoint(v1_body("large"), checkpoint_id="v1-large")
    return "v1-large", CheckpointCodec().encode_checkpoint(decoded)


BODIES: dict[str, Callable[[], tuple[str, bytes]]] = {
    "v1 small": lambda: _small(1),
    "v2 small": lambda: _small(2),
    "v3 small": lambda: _small(3),
    "v1 committed": lambda: ("v1-large", v1_body("large")),
    "v2 committed": lambda: ("v1-large", committed_body(2, "large")),
    "v3 of the committed": _committed_again,
}


def _version(body: bytes) -> int:
    return body[2] if body.startswith(framing.MAGIC) else body[-3]


def _positions(body: bytes) -> range | list[int]:
    """Every byte of a small body; of a large one the first and last 16 (a header or a trailer)
    and a seeded sample between."""
    if len(body) <= 512:
        return range(len(body))
    rest = random.Random(len(body)).sample(range(16, len(body) - 16), 96)
    return [*range(16), *sorted(rest), *range(len(body) - 16, len(body))]


def _checked_by_the_checksum(body: bytes, index: int, bit: int) -> bool:
    """Whether flipping this bit leaves a frame whose checksum alone refuses it: a bit of the
    payload or of the checksum; in version 3 a bit of the flags it seeds too, unless it makes
    them unknown or claim a seal (each refused by name first)."""
    if _version(body) < 3:
        return index >= framing.CHECK_OFFSET
    flags_at = len(body) - framing.TRAILER_SIZE
    if index == flags_at:
        return (1 << bit) & (framing.FLAG_ZSTD | framing.FLAG_NESTED_REFS) != 0
    return index < flags_at + 9


@pytest.mark.parametrize("which", list(BODIES))
def test_every_single_bit_flip_is_refused(which: str) -> None:
    checkpoint_id, body = BODIES[which]()
    assert _version(body) == int(which[1])
    codec = CheckpointCodec()
    codec.decode_checkpoint(body, checkpoint_id=checkpoint_id)  # intact: reads
    for index in _positions(body):
        for bit in range(8):
            damaged = bytearray(body)
            damaged[index] ^= 1 << bit
            flipped = bytes(damaged)
            with pytest.raises(CheckpointCorruptedError, match=checkpoint_id):
                codec.decode_checkpoint(flipped, checkpoint_id=checkpoint_id)
            if _checked_by_the_checksum(body, index, bit):
                with pytest.raises(CheckpointCorruptedError, match="checksum mismatch"):
                    CheckpointCodec.verify_frame(flipped, checkpoint_id=checkpoint_id)
            elif _version(body) == 3:
                # The rest of a trailer (a flag it does not know or a seal's, its version, its
                # magic) is refused by the frame check too, by name.
                with pytest.raises(CheckpointCorruptedError, match=checkpoint_id):
                    CheckpointCodec.verify_frame(flipped, checkpoint_id=checkpoint_id)


@pytest.mark.parametrize("which", list(BODIES))
def test_every_truncation_is_refused(which: str) -> None:
    checkpoint_id, body = BODIES[which]()
    codec = CheckpointCodec()
    for length in _positions(body):
        with pytest.raises(CheckpointCorruptedError, match=checkpoint_id):
            codec.decode_checkpoint(body[:length], checkpoint_id=checkpoint_id)
        with pytest.raises(CheckpointCorruptedError, match=checkpoint_id):
            CheckpointCodec.verify_frame(body[:length], checkpoint_id=checkpoint_id)
        # Cut at the front instead (a version-3 body's frame is at its end).
        with pytest.raises(CheckpointCorruptedError, match=checkpoint_id):
            CheckpointCodec.verify_frame(body[len(body) - length :], checkpoint_id=checkpoint_id)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_payload_edited_with_its_checksum_recomputed_passes_the_frame(version: int) -> None:
    """The check is the one the format names (so the refusals above are its doing): a payload
    changed and checked again by the version's own function passes the frame check."""
    body = CheckpointCodec().encode_checkpoint(_small_checkpoint())
    payload = body[: -framing.TRAILER_SIZE].replace(b"hello", b"HELLO")
    if version == 3:
        forged = payload + b"\x00" + xxhash.xxh3_64_digest(payload) + b"\x03CK"
    elif version == 2:
        forged = b"CK\x02\x00" + xxhash.xxh3_64_digest(payload) + payload
    else:
        forged = b"CK\x01\x00" + framing.CRC.pack(zlib.crc32(payload)) + payload
    CheckpointCodec.verify_frame(forged, checkpoint_id="small")
    assert CheckpointCodec().decode_checkpoint(forged, checkpoint_id="small").state["note"] == "HELLO"


def test_version_3_seeds_its_checksum_with_the_flags() -> None:
    """A flag set with the payload's unseeded checksum kept is refused by the checksum: the
    flags are covered too (in version 2 only by the checks of what they announce)."""
    body = CheckpointCodec().encode_checkpoint(_small_checkpoint())
    payload, digest = body[: -framing.TRAILER_SIZE], body[-11:-3]
    assert digest == xxhash.xxh3_64_digest(payload)
    flagged = payload + bytes((framing.FLAG_NESTED_REFS,)) + digest + b"\x03CK"
    with pytest.raises(CheckpointCorruptedError, match="checksum mismatch"):
        CheckpointCodec.verify_frame(flagged, checkpoint_id="small")
    seeded = payload + bytes((framing.FLAG_NESTED_REFS,)) + xxhash.xxh3_64_digest(payload, 2) + b"\x03CK"
    CheckpointCodec.verify_frame(seeded, checkpoint_id="small")


def test_no_version_3_body_starts_with_the_magic() -> None:
    """The first two bytes tell a header (versions 1, 2) from a trailer: a version-3 body never
    starts with ``CK``, not even one of a one-byte payload (67, msgpack's ``C``)."""
    codec = CheckpointCodec()
    for value in (67, None, "CK", b"CK", [67, 75]):
        body = codec.encode_value(value)
        assert not body.startswith(framing.MAGIC)
        assert body.endswith(b"\x03CK")
        assert codec.decode_value(body) == value
