"""A private event loop for runner adapters whose runner calls them synchronously.

CrewAI's ``FlowPersistence`` and Burr's ``BaseStateSaver``/``BaseStateLoader`` are synchronous, and
the runner calls them from wherever it happens to be: a plain thread, a worker thread of
``asyncio.to_thread``, or a coroutine running on the runner's own event loop. A storage here is
async and its connections belong to the loop that opened them. :class:`LoopThread` owns one loop,
and every storage call of the adapter runs on it, one at a time:

* called from a thread with no running loop (a Burr application's ``run``, a script), the loop runs
  right there, on the caller's thread, for the length of the call: no thread hand-off;
* called from a thread whose own loop is running (a CrewAI flow's coroutine, a sync Burr
  application inside async code), the call is handed to the adapter's own thread, which runs the
  loop for it: the caller's loop is never re-entered (no "event loop is already running", no
  deadlock) and never touched;
* the storage's connections stay on the one loop for their whole life, whichever threads call;
* the calling thread waits for the answer, as the runner's synchronous API demands (what its own
  SQLite persister does with a blocking sqlite3 call).

The hand-off thread is a daemon and starts only when first needed, so an adapter never closed
cannot keep the interpreter alive; ``close()`` runs a last coroutine (the storage's ``aclose``) and
closes the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..errors import StorageClosedError

T = TypeVar("T")


class LoopThread:
    """One private event loop, run by the calling thread or, under a running loop, by a thread of
    its own; :meth:`run` runs a coroutine on it and waits."""

    def __init__(self, *, name: str) -> None:
        self._name = name
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        """One call at a time on the loop, whichever thread runs it."""
        self._handoff: ThreadPoolExecutor | None = None
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The private loop (for building what must belong to it)."""
        return self._loop

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call()`` on the private loop and return its result (or raise its exception)."""
        if self._loop.is_running() and self._loop_thread_is_current():
            raise RuntimeError(f"{self._name}: a synchronous call from its own loop would wait forever")

        async def invoke() -> T:
            return await call()

        with self._lock:
            if self._closed:
                raise StorageClosedError(self._name, "run")
            if _has_running_loop():
                return self._handed_off().submit(self._loop.run_until_complete, invoke()).result()
            return self._loop.run_until_complete(invoke())

    def close(self, last: Callable[[], Awaitable[object]] | None = None) -> None:
        """Run ``last()`` (closing what lives on the loop), then close the loop; idempotent, and
        ``last`` runs only on the first call."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if last is not None:

                    async def finish() -> None:
                        await last()

                    if _has_running_loop():
                        self._handed_off().submit(self._loop.run_until_complete, finish()).result()
                    else:
                        self._loop.run_until_complete(finish())
            finally:
                if self._handoff is not None:
                    self._handoff.shutdown(wait=True)
                self._loop.close()

    def _handed_off(self) -> ThreadPoolExecutor:
        if self._handoff is None:
            self._handoff = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
        return self._handoff

    def _loop_thread_is_current(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False


def _has_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class LoopPortal:
    """Runs calls on a loop someone else runs (the one a storage they hold belongs to), from other
    threads only: what an adapter over such a storage needs when its runner calls it from worker
    threads (``asyncio.to_thread(flow.kickoff)``). Same interface as :class:`LoopThread`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def run(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise asyncio.InvalidStateError(
                "a synchronous call on the loop its storage belongs to would wait forever: run the "
                "runner in another thread (await asyncio.to_thread(flow.kickoff, ...))"
            )
        if self._loop.is_closed():
            raise StorageClosedError("the storage's event loop", "run")

        async def invoke() -> T:
            return await call()

        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result()

    def close(self, last: Callable[[], Awaitable[object]] | None = None) -> None:
        """Nothing to stop: the loop and the storage are their owner's."""
        self.closed = True


__all__ = ["LoopPortal", "LoopThread"]
