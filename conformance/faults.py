"""Fault injection: how a target lets the ``faults`` family break its backend on purpose.

A backend's test harness (or a built-in embedded backend) passes a :class:`FaultInjector` as
``StorageTarget(faults=...)``. Each fault clause requires one :class:`Fault`; a target whose
injector does not list it gets that clause reported as skipped, never as passed.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import ClassVar

FAULT_CALL_SECONDS = 60.0
"""Seconds one storage call of a clause that restarts a server, cuts a connection or answers with
server errors may take: a driver reconnecting or retrying with backoff is slow, not stuck."""


class Fault(str, enum.Enum):
    """A kind of failure an injector can cause."""

    SERVER_RESTART = "server_restart"
    """Kill the server process with SIGKILL and start it again on the same data."""
    CONNECTION_CUT = "connection_cut"
    """Cut the connection while a save is in flight, after the request left the client."""
    TRANSIENT_ERRORS = "transient_errors"
    """Answer the next requests with retryable server errors (HTTP 500/503 or the like)."""
    CONDITIONAL_CONFLICTS = "conditional_conflicts"
    """Answer the next conditional writes with 409 ConditionalRequestConflict or 412."""
    CRASH_BETWEEN_WRITES = "crash_between_writes"
    """Stop a save dead after its first backend write, as if the process died there."""

    def __str__(self) -> str:
        return self.value


class FaultInjector:
    """Breaks one backend on purpose. Override the methods for the faults you list in ``faults``."""

    faults: ClassVar[frozenset[Fault]] = frozenset()

    async def restart_server(self) -> None:
        """SERVER_RESTART: kill -9 the server and start it again; returns once it accepts clients.
        Existing handles may need to reconnect; the clause opens new ones."""
        raise NotImplementedError

    @asynccontextmanager
    async def cut_connection_during_save(self) -> AsyncIterator[None]:
        """CONNECTION_CUT: inside the block, the next save's connection is cut mid-request."""
        raise NotImplementedError
        yield  # pragma: no cover

    @asynccontextmanager
    async def transient_errors(self, count: int) -> AsyncIterator[None]:
        """TRANSIENT_ERRORS: inside the block, the next ``count`` requests fail retryably."""
        raise NotImplementedError
        yield  # pragma: no cover

    @asynccontextmanager
    async def conditional_conflicts(self, count: int) -> AsyncIterator[None]:
        """CONDITIONAL_CONFLICTS: inside the block, the next ``count`` conditional writes get 409/412."""
        raise NotImplementedError
        yield  # pragma: no cover

    @asynccontextmanager
    async def crash_between_writes(self) -> AsyncIterator[None]:
        """CRASH_BETWEEN_WRITES: inside the block, the next save stops after its first write and
        raises :class:`SimulatedCrash`."""
        raise NotImplementedError
        yield  # pragma: no cover


class SimulatedCrash(BaseException):
    """Raised by an injector to stop a save as a process death would. A BaseException, so no
    storage code can catch it and tidy up, exactly as after a real crash."""


__all__ = ["FAULT_CALL_SECONDS", "Fault", "FaultInjector", "SimulatedCrash"]
