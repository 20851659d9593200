"""PostgreSQL storage (needs the ``postgres`` extra: psycopg 3 and psycopg_pool); see
docs/postgres.md. Parts: ``config`` (URL and options), ``client`` (pool, retries, driver errors),
``schema`` (tables, migrations, the save function), ``commit`` (how writes are atomic),
``storage`` (the primitives)."""

from __future__ import annotations

from .backend import PostgresBackend
from .config import DEFAULT_POOL_SIZE, DEFAULT_SCHEMA, URL_OPTIONS, PostgresOptions, url_options
from .schema import MIGRATIONS, SCHEMA_VERSION
from .storage import PostgresCheckpointStorage

__all__ = [
    "DEFAULT_POOL_SIZE",
    "DEFAULT_SCHEMA",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "URL_OPTIONS",
    "PostgresBackend",
    "PostgresCheckpointStorage",
    "PostgresOptions",
    "url_options",
]
