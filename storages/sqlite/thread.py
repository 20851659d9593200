"""One sqlite3 connection and the one daemon thread that uses it: the loop hands it calls.

Why not aiosqlite: its public API runs one statement per hand-off, while a save here is one
function of several statements (storages/sqlite/commit.py) run as one hand-off, and a group
commit is a function that answers many callers itself. Reaching that through aiosqlite needed
seven of its private names (its queue, its worker, its stop sentinel) and a pin below its next
release. This class is that queue and worker, owned here: a ``queue.SimpleQueue`` of callables
and a thread that runs them in order. docs/sqlite.md ("The connection thread") has the figures.

The thread is a daemon, so a handle never closed cannot keep the interpreter alive, and it keeps
nothing of one call while it waits for the next (a freed result would otherwise be freed on the
thread at the start of the next call, holding the GIL while that call's caller waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_STOP = None
"""What ends the thread's loop, queued after everything handed to it before."""


class ConnectionClosed(ValueError):
    """A call reached the thread after its connection was closed."""


class ConnectionThread:
    """A sqlite3 connection opened, used and closed on one thread of its own.

    Calls run in the order they are handed over, so callers need no lock. :attr:`handoffs`
    counts them: a test hook and a bench figure (each hand-off is a queue put, a thread wake-up
    and, for :meth:`call`, a loop wake-up)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], *, name: str) -> None:
        self._connect = connect
        self._calls: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.connection: sqlite3.Connection | None = None
        """The sqlite3 connection, for functions running on the thread only."""
        self.handoffs = 0
        self.stopped = False
        self.abandoned = False
        """Released by :meth:`release_abandoned`: later calls are never answered."""

    def _serve(self) -> None:
        calls = self._calls
        while True:
            function = calls.get()
            if function is _STOP:
                return
            function()
            del function  # nothing of this call is held while the next is awaited

    async def open(self) -> None:
        """Start the thread and open the connection on it."""
        self.thread.start()

        def connect(_: object) -> None:
            self.connection = self._connect()

        try:
            await self.call(connect, _unopened=True)
        except BaseException:
            self.stop()
            raise

    def hand(self, function: Callable[[], object]) -> None:
        """Queue ``function()`` on the thread without waiting: it must report back itself."""
        if self.stopped:
            if self.abandoned:
                return  # never answered: see release_abandoned
            raise ConnectionClosed("the connection's thread has stopped")
        self.handoffs += 1
        self._calls.put(function)

    async def call(self, function: Callable[..., T], *args: Any, _unopened: bool = False) -> T:
        """``function(connection, *args)`` on the thread; its result or exception, on the loop."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()

        def run() -> None:
            connection = self.connection
            try:
                if connection is None and not _unopened:
                    if self.abandoned:
                        return  # never answered: see release_abandoned
                    raise ConnectionClosed("the SQLite connection was closed")
                outcome: tuple[bool, Any] = (True, function(connection, *args))
            except BaseException as exc:  # answered on the loop, never lost on the thread
                outcome = (False, exc)
            with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile
                loop.call_soon_threadsafe(_settle, answer, outcome)

        self.hand(run)
        result = await answer
        # The thread answered from inside run() and still needs the GIL for the few bytecodes
        # back to its queue. Had the loop gone straight on (decoding 1,000 listed bodies, say),
        # the thread would wait for the GIL until the loop next blocked, and the next hand-off
        # would find it not yet back: a save right after a list took 1.7 ms instead of 0.9 ms
        # (bench.tails_bench, "save after list_checkpoints"). One turn of the loop lets it back.
        await asyncio.sleep(0)
        return result

    async def execute_fetchall(self, sql: str, parameters: Any = ()) -> list[Any]:
        """One statement's rows (reads go through here, so a test may count statements)."""
        return await self.call(_fetchall, sql, parameters)

    async def set_trace_callback(self, trace: Callable[[str], object] | None) -> None:
        await self.call(_set_trace, trace)

    async def close(self) -> None:
        """Close the connection on the thread (after every call handed over before), then stop."""
        if self.stopped:
            return
        try:
            await self.call(_close_on_thread, self)
        finally:
            self.stop()

    def stop(self) -> None:
        """End the thread once what was handed over before has run."""
        if not self.stopped:
            self.stopped = True
            self._calls.put(_STOP)

    def release_abandoned(self) -> None:
        """Close a connection nobody closed (its handle was collected, or the interpreter exits),
        answering on no event loop: the loop that opened it is usually closed by then.

        Calls made after this are never answered. A handle with a call in flight cannot be
        collected (the caller holds it), so such a call only exists at interpreter exit, made
        from a daemon thread's loop (non-daemon threads were joined before): answering it
        StorageClosedError would only wake that thread to print a traceback as the process
        ends. What was handed over before still runs, and saves already queued still commit."""
        if self.stopped:
            return
        self.abandoned = True

        def close() -> None:
            with contextlib.suppress(sqlite3.Error):
                _close_on_thread(self.connection, self)

        self.hand(close)
        self.stop()
        if threading.current_thread() is threading.main_thread() and not _loop_running():
            # At exit (or collected outside any loop): let the close finish, checkpointing the
            # WAL, rather than end the process under it; milliseconds unless the disk is stuck.
            self.thread.join(timeout=2.0)


def _settle(answer: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if answer.done():  # its caller was cancelled
        return
    succeeded, value = outcome
    if succeeded:
        answer.set_result(value)
    else:
        answer.set_exception(value)


def _fetchall(connection: sqlite3.Connection, sql: str, parameters: Any) -> list[Any]:
    return connection.execute(sql, parameters).fetchall()


def _set_trace(connection: sqlite3.Connection, trace: Callable[[str], object] | None) -> None:
    connection.set_trace_callback(trace)


def _close_on_thread(connection: sqlite3.Connection | None, owner: ConnectionThread) -> None:
    owner.connection = None  # calls still queued now answer ConnectionClosed
    if connection is not None:
        connection.close()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


__all__ = ["ConnectionClosed", "ConnectionThread"]
