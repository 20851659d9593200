"""A TCP proxy that loses one answer: the request reaches the server and is applied, and the
connection is cut before the server's answer reaches the client.

:class:`FaultProxy` listens on 127.0.0.1 (an ephemeral port) in front of one real server and
relays bytes both ways, on an asyncio loop of its own thread, so any client can use it: a test's
own event loop, a synchronous client, or a handle on another thread. Armed
(:meth:`FaultProxy.arm`, or the :meth:`FaultProxy.losing_answers` block), the next client
request that carries one of the markers (any request, when none is given) is passed on; once
the server starts to answer it, the proxy swallows the answer, lets whatever the client had
already sent behind that request reach the server too (the tail of a large body, the ``EXEC``
of a transaction), then cuts the client's connection and closes the server's side cleanly, so
the server finishes what it was sent. The client sees a dropped connection after a request that
was applied: the most ambiguous failure there is.

Markers are bytes of the request the test means to hit: a Redis script's SHA1 (sent with every
``EVALSHA``) along with a key it names; a PostgreSQL statement's text (sent until psycopg
prepares the statement, after five runs on one connection) or a parameter of its Bind message.
An arming loses one answer, or several in a row (the resends of one request too).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

MARKER_MAX = 256
"""The longest marker: a request is matched over its bytes and the previous MARKER_MAX - 1, so
a marker split between two reads is still found."""
SETTLE_SECONDS = 0.05
"""How long a losing connection keeps relaying the client's requests after the server started
answering, before it is cut: the client wrote its whole request before reading, so its tail is
already on its way and needs only the proxy's loop to pass it on."""
DRAIN_SECONDS = 10.0
"""How long the server's side of a cut connection may take to finish and close after the
proxy's end-of-file, before the proxy closes it anyway."""
_CHUNK = 65536


@dataclass
class _Arming:
    markers: tuple[bytes, ...]
    along_with: bytes | None
    times: int
    """Requests still to lose the answer of."""


@dataclass(eq=False)
class _Link:
    """One client connection and the proxy's connection to the server for it."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    losing: bool = False
    """A request of this connection was matched: the server's answers are swallowed."""
    cutting: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)


class FaultProxy:
    """A proxy on 127.0.0.1:``port`` in front of ``upstream_host``:``upstream_port``; see the
    module docstring. Use it as a context manager, or call :meth:`close`."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._lock = threading.Lock()
        self._armed: _Arming | None = None
        self._answers_lost = 0
        self.matched: list[bytes] = []
        """The bytes each arming matched (the request and up to MARKER_MAX - 1 bytes before it),
        for a test to tell which request it hit."""
        self._links: set[_Link] = set()
        self._cuts: set[asyncio.Task[None]] = set()
        """Cuts under way (the loop keeps only weak references to its tasks)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=30)
        self.port: int = int(self._server.sockets[0].getsockname()[1])

    # ------------------------------------------------------------------ the switch

    def arm(self, *markers: bytes, along_with: bytes | None = None, times: int = 1) -> None:
        """Lose the answers to the next ``times`` requests carrying one of ``markers`` (any
        request if none) and, if given, ``along_with`` too. Each read from a client is matched
        with the MARKER_MAX - 1 bytes its connection sent before it (the tail of a previous
        request, possibly): markers should be what only the request meant carries."""
        for marker in (*markers, *([] if along_with is None else [along_with])):
            if not marker or len(marker) > MARKER_MAX:
                raise ValueError(f"a marker is 1 to {MARKER_MAX} bytes, not {len(marker)}: {marker!r}")
        if times < 1:
            raise ValueError(f"times is at least 1, not {times}")
        with self._lock:
            self._armed = _Arming(markers, along_with, times)

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    @property
    def answers_lost(self) -> int:
        """Answers the server sent that the proxy swallowed, cutting their connection."""
        with self._lock:
            return self._answers_lost

    @contextmanager
    def losing_answers(
        self, *markers: bytes, along_with: bytes | None = None, times: int = 1
    ) -> Iterator[None]:
        """Armed for the block (see :meth:`arm`), which must lose 1 to ``times`` answers (else the
        fault was not injected as meant, and AssertionError says so)."""
        before = self.answers_lost
        self.arm(*markers, along_with=along_with, times=times)
        try:
            yield
        finally:
            self.disarm()
        lost = self.answers_lost - before
        if not 1 <= lost <= times:
            raise AssertionError(
                f"the proxy lost {lost} answers to requests carrying {markers!r} "
                f"(along with {along_with!r}), not 1 to {times}: the fault was not injected as meant"
            )

    def _matches(self, window: bytes) -> bool:
        with self._lock:
            armed = self._armed
            if armed is None:
                return False
            if armed.markers and not any(marker in window for marker in armed.markers):
                return False
            if armed.along_with is not None and armed.along_with not in window:
                return False
            armed.times -= 1
            if armed.times == 0:
                self._armed = None
            self.matched.append(window)
            return True

    # ------------------------------------------------------------------ relaying

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_writer.transport.abort()
            return
        link = _Link(client_writer, server_writer)
        self._links.add(link)
        try:
            await asyncio.gather(
                self._requests(link, client_reader),
                self._answers(link, server_reader),
                return_exceptions=True,
            )
        finally:
            self._links.discard(link)
            client_writer.transport.abort()
            server_writer.transport.abort()
            link.done.set()

    async def _requests(self, link: _Link, reader: asyncio.StreamReader) -> None:
        """Client to server, matching each read (with the bytes before it) against the markers;
        the client's end of file is passed on, so the server finishes what it was sent."""
        tail = b""
        try:
            while data := await reader.read(_CHUNK):
                window = tail + data
                if not link.losing and self._matches(window):
                    link.losing = True
                tail = window[-(MARKER_MAX - 1) :]
                link.server.write(data)
                await link.server.drain()
        except OSError:
            pass
        with suppress(OSError, RuntimeError):
            if link.server.can_write_eof():
                link.server.write_eof()

    async def _answers(self, link: _Link, reader: asyncio.StreamReader) -> None:
        """Server to client; on a losing connection the answers are swallowed, and the first one
        starts the cut."""
        try:
            while data := await reader.read(_CHUNK):
                if link.losing:
                    if not link.cutting:
                        link.cutting = True
                        with self._lock:
                            self._answers_lost += 1
                        cut = asyncio.get_running_loop().create_task(self._cut(link))
                        self._cuts.add(cut)
                        cut.add_done_callback(self._cuts.discard)
                    continue
                link.client.write(data)
                await link.client.drain()
        except OSError:
            pass
        link.client.transport.abort()

    async def _cut(self, link: _Link) -> None:
        await asyncio.sleep(SETTLE_SECONDS)  # the rest of what the client sent reaches the server
        link.client.transport.abort()  # _requests sees end of file and closes the server's side cleanly
        with suppress(asyncio.TimeoutError):
            await asyncio.wait_for(link.done.wait(), DRAIN_SECONDS)
        link.server.transport.abort()

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def stop() -> None:
            self._server.close()
            for link in list(self._links):
                link.client.transport.abort()
                link.server.transport.abort()
            await self._server.wait_closed()

        with suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
