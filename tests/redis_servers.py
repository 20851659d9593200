"""Redis stores for the tests: the development server at ``REDIS_URL``, fakeredis, a private
``redis-server`` (AOF, ``appendfsync always``) that can be killed with SIGKILL and restarted, and
a 3-master Redis Cluster started from ``redis-server --cluster-enabled yes`` processes, and a
private server with ACL users (tenants restricted to their prefixes, a user without CONFIG/INFO).

Every store lives under a fresh key prefix and is cleaned by deleting that prefix's keys with SCAN;
nothing here ever runs FLUSHALL on a server it did not start. A server that cannot be reached or
started makes the test fail, never skip.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from conformance import StorageTarget
from conformance.faults import Fault, FaultInjector
from storages.redis import RedisCheckpointStorage, delete_prefix, script_sha

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_url() -> str:
    """The development/CI server (``REDIS_URL``, default 127.0.0.1:6379 db 0)."""
    return os.environ.get("REDIS_URL", DEFAULT_REDIS_URL)


def fresh_prefix(label: str = "test") -> str:
    return f"ckpt-{label}-{uuid.uuid4().hex[:12]}"


def with_query(url: str, **options: str) -> str:
    joiner = "&" if "?" in url else "?"
    return url + joiner + "&".join(f"{key}={value}" for key, value in options.items())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_ping(port: int, process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as connection:
                connection.sendall(b"PING\r\n")
                if connection.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"redis-server on port {port} did not answer PING within {timeout} s")


class RedisServerProcess:
    """One ``redis-server`` this test run owns: its own port and data directory."""

    def __init__(self, *extra: str, port: int | None = None, directory: Path | None = None) -> None:
        if shutil.which("redis-server") is None:
            raise RuntimeError(
                "redis-server is not installed; the Redis tests need it (apt install redis-server)"
            )
        self.port = port or free_port()
        self.directory = directory or Path(tempfile.mkdtemp(prefix="ckpt-redis-"))
        self._extra = extra
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self._process = subprocess.Popen(
            [
                "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.directory),
                "--save", "",
                "--protected-mode", "no",
                *self._extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_for_ping(self.port, self._process)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final fsync."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self, *, remove: bool = True) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)


def durable_server() -> RedisServerProcess:
    """A private server that fsyncs every write to its append-only file before answering."""
    server = RedisServerProcess("--appendonly", "yes", "--appendfsync", "always")
    server.start()
    return server


class RedisClusterProcesses:
    """A 3-master Redis Cluster on free loopback ports, no replicas."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes = [
            # The bus port is given explicitly: the default (port + 10000) overflows for high free ports.
            RedisServerProcess(
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                str(free_port()),
                "--cluster-node-timeout",
                "5000",
                "--appendonly",
                "no",
            )
            for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0?cluster=true"

    def start(self) -> None:
        try:
            for node in self.nodes:
                node.start()
            subprocess.run(
                [
                    "redis-cli", "--cluster", "create",
                    *(f"127.0.0.1:{node.port}" for node in self.nodes),
                    "--cluster-replicas", "0", "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=60,
            )  # fmt: skip
            self._wait_until_ok()
        except BaseException:
            self.stop()
            raise

    def _wait_until_ok(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = []
            for node in self.nodes:
                info = subprocess.run(
                    ["redis-cli", "-p", str(node.port), "cluster", "info"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                states.append("cluster_state:ok" in info)
            if all(states):
                return
            time.sleep(0.1)
        raise RuntimeError("the test Redis Cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


_cluster: RedisClusterProcesses | None = None
_cluster_lock = threading.Lock()


def shared_cluster() -> RedisClusterProcesses:
    """The session's cluster, started on first use and stopped when the interpreter exits."""
    global _cluster
    with _cluster_lock:
        if _cluster is None:
            cluster = RedisClusterProcesses()
            cluster.start()
            atexit.register(cluster.stop)
            _cluster = cluster
        return _cluster


async def wipe(url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` on the server (or cluster) at ``url``."""
    client: Any
    if "cluster=true" in url:
        from redis.asyncio.cluster import RedisCluster

        client = RedisCluster.from_url(url.split("?")[0])
    else:
        client = Redis.from_url(url.split("?")[0])
    try:
        await delete_prefix(client, prefix)
    finally:
        await client.aclose()


@asynccontextmanager
async def server_store(url: str) -> AsyncIterator[Callable[[], RedisCheckpointStorage]]:
    """A fresh prefix on a real server or cluster; its keys are deleted afterwards."""
    prefix = fresh_prefix()
    root = RedisCheckpointStorage.from_url(with_query(url, prefix=prefix))
    try:
        yield root.new_handle
    finally:
        await root.aclose()
        await wipe(url, prefix)


@asynccontextmanager
async def fake_store() -> AsyncIterator[Callable[[], RedisCheckpointStorage]]:
    """A private fakeredis server (with Lua) shared by every handle."""
    import fakeredis
    from redis.asyncio import BlockingConnectionPool

    client = fakeredis.FakeAsyncRedis(
        server=fakeredis.FakeServer(), connection_pool_class=BlockingConnectionPool, max_connections=64
    )
    # fakeredis answers neither CONFIG GET nor INFO, and evicts nothing.
    root = RedisCheckpointStorage(client, prefix=fresh_prefix("fake"), allow_evicting_policy=True)
    try:
        yield root.new_handle
    finally:
        await root.aclose()
        await client.aclose()


def real_server_store(directory: Path) -> Any:
    return server_store(redis_url())


def cluster_store(directory: Path) -> Any:
    return server_store(shared_cluster().url)


def fakeredis_store(directory: Path) -> Any:
    return fake_store()


class CuttingProxy:
    """A TCP proxy in front of a Redis server that can cut one connection mid-request.

    Armed with markers, the next client request containing one is forwarded to the server, and
    then the server's reply is swallowed and both sockets are closed: the request was executed
    but the client only sees a dropped connection, the most ambiguous failure there is.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._markers: tuple[bytes, ...] = ()
        self._lock = threading.Lock()
        self.cuts = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, *markers: bytes) -> None:
        with self._lock:
            self._markers = markers

    def disarm(self) -> None:
        with self._lock:
            self._markers = ()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            cut = threading.Event()
            threading.Thread(target=self._requests, args=(client, upstream, cut), daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, client, cut), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, cut: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                with self._lock:
                    if any(marker in data for marker in self._markers):
                        self._markers = ()
                        self.cuts += 1
                        cut.set()  # set before forwarding, so the reply is never passed on
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            _close(client, upstream)

    def _replies(self, upstream: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        try:
            while data := upstream.recv(65536):
                if cut.is_set():
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client, upstream)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


class RedisFaultInjector(FaultInjector):
    """Kills and restarts a private durable server; cuts the connection of the next save."""

    faults = frozenset({Fault.SERVER_RESTART, Fault.CONNECTION_CUT})

    def __init__(self, server: RedisServerProcess, proxy: CuttingProxy) -> None:
        self.server = server
        self.proxy = proxy
        self.restarts = 0

    async def restart_server(self) -> None:
        await asyncio.to_thread(self.server.restart)
        self.restarts += 1

    @asynccontextmanager
    async def cut_connection_during_save(self) -> AsyncIterator[None]:
        cuts = self.proxy.cuts
        # Either save script: the general one, or the one-record fast path on plain Redis.
        self.proxy.arm(script_sha("save").encode(), script_sha("save_one").encode())
        try:
            yield
        finally:
            self.proxy.disarm()
        if self.proxy.cuts != cuts + 1:
            raise AssertionError("the proxy saw no save request to cut; the fault was not injected")


@dataclass
class FaultyRedis:
    """A private durable server behind a cutting proxy, and a kit target on it."""

    server: RedisServerProcess
    proxy: CuttingProxy

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.proxy.port}/0"

    def target(self, prefix: str) -> StorageTarget:
        root = RedisCheckpointStorage.from_url(with_query(self.url, prefix=prefix))

        async def cleanup() -> None:
            await root.aclose()

        return StorageTarget(
            name=f"redis (private server, kill -9 and cuts) {self.url}",
            factory=root.new_handle,
            cleanup=cleanup,
            faults=RedisFaultInjector(self.server, self.proxy),
            reopen=lambda: RedisCheckpointStorage.from_url(with_query(self.url, prefix=prefix)),
        )

    def stop(self) -> None:
        self.proxy.close()
        self.server.stop()


def faulty_redis() -> FaultyRedis:
    server = durable_server()
    return FaultyRedis(server, CuttingProxy(server.port))


ACL_USERS = {
    # name: ACL rules. Tenants may run every command on their own keys only; "limited" may not run
    # CONFIG or INFO, as managed services and careful operators set it up.
    "tenantA": ("~A:*", "+@all"),
    "tenantB": ("~B:*", "+@all"),
    "limited": ("~L:*", "+@all", "-config", "-info"),
}


class AclRedis:
    """A private server with the users of :data:`ACL_USERS` (password: the name reversed)."""

    def __init__(self) -> None:
        self.server = RedisServerProcess()
        self.server.start()
        try:
            for name, rules in ACL_USERS.items():
                subprocess.run(
                    [
                        "redis-cli", "-p", str(self.server.port),
                        "ACL", "SETUSER", name, "on", f">{name[::-1]}", *rules,
                    ],
                    check=True,
                    capture_output=True,
                    timeout=30,
                )  # fmt: skip
        except BaseException:
            self.server.stop()
            raise

    def url(self, user: str, **options: str) -> str:
        base = f"redis://{user}:{user[::-1]}@127.0.0.1:{self.server.port}/0"
        return with_query(base, **options) if options else base

    def admin(self) -> Redis:
        """A client as the default user, who may do anything (ACL LOG, keys of every tenant)."""
        return Redis.from_url(self.server.url)

    def stop(self) -> None:
        self.server.stop()
