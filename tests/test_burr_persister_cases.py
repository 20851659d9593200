"""Burr's own persistence cases, run with our persisters on every built-in backend.

Ported as our own tests (apache-burr's wheel ships no tests; its repository's code is reference
only): each test names the upstream case it mirrors, in apache/burr ``tests/core/test_persistence.py``
and ``tests/integrations/persisters/`` (``test_b_aiosqlite.py``, ``test_b_redis.py``,
``test_postgresql.py``), and asserts what that case asserts, with Burr's persister replaced by
:class:`StorageStatePersister` (sync cases) or :class:`AsyncStorageStatePersister` (async cases)
over the backend's store. Cases about one persister's own construction (SQLite's table before
``initialize()``, aiosqlite's factory wrapper, the Redis class's old name) are classified in
docs/runner-profiles.md and not ported.
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from burr.core import ApplicationBuilder, State, action
from conftest import StorageMaker

from storages.runners.burr import AsyncStorageStatePersister, StorageStatePersister

pytestmark = pytest.mark.burr

SAVE_KWARGS: dict[str, Any] = {
    "partition_key": None,
    "app_id": "foo",
    "sequence_id": 1,
    "position": "position",
    "state": State({"key": "value"}),
    "status": "status",
}


@pytest.fixture
def persistence(storage_maker: StorageMaker) -> Iterator[StorageStatePersister]:
    persister = StorageStatePersister(storage_maker())
    try:
        yield persister
    finally:
        persister.cleanup()


@pytest.fixture
async def async_persistence(storage_maker: StorageMaker) -> AsyncIterator[AsyncStorageStatePersister]:
    async with storage_maker() as storage, AsyncStorageStatePersister(storage) as persister:
        yield persister


# ---------------------------------------------------------------------- tests/core/test_persistence.py (sync)


def test_persistence_initialization_creates_table(persistence: StorageStatePersister) -> None:
    """Mirrors test_persistence_initialization_creates_table."""
    persistence.initialize()
    assert persistence.list_app_ids("partition_key") == []


def test_persistence_saves_and_loads_state(persistence: StorageStatePersister) -> None:
    """Mirrors test_persistence_saves_and_loads_state (status "status", neither completed nor failed)."""
    persistence.initialize()
    persistence.save("partition_key", "app_id", 1, "position", State({"key": "value"}), "status")
    loaded = persistence.load("partition_key", "app_id")
    assert loaded is not None
    assert loaded["state"] == State({"key": "value"})


def test_persistence_returns_none_when_no_state(persistence: StorageStatePersister) -> None:
    """Mirrors test_persistence_returns_none_when_no_state."""
    persistence.initialize()
    assert persistence.load("partition_key", "app_id") is None


def test_persistence_lists_app_ids(persistence: StorageStatePersister) -> None:
    """Mirrors test_persistence_lists_app_ids."""
    persistence.initialize()
    persistence.save("partition_key", "app_id1", 1, "position", State({"key": "value"}), "status")
    persistence.save("partition_key", "app_id2", 1, "position", State({"key": "value"}), "status")
    assert set(persistence.list_app_ids("partition_key")) == {"app_id1", "app_id2"}


def test_list_app_ids_is_unique_and_newest_first(persistence: StorageStatePersister) -> None:
    """Mirrors test_sqlite_persister_list_app_ids_is_unique_and_newest_first (there by rewriting
    created_at in SQL; here by saving in that order)."""
    persistence.initialize()
    for app_id, sequence_id in (("a-app", 0), ("z-app", 0), ("a-app", 1)):
        persistence.save("pk", app_id, sequence_id, "position", State({}), "completed")
    assert persistence.list_app_ids("pk") == ["a-app", "z-app"]


def test_persistence_is_initialized_true(persistence: StorageStatePersister) -> None:
    """Mirrors test_persistence_is_initialized_true."""
    persistence.initialize()
    assert persistence.is_initialized()


def test_is_initialized_true_new_connection(storage_maker: StorageMaker) -> None:
    """Mirrors test_sqlite_persistence_is_initialized_true_new_connection (and test_postgresql's
    test_is_initialized): a second persister on the same store is initialized too."""
    first, second = StorageStatePersister(storage_maker()), StorageStatePersister(storage_maker())
    try:
        first.initialize()
        assert first.is_initialized()
        assert second.is_initialized()
    finally:
        first.cleanup()
        second.cleanup()


@pytest.mark.parametrize("method_name", ["list_app_ids", "load", "save"])
def test_persister_methods_none_partition_key(persistence: StorageStatePersister, method_name: str) -> None:
    """Mirrors test_persister_methods_none_partition_key."""
    persistence.initialize()
    if method_name == "list_app_ids":
        persistence.list_app_ids(partition_key=None)
    elif method_name == "load":
        persistence.load(partition_key=None, app_id="foo")
    else:
        persistence.save(**SAVE_KWARGS)


def _next(state: State[Any], key: str, value: str) -> tuple[dict[str, Any], State[Any]]:
    new = state["chat_history"][-1] + 1 if state["chat_history"] else 1
    return {key: value}, state.update(**{key: value}).append(chat_history=new)


@action(reads=[], writes=["prompt", "chat_history"])
def dummy_input(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
    return _next(state, "prompt", "PROMPT")


@action(reads=["chat_history"], writes=["response", "chat_history"])
def dummy_response(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
    return _next(state, "response", "RESPONSE")


@action(reads=[], writes=["prompt", "chat_history"])
async def async_input(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
    await asyncio.sleep(0)
    return _next(state, "prompt", "PROMPT")


@action(reads=["chat_history"], writes=["response", "chat_history"])
async def async_response(state: State[Any]) -> tuple[dict[str, Any], State[Any]]:
    await asyncio.sleep(0)
    return _next(state, "response", "RESPONSE")


def _builder(persister: Any, first: Any, second: Any) -> Any:
    return (
        ApplicationBuilder()
        .with_actions(first, second)
        .with_transitions((first.__name__, second.__name__), (second.__name__, first.__name__))
        .initialize_from(
            persister,
            resume_at_next_action=True,
            default_state={"chat_history": []},
            default_entrypoint=first.__name__,
        )
        .with_state_persister(persister)
        .with_identifiers(app_id="test_1", partition_key="sqlite")
    )


def test_save_and_load_end_to_end(storage_maker: StorageMaker) -> None:
    """Mirrors test_async_save_and_load_from_sqlite_persister_end_to_end, with Burr's sync
    application: run two steps, then a new persister and application resume at the third."""
    persister = StorageStatePersister(storage_maker())
    persister.initialize()
    try:
        *_, state = (
            _builder(persister, dummy_input, dummy_response).build().run(halt_after=["dummy_response"])
        )
        assert state["chat_history"] == [1, 2]
    finally:
        persister.cleanup()
    resumed = StorageStatePersister(storage_maker())
    resumed.initialize()
    try:
        app = _builder(resumed, dummy_input, dummy_response).build()
        assert app.state["chat_history"] == [1, 2]
        *_, state = app.run(halt_after=["dummy_response"])
        assert state["chat_history"] == [1, 2, 3, 4]
    finally:
        resumed.cleanup()


# ---------------------------------------------------------------------- async cases


async def test_async_persistence_saves_and_loads_state(async_persistence: AsyncStorageStatePersister) -> None:
    """Mirrors test_async_persistence_saves_and_loads_state (test_persistence.py and test_b_aiosqlite.py)."""
    await async_persistence.initialize()
    await async_persistence.save("partition_key", "app_id", 1, "position", State({"key": "value"}), "status")
    loaded = await async_persistence.load("partition_key", "app_id")
    assert loaded is not None
    assert loaded["state"] == State({"key": "value"})


async def test_async_persistence_returns_none_when_no_state(
    async_persistence: AsyncStorageStatePersister,
) -> None:
    """Mirrors test_async_persistence_returns_none_when_no_state."""
    await async_persistence.initialize()
    assert await async_persistence.load("partition_key", "app_id") is None


async def test_async_persistence_lists_app_ids(async_persistence: AsyncStorageStatePersister) -> None:
    """Mirrors test_async_persistence_lists_app_ids."""
    await async_persistence.initialize()
    for app_id in ("app_id1", "app_id2"):
        await async_persistence.save(
            "partition_key", app_id, 1, "position", State({"key": "value"}), "status"
        )
    assert set(await async_persistence.list_app_ids("partition_key")) == {"app_id1", "app_id2"}


@pytest.mark.parametrize("method_name", ["list_app_ids", "load", "save"])
async def test_async_persister_methods_none_partition_key(
    async_persistence: AsyncStorageStatePersister, method_name: str
) -> None:
    """Mirrors test_async_persister_methods_none_partition_key."""
    await async_persistence.initialize()
    if method_name == "list_app_ids":
        await async_persistence.list_app_ids(partition_key=None)
    elif method_name == "load":
        await async_persistence.load(partition_key=None, app_id="foo")
    else:
        await async_persistence.save(**SAVE_KWARGS)


async def test_async_persistence_initialization_creates_table(
    async_persistence: AsyncStorageStatePersister,
) -> None:
    """Mirrors test_async_persistence_initialization_creates_table."""
    await async_persistence.initialize()
    assert await async_persistence.list_app_ids("partition_key") == []


async def test_async_persistence_is_initialized_true(async_persistence: AsyncStorageStatePersister) -> None:
    """Mirrors test_async_persistence_is_initialized_true and test_async_pg_fixture."""
    await async_persistence.initialize()
    assert await async_persistence.is_initialized()


async def test_copy_persister(async_persistence: AsyncStorageStatePersister) -> None:
    """Mirrors test_b_aiosqlite.py's test_copy_persister: a copy keeps the serde kwargs and has a storage."""
    copy = async_persistence.copy()
    assert copy.serde_kwargs == async_persistence.serde_kwargs
    assert copy.storage is not None


