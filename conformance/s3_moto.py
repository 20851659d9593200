"""S3 on moto for the kit's default run and for the tests, and faults injected through botocore.

* :func:`start_in_process` runs moto inside this process (``mock_aws``); :func:`start_server`
  runs moto's ``ThreadedMotoServer`` on a free loopback port, so requests go over real HTTP.
* :class:`S3FaultInjector` answers requests with 500/503, conditional writes with 409/412, or
  stops an operation right after its n-th successful write (PutObject or DeleteObjects), using
  botocore event hooks on a client.
* :class:`RequestCounter` counts the HTTP requests a client sends, by operation.

moto checks a conditional write's precondition and then stores the object in two steps that
another thread can interleave, where S3 decides atomically; and its listings walk a copy of the
bucket's key names and look each one up again, so a key deleted in between raises KeyError inside
moto (an InternalError over HTTP) where S3 just lists. :func:`make_moto_s3_atomic` answers one S3
request at a time, which is what real S3 guarantees and what the storage relies on.

moto also answers a LIST with a prefix by reading every object of the bucket, three Python calls
each, where S3 seeks to the prefix: a save's one-item LIST of its workflow's head cost more the
more the bucket held, and the kit's 2,400-checkpoint clause spent most of its time there.
:func:`make_moto_s3_lists_by_prefix` hands moto's listing only the objects under the prefix.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

from .faults import Fault, FaultInjector, SimulatedCrash

FAKE_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
DEFAULT_REGION = "us-east-1"

_bucket_lock = threading.RLock()


def make_moto_s3_atomic() -> None:
    """Serialise every S3 request moto answers, in this process and in a server it runs
    (idempotent): a PutObject's precondition check and write become one step, as on S3, and no
    listing walks the key map while another request changes it.

    Both entry points are wrapped (``bucket_response``, ``key_response``), not single handlers: a
    lock on PutObject, DeleteObject and the listings alone still let a DeleteObjects (a POST on the
    bucket) delete keys under a listing's walk, which raised ``KeyError: '<prefix>/r/<id>'`` in
    ``fencing.one_winner_per_head``, whose losing writers delete the records they claimed."""
    from moto.s3.responses import S3Response

    for name in ("bucket_response", "key_response"):
        original = getattr(S3Response, name)
        if not getattr(original, "_checkpoint_atomic", False):
            setattr(S3Response, name, _serialised(original))


def _serialised(handler: Callable[..., Any]) -> Callable[..., Any]:
    def serialised(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _bucket_lock:
            return handler(self, *args, **kwargs)

    serialised._checkpoint_atomic = True  # type: ignore[attr-defined]
    return serialised


def make_moto_s3_lists_by_prefix() -> None:
    """Make moto's LIST with a prefix read only the objects under it (idempotent): the answer is
    moto's own, computed over those objects instead of the whole bucket
    (tests/test_s3.py holds the two answers equal)."""
    from moto.s3.models import S3Backend

    original = S3Backend.list_objects
    if not getattr(original, "_checkpoint_by_prefix", False):
        S3Backend.list_objects = _listing_by_prefix(original)  # type: ignore[method-assign]


class _UnderPrefix:
    """A bucket as moto's listing reads it, holding only the objects whose keys start with a prefix."""

    def __init__(self, bucket: Any, prefix: str) -> None:
        self._bucket = bucket
        objects = bucket.keys
        # dict.keys walks the names in C; moto's own items() looks every object up in Python.
        self.keys = {name: objects[name] for name in dict.keys(objects) if name.startswith(prefix)}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bucket, name)


def _listing_by_prefix(original: Callable[..., Any]) -> Callable[..., Any]:
    def list_objects(self: Any, bucket: Any, prefix: str | None, *args: Any, **kwargs: Any) -> Any:
        from moto.s3.models import FakeTableStorageBucket

        if prefix and not isinstance(bucket, FakeTableStorageBucket):
            bucket = _UnderPrefix(bucket, prefix)
        return original(self, bucket, prefix, *args, **kwargs)

    list_objects._checkpoint_by_prefix = True  # type: ignore[attr-defined]
    list_objects.__wrapped__ = original  # type: ignore[attr-defined]
    return list_objects


def make_client(endpoint_url: str | None = None, *, max_pool_connections: int = 64) -> Any:
    """A boto3 S3 client with fake credentials (moto accepts any) and standard retries, three
    attempts per request (fewer than the storage's own default, so exhausting it is quick)."""
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(region_name=DEFAULT_REGION, **FAKE_CREDENTIALS)
    config = Config(
        max_pool_connections=max_pool_connections, retries={"mode": "standard", "max_attempts": 3}
    )
    return session.client("s3", endpoint_url=endpoint_url, config=config)


def start_in_process(bucket: str) -> tuple[Any, Callable[[], None]]:
    """Start moto in this process with ``bucket`` created; returns a client made inside the mock
    (clients made outside it would reach real AWS) and the function that stops the mock."""
    from moto import mock_aws

    make_moto_s3_atomic()
    make_moto_s3_lists_by_prefix()
    mock = mock_aws()
    mock.start()
    try:
        client = make_client()
        client.create_bucket(Bucket=bucket)
    except BaseException:
        mock.stop()
        raise
    return client, mock.stop


