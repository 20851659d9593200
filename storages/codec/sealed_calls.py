"""Calling a codec for a body inside a seal: with ``sealed=True`` when the codec's class takes
it, without it when a subclass overrides encode or decode from before the keyword existed.

Apart from codec.py because the engine and verify, not the codec, decide a body is sealed.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from .codec import CheckpointCodec

_TAKES_SEALED: dict[type[Any], bool] = {}


def takes_sealed(codec: CheckpointCodec) -> bool:
    """True if ``codec`` reads and writes bodies framed for a seal (``sealed=``): its class keeps
    this one's encode and decode methods, or its overrides take the keyword. A keyed storage whose
    codec overrides one without it frames bodies with a checksum and decodes without the keyword, as
    before the keyword existed (a body framed for a seal is then refused, by name)."""
    cls = type(codec)
    known = _TAKES_SEALED.get(cls)
    if known is None:
        known = _TAKES_SEALED[cls] = all(
            _accepts_sealed(getattr(cls, name), getattr(CheckpointCodec, name))
            for name in ("encode_checkpoint", "encode_checkpoint_tree", "decode_checkpoint")
        )
    return known


def decode_sealed(
    codec: CheckpointCodec,
    body: bytes,
    *,
    checkpoint_id: str,
    nested: Mapping[str, bytes] | None = None,
    construct_types: bool = True,
) -> Any:
    """``codec.decode_checkpoint`` of a body whose seal was just verified (or, stored without
    one, whose frame was checked): with ``sealed=True`` if the codec takes it."""
    if takes_sealed(codec):
        return codec.decode_checkpoint(
            body, checkpoint_id=checkpoint_id, nested=nested, construct_types=construct_types, sealed=True
        )
    return decode_plain(
        codec, body, checkpoint_id=checkpoint_id, nested=nested, construct_types=construct_types
    )


def decode_plain(
    codec: CheckpointCodec,
    body: bytes,
    *,
    checkpoint_id: str,
    nested: Mapping[str, bytes] | None = None,
    construct_types: bool = True,
) -> Any:
    """``codec.decode_checkpoint`` of a body stored without a seal: :func:`decode_sealed`'s
    counterpart, with the same signature, for a caller that chooses between the two."""
    return codec.decode_checkpoint(
        body, checkpoint_id=checkpoint_id, nested=nested, construct_types=construct_types
    )


def _accepts_sealed(method: Any, base: Any) -> bool:
    if method is base:
        return True
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "sealed" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


__all__ = ["decode_plain", "decode_sealed", "takes_sealed"]