async def test_async_save_and_load_end_to_end(storage_maker: StorageMaker) -> None:
    """Mirrors test_async_save_and_load_from_sqlite_persister_end_to_end."""
    async with storage_maker() as storage:
        persister = AsyncStorageStatePersister(storage)
        await persister.initialize()
        *_, state = await (await _builder(persister, async_input, async_response).abuild()).arun(
            halt_after=["async_response"]
        )
        assert state["chat_history"] == [1, 2]
    async with storage_maker() as storage:
        resumed = AsyncStorageStatePersister(storage)
        await resumed.initialize()
        app = await _builder(resumed, async_input, async_response).abuild()
        assert app.state["chat_history"] == [1, 2]
        *_, state = await app.arun(halt_after=["async_response"])
        assert state["chat_history"] == [1, 2, 3, 4]


# ---------------------------------------------------------------------- test_b_redis.py, test_postgresql.py


def test_save_and_load_state(persistence: StorageStatePersister) -> None:
    """Mirrors test_save_and_load_state (Redis, PostgreSQL): load at a sequence_id."""
    persistence.save("pk", "app_id", 1, "pos", State({"a": 1, "b": 2}), "completed")
    loaded = persistence.load("pk", "app_id", 1)
    assert loaded is not None
    assert loaded["state"].get_all() == {"a": 1, "b": 2}


