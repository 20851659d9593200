"""Fixtures shared by the test modules: one open storage per built-in backend, and a deep
type-exact comparison for round-trip checks."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
import os
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import postgres_servers
import pytest
import redis_servers
import s3_support

from storages import CheckpointStore, open_storage
from storages.registry import registry

StorageMaker = Callable[[], CheckpointStore]
"""Returns a new, unopened handle on one fresh store; every call reaches the same store."""


@dataclass(frozen=True)
class Backend:
    """A backend the shared tests run on: how to bring up a fresh store for one test."""

    marker: str
    """The pytest mark (and tox environment) its tests run under."""
    fresh_store: Callable[[Path], AbstractAsyncContextManager[StorageMaker]]
    url: Callable[[Path], str] | None = None
    """The URL of a fresh store in a test's directory, for backends a URL alone reaches."""


def _by_url(marker: str, url: Callable[[Path], str]) -> Backend:
    return Backend(marker, lambda directory: _url_store(url(directory)), url)


@asynccontextmanager
async def _url_store(url: str) -> AsyncIterator[StorageMaker]:
    root = open_storage(url)
    try:
        yield root.new_handle
    finally:
        await root.aclose()


# Each backend's tests add their entries here (one line each), in report order. The key is the
# test id; its marker is the registered backend's name (storages/registry.py) or redis_cluster.
BACKENDS: dict[str, Backend] = {
    "memory": _by_url("memory", lambda directory: "memory://"),
    # directory is absolute, so this is sqlite:////abs/path
    "sqlite": _by_url("sqlite", lambda directory: f"sqlite:///{directory}/t.db"),
    "redis": Backend("redis", redis_servers.real_server_store),  # REDIS_URL, a fresh key prefix
    "redis-fake": Backend("redis", redis_servers.fakeredis_store),
    "redis-cluster": Backend("redis_cluster", redis_servers.cluster_store),  # started on first use
    "s3": Backend("s3", s3_support.store_maker(server=False)),  # moto in this process
    "s3-server": Backend("s3", s3_support.store_maker(server=True)),  # moto over HTTP, loopback
    "postgres": Backend("postgres", postgres_servers.store),  # a fresh schema in this run's database
}

URL_BACKENDS = tuple(name for name, backend in BACKENDS.items() if backend.url is not None)
"""Backends the ``storage_url`` fixture covers (stores reachable by URL alone)."""

BACKEND_MARKERS = frozenset({*registry().names(), *(backend.marker for backend in BACKENDS.values())})
"""Marks that put a test in a backend's tox environment; a test with none of them is ``core``."""


def backend_url(backend: str, directory: Path) -> str:
    """The URL of a fresh store of ``backend``; file-based stores live in ``directory``."""
    url = BACKENDS[backend].url if backend in BACKENDS else None
    if url is None:
        raise ValueError(
            f"backend {backend!r} has no URL of a fresh store; these do: {', '.join(URL_BACKENDS)}"
        )
    return url(directory)


@pytest.fixture(params=URL_BACKENDS)
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of a fresh, empty store, once per URL-reachable backend."""
    return backend_url(request.param, tmp_path)


@pytest.fixture(params=list(BACKENDS))
async def storage_maker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageMaker]:
    """Makes handles on one fresh store, once per backend; the store is torn down afterwards."""
    async with BACKENDS[request.param].fresh_store(tmp_path) as maker:
        yield maker


@pytest.fixture
async def storage(storage_maker: StorageMaker) -> AsyncIterator[CheckpointStore]:
    """An open storage on a fresh store of each backend, closed after the test."""
    async with storage_maker() as opened:
        yield opened


_MISSING = object()


def _twin(item: Any, candidates: Iterable[Any]) -> Any:
    """The candidate equal to ``item`` with identical types, or _MISSING."""
    return next((other for other in candidates if _same_types(item, other)), _MISSING)


def _same_tzinfo(a: dt.tzinfo | None, b: dt.tzinfo | None) -> bool:
    if type(a) is not type(b):
        return False
    if a is None or b is None:
        return True
    if hasattr(a, "key"):  # zoneinfo.ZoneInfo
        return bool(a.key == getattr(b, "key", _MISSING))
    return a == b


def _same_types(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()  # 1.0 and 1.00, NaN and sNaN, 0 and -0 differ here
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same_types, a, b))
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            other_key = _twin(key, b)
            if other_key is _MISSING or not _same_types(value, b[other_key]):
                return False
        return True
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(_twin(item, b) is not _MISSING for item in a)
    if isinstance(a, (dt.datetime, dt.time)):
        # Aware datetimes compare by instant; compare wall clock, fold and zone instead.
        wall_a, wall_b = a.replace(tzinfo=None), b.replace(tzinfo=None)
        return wall_a == wall_b and a.fold == b.fold and _same_tzinfo(a.tzinfo, b.tzinfo)
    if isinstance(a, enum.Enum):
        return a is b
    if dataclasses.is_dataclass(a):
        return all(
            _same_types(getattr(a, f.name, _MISSING), getattr(b, f.name, _MISSING))
            for f in dataclasses.fields(a)
        )
    if hasattr(type(a), "model_fields"):  # pydantic
        names = list(type(a).model_fields) + list(getattr(a, "__pydantic_extra__", None) or {})
        return all(_same_types(getattr(a, name), getattr(b, name, _MISSING)) for name in names)
    return bool(a == b)


@pytest.fixture(scope="session")
def same_types() -> Callable[[Any, Any], bool]:
    """``same_types(a, b)``: equal, with identical types all the way down (dict keys, set members,
    float signs, Decimal exponents, datetime zones and folds included)."""
    return _same_types


# ---------------------------------------------------------------------- test selection and CI rules


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "core: exercises no backend of its own (added to every such test)")
    for name in sorted(BACKEND_MARKERS - {"core"}):  # a registered backend's mark needs no other line
        config.addinivalue_line("markers", f"{name}: exercises the {name} backend")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the backend it exercises, so tox can run one backend per environment:
    parametrised tests by their ``storage_url`` backend, backend modules by their own mark, and
    every other test ``core``."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            backend = callspec.params.get("storage_maker", callspec.params.get("storage_url"))
            if backend in BACKENDS:
                item.add_marker(getattr(pytest.mark, BACKENDS[backend].marker))
        if not any(mark.name in BACKEND_MARKERS for mark in item.iter_markers()):
            item.add_marker(pytest.mark.core)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """With CHECKPOINT_FORBID_SKIPS=1 (set by tox), a skipped test fails: an unreachable backend
    or a missing dependency must never pass as a skip."""
    outcome = yield
    report = outcome.get_result()
    forbid = os.environ.get("CHECKPOINT_FORBID_SKIPS") == "1"
    if forbid and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped tests are failures here (CHECKPOINT_FORBID_SKIPS=1): {report.longrepr}"
