"""The codec as a storage calls it: :class:`BodyCodec`, one signature whatever a subclass overrides.

``encode_checkpoint``, ``encode_checkpoint_tree`` and ``decode_checkpoint`` take ``sealed=`` (a
keyed storage's bodies are framed for their seal). A subclass may override them from before they
took it. Which it does is looked at once, by :func:`body_codec` when a storage (or verify) takes the
codec: the codec itself when its methods take the keyword, else :class:`WithoutSealed`, which calls
the overrides without it. Callers always pass ``sealed=`` and never ask which they hold.

Apart from codec.py because the engine and verify, not the codec, decide a body is sealed.
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Mapping
from typing import Any, Final, Protocol

from .codec import CheckpointCodec
from .vocabulary import EncodedCheckpoint, type_key

_TAKING_SEALED: Final = ("encode_checkpoint", "encode_checkpoint_tree", "decode_checkpoint")


class BodyCodec(Protocol):
    """A checkpoint's bodies and back, as a storage calls for them (CheckpointCodec's methods)."""

    def encode_checkpoint(
        self, checkpoint: Any, *, bin_from_bytes_only: bool = False, sealed: bool = False
    ) -> bytes: ...

    def encode_checkpoint_tree(self, checkpoint: Any, *, sealed: bool = False) -> list[EncodedCheckpoint]: ...

    def decode_checkpoint(
        self,
        body: bytes,
        *,
        checkpoint_id: str,
        nested: Mapping[str, bytes] | None = None,
        construct_types: bool = True,
        sealed: bool = False,
    ) -> Any: ...


def body_codec(codec: CheckpointCodec) -> BodyCodec:
    """``codec`` as a storage calls it: itself if its class's encode and decode methods take
    ``sealed=`` (its own, or overrides that take the keyword or ``**kwargs``), else a
    :class:`WithoutSealed` around it, with a DeprecationWarning naming the overrides."""
    cls = type(codec)
    older = [
        name
        for name in _TAKING_SEALED
        if not _takes_sealed(getattr(cls, name), getattr(CheckpointCodec, name))
    ]
    if not older:
        return codec
    warnings.warn(
        f"{type_key(cls)} overrides {', '.join(older)} without the sealed= keyword, so a keyed storage "
        "frames its bodies with a checksum inside their seal, and cannot read bodies framed for a seal; "
        "take `sealed: bool = False` and pass it on",
        DeprecationWarning,
        stacklevel=_outside_this_package(),
    )
    return WithoutSealed(codec)


class WithoutSealed:
    """A codec whose encode or decode override predates ``sealed=``, called without it: every
    body it writes keeps its checksum (a seal around it too), as before the keyword existed, and
    it reads those; a body framed for a seal it refuses, by name. Every method drops the keyword,
    not only the older ones: a body must be read by the decode of the codec that framed it."""

    __slots__ = ("codec",)

    def __init__(self, codec: CheckpointCodec) -> None:
        self.codec = codec

    def encode_checkpoint(
        self, checkpoint: Any, *, bin_from_bytes_only: bool = False, sealed: bool = False
    ) -> bytes:
        return self.codec.encode_checkpoint(checkpoint, bin_from_bytes_only=bin_from_bytes_only)

    def encode_checkpoint_tree(self, checkpoint: Any, *, sealed: bool = False) -> list[EncodedCheckpoint]:
        return self.codec.encode_checkpoint_tree(checkpoint)

    def decode_checkpoint(
        self,
        body: bytes,
        *,
        checkpoint_id: str,
        nested: Mapping[str, bytes] | None = None,
        construct_types: bool = True,
        sealed: bool = False,
    ) -> Any:
        return self.codec.decode_checkpoint(
            body, checkpoint_id=checkpoint_id, nested=nested, construct_types=construct_types
        )


_PACKAGE: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outside_this_package() -> int:
    """The stacklevel of the nearest caller outside storages/ (the line that built the storage,
    however many of the package's constructors lie between)."""
    level = 1
    frame = inspect.currentframe()
    frame = frame.f_back if frame is not None else None  # body_codec's frame: stacklevel 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE + os.sep):
        frame = frame.f_back
        level += 1
    return level


def _takes_sealed(method: Any, base: Any) -> bool:
    if method is base:
        return True
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "sealed" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


__all__ = ["BodyCodec", "WithoutSealed", "body_codec"]
