"""Integrity keys: where a storage gets them (a key, a provider that may rotate them live, an
environment variable) and the checks every key and key id passes before it signs anything.

Apart from storages/integrity.py (the seal format and its checks) because configuration reads
keys and never seals.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable, Mapping
from typing import Final, Protocol, runtime_checkable

from .errors import StorageConfigurationError

MIN_KEY_BYTES: Final = 16
"""Shortest accepted key. 32 random bytes (``secrets.token_bytes(32)``) is the recommendation."""

HEX_PREFIX_NOTE: Final = "hex, or base64 prefixed with 'base64:'"
"""How a key held in an environment variable is written."""


@runtime_checkable
class IntegrityKeyProvider(Protocol):
    """Where a storage gets its keys; asked on every save and read, so it may rotate live."""

    def signing_key(self) -> tuple[str, bytes]:
        """The key id and key new records are signed with."""
        ...

    def verifying_key(self, key_id: str) -> bytes | None:
        """The key for a stored key id, or None if records signed with it must be refused."""
        ...


def key_id_of(key: bytes) -> str:
    """A short public name for a key: not the key, and not enough of a hash to guess it."""
    return hashlib.blake2b(key, digest_size=4, person=b"ckpt-key-id").hexdigest()


class IntegrityKeys:
    """One signing key and any number of keys that only verify (older ones, during a rotation).

    ``accept_unsigned=True`` is the migration mode: bodies written before the storage had a key
    are read as they are (unsigned, so unprotected); everything saved is signed.
    """

    __slots__ = ("_keys", "_signing_id", "accept_unsigned")

    def __init__(
        self,
        signing_key: bytes,
        *,
        key_id: str | None = None,
        verifying_keys: Mapping[str, bytes] | Iterable[bytes] = (),
        accept_unsigned: bool = False,
    ) -> None:
        signing = _checked_key(signing_key, "signing key")
        self._signing_id = key_id if key_id is not None else key_id_of(signing)
        _check_key_id(self._signing_id)
        self._keys: dict[str, bytes] = {self._signing_id: signing}
        items = (
            verifying_keys.items()
            if isinstance(verifying_keys, Mapping)
            else ((None, key) for key in verifying_keys)
        )
        for given_id, key in items:
            checked = _checked_key(key, "verifying key")
            key_name = given_id if given_id is not None else key_id_of(checked)
            _check_key_id(key_name)
            self._keys.setdefault(key_name, checked)
        self.accept_unsigned = bool(accept_unsigned)

    def signing_key(self) -> tuple[str, bytes]:
        return self._signing_id, self._keys[self._signing_id]

    def verifying_key(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    def __repr__(self) -> str:
        return (
            f"<IntegrityKeys signing key id {self._signing_id!r}, "
            f"{len(self._keys) - 1} verifying-only key(s)"
            + (", accepting unsigned records" if self.accept_unsigned else "")
            + ">"
        )


IntegrityKeyInput = bytes | IntegrityKeyProvider
"""What ``integrity_key=`` takes: the key itself, or a provider."""


def as_provider(integrity_key: IntegrityKeyInput) -> IntegrityKeyProvider:
    if isinstance(integrity_key, (bytes, bytearray, memoryview)):
        return IntegrityKeys(bytes(integrity_key))
    if isinstance(integrity_key, IntegrityKeyProvider):
        return integrity_key
    raise StorageConfigurationError(
        f"integrity_key must be bytes or a key provider (signing_key() and verifying_key()), "
        f"not {type(integrity_key).__name__}"
    )


def accepts_unsigned(provider: IntegrityKeyProvider) -> bool:
    return bool(getattr(provider, "accept_unsigned", False))


def key_from_env(name: str, *, option: str = "integrity_key_env") -> bytes:
    """The key held in environment variable ``name`` (hex, or base64 after ``base64:``)."""
    value = os.environ.get(name)
    if value is None:
        raise StorageConfigurationError(f"{option}={name}: the environment variable {name!r} is not set")
    text = value.strip()
    try:
        if text.startswith("base64:"):
            key = base64.b64decode(text[len("base64:") :], validate=True)
        else:
            key = bytes.fromhex(text)
    except (ValueError, binascii.Error):
        # Never quote the value: it is (nearly) a key.
        raise StorageConfigurationError(
            f"{option}={name}: the environment variable {name!r} does not hold a key written as "
            f"{HEX_PREFIX_NOTE}"
        ) from None
    if len(key) < MIN_KEY_BYTES:
        raise StorageConfigurationError(
            f"{option}={name}: the key in {name!r} is {len(key)} bytes; at least {MIN_KEY_BYTES} are needed"
        )
    return key


def _checked_key(key: object, what: str) -> bytes:
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise StorageConfigurationError(f"the {what} must be bytes, not {type(key).__name__}")
    raw = bytes(key)
    if len(raw) < MIN_KEY_BYTES:
        raise StorageConfigurationError(
            f"the {what} is {len(raw)} bytes; at least {MIN_KEY_BYTES} are needed"
        )
    return raw


def _check_key_id(key_id: object) -> None:
    if not isinstance(key_id, str) or not key_id or len(key_id.encode()) > 255 or not key_id.isprintable():
        raise StorageConfigurationError(f"a key id must be a printable str of 1 to 255 bytes, got {key_id!r}")


__all__ = [
    "HEX_PREFIX_NOTE",
    "MIN_KEY_BYTES",
    "IntegrityKeyInput",
    "IntegrityKeyProvider",
    "IntegrityKeys",
    "accepts_unsigned",
    "as_provider",
    "key_from_env",
    "key_id_of",
]
