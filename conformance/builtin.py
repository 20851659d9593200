"""Every built-in backend on its embedded default, ready for the kit.

Each backend is one entry in :data:`BUILTIN_BACKENDS`: a name for reports and a ``start``
function that brings up whatever the backend needs locally (a temp file, later an in-process
fake server) and says how to reach it. Nothing starts until a target is first opened, and a
backend whose optional dependency is missing is not skipped: its target fails to open with the
``MissingDependencyError`` message, so the report shows it as an error.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storages.base import BaseCheckpointStorage

from .faults import FaultInjector
from .s3_moto import RequestCounter, S3FaultInjector
from .target import StorageTarget

if TYPE_CHECKING:
    from storages.sqlite import SQLiteCheckpointStorage


@dataclass(frozen=True, slots=True)
class Embedded:
    """A running embedded backend: the URL (and options) to open it, and how to tear it down."""

    url: str
    options: Mapping[str, Any] = field(default_factory=dict)
    stop: Callable[[], None] | None = None
    open: Callable[[], BaseCheckpointStorage] | None = None
    """Builds the root storage when a URL cannot say how (an injected in-process client)."""
    process_opener: str | None = None
    """How another process opens the same store (see StorageTarget.process_opener)."""


@dataclass(frozen=True, slots=True)
class BuiltinBackend:
    """A built-in backend and how to run it with nothing but its Python extras installed."""

    name: str
    start: Callable[[], Embedded]
    faults: FaultInjector | None = None
    """Breaks the backend on purpose for the ``faults`` family; ``start`` attaches it."""
    round_trips: Callable[[Any], int] | None = None
    """Counts the backend's round trips for the ``scale`` family; ``start`` attaches it."""
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    """Documented deviations: clause id -> reason."""


