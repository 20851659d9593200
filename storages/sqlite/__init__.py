"""SQLite storage: one file, shared safely by handles, tasks and processes (the standard library's
``sqlite3``, nothing else).

The parts: ``config`` (path, URL options, ``synchronous``), ``thread`` (a sqlite3 connection on
a daemon thread of its own), ``client`` (opening, preparing and closing it, and every call's
error translation), ``commit`` (every write as one ``BEGIN IMMEDIATE`` transaction run whole on that
thread), ``schema`` (migrations, statements and why each index exists), ``backend`` (the primitives
over them) and ``storage`` (the storage class over the backend).

Close handles with ``aclose()`` or ``async with``: that checkpoints the WAL and ends the thread
at a point the program chooses. A handle works from successive event loops (several
``asyncio.run()`` calls). Share one handle between the tasks of a process: bench/run.py's
concurrent-writers section measures one shared handle against one handle per writer.

The schema is versioned: ``schema_version`` holds the number of :data:`MIGRATIONS` applied, and
opening a file applies the missing ones in one transaction.
"""

from __future__ import annotations

from .backend import SQLiteBackend
from .config import (
    DEFAULT_BUSY_TIMEOUT_MS,
    DEFAULT_SYNCHRONOUS,
    SYNCHRONOUS_MODES,
    URL_OPTIONS,
    URL_PREFIX,
    path_from_url,
    url_options,
)
from .schema import MIGRATIONS, SCHEMA_VERSION
from .storage import SQLiteCheckpointStorage

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_MS",
    "DEFAULT_SYNCHRONOUS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SYNCHRONOUS_MODES",
    "URL_OPTIONS",
    "URL_PREFIX",
    "SQLiteBackend",
    "SQLiteCheckpointStorage",
    "path_from_url",
    "url_options",
]