def start_server() -> tuple[str, Callable[[], None]]:
    """Start moto's threaded HTTP server on a free loopback port; returns its endpoint URL and
    the function that stops it."""
    from moto.server import ThreadedMotoServer

    make_moto_s3_atomic()
    make_moto_s3_lists_by_prefix()
    # werkzeug logs every request at INFO; thousands of lines per kit run hide real output.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}", server.stop


class _Raw:
    """The ``raw`` of a fabricated botocore response."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def _error_response(request: Any, status: int, code: str) -> Any:
    from botocore.awsrequest import AWSResponse

    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>injected by the conformance kit</Message></Error>"
    ).encode()
    headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
    return AWSResponse(request.url, status, headers, _Raw(body))


def _is_conditional_write(request: Any) -> bool:
    headers = {str(name).lower() for name in request.headers}
    return request.method == "PUT" and bool(headers & {"if-none-match", "if-match"})


class S3FaultInjector(FaultInjector):
    """Faults for S3 clients it is attached to (every handle of a target shares one client)."""

    faults = frozenset({Fault.TRANSIENT_ERRORS, Fault.CONDITIONAL_CONFLICTS, Fault.CRASH_BETWEEN_WRITES})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._transient = 0
        self._conflicts = 0
        self._crash_after = 0
        self.injected: collections.Counter[str] = collections.Counter()
        """How many of each fault were injected (status code or "crash")."""

    def attach(self, client: Any) -> None:
        # First: moto's in-process mock answers in a before-send hook of its own.
        client.meta.events.register_first("before-send.s3", self._before_send)
        # Every request that changes the store is a crash point: the PutObjects of a save, and the
        # DeleteObjects of a delete or prune (whose order keys go before their records).
        client.meta.events.register("after-call.s3.PutObject", self._after_write)
        client.meta.events.register("after-call.s3.DeleteObjects", self._after_write)

    def _before_send(self, request: Any, **_: Any) -> Any:
        response = self._injected(request)
        if response is not None:
            # botocore calls every before-send hook and uses the first response; moto's in-process
            # hook would still execute the request (store the object), so point it nowhere.
            request.url = "http://fault-injected.invalid/"
        return response

    def _injected(self, request: Any) -> Any:
        with self._lock:
            if self._transient > 0:
                self._transient -= 1
                status = 503 if self._transient % 2 else 500
                self.injected[str(status)] += 1
                return _error_response(request, status, "SlowDown" if status == 503 else "InternalError")
            if self._conflicts > 0 and _is_conditional_write(request):
                self._conflicts -= 1
                status = 409 if self._conflicts % 2 else 412
                self.injected[str(status)] += 1
                code = "ConditionalRequestConflict" if status == 409 else "PreconditionFailed"
                return _error_response(request, status, code)
        return None

    def _after_write(self, http_response: Any, **_: Any) -> None:
        with self._lock:
            if not self._crash_after or http_response.status_code >= 300:
                return
            self._crash_after -= 1
            if self._crash_after:
                return
            self.injected["crash"] += 1
        raise SimulatedCrash("the process died right after a write (injected)")

    @asynccontextmanager
    async def transient_errors(self, count: int) -> AsyncIterator[None]:
        with self._lock:
            self._transient = count
        try:
            yield
        finally:
            with self._lock:
                self._transient = 0

    @asynccontextmanager
    async def conditional_conflicts(self, count: int) -> AsyncIterator[None]:
        with self._lock:
            self._conflicts = count
        try:
            yield
        finally:
            with self._lock:
                self._conflicts = 0

    @asynccontextmanager
    async def crash_between_writes(self) -> AsyncIterator[None]:
        async with self.crash_after_writes(1):
            yield

    @asynccontextmanager
    async def crash_after_writes(self, count: int) -> AsyncIterator[None]:
        """Inside the block, the ``count``-th successful write (PutObject or DeleteObjects) raises
        SimulatedCrash once it has landed (for tests of every crash point of one operation)."""
        with self._lock:
            self._crash_after = count
        try:
            yield
        finally:
            with self._lock:
                self._crash_after = 0


class RequestCounter:
    """Counts HTTP requests (retries included) a client sends, by operation name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()

    def attach(self, client: Any) -> None:
        client.meta.events.register_first("before-send.s3", self._count)

    def _count(self, event_name: str, **_: Any) -> None:
        with self._lock:
            self.counts[event_name.rpartition(".")[2]] += 1

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


def serve(argv: list[str] | None = None) -> int:
    """``python -m conformance.s3_moto [BUCKET ...]``: run a moto server (with atomic conditional
    writes) on a free loopback port, create the buckets, print the endpoint, serve until killed."""
    import sys
    import time

    buckets = (sys.argv[1:] if argv is None else argv) or ["ckpt-conformance"]
    endpoint, stop = start_server()
    client = make_client(endpoint)
    for bucket in buckets:
        client.create_bucket(Bucket=bucket)
    print(endpoint, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        stop()


__all__ = [
    "RequestCounter",
    "S3FaultInjector",
    "make_client",
    "make_moto_s3_atomic",
    "make_moto_s3_lists_by_prefix",
    "serve",
    "start_in_process",
    "start_server",
]


if __name__ == "__main__":
    raise SystemExit(serve())
