"""Codec subclasses whose encode or decode overrides predate the ``sealed=`` keyword.

A keyed storage frames every body for its seal (no checksum: the MAC covers it) and decodes it with
``sealed=True``. A subclass written before the keyword existed overrides ``encode_checkpoint``,
``encode_checkpoint_tree`` or ``decode_checkpoint`` without it, and would fail on the keyword.

Decision: such a class is adapted once, when it is created (``CheckpointCodec.__init_subclass__``),
so that every call site passes ``sealed=`` alike and none inspects the codec it holds. If any of the
three methods lacks the keyword, all three of the class take it and ignore it: the class keeps
writing bodies framed with a checksum and reading them with the checksum checked, as before the
keyword existed. Inside a seal that is safe (the MAC still covers every byte) and costs only the
checksum a seal makes redundant, so it is supported without a warning. A body framed for a seal
(written by another codec) is refused by such a class, by name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_TAKING_SEALED = ("encode_checkpoint", "encode_checkpoint_tree", "decode_checkpoint")


def frame_plainly_where_overrides_predate_sealed(cls: type[Any], base: type[Any]) -> None:
    """Adapt subclass ``cls`` of codec class ``base`` if one of its overrides lacks ``sealed=``:
    its three methods then take the keyword and call what ``cls`` had without it."""
    if all(_accepts_sealed(getattr(cls, name), getattr(base, name)) for name in _TAKING_SEALED):
        return
    for name in _TAKING_SEALED:
        setattr(cls, name, _ignoring_sealed(getattr(cls, name)))


def _ignoring_sealed(method: Callable[..., Any]) -> Callable[..., Any]:
    def framed_plainly(self: Any, *args: Any, sealed: bool = False, **kwargs: Any) -> Any:
        return method(self, *args, **kwargs)

    # Named after the method it adapts, without ``__wrapped__``: a further subclass's signature
    # check must see that this one takes the keyword.
    framed_plainly.__name__ = method.__name__
    framed_plainly.__qualname__ = method.__qualname__
    framed_plainly.__doc__ = method.__doc__
    return framed_plainly


def _accepts_sealed(method: Any, base: Any) -> bool:
    if method is base:
        return True
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "sealed" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


__all__ = ["frame_plainly_where_overrides_predate_sealed"]
