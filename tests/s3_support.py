"""S3 stores for the tests: moto in this process, and moto's HTTP server on a loopback port.

The server starts once per test process (on first use) and every store gets a prefix of its own,
so tests never see each other's objects and nothing needs resetting. Both kinds of store share
one client per store with a fault injector and a request counter attached.

:class:`HeaderDroppingProxy` puts a store that ignores conditional writes in front of that server.
"""

from __future__ import annotations

import atexit
import http.client
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

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


DROPPED_HEADERS = frozenset({"if-none-match", "if-match"})
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "expect", "host", "content-length"})


class HeaderDroppingProxy:
    """A threaded HTTP proxy on a free loopback port that forwards every request to ``upstream``
    without its ``If-None-Match`` and ``If-Match`` headers: together, what an S3-compatible store
    that ignores conditional writes looks like to a client (the older MinIO, gateways and proxies
    docs/s3.md names). botocore signs those headers, so a signature-checking store behind a real
    proxy would refuse the requests instead; moto does not check signatures, so the requests
    arrive as a store that ignores the conditions receives them."""

    def __init__(self, upstream: str) -> None:
        target = urlsplit(upstream)
        upstream_address = (str(target.hostname), int(target.port or 80))

        class Forwarder(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and answers botocore's Expect: 100-continue

            def forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {
                    name: value
                    for name, value in self.headers.items()
                    if name.lower() not in DROPPED_HEADERS | _HOP_BY_HOP
                }
                connection = http.client.HTTPConnection(*upstream_address, timeout=60)
                try:
                    connection.request(self.command, self.path, body=body, headers=headers)
                    response = connection.getresponse()
                    content = response.read()
                    self.send_response(response.status, response.reason)
                    for name, value in response.getheaders():
                        if name.lower() not in _HOP_BY_HOP:
                            self.send_header(name, value)
                    size = response.getheader("Content-Length") if self.command == "HEAD" else None
                    self.send_header("Content-Length", size or str(len(content)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(content)
                finally:
                    connection.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Forwarder)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="dropping-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class LostAnswers:
    """Loses the answer of one applied PutObject: the store has written the object, then botocore
    is told to send the request again (as after a 500 or a cut connection), and the resend gets
    what the store now says, usually 412. ``meanwhile`` runs between the two sends, as another
    writer acting in that window. Attached through botocore's public ``needs-retry`` event, so it
    works on in-process moto and over HTTP alike."""

    def __init__(self, client: Any) -> None:
        self._lock = threading.Lock()
        self._key: str | None = None
        self._meanwhile: Callable[[], None] | None = None
        self._prefix = False
        self.lost: list[str] = []
        """Keys whose answer was lost."""
        client.meta.events.register("needs-retry.s3.PutObject", self._needs_retry)

    def arm(self, key: str, meanwhile: Callable[[], None] | None = None, *, prefix: bool = False) -> None:
        """Lose the answer of the next successful PutObject of ``key`` (of a key starting with
        ``key`` if ``prefix``)."""
        with self._lock:
            self._key, self._meanwhile, self._prefix = key, meanwhile, prefix

    def _needs_retry(self, response: Any, request_dict: Any, **_: Any) -> int | None:
        if response is None:
            return None
        with self._lock:
            key = self._key
            if key is None or response[0].status_code >= 300:
                return None
            # Path-style (/bucket/key, the server) or virtual-hosted (/key, in-process moto).
            written = unquote(urlsplit(str(request_dict["url"])).path).removeprefix(f"/{BUCKET}")[1:]
            if not (written.startswith(key) if self._prefix else written == key):
                return None
            self._key, meanwhile = None, self._meanwhile
            self.lost.append(written)
        if meanwhile is not None:
            meanwhile()
        return 0  # resend now
