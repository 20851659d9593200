"""Tamper evidence glue (docs/integrity.md): sealing what a save writes, opening and verifying what
a read returns, and anchors. Everything a key adds lives here; a storage without one never
enters it. The MAC format itself is storages/integrity.py's."""

from __future__ import annotations

import dataclasses
import hmac
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from typing_extensions import Self

from ..codec.frame import check_frame
from ..contract import CheckpointID, validate_identifier
from ..errors import CheckpointTamperedError, InvalidCheckpointError, StorageConfigurationError
from ..integrity import (
    SEAL_MAGIC,
    Anchor,
    IntegrityKeyInput,
    IntegrityKeyProvider,
    Link,
    Seal,
    TamperKind,
    accepts_unsigned,
    anchor_token,
    as_provider,
    is_sealed,
    mac_mismatch,
    parse_seal,
    read_anchor,
    record_mac,
    seal_header,
    seal_record,
    split_sealed,
    unknown_key,
)
from .primitives import StoragePrimitives
from .records import CheckpointRecord, RecordDraft, StoredBody, WalkRecords, body_digest

LINK_CACHE_SIZE = 4096
"""How many records' MACs a keyed handle remembers, so chaining a save onto the checkpoint it
just saved or read costs no round trip. Both bounded maps here are OrderedDicts: their oldest
entry goes in O(1) (``popitem(last=False)``), where deleting a plain dict's first key and
looking for the next scans the slots deleted before it (about 0.9 µs per eviction at 4,096
entries, two evictions per keyed save once a handle is full)."""

HELD_BYTES = 32 * 1024 * 1024
"""How many stored bytes a keyed in-memory handle keeps references to, at most, for rereads
(_opened_body): the store holds the same objects, but a record deleted or overwritten through
another handle stays alive here until it is pushed out."""

HeldRecord = tuple[bytes, bytes, Seal, int]


