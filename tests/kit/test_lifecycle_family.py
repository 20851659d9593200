"""The lifecycle family passes storages that close properly and catches the ones that keep working
after aclose(), raise on a second close, close their siblings, or leave a thread per handle."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any, Self

import pytest

from conformance import BackendReport, Outcome
from storages.errors import StorageClosedError

from . import support
from .double import Backing, DoubleBackend, DoubleStorage, double_target
from .support import caught_only_by

FAMILY = "lifecycle"


def run_family(storage_class: type[DoubleBackend] | type[DoubleStorage]) -> BackendReport:
    return support.run_family(FAMILY, double_target(storage_class))


class ReconnectsAfterClose(DoubleStorage):
    """aclose() drops the connection, and the next operation quietly connects again."""

    async def aclose(self) -> None:
        await self.backend.close()


class RemembersOpening(DoubleBackend):
    opened = False

    async def open(self, operation: str) -> None:
        self.opened = True


class UnusedHandleIgnoresClose(DoubleStorage):
    """aclose() of a handle that never connected does nothing, so the handle still works later."""

    backend_class = RemembersOpening

    async def aclose(self) -> None:
        if getattr(self.backend, "opened", False):
            await super().aclose()


class SecondCloseRaises(DoubleStorage):
    """Closes once; a second aclose() raises."""

    async def aclose(self) -> None:
        # Kept on the handle's backend: a new handle copies the storage's own attributes.
        if getattr(self.backend, "closed_once", False):
            raise RuntimeError("connection already closed")
        self.backend.closed_once = True
        await super().aclose()


class _Pool:
    closed = False


class ClosingClosesSiblings(DoubleBackend):
    """Handles made by new_handle() share a connection pool, and aclose() of any one closes it."""

    def __init__(self, backing: Backing | None = None, pool: _Pool | None = None) -> None:
        super().__init__(backing)
        self._pool = pool if pool is not None and not pool.closed else _Pool()

    def new_handle(self) -> Self:
        return type(self)(self.backing, self._pool)

    def _read(self) -> Any:
        if self._pool.closed:
            raise StorageClosedError(self.describe(), "read")
        return super()._read()

    async def close(self) -> None:
        self._pool.closed = True


_RELEASE = threading.Event()


class LeaksAThreadPerHandle(DoubleBackend):
    """Starts a connection thread on first use and never stops it (aiosqlite without close)."""

    async def open(self, operation: str) -> None:
        threading.Thread(target=_RELEASE.wait, name="leaked-connection", daemon=True).start()


def _connection(stop: threading.Event) -> None:
    while not stop.wait(0.05) and not _RELEASE.is_set():
        pass


class StopsItsThreadWhenCollected(DoubleBackend):
    """Starts a connection thread on first use; close() leaves it running, and only the backend's
    finalizer stops it: whether the thread is gone when it is counted depends on when the garbage
    collector frees the closed handle (at once, by reference count, when nothing holds it)."""

    async def open(self, operation: str) -> None:
        stop = threading.Event()
        threading.Thread(target=_connection, args=(stop,), name="collected-connection", daemon=True).start()
        weakref.finalize(self, stop.set)


@pytest.fixture(autouse=True)
def _release_leaked_threads() -> Iterator[None]:
    _RELEASE.clear()
    yield
    _RELEASE.set()


def test_a_correct_double_passes_every_lifecycle_clause() -> None:
    backend = run_family(DoubleBackend)
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures


@pytest.mark.parametrize(
    ("mutant", "clause_id", "says"),
    [
        (ReconnectsAfterClose, "lifecycle.closed_handle_refuses_every_operation", "closed handle succeeded"),
        (UnusedHandleIgnoresClose, "lifecycle.closed_handle_refuses_every_operation", "before its first use"),
        (SecondCloseRaises, "lifecycle.aclose_is_idempotent", "second aclose() of a used handle raised"),
        (ClosingClosesSiblings, "lifecycle.closing_one_handle_leaves_others_working", "second handle failed"),
        (LeaksAThreadPerHandle, "lifecycle.no_thread_left_per_handle", "new: leaked-connection"),
        (StopsItsThreadWhenCollected, "lifecycle.no_thread_left_per_handle", "new: collected-connection"),
    ],
)
def test_lifecycle_mutants_are_caught(mutant: type[Any], clause_id: str, says: str) -> None:
    caught_only_by(run_family(mutant), clause_id, says)
