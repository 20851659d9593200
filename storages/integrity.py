"""Tamper evidence: keys, the signed envelope ("seal") around a stored body, and head anchors.

A keyed storage stores every body as ``seal header + MAC + codec body``. The MAC is HMAC-SHA256
under the signing key over a domain tag, the checkpoint id the record is stored under, the seal
header and the codec body. The header holds what the body itself does not say:

* the key id (so a verifier picks the right key after a rotation);
* the chain link: the MAC of the record named by the body's ``previous_checkpoint_id`` as it was
  stored when this record was signed (or that there was no previous id, or that it was not
  stored), and the chain height (the predecessor's height plus one);
* for a nested record, its container's id and its position in the save.

The body carries the workflow name, the checkpoint id and the previous id, and the MAC covers the
body, so every one of those is signed too. See docs/integrity.md for what this detects and what
needs an anchor.

An anchor is a small token the application keeps outside the store, naming a workflow's newest
record (id, chain height and MAC) and signed with the same key; a read given it refuses a store
that went back before it.

Nothing here ever puts key material in a message, a repr or a report: keys are named by key id.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from .errors import CheckpointTamperedError, InvalidCheckpointError
from .integrity_keys import (
    IntegrityKeyInput,
    IntegrityKeyProvider,
    IntegrityKeys,
    accepts_unsigned,
    as_provider,
    key_from_env,
)

MAC_SIZE: Final = 32
_MAGIC: Final = b"CKS"
"""Distinct from the codec's ``b"CK\\x01"``: a sealed body is never mistaken for a plain one."""
SEAL_MAGIC: Final = _MAGIC
"""What every sealed body starts with (``is_sealed``)."""
_VERSION: Final = 2
_FIXED = struct.Struct(">4sBQIBHH")
"""magic and version, link kind, height, position, then the lengths of the key id, container id
and previous id that follow (version 1 stored each length before its field)."""
_FIXED_SIZE: Final = _FIXED.size
_UNPACK: Final = _FIXED.unpack_from
_HEAD: Final = _MAGIC + bytes((_VERSION,))
_LENGTH = struct.Struct(">H")
_PACK_LENGTH: Final = _LENGTH.pack
_PACK_FIXED: Final = _FIXED.pack
_RECORD_DOMAIN: Final = b"checkpoint-storages/record/v1\x00"
_ANCHOR_DOMAIN: Final = b"checkpoint-storages/anchor/v1\x00"
_ANCHOR_PREFIX: Final = "cka1."


class Link(enum.IntEnum):
    """What a record's seal says about its predecessor (the record its previous id names)."""

    ROOT = 0
    """The body has no previous id."""
    ABSENT = 1
    """The previous id was not stored when this record was signed: the chain restarts here."""
    PRESENT = 2
    """The predecessor was stored; the seal holds its MAC."""


class TamperKind(str, enum.Enum):
    """What did not match; carried by CheckpointTamperedError and by verify's findings."""

    UNSIGNED = "unsigned"
    """A keyed storage read a body with no seal (and is not in migration mode)."""
    MALFORMED_SEAL = "malformed_seal"
    UNKNOWN_KEY = "unknown_key"
    """The seal names a key id this storage has no verifying key for."""
    MAC_MISMATCH = "mac_mismatch"
    """The body, its seal header or the id it is stored under is not what was signed."""
    INDEX_MISMATCH = "index_mismatch"
    """An authentic body is listed under index fields (workflow, previous id, signature) it does
    not have."""
    CHAIN_BROKEN = "chain_broken"
    """A record's predecessor is not the record it was signed after."""
    PREDECESSOR_DELETED = "predecessor_deleted"
    """A record's predecessor was stored when it was signed and is gone, without a tombstone."""
    UNRECEIPTED_TOMBSTONE = "unreceipted_tombstone"
    """A record's predecessor is tombstoned as pruned, but no prune receipt signed with a key of
    this storage vouches for it: a deletion with a forged tombstone."""
    ROLLED_BACK = "rolled_back"
    """The store is older than an anchor: its newest record is missing or was replaced."""

    def __str__(self) -> str:
        return self.value


