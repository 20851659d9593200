"""``InMemoryCheckpointStorage``: the storage over a :class:`~storages.memory.backend.MemoryBackend`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Self
from urllib.parse import urlsplit

from ..codec import CheckpointCodec, TypeRef
from ..engine import CheckpointStore
from ..errors import StorageConfigurationError
from ..integrity import IntegrityKeyInput
from ..query_options import allowance_options, parse_url_options
from ..redaction import redact_url
from .backend import MemoryBackend

URL_OPTIONS: tuple[str, ...] = ()
"""Query options ``memory://`` takes besides the common ones (see ``storages.urls``)."""


class InMemoryCheckpointStorage(CheckpointStore[MemoryBackend]):
    """Checkpoints in this process's memory. Handles from :meth:`new_handle` share one store."""

    backend_class: ClassVar[type[MemoryBackend]] = MemoryBackend
    """The backend this class builds from its settings. A subclass names a subclass of it to
    store through its own backend with this class's settings, URLs and handles."""

    def __init__(
        self,
        *,
        codec: CheckpointCodec | None = None,
        allowed_checkpoint_types: Iterable[TypeRef] = (),
        allowed_modules: Iterable[str] = (),
        integrity_key: IntegrityKeyInput | None = None,
    ) -> None:
        super().__init__(
            self.backend_class(),
            # The bytes never leave this process: a type met at save is trusted for this store's
            # reads, as MAF's own in-memory storage keeps any object.
            codec=CheckpointCodec(trust_saved_types=True) if codec is None else codec,
            allowed_checkpoint_types=allowed_checkpoint_types,
            allowed_modules=allowed_modules,
            integrity_key=integrity_key,
        )

    @classmethod
    def from_url(cls, url: str, *, codec: CheckpointCodec | None = None) -> Self:
        """``memory://``: a fresh store of its own; it names no host and no path."""

        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme.lower() != "memory":
            raise StorageConfigurationError(f"Not a memory URL: {url!r}; expected memory://")
        if parts.netloc or parts.path or parts.fragment:
            raise StorageConfigurationError(
                f"memory URL {redact_url(url)!r} names a host or path; an in-memory store is this "
                "process's memory: use memory:// (handles share a store through new_handle())"
            )
        options = parse_url_options(url, parts.query, URL_OPTIONS, what="memory")
        return cls(codec=codec, **allowance_options(options))
