"""Embedded defaults: how the kit's no-argument run brings a backend up with nothing but Python
packages (a temp file, an in-process fake server).

Each is an :class:`EmbeddedBackend`, named by its backend's ``BackendSpec.embedded``
(storages/registry.py); a third-party backend may name one of its own. Nothing starts until a
target is first opened (conformance/builtin.py), and a backend whose optional dependency is missing
is not skipped: its ``start`` raises ``MissingDependencyError``, so the report shows it as an error.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storages.engine import CheckpointStore
from storages.errors import MissingDependencyError
from storages.registry import registry

from .faults import FaultInjector
from .s3_moto import RequestCounter, S3FaultInjector

if TYPE_CHECKING:
    from storages.sqlite import SQLiteCheckpointStorage


@dataclass(frozen=True, slots=True)
class Embedded:
    """A running embedded backend: the URL (and options) to open it, and how to tear it down."""

    url: str
    options: Mapping[str, Any] = field(default_factory=dict)
    stop: Callable[[], None] | None = None
    open: Callable[[], CheckpointStore] | None = None
    """Builds the root storage when a URL cannot say how (an injected in-process client)."""
    process_opener: str | None = None
    """How another process opens the same store (see StorageTarget.process_opener)."""
    open_expiring: Callable[[], CheckpointStore] | None = None
    """Builds a root storage on the same running backend, in a namespace of its own, whose
    records live a second: the expiry family runs there (StorageTarget.expiry_factory)."""
    next_store: Callable[[], Embedded] | None = None
    """The same running backend on a new, empty store (a new bucket), for a backend where that
    is cheaper than removing what each clause wrote: each clause then starts on one of its own
    (StorageTarget.fresh_store)."""


@dataclass(frozen=True, slots=True)
class EmbeddedBackend:
    """A backend and how to run it with nothing but its Python extras installed."""

    name: str
    """The report's name for it, e.g. ``sqlite (temp file)``."""
    start: Callable[[], Embedded]
    faults: FaultInjector | None = None
    """Breaks the backend on purpose for the ``faults`` family; ``start`` attaches it."""
    round_trips: Callable[[Any], int] | None = None
    """Counts the backend's round trips for the ``scale`` family; ``start`` attaches it."""
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    """Documented deviations: clause id -> reason."""
    timeout_factor: float = 1.0
    """Multiplies its clause timeouts and its bound on each storage call (``StorageTarget.
    timeout_factor``): for a store emulated in Python, whose every request costs what a server
    spends on hundreds, so that a loaded machine slows it past a bound sized for real stores."""


BuiltinBackend = EmbeddedBackend
"""The former name, kept importable."""


def require(backend: str, *imports: tuple[str, str, str]) -> None:
    """Raise MissingDependencyError unless ``backend``'s own imports (storages.registry) and
    ``imports`` — (import name, extra, what to install) each — are importable."""
    import importlib.util

    registry().named(backend).check_installed()
    for module, extra, package in imports:
        if importlib.util.find_spec(module) is None:
            raise MissingDependencyError(f"the embedded {backend} backend", extra, package)


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
    require("sqlite")
    directory = Path(tempfile.mkdtemp(prefix="checkpoint-conformance-"))
    url = f"sqlite:///{directory.as_posix()}/conformance.db"
    path = directory / "conformance.db"
    return Embedded(
        url,
        stop=lambda: shutil.rmtree(directory, ignore_errors=True),
        open=lambda: _counting_sqlite(path),
        process_opener=url,
    )


def _counting_sqlite(path: Path) -> SQLiteCheckpointStorage:
    """The shipped SQLite storage, reporting every statement it runs (its ``statement_trace``
    test hook) for the scale clauses."""
    from storages.sqlite import SQLiteCheckpointStorage

    return SQLiteCheckpointStorage(path, statement_trace=_SQLITE_STATEMENTS.add)


def _redis_fakeredis() -> Embedded:
    require(
        "redis", ("fakeredis", "conformance", "fakeredis[lua]"), ("lupa", "conformance", "fakeredis[lua]")
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
        open_expiring=lambda: RedisCheckpointStorage(
            client, prefix="conformance-expiring", ttl=1, allow_evicting_policy=True
        ),
    )


_S3_FAULTS = S3FaultInjector()
_S3_REQUESTS = RequestCounter()


def _s3_moto() -> Embedded:
    require("s3", ("moto", "conformance", "moto[server]"))
    from .s3_moto import start_in_process

    # moto in this process: the client must be made inside the mock, so it is injected. moto's
    # state is the process's: while any other mock of it runs (another embedded S3, a test's own),
    # stopping this one clears nothing, so every bucket name carries this run's own random bits
    # and a bucket created "fresh" can never be one an earlier run filled.
    run = f"ckpt-conformance-{secrets.token_hex(6)}"
    client, stop = start_in_process(run)
    _S3_FAULTS.attach(client)
    _S3_REQUESTS.attach(client)
    return _MotoBuckets(client, stop, run).store(run)


class _MotoBuckets:
    """The embedded S3's stores, a bucket each: a bucket costs one request, where removing what
    a clause wrote costs a LIST per prefix and a GET per record, a fifth of the run's requests.
    The buckets stay in moto's memory until it stops (the run's end)."""

    def __init__(self, client: Any, stop: Callable[[], None], run: str) -> None:
        self._client = client
        self._stop = stop
        self._run = run
        self._made = 0

    def store(self, bucket: str) -> Embedded:
        from storages.s3 import S3CheckpointStorage

        client = self._client
        return Embedded(
            "s3 (moto)",
            stop=self._stop,
            open=lambda: S3CheckpointStorage(bucket, "conformance", client=client),
            next_store=self._next,
        )

    def _next(self) -> Embedded:
        self._made += 1
        bucket = f"{self._run}-{self._made}"
        self._client.create_bucket(Bucket=bucket)
        return self.store(bucket)


MEMORY = EmbeddedBackend("memory://", _memory)
SQLITE_TEMP_FILE = EmbeddedBackend(
    "sqlite (temp file)", _sqlite_temp_file, round_trips=_SQLITE_STATEMENTS.read
)
REDIS_FAKEREDIS = EmbeddedBackend("redis (fakeredis)", _redis_fakeredis, round_trips=_REDIS_COMMANDS.read)
S3_MOTO = EmbeddedBackend(
    "s3 (moto)",
    _s3_moto,
    faults=_S3_FAULTS,
    round_trips=lambda _storage: _S3_REQUESTS.total,
    expected_failures={
        "scale.walk_is_one_round_trip": "S3 has no server-side query to follow links: a walk is one "
        "GET per hop (docs/s3.md)",
        "concurrency.many_writers_number_once": "S3 numbers a save from the high-water mark it read, so "
        "overlapping saves may share a sequence number (docs/s3.md, Consistency)",
    },
    # moto answers each request in Python, a LIST by going through every key of the bucket: a
    # 300-checkpoint chain's clause took 19 s of its 30 s on a machine at load 10, and failed on
    # time alone at load 17.
    timeout_factor=3.0,
)


__all__ = [
    "MEMORY",
    "REDIS_FAKEREDIS",
    "S3_MOTO",
    "SQLITE_TEMP_FILE",
    "BuiltinBackend",
    "Embedded",
    "EmbeddedBackend",
    "require",
]
