"""PostgreSQL options: the URL, the schema name and the pool bounds, checked when the storage is
built so a misspelt option fails there, not at the first query."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import StorageConfigurationError
from ..query_options import is_common_option, parse_url_options
from ..redaction import redact_url

SCHEMES = ("postgresql", "postgres")
DEFAULT_SCHEMA = "checkpoint_storages"
DEFAULT_POOL_SIZE = 10
"""Connections one handle may hold at most; more concurrent operations wait for one."""
DEFAULT_POOL_TIMEOUT = 30.0
"""Seconds an operation waits for a free connection before it fails (StorageUnavailableError)."""
DEFAULT_RETRIES = 4
"""Retries of an operation whose connection was lost, with exponential backoff between them."""

URL_OPTIONS: tuple[str, ...] = ("schema", "table_prefix", "pool_size", "pool_timeout", "retries")
"""Query options ``postgresql://`` takes besides the common ones and libpq's own (``sslmode``,
``connect_timeout``, ``application_name``, ...), which go to the driver."""

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
"""Lower-case unquoted SQL identifiers only: the name is spliced into SQL text (as an identifier,
quoted), so anything that could need escaping, or fold differently unquoted, is refused."""
RESERVED_SCHEMAS = ("information_schema", "pg_*")
"""Schemas PostgreSQL keeps for itself: ``pg_catalog``, ``pg_toast``, ``pg_temp`` and any other
``pg_`` name are refused by the server at first use (``CREATE SCHEMA``); ``information_schema``
is not, and a superuser's tables would land among the system views."""
MAX_TABLE_PREFIX = 31
"""The longest table prefix: 63 (PostgreSQL's identifier limit) minus the longest name it
precedes (``checkpoints_by_kind_and_sequence``, 32 characters)."""
_TABLE_PREFIX = re.compile(rf"[a-z_][a-z0-9_]{{0,{MAX_TABLE_PREFIX - 1}}}")


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """What a storage needs besides its connection: where its tables live and its pool bounds."""

    schema: str = DEFAULT_SCHEMA
    table_prefix: str = ""
    """Put before the name of every table, index and function of the storage, so several stores
    share one schema (the kit's runs in a schema the role owns: docs/conformance.md)."""
    pool_size: int = DEFAULT_POOL_SIZE
    pool_timeout: float = DEFAULT_POOL_TIMEOUT
    retries: int = DEFAULT_RETRIES

    def __post_init__(self) -> None:
        if not isinstance(self.schema, str) or not _SCHEMA_NAME.fullmatch(self.schema):
            raise StorageConfigurationError(
                f"PostgreSQL schema must be a lower-case identifier ([a-z_][a-z0-9_]*, at most 63 "
                f"characters), got {self.schema!r}"
            )
        if self.schema == "information_schema" or self.schema.startswith("pg_"):
            raise StorageConfigurationError(
                f"PostgreSQL schema {self.schema!r} is reserved by PostgreSQL (information_schema "
                "and every pg_* name); name a schema of your own"
            )
        if not isinstance(self.table_prefix, str) or (
            self.table_prefix and not _TABLE_PREFIX.fullmatch(self.table_prefix)
        ):
            raise StorageConfigurationError(
                f"PostgreSQL table_prefix must be a lower-case identifier ([a-z_][a-z0-9_]*, at most "
                f"{MAX_TABLE_PREFIX} characters), got {self.table_prefix!r}"
            )
        if isinstance(self.pool_size, bool) or not isinstance(self.pool_size, int) or self.pool_size < 1:
            raise StorageConfigurationError(f"pool_size must be an int >= 1, got {self.pool_size!r}")
        if (
            isinstance(self.pool_timeout, bool)
            or not isinstance(self.pool_timeout, (int, float))
            or not 0 < self.pool_timeout < float("inf")
        ):
            raise StorageConfigurationError(
                f"pool_timeout must be a positive number of seconds, got {self.pool_timeout!r}"
            )
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise StorageConfigurationError(f"retries must be an int >= 0, got {self.retries!r}")


def is_postgres_url(url: object) -> bool:
    return isinstance(url, str) and urlsplit(url).scheme.lower() in SCHEMES and "://" in url


