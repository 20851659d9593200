"""``verify``: scan a storage, or one workflow, for broken lineage and unreadable records.

Uses only the public contract: the index (``list_records``, ``checkpoint_info``,
``list_tombstones``, capability ``inspect``), the stored bytes (``read_raw_body``, capability
``raw_access``) and decoding through the storage's own codec (or ``load`` when the storage has
none). It never writes.

What it finds (:class:`FindingKind`), each finding naming the ids involved, the record the
finding is about first:

* a previous id that resolves to nothing and is no tombstone (a pruned ancestor is fine);
* previous links that form a cycle;
* a nested record whose container is gone, a container referring to a nested record that is not
  stored, a nested record its container does not refer to;
* a body that fails its integrity check or cannot be decoded (a container whose embedded records
  are broken cannot be loaded either, and is reported too, naming them);
* a body naming a type the codec does not allow: the data is intact, the finding says how to
  allow the type (``type_not_allowed``, kept apart from damaged bytes so nobody deletes good data);
* a body whose fields disagree with the index the storage lists and walks by;
* a graph signature that changes from one checkpoint to the next along a chain;
* what a fault left that no operation clears (``list_leftovers``, from the backend's
  ``leftovers`` hook): an index entry without its record, a record without its index entry, a
  stage key past its life; :func:`repair` removes those that are safe to remove;
* on a storage with an integrity key (docs/integrity.md): a record that is not what was signed,
  a chain link that does not hold or whose predecessor was deleted, and, given anchors, a
  workflow whose store went back before its anchor.

With ``structure_only=True`` no value is constructed, so no application type is needed (a MAF
app's types live in the app, not in the process running verify): every body is decoded with
``construct_types=False`` (values of app and MAF types come back as ``OpaqueValue``), so framing,
checksums, structure, nested references, links, cycles, signatures and the agreement of bodies
with the index are all checked.

A scan reads the index once and every body once, one family (a checkpoint and what is nested in
it) at a time, so memory stays bounded by the largest family. On a storage being written to while
it runs, records that vanish mid-scan are skipped, not reported.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...contract import CheckpointStorage
from .report import (
    KIND_ORDER,
    REQUIRED_CAPABILITIES,
    Finding,
    FindingKind,
    VerifyProgress,
    VerifyReport,
    abbreviate_signature,
    describe_storage,
    require_capabilities,
)
from .scan import Scan


async def verify(
    storage: CheckpointStorage,
    *,
    workflow_name: str | None = None,
    progress: VerifyProgress | None = None,
    anchors: Mapping[str, str] | None = None,
    structure_only: bool = False,
) -> VerifyReport:
    """Scan ``storage`` (or one workflow, with the records nested in it) and report every problem.

    ``anchors`` maps workflow names to tokens from ``head_anchor``; each workflow whose store went
    back before its anchor is reported (the storage needs its integrity key for this).
    ``structure_only`` checks everything but the values themselves, constructing none (see the
    module docstring). Raises UnsupportedOperationError when the storage lacks the ``inspect`` or
    ``raw_access`` capability; storage errors (unreachable, closed) propagate. Finding nothing is
    ``report.ok``.
    """
    require_capabilities(storage, "verify")
    scan = Scan(storage, workflow_name, progress, structure_only=structure_only)
    await scan.run()
    list_leftovers = getattr(storage, "list_leftovers", None)
    if callable(list_leftovers):
        found = await list_leftovers(workflow_name=workflow_name)
        scan.report.findings.extend(Finding.of_leftover(leftover) for leftover in found)
    for anchored_workflow, token in (anchors or {}).items():
        await scan.check_anchor(anchored_workflow, token)
    scan.report.findings.sort(key=lambda finding: KIND_ORDER[finding.kind])
    return scan.report


async def repair(storage: CheckpointStorage, report: VerifyReport) -> list[str]:
    """Remove the leftovers ``report`` found that are safe to remove (each checked again first),
    through a handle that may write; what was done, one line each."""
    repair_leftover = getattr(storage, "repair_leftover", None)
    if not callable(repair_leftover):
        return []
    done: list[str] = []
    for finding in report.findings:
        if finding.leftover is not None and finding.leftover.repairable:
            said = await repair_leftover(finding.leftover)
            if said is not None:
                done.append(said)
    return done


__all__ = [
    "REQUIRED_CAPABILITIES",
    "Finding",
    "FindingKind",
    "VerifyProgress",
    "VerifyReport",
    "abbreviate_signature",
    "describe_storage",
    "repair",
    "require_capabilities",
    "verify",
]
