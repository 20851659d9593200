"""``open_storage(url)``: build any registered storage from a URL.

URL forms:

* ``memory://``: a fresh in-memory store.
* ``sqlite:///relative/path.db`` and ``sqlite:////absolute/path.db``: a SQLite file.
* ``redis://[user:password@]host:port/db?prefix=...&ttl=...`` (``rediss://`` for TLS; add
  ``cluster=true`` for a Redis Cluster): a Redis server, see ``docs/redis.md``.
* ``s3://bucket/prefix?endpoint_url=...&region=...``: objects in S3 or an S3-compatible store,
  see ``docs/s3.md``.

Every scheme also takes ``allowed_checkpoint_types=mod:Class,mod:Other`` and
``allowed_modules=myapp,otherapp``: the types a stored body may name beyond the built-in ones (see
storages/allowlist.py), as the storages' keywords of the same names.

Every scheme also takes the integrity options (docs/integrity.md): ``integrity_key_env=NAME``
names an environment variable holding the signing key (hex, or base64 prefixed with
``base64:``), never the key itself; ``integrity_verify_keys_env=OLD1,OLD2`` names variables holding
keys that only verify (a rotation); ``integrity_accept_unsigned=true`` is the migration mode.

Third-party backends add schemes of their own (storages/registry.py, docs/registry.md). An
unknown scheme, or a scheme whose optional dependency is missing, raises a typed error that says
what to do; so does an option a scheme does not take (the error lists those it takes).

Where options are declared: each backend module's ``URL_OPTIONS`` (the options of its scheme),
plus ``COMMON_URL_OPTIONS`` (options every scheme takes). A backend's ``from_url`` reads its
query through ``parse_url_options``, which refuses anything else; both live in
:mod:`storages.query_options`, a library module backends import at module level (this module
opens storages, so a backend importing it would be a cycle).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from .engine import CheckpointStore
from .errors import StorageConfigurationError
from .integrity import IntegrityKeys, key_from_env
from .query_options import (
    COMMON_URL_OPTIONS,
    INTEGRITY_OPTIONS,
    AllowanceOptions,
    allowance_options,
    parse_url_options,
)
from .redaction import redact_url
from .registry import registry


def supported_schemes() -> list[str]:
    """The URL schemes :func:`open_storage` opens: the built-in backends' and the registered
    third-party ones' (storages.registry)."""
    return registry().schemes()


def open_storage(url: str, **options: Any) -> CheckpointStore:
    """Build a storage from ``url``; ``options`` go to the backend (e.g. ``codec=``), except
    ``integrity_key=``, which every scheme takes (as the URL option ``integrity_key_env``).

    The backend is the registry's for the URL's scheme (storages.registry): a built-in one or one
    a third-party distribution registered. The storage connects lazily on first use; close it
    with ``aclose()`` or ``async with``.
    """
    if not isinstance(url, str) or "://" not in url:
        shown = redact_url(url) if isinstance(url, str) else type(url).__name__
        schemes = ", ".join(s + "://" for s in supported_schemes())
        raise StorageConfigurationError(f"Not a storage URL: {shown!r}; expected one of {schemes}")
    scheme = urlsplit(url).scheme.lower()
    backends = registry()
    backend = backends.for_scheme(scheme)  # raises for a scheme a refused backend claimed
    if backend is None:
        refused = "".join(f"; {problem}" for problem in backends.problems)
        raise StorageConfigurationError(
            f"Unknown storage URL scheme {scheme!r} in {redact_url(url)!r}; supported: "
            + ", ".join(s + "://" for s in supported_schemes())
            + refused
        )
    backend.check_installed(scheme)  # before the URL's own options are read: the extra comes first
    url, integrity = _take_options(url, INTEGRITY_OPTIONS)
    keys = options.pop("integrity_key", None)
    if integrity:
        if keys is not None:
            raise StorageConfigurationError(
                f"Storage URL {redact_url(url)!r}: give integrity_key= or integrity_key_env=, not both"
            )
        keys = _integrity_keys(url, integrity)
    storage = backend.open(url, scheme, **options)
    if keys is not None:
        storage.configure_integrity(keys)
    return storage


def _integrity_keys(url: str, options: dict[str, list[str]]) -> IntegrityKeys:
    """The keys the integrity options name, read from the environment (never from the URL)."""
    names = options.get("integrity_key_env", [])
    if len(names) != 1:
        raise StorageConfigurationError(
            f"Storage URL {redact_url(url)!r}: the integrity options need exactly one "
            "integrity_key_env=NAME (the environment variable holding the signing key)"
        )
    flags = options.get("integrity_accept_unsigned", ["false"])
    if len(flags) != 1 or flags[0].lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise StorageConfigurationError(
            f"Storage URL {redact_url(url)!r}: integrity_accept_unsigned must be true or false"
        )
    verifying = [
        key_from_env(name, option="integrity_verify_keys_env")
        for name in options.get("integrity_verify_keys_env", [])
    ]
    return IntegrityKeys(
        key_from_env(names[0]),
        verifying_keys=verifying,
        accept_unsigned=flags[0].lower() in ("true", "1", "yes"),
    )


def _take_options(url: str, taken: tuple[str, ...]) -> tuple[str, dict[str, list[str]]]:
    """``url`` without the ``taken`` options, and those options' comma-separated items."""
    parts = urlsplit(url)
    if not parts.query:
        return url, {}
    kept: list[tuple[str, str]] = []
    allowances: dict[str, list[str]] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in taken:
            allowances.setdefault(name, []).extend(item.strip() for item in value.split(",") if item.strip())
        else:
            kept.append((name, value))
    if not allowances:
        return url, {}
    # Rebuilt by hand: urlunsplit would turn sqlite:////abs/path into sqlite://abs/path.
    head, _, rest = url.partition("?")
    _, hash_sign, fragment = rest.partition("#")
    query = "?" + urlencode(kept) if kept else ""
    return head + query + hash_sign + fragment, allowances


__all__ = [
    "COMMON_URL_OPTIONS",
    "AllowanceOptions",
    "allowance_options",
    "INTEGRITY_OPTIONS",
    "open_storage",
    "parse_url_options",
    "supported_schemes",
]
