"""The watchdog: where a target's clauses run, so that a blocked event loop fails a clause.

A clause's own timeout is ``asyncio.wait_for``, which only fires when the event loop gets control
back: a storage that blocks the loop (``time.sleep`` in an async method, a spin) would hang the
whole run. So :func:`conformance.runner.avalidate_target` runs a target's clauses on an event loop
of their own, on a daemon thread (:class:`ClauseLoop`), and waits for each from the caller's loop
with a deadline a little past the clause's timeout. When the deadline passes, the clause fails,
the blocked thread is abandoned (a daemon, so it cannot keep the process alive at exit) and the
next clauses run on a fresh loop with fresh handles from the target's factory; the handles of the
abandoned clause are never closed. Threads a storage starts on that loop (a driver's connection
thread) inherit its daemon flag; one started explicitly as a non-daemon would still hold up
interpreter exit, so ``checkpoint-conformance`` ends the process without waiting once the reports
are written (:func:`abandoned_loops`). The pytest plugin runs clauses in pytest's own loop, where
the storage fixture lives, so only the cooperative timeout applies there (use pytest-timeout
against a blocking storage).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

CLEANUP_TIMEOUT = 60.0
"""Seconds the target's cleanup may take at the end of its run."""


_ABANDONED: list[threading.Thread] = []


def abandoned_loops() -> list[threading.Thread]:
    """Threads of clause loops the watchdog gave up on that are still blocked."""
    return [thread for thread in _ABANDONED if thread.is_alive()]


class ClauseLoop:
    """An event loop on a daemon thread of its own, where one target's clauses run."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"conformance-clauses-{uuid.uuid4().hex[:6]}", daemon=True
        )
        self._thread.start()

    async def call(self, awaitable: Awaitable[T], deadline: float) -> T:
        """Await ``awaitable`` on this loop; raises asyncio.TimeoutError after ``deadline`` seconds."""
        future = asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), deadline)

    def responsive(self, within: float = 0.5) -> bool:
        """Whether the loop runs a callback within ``within`` seconds (False: it is blocked)."""
        answered = threading.Event()
        self._loop.call_soon_threadsafe(answered.set)
        return answered.wait(within)

    def abandon(self) -> None:
        """Give up on the loop: it stops if the blocking call ever returns; nobody waits for it."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        _ABANDONED.append(self._thread)

    async def close(self) -> None:
        """Cancel what is left on the loop, stop it and join its thread."""
        try:
            await self.call(_finish_loop(), CLEANUP_TIMEOUT)
        except TimeoutError:
            self.abandon()
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join)
        self._loop.close()


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _finish_loop() -> None:
    """What ``asyncio.run`` does before closing a loop: cancel tasks, end generators, executors."""
    current = asyncio.current_task()
    pending = [task for task in asyncio.all_tasks() if task is not current]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    loop = asyncio.get_running_loop()
    await loop.shutdown_asyncgens()
    await loop.shutdown_default_executor()


def watchdog_message(deadline: float, blocked: bool) -> str:
    if blocked:
        return (
            f"the event loop was blocked: the clause gave no sign of life for {deadline:g} s (a synchronous "
            "call such as time.sleep or a busy loop in an async method?); the kit abandoned that loop's "
            "thread and ran the next clauses on a fresh one"
        )
    return f"did not stop within {deadline:g} s, past its timeout (does it ignore cancellation?)"


__all__ = ["CLEANUP_TIMEOUT", "ClauseLoop", "abandoned_loops", "watchdog_message"]
