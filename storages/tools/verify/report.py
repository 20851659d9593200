"""What :func:`storages.tools.verify.verify` reports: the kinds of finding, the findings and the report,
and the checks every read-only tool makes first (capabilities, a redacted storage name)."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ...contract import Capability, CheckpointID, CheckpointStorage
from ...errors import UnsupportedOperationError
from ...records import Leftover, LeftoverKind
from ...redaction import redact_url

VerifyProgress = Callable[[int, int], None]
"""Called as ``progress(records_checked, records_known)`` while bodies are read."""


REQUIRED_CAPABILITIES: tuple[Capability, ...] = (Capability.INSPECT, Capability.RAW_ACCESS)
"""verify reads the index and the stored bytes; a storage must declare both."""


class FindingKind(str, enum.Enum):
    """What is wrong; the order here is the order of a report."""

    DANGLING_LINK = "dangling_link"
    """A previous id resolves to no stored record and no tombstone."""
    CYCLE = "cycle"
    """Following previous ids comes back to where it started."""
    ORPHANED_NESTED = "orphaned_nested"
    """A nested record whose container is no longer stored."""
    NESTED_REF_MISSING = "nested_ref_missing"
    """A body refers to an embedded checkpoint that is not stored."""
    UNREFERENCED_NESTED = "unreferenced_nested"
    """A nested record names a container whose body does not refer to it."""
    UNDECODABLE_BODY = "undecodable_body"
    """A body fails its integrity check or cannot be decoded: loading it raises."""
    TYPE_NOT_ALLOWED = "type_not_allowed"
    """A body names a type the codec is not allowed to construct. The data is intact: allow the
    type (or verify with ``structure_only``) and it loads."""
    INDEX_MISMATCH = "index_mismatch"
    """The decoded body disagrees with the index (workflow, previous id or signature)."""
    SIGNATURE_CHANGE = "signature_change"
    """A checkpoint's graph signature differs from its previous checkpoint's."""
    TAMPERED = "tampered"
    """With an integrity key: a record is not what was signed (edited, moved, unsigned, unknown key)."""
    CHAIN_BROKEN = "chain_broken"
    """With an integrity key: a record's predecessor is not the one it was signed after, or was
    deleted without a tombstone, or behind a tombstone no signed prune receipt vouches for."""
    ROLLED_BACK = "rolled_back"
    """Given an anchor: the workflow's store went back before it."""
    INDEX_WITHOUT_RECORD = LeftoverKind.INDEX_WITHOUT_RECORD.value
    """Left by a fault: an index entry whose record is gone (the reads reaching it raise)."""
    RECORD_WITHOUT_INDEX = LeftoverKind.RECORD_WITHOUT_INDEX.value
    """Left by a fault: a record no index entry lists (a save that never committed)."""
    STAGE_PAST_LIFE = LeftoverKind.STAGE_PAST_LIFE.value
    """Left by a fault: a key a save staged a body in, older than any save takes to commit."""

    def __str__(self) -> str:
        return self.value


KIND_ORDER = {kind: position for position, kind in enumerate(FindingKind)}


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem. ``checkpoint_ids[0]`` is the record it is about; the others are involved."""

    kind: FindingKind
    checkpoint_ids: tuple[CheckpointID, ...]
    message: str
    workflow_name: str | None = None
    """The workflow of ``checkpoint_ids[0]``, when it is stored."""
    refused_type: str | None = None
    """For ``type_not_allowed``: the ``module:qualname`` the codec refused to construct."""
    leftover: Leftover | None = None
    """For the kinds a fault leaves: what the backend found (``verify --repair`` hands it back)."""

    @classmethod
    def of_leftover(cls, leftover: Leftover) -> Finding:
        named = "" if leftover.checkpoint_id is None else f"{leftover.checkpoint_id}: "
        return cls(
            FindingKind(leftover.kind.value),
            () if leftover.checkpoint_id is None else (leftover.checkpoint_id,),
            f"{named}{leftover.detail} (key {leftover.key})",
            leftover.workflow_name,
            leftover=leftover,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "checkpoint_ids": list(self.checkpoint_ids),
            "workflow_name": self.workflow_name,
            "message": self.message,
            "refused_type": self.refused_type,
            **(
                {}
                if self.leftover is None
                else {"key": self.leftover.key, "repairable": self.leftover.repairable}
            ),
        }


@dataclass(slots=True)
class VerifyReport:
    """What a scan checked and found."""

    storage: str
    workflow_name: str | None
    """The workflow scanned, or None for the whole storage."""
    records_checked: int = 0
    """Records whose bodies were read and checked (nested records included)."""
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def of_kind(self, kind: FindingKind) -> list[Finding]:
        return [finding for finding in self.findings if finding.kind is kind]

    def counts(self) -> dict[str, int]:
        """Findings per kind, every kind listed."""
        return {kind.value: len(self.of_kind(kind)) for kind in FindingKind}

    def to_dict(self) -> dict[str, Any]:
        return {
            "storage": self.storage,
            "workflow_name": self.workflow_name,
            "ok": self.ok,
            "records_checked": self.records_checked,
            "counts": self.counts(),
            "findings": [finding.to_dict() for finding in self.findings],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)


def require_capabilities(
    storage: CheckpointStorage, operation: str, needed: Iterable[Capability] = REQUIRED_CAPABILITIES
) -> None:
    """Raise UnsupportedOperationError naming the first capability in ``needed`` that the storage
    does not declare, before ``operation`` starts rather than part way through."""
    declared: frozenset[Capability] = getattr(storage, "capabilities", frozenset())
    for capability in needed:
        if capability not in declared:
            raise UnsupportedOperationError(describe_storage(storage), operation, capability.value)


def describe_storage(storage: object) -> str:
    describe = getattr(storage, "describe", None)
    # A third-party describe() may show its URL whole; reports never carry its credentials.
    return redact_url(str(describe())) if callable(describe) else type(storage).__name__


def abbreviate_signature(signature: str, length: int = 8) -> str:
    """The first ``length`` characters and an ellipsis; short signatures unchanged."""
    return signature if len(signature) <= length + 1 else signature[:length] + "…"


__all__ = [
    "KIND_ORDER",
    "REQUIRED_CAPABILITIES",
    "Finding",
    "FindingKind",
    "VerifyProgress",
    "VerifyReport",
    "abbreviate_signature",
    "describe_storage",
    "require_capabilities",
]
