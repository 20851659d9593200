"""The scan behind :func:`storages.tools.verify.verify`: one pass over the index and every body, one
family (a checkpoint and what is nested in it) at a time, then the links, containers, cycles and
signatures between them."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...codec import CheckpointCodec
from ...codec.overrides import BodyCodec, body_codec
from ...contract import Capability, CheckpointID, CheckpointInfo, CheckpointStorage
from ...errors import (
    CheckpointCorruptedError,
    CheckpointTamperedError,
    CheckpointTypeNotAllowedError,
)
from ...integrity import Link, Seal, TamperKind
from .index_findings import cycles, descendants, names, signature_change
from .report import (
    KIND_ORDER,
    Finding,
    FindingKind,
    VerifyProgress,
    VerifyReport,
    describe_storage,
)


@dataclass(slots=True)
class _Family:
    """A checkpoint and the records nested in it, read together so the checkpoint can be decoded."""

    members: list[CheckpointInfo] = field(default_factory=list)
    """Breadth first from the family's root: containers before what they contain."""
    bodies: dict[CheckpointID, bytes] = field(default_factory=dict)


class Scan:
    """One verify run: the records in scope, what was learnt about them, and the findings."""

    def __init__(
        self,
        storage: CheckpointStorage,
        workflow_name: str | None,
        progress: VerifyProgress | None,
        *,
        structure_only: bool = False,
    ) -> None:
        self._storage = storage
        self._structure_only = structure_only
        self._workflow_name = workflow_name
        self._progress = progress
        codec = getattr(storage, "codec", None)
        self._codec = codec if isinstance(codec, CheckpointCodec) else None
        self._bodies: BodyCodec | None = None if self._codec is None else body_codec(self._codec)
        """The storage's codec as verify calls it for bodies (storages/codec/overrides.py)."""
        self.report = VerifyReport(describe_storage(storage), workflow_name)
        self._scope: dict[CheckpointID, CheckpointInfo] = {}
        """Records to check: the listed ones plus the records nested in them."""
        self._outside: dict[CheckpointID, CheckpointInfo | None] = {}
        """Records out of scope looked up by id (None: not stored)."""
        self._checked: set[CheckpointID] = set()
        self._vanished: set[CheckpointID] = set()
        self._refs: dict[CheckpointID, list[CheckpointID]] = {}
        """Direct nested references of each body read that passed its integrity check."""
        self._broken: set[CheckpointID] = set()
        """Records that cannot be loaded, or whose bodies refer to records that are not stored."""
        self._tombstones: frozenset[CheckpointID] | None = None
        self._open_sealed: Callable[[CheckpointID, bytes], tuple[Seal | None, bytes]] | None = (
            getattr(storage, "open_sealed", None) if getattr(storage, "integrity_enabled", False) else None
        )
        """Verifies a stored body and returns its seal and codec body, on a keyed storage."""
        self._seals: dict[CheckpointID, Seal | None] = {}

    async def run(self) -> None:
        listed = await self._storage.list_records(workflow_name=self._workflow_name)
        self._scope = {info.checkpoint_id: info for info in listed}
        # Containers first, so their nested records are checked inside their families, where
        # they can be decoded; nested records left over afterwards are checked on their own.
        ordered = [info for info in listed if not info.nested] + [info for info in listed if info.nested]
        for info in ordered:
            if info.checkpoint_id not in self._checked:
                await self._check_family(info)
        for checkpoint_id in self._vanished:
            self._scope.pop(checkpoint_id, None)
        await self._check_links()
        self._find_cycles()
        self.report.findings.sort(key=lambda finding: KIND_ORDER[finding.kind])

    async def check_anchor(self, workflow_name: str, token: str) -> None:
        """Report the workflow if its store went back before the anchor ``token``."""
        try:
            await self._storage.get_latest(workflow_name=workflow_name, anchor=token)  # type: ignore[call-arg]
        except CheckpointTamperedError as exc:
            kind = FindingKind.ROLLED_BACK if exc.kind == TamperKind.ROLLED_BACK else FindingKind.TAMPERED
            if kind is FindingKind.ROLLED_BACK or not self._already_reported(exc.checkpoint_id):
                self._add(kind, (exc.checkpoint_id,), exc.message, workflow_name)

    # ------------------------------------------------------------------ bodies

    async def _check_family(self, root: CheckpointInfo) -> None:
        family = _Family()
        pending = deque([root])
        while pending:
            info = pending.popleft()
            checkpoint_id = info.checkpoint_id
            if checkpoint_id in self._checked:
                continue
            self._checked.add(checkpoint_id)
            body = await self._read_body(info)
            self._advance()
            if body is None:
                continue
            family.members.append(info)
            family.bodies[checkpoint_id] = body
            for ref in self._refs.get(checkpoint_id, ()):
                if ref in family.bodies:
                    continue  # one embedded checkpoint referred to twice is stored once
                nested = await self._nested_record(checkpoint_id, ref)
                if nested is None:
                    continue
                if nested.checkpoint_id in self._checked:
                    # Already checked in another scan step; its body is still needed to decode.
                    earlier = self._plain(ref, await self._storage.read_raw_body(ref))
                    if earlier is not None:
                        family.bodies[ref] = earlier
                else:
                    pending.append(nested)
        # Innermost first: a container's decode failure can then name the nested records behind it.
        for info in reversed(family.members):
            await self._decode(info, family.bodies)

    async def _read_body(self, info: CheckpointInfo) -> bytes | None:
        """The record's body if it passed its integrity check (its references noted), else None."""
        checkpoint_id = info.checkpoint_id
        body = await self._storage.read_raw_body(checkpoint_id)
        if body is None:
            if await self._storage.checkpoint_info(checkpoint_id) is None:
                self._vanished.add(checkpoint_id)  # deleted while we scanned: nothing to report
                return None
            self._undecodable(info, "it is listed in the index but has no stored body")
            return None
        self.report.records_checked += 1
        if self._open_sealed is not None:
            try:
                seal, body = self._open_sealed(checkpoint_id, body)
            except CheckpointTamperedError as exc:
                self._broken.add(checkpoint_id)
                self._add(FindingKind.TAMPERED, (checkpoint_id,), exc.message, info.workflow_name)
                return None
            except CheckpointCorruptedError as exc:  # unsigned (migration mode) and damaged
                self._undecodable(info, exc.reason)
                return None
            self._seals[checkpoint_id] = seal
            if seal is not None and seal.container_id != info.container_id:
                self._add(
                    FindingKind.TAMPERED,
                    (checkpoint_id,),
                    f"checkpoint {checkpoint_id!r} was signed as nested in {seal.container_id!r} but "
                    f"the index lists it under {info.container_id!r}",
                    info.workflow_name,
                )
        try:
            self._refs[checkpoint_id] = CheckpointCodec.nested_ref_ids(
                body, checkpoint_id=checkpoint_id, sealed=self._open_sealed is not None
            )
        except CheckpointCorruptedError as exc:
            self._undecodable(info, exc.reason)
            return None
        return body

    async def _nested_record(self, container_id: CheckpointID, ref: CheckpointID) -> CheckpointInfo | None:
        """The record a body refers to, brought into scope; None (and a finding) if not stored."""
        info = self._scope.get(ref)
        if info is None:
            info = await self._storage.checkpoint_info(ref)
            if info is not None:
                self._scope[ref] = info
        if info is None:
            self._broken.add(container_id)
            self._add(
                FindingKind.NESTED_REF_MISSING,
                (container_id, ref),
                f"checkpoint {container_id!r} embeds checkpoint {ref!r}, which is not stored; "
                f"loading {container_id!r} fails",
                self._workflow_of(container_id),
            )
        return info

    async def _decode(self, info: CheckpointInfo, bodies: dict[CheckpointID, bytes]) -> None:
        checkpoint_id = info.checkpoint_id
        body = bodies[checkpoint_id]
        try:
            nested = bodies if CheckpointCodec.has_nested_refs(body) else None
            # On a keyed storage the bodies are what open_sealed returned: verified, so decoded
            # as sealed (their checksums are not computed again; bodies framed for a seal read).
            sealed = self._open_sealed is not None
            if self._structure_only:
                # Every value is read, none is constructed: app and MAF types come back opaque.
                decoder = self._bodies if self._bodies is not None else CheckpointCodec()
                checkpoint: Any = decoder.decode_checkpoint(
                    body, checkpoint_id=checkpoint_id, nested=nested, construct_types=False, sealed=sealed
                )
            elif self._bodies is not None:
                checkpoint = self._bodies.decode_checkpoint(
                    body, checkpoint_id=checkpoint_id, nested=nested, sealed=sealed
                )
            else:
                checkpoint = await self._storage.load(checkpoint_id)
        except CheckpointTypeNotAllowedError as exc:
            # Not broken: containers of this record are refused for the same reason, and say so.
            self._add(
                FindingKind.TYPE_NOT_ALLOWED,
                (checkpoint_id,),
                f"checkpoint {checkpoint_id!r} is intact but holds a type this codec does not allow: "
                f"{exc.message}; or run verify with --structure-only to check it without its types",
                info.workflow_name,
                refused_type=exc.type_key,
            )
            return
        except CheckpointCorruptedError as exc:
            culprits = [d for d in self._descendants(checkpoint_id) if d in self._broken]
            if culprits:
                # The decoder's own reason would describe the first broken record it met; the
                # culprits' findings say what is wrong with each.
                many = len(culprits) > 1
                self._broken.add(checkpoint_id)
                self._add(
                    FindingKind.UNDECODABLE_BODY,
                    (checkpoint_id, *culprits),
                    f"checkpoint {checkpoint_id!r} cannot be loaded: the embedded "
                    f"checkpoint{'s' if many else ''} {names(culprits)} {'are' if many else 'is'} broken",
                    info.workflow_name,
                )
            else:
                self._undecodable(info, exc.reason)
            return
        if checkpoint.checkpoint_id != checkpoint_id:
            self._undecodable(info, f"the stored body belongs to checkpoint {checkpoint.checkpoint_id!r}")
            return
        disagreements = [
            f"{name} is {actual!r} in the body but {indexed!r} in the index"
            for name, actual, indexed in (
                ("workflow_name", checkpoint.workflow_name, info.workflow_name),
                ("previous_checkpoint_id", checkpoint.previous_checkpoint_id, info.previous_checkpoint_id),
                ("graph_signature_hash", checkpoint.graph_signature_hash, info.graph_signature_hash),
            )
            if actual != indexed
        ]
        if disagreements:
            self._add(
                FindingKind.INDEX_MISMATCH,
                (checkpoint_id,),
                f"checkpoint {checkpoint_id!r}: " + "; ".join(disagreements),
                info.workflow_name,
            )

    def _descendants(self, checkpoint_id: CheckpointID) -> list[CheckpointID]:
        return descendants(self._refs, checkpoint_id)

    def _undecodable(self, info: CheckpointInfo, reason: str) -> None:
        self._broken.add(info.checkpoint_id)
        self._add(
            FindingKind.UNDECODABLE_BODY,
            (info.checkpoint_id,),
            f"checkpoint {info.checkpoint_id!r} cannot be decoded: {reason}",
            info.workflow_name,
        )

    # ------------------------------------------------------------------ links

    async def _check_links(self) -> None:
        for info in list(self._scope.values()):
            checkpoint_id = info.checkpoint_id
            previous_id = info.previous_checkpoint_id
            if previous_id is not None and previous_id != checkpoint_id:
                previous = await self._lookup(previous_id)
                await self._check_chain_link(info, previous_id, stored=previous is not None)
                if previous is not None:
                    self._check_signature(info, previous)
                elif previous_id not in await self._all_tombstones():
                    self._add(
                        FindingKind.DANGLING_LINK,
                        (checkpoint_id, previous_id),
                        f"checkpoint {checkpoint_id!r} continues from {previous_id!r}, which is "
                        "neither stored nor pruned",
                        info.workflow_name,
                    )
            if info.container_id is not None:
                await self._check_container(info, info.container_id)

    async def _check_container(self, info: CheckpointInfo, container_id: CheckpointID) -> None:
        checkpoint_id = info.checkpoint_id
        container = await self._lookup(container_id)
        if container is None:
            pruned = container_id in await self._all_tombstones()
            self._add(
                FindingKind.ORPHANED_NESTED,
                (checkpoint_id, container_id),
                f"nested checkpoint {checkpoint_id!r} belongs to checkpoint {container_id!r}, which "
                + ("was pruned without it" if pruned else "is no longer stored"),
                info.workflow_name,
            )
            return
        refs = await self._refs_of(container_id)
        if refs is not None and checkpoint_id not in refs:
            self._add(
                FindingKind.UNREFERENCED_NESTED,
                (checkpoint_id, container_id),
                f"nested checkpoint {checkpoint_id!r} names {container_id!r} as its container, but "
                "that checkpoint's body does not embed it",
                info.workflow_name,
            )

    async def _refs_of(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        """Direct nested references of a stored body; None if it cannot be read."""
        if checkpoint_id in self._checked:
            return self._refs.get(checkpoint_id)
        body = self._plain(checkpoint_id, await self._storage.read_raw_body(checkpoint_id))
        self._checked.add(checkpoint_id)  # out of scope: read for its references only, once
        if body is None:
            return None
        try:
            refs = CheckpointCodec.nested_ref_ids(
                body, checkpoint_id=checkpoint_id, sealed=self._open_sealed is not None
            )
        except CheckpointCorruptedError:
            return None  # out of scope: a full scan reports it
        self._refs[checkpoint_id] = refs
        return refs

    async def _check_chain_link(
        self, info: CheckpointInfo, previous_id: CheckpointID, *, stored: bool
    ) -> None:
        """On a keyed storage: the predecessor is the record this one was signed after."""
        seal = self._seals.get(info.checkpoint_id)
        if seal is None or seal.link_kind is not Link.PRESENT:
            return
        checkpoint_id = info.checkpoint_id
        if not stored:
            # Under a TTL a missing predecessor, or its prune's missing receipt, may have expired;
            # a receipt that is there and does not vouch for the tombstone has no such excuse.
            expires = Capability.TTL in getattr(self._storage, "capabilities", frozenset())
            if previous_id not in await self._all_tombstones():
                if expires:
                    return
                self._add(
                    FindingKind.CHAIN_BROKEN,
                    (checkpoint_id, previous_id),
                    f"checkpoint {checkpoint_id!r} was signed after {previous_id!r}, which is gone "
                    f"without a tombstone ({TamperKind.PREDECESSOR_DELETED})",
                    info.workflow_name,
                )
                return
            check_receipt = getattr(self._storage, "check_prune_receipt", None)
            if not callable(check_receipt):
                return
            receipt_stored = getattr(self._storage, "prune_receipt_stored", None)
            if expires and (not callable(receipt_stored) or not await receipt_stored(previous_id, seal.link)):
                return
            try:
                await check_receipt(previous_id, seal.link)
            except CheckpointTamperedError as exc:
                self._add(
                    FindingKind.CHAIN_BROKEN,
                    (checkpoint_id, previous_id),
                    f"checkpoint {checkpoint_id!r} was signed after {previous_id!r}: {exc.reason} "
                    f"({TamperKind.UNRECEIPTED_TOMBSTONE})",
                    info.workflow_name,
                )
            return
        if previous_id not in self._seals:
            raw = await self._storage.read_raw_body(previous_id)
            try:
                opened = None if raw is None else self._open_sealed_or_none(previous_id, raw)
            except CheckpointCorruptedError:  # a CheckpointTamperedError too
                return  # the predecessor's own finding says what is wrong with it
            self._seals[previous_id] = opened
        previous = self._seals[previous_id]
        if previous is None or previous.mac != seal.link:
            self._add(
                FindingKind.CHAIN_BROKEN,
                (checkpoint_id, previous_id),
                f"checkpoint {checkpoint_id!r}: the record stored as its predecessor {previous_id!r} "
                "is not the one it was signed after",
                info.workflow_name,
            )

    def _open_sealed_or_none(self, checkpoint_id: CheckpointID, raw: bytes) -> Seal | None:
        assert self._open_sealed is not None
        return self._open_sealed(checkpoint_id, raw)[0]

    def _plain(self, checkpoint_id: CheckpointID, raw: bytes | None) -> bytes | None:
        """A stored body without its seal; None if absent or (on a keyed storage) not authentic."""
        if raw is None or self._open_sealed is None:
            return raw
        try:
            return self._open_sealed(checkpoint_id, raw)[1]
        except CheckpointCorruptedError:  # a CheckpointTamperedError too
            return None  # reported where the record itself is checked

    def _already_reported(self, checkpoint_id: CheckpointID) -> bool:
        return any(finding.checkpoint_ids[0] == checkpoint_id for finding in self.report.findings)

    def _check_signature(self, info: CheckpointInfo, previous: CheckpointInfo) -> None:
        finding = signature_change(info, previous)
        if finding is not None:
            self.report.findings.append(finding)

    def _find_cycles(self) -> None:
        self.report.findings.extend(cycles(self._scope))

    # ------------------------------------------------------------------ lookups

    async def _lookup(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        info = self._scope.get(checkpoint_id)
        if info is not None:
            return info
        if checkpoint_id not in self._outside:
            self._outside[checkpoint_id] = await self._storage.checkpoint_info(checkpoint_id)
        return self._outside[checkpoint_id]

    async def _all_tombstones(self) -> frozenset[CheckpointID]:
        # Every workflow's: a record nested under another workflow's name is tombstoned under the
        # name of the workflow that was pruned.
        if self._tombstones is None:
            self._tombstones = frozenset(await self._storage.list_tombstones())
        return self._tombstones

    def _workflow_of(self, checkpoint_id: CheckpointID) -> str | None:
        info = self._scope.get(checkpoint_id)
        return None if info is None else info.workflow_name

    def _add(
        self,
        kind: FindingKind,
        ids: tuple[CheckpointID, ...],
        message: str,
        workflow_name: str | None,
        *,
        refused_type: str | None = None,
    ) -> None:
        self.report.findings.append(Finding(kind, ids, message, workflow_name, refused_type))

    def _advance(self) -> None:
        if self._progress is not None:
            self._progress(len(self._checked), len(self._scope))


__all__ = ["Scan"]
