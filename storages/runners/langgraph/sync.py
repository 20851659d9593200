"""StorageSaver's synchronous methods, as LangGraph's own async savers provide them: each runs
its async counterpart on the loop the saver was last used from, and only from another thread."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

T = TypeVar("T")

_Tuples = list[CheckpointTuple]
"""An alias because SyncMethods.list shadows list."""


class SyncMethods(BaseCheckpointSaver[str]):
    """The sync half of a saver whose async methods record ``loop`` each time they run."""

    loop: asyncio.AbstractEventLoop | None

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(lambda: self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> _Tuples:
            return [item async for item in self.alist(config, filter=filter, before=before, limit=limit)]

        yield from self._sync(collect)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(lambda: self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._sync(lambda: self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(lambda: self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(lambda: self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(lambda: self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(lambda: self.aprune(thread_ids, strategy=strategy))

    def _sync(self, call: Callable[[], Awaitable[T]]) -> T:
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or loop.is_closed():
            raise asyncio.InvalidStateError(
                "Synchronous calls to StorageSaver are only allowed from a thread other than the "
                "event loop's that uses it; use the async interface (`await saver.aget_tuple(...)`, "
                "`await graph.ainvoke(...)`)."
            )

        async def run() -> T:
            return await call()

        return asyncio.run_coroutine_threadsafe(run(), loop).result()


__all__ = ["SyncMethods"]
