"""A private event loop on a daemon thread, for runner adapters whose runner calls them synchronously.

CrewAI's ``FlowPersistence`` and Burr's ``BaseStateSaver``/``BaseStateLoader`` are synchronous, and
the runner calls them from wherever it happens to be: a plain thread, a worker thread of
``asyncio.to_thread``, or a coroutine running on the runner's own event loop. A storage here is
async and its connections belong to the loop that opened them. :class:`LoopThread` owns one loop on
one thread of its own: every storage call of the adapter runs there, so

* a call from a thread with a running loop never re-enters that loop (no deadlock, no "event loop is
  already running"), and never touches the caller's loop at all;
* the storage's connections stay on one loop for their whole life, whichever threads call;
* the calling thread waits for the answer, as the runner's synchronous API demands (what its own
  SQLite persister does with a blocking sqlite3 call).

The thread is a daemon, so an adapter never closed cannot keep the interpreter alive; ``close()``
runs a last coroutine (the storage's ``aclose``), then stops the loop and joins the thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .errors import StorageClosedError

T = TypeVar("T")


class LoopThread:
    """One event loop running on one daemon thread; :meth:`run` hands it a coroutine and waits."""

    def __init__(self, *, name: str) -> None:
        self._name = name
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._lock = threading.Lock()
        self._closed = False
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The private loop (for building what must belong to it)."""
        return self._loop

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call()`` on the private loop and return its result (or raise its exception).

        Called from the private loop's own thread (a storage callback calling back into the
        adapter), it raises instead of waiting for itself forever.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                f"{self._name}: a synchronous call from its own loop's thread would wait forever"
            )
        if self._closed:
            raise StorageClosedError(self._name, "run")

        async def invoke() -> T:
            return await call()

        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result()

    def close(self, last: Callable[[], Awaitable[object]] | None = None) -> None:
        """Run ``last()`` (closing what lives on the loop), then stop the loop and join the thread.

        Idempotent; ``last`` runs only on the first call."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if last is not None and self._thread is not threading.current_thread():

                async def finish() -> None:
                    await last()

                asyncio.run_coroutine_threadsafe(finish(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not threading.current_thread():
                self._thread.join()


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
