"""What the codec promises about values beyond writing and reading them.

* **A save refuses what a load would refuse.** Allow-listed objects are rebuilt without their
  classes' code (storages/codec/objects.py), so a load refuses little beyond the allow-list and
  the bounds, which the save checks with the same registry. What is left is code a load runs: a
  decode hook, a class's own ``__setstate__`` or ``__new__``, and finding an enum member by its
  value. For those the save does that work once, from the bytes it has just written, and a
  failure refuses the save naming where the value sits (as MAF's own save does since #8181).
* **Two values are the same when they would be stored alike** (:meth:`Fidelity.same_value`): the
  re-save of an id decides "same content" by it, not by ``==``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import xxhash

from .canonical import CanonicalPacker
from .decoding import Reader
from .locate import describe
from .packing import ExactPacker
from .stack import on_fresh_stack, ran_out_of_stack
from .values import Nesting, Reducer
from .vocabulary import NestedResolver, TypeNotAllowed, Unencodable

_REMEMBERED_REBUILDS: Final = 4096
"""Digests of the contents rebuilt at save that a codec remembers (16 bytes each)."""


class Fidelity:
    """Save-time rebuilds and the comparison of values, for one codec (its Rebuilds: the
    registry's reducers call :meth:`try_rebuild` and :meth:`try_member`)."""

    def __init__(
        self,
        *,
        reducers: dict[type[Any], Reducer],
        reducer_for: Callable[[type[Any], Any], Reducer],
        exact: ExactPacker,
        boxing: Callable[[], ExactPacker],
        reader: Reader,
        reader_with: Callable[[NestedResolver], Reader],
    ) -> None:
        """``reducers`` and ``reducer_for`` as the codec's packers take them; ``exact`` and
        ``boxing`` its exact packers (the boxing one built on first use); ``reader`` its reader of
        bodies given no nested records, ``reader_with`` a reader resolving references by one."""
        self._reducers = reducers
        self._reducer_for = reducer_for
        self._exact = exact
        self._boxing = boxing
        self._reader = reader
        self._reader_with = reader_with
        # A reference finds nothing in it: nothing records what it resolved, so one serves all.
        self._rebuilding = reader_with(NestedResolver({}, given=True))
        self._canonical: CanonicalPacker | None = None
        self._rebuilt: set[bytes] = set()
        """Digests of contents that rebuilt at save (seeded with their extension code)."""

    def try_rebuild(self, code: int, data: bytes, value: Any, tree: Nesting | None) -> None:
        """Rebuild ``value`` from ``data``, the contents just written for it, as a load would: for
        values whose rebuild runs code of their class (a decode hook, a ``__setstate__`` or
        ``__new__`` of its own), which a load could find refusing. Raises Unencodable naming the
        value, so the save fails naming where it sits. ``tree``: the tree encode that wrote
        ``data`` (the packer's), if any."""
        # Checkpoints embedded in it are references by now: they resolve to the objects saved.
        embedded = tree.embedded() if tree is not None else {}
        # The same bytes rebuild alike: a workflow saves the same values superstep after
        # superstep (a conversation so far), and each is rebuilt once, not at every save.
        key = None if embedded else xxhash.xxh3_128_digest(data, seed=code)
        if key is not None and key in self._rebuilt:
            return
        reader = self._rebuilding
        if embedded:
            reader = self._reader_with(NestedResolver({}, given=True, decoded=embedded))
        try:
            reader.rebuild(code, data)
        except Exception as exc:
            raise Unencodable(value, f"it would not load back: {_reason(exc)}") from exc
        if key is not None:
            if len(self._rebuilt) >= _REMEMBERED_REBUILDS:
                self._rebuilt.clear()
            self._rebuilt.add(key)

    def try_member(self, member: Any) -> None:
        """Find enum ``member`` again from its value encoded and decoded, as a load would; raise
        Unencodable if that finds another member or none (a NaN value finds none)."""
        # The codec's own exact packers, which pack for no tree: embedded checkpoints inline.
        try:
            try:
                data = self._exact.pack(member.value)
            except OverflowError:
                data = self._boxing().pack(member.value)
            found = type(member)(self._reader.decode(data))
        except Unencodable:
            raise
        except Exception as exc:
            raise Unencodable(member, f"its value would not find it on load: {_reason(exc)}") from exc
        if found is not member and found != member:
            raise Unencodable(member, f"its value would find {found!r} on load, not this member")

    def same_value(self, first: Any, second: Any) -> bool:
        """True if ``first`` and ``second`` are one value to this codec: each would be stored as
        the other, but for the order of set members and dict entries (which no body can promise)
        and a NaN's bits. Stricter than ``==`` wherever the codec keeps types apart: ``True`` and
        ``1``, ``1`` and ``1.0``, a tuple and a list, ``0.0`` and ``-0.0``, one instant at two
        offsets, ``Decimal("1.0")`` and ``Decimal("1.00")``, objects of two classes or with
        different state (storages/codec/canonical.py); and looser where ``==`` is
        too strict to say "the same": a NaN, an object compared by identity. False for a value
        it could not store."""
        if self._canonical is None:
            self._canonical = CanonicalPacker(self._reducers, self._reducer_for)
        packer = self._canonical  # packs for no tree: embedded checkpoints inline, by content
        try:
            return packer.pack(first) == packer.pack(second)
        except Exception as exc:
            if ran_out_of_stack(exc):
                return on_fresh_stack(lambda: self.same_value(first, second))
            return False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TypeNotAllowed):
        return f"{exc.key} is not allowed: {exc.reason}"
    return describe(exc)
