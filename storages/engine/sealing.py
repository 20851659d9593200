"""Tamper evidence (docs/integrity.md): sealing what a keyed save writes, opening and verifying
what a keyed read returns, and anchors. A storage holds a :class:`Sealer` only when it has a key;
a storage without one never enters this module. The MAC format itself is storages/integrity.py's."""

from __future__ import annotations

import dataclasses
import hmac
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final

from ..backend import Backend
from ..codec.frame import check_frame
from ..contract import CheckpointID
from ..errors import CheckpointTamperedError, InvalidCheckpointError
from ..integrity import (
    SEAL_MAGIC,
    Anchor,
    IntegrityKeyProvider,
    Link,
    Seal,
    TamperKind,
    accepts_unsigned,
    anchor_token,
    is_sealed,
    mac_mismatch,
    parse_seal,
    read_anchor,
    record_mac,
    seal_header,
    split_sealed,
    unknown_key,
)
from ..records import CheckpointRecord, RecordDraft, StoredBody, WalkRecords

LINK_CACHE_SIZE = 4096
"""How many records' MACs a keyed handle remembers, so chaining a save onto the checkpoint it
just saved or read costs no round trip. An OrderedDict: its oldest entry goes in O(1)
(``popitem(last=False)``), where deleting a plain dict's first key and looking for the next
scans the slots deleted before it."""

Chain = Mapping[CheckpointID, tuple[bytes, int]]
"""id -> (MAC, chain height) of records sealed or verified."""


