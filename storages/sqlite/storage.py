"""``SQLiteCheckpointStorage``: the storage over a :class:`~storages.sqlite.backend.SQLiteBackend`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import ClassVar, Self

from ..codec import CheckpointCodec, TypeRef
from ..engine import CheckpointStore
from ..integrity import IntegrityKeyInput
from ..query_options import allowance_options
from .backend import SQLiteBackend
from .config import (
    DEFAULT_BUSY_TIMEOUT_MS,
    DEFAULT_SYNCHRONOUS,
    Synchronous,
    busy_timeout_from_url,
    flag_from_url,
    path_from_url,
    synchronous_from_url,
    url_options,
)


class SQLiteCheckpointStorage(CheckpointStore[SQLiteBackend]):
    """Checkpoints in a SQLite file. Handles on one file, in any process, share one store.

    ``path``, ``busy_timeout_ms``, ``synchronous``, ``read_only`` and ``immutable`` are the
    backend's (:class:`~storages.sqlite.backend.SQLiteBackend` says what each does);
    ``statement_trace`` is its test hook. One handle per process and file is the advice
    bench/run.py's concurrent-writers section supports: tasks sharing a handle queue their
    transactions on its one thread, while separate handles contend for the file's write lock.
    """

    backend_class: ClassVar[type[SQLiteBackend]] = SQLiteBackend
    """The backend this class builds from its settings. A subclass names a subclass of it to
    store through its own backend with this class's settings, URLs and handles."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        codec: CheckpointCodec | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        synchronous: Synchronous = DEFAULT_SYNCHRONOUS,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
        read_only: bool = False,
        immutable: bool = False,
        statement_trace: Callable[[str], object] | None = None,
    ) -> None:
        backend = self.backend_class(
            path,
            busy_timeout_ms=busy_timeout_ms,
            synchronous=synchronous,
            read_only=read_only,
            immutable=immutable,
            statement_trace=statement_trace,
        )
        super().__init__(
            backend,
            codec=codec,
            allowed_checkpoint_types=allowed_checkpoint_types,
            allowed_modules=allowed_modules,
            integrity_key=integrity_key,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        codec: CheckpointCodec | None = None,
        busy_timeout_ms: int | None = None,
        synchronous: Synchronous | None = None,
    ) -> Self:
        """``sqlite:///relative/to/cwd.db`` or ``sqlite:////absolute/path.db``, optionally with
        ``?busy_timeout_ms=...``, ``?synchronous=normal``, ``?read_only=true`` and
        ``?immutable=true``; a keyword wins over the URL."""

        options = url_options(url)
        return cls(
            path_from_url(url),
            codec=codec,
            busy_timeout_ms=busy_timeout_from_url(url, options)
            if busy_timeout_ms is None
            else busy_timeout_ms,
            synchronous=synchronous_from_url(url, options) if synchronous is None else synchronous,
            read_only=flag_from_url(url, options, "read_only"),
            immutable=flag_from_url(url, options, "immutable"),
            **allowance_options(options),
        )

    @property
    def path(self) -> Path:
        return self.backend.path

    @property
    def busy_timeout_ms(self) -> int:
        return self.backend.busy_timeout_ms

    @property
    def synchronous(self) -> Synchronous:
        return self.backend.synchronous

    @property
    def read_only(self) -> bool:
        """The handle only reads (``read_only`` or ``immutable``)."""
        return self.backend.read_only

    def read_only_handle(self) -> Self:
        """A new handle on this file that only reads (``mode=ro``; ``immutable=1`` if this one
        is immutable), with this handle's codec and keys: what inspect and verify open."""
        return self.over(self.backend.new_handle(read_only=True))
