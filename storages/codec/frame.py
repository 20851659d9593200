"""The body frame: ``payload + trailer`` (or, as earlier releases wrote it, ``header + payload``),
and the bounds a stored body is checked against.

The frame carries a magic, the format version, flags (zstd, nested refs, sealed) and a checksum
of the payload, so any damage to stored bytes is detected instead of decoded into silently
different data. Version 3 (written) puts them after the payload, in a trailer, and checks with
XXH3-64 seeded with the flags; version 2 (read) put them before it, in a header, and checked with
XXH3-64; version 1 (read) with CRC-32; docs/contract.md, "Corruption is loud", compares them. A
trailer lets the frame be appended to the payload the msgpack library returns, in place, instead
of both being copied into a new ``bytes`` behind a header (append_frame). A body
framed for a seal (``FLAG_SEALED``) carries no checksum: the MAC of the seal around it
(storages/integrity.py) covers every one of its bytes, and such a body is read only by a caller
that has just verified that MAC (``sealed=True``); any other read refuses it. A compressed
payload must declare its size and expand at most ``max_compression_ratio`` times; no payload is
larger than ``max_payload_bytes`` once decompressed.
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from typing import Any, Final

import xxhash

from ..errors import CheckpointCorruptedError, InvalidCheckpointError, MissingDependencyError

checksum: Callable[..., bytes] = xxhash.xxh3_64_digest
"""The check of version 3 and 2: the payload's XXH3-64, big-endian (xxhash's canonical form);
version 3 seeds it with the body's flags (``checksum(payload, flags)``; seed 0, a plain body's,
gives the unseeded value), so the check covers the flags too. python-xxhash dispatches at run
time to the widest vector unit the CPU has (AVX-512 here: about 17 µs a megabyte in cache, the
speed of reading it; ISA-L's CRC-32 is as fast only with AVX-512, 89 µs a megabyte without). It
misses a random corruption once in 2**64, not 2**32."""

crc32: Callable[[bytes | bytearray | memoryview], int]
"""The check of a version-1 header (zlib's polynomial, the same value as ``zlib.crc32``): ISA-L's
(python-isal, a dependency) where it is installed, zlib's otherwise; same values, so bodies
checked with either read with either."""
try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal has wheels for every platform CI runs on
    crc32 = zlib.crc32

MAGIC: Final = b"CK"
FORMAT_VERSION: Final = 3
"""The version written: ``payload, flags, XXH3-64 of the payload seeded with the flags, version,
magic`` (a 12-byte trailer). The payload encoding is version 1's, byte for byte. A version-3 body
never starts with the magic (a payload of two bytes or more is a msgpack array, map, string or
the like, whose first byte is not ``C``; a one-byte payload is followed by the flags, all below
``K``), so the first two bytes tell a header from a trailer."""
HEADER_FORMAT_VERSION: Final = 2
"""The header version every release from version 2 to this one wrote: ``magic, version, flags,
XXH3-64 of the payload`` (12 bytes). Still read, checked by its XXH3-64 (tests/test_body_formats.py
reads committed bodies of it); never written."""
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
"""The size of a version-2 header."""
_TRAILER = struct.Struct(">B8sB2s")  # flags, XXH3-64 seeded with them, format version, magic
TRAILER_SIZE: Final = _TRAILER.size
"""The size of the trailer written (version 3): as large as a version-2 header."""
TRAILER_END: Final = bytes((FORMAT_VERSION,)) + MAGIC
"""What every version-3 body ends with."""
IN_PLACE_MIN: Final = 1 << 16
"""From this payload size on the trailer is appended in place (append_frame); below it, a
concatenation (a new ``bytes`` for a small payload costs less than the buffer object)."""
CRC32_HEADER_SIZE: Final = 8
"""The size of a version-1 header (its check is a 4-byte CRC-32)."""
CRC = struct.Struct(">I")
"""A version-1 header's check field."""
_NO_CHECKSUM: Final = bytes(8)
_PLAIN_FLAGS: Final = bytes(1)
PLAIN_PREFIX: Final = _PREFIX.pack(MAGIC, HEADER_FORMAT_VERSION, 0)
"""A version-2 header without flags, up to its checksum."""
SEALED_TRAILER: Final = _TRAILER.pack(FLAG_SEALED, _NO_CHECKSUM, FORMAT_VERSION, MAGIC)
"""The whole trailer of a body framed for a seal, uncompressed and without nested refs."""
CRC32_PLAIN_PREFIX: Final = _PREFIX.pack(MAGIC, CRC32_FORMAT_VERSION, 0)
"""A version-1 header without flags, up to its CRC."""
_HEADER_SIZES: Final = {HEADER_FORMAT_VERSION: HEADER_SIZE, CRC32_FORMAT_VERSION: CRC32_HEADER_SIZE}

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
    """``payload`` before its trailer, compressed when ``compress_threshold`` says so; with
    ``sealed``, framed for a seal (FLAG_SEALED, no checksum)."""
    if len(payload) > max_payload_bytes:
        raise InvalidCheckpointError(
            f"The checkpoint encodes to {len(payload)} bytes, over this codec's max_payload_bytes "
            f"({max_payload_bytes}); nothing was stored. Raise the limit: "
            "CheckpointCodec(max_payload_bytes=...)",
            field="checkpoint",
        )
    flags = (FLAG_NESTED_REFS if nested_refs else 0) | (FLAG_SEALED if sealed else 0)
    if compress_threshold is None or len(payload) < compress_threshold:
        return framed(payload, flags)
    compressed = compressor().compress(payload)
    # A payload that expands more than a reader allows is stored as it is, so every body this
    # codec writes is one it can read back.
    if len(compressed) * max_compression_ratio < len(payload):
        return framed(payload, flags)
    return framed(compressed, flags | FLAG_ZSTD)


def trailer(payload: bytes | memoryview, flags: int) -> bytes:
    """The version-3 trailer of ``payload`` with ``flags`` (no checksum if FLAG_SEALED)."""
    digest = _NO_CHECKSUM if flags & FLAG_SEALED else checksum(payload, flags)
    return _TRAILER.pack(flags, digest, FORMAT_VERSION, MAGIC)


def framed(payload: bytes, flags: int) -> bytes:
    """``payload`` before its trailer (its size already checked)."""
    end = trailer(payload, flags)
    if len(payload) < IN_PLACE_MIN:
        return payload + end
    owned = [payload]
    del payload
    return append_frame(owned, end)


def plain_frame(payload: bytes, nested_refs: bool) -> bytes:
    """``payload`` before its trailer, uncompressed (its size already checked)."""
    if nested_refs or len(payload) >= IN_PLACE_MIN:
        return framed(payload, FLAG_NESTED_REFS if nested_refs else 0)
    return b"".join((payload, _PLAIN_FLAGS, checksum(payload), TRAILER_END))  # framed's, in line


def append_frame(owned: list[bytes], end: bytes) -> bytes:
    """``owned[0] + end``, emptying ``owned``: in place, without copying the payload, when
    nothing else refers to it.

    ormsgpack returns a payload as a ``bytes`` of its own. A ``BytesIO`` made from a ``bytes``
    uses it as its buffer, writes into it in place while it holds the only reference (it copies
    it first otherwise), grows it by a reallocation (in place when the memory after it is free,
    as the end of a freshly shrunk packer buffer is; a remap, not a copy, for a mapping), and
    ``getvalue`` hands that same ``bytes`` back. So the caller passes the payload in a list it
    holds no other reference to, and this takes it out: a 1 MB payload's join copy (25 µs, a
    seventh of our 1 MB text encode) is gone. Where another reference exists, ``BytesIO`` copies
    the payload first, so no ``bytes`` anyone else holds ever changes (tests/test_codec_large_values.py
    checks both cases), and the result is the same bytes, copied once, as a join would."""
    payload = owned.pop()
    buffer = io.BytesIO(payload)
    del payload
    buffer.seek(0, io.SEEK_END)
    buffer.write(end)
    return buffer.getvalue()


def plain_frame_of_pieces(pieces: list[bytes], sealed: bool = False) -> bytes:
    """``framed(b"".join(pieces), 0)`` (or FLAG_SEALED), joined once: the checksum is streamed
    over the pieces (XXH3's streamed value is its one-shot value), so a large piece is copied
    only into the body."""
    if sealed:
        return b"".join((*pieces, SEALED_TRAILER))
    digest = xxhash.xxh3_64()
    for piece in pieces:
        digest.update(piece)
    return b"".join((*pieces, _TRAILER.pack(0, digest.digest(), FORMAT_VERSION, MAGIC)))


def sealed_frame(payload: bytes, nested_refs: bool) -> bytes:
    """``payload`` before a trailer framed for a seal (FLAG_SEALED, no checksum), uncompressed."""
    return framed(payload, FLAG_SEALED | (FLAG_NESTED_REFS if nested_refs else 0))


def check_frame(body: bytes, checkpoint_id: str, sealed: bool = False) -> tuple[int, memoryview]:
    """The flags and payload of an intact body of any version; damage raises
    CheckpointCorruptedError.

    ``sealed``: the caller has just verified the MAC of the seal around ``body`` (or checked the
    body's frame itself): its checksum is not computed again, and a body framed for a seal is
    accepted. Without it, such a body is refused: nothing else vouches for its bytes."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise CheckpointCorruptedError(checkpoint_id, f"stored body is {type(body).__name__}, not bytes")
    whole = memoryview(body)
    if whole[: len(MAGIC)].tobytes() != MAGIC:
        return _check_trailer(whole, checkpoint_id, sealed)
    if len(body) < _PREFIX.size:
        raise CheckpointCorruptedError(checkpoint_id, f"body is {len(body)} bytes, shorter than its header")
    _, version, flags = _PREFIX.unpack_from(body)
    header_size = _HEADER_SIZES.get(version)
    if header_size is None:
        raise CheckpointCorruptedError(checkpoint_id, f"unknown body format version {version}")
    if len(body) < header_size:
        raise CheckpointCorruptedError(checkpoint_id, f"body is {len(body)} bytes, shorter than its header")
    _check_flags(flags, checkpoint_id)
    payload = whole[header_size:]
    if sealed:
        return flags, payload
    if flags & FLAG_SEALED:
        raise CheckpointCorruptedError(checkpoint_id, UNSEALED_READ)
    if version == HEADER_FORMAT_VERSION:
        intact = whole[CHECK_OFFSET:header_size] == checksum(payload)
    else:
        intact = crc32(payload) == CRC.unpack_from(body, CHECK_OFFSET)[0]
    if not intact:
        raise CheckpointCorruptedError(checkpoint_id, CHECKSUM_MISMATCH)
    return flags, payload


def _check_trailer(whole: memoryview, checkpoint_id: str, sealed: bool) -> tuple[int, memoryview]:
    """check_frame's of a body that does not start with the magic: version 3's, or damage."""
    size = len(whole)
    if size < TRAILER_SIZE or whole[size - len(MAGIC) :].tobytes() != MAGIC:
        raise CheckpointCorruptedError(checkpoint_id, NO_MAGIC)
    flags, digest, version, _ = _TRAILER.unpack_from(whole, size - TRAILER_SIZE)
    if version != FORMAT_VERSION:
        raise CheckpointCorruptedError(checkpoint_id, f"unknown body format version {version}")
    _check_flags(flags, checkpoint_id)
    payload = whole[: size - TRAILER_SIZE]
    if sealed:
        return flags, payload
    if flags & FLAG_SEALED:
        raise CheckpointCorruptedError(checkpoint_id, UNSEALED_READ)
    if digest != checksum(payload, flags):
        raise CheckpointCorruptedError(checkpoint_id, CHECKSUM_MISMATCH)
    return flags, payload


def _check_flags(flags: int, checkpoint_id: str) -> None:
    if flags & ~KNOWN_FLAGS:
        # A flag this version does not know changes how the payload reads; never guess.
        raise CheckpointCorruptedError(checkpoint_id, f"unknown body flags {flags:#04x}")


CHECKSUM_MISMATCH: Final = "checksum mismatch: stored bytes were altered"
NO_MAGIC: Final = "body has the checkpoint magic at neither end"
"""A body with neither a header (versions 1, 2) nor a trailer (version 3)."""


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
    # The common body (bytes, version 3, no flags) is checked in line; any other, or any failed
    # check, takes the full checks, which name what is wrong.
    if not sealed and type(body) is bytes and body.endswith(TRAILER_END):
        end = len(body) - TRAILER_SIZE
        if end >= 0 and not body[end]:
            payload = memoryview(body)[:end]
            if end <= max_payload_bytes and body.startswith(checksum(payload), end + 1):
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


def flags_of(body: bytes) -> int:
    """The flags byte of a body of any version (0 if it has none; its checks are check_frame's)."""
    if body[: len(MAGIC)] == MAGIC:
        return body[FLAGS_OFFSET] if len(body) > FLAGS_OFFSET else 0
    return body[-TRAILER_SIZE] if len(body) >= TRAILER_SIZE else 0


def has_nested_refs(body: bytes) -> bool:
    return bool(flags_of(body) & FLAG_NESTED_REFS)


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
