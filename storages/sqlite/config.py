"""SQLite options: the file path, ``sqlite://`` URLs, and the settings a handle connects with."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, Literal

from ..errors import StorageConfigurationError
from ..query_options import parse_url_options

DEFAULT_BUSY_TIMEOUT_MS = 5000
"""How long a write waits for another connection's write lock before giving up."""

Synchronous = Literal["full", "normal"]
DEFAULT_SYNCHRONOUS: Final[Synchronous] = "full"
SYNCHRONOUS_MODES: Final[tuple[Synchronous, ...]] = ("full", "normal")
"""``PRAGMA synchronous`` settings a handle may use (WAL journal mode in both).

* ``full`` (the default): every commit waits until the WAL file is on disk (fsync). An
  acknowledged save survives a process crash, an OS crash and a power cut.
* ``normal``: commits do not wait for the disk; the WAL is synced at checkpoints only. An
  acknowledged save still survives a crash of the process, and the file is never corrupted, but
  an OS crash or power cut may roll back the saves acknowledged since the last WAL checkpoint
  (each one whole: atomicity is kept, durability of the newest saves is what is given up).
"""

URL_PREFIX = "sqlite://"
URL_OPTIONS: tuple[str, ...] = ("busy_timeout_ms", "synchronous", "read_only", "immutable")
"""Query options ``sqlite://`` takes besides the common ones (see ``storages.urls``)."""


Access = Literal["rw", "ro", "immutable"]
"""How a handle opens its file: ``rw`` (created, migrated and written as needed), ``ro``
(SQLite ``mode=ro``: never created, migrated or written; still takes SQLite's read locks, so it
needs the ``-shm`` file or a directory it may create it in) or ``immutable`` (``immutable=1``:
no locks and no ``-wal``/``-shm`` at all, for read-only media; only while nothing writes it)."""


def checked_access(read_only: object, immutable: object) -> Access:
    for name, flag in (("read_only", read_only), ("immutable", immutable)):
        if not isinstance(flag, bool):
            raise StorageConfigurationError(f"{name} must be True or False, got {flag!r}")
    return "immutable" if immutable else "ro" if read_only else "rw"


def flag_from_url(url: str, options: dict[str, str], name: str) -> bool:
    text = options.get(name, "false").lower()
    if text not in ("true", "false", "1", "0"):
        raise StorageConfigurationError(f"SQLite URL {url!r}: {name} must be true or false, got {text!r}")
    return text in ("true", "1")


def checked_busy_timeout(busy_timeout_ms: object) -> int:
    if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, int) or busy_timeout_ms < 0:
        raise StorageConfigurationError(f"busy_timeout_ms must be an int >= 0, got {busy_timeout_ms!r}")
    return busy_timeout_ms


def checked_synchronous(synchronous: object) -> Synchronous:
    text = synchronous.lower() if isinstance(synchronous, str) else synchronous
    for mode in SYNCHRONOUS_MODES:
        if text == mode:
            return mode
    raise StorageConfigurationError(
        f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, got {synchronous!r}"
    )


def checked_path(path: str | os.PathLike[str]) -> Path:
    if isinstance(path, (str, os.PathLike)):
        text = os.fspath(path)
        if isinstance(text, str) and text.strip():
            if text == ":memory:":
                raise StorageConfigurationError(
                    "SQLite ':memory:' databases are private to one connection, so handles could not "
                    "share them; use a file path, or memory:// for an in-memory store"
                )
            return Path(os.path.abspath(text))
    raise StorageConfigurationError(f"SQLite path must be a non-empty str or path, got {path!r}")


def path_from_url(url: str) -> Path:
    """The file path in a ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL."""
    if not isinstance(url, str) or url[: len(URL_PREFIX)].lower() != URL_PREFIX:
        raise StorageConfigurationError(f"Not a SQLite URL: {url!r}; expected sqlite:///path.db")
    rest = url[len(URL_PREFIX) :]
    if rest in ("", "/"):
        raise StorageConfigurationError(f"SQLite URL {url!r} has no file path; expected sqlite:///path.db")
    if not rest.startswith("/"):
        raise StorageConfigurationError(
            f"SQLite URL {url!r} names a host; SQLite files are local: use sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    path, _, _ = rest[1:].partition("?")  # the query holds options, see url_options()
    return checked_path(path)


def url_options(url: str) -> dict[str, str]:
    """The options in a SQLite URL's query string; an option not in :data:`URL_OPTIONS` (or the
    common ones) raises StorageConfigurationError listing the valid ones."""
    path_from_url(url)  # a malformed URL is reported as such first
    _, _, query = url[len(URL_PREFIX) :].partition("?")
    return parse_url_options(url, query, URL_OPTIONS, what="SQLite")


def busy_timeout_from_url(url: str, options: dict[str, str]) -> int:
    text = options.get("busy_timeout_ms", "")
    try:
        return int(text) if text else DEFAULT_BUSY_TIMEOUT_MS
    except ValueError:
        raise StorageConfigurationError(
            f"SQLite URL {url!r}: busy_timeout_ms must be an int >= 0, got {text!r}"
        ) from None


def synchronous_from_url(url: str, options: dict[str, str]) -> Synchronous:
    text = options.get("synchronous", DEFAULT_SYNCHRONOUS)
    try:
        return checked_synchronous(text)
    except StorageConfigurationError as exc:
        raise StorageConfigurationError(f"SQLite URL {url!r}: {exc}") from None
