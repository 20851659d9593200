"""How deep a stored value may nest, and work that ran out of Python stack done again on a fresh one.

Encoding and decoding recurse once per level of nesting (msgspec's decoder counts its levels
against Python's recursion limit), so whether a deep value goes through depends on how deep the
caller's own stack already is: a value saved from a shallow stack could fail to load from a
deeper one (inside a runner). The codec removes that dependence in two ways:

* :data:`MAX_NESTING` bounds what a save writes: at most that many levels of msgpack arrays,
  maps and extensions on any path, nested records included (a nested record decodes inside its
  container's decode). A value nested deeper is refused at save, naming where.
* Work that runs out of stack anyway (a decode called from deep inside a runner, an encode of a
  value near the bound) is done again once on a new thread, whose stack starts empty. A body of
  :data:`MAX_NESTING` levels decodes there within Python's default recursion limit (1,000) with
  room for the codec's own calls and a rebuilt object's ``__setstate__``.
* The encoder's Python walk (the one that can go deepest in calls: several per level of a typed
  value) always runs at least :data:`WALK_FLOOR` calls deep, a fresh stack's or not. So whatever
  it wrote, a load and a re-save's comparison, each as deep in calls per level or less and on a
  fresh stack when they must be, read with some fifty calls to spare.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
from collections.abc import Callable
from typing import Final, TypeVar

MAX_NESTING: Final = 900
"""Deepest nesting a save writes: msgpack arrays, maps and extensions along any one path."""
WALK_FLOOR: Final = 64
"""The fewest calls deep the encoder's Python walk starts."""

T = TypeVar("T")


class _FreshStack(threading.Thread):
    """The thread :func:`on_fresh_stack` runs work on: work that runs out of stack on it has had
    its fresh stack already."""


def ran_out_of_stack(exc: BaseException) -> bool:
    """True if ``exc`` is, or was caused while handling, a RecursionError, and the work that
    raised it has not already had a fresh stack."""
    if isinstance(threading.current_thread(), _FreshStack):
        return False
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, RecursionError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def on_fresh_stack(call: Callable[[], T]) -> T:
    """``call()`` on a new thread, in a copy of the caller's context (a hook may read the
    application's context variables); its exception re-raised."""
    context = contextvars.copy_context()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = _FreshStack(target=context.run, args=(run,), name="checkpoint-codec-fresh-stack")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def at_walk_floor(call: Callable[[], T]) -> T:
    """``call()`` at least :data:`WALK_FLOOR` calls deep (padded with calls of its own when the
    stack is shallower)."""
    frame = inspect.currentframe()
    depth = 0
    while frame is not None and depth < WALK_FLOOR:
        frame = frame.f_back
        depth += 1
    return _padded(WALK_FLOOR - depth, call)


def _padded(calls: int, call: Callable[[], T]) -> T:
    return call() if calls <= 0 else _padded(calls - 1, call)
