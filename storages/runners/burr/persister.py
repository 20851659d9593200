"""Burr's persisters over any storage: :class:`StorageStatePersister` (sync) and
:class:`AsyncStorageStatePersister` (async).

``ApplicationBuilder().with_state_persister(p).initialize_from(p, resume_at_next_action=True, ...)``
with either: the sync one for ``build()``/``run()``, the async one for ``abuild()``/``arun()``.
The sync persister runs every storage call on a private loop of its own (storages.runners.loop_thread), so
it never re-enters or blocks a running loop other than by the wait Burr's synchronous API asks for;
the async one runs on the caller's loop. Both do the same operations (storages.runners.burr.steps).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Self, TypeVar

from burr.common.types import BaseCopyable
from burr.core.persistence import AsyncBaseStatePersister, BaseStatePersister, PersistedStateData
from burr.core.state import State

from ...engine import CheckpointStore
from ...errors import StorageConfigurationError
from ...redaction import redact_url
from ...urls import open_storage
from ..loop_thread import LoopThread
from .mapping import workflow_for
from .steps import StepRecords

T = TypeVar("T")


class _Opened:
    """The storage a persister uses: opened from a URL (and owned), or a handle given to it."""

    def __init__(self, storage: str | Any, *, new_handle: bool) -> None:
        if isinstance(storage, str):
            self.url: str | None = storage
            self.handle: Any = open_storage(storage)
            self.owned = True
        elif storage is None:
            raise StorageConfigurationError("a Burr persister needs a storage URL or a storage")
        else:
            self.url = None
            make: Any = getattr(storage, "new_handle", None)
            self.owned = new_handle and callable(make)
            self.handle = make() if self.owned else storage

    def describe(self) -> str:
        if isinstance(self.handle, CheckpointStore):
            return self.handle.describe()
        return redact_url(self.url) if self.url else type(self.handle).__name__


class StorageStatePersister(BaseStatePersister, BaseCopyable):
    """Burr's synchronous persister (``BaseStateSaver`` and ``BaseStateLoader``) over a storage.

    ``StorageStatePersister("sqlite:///burr.db")`` opens the storage; ``StorageStatePersister(storage)``
    uses a new handle on a storage you hold (you keep closing yours). ``serde_kwargs`` go to
    Burr's ``State.serialize``/``deserialize``, as with Burr's own persisters. Close it with
    :meth:`cleanup` (or use it as a context manager).
    """

    def __init__(self, storage: str | Any, *, serde_kwargs: Mapping[str, Any] | None = None) -> None:
        self._opened = _Opened(storage, new_handle=True)
        self.serde_kwargs = dict(serde_kwargs or {})
        self._loop = LoopThread(name=f"burr-persister {self._opened.describe()}")
        self._records = StepRecords(
            self._opened.handle, serde_kwargs=self.serde_kwargs, naming=self.workflow_name
        )

    @property
    def storage(self) -> Any:
        """The storage handle this persister uses (on its private loop)."""
        return self._opened.handle

    def workflow_name(self, partition_key: str, app_id: str) -> str:
        """The workflow of one application: :func:`storages.runners.burr.mapping.workflow_for` (a subclass
        may name them otherwise; ``list_app_ids`` finds applications by the default names)."""
        return workflow_for(partition_key, app_id)

    def __repr__(self) -> str:
        return f"<StorageStatePersister over {self._opened.describe()}>"

    def initialize(self) -> None:
        """Open the storage (a first round trip: a wrong URL fails here). Nothing to create."""

        async def open_it() -> None:
            await self.storage.__aenter__()

        self._run(open_it)

    def is_initialized(self) -> bool:
        """Always True: a storage creates what it needs on first use."""
        return True

    def load(
        self, partition_key: str | None, app_id: str | None, sequence_id: int | None = None, **kwargs: Any
    ) -> PersistedStateData | None:
        return self._run(lambda: self._records.load(partition_key, app_id, sequence_id))  # type: ignore[return-value]

    def list_app_ids(self, partition_key: str | None, **kwargs: Any) -> list[str]:
        return self._run(lambda: self._records.list_app_ids(partition_key))

    def save(
        self,
        partition_key: str | None,
        app_id: str,
        sequence_id: int,
        position: str,
        state: State[Any],
        status: Literal["completed", "failed"],
        **kwargs: Any,
    ) -> None:
        self._run(lambda: self._records.save(partition_key, app_id, sequence_id, position, state, status))

    def copy(self) -> Self:
        """A persister of its own over a new handle on the same store (Burr's parallel runs)."""
        source = self._opened.url if self._opened.url is not None else self._opened.handle
        return type(self)(source, serde_kwargs=self.serde_kwargs)

    def cleanup(self) -> None:
        """Close the storage handle (when this persister opened it) and the private loop."""
        self._loop.close(self._opened.handle.aclose if self._opened.owned else None)

    close = cleanup

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()

    def __getstate__(self) -> dict[str, Any]:
        if self._opened.url is None:
            raise TypeError(
                "a StorageStatePersister over a storage object cannot be pickled; build it from a URL"
            )
        return {"url": self._opened.url, "serde_kwargs": self.serde_kwargs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["url"], serde_kwargs=state["serde_kwargs"])

    def _run(self, call: Callable[[], Awaitable[T]]) -> T:
        return self._loop.run(call)


class AsyncStorageStatePersister(AsyncBaseStatePersister, BaseCopyable):
    """Burr's async persister (``AsyncBaseStateSaver`` and ``AsyncBaseStateLoader``) over a storage,
    on the caller's loop.

    ``AsyncStorageStatePersister("redis://...")`` opens the storage (closed by :meth:`cleanup` or
    ``async with``); ``AsyncStorageStatePersister(storage)`` uses a storage you hold and leaves
    closing it to you.
    """

    def __init__(self, storage: str | Any, *, serde_kwargs: Mapping[str, Any] | None = None) -> None:
        self._opened = _Opened(storage, new_handle=False)
        self.serde_kwargs = dict(serde_kwargs or {})
        self._records = StepRecords(
            self._opened.handle, serde_kwargs=self.serde_kwargs, naming=self.workflow_name
        )

    @classmethod
    def from_url(
        cls, url: str, *, serde_kwargs: Mapping[str, Any] | None = None
    ) -> AsyncStorageStatePersister:
        """The persister over the storage at ``url`` (it connects on first use)."""
        return cls(url, serde_kwargs=serde_kwargs)

    @property
    def storage(self) -> Any:
        return self._opened.handle

    def workflow_name(self, partition_key: str, app_id: str) -> str:
        """The workflow of one application (see StorageStatePersister.workflow_name)."""
        return workflow_for(partition_key, app_id)

    def __repr__(self) -> str:
        return f"<AsyncStorageStatePersister over {self._opened.describe()}>"

    async def initialize(self) -> None:
        """Open the storage (a first round trip). Nothing to create."""
        await self.storage.__aenter__()

    async def is_initialized(self) -> bool:
        """Always True: a storage creates what it needs on first use."""
        return True

    async def load(
        self, partition_key: str | None, app_id: str | None, sequence_id: int | None = None, **kwargs: Any
    ) -> PersistedStateData | None:
        return await self._records.load(partition_key, app_id, sequence_id)  # type: ignore[return-value]

    async def list_app_ids(self, partition_key: str | None, **kwargs: Any) -> list[str]:
        return await self._records.list_app_ids(partition_key)

    async def save(
        self,
        partition_key: str | None,
        app_id: str,
        sequence_id: int,
        position: str,
        state: State[Any],
        status: Literal["completed", "failed"],
        **kwargs: Any,
    ) -> None:
        await self._records.save(partition_key, app_id, sequence_id, position, state, status)

    def copy(self) -> Self:
        source = self._opened.url if self._opened.url is not None else self._opened.handle
        return type(self)(source, serde_kwargs=self.serde_kwargs)

    async def cleanup(self) -> None:
        """Close the storage when this persister opened it from a URL."""
        if self._opened.owned:
            await self._opened.handle.aclose()

    close = cleanup

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.cleanup()


__all__ = ["AsyncStorageStatePersister", "StorageStatePersister"]