class _Tally:
    """Counts one backend's round trips, from whatever thread the driver reports them on."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, *_: Any) -> None:
        self.total += 1  # one bytecode increment under the GIL; exactness is not at stake

    def read(self, _storage: Any) -> int:
        return self.total


_SQLITE_STATEMENTS = _Tally()
_REDIS_COMMANDS = _Tally()


def _memory() -> Embedded:
    return Embedded("memory://")


def _sqlite_temp_file() -> Embedded:
    import importlib.util

    from storages.errors import MissingDependencyError

    if importlib.util.find_spec("aiosqlite") is None:
        raise MissingDependencyError("sqlite:// storage", "sqlite", "aiosqlite")
    directory = Path(tempfile.mkdtemp(prefix="checkpoint-conformance-"))
    url = f"sqlite:///{directory.as_posix()}/conformance.db"
    path = directory / "conformance.db"
    return Embedded(
        url,
        stop=lambda: shutil.rmtree(directory, ignore_errors=True),
        open=lambda: _counting_sqlite_class()(path),
        process_opener=url,
    )


def _counting_sqlite_class() -> type[SQLiteCheckpointStorage]:
    from storages.sqlite import SQLiteCheckpointStorage

    class CountingSQLiteStorage(SQLiteCheckpointStorage):
        """SQLite whose connection reports every statement it runs, for the scale clauses."""

        async def _open(self) -> None:
            await super()._open()
            # The statement trace is sqlite3's own hook; the connection is ours to configure.
            assert self._connection is not None
            await self._connection.set_trace_callback(_SQLITE_STATEMENTS.add)

    return CountingSQLiteStorage


def _redis_fakeredis() -> Embedded:
    import importlib.util

    from storages.errors import MissingDependencyError

    if importlib.util.find_spec("redis") is None:
        raise MissingDependencyError("redis:// storage", "redis", "redis")
    if importlib.util.find_spec("fakeredis") is None or importlib.util.find_spec("lupa") is None:
        raise MissingDependencyError(
            "the embedded Redis backend (fakeredis)", "conformance", "fakeredis[lua]"
        )
    import fakeredis
    from redis.asyncio import BlockingConnectionPool

    from storages.redis import RedisCheckpointStorage

    client = fakeredis.FakeAsyncRedis(
        server=fakeredis.FakeServer(), connection_pool_class=BlockingConnectionPool, max_connections=64
    )
    # Every command, script calls included, goes through execute_command: one round trip each.
    send: Callable[..., Awaitable[Any]] = client.execute_command

    async def counted(*args: Any, **options: Any) -> Any:
        _REDIS_COMMANDS.add()
        return await send(*args, **options)

    client.execute_command = counted  # type: ignore[method-assign]
    # fakeredis answers neither CONFIG GET nor INFO (the eviction policy check), and evicts nothing.
    return Embedded(
        "redis (fakeredis)",
        open=lambda: RedisCheckpointStorage(client, prefix="conformance", allow_evicting_policy=True),
    )


_S3_FAULTS = S3FaultInjector()
_S3_REQUESTS = RequestCounter()


def _s3_moto() -> Embedded:
    import importlib.util

    from storages.errors import MissingDependencyError

    if importlib.util.find_spec("boto3") is None:
        raise MissingDependencyError("s3:// storage", "s3", "boto3")
    if importlib.util.find_spec("moto") is None:
        raise MissingDependencyError("the embedded S3 backend (moto)", "conformance", "moto[server]")
    from storages.s3 import S3CheckpointStorage

    from .s3_moto import start_in_process

    # moto in this process: the client must be made inside the mock, so it is injected.
    client, stop = start_in_process("ckpt-conformance")
    _S3_FAULTS.attach(client)
    _S3_REQUESTS.attach(client)
    return Embedded(
        "s3 (moto)",
        stop=stop,
        open=lambda: S3CheckpointStorage("ckpt-conformance", "conformance", client=client),
    )


BUILTIN_BACKENDS: tuple[BuiltinBackend, ...] = (
    BuiltinBackend("memory://", _memory),
    BuiltinBackend("sqlite (temp file)", _sqlite_temp_file, round_trips=_SQLITE_STATEMENTS.read),
    BuiltinBackend("redis (fakeredis)", _redis_fakeredis, round_trips=_REDIS_COMMANDS.read),
    BuiltinBackend(
        "s3 (moto)",
        _s3_moto,
        faults=_S3_FAULTS,
        round_trips=lambda _storage: _S3_REQUESTS.total,
        expected_failures={
            "scale.walk_is_one_round_trip": "S3 has no server-side query to follow links: a walk is one "
            "GET per hop (docs/s3.md)"
        },
    ),
)
"""The backends ``checkpoint-conformance`` checks when given no URL, in report order."""


class _EmbeddedTarget:
    """Starts the backend and opens its root storage on first use; each clause gets a new handle."""

    def __init__(self, backend: BuiltinBackend) -> None:
        self._backend = backend
        self._embedded: Embedded | None = None
        self._root: BaseCheckpointStorage | None = None

    async def open(self) -> BaseCheckpointStorage:
        from storages.urls import open_storage

        if self._root is None:
            if self._embedded is None:
                self._embedded = self._backend.start()
            if self._embedded.open is not None:
                self._root = self._embedded.open()
            else:
                # Raises MissingDependencyError when the backend's extra is not installed.
                self._root = open_storage(self._embedded.url, **self._embedded.options)
        return self._root.new_handle()

    def process_opener(self) -> str | None:
        return None if self._embedded is None else self._embedded.process_opener

    async def cleanup(self) -> None:
        root, embedded = self._root, self._embedded
        self._root = self._embedded = None
        try:
            if root is not None:
                await root.aclose()
        finally:
            if embedded is not None and embedded.stop is not None:
                embedded.stop()


def builtin_target(backend: BuiltinBackend) -> StorageTarget:
    """A target for one built-in backend; starting it is deferred to the first open."""
    embedded = _EmbeddedTarget(backend)
    return StorageTarget(
        name=backend.name,
        factory=embedded.open,
        cleanup=embedded.cleanup,
        faults=backend.faults,
        round_trips=backend.round_trips,
        expected_failures=backend.expected_failures,
        process_opener=embedded.process_opener,
    )


def builtin_targets() -> list[StorageTarget]:
    """One target per built-in backend, each on its embedded default (no servers to run)."""
    return [builtin_target(backend) for backend in BUILTIN_BACKENDS]


def unavailable_target(name: str, error: BaseException) -> StorageTarget:
    """A target that cannot open, so the run reports ``error`` against ``name`` instead of hiding it."""

    def refuse() -> Any:
        raise error

    return StorageTarget(name=name, factory=refuse)


__all__ = [
    "BUILTIN_BACKENDS",
    "BuiltinBackend",
    "Embedded",
    "builtin_target",
    "builtin_targets",
    "unavailable_target",
]
