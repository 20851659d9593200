"""What the lineage shows of a body: its timestamp and iteration number, read without constructing
a value (no application type is needed) and without the records nested in it (a container's
references to them are skipped, not resolved)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ..codec import frame as framing
from ..codec.decoding import RECORD_VERSION
from ..contract import CHECKPOINT_FIELDS, CheckpointID, CheckpointStorage
from ..errors import CheckpointCorruptedError, InvalidCheckpointIdError

_TIMESTAMP = 2 + CHECKPOINT_FIELDS.index("timestamp")
_ITERATION = 2 + CHECKPOINT_FIELDS.index("iteration_count")
_RECORD_LENGTH = 2 + len(CHECKPOINT_FIELDS)
TIMESTAMP_WIDTH = 64
"""Longest timestamp kept from a body, in characters (a stored one is hostile data)."""


@dataclass(frozen=True, slots=True)
class BodyFields:
    """A body's timestamp and iteration number; ``error`` says why they are absent, if they are."""

    timestamp: str | None = None
    iteration_count: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "iteration_count": self.iteration_count,
            "body_error": self.error,
        }


def _skip_extension(code: int, data: memoryview) -> None:
    return None


def peek_fields(body: bytes, *, checkpoint_id: CheckpointID, sealed: bool = False) -> BodyFields:
    """The timestamp and iteration number of a codec body (``sealed`` as in ``decode_checkpoint``)."""
    try:
        flags, payload = framing.check_frame(body, checkpoint_id, sealed)
        if flags & framing.FLAG_ZSTD:
            payload = memoryview(
                framing.decompress_bounded(
                    payload,
                    checkpoint_id,
                    framing.DEFAULT_MAX_PAYLOAD_BYTES,
                    framing.DEFAULT_MAX_COMPRESSION_RATIO,
                )
            )
        wire = msgspec.msgpack.decode(payload, ext_hook=_skip_extension)
    except CheckpointCorruptedError as exc:
        return BodyFields(error=exc.reason)
    except Exception as exc:  # msgspec's own errors: the payload is not msgpack
        return BodyFields(error=f"cannot be decoded: {type(exc).__name__}")
    if type(wire) is not list or len(wire) != _RECORD_LENGTH or wire[0] != RECORD_VERSION:
        return BodyFields(error="not a checkpoint record of this format version")
    timestamp, iteration = wire[_TIMESTAMP], wire[_ITERATION]
    return BodyFields(
        timestamp=timestamp[:TIMESTAMP_WIDTH] if isinstance(timestamp, str) else None,
        iteration_count=iteration if type(iteration) is int else None,
    )


async def peek_body_fields(storage: CheckpointStorage, checkpoint_id: CheckpointID) -> BodyFields:
    """The fields of a stored record's body (capability ``raw_access``), its seal checked first on
    a storage with an integrity key."""
    try:
        raw = await storage.read_raw_body(checkpoint_id)
    except InvalidCheckpointIdError as exc:  # an id the index holds but no read accepts
        return BodyFields(error=str(exc))
    if raw is None:
        return BodyFields(error="no stored body")
    open_sealed: Callable[[CheckpointID, bytes], tuple[Any, bytes]] | None = (
        getattr(storage, "open_sealed", None) if getattr(storage, "integrity_enabled", False) else None
    )
    if open_sealed is None:
        return peek_fields(raw, checkpoint_id=checkpoint_id)
    try:
        _, body = open_sealed(checkpoint_id, raw)
    except CheckpointCorruptedError as exc:  # CheckpointTamperedError too
        return BodyFields(error=exc.reason)
    return peek_fields(body, checkpoint_id=checkpoint_id, sealed=True)


__all__ = ["TIMESTAMP_WIDTH", "BodyFields", "peek_body_fields", "peek_fields"]