# ---------------------------------------------------------------------- seals


class Seal(NamedTuple):
    """A record's signed context, as read back from its stored bytes (a tuple: read per load)."""

    key_id: str
    link_kind: Link
    link: bytes
    """The predecessor's MAC when ``link_kind`` is PRESENT, else empty."""
    height: int
    container_id: str | None
    position: int
    mac: bytes
    previous_id: str | None = None
    """The body's previous id, repeated here so a chain can be followed without decoding."""


class SealedParts(NamedTuple):
    """A sealed body cut into its parts, for tools that rewrite one of them (the kit does)."""

    header: bytes
    mac: bytes
    body: bytes

    def join(self) -> bytes:
        return self.header + self.mac + self.body


def is_sealed(raw: bytes) -> bool:
    return raw[: len(_MAGIC)] == _MAGIC


def seal_header(
    key_id: str,
    link_kind: Link,
    link: bytes,
    height: int,
    container_id: str | None,
    position: int,
    previous_id: str | None,
) -> bytes:
    key_bytes = key_id.encode()
    container = b"" if container_id is None else container_id.encode()
    previous = b"" if previous_id is None else previous_id.encode()
    fixed = _PACK_FIXED(_HEAD, link_kind, height, position, len(key_bytes), len(container), len(previous))
    return b"".join((fixed, key_bytes, container, previous, link if link_kind is _PRESENT else b""))


def record_mac(key: bytes, checkpoint_id: str, header: bytes, body: bytes) -> bytes:
    """HMAC-SHA256 over the domain, the id the record is stored under, its seal header and body."""
    stored_id = checkpoint_id.encode()
    states = _KEY_STATES.get(key) or _hmac_states(key)
    inner = states[0].copy()
    # The short parts go in one update (one C call instead of three); the bytes hashed, and so
    # the MAC, are the same (tests/test_integrity.py checks it against hmac.digest).
    inner.update(_PACK_LENGTH(len(stored_id)) + stored_id + header)
    inner.update(body)
    outer = states[1].copy()
    outer.update(inner.digest())
    mac: bytes = outer.digest()
    return mac


def seal_record(
    key_id: str,
    key: bytes,
    checkpoint_id: str,
    link_kind: Link,
    link: bytes,
    height: int,
    container_id: str | None,
    position: int,
    previous_id: str | None,
    body: bytes,
) -> tuple[bytes, bytes]:
    """The sealed bytes of a record (``seal header + MAC + body``) and its MAC: what
    ``seal_header`` and ``record_mac`` give, joined (the one call every keyed save makes)."""
    header = seal_header(key_id, link_kind, link, height, container_id, position, previous_id)
    mac = record_mac(key, checkpoint_id, header, body)
    return b"".join((header, mac, body)), mac


_KEY_STATES: Final[dict[bytes, tuple[Any, Any]]] = {}
"""Key -> its HMAC states (_hmac_states), for at most _KEY_STATES_LIMIT keys. A dict lookup,
not functools.lru_cache: the cache wrapper cost five times a lookup on every save and read."""
_KEY_STATES_LIMIT: Final = 64


