"""``fussy://``: a third-party backend whose ``from_url`` passes the URL's options to its
constructor, so an option it does not take is refused with the constructor's TypeError (not a
StorageConfigurationError), as outside authors write it. tests/kit/test_cli.py registers it."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from storages.codec import CheckpointCodec
from storages.memory import InMemoryCheckpointStorage


class FussyStorage(InMemoryCheckpointStorage):
    @classmethod
    def from_url(cls, url: str, *, codec: CheckpointCodec | None = None, **options: Any) -> FussyStorage:
        return cls(codec=codec, **dict(parse_qsl(urlsplit(url).query)), **options)
