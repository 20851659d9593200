"""When a backend is opened, followed to a new event loop and closed: the one state machine every
storage shares. A storage holds one :class:`Lifecycle` per handle; every operation asks it first."""

from __future__ import annotations

import asyncio

from ..backend import Backend
from ..errors import StorageClosedError


class Lifecycle:
    """Opens the backend lazily (once, however many first operations start together), follows it
    to a new event loop, and refuses every operation after :meth:`close`."""

    __slots__ = ("_backend", "_closed", "_connected", "_lock", "_lock_loop", "_loop")

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._closed = False
        self._connected = False
        """The backend's open() returned (its connections exist)."""
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        """The event loop the backend's loop-bound resources belong to (None before opening)."""

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connected(self) -> bool:
        """True once the backend was opened (a handle's settings are fixed from then on)."""
        return self._connected

    async def ensure(self, operation: str) -> None:
        """Make the backend ready for ``operation`` (named in every error): open it, or follow it
        to the running loop; StorageClosedError after close."""
        if self._closed:
            raise StorageClosedError(self._backend.describe(), operation)
        loop = asyncio.get_running_loop()
        if self._connected and self._loop is loop:
            return
        if self._lock is None or self._lock_loop is not loop:
            # An asyncio lock belongs to the loop it first waited on; each loop gets its own. The
            # lock's loop is kept apart from _loop, which stays None until the first open ends, so
            # first operations started together share one lock and open once.
            self._lock = asyncio.Lock()
            self._lock_loop = loop
        async with self._lock:
            if self._closed:  # closed while this operation waited for another's open
                raise StorageClosedError(self._backend.describe(), operation)
            if not self._connected:
                await self._backend.open(operation)
                self._connected = True
            elif self._loop is not loop:
                # A second asyncio.run(), say: the loop of the first is gone, and so is whatever
                # the backend had bound to it.
                await self._backend.follow_loop()
            self._loop = loop

    async def close(self) -> None:
        """Close the backend once; later operations raise StorageClosedError."""
        if self._closed:
            return
        self._closed = True
        lock = self._lock
        if lock is not None and self._lock_loop is asyncio.get_running_loop():
            # An open under way (a first operation in flight) ends first: what it connects must
            # be closed here, not left running after the handle is closed.
            async with lock:
                await self._close_backend()
        else:
            await self._close_backend()

    async def _close_backend(self) -> None:
        if self._connected:
            if self._loop is not asyncio.get_running_loop():
                await self._backend.follow_loop()  # closing from a new loop closes what is bound to it
            await self._backend.close()
