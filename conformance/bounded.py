"""Bounded storage calls: every call the kit makes on a storage has a deadline of its own.

A clause's timeout bounds the clause; a storage whose calls never return (a lock left held by a
cancelled call, a reply awaited forever) would still cost every later clause its whole timeout,
up to 15 minutes for a model clause. So the handles a clause gets (:class:`~conformance.context.
ClauseContext`) are :func:`bound` to the run's :class:`OperationWatch`: each call the kit awaits
on them is given ``operation_timeout`` seconds (``StorageTarget.operation_timeout``, times the
target's ``timeout_factor``), counted from when it started or from when any call of the run last
returned, whichever is later: calls queued behind others that keep returning are slow, not stuck.
The first call that does not return in time fails its clause with "``name``() did not return
within N s", and marks the storage stuck for the rest of the run: every
later call raises :class:`StorageStuck` at once, and every later clause fails without running
(its handles would be stuck too), so a storage that hangs costs one bound, not a timeout per
clause. The mark also holds when a clause swallows the error: the runner reads it from the watch.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .verdicts import ClauseFailure

T = TypeVar("T")

OPERATION_TIMEOUT = 20.0
"""Seconds one storage call may take before the storage is reported stuck (times the target's
``timeout_factor``). Below the default clause timeout, so that a storage stuck from an earlier
clause is caught by the first call of the next one, before that clause times out."""


class StorageStuck(ClauseFailure):
    """A storage call did not return within the run's operation timeout, now or earlier in the run."""


