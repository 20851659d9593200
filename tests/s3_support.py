"""S3 stores for the tests: moto in this process, and moto's HTTP server on a loopback port.

The server starts once per test process (on first use) and every store gets a prefix of its own,
so tests never see each other's objects and nothing needs resetting. Both kinds of store share
one client per store with a fault injector and a request counter attached.
"""

from __future__ import annotations

import atexit
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from moto.core.botocore_stubber import BotocoreStubber

from conformance.s3_moto import RequestCounter, S3FaultInjector, make_client, start_in_process, start_server
from storages.s3 import S3CheckpointStorage

BUCKET = "ckpt-tests"

_server_lock = threading.Lock()
_server_endpoint: str | None = None


def server_endpoint() -> str:
    """The endpoint of this process's moto server (started, with the test bucket, on first use)."""
    global _server_endpoint
    with _server_lock:
        if _server_endpoint is None:
            endpoint, stop = start_server()
            atexit.register(stop)
            _server_endpoint = endpoint
        return _server_endpoint


# moto's in-process backend is not thread-safe: a listing that runs while another thread deletes
# a key can fail with a KeyError from moto's own dict, which no S3 server returns. The storage
# sends requests from its worker threads, so in-process requests are answered one at a time.
_IN_PROCESS_LOCK = threading.RLock()
_answer = BotocoreStubber.__call__


def _answer_one_at_a_time(self: BotocoreStubber, *args: Any, **kwargs: Any) -> Any:
    with _IN_PROCESS_LOCK:
        return _answer(self, *args, **kwargs)


BotocoreStubber.__call__ = _answer_one_at_a_time  # type: ignore[method-assign]


@dataclass
class S3Store:
    """One fresh store: how to open handles on it, and the tools attached to its client."""

    client: Any
    prefix: str
    faults: S3FaultInjector
    requests: RequestCounter
    endpoint_url: str | None

    def storage(self, **options: Any) -> S3CheckpointStorage:
        return S3CheckpointStorage(BUCKET, self.prefix, client=self.client, **options)

    @property
    def url(self) -> str:
        """The store's URL (server stores only: in-process moto needs the injected client)."""
        assert self.endpoint_url is not None
        return f"s3://{BUCKET}/{self.prefix}?endpoint_url={self.endpoint_url}"


def _instrumented(client: Any, endpoint_url: str | None) -> S3Store:
    store = S3Store(client, f"t-{uuid.uuid4().hex[:12]}", S3FaultInjector(), RequestCounter(), endpoint_url)
    store.faults.attach(client)
    store.requests.attach(client)
    return store


@asynccontextmanager
async def s3_store(*, server: bool) -> AsyncIterator[S3Store]:
    """A fresh S3 store on in-process moto or on the moto server."""
    if server:
        endpoint = server_endpoint()
        client = make_client(endpoint)
        # moto keeps its state in module globals shared with the in-process mock, which wipes it
        # when it stops: make sure the bucket is there (creating an owned bucket again is a no-op).
        client.create_bucket(Bucket=BUCKET)
        try:
            yield _instrumented(client, endpoint)
        finally:
            client.close()
        return
    client, stop = start_in_process(BUCKET)
    try:
        yield _instrumented(client, None)
    finally:
        stop()


def store_maker(*, server: bool) -> Callable[[Any], Any]:
    """A ``Backend.fresh_store`` for tests/conftest.py."""

    @asynccontextmanager
    async def fresh_store(directory: Any) -> AsyncIterator[Callable[[], S3CheckpointStorage]]:
        async with s3_store(server=server) as store:
            root = store.storage()
            try:
                yield root.new_handle
            finally:
                await root.aclose()

    return fresh_store