def _hmac_states(key: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256 (RFC 2104) with the key's inner pad and the record domain, and the outer pad,
    hashed once per key: every record then costs one copy of each state instead of a key
    schedule. tests/test_integrity.py checks the result against hmac.digest."""
    block = hashlib.sha256(key).digest() if len(key) > 64 else key
    block = block.ljust(64, b"\0")
    states = (
        hashlib.sha256(bytes(byte ^ 0x36 for byte in block) + _RECORD_DOMAIN),
        hashlib.sha256(bytes(byte ^ 0x5C for byte in block)),
    )
    if len(_KEY_STATES) >= _KEY_STATES_LIMIT:
        _KEY_STATES.pop(next(iter(_KEY_STATES)), None)  # the oldest key (dicts keep insertion order)
    _KEY_STATES[bytes(key)] = states
    return states


def sealed_digest(mac: bytes) -> str:
    """The digest a backend keeps for a sealed body (idempotent re-saves compare it).

    The MAC is already a collision-resistant function of everything in the sealed body, so its
    first 16 bytes serve, instead of hashing the body a second time."""
    return mac[:16].hex()


def parse_seal(checkpoint_id: str, raw: bytes) -> tuple[Seal, int, int]:
    """A sealed body's seal, where its header ends and where its codec body starts; raise
    CheckpointTamperedError (malformed_seal) if it cannot be parsed. Checks no MAC."""
    # Runs on every verified read: one unpack gives every length, then plain offsets, module
    # constants and a C-level tuple constructor (a NamedTuple's own __new__ is Python code).
    try:
        head, link_kind, height, position, key_length, container_length, previous_length = _UNPACK(raw)
        kind = _LINKS[link_kind]
    except struct.error:
        raise _malformed(checkpoint_id, "is cut short") from None
    except IndexError:
        raise _malformed(checkpoint_id, f"has an unknown link kind {link_kind}") from None
    if head != _HEAD:
        raise _wrong_head(checkpoint_id, head)
    key_end = _FIXED_SIZE + key_length
    container_end = key_end + container_length
    previous_end = container_end + previous_length
    link_end = previous_end + MAC_SIZE if kind is _PRESENT else previous_end
    mac_end = link_end + MAC_SIZE
    if mac_end > len(raw):
        raise _malformed(checkpoint_id, "is cut short")
    try:
        key_id = raw[_FIXED_SIZE:key_end].decode()
        container = raw[key_end:container_end].decode() if container_length else None
        previous = raw[container_end:previous_end].decode() if previous_length else None
    except UnicodeDecodeError:
        raise _malformed(checkpoint_id, "holds text that is not UTF-8") from None
    fields = (
        key_id,
        kind,
        raw[previous_end:link_end],
        height,
        container,
        position,
        raw[link_end:mac_end],
        previous,
    )
    return _new_tuple(Seal, fields), link_end, mac_end


def _wrong_head(checkpoint_id: str, head: bytes) -> CheckpointTamperedError:
    if head[: len(_MAGIC)] != _MAGIC:
        return _malformed(checkpoint_id, "is missing")
    return _malformed(
        checkpoint_id, f"has format version {head[len(_MAGIC)]}; this library reads version {_VERSION}"
    )


def split_sealed(checkpoint_id: str, raw: bytes) -> tuple[Seal, SealedParts]:
    """Parse a sealed body into its seal and parts; raise CheckpointTamperedError
    (malformed_seal) if it cannot be. Checks no MAC."""
    seal, header_end, body_start = parse_seal(checkpoint_id, raw)
    return seal, SealedParts(raw[:header_end], seal.mac, raw[body_start:])


MacFunction = Callable[[bytes, str, bytes, bytes], bytes]
"""``record_mac``'s signature: (key, stored id, seal header, codec body) -> MAC."""


def open_sealed(
    checkpoint_id: str,
    raw: bytes,
    verifying_key: Callable[[str], bytes | None],
    mac_of: MacFunction = record_mac,
) -> tuple[Seal, bytes]:
    """Verify a sealed body stored under ``checkpoint_id`` and return its seal and codec body.

    Raises CheckpointTamperedError (malformed_seal, unknown_key or mac_mismatch). The MAC is
    computed over the stored bytes as they are (the body is the one copy a read decodes anyway):
    nothing is re-encoded, and the header is parsed once."""
    seal, header_end, body_start = parse_seal(checkpoint_id, raw)
    key = verifying_key(seal.key_id)
    if key is None:
        raise unknown_key(checkpoint_id, seal.key_id)
    body = raw[body_start:]
    if not _compare_digest(mac_of(key, checkpoint_id, raw[:header_end], body), seal.mac):
        raise mac_mismatch(checkpoint_id)
    return seal, body


def unknown_key(checkpoint_id: str, key_id: str) -> CheckpointTamperedError:
    """What a read raises for a seal naming a key this storage cannot verify with."""
    return CheckpointTamperedError(
        checkpoint_id,
        TamperKind.UNKNOWN_KEY,
        f"it is signed with key id {key_id!r}, for which this storage has no verifying key",
    )


def mac_mismatch(checkpoint_id: str) -> CheckpointTamperedError:
    """What a read raises for stored bytes that are not what was signed."""
    return CheckpointTamperedError(
        checkpoint_id,
        TamperKind.MAC_MISMATCH,
        "its body, its seal or the id it is stored under is not what was signed",
    )


_LINKS: Final = tuple(Link)
_PRESENT: Final = Link.PRESENT
_new_tuple: Final = tuple.__new__
_compare_digest: Final = hmac.compare_digest


def _malformed(checkpoint_id: str, why: str) -> CheckpointTamperedError:
    return CheckpointTamperedError(checkpoint_id, TamperKind.MALFORMED_SEAL, f"its seal {why}")


def anchor_token(
    key_id: str, key: bytes, workflow_name: str, head_id: str | None, height: int, mac: bytes
) -> str:
    """A signed, printable anchor naming a workflow's newest record (or that it has none)."""
    payload = json.dumps(
        {"w": workflow_name, "id": head_id, "h": height, "m": mac.hex(), "k": key_id},
        separators=(",", ":"),
        ensure_ascii=True,
    ).encode()
    tag = hmac.new(key, _ANCHOR_DOMAIN + payload, "sha256").digest()[:16]
    return _ANCHOR_PREFIX + _b64(payload) + "." + _b64(tag)


@dataclass(frozen=True, slots=True)
class Anchor:
    workflow_name: str
    head_id: str | None
    height: int
    mac: bytes
    key_id: str


def read_anchor(token: object, provider: IntegrityKeyProvider) -> Anchor:
    """Parse and authenticate an anchor token; a bad one raises InvalidCheckpointError."""

    def invalid(why: str) -> InvalidCheckpointError:
        return InvalidCheckpointError(f"anchor {why}", field="anchor")

    if not isinstance(token, str) or not token.startswith(_ANCHOR_PREFIX):
        raise invalid(f"must be a str from head_anchor() starting with {_ANCHOR_PREFIX!r}")
    try:
        payload_text, tag_text = token[len(_ANCHOR_PREFIX) :].split(".")
        payload, tag = _unb64(payload_text), _unb64(tag_text)
        fields = json.loads(payload)
        key_id = fields["k"]
        anchor = Anchor(fields["w"], fields["id"], int(fields["h"]), bytes.fromhex(fields["m"]), key_id)
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise invalid("is not a token head_anchor() made") from None
    key = provider.verifying_key(key_id) if isinstance(key_id, str) else None
    if key is None:
        raise invalid(f"is signed with key id {key_id!r}, which this storage has no key for")
    if not hmac.compare_digest(hmac.new(key, _ANCHOR_DOMAIN + payload, "sha256").digest()[:16], tag):
        raise invalid("was altered or signed with another key")
    return anchor


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


__all__ = [
    "MAC_SIZE",
    "SEAL_MAGIC",
    "Anchor",
    "IntegrityKeyInput",
    "IntegrityKeyProvider",
    "IntegrityKeys",
    "Link",
    "MacFunction",
    "Seal",
    "SealedParts",
    "TamperKind",
    "accepts_unsigned",
    "anchor_token",
    "as_provider",
    "is_sealed",
    "key_from_env",
    "mac_mismatch",
    "open_sealed",
    "parse_seal",
    "read_anchor",
    "record_mac",
    "sealed_digest",
    "seal_header",
    "seal_record",
    "split_sealed",
    "unknown_key",
]
