"""S3 storage: checkpoints as objects in AWS S3 or an S3-compatible store (needs ``boto3``).

The parts, in the shape every backend package has:

* :mod:`.config`: options, ``s3://`` URL parsing and validation (:class:`S3Settings`);
* :mod:`.client`: the boto3 client, blocking calls on a bounded thread pool, retries of
  conditional writes, botocore errors as typed errors;
* :mod:`.commit`: the commit protocol (conditional writes, the commit point, sequence floors,
  recovery of partial saves), with :mod:`.fence` for fenced saves;
* :mod:`.storage`: :class:`S3CheckpointStorage`, the primitives wired over those parts;
* :mod:`.layout`: the key layout and record framing.

docs/s3.md has the layout, the crash table and the requests (and price) of every operation.
"""

from __future__ import annotations

from .backend import S3Backend
from .config import (
    DEFAULT_CONFLICT_RETRIES,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_WORKERS,
    URL_OPTIONS,
    URL_SCHEME,
    S3Settings,
    url_options,
)
from .layout import escape_component, signature_tag, unescape_component
from .storage import S3CheckpointStorage

__all__ = [
    "DEFAULT_CONFLICT_RETRIES",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_WORKERS",
    "URL_OPTIONS",
    "URL_SCHEME",
    "S3Backend",
    "S3CheckpointStorage",
    "S3Settings",
    "escape_component",
    "signature_tag",
    "unescape_component",
    "url_options",
]
