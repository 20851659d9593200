"""``mine://``: a third-party backend as an outside author writes one (tests only).

The storage keeps checkpoints in this process's memory; what matters is that it is found and
opened only through the registry's entry point, never by name in checkpoint-storages.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from storages import InMemoryCheckpointStorage, StorageConfigurationError
from storages.codec import CheckpointCodec
from storages.query_options import allowance_options, parse_url_options
from storages.registry import BackendSpec

BACKEND = BackendSpec(
    name="mine",
    schemes=("mine",),
    factory="mine_backend:MineStorage",
    embedded="mine_backend.kit:EMBEDDED",
    server_url_env="MINE_SERVER_URL",
    summary="a third-party backend over this process's memory (tests only)",
)


class MineStorage(InMemoryCheckpointStorage):
    """An in-memory store opened as ``mine://``."""

    @classmethod
    def from_url(cls, url: str, *, codec: CheckpointCodec | None = None, **options: Any) -> MineStorage:
        parts = urlsplit(url)
        if parts.scheme != "mine" or parts.netloc or parts.path:
            raise StorageConfigurationError(f"mine URL {url!r}: expected mine:// with no host or path")
        return cls(codec=codec, **allowance_options(parse_url_options(url, parts.query, (), what="mine")))

    def describe(self) -> str:
        return "mine://"
