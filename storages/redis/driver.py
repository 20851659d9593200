"""redis-py clients: built from a URL (plain or cluster, with retries and a pool that waits for a
free connection instead of failing), checked when given, and closed when their handle was
abandoned. The rest of the backend talks to the client; only this module builds one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Mapping
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

if sys.version_info >= (3, 11):
    pass
else:  # redis-py depends on async-timeout below 3.11
    pass  # type: ignore[import-not-found,unused-ignore]


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


def close_abandoned(client: Any) -> None:
    """Close a client of ours that nobody will ``aclose()``: its storage was collected, or it
    was left on an event loop that ended. Awaiting is not possible (the loop may be closed, or
    about to be), so its sockets are closed without waiting, and a cluster client is marked
    closed, so that neither reports itself "unclosed" from a running loop when collected."""
    with contextlib.suppress(Exception):  # best effort: nobody is left to tell
        if isinstance(client, RedisCluster):
            nodes = [*client.get_nodes(), *client.nodes_manager.startup_nodes.values()]
            connections = [connection for node in nodes for connection in node._connections]
            # What aclose() sets first: _initialize (redis-py < 8.2), and no default node (8.2
            # tells a closed client by it, and warns "Unclosed RedisCluster client" otherwise).
            client._initialize = True
            client.nodes_manager.default_node = None  # type: ignore[assignment,unused-ignore]
        else:
            pool = client.connection_pool
            connections = [*pool._available_connections, *pool._in_use_connections]
        for connection in connections:
            try:
                connection._close()  # type: ignore[no-untyped-call]
            except RuntimeError:
                # Its loop is closed: forget the streams; collecting the transport closes the socket.
                connection._reader = connection._writer = None


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
            except asyncio.TimeoutError:
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


__all__ = ["WaitingConnectionPool", "check_client", "client_from_url", "close_abandoned"]
