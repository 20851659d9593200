"""The toolbox a clause works with: a fresh storage handle, unique names, checkpoint builders."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from storages.contract import Capability

from .bounded import OperationWatch
from .faults import FaultInjector
from .target import StorageTarget
from .verdicts import fail

KIT_TIMESTAMP = "2024-01-01T00:00:00+00:00"
"""The timestamp of every checkpoint the kit builds without one (see ClauseContext.checkpoint)."""


def unstored_parent(checkpoint_id: str) -> str:
    """A previous id for ``checkpoint_id`` that no clause stores (as after a prune): checkpoints
    that each continue one of their own rival none (docs/contract.md, "Latest"), so only commit
    order ranks them, whatever their timestamps."""
    return f"{checkpoint_id}-unstored-parent"


_counter = itertools.count()

WORKFLOW_NAME_PREFIX = "ck-"
"""How every workflow name :meth:`ClauseContext.workflow_name` makes starts."""

SETTLE_TURNS = 8
"""How many times :meth:`ClauseContext.settle` yields to the event loop."""


class ClauseContext:
    """Given to every clause. Handles opened through it are closed when the clause ends."""

    def __init__(
        self,
        target: StorageTarget,
        storage: Any,
        capabilities: frozenset[Capability],
        watch: OperationWatch | None = None,
    ) -> None:
        self.target = target
        self.watch = (
            watch if watch is not None else OperationWatch(target.operation_timeout * target.timeout_factor)
        )
        """Bounds every call on the clause's handles (conformance/bounded.py)."""
        self.storage = self.watch.bound(storage)
        self.capabilities = capabilities
        self._handles: list[Any] = [self.storage]
        self._created_workflows: dict[str, None] = {}

    def has(self, capability: Capability) -> bool:
        return capability in self.capabilities

    @property
    def faults(self) -> FaultInjector:
        """The target's fault injector (fault clauses only run when there is one)."""
        if self.target.faults is None:
            fail("this clause needs a fault injector and the target has none")
        return self.target.faults

    def workflow_name(self, label: str = "wf") -> str:
        """A workflow name no other clause or run uses, so the kit never needs to wipe a store.

        Each name carries random bits of its own: names that differ only in a counter hash alike
        where the hash is linear (CRC-32's low bits), so a store placing workflows by such a hash
        would put a clause's workflows together far more often than chance."""
        name = f"{WORKFLOW_NAME_PREFIX}{label}-{uuid.uuid4().hex[:8]}-{next(_counter)}"
        self._created_workflows[name] = None
        return name

    @property
    def created_workflows(self) -> list[str]:
        """Every workflow name this clause made or built a checkpoint for, in first-use order; the
        kit deletes them when the clause ends (``StorageTarget.remove_workflows``)."""
        return list(self._created_workflows)

    def checkpoint(self, workflow_name: str, **fields: Any) -> Any:
        """A checkpoint of the target's checkpoint class with the given fields; without a
        timestamp, :data:`KIT_TIMESTAMP`: checkpoints built one after another never rank by their
        clock, so wherever they rival (roots committed one after another), commit order ranks
        them, as a clause that saves them concurrently expects."""
        fields.setdefault("graph_signature_hash", "sig-" + "0" * 60)
        fields.setdefault("timestamp", KIT_TIMESTAMP)
        if isinstance(workflow_name, str):
            self._created_workflows[workflow_name] = None
        return self.target.checkpoint_class(workflow_name=workflow_name, **fields)

    async def save_chain(self, workflow_name: str, length: int, **fields: Any) -> list[Any]:
        """Save ``length`` checkpoints chained by previous id; returns them oldest first."""
        chain: list[Any] = []
        previous: str | None = None
        for index in range(length):
            checkpoint = self.checkpoint(
                workflow_name, previous_checkpoint_id=previous, iteration_count=index, **fields
            )
            await self.storage.save(checkpoint)
            chain.append(checkpoint)
            previous = checkpoint.checkpoint_id
        return chain

    async def settle(self) -> None:
        """Yield to the event loop a few times, so that work a storage started in the background
        and can do at once (a flusher, a compaction, a cache's write-behind) runs before the clause
        goes on. It waits for no clock: what it checks next must hold whether or not that work ran."""
        for _ in range(SETTLE_TURNS):
            await asyncio.sleep(0)

    async def other_handle(self) -> Any:
        """Another handle on the same backend, closed when the clause ends."""
        handle = await self._new_handle(self.storage)
        self._handles.append(handle)
        return handle

    async def reopen(self) -> Any:
        """Close every handle of this clause and open a new one; it becomes ``self.storage``."""
        template = self.storage
        await self.close_handles()
        self.storage = await self._new_handle(template)
        self._handles = [self.storage]
        return self.storage

    def accepts_keyword(self, method: str, keyword: str) -> bool:
        """Whether the storage's ``method`` takes ``keyword`` (detected from its signature, as a
        capability the code shows: MAF's six methods take none of the contract's extensions)."""
        function = getattr(self.storage, method, None)
        if function is None:
            return False
        try:
            parameters = inspect.signature(function).parameters
        except (TypeError, ValueError):
            return True  # a signature Python cannot read (a C method): assume it does
        return keyword in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())

    def track_handle(self, handle: Any) -> Any:
        """Close ``handle`` (one the clause opened itself) when the clause ends; returns it bound
        by the run's operation timeout."""
        bound = self.watch.bound(handle)
        self._handles.append(bound)
        return bound

    async def factory_handle(self) -> Any:
        """A handle the target's factory opens (a store of its own where the factory makes one,
        not a handle on this clause's store), bound by the run's operation timeout and closed
        when the clause ends."""
        return self.track_handle(await self._open_from_factory())

    def track_workflow(self, name: str) -> None:
        """Count ``name`` among the workflows this clause created, for the end-of-clause cleanup."""
        if isinstance(name, str):
            self._created_workflows[name] = None

    def rebuilder(self) -> Callable[[], Awaitable[Any]] | None:
        """How to build a new storage on the same store from its settings (not ``new_handle()``,
        which may share state with this process's handles), or None when the target gives no way:
        the target's ``reopen``, else its ``process_opener``."""
        opener = self.target.reopen
        if opener is None:
            opener = _opener_from(self.target.process_opener)
        if opener is None:
            return None
        build = opener

        async def rebuild() -> Any:
            handle = build()
            if inspect.isawaitable(handle):
                handle = await handle
            return handle

        return rebuild

    async def rebuild(self) -> Any:
        """Close every handle of this clause, then build the storage anew from its settings; it
        becomes ``self.storage``. Fails when the target gives no way to rebuild (see rebuilder)."""
        rebuild = self.rebuilder()
        if rebuild is None:
            fail("the target gives no way to rebuild the store from its settings (reopen or process_opener)")
        await self.close_handles()
        self.storage = self.watch.bound(await self.watch.run("the target's reopen", rebuild()))
        self._handles = [self.storage]
        return self.storage

    async def tamper(self, checkpoint_id: str, mutate: Callable[[bytes], bytes]) -> None:
        """Rewrite a stored body behind the storage's back (needs raw_access)."""
        body = await self.storage.read_raw_body(checkpoint_id)
        if body is None:
            fail(f"read_raw_body({checkpoint_id!r}) found nothing right after a save")
        await self.storage.write_raw_body(checkpoint_id, mutate(body))

    def release(self, handle: Any) -> None:
        """Stop tracking a handle the clause closed itself; the end of the clause leaves it alone."""
        self._handles = [h for h in self._handles if h is not handle]

    async def close(self, handle: Any) -> None:
        """Close one handle now; the end of the clause does not close it again."""
        self.release(handle)
        await handle.aclose()

    async def close_handles(self) -> None:
        handles, self._handles = self._handles, []
        for handle in handles:
            close = getattr(handle, "aclose", None)
            if close is not None:
                await close()

    async def _new_handle(self, template: Any) -> Any:
        new_handle = getattr(template, "new_handle", None)
        if new_handle is not None:
            handle = new_handle()
            if inspect.isawaitable(handle):
                handle = await handle
            return self.watch.bound(handle)
        return self.watch.bound(await self._open_from_factory())

    async def _open_from_factory(self) -> Any:
        return await self.watch.run("the target's factory", self.target.open())


def _opener_from(process_opener: Any) -> Callable[[], Any] | None:
    """A zero-argument builder from a process opener: a storage URL, ``"module:function"``, or a
    callable returning either."""
    if callable(process_opener):
        process_opener = process_opener()
    if not isinstance(process_opener, str) or not process_opener:
        return None
    if "://" in process_opener:
        url = process_opener

        def from_url() -> Any:
            from storages.urls import open_storage

            return open_storage(url)

        return from_url
    module_name, _, function_name = process_opener.partition(":")
    if not module_name or not function_name:
        return None

    def from_function() -> Any:
        import importlib

        return getattr(importlib.import_module(module_name), function_name)()

    return from_function


__all__ = ["ClauseContext"]
