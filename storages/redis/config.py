"""Options of a Redis storage: URL parsing, the query options each part of the stack takes, and
the checks run when a storage is built (so a bad option fails there, naming itself, not at the
first command)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS, parse_url

from ..errors import StorageConfigurationError
from ..query_options import is_common_option, parse_url_options
from ..redaction import redact_url
from .keys import prefix_under

DEFAULT_PREFIX = "checkpoints"
RETRIES = 3
"""Connection errors and timeouts are retried this many times, with exponential backoff."""
MAX_CONNECTIONS = 64
"""Connections per handle built from a URL; more concurrent operations wait for one."""
CONNECTION_WAIT_SECONDS = 30.0
"""How long an operation waits for a free connection before failing."""

_OUR_OPTIONS = ("prefix", "ttl", "cluster", "allow_evicting_policy")
_DRIVER_OPTIONS = tuple(
    # redis-py's own URL options. "timeout" is BlockingConnectionPool's and would reach the
    # connection as an unknown argument; the wait for a free connection is wait_seconds here.
    name
    # redis-py also reads username and password from the query, as from the userinfo.
    for name in (
        *URL_QUERY_ARGUMENT_PARSERS,
        "client_name",
        "lib_name",
        "lib_version",
        "username",
        "password",
    )
    if name != "timeout" and not name.startswith("ssl_")
)
_TLS_OPTIONS = tuple(
    name
    for name in (
        *URL_QUERY_ARGUMENT_PARSERS,
        *("ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_ca_path"),
        *("ssl_ciphers", "ssl_password"),
    )
    if name.startswith("ssl_")
)
_POOL_OPTIONS = ("wait_seconds",)
"""Options of WaitingConnectionPool, which only a single-server storage uses."""


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """What a storage's own options say, checked."""

    prefix: str
    ttl: float | None
    allow_evicting_policy: bool

    @property
    def ttl_ms(self) -> str:
        """The TTL as the scripts take it: milliseconds, "0" for none."""
        return "0" if self.ttl is None else str(max(1, round(self.ttl * 1000)))


def checked_settings(prefix: object, ttl: object, allow_evicting_policy: object) -> RedisSettings:
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise StorageConfigurationError(
            f"Redis key prefix must be a non-empty str without braces (they would break the "
            f"hash tags), got {prefix!r}"
        )
    if ttl is not None and (
        isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0 or ttl == float("inf")
    ):
        raise StorageConfigurationError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
    if not isinstance(allow_evicting_policy, bool):
        raise StorageConfigurationError(
            f"allow_evicting_policy must be True or False, got {allow_evicting_policy!r}"
        )
    return RedisSettings(prefix, None if ttl is None else float(ttl), allow_evicting_policy)


def check_scheme(url: object) -> str:
    if not isinstance(url, str) or urlsplit(url).scheme.lower() not in ("redis", "rediss"):
        raise StorageConfigurationError(f"Not a Redis URL: {url!r}; expected redis:// or rediss://")
    return url


def url_ttl(url: str, options: dict[str, str]) -> float | None:
    ttl_text = options.get("ttl")
    try:
        return None if ttl_text is None else float(ttl_text)
    except ValueError:
        raise StorageConfigurationError(f"Redis URL {url!r}: ttl must be seconds, got {ttl_text!r}") from None


def url_option_names(url: str) -> tuple[str, ...]:
    """The query options a Redis URL of this kind takes: ours, redis-py's, TLS ones for rediss://,
    the pool's for a single server (a cluster client builds its own pools)."""
    names = (*_OUR_OPTIONS, *_DRIVER_OPTIONS)
    if urlsplit(url).scheme.lower() == "rediss":
        names += _TLS_OPTIONS
    if not url_is_cluster(url):
        names += _POOL_OPTIONS
    return names


def url_options(url: str) -> dict[str, str]:
    """A Redis URL's query options, refusing names no part of the stack takes and values
    redis-py cannot parse, so both fail when the storage is built, not at its first command."""
    query = urlsplit(url).query
    options = parse_url_options(url, query, url_option_names(url), what="Redis")
    empty = sorted({name for name, value in parse_qsl(query, keep_blank_values=True) if not value})
    if empty:
        # An empty value would otherwise mean the default (``ttl=`` no TTL, ``prefix=`` the
        # shared default prefix): a typo that silently changes what the storage does.
        raise StorageConfigurationError(
            f"Redis URL {redact_url(url)!r}: option{'s' if len(empty) > 1 else ''} "
            f"{', '.join(repr(name) for name in empty)} given without a value; give one or leave "
            "the option out"
        )
    database = urlsplit(url).path.strip("/")
    if database and not (database.isascii() and database.isdigit()):
        # redis-py ignores a path that is not a number, which would silently mean database 0.
        raise StorageConfigurationError(
            f"Redis URL {redact_url(url)!r}: the path names the database, a number (/0, /15), "
            f"not {database!r}"
        )
    try:
        driver = parse_url(driver_url(url))
    except ValueError as exc:
        raise StorageConfigurationError(f"Redis URL {redact_url(url)!r}: {exc}") from None
    if url_is_cluster(url) and driver.get("db", 0) != 0:
        raise StorageConfigurationError(
            f"Redis URL {redact_url(url)!r}: database {driver['db']} with cluster=true; a Redis "
            "Cluster has only database 0 (leave the path empty or /0)"
        )
    return options


def driver_url(url: str) -> str:
    """``url`` without the query options redis-py does not know (ours and the common ones)."""
    parts = urlsplit(url)
    query = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k not in _OUR_OPTIONS and not is_common_option(k)
    ]
    return urlunsplit(parts._replace(query=urlencode(query)))


def url_is_cluster(url: str | None) -> bool:
    return url_flag(url, "cluster")


def url_flag(url: str | None, name: str) -> bool:
    options = dict(parse_qsl(urlsplit(url or "").query, keep_blank_values=True))
    value = options.get(name, "").lower()
    if value not in ("", "0", "1", "true", "false", "yes", "no"):
        raise StorageConfigurationError(f"Redis URL {url!r}: {name} must be true or false, got {value!r}")
    return value in ("1", "true", "yes")


def describe_url(url: str, prefix: str) -> str:
    """The URL without credentials or options, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path} (prefix {prefix!r})"


def scoped_url(url: str, run_prefix: str) -> str:
    """The kit's run-prefix hook (``BackendSpec.run_prefix``): ``url`` with
    ``prefix=<given or DEFAULT_PREFIX>:<run_prefix>``, keys no other run uses."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    given = next((value for name, value in reversed(pairs) if name == "prefix"), "") or DEFAULT_PREFIX
    pairs = [(name, value) for name, value in pairs if name != "prefix"]
    pairs.append(("prefix", prefix_under(given, run_prefix)))
    return urlunsplit(parts._replace(query=urlencode(pairs, safe=":")))
