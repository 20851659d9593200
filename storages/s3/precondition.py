"""Conditional writes: what a failed condition raises, and which stores enforce conditions.

Everything rests on the store enforcing those conditions. Some S3-compatible stores (older MinIO,
gateways, a proxy that drops the headers) ignore them and overwrite, so
:meth:`~storages.s3.client.S3Client.open` probes the store once (per store and process, remembered
in :data:`ENFORCING_STORES`) and refuses one that ignores them with
:class:`~storages.errors.ConditionalWritesNotEnforcedError`. The ``unsafe_single_writer`` opt-out
skips the probe and checks each condition by reading the key first, one conditional write at a
time in this process: correct for one writing process only.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

from .config import S3Settings

CREATE_ONLY: Mapping[str, str] = {"IfNoneMatch": "*"}
PROBE_DIRECTORY = "probe/"
"""Under the prefix, where the conditional-write probe writes (and deletes) one object; no save
writes there (records are under ``r/``, the rest under ``w/`` and ``x/``)."""
WRONG_ETAG = '"00000000000000000000000000000000"'
"""An ETag the probe object cannot have (its body's MD5 is another)."""
OPT_OUT = "unsafe_single_writer=True (URL option unsafe_single_writer=true)"


class ConditionNotMet(Exception):
    """A conditional write the store refused. ``resent``: botocore sent the request more than once
    (an earlier answer was lost: a 500, a cut connection, a timeout), or the client cannot say; the
    refusal may then answer a resend of a request that was applied, so it proves nothing about that
    request, and the caller reads back before deciding who won. Not resent: this request was not
    applied."""

    def __init__(self, key: str, *, resent: bool = True) -> None:
        super().__init__(key)
        self.key = key
        self.resent = resent


class PreconditionFailed(ConditionNotMet):
    """412: the conditional write's condition did not hold."""


class ConditionalConflict(ConditionNotMet):
    """409 ConditionalRequestConflict: a concurrent conditional write on the same key."""


class MissingKey(ConditionNotMet):
    """404 on a conditional write (IfMatch on a key that is gone)."""


CONDITION_FAILED = (PreconditionFailed, ConditionalConflict, MissingKey)
"""A compare-and-swap that did not happen: re-read and decide again."""


class EnforcingStores:
    """Stores whose probe found conditional writes enforced, so the probe runs once per store in a
    process, not once per handle: built clients by the settings that reach the store, injected
    clients (shared by every handle) by the client object, held weakly. Refusals are not kept: a
    store fixed since is accepted at the next open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_settings: set[tuple[str | None, ...]] = set()
        self._by_client: weakref.WeakKeyDictionary[Any, set[tuple[str, str]]] = weakref.WeakKeyDictionary()

    def __contains__(self, settings: S3Settings) -> bool:
        with self._lock:
            if settings.client is None:
                return self._store_of(settings) in self._by_settings
            return (settings.bucket, settings.prefix) in self._by_client.get(settings.client, ())

    def add(self, settings: S3Settings) -> None:
        with self._lock:
            if settings.client is None:
                self._by_settings.add(self._store_of(settings))
            else:
                self._by_client.setdefault(settings.client, set()).add((settings.bucket, settings.prefix))

    @staticmethod
    def _store_of(settings: S3Settings) -> tuple[str | None, ...]:
        return (settings.endpoint_url, settings.region, settings.checksum, settings.bucket, settings.prefix)


ENFORCING_STORES = EnforcingStores()


__all__ = [
    "CONDITION_FAILED",
    "CREATE_ONLY",
    "ENFORCING_STORES",
    "OPT_OUT",
    "PROBE_DIRECTORY",
    "WRONG_ETAG",
    "ConditionNotMet",
    "ConditionalConflict",
    "EnforcingStores",
    "MissingKey",
    "PreconditionFailed",
]
