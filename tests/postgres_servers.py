"""PostgreSQL for the tests: a database of this test run on the shared server (created on first
use, dropped at exit), a fresh schema per store, and a private cluster (initdb / pg_ctl on a
free port) that the fault tests kill -9 and restart, behind a proxy that cuts a connection.

The shared server is ``POSTGRES_URL`` (default postgresql://postgres@127.0.0.1:5432/postgres):
only the database this run created is ever dropped. An unreachable server fails the tests.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from redis_servers import CuttingProxy, free_port

from conformance.faults import Fault, FaultInjector
from conformance.target import StorageTarget
from storages.postgres import PostgresCheckpointStorage

_run_database: str | None = None
_SERVER_ACCOUNT = "postgres"


def server_url() -> str:
    return os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def run_database_url() -> str:
    """The URL of this run's own database, created on first use and dropped when the run ends."""
    global _run_database
    if _run_database is None:
        name = f"cs_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(server_url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        _run_database = name
        atexit.register(drop_database, server_url(), name)
    return with_database(server_url(), _run_database)


def drop_database(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fresh_schema(label: str = "t") -> str:
    return f"{label}_{uuid.uuid4().hex[:12]}"


def with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


async def drop_schema(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@asynccontextmanager
async def schema_store(url: str | None = None) -> AsyncIterator[Callable[[], PostgresCheckpointStorage]]:
    """Makes handles on a fresh schema of ``url`` (this run's database); drops it afterwards."""
    base = url or run_database_url()
    schema = fresh_schema()
    root = PostgresCheckpointStorage.from_url(with_schema(base, schema))
    try:
        yield root.new_handle
    finally:
        await root.aclose()
        await drop_schema(base, schema)


def store(directory: Path) -> Any:
    """conftest's BACKENDS entry: a fresh schema in this run's database."""
    return schema_store()


class PrivateCluster:
    """A PostgreSQL cluster of our own: initdb in a temp dir, listening on 127.0.0.1 only."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="cs-pg-"))
        self.data = self.directory / "data"
        self.port = free_port()
        self._bindir = Path(shutil.which("pg_ctl") or "pg_ctl").parent

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _tool(self, name: str) -> list[str]:
        """The server tool's command line: the server refuses to run as root, so as root it
        runs as the ``postgres`` account, which then owns the temp directory."""
        command = [str(self._bindir / name)]
        if os.geteuid() == 0:
            return ["runuser", "-u", _SERVER_ACCOUNT, "--", *command]
        return command

    def start(self) -> None:
        if not self.data.exists():
            if os.geteuid() == 0:
                shutil.chown(self.directory, _SERVER_ACCOUNT)
            subprocess.run(
                [*self._tool("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                check=True,
                capture_output=True,
            )
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=on"
        subprocess.run(
            [*self._tool("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.directory / "log"),
             "-w", "-t", "60", "start"],
            check=True,
            capture_output=True,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend: no shutdown, no checkpoint, as a crash."""
        pid_file = self.data / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout
        for pid in [postmaster, *map(int, children.split())]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True).returncode == 0
            if not alive and not _exists(postmaster):
                return
            time.sleep(0.05)

    def restart(self) -> None:
        self.kill()
        self.start()  # crash recovery replays the WAL

    def stop(self) -> None:
        subprocess.run(
            [*self._tool("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(self.directory, ignore_errors=True)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PostgresFaultInjector(FaultInjector):
    """Kills and restarts the private cluster; cuts the connection of the next save."""

    faults = frozenset({Fault.SERVER_RESTART, Fault.CONNECTION_CUT})

    def __init__(self, cluster: PrivateCluster, proxy: CuttingProxy) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self.restarts = 0

    async def restart_server(self) -> None:
        import asyncio

        await asyncio.to_thread(self.cluster.restart)
        self.restarts += 1

    @asynccontextmanager
    async def cut_connection_during_save(self) -> AsyncIterator[None]:
        cuts = self.proxy.cuts
        self.proxy.arm(b"save_family")  # the save statement's text (Parse message)
        try:
            yield
        finally:
            self.proxy.disarm()
        if self.proxy.cuts != cuts + 1:
            raise AssertionError("the proxy saw no save request to cut; the fault was not injected")


class FaultyPostgres:
    """A private cluster behind a cutting proxy, and a kit target on it."""

    def __init__(self) -> None:
        self.cluster = PrivateCluster()
        self.cluster.start()
        self.proxy = CuttingProxy(self.cluster.port)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.proxy.port}/postgres"

    def target(self, schema: str) -> StorageTarget:
        root = PostgresCheckpointStorage.from_url(with_schema(self.url, schema))
        return StorageTarget(
            name=f"postgresql (private cluster, kill -9 and cuts) {self.url}",
            factory=root.new_handle,
            cleanup=root.aclose,
            faults=PostgresFaultInjector(self.cluster, self.proxy),
            reopen=lambda: PostgresCheckpointStorage.from_url(with_schema(self.url, schema)),
        )

    def stop(self) -> None:
        self.proxy.close()
        self.cluster.stop()