def url_options(url: str) -> dict[str, str]:
    """A PostgreSQL URL's query options; a name neither ours, common nor libpq's raises
    StorageConfigurationError listing the valid ones."""
    if not is_postgres_url(url):
        raise StorageConfigurationError(
            f"Not a PostgreSQL URL: {redact_url(str(url))!r}; expected postgresql://user@host:port/db"
        )
    known = (*URL_OPTIONS, *_libpq_options())
    options = parse_url_options(url, urlsplit(url).query, known, what="PostgreSQL")
    empty = sorted(name for name, value in options.items() if value == "")
    if empty:
        # An empty value would silently mean the default (``?schema=`` the default schema, libpq's
        # ``sslmode=`` its default): a half-written URL is refused, not guessed at.
        raise StorageConfigurationError(
            f"PostgreSQL URL {redact_url(url)!r}: option{'s' if len(empty) > 1 else ''} "
            f"{', '.join(repr(name) for name in empty)} given without a value; give one or leave "
            "the option out"
        )
    return options


def options_from_url(url: str, overrides: Mapping[str, object]) -> PostgresOptions:
    """Our options from the URL's query, a keyword in ``overrides`` (not None) winning."""
    query = url_options(url)
    values: dict[str, object] = {}
    conversions = (
        ("schema", str),
        ("table_prefix", str),
        ("pool_size", int),
        ("pool_timeout", float),
        ("retries", int),
    )
    for name, convert in conversions:
        given = overrides.get(name)
        if given is not None:
            values[name] = given
        elif name in query:
            try:
                values[name] = convert(query[name])
            except ValueError:
                raise StorageConfigurationError(
                    f"PostgreSQL URL {redact_url(url)!r}: {name} must be {convert.__name__}, "
                    f"got {query[name]!r}"
                ) from None
    return PostgresOptions(**values)  # type: ignore[arg-type]


def driver_conninfo(url: str) -> str:
    """``url`` without our own and the common query options: what libpq connects with."""
    parts = urlsplit(url)
    kept = [
        (name, value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
        if name not in URL_OPTIONS and not is_common_option(name)
    ]
    scheme = "postgresql"  # libpq takes both spellings; one keeps describe() stable
    conninfo = urlunsplit((scheme, parts.netloc, parts.path, urlencode(kept), ""))
    try:
        from psycopg.conninfo import conninfo_to_dict

        conninfo_to_dict(conninfo)
    except Exception as exc:  # psycopg.ProgrammingError: libpq refused the URL
        raise StorageConfigurationError(f"PostgreSQL URL {redact_url(url)!r}: {exc}") from None
    return conninfo


def describe_url(url: str, schema: str, table_prefix: str = "") -> str:
    """``postgresql://user@host:port/db (schema 'x')``: never the password, nor any query value
    but the schema and table prefix."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"postgresql://{user}{host}{port}{parts.path} ({describe_namespace(schema, table_prefix)})"


def describe_namespace(schema: str, table_prefix: str) -> str:
    """``schema 'x'``, or ``schema 'x', table prefix 'p'``."""
    return f"schema {schema!r}" + (f", table prefix {table_prefix!r}" if table_prefix else "")


def _libpq_options() -> tuple[str, ...]:
    """Every connection keyword the installed libpq knows (``sslmode``, ``connect_timeout``, ...)."""
    try:
        from psycopg import pq
    except ImportError:  # the extra is missing: open_storage reported it before we got here
        return ()
    return tuple(
        option.keyword.decode() if isinstance(option.keyword, bytes) else str(option.keyword)
        for option in pq.Conninfo.get_defaults()
    )


def scoped_url(url: str, run_prefix: str) -> str:
    """The kit's run-prefix hook (``BackendSpec.run_prefix``): ``url`` whose ``table_prefix``
    option gets ``<run_prefix>_`` appended: tables of the run's own inside the URL's schema (a
    table name takes no hyphens, so they become underscores). The schema stays the one given, so
    the kit needs exactly the privileges the storage needs there: a role that owns one schema and
    may create nothing else is certified in it (docs/postgres.md)."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    given = next((value for name, value in reversed(pairs) if name == "table_prefix"), "")
    pairs = [(name, value) for name, value in pairs if name != "table_prefix"]
    pairs.append(("table_prefix", f"{given}{run_prefix.replace('-', '_')}_"))
    return urlunsplit(parts._replace(query=urlencode(pairs)))


__all__ = [
    "scoped_url",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_RETRIES",
    "DEFAULT_SCHEMA",
    "MAX_TABLE_PREFIX",
    "RESERVED_SCHEMAS",
    "SCHEMES",
    "URL_OPTIONS",
    "PostgresOptions",
    "describe_namespace",
    "describe_url",
    "driver_conninfo",
    "is_postgres_url",
    "options_from_url",
    "url_options",
]
