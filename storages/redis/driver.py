"""redis-py clients: built from a URL (plain or cluster, with retries and a pool that waits for a
free connection instead of failing), checked when given, and closed on their own event loop
when their handle was abandoned. The rest of the backend talks to the client; only this module
builds one.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from ..errors import (
    StorageConfigurationError,
)
from ..redaction import chainable
from .config import (
    CONNECTION_WAIT_SECONDS,
    MAX_CONNECTIONS,
    RETRIES,
    driver_url,
    url_is_cluster,
)


def check_client(client: object) -> None:
    if not isinstance(client, (Redis, RedisCluster)):
        raise StorageConfigurationError(
            f"client must be a redis.asyncio.Redis or RedisCluster, not {type(client).__name__}"
        )
    kwargs = client.get_connection_kwargs()
    if kwargs.get("decode_responses"):
        raise StorageConfigurationError(
            "the Redis client decodes responses to str; checkpoint bodies are bytes: "
            "build it with decode_responses=False"
        )
    encoding = str(kwargs.get("encoding", "utf-8"))
    if _codec_name(encoding) != "utf-8":
        # Script arguments go out as UTF-8 bytes and replies are read as UTF-8: a client that
        # encodes its own commands otherwise would name other keys for the same workflow.
        raise StorageConfigurationError(
            f"the Redis client encodes text as {encoding!r}; the storage reads and writes UTF-8: "
            "build it with encoding='utf-8' (the default)"
        )


def _codec_name(encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        return encoding


def client_from_url(url: str, options: Mapping[str, Any]) -> Any:
    """A client for ``url`` without our own query options, retrying connection errors and
    timeouts with exponential backoff."""
    redis_url = driver_url(url)
    settings: dict[str, Any] = {
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.02), RETRIES),
        "retry_on_error": [redis_errors.ConnectionError, redis_errors.TimeoutError],
        **options,
        "decode_responses": False,
    }
    try:
        if url_is_cluster(url):
            return RedisCluster.from_url(redis_url, **settings)
        settings.setdefault("max_connections", MAX_CONNECTIONS)
        settings.setdefault("wait_seconds", CONNECTION_WAIT_SECONDS)
        return Redis.from_pool(WaitingConnectionPool.from_url(redis_url, **settings))
    except (ValueError, redis_errors.RedisError) as exc:
        raise StorageConfigurationError(f"invalid Redis URL {url!r}: {exc}") from chainable(exc)


class OwnClient:
    """A client the storage made, closed on its own event loop even if the storage never is.

    redis-py closes connections only by awaiting, on the loop they belong to, and its objects
    report themselves unclosed when collected open. So the client is closed where it can be:
    when its loop ends (``asyncio.run`` and ``asyncio.Runner`` close a loop's open async
    generators before closing the loop: :meth:`bind` leaves one waiting there), soon after its
    storage is collected or follows a new loop while its loop still runs (a task on that loop),
    and, on a loop that was closed without closing its async generators, on a private loop:
    redis-py then forgets the streams, and asyncio closes each socket when it collects its
    transport (a transport cannot be closed once its loop is)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._until_loop_ends: AsyncGenerator[None, None] | None = None

    async def bind(self) -> None:
        """Tie the client to the running loop: the loop's end closes it."""
        self._loop = asyncio.get_running_loop()
        self._until_loop_ends = self._closed_when_the_loop_ends()
        await self._until_loop_ends.asend(None)  # started: the loop now holds it, weakly
        _OPEN.add(self)  # and this holds it until the client is closed

    async def _closed_when_the_loop_ends(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if self in _OPEN:
                await disconnect(self.client)
                _OPEN.discard(self)

    async def close(self) -> None:
        """The storage's aclose(): the client, then what waited for the loop's end."""
        try:
            await self.client.aclose()
        finally:
            await self._release()

    async def _release(self) -> None:
        _OPEN.discard(self)
        if self._until_loop_ends is not None:
            await self._until_loop_ends.aclose()  # it finds the client closed: nothing to do

    async def _close(self) -> None:
        """Close every connection; left where it is if interrupted, so that what waits for the
        loop's end closes what this did not."""
        await disconnect(self.client)
        await self._release()

    def abandon(self) -> None:
        """Close the client without awaiting: its storage was collected, or follows a new loop."""
        if self not in _OPEN or self._loop is None:
            return  # closed already
        with contextlib.suppress(RuntimeError):  # its loop is closed
            self._loop.call_soon_threadsafe(self._close_soon)
            return
        with contextlib.suppress(Exception):  # best effort: nobody is left to tell
            _run_on_a_private_loop(self._close)

    def _close_soon(self) -> None:
        assert self._loop is not None
        closing = self._loop.create_task(self._close())
        _CLOSING.add(closing)
        closing.add_done_callback(_CLOSING.discard)


_OPEN: set[OwnClient] = set()
"""Clients of ours not closed yet (one whose storage was collected among them)."""
_CLOSING: set[asyncio.Future[None]] = set()
"""Closes under way (a loop holds its tasks weakly)."""


async def disconnect(client: Any) -> None:
    """Close every connection of ``client`` and mark it closed (``aclose()``), then each node's
    or the pool's connections again: closing a connection twice is harmless, and the second
    pass closes what an interrupted or failed first one left."""
    with contextlib.suppress(Exception):
        await client.aclose()
    if isinstance(client, RedisCluster):
        # A list: a startup node and the node of the slot map for one address are two objects,
        # equal by name, each with connections of its own.
        nodes = [*client.get_nodes(), *client.nodes_manager.startup_nodes.values()]
        await asyncio.gather(*(node.disconnect() for node in nodes), return_exceptions=True)
    else:
        with contextlib.suppress(Exception):
            await client.connection_pool.disconnect()


def _run_on_a_private_loop(work: Callable[[], Awaitable[None]]) -> None:
    """Run ``work`` to its end on a loop of its own, in this thread if no loop runs here, else
    in a short-lived thread; the thread's current loop (``set_event_loop``) is left alone."""

    def run() -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(work())
        finally:
            loop.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        run()
        return
    thread = threading.Thread(target=run, name="redis-close", daemon=True)
    thread.start()
    thread.join()


class WaitingConnectionPool(ConnectionPool):
    """A bounded pool where a burst of concurrent operations waits for a free connection (up to
    ``wait_seconds``) instead of failing, as redis-py's ``BlockingConnectionPool`` does, but
    takes a free connection without its condition variable and timer: a save's one round trip
    should not pay for a wait that did not happen."""

    def __init__(self, *, wait_seconds: float | str | None = CONNECTION_WAIT_SECONDS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # From a URL's query (``?wait_seconds=5``) the value arrives as text.
        self.wait_seconds = None if wait_seconds is None else float(wait_seconds)
        if self.wait_seconds is not None and not self.wait_seconds >= 0:
            raise ValueError(f"wait_seconds must be a number of seconds >= 0, got {wait_seconds!r}")
        self._free = asyncio.Semaphore(self.max_connections)
        self._handed_out: set[Any] = set()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self._free.locked():
            try:
                await asyncio.wait_for(self._free.acquire(), self.wait_seconds)
            except TimeoutError:
                raise redis_errors.ConnectionError(
                    f"no free connection after {self.wait_seconds} s ({self.max_connections} in use)"
                ) from None
        else:
            await self._free.acquire()
        try:
            connection = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except BaseException:
            # A connection the base class could not prepare went back through release(), which
            # frees a slot only for connections handed out; this one was not.
            self._free.release()
            raise
        self._handed_out.add(connection)
        return connection

    async def release(self, connection: Any) -> None:
        try:
            await super().release(connection)
        finally:
            if connection in self._handed_out:
                self._handed_out.discard(connection)
                self._free.release()


__all__ = ["OwnClient", "WaitingConnectionPool", "check_client", "client_from_url", "disconnect"]