class Sealer:
    """One keyed handle's seals: it signs what a save writes (chaining each record onto its
    predecessor's MAC), verifies what a read returns, and checks anchors.

    :meth:`mac`, :meth:`link`, :meth:`verifying_key`, :meth:`open` and the anchor checks are
    the steps a storage's ``sealer_type`` may replace: the kit's tamper mutants weaken one each
    (tests/kit/test_tamper_family.py); no storage we ship does.
    """

    __slots__ = ("_backend", "_chain_macs", "provider")

    def __init__(self, provider: IntegrityKeyProvider, backend: Backend) -> None:
        self.provider = provider
        self._backend = backend
        self._chain_macs: OrderedDict[CheckpointID, tuple[bytes, int]] = OrderedDict()
        """id -> (MAC, chain height) of records this handle signed or verified."""

    async def seal(self, drafts: Iterable[RecordDraft]) -> tuple[list[CheckpointRecord], Chain]:
        """Seal each draft (in order: a nested record may chain onto one sealed before it), and
        each one's (MAC, height), to :meth:`remember` once the save is stored."""
        key_id, key = self.provider.signing_key()
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
            link_kind, link, height = await self.link(previous_id, family)
            header = seal_header(key_id, link_kind, link, height, container_id, position, previous_id)
            mac = self.mac(key, checkpoint_id, header, body)
            raw = b"".join((header, mac, body))  # one copy of the body
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
        return sealed, family

    async def seal_records(self, records: Iterable[CheckpointRecord]) -> list[CheckpointRecord]:
        """Seal records built elsewhere (pending-write batches, prune receipts: roots)."""
        sealed, _ = await self.seal(
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
        )
        return sealed

    async def link(self, previous_id: CheckpointID | None, family: Chain) -> tuple[Link, bytes, int]:
        """How a record whose body names ``previous_id`` chains onto its predecessor: the link
        kind, the predecessor's MAC and this record's height. A remembered predecessor (nearly
        every save: a runner's next checkpoint follows the one it saved last, or one of its own
        family) costs no round trip."""
        if previous_id is None:
            return _ROOT_LINK
        known = family.get(previous_id) or self._chain_macs.get(previous_id)
        if known is not None:
            return _PRESENT, known[0], known[1] + 1
        stored = await self._backend.load(previous_id)
        seal = None if stored is None else self.open(StoredBody(previous_id, stored.body))[1]
        if seal is None:
            return _ABSENT_LINK
        return _PRESENT, seal.mac, seal.height + 1

    def mac(self, key: bytes, checkpoint_id: CheckpointID, header: bytes, body: bytes) -> bytes:
        """The MAC a record is signed and checked with (storages.integrity.record_mac)."""
        return record_mac(key, checkpoint_id, header, body)

    def verifying_key(self, key_id: str) -> bytes | None:
        """The key a seal naming ``key_id`` is checked with, or None if it is unknown."""
        return self.provider.verifying_key(key_id)

    def remember(self, chain: Chain) -> None:
        macs = self._chain_macs
        macs.update(chain)
        while len(macs) > LINK_CACHE_SIZE:
            macs.popitem(last=False)  # the oldest entry

    def forget(self) -> None:
        """Drop what this handle remembers of records (a delete or prune may free their ids)."""
        self._chain_macs.clear()

    def open(self, stored: StoredBody) -> tuple[StoredBody, Seal | None]:
        """``stored`` with its seal verified and removed (and its nested bodies'), and the seal.

        The body returned is one a decode reads with ``sealed=True``: its seal's MAC held, or it
        is unsigned (migration mode) and its frame was checked here (CheckpointCorruptedError if
        damaged, or if it is framed for a seal it does not have)."""
        checkpoint_id = stored.checkpoint_id
        nested = stored.nested
        if nested:
            nested = self.open_bodies(nested)
        raw = stored.body
        if raw[:_MAGIC_SIZE] != _MAGIC:  # is_sealed, in line: this runs on every keyed read
            if accepts_unsigned(self.provider):
                # Nothing vouches for it but its checksum: checked here, once, so that a decode need
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
        seal, header_end, body_start = parse_seal(checkpoint_id, raw)
        key = self.verifying_key(seal.key_id)
        if key is None:
            raise unknown_key(checkpoint_id, seal.key_id)
        body = raw[body_start:]
        if not _compare_digest(self.mac(key, checkpoint_id, raw[:header_end], body), seal.mac):
            raise mac_mismatch(checkpoint_id)
        macs = self._chain_macs  # remember, in line
        macs[checkpoint_id] = (seal.mac, seal.height)
        if len(macs) > LINK_CACHE_SIZE:
            macs.popitem(last=False)
        return StoredBody(checkpoint_id, body, nested, stored.entry), seal

    def open_bodies(self, bodies: Mapping[CheckpointID, bytes]) -> dict[CheckpointID, bytes]:
        return {
            checkpoint_id: self.open(StoredBody(checkpoint_id, body))[0].body
            for checkpoint_id, body in bodies.items()
        }

    def open_walk(self, records: WalkRecords) -> tuple[WalkRecords, dict[CheckpointID, Seal | None]]:
        seals: dict[CheckpointID, Seal | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        for checkpoint_id, raw in records.bodies.items():
            opened, seals[checkpoint_id] = self.open(StoredBody(checkpoint_id, raw))
            bodies[checkpoint_id] = opened.body
        return dataclasses.replace(records, bodies=bodies), seals

    async def head_anchor(
        self, workflow_name: str, verify: Callable[[list[StoredBody], str], Awaitable[object]]
    ) -> str:
        """The anchor token of ``workflow_name``'s newest record, which must verify."""
        stored = await self._backend.latest(workflow_name, None)
        key_id, key = self.provider.signing_key()
        if stored is None:
            return anchor_token(key_id, key, workflow_name, None, 0, b"")
        await verify([stored], workflow_name)  # the anchored record must verify (and decode)
        seal = self.open(stored)[1]
        if seal is None:
            raise CheckpointTamperedError(
                stored.checkpoint_id, TamperKind.UNSIGNED, "an unsigned record cannot be anchored"
            )
        return anchor_token(key_id, key, workflow_name, stored.checkpoint_id, seal.height, seal.mac)

    def parsed_anchor(self, anchor: str, workflow_name: str | None) -> Anchor:
        parsed = read_anchor(anchor, self.provider)
        if workflow_name is not None and parsed.workflow_name != workflow_name:
            raise InvalidCheckpointError(
                f"the anchor is for workflow {parsed.workflow_name!r}, not {workflow_name!r}", field="anchor"
            )
        return parsed

    async def check_anchor_latest(self, anchor: Anchor, head: StoredBody | None) -> None:
        """The workflow's newest record must be the anchored one or continue from it."""
        if anchor.head_id is None:
            return
        if head is None:
            raise _went_back(anchor, f"workflow {anchor.workflow_name!r} has no checkpoint now")
        seal = self.open(head)[1]
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
            stored = await self._backend.load(previous_id)
            if stored is None:
                raise _went_back(
                    anchor,
                    f"the newest checkpoint {head.checkpoint_id!r} cannot be followed back to it "
                    f"({previous_id!r} is gone)",
                )
            link = seal.link
            seal = self.open(StoredBody(previous_id, stored.body))[1]
            if seal is None or not hmac.compare_digest(seal.mac, link):
                raise CheckpointTamperedError(
                    previous_id,
                    TamperKind.CHAIN_BROKEN,
                    "it is not the record its successor was signed after",
                )
            current_id = previous_id

    async def check_anchor_head_stored(self, anchor: Anchor, loaded: StoredBody) -> None:
        """The anchored record must still be stored as anchored."""
        if anchor.head_id is None:
            return
        if loaded.checkpoint_id == anchor.head_id:
            head: StoredBody | None = loaded
        else:
            stored = await self._backend.load(anchor.head_id)
            head = None if stored is None else StoredBody(anchor.head_id, stored.body)
        if head is None:
            raise _went_back(anchor, "it is no longer stored")
        seal = self.open(head)[1]
        if seal is None or not hmac.compare_digest(seal.mac, anchor.mac):
            raise _went_back(anchor, "the record stored under its id is not the one anchored")


_ROOT_LINK: Final = (Link.ROOT, b"", 0)
_ABSENT_LINK: Final = (Link.ABSENT, b"", 0)
_PRESENT: Final = Link.PRESENT
_MAGIC_SIZE: Final = len(SEAL_MAGIC)
_MAGIC: Final = SEAL_MAGIC
_compare_digest: Final = hmac.compare_digest


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
