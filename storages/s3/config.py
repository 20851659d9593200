"""S3 configuration: the options a handle is built from, ``s3://`` URL parsing, validation.

Everything here is checked when the storage is built, never at its first request: a bad bucket
name or option raises :class:`~storages.errors.StorageConfigurationError` naming it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from ..errors import StorageConfigurationError
from ..query_options import allowance_options, parse_url_options
from ..redaction import redact_url

URL_SCHEME = "s3"
URL_OPTIONS: tuple[str, ...] = (
    "endpoint_url",
    "region",
    "checksum",
    "create_bucket",
    "max_workers",
    "max_attempts",
    "conflict_retries",
    "sse",
    "sse_kms_key_id",
    "unsafe_single_writer",
)
"""Query options ``s3://`` takes besides the common ones (see ``storages.urls``)."""
DEFAULT_MAX_WORKERS = 16
"""Threads (and pooled connections) per handle."""
DEFAULT_MAX_ATTEMPTS = 5
"""botocore attempts per request for 500/503/throttling (``standard`` retry mode)."""
DEFAULT_CONFLICT_RETRIES = 8
"""Retries of a conditional write answered 409, or 412 without cause, before giving up."""
CHECKSUM_MODES = ("when_supported", "when_required")

_BUCKET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,61}[A-Za-z0-9]")
"""What S3 (and botocore, which refuses other names before sending) accepts as a bucket name:
3 to 63 letters, digits, dots, hyphens and (legacy buckets) underscores and capitals, starting
and ending with a letter or digit."""
_BOOLEANS = {"": False, "0": False, "false": False, "no": False, "1": True, "true": True, "yes": True}


@dataclass(frozen=True)
class S3Settings:
    """One handle's settings, validated. ``client`` is an injected boto3 client (shared by every
    handle and never closed by the storage), or None to build one per handle."""

    bucket: str
    prefix: str = ""
    """Normalised: empty, or without a leading and with one trailing ``/``."""
    client: Any = None
    endpoint_url: str | None = None
    region: str | None = None
    put_parameters: Mapping[str, Any] = field(default_factory=dict)
    checksum: str | None = None
    create_bucket: bool = False
    max_workers: int = DEFAULT_MAX_WORKERS
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    conflict_retries: int = DEFAULT_CONFLICT_RETRIES
    unsafe_single_writer: bool = False
    """Skip the check that the store enforces conditional writes, emulate them by reading first
    (safe for one writer only) and withdraw fencing; see docs/s3.md."""
    read_only: bool = False
    """Only read: opening checks the bucket exists (StoreNotFoundError if not) and writes
    nothing (no bucket, no conditional-write probe); every write raises."""

    def __post_init__(self) -> None:
        check_bucket_name(self.bucket)
        if not isinstance(self.prefix, str):
            raise StorageConfigurationError(f"S3 prefix must be a str, got {self.prefix!r}")
        stripped = self.prefix.strip("/")
        object.__setattr__(self, "prefix", stripped + "/" if stripped else "")
        object.__setattr__(self, "put_parameters", dict(self.put_parameters or {}))
        for name, low in (("max_workers", 1), ("max_attempts", 1), ("conflict_retries", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise StorageConfigurationError(f"{name} must be an int >= {low}, got {value!r}")
        if self.checksum not in (None, *CHECKSUM_MODES):
            raise StorageConfigurationError(
                f"checksum must be 'when_supported' or 'when_required', got {self.checksum!r}"
            )
        for flag in ("unsafe_single_writer", "read_only"):
            if not isinstance(getattr(self, flag), bool):
                raise StorageConfigurationError(f"{flag} must be a bool, got {getattr(self, flag)!r}")

    def describe(self) -> str:
        where = f"{URL_SCHEME}://{self.bucket}/{self.prefix}"
        return f"{where} (unsafe_single_writer)" if self.unsafe_single_writer else where


def check_bucket_name(bucket: object) -> None:
    if not isinstance(bucket, str) or _BUCKET_NAME.fullmatch(bucket) is None or ".." in bucket:
        raise StorageConfigurationError(
            f"Invalid S3 bucket name {bucket!r}: a bucket name is 3 to 63 characters, letters, "
            "digits, dots and hyphens, starting and ending with a letter or digit"
        )


def url_options(url: str) -> dict[str, str]:
    """An S3 URL's query options; a name not in :data:`URL_OPTIONS` (or the common ones) raises
    StorageConfigurationError listing the valid ones."""
    return parse_url_options(url, urlsplit(url).query, URL_OPTIONS, what="S3")


def parse_url(url: str, options: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """``s3://bucket/prefix?...`` as (bucket, prefix, keywords for the storage); ``options``
    (keywords given in code) win over the URL's query."""
    parts = urlsplit(url)
    if parts.scheme.lower() != URL_SCHEME or not parts.netloc:
        raise StorageConfigurationError(f"Not an S3 URL: {redact_url(url)!r}; expected s3://bucket/prefix")
    if "@" in parts.netloc:
        # Neither quoted nor used: what precedes the bucket would be an access key and a secret.
        raise StorageConfigurationError(
            f"S3 URL {redact_url(url)!r} names credentials before the bucket (user:password@); an "
            "S3 URL takes none: give them as boto3 finds them (AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, a profile, an instance role)"
        )
    parsed = url_options(url)
    settings: dict[str, Any] = dict(allowance_options(parsed))
    put_parameters: dict[str, Any] = {}
    for name, value in parsed.items():
        if name in ("endpoint_url", "region", "checksum"):
            settings[name] = value or None
        elif name in ("create_bucket", "unsafe_single_writer"):
            # The opt-out is never implied: an empty value is refused, not read as false.
            if value.lower() not in _BOOLEANS or (name == "unsafe_single_writer" and not value):
                raise StorageConfigurationError(
                    f"{name} in {redact_url(url)!r} must be true or false, got {value!r}"
                )
            settings[name] = _BOOLEANS[value.lower()]
        elif name in ("max_workers", "max_attempts", "conflict_retries"):
            try:
                settings[name] = int(value)
            except ValueError:
                raise StorageConfigurationError(f"{name} in {redact_url(url)!r} must be an int") from None
        elif name == "sse":
            put_parameters["ServerSideEncryption"] = value
        elif name == "sse_kms_key_id":
            put_parameters["SSEKMSKeyId"] = value
    if put_parameters:
        settings["put_parameters"] = put_parameters
    settings.update(options)
    return parts.netloc, unquote(parts.path), settings


def scoped_url(url: str, run_prefix: str) -> str:
    """The kit's run-prefix hook (``BackendSpec.run_prefix``): ``url`` whose key prefix (the
    URL's path) gets ``/<run_prefix>`` appended."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit(parts._replace(path=f"{path}/{run_prefix}"))


__all__ = [
    "scoped_url",
    "CHECKSUM_MODES",
    "DEFAULT_CONFLICT_RETRIES",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_WORKERS",
    "URL_OPTIONS",
    "URL_SCHEME",
    "S3Settings",
    "check_bucket_name",
    "parse_url",
    "url_options",
]