def test_save_and_load_with_default_partition_key(persistence: StorageStatePersister) -> None:
    """Mirrors test_save_and_load_with_default_partition_key (Redis's, the most specific)."""
    persistence.save(None, "no_pk_app", 1, "pos", State({"a": 1}), "completed")
    loaded = persistence.load(None, "no_pk_app")
    assert loaded is not None
    assert loaded["state"].get_all() == {"a": 1}
    assert loaded["partition_key"] == ""
    again = persistence.load("", "no_pk_app")
    assert again is not None
    assert again["sequence_id"] == 1
    assert "no_pk_app" in persistence.list_app_ids(None)


def test_list_app_ids(persistence: StorageStatePersister) -> None:
    """Mirrors test_list_app_ids (Redis, PostgreSQL)."""
    persistence.save("pk", "app_id1", 1, "pos1", State({"a": 1}), "completed")
    persistence.save("pk", "app_id2", 2, "pos2", State({"b": 2}), "completed")
    app_ids = persistence.list_app_ids("pk")
    assert "app_id1" in app_ids
    assert "app_id2" in app_ids


def test_load_nonexistent_key(persistence: StorageStatePersister) -> None:
    """Mirrors test_load_nonexistent_key (Redis, PostgreSQL)."""
    assert persistence.load("pk", "nonexistent_key") is None


async def test_async_save_and_load_with_default_partition_key(
    async_persistence: AsyncStorageStatePersister,
) -> None:
    """Mirrors test_async_save_and_load_with_default_partition_key (Redis, PostgreSQL)."""
    await async_persistence.save(None, "no_pk_app", 1, "pos", State({"a": 1}), "completed")
    loaded = await async_persistence.load(None, "no_pk_app")
    assert loaded is not None
    assert loaded["state"].get_all() == {"a": 1}
    assert "no_pk_app" in await async_persistence.list_app_ids(None)


async def test_async_save_and_load_state(async_persistence: AsyncStorageStatePersister) -> None:
    """Mirrors test_async_save_and_load_state (Redis, PostgreSQL)."""
    await async_persistence.save("pk", "app_id", 1, "pos", State({"a": 1, "b": 2}), "completed")
    loaded = await async_persistence.load("pk", "app_id", 1)
    assert loaded is not None
    assert loaded["state"].get_all() == {"a": 1, "b": 2}


@pytest.mark.sqlite
def test_serialization_with_pickle(tmp_path: Path) -> None:
    """Mirrors test_serialization_with_pickle (Redis, PostgreSQL): a persister built from a URL
    pickles (its URL and serde kwargs) and the copy reads what the original saved."""
    persister = StorageStatePersister(f"sqlite:///{tmp_path}/burr.db")
    try:
        persister.save("pk", "app_id_serde", 1, "pos", State({"a": 1, "b": 2}), "completed")
        copy = pickle.loads(pickle.dumps(persister))
        try:
            loaded = copy.load("pk", "app_id_serde", 1)
            assert loaded is not None
            assert loaded["state"].get_all() == {"a": 1, "b": 2}
        finally:
            copy.cleanup()
    finally:
        persister.cleanup()