class SealedRecords(StoragePrimitives):
    """The integrity half of the engine: keys, seals, chain links and anchors."""

    _integrity: IntegrityKeyProvider | None
    _chain_macs: OrderedDict[CheckpointID, tuple[bytes, int]]
    """id -> (MAC, chain height) of records this handle signed or verified."""
    _held_verified: OrderedDict[CheckpointID, HeldRecord] | None
    """On a backend whose reads return the bytes objects it holds (``_reads_held_bytes``): id ->
    (stored bytes object, key, seal, where its codec body starts) of the records this handle
    sealed or verified last: at most LINK_CACHE_SIZE of them and HELD_BYTES in all."""
    _held_bytes: int
    _reads_held_bytes: ClassVar[bool] = False
    """True on a backend whose reads return the very (immutable) bytes objects it stores, as an
    in-process store does: reading one again then needs no second MAC (see _opened_body). A
    backend that builds new bytes per read leaves it False: a held entry would never match."""
    _opened: bool
    _engine_chain: ClassVar[bool] = True
    """True while the class keeps the engine's own _chain_link (set per subclass by the storage
    template): a save then chains onto a remembered predecessor in line, without a coroutine per
    record. A subclass that overrides it (a test double, say) has its override awaited."""
    _engine_mac: ClassVar[bool] = True
    """True while the class keeps the engine's own _integrity_mac: saves and reads call
    record_mac directly, one Python call fewer per record; an override is called instead."""

    if TYPE_CHECKING:

        async def _ready(self, operation: str) -> None: ...

        async def _decode_all(
            self,
            stored: Sequence[StoredBody],
            workflow_name: str | None = None,
            graph_signature_hash: str | None = None,
        ) -> list[Any]: ...

        def new_handle(self) -> Self: ...

    @property
    def integrity_enabled(self) -> bool:
        """True when this handle signs what it saves and verifies what it reads."""
        return self._integrity is not None

    def with_integrity_key(self, integrity_key: IntegrityKeyInput | None) -> Self:
        """A new handle on the same store that signs and verifies with ``integrity_key`` (None: a
        handle without a key, which reads and writes plain bodies as a storage without one does)."""
        handle = self.new_handle()
        handle.configure_integrity(integrity_key)
        return handle

    def configure_integrity(self, integrity_key: IntegrityKeyInput | None) -> None:
        """Set this handle's keys before its first use (open_storage does, from URL options)."""
        if self._opened:
            raise StorageConfigurationError(f"{self.describe()}: set the integrity key before first use")
        self._integrity = None if integrity_key is None else as_provider(integrity_key)
        self._forget_chain()

    async def head_anchor(self, *, workflow_name: str) -> str:
        """A signed token naming the newest checkpoint of ``workflow_name`` (or that it has none).

        Keep it outside the store and pass it to get_latest/load/verify: they then refuse a store
        that went back before it (a truncated history, a restored old snapshot).
        """
        validate_identifier(workflow_name, "workflow_name")
        provider = self._required_integrity("head_anchor")
        await self._ready("head_anchor")
        stored = await self._latest(workflow_name, None)
        key_id, key = provider.signing_key()
        if stored is None:
            return anchor_token(key_id, key, workflow_name, None, 0, b"")
        await self._decode_all([stored], workflow_name)  # the anchored record must verify
        seal = self._opened_body(stored)[1]
        if seal is None:
            raise CheckpointTamperedError(
                stored.checkpoint_id, TamperKind.UNSIGNED, "an unsigned record cannot be anchored"
            )
        return anchor_token(key_id, key, workflow_name, stored.checkpoint_id, seal.height, seal.mac)

    def open_sealed(self, checkpoint_id: CheckpointID, raw: bytes) -> tuple[Seal | None, bytes]:
        """Verify stored bytes as a read does and return their seal and codec body (for verify).

        Raises CheckpointTamperedError; an unsigned body returns no seal in migration mode only,
        after its frame is checked (CheckpointCorruptedError if damaged). Either body decodes
        with ``sealed=True``.
        """
        stored, seal = self._opened_body(StoredBody(checkpoint_id, raw))
        return seal, stored.body

    def _plain_digest(self, body: bytes) -> str:
        """A new record's digest: a keyed save replaces it with one taken from the MAC
        (sealed_digest), so hashing the body here would be work thrown away."""
        return body_digest(body) if self._integrity is None else ""

    def _required_integrity(self, operation: str) -> IntegrityKeyProvider:
        if self._integrity is None:
            raise StorageConfigurationError(
                f"{self.describe()}: {operation} needs an integrity key (integrity_key= or the URL "
                "option integrity_key_env=NAME)"
            )
        return self._integrity

    def _integrity_mac(self, key: bytes, checkpoint_id: CheckpointID, header: bytes, body: bytes) -> bytes:
        """The MAC a record is signed and checked with; see storages.integrity.record_mac."""
        return record_mac(key, checkpoint_id, header, body)

    def _verifying_key(self, key_id: str) -> bytes | None:
        assert self._integrity is not None
        return self._integrity.verifying_key(key_id)

    async def _chain_link(
        self, previous_id: CheckpointID | None, family: Mapping[CheckpointID, tuple[bytes, int]]
    ) -> tuple[Link, bytes, int]:
        """How a record whose body names ``previous_id`` chains onto its predecessor: the link
        kind, the predecessor's MAC and this record's height. Costs a round trip only when the
        predecessor is not remembered."""
        if previous_id is None:
            return _ROOT_LINK
        known = family.get(previous_id) or self._chain_macs.get(previous_id)
        if known is None:
            raw = await self._get(previous_id)
            seal = None if raw is None else self._opened_body(StoredBody(previous_id, raw))[1]
            if seal is None:
                return _ABSENT_LINK
            known = (seal.mac, seal.height)
        return _PRESENT, known[0], known[1] + 1

    async def _signed(
        self, records: list[CheckpointRecord]
    ) -> tuple[list[CheckpointRecord], Mapping[CheckpointID, tuple[bytes, int]]]:
        """The records a save writes, sealed when this handle has a key (else unchanged), and
        each sealed record's (MAC, height), to remember once the save is stored."""
        if self._integrity is None:
            return records, {}
        return await self._sealed(
            [
                (
                    record.checkpoint_id,
                    record.workflow_name,
                    record.previous_checkpoint_id,
                    record.graph_signature_hash,
                    record.body,
                    record.container_id,
                    record.root_id,
                    record.position,
                )
                for record in records
            ]
        )

    async def _sealed(
        self, drafts: Iterable[RecordDraft]
    ) -> tuple[list[CheckpointRecord], dict[CheckpointID, tuple[bytes, int]]]:
        """Seal each draft (in order: a nested record may chain onto one sealed before it)."""
        provider = self._integrity
        assert provider is not None
        key_id, key = provider.signing_key()
        mac_of = None if self._engine_mac else self._integrity_mac
        in_line = self._engine_chain
        macs = self._chain_macs
        held = self._held_verified
        family: dict[CheckpointID, tuple[bytes, int]] = {}
        sealed: list[CheckpointRecord] = []
        for (
            checkpoint_id,
            workflow_name,
            previous_id,
            signature,
            body,
            container_id,
            root_id,
            position,
        ) in drafts:
            # _chain_link, in line for a remembered predecessor (nearly every save: a runner's
            # next checkpoint follows the one it saved last); any other costs the coroutine.
            if not in_line:
                link_kind, link, height = await self._chain_link(previous_id, family)
            elif previous_id is None:
                link_kind, link, height = _ROOT_LINK
            else:
                known = family.get(previous_id) or macs.get(previous_id)
                if known is None:
                    link_kind, link, height = await self._chain_link(previous_id, family)
                else:
                    link_kind, link, height = _PRESENT, known[0], known[1] + 1
            if mac_of is None:  # the engine's own MAC: header, MAC and join in one call
                raw, mac = seal_record(
                    key_id,
                    key,
                    checkpoint_id,
                    link_kind,
                    link,
                    height,
                    container_id,
                    position,
                    previous_id,
                    body,
                )
            else:
                header = seal_header(key_id, link_kind, link, height, container_id, position, previous_id)
                mac = mac_of(key, checkpoint_id, header, body)
                raw = b"".join((header, mac, body))  # one copy of the body, not two
            sealed.append(
                CheckpointRecord(
                    checkpoint_id,
                    workflow_name,
                    previous_id,
                    signature,
                    raw,
                    mac[:16].hex(),  # sealed_digest, in line
                    container_id,
                    root_id,
                    position,
                )
            )
            family[checkpoint_id] = (mac, height)
            if held is not None:
                # True of ``raw`` whether or not the insert stores it (an id already stored keeps
                # its own object, which this entry then never matches): this handle has just
                # computed its MAC under ``key``. The seal is what parse_seal reads back from it.
                fields = (
                    key_id,
                    link_kind,
                    link,
                    height,
                    container_id or None,
                    position,
                    mac,
                    previous_id or None,
                )
                record = (raw, key, _new_tuple(Seal, fields), len(raw) - len(body))
                size = len(raw)
                if size <= HELD_BYTES and checkpoint_id not in held:
                    # _hold, in line for a new id (every save but a repeated one)
                    total = self._held_bytes + size
                    held[checkpoint_id] = record
                    while total > HELD_BYTES or len(held) > LINK_CACHE_SIZE:
                        total -= len(held.popitem(last=False)[1][0])  # the oldest entry
                    self._held_bytes = total
                else:
                    self._hold(held, checkpoint_id, record)
        return sealed, family

    def _remember_chain(self, chain: Mapping[CheckpointID, tuple[bytes, int]]) -> None:
        macs = self._chain_macs
        macs.update(chain)
        while len(macs) > LINK_CACHE_SIZE:
            macs.popitem(last=False)  # the oldest entry

    def _remember(self, checkpoint_id: CheckpointID, mac: bytes, height: int) -> None:
        macs = self._chain_macs
        macs[checkpoint_id] = (mac, height)
        if len(macs) > LINK_CACHE_SIZE:
            macs.popitem(last=False)

    def _forget_chain(self) -> None:
        """Drop what this handle remembers of records (a delete or prune may free their ids)."""
        self._chain_macs.clear()
        if self._held_verified is not None:
            self._held_verified.clear()
            self._held_bytes = 0

    def _hold(
        self, held: OrderedDict[CheckpointID, HeldRecord], checkpoint_id: CheckpointID, record: HeldRecord
    ) -> None:
        size = len(record[0])
        if size > HELD_BYTES:
            return
        replaced = held.pop(checkpoint_id, None)
        total = self._held_bytes + size - (0 if replaced is None else len(replaced[0]))
        held[checkpoint_id] = record
        while total > HELD_BYTES or len(held) > LINK_CACHE_SIZE:
            total -= len(held.popitem(last=False)[1][0])  # the oldest entry
        self._held_bytes = total

    def _opened_body(self, stored: StoredBody) -> tuple[StoredBody, Seal | None]:
        """``stored`` with its seal verified and removed (and its nested bodies'), and the seal.

        The body returned is one a decode reads with ``sealed=True``: its seal's MAC held, or it
        is unsigned (migration mode) and its frame was checked here (CheckpointCorruptedError if
        damaged, or if it is framed for a seal it does not have)."""
        provider = self._integrity
        assert provider is not None
        checkpoint_id = stored.checkpoint_id
        nested = stored.nested
        if nested:
            nested = self._opened_bodies(nested)
        raw = stored.body
        if raw[:_MAGIC_SIZE] != _MAGIC:  # is_sealed, in line: this runs on every keyed read
            if accepts_unsigned(provider):
                # Nothing vouches for it but its CRC: checked here, once, so that a decode need
                # not know which bodies of a read were sealed (a save will not chain onto it
                # either if it is damaged, as onto a record whose MAC fails).
                check_frame(raw, checkpoint_id)
                return dataclasses.replace(stored, nested=nested), None
            raise CheckpointTamperedError(
                checkpoint_id,
                TamperKind.UNSIGNED,
                "it has no seal, and this storage reads only signed records (accept_unsigned=True "
                "on IntegrityKeys is the migration mode for bodies written before the key)",
            )
        held = self._held_verified
        if held is not None:
            known = held.get(checkpoint_id)
            if known is not None and known[0] is raw:
                # The very bytes object this handle verified before, still held by the store:
                # bytes are immutable and ``known`` keeps this one alive (its address cannot be
                # reused by another), so the id, seal header and body are the ones whose MAC
                # held. The key is asked for again and must be the one it held under, so a
                # rotated or withdrawn key is checked anew. An edit (raw access, a delete and
                # a new save) puts another object there, which misses and is verified.
                seal = known[2]
                key = self._verifying_key(seal.key_id)
                if key is not None and _compare_digest(key, known[1]):
                    self._remember(checkpoint_id, seal.mac, seal.height)
                    return StoredBody(checkpoint_id, raw[known[3] :], nested, stored.entry), seal
        # open_sealed, in line: the key it verified with is what a held entry is checked against.
        seal, header_end, body_start = parse_seal(checkpoint_id, raw)
        key = self._verifying_key(seal.key_id)
        if key is None:
            raise unknown_key(checkpoint_id, seal.key_id)
        body = raw[body_start:]
        mac_of = record_mac if self._engine_mac else self._integrity_mac
        if not _compare_digest(mac_of(key, checkpoint_id, raw[:header_end], body), seal.mac):
            raise mac_mismatch(checkpoint_id)
        macs = self._chain_macs  # _remember, in line
        macs[checkpoint_id] = (seal.mac, seal.height)
        if len(macs) > LINK_CACHE_SIZE:
            macs.popitem(last=False)
        if held is not None and type(raw) is bytes:  # immutable: a bytearray could change in place
            self._hold(held, checkpoint_id, (raw, key, seal, body_start))
        return StoredBody(checkpoint_id, body, nested, stored.entry), seal

    def _opened_bodies(self, bodies: Mapping[CheckpointID, bytes]) -> dict[CheckpointID, bytes]:
        return {
            checkpoint_id: self._opened_body(StoredBody(checkpoint_id, body))[0].body
            for checkpoint_id, body in bodies.items()
        }

    def _opened_walk(self, records: WalkRecords) -> tuple[WalkRecords, dict[CheckpointID, Seal | None]]:
        seals: dict[CheckpointID, Seal | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        for checkpoint_id, raw in records.bodies.items():
            opened, seals[checkpoint_id] = self._opened_body(StoredBody(checkpoint_id, raw))
            bodies[checkpoint_id] = opened.body
        return dataclasses.replace(records, bodies=bodies), seals

    def _parsed_anchor(self, anchor: str, workflow_name: str | None) -> Anchor:
        parsed = read_anchor(anchor, self._required_integrity("reading with an anchor"))
        if workflow_name is not None and parsed.workflow_name != workflow_name:
            raise InvalidCheckpointError(
                f"the anchor is for workflow {parsed.workflow_name!r}, not {workflow_name!r}", field="anchor"
            )
        return parsed

    async def _check_anchor_latest(self, anchor: Anchor, head: StoredBody | None) -> None:
        """The workflow's newest record must be the anchored one or continue from it."""
        if anchor.head_id is None:
            return
        if head is None:
            raise _went_back(anchor, f"workflow {anchor.workflow_name!r} has no checkpoint now")
        seal = self._opened_body(head)[1]
        current_id = head.checkpoint_id
        while True:
            if current_id == anchor.head_id:
                if seal is None or not hmac.compare_digest(seal.mac, anchor.mac):
                    raise _went_back(anchor, "the record stored under its id is not the one anchored")
                return
            if seal is None or seal.height <= anchor.height or seal.link_kind is not Link.PRESENT:
                raise _went_back(
                    anchor,
                    f"the newest checkpoint is {head.checkpoint_id!r}, which does not continue from it",
                )
            previous_id = seal.previous_id
            assert previous_id is not None  # a PRESENT link always names its predecessor
            raw = await self._get(previous_id)
            if raw is None:
                raise _went_back(
                    anchor,
                    f"the newest checkpoint {head.checkpoint_id!r} cannot be followed back to it "
                    f"({previous_id!r} is gone)",
                )
            link = seal.link
            seal = self._opened_body(StoredBody(previous_id, raw))[1]
            if seal is None or not hmac.compare_digest(seal.mac, link):
                raise CheckpointTamperedError(
                    previous_id,
                    TamperKind.CHAIN_BROKEN,
                    "it is not the record its successor was signed after",
                )
            current_id = previous_id

    async def _check_anchor_head_stored(self, anchor: Anchor, loaded: StoredBody) -> None:
        """The anchored record must still be stored as anchored."""
        if anchor.head_id is None:
            return
        if loaded.checkpoint_id == anchor.head_id:
            head: StoredBody | None = loaded
        else:
            raw = await self._get(anchor.head_id)
            head = None if raw is None else StoredBody(anchor.head_id, raw)
        if head is None:
            raise _went_back(anchor, "it is no longer stored")
        seal = self._opened_body(head)[1]
        if seal is None or not hmac.compare_digest(seal.mac, anchor.mac):
            raise _went_back(anchor, "the record stored under its id is not the one anchored")


_ROOT_LINK: Final = (Link.ROOT, b"", 0)
_ABSENT_LINK: Final = (Link.ABSENT, b"", 0)
_PRESENT: Final = Link.PRESENT
_MAGIC_SIZE: Final = len(SEAL_MAGIC)
_MAGIC: Final = SEAL_MAGIC
_compare_digest: Final = hmac.compare_digest
_new_tuple: Final = tuple.__new__


def unsealed_own(body: bytes) -> bytes:
    """The codec body inside bytes this handle just sealed (or ``body`` if it is not sealed)."""
    return split_sealed("", body)[1].body if is_sealed(body) else body


def _went_back(anchor: Anchor, why: str) -> CheckpointTamperedError:
    assert anchor.head_id is not None
    return CheckpointTamperedError(
        anchor.head_id,
        TamperKind.ROLLED_BACK,
        f"the store went back before the anchor of workflow {anchor.workflow_name!r}, which names "
        f"this checkpoint (chain height {anchor.height}) as its newest: {why}",
    )
