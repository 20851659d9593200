"""The URL query options every scheme shares, and how a backend reads its URL's query.

A library module: it imports nothing of storages but the errors and redaction, so every backend
imports it at module level (``storages.urls`` builds storages from URLs and so comes after the
backends). ``open_storage`` takes :data:`INTEGRITY_OPTIONS` itself; a backend's ``from_url``
reads the rest through :func:`parse_url_options`, which refuses a name the backend did not
declare in its ``URL_OPTIONS`` and that is not common.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TypedDict
from urllib.parse import parse_qsl

from .errors import StorageConfigurationError
from .redaction import redact_url


class AllowanceOptions(TypedDict):
    """The allow-list options of a URL, as the storage keywords of the same names (each a
    comma-separated string; the storage splits it)."""

    allowed_checkpoint_types: str
    allowed_modules: str


COMMON_URL_OPTIONS: tuple[str, ...] = tuple(AllowanceOptions.__annotations__)
"""Query options every scheme takes, on top of its backend's own ``URL_OPTIONS``: the codec's
allow-list (comma-separated ``module:qualname`` keys, comma-separated module names)."""


def allowance_options(options: Mapping[str, str]) -> AllowanceOptions:
    """The allow-list options among a URL's parsed ``options`` (empty where not given)."""
    return AllowanceOptions(
        allowed_checkpoint_types=options.get("allowed_checkpoint_types", ""),
        allowed_modules=options.get("allowed_modules", ""),
    )


def parse_url_options(url: str, query: str, scheme_options: Collection[str], *, what: str) -> dict[str, str]:
    """The options in ``query`` (a URL's query string; the last value of a name wins), refusing
    any name outside ``scheme_options`` and :data:`COMMON_URL_OPTIONS`, so a misspelt option
    fails when the storage is built instead of being ignored or failing at first use."""
    valid = sorted({*scheme_options, *COMMON_URL_OPTIONS})
    pairs = parse_qsl(query, keep_blank_values=True)
    unknown = sorted({name for name, _ in pairs if name not in valid})
    if unknown:
        raise StorageConfigurationError(
            f"{what} URL {redact_url(url)!r}: unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(name) for name in unknown)}; valid options: "
            + (", ".join(valid) if valid else "none")
        )
    return dict(pairs)


INTEGRITY_OPTIONS = ("integrity_key_env", "integrity_verify_keys_env", "integrity_accept_unsigned")
"""URL options every scheme takes: where the integrity keys are (handled here, not by the backend)."""


def is_common_option(name: str) -> bool:
    """Whether every scheme takes ``name`` (read at call time, so the one list decides)."""
    return name in COMMON_URL_OPTIONS


__all__ = [
    "COMMON_URL_OPTIONS",
    "INTEGRITY_OPTIONS",
    "AllowanceOptions",
    "allowance_options",
    "is_common_option",
    "parse_url_options",
]