class OperationWatch:
    """One run's bound on each storage call, and whether (and where) the storage got stuck."""

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"operation_timeout must be a positive number of seconds, not {seconds!r}")
        self.seconds = seconds
        self.clause_id = ""
        """The clause running now ("" outside clauses): where a stuck call is said to be."""
        self.stuck = ""
        """What got stuck ("" while nothing has): the call and its bound."""
        self.stuck_in = ""
        """The clause whose call got stuck ("" outside clauses or while nothing has)."""
        self._last_return = float("-inf")
        """When (the event loop's clock, monotonic) a call of the run last returned."""

    def begin(self, clause_id: str, seconds: float) -> None:
        """Calls from now on are ``clause_id``'s, each bounded by ``seconds``."""
        self.clause_id = clause_id
        self.seconds = seconds

    def mark_stuck(self, what: str) -> None:
        """Record that the storage is stuck (the first mark wins)."""
        if not self.stuck:
            self.stuck = what
            self.stuck_in = self.clause_id

    async def run(self, name: str, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` (a call of the storage's ``name``) within the bound: it fails once
        ``seconds`` pass in which neither it nor any other call of the run returned. A call queued
        behind others that keep returning (120 saves of one workflow taking turns) is slow, not
        stuck; one waiting on a storage where nothing returns any more is stuck."""
        if self.stuck:
            _discard(awaitable)
            raise StorageStuck(f"not called: the storage is stuck ({self.stuck})")
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            expired, answer = await _within(self._quiet_for(loop, started), awaitable)
        except Exception:
            self._last_return = loop.time()  # an error is an answer too
            raise
        if expired:
            self.mark_stuck(f"{name}() did not return within {self.seconds:g} s")
            raise StorageStuck(
                f"{name}() did not return within {self.seconds:g} s, and nothing else the storage was "
                f"asked returned meanwhile (waited {loop.time() - started:.1f} s; a lock or a "
                "connection left held?)"
            )
        self._last_return = loop.time()
        return answer  # type: ignore[return-value]

    def _quiet_for(self, loop: asyncio.AbstractEventLoop, started: float) -> Callable[[], float]:
        """When a call started at ``started`` is overdue: ``seconds`` after it started or after the
        last call of the run returned, whichever is later."""

        def overdue_at() -> float:
            return max(started, self._last_return) + self.seconds

        return overdue_at

    def bound(self, handle: T) -> T:
        """``handle`` with every call bounded by this watch (a handle already bound stays as is)."""
        if handle is None or type(handle) in _PROXY_CLASSES:
            return handle
        proxy_class = _WithContext if hasattr(type(handle), "__aenter__") else _Plain
        proxy: T = proxy_class(handle, self)  # type: ignore[assignment]
        return proxy


def unbound(handle: Any) -> Any:
    """The storage behind a bound handle (``handle`` itself when it is not bound)."""
    if type(handle) in _PROXY_CLASSES:
        return object.__getattribute__(handle, "_handle")
    return handle


async def _within(overdue_at: Callable[[], float], awaitable: Awaitable[T]) -> tuple[bool, T | None]:
    """(False, the answer), or (True, None) once ``overdue_at()`` has passed (checked when it
    comes, and put off while it moves: the call is then cancelled); the storage's own errors,
    TimeoutError included, propagate."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(None) as scope:
            timers: list[asyncio.TimerHandle] = []

            def check() -> None:
                due = overdue_at()
                if loop.time() >= due:
                    scope.reschedule(loop.time())  # expires now, through asyncio's own timeout
                else:
                    timers.append(loop.call_at(due, check))

            timers.append(loop.call_at(overdue_at(), check))
            try:
                return False, await awaitable
            finally:
                timers[-1].cancel()
    except TimeoutError:
        if not scope.expired():
            raise
        return True, None


class _Deferred:
    """A call of a coroutine function, made when it is first awaited."""

    __slots__ = ("_args", "_function", "_kwargs")

    def __init__(self, function: Callable[..., Awaitable[Any]], args: Any, kwargs: Any) -> None:
        self._function, self._args, self._kwargs = function, args, kwargs

    def __await__(self) -> Any:
        return self._function(*self._args, **self._kwargs).__await__()


def _discard(awaitable: Awaitable[Any]) -> None:
    """Close a coroutine that will never be awaited, so Python does not warn about it."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()


class _BoundedMethod:
    """A storage method whose awaitable answers are awaited within the watch's bound; a handle
    it returns (``new_handle()``, ``with_integrity_key()``) is bound too."""

    __slots__ = ("__wrapped__", "_name", "_owner", "_watch")

    def __init__(self, method: Callable[..., Any], name: str, owner: type, watch: OperationWatch) -> None:
        self.__wrapped__ = method  # inspect.signature() reads the storage's own signature
        self._name = name
        self._owner = owner
        self._watch = watch

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if inspect.iscoroutinefunction(self.__wrapped__):
            # Called inside the bounded coroutine, so that one cancelled before it starts (the
            # concurrency clauses cancel calls at every point) leaves no coroutine never awaited.
            return self._watch.run(self._name, _Deferred(self.__wrapped__, args, kwargs))
        result = self.__wrapped__(*args, **kwargs)
        if inspect.isawaitable(result):
            return self._watch.run(self._name, result)
        if isinstance(result, self._owner):
            return self._watch.bound(result)
        return result

    def __repr__(self) -> str:
        return f"<bounded {self.__wrapped__!r}>"


class _Plain:
    """A storage handle seen through an :class:`OperationWatch`. ``isinstance`` sees the storage's
    class; attributes read and set are the storage's."""

    __slots__ = ("_handle", "_watch")

    def __init__(self, handle: Any, watch: OperationWatch) -> None:
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_watch", watch)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance(handle, StorageClass) holds
        return type(object.__getattribute__(self, "_handle"))

    def __getattr__(self, name: str) -> Any:
        handle = object.__getattribute__(self, "_handle")
        value = getattr(handle, name)
        if callable(value) and not isinstance(value, type):
            return _BoundedMethod(value, name, type(handle), object.__getattribute__(self, "_watch"))
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_handle"), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(object.__getattribute__(self, "_handle"), name)

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_handle"))


class _WithContext(_Plain):
    """A bound handle whose storage is an async context manager: ``async with`` works on it too."""

    __slots__ = ()

    async def __aenter__(self) -> Any:
        handle = object.__getattribute__(self, "_handle")
        watch: OperationWatch = object.__getattribute__(self, "_watch")
        entered = await watch.run("__aenter__", handle.__aenter__())
        return self if entered is handle else entered

    async def __aexit__(self, *exc_info: object) -> Any:
        handle = object.__getattribute__(self, "_handle")
        watch: OperationWatch = object.__getattribute__(self, "_watch")
        return await watch.run("__aexit__", handle.__aexit__(*exc_info))


_PROXY_CLASSES = (_Plain, _WithContext)


__all__ = ["OPERATION_TIMEOUT", "OperationWatch", "StorageStuck", "unbound"]
