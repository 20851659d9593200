"""The body frame: ``header + payload``, and the bounds a stored body is checked against.

The header carries a magic, the format version, flags (zstd, nested refs, sealed) and a checksum
of the payload, so any damage to stored bytes is detected instead of decoded into silently
different data. Version 2 (written) checks with XXH3-64, version 1 (read, as every release
before wrote it) with CRC-32; docs/contract.md, "Corruption is loud", compares the two. A body
framed for a seal (``FLAG_SEALED``) carries no checksum: the MAC of the seal around it
(storages/integrity.py) covers every one of its bytes, and such a body is read only by a caller
that has just verified that MAC (``sealed=True``); any other read refuses it. A compressed
payload must declare its size and expand at most ``max_compression_ratio`` times; no payload is
larger than ``max_payload_bytes`` once decompressed.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any, Final

import xxhash

from ..errors import CheckpointCorruptedError, InvalidCheckpointError, MissingDependencyError

checksum: Callable[[bytes | bytearray | memoryview], bytes] = xxhash.xxh3_64_digest
"""The check of a version-2 header: the payload's XXH3-64, big-endian (xxhash's canonical form).
It runs at memory speed without any particular CPU extension: about 19 µs a megabyte here
(SSE2), against ISA-L's CRC-32 at 13 µs with AVX-512 and 89 µs without, and costs a third of
that CRC on a small body; and it misses a random corruption once in 2**64, not 2**32."""

crc32: Callable[[bytes | bytearray | memoryview], int]
"""The check of a version-1 header (zlib's polynomial, the same value as ``zlib.crc32``): ISA-L's
(python-isal, a dependency) where it is installed, zlib's otherwise; same values, so bodies
checked with either read with either."""
try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal has wheels for every platform CI runs on
    crc32 = zlib.crc32

MAGIC: Final = b"CK"
FORMAT_VERSION: Final = 2
"""The header version written: ``magic, version, flags, XXH3-64 of the payload`` (12 bytes). The
payload encoding is version 1's, byte for byte; only the header's check changed."""
CRC32_FORMAT_VERSION: Final = 1
"""The header version every release before version 2 wrote: ``magic, version, flags, CRC-32 of
the payload`` (8 bytes). Still read, checked by its CRC-32 (tests/test_body_formats.py reads
committed bodies of it); never written."""
FLAG_ZSTD: Final = 0x01
FLAG_NESTED_REFS: Final = 0x02
"""The payload refers to embedded checkpoints stored as records of their own."""
FLAG_SEALED: Final = 0x04
"""No checksum here (the field is zero): the enclosing seal's MAC protects this body. Written by
keyed saves; accepted only by a read that has just verified that seal (``sealed=True``), refused
by any other (an unkeyed handle, an unsigned body in migration mode, a body read without its
seal). A flag, not a version: a reader that does not know it refuses it by name ("unknown body
flags", KNOWN_FLAGS below), so no body is ever read the wrong way. The version changes when a
reader that knows every flag still could not read a body: a new header layout or payload
encoding."""
KNOWN_FLAGS: Final = FLAG_ZSTD | FLAG_NESTED_REFS | FLAG_SEALED
FLAGS_OFFSET: Final = 3
CHECK_OFFSET: Final = 4
"""Where the checksum starts, in either version."""
_PREFIX = struct.Struct(">2sBB")  # magic, format version, flags: the same in every version
_HEADER = struct.Struct(">2sBB8s")  # ... and the XXH3-64 digest of the payload
HEADER_SIZE: Final = _HEADER.size
"""The size of the header written (version 2)."""
CRC32_HEADER_SIZE: Final = 8
"""The size of a version-1 header (its check is a 4-byte CRC-32)."""
CRC = struct.Struct(">I")
"""A version-1 header's check field."""
_NO_CHECKSUM: Final = bytes(8)
PLAIN_PREFIX: Final = _PREFIX.pack(MAGIC, FORMAT_VERSION, 0)
"""A version-2 header without flags, up to its checksum."""
NESTED_PREFIX: Final = _PREFIX.pack(MAGIC, FORMAT_VERSION, FLAG_NESTED_REFS)
SEALED_PREFIX: Final = _HEADER.pack(MAGIC, FORMAT_VERSION, FLAG_SEALED, _NO_CHECKSUM)
"""The whole header of a body framed for a seal, uncompressed and without nested refs."""
CRC32_PLAIN_PREFIX: Final = _PREFIX.pack(MAGIC, CRC32_FORMAT_VERSION, 0)
"""A version-1 header without flags, up to its CRC."""
_HEADER_SIZES: Final = {FORMAT_VERSION: HEADER_SIZE, CRC32_FORMAT_VERSION: CRC32_HEADER_SIZE}

DEFAULT_MAX_PAYLOAD_BYTES: Final = 256 * 1024 * 1024
"""Largest payload (after decompression) a codec writes or reads, unless configured otherwise."""
DEFAULT_MAX_COMPRESSION_RATIO: Final = 100
"""A compressed payload may expand at most this many times; the encoder stores a payload that
compresses better than this uncompressed, so every body it writes reads back."""


def frame(
    payload: bytes,
    *,
    nested_refs: bool,
    max_payload_bytes: int,
    max_compression_ratio: int,
    compress_threshold: int | None,
    compressor: Any,
    sealed: bool = False,
) -> bytes:
    """``payload`` behind its header, compressed when ``compress_threshold`` says so; with
    ``sealed``, framed for a seal (FLAG_SEALED, no checksum)."""
    if len(payload) > max_payload_bytes:
        raise InvalidCheckpointError(
            f"The checkpoint encodes to {len(payload)} bytes, over this codec's max_payload_bytes "
            f"({max_payload_bytes}); nothing was stored. Raise the limit: "
            "CheckpointCodec(max_payload_bytes=...)",
            field="checkpoint",
        )
    if compress_threshold is None or len(payload) < compress_threshold:
        return sealed_frame(payload, nested_refs) if sealed else plain_frame(payload, nested_refs)
    compressed = compressor().compress(payload)
    # A payload that expands more than a reader allows is stored as it is, so every body this
    # codec writes is one it can read back.
    if len(compressed) * max_compression_ratio < len(payload):
        return sealed_frame(payload, nested_refs) if sealed else plain_frame(payload, nested_refs)
    payload = compressed
    flags = FLAG_ZSTD | (FLAG_NESTED_REFS if nested_refs else 0)
    if sealed:
        return _HEADER.pack(MAGIC, FORMAT_VERSION, flags | FLAG_SEALED, _NO_CHECKSUM) + payload
    return _HEADER.pack(MAGIC, FORMAT_VERSION, flags, checksum(payload)) + payload


def plain_frame(payload: bytes, nested_refs: bool) -> bytes:
    """``payload`` behind its header, uncompressed (its size already checked).

    One copy of the payload: ormsgpack returns it as ``bytes`` of its own and cannot write after
    a reserved header (nor can msgspec without a ``bytearray`` that would be copied into
    ``bytes`` again), and an ``ormsgpack.Fragment`` must hold a whole msgpack value, so the
    header is joined to it once; the small header is built first. A large ``bytes`` value at
    the top of a checkpoint's state skips ormsgpack's copy instead (plain_frame_of_pieces)."""
    return (NESTED_PREFIX if nested_refs else PLAIN_PREFIX) + checksum(payload) + payload


def plain_frame_of_pieces(pieces: list[bytes]) -> bytes:
    """``plain_frame(b"".join(pieces), False)``, joined once: the checksum is streamed over the
    pieces (XXH3's streamed value is its one-shot value), so a large piece is copied only into
    the body."""
    digest = xxhash.xxh3_64()
    for piece in pieces:
        digest.update(piece)
    return b"".join((PLAIN_PREFIX, digest.digest(), *pieces))


def sealed_frame(payload: bytes, nested_refs: bool) -> bytes:
    """``payload`` behind a header framed for a seal (FLAG_SEALED, no checksum), uncompressed."""
    if nested_refs:
        return _HEADER.pack(MAGIC, FORMAT_VERSION, FLAG_SEALED | FLAG_NESTED_REFS, _NO_CHECKSUM) + payload
    return SEALED_PREFIX + payload


def check_frame(body: bytes, checkpoint_id: str, sealed: bool = False) -> tuple[int, memoryview]:
    """The flags and payload of an intact body of either version; damage raises
    CheckpointCorruptedError.

    ``sealed``: the caller has just verified the MAC of the seal around ``body`` (or checked the
    body's frame itself): its checksum is not computed again, and a body framed for a seal is
    accepted. Without it, such a body is refused: nothing else vouches for its bytes."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise CheckpointCorruptedError(checkpoint_id, f"stored body is {type(body).__name__}, not bytes")
    if len(body) < _PREFIX.size:
        raise CheckpointCorruptedError(checkpoint_id, f"body is {len(body)} bytes, shorter than its header")
    magic, version, flags = _PREFIX.unpack_from(body)
    if magic != MAGIC:
        raise CheckpointCorruptedError(checkpoint_id, "body does not start with the checkpoint magic")
    header_size = _HEADER_SIZES.get(version)
    if header_size is None:
        raise CheckpointCorruptedError(checkpoint_id, f"unknown body format version {version}")
    if len(body) < header_size:
        raise CheckpointCorruptedError(checkpoint_id, f"body is {len(body)} bytes, shorter than its header")
    if flags & ~KNOWN_FLAGS:
        # A flag this version does not know changes how the payload reads; never guess.
        raise CheckpointCorruptedError(checkpoint_id, f"unknown body flags {flags:#04x}")
    whole = memoryview(body)
    payload = whole[header_size:]
    if sealed:
        return flags, payload
    if flags & FLAG_SEALED:
        raise CheckpointCorruptedError(checkpoint_id, UNSEALED_READ)
    if version == FORMAT_VERSION:
        intact = whole[CHECK_OFFSET:header_size] == checksum(payload)
    else:
        intact = crc32(payload) == CRC.unpack_from(body, CHECK_OFFSET)[0]
    if not intact:
        raise CheckpointCorruptedError(checkpoint_id, "checksum mismatch: stored bytes were altered")
    return flags, payload


UNSEALED_READ: Final = (
    "its body has no checksum (it is framed for a seal, whose MAC protects it) but was read without a "
    "verified seal around it"
)
"""Why a body framed for a seal is refused by a read that did not verify its seal."""


def unframe(
    body: bytes,
    checkpoint_id: str,
    max_payload_bytes: int,
    max_compression_ratio: int,
    sealed: bool = False,
) -> bytes | memoryview:
    """The payload of an intact body, decompressed within the bounds (``sealed``: check_frame's)."""
    # The common body (bytes, no flags) is checked in line; any other, or any failed check, takes
    # the full checks, which name what is wrong.
    if not sealed and type(body) is bytes and len(body) >= HEADER_SIZE and body.startswith(PLAIN_PREFIX):
        payload = memoryview(body)[HEADER_SIZE:]
        if len(payload) <= max_payload_bytes and body.startswith(checksum(payload), CHECK_OFFSET):
            return payload
    flags, payload = check_frame(body, checkpoint_id, sealed)
    if flags & FLAG_ZSTD:
        return decompress_bounded(payload, checkpoint_id, max_payload_bytes, max_compression_ratio)
    if len(payload) > max_payload_bytes:
        raise CheckpointCorruptedError(
            checkpoint_id,
            f"payload of {len(payload)} bytes is over this codec's max_payload_bytes ({max_payload_bytes})",
        )
    return payload


def has_nested_refs(body: bytes) -> bool:
    return len(body) > FLAGS_OFFSET and bool(body[FLAGS_OFFSET] & FLAG_NESTED_REFS)


def decompress_bounded(
    payload: bytes | memoryview, checkpoint_id: str, max_payload_bytes: int, max_ratio: int
) -> bytes:
    """Decompress a zstd payload only if the size its frame declares is within both limits."""
    try:
        import zstandard
    except ImportError as exc:
        raise MissingDependencyError("reading zstd-compressed checkpoints", "zstd", "zstandard") from exc
    try:
        declared = zstandard.frame_content_size(payload)
    except zstandard.ZstdError as exc:
        raise CheckpointCorruptedError(checkpoint_id, f"zstd payload: {exc}") from exc
    if declared < 0:
        raise CheckpointCorruptedError(checkpoint_id, "zstd payload does not declare its decompressed size")
    limit = min(max_payload_bytes, max_ratio * len(payload))
    if declared > limit:
        raise CheckpointCorruptedError(
            checkpoint_id,
            f"zstd payload of {len(payload)} bytes declares {declared} bytes decompressed, over the limit of "
            f"{limit} (max_payload_bytes {max_payload_bytes}, max_compression_ratio {max_ratio})",
        )
    try:
        data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise CheckpointCorruptedError(checkpoint_id, f"zstd payload: {exc}") from exc
    if len(data) != declared:
        raise CheckpointCorruptedError(
            checkpoint_id, f"zstd payload decompressed to {len(data)} bytes, not the {declared} it declares"
        )
    return data
