"""What a copy between stores reports: per-workflow counts and bytes, the problems it met, the
verification of the destination, and the progress callback's shape. Shared by ``copy_store``,
``import_maf_directory`` and the CLI's rendering, none of which needs the others to name it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...contract import CheckpointID
from ..verify import VerifyReport

CopyProgress = Callable[[int, int], None]
"""Called as ``progress(checkpoints_done, checkpoints_total)`` (top-level checkpoints)."""


@dataclass
class WorkflowCopy:
    """What a copy found and did for one workflow name (records counted by their own name)."""

    workflow_name: str
    checkpoints: int = 0
    """Top-level checkpoints in the source."""
    nested: int = 0
    """Records of this name nested in other checkpoints (a sub-workflow's)."""
    tombstones: int = 0
    """Prune tombstones in the source."""
    writes: int = 0
    """Pending writes in the source, over all its checkpoints."""
    written: int = 0
    """Records (top-level and nested) this run stored in the destination (would store, dry run)."""
    present: int = 0
    """Records the destination already held with equal content."""
    bytes: int = 0
    """Stored body bytes of the workflow's records in the source."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow_name": self.workflow_name,
            "checkpoints": self.checkpoints,
            "nested": self.nested,
            "tombstones": self.tombstones,
            "writes": self.writes,
            "written": self.written,
            "present": self.present,
            "bytes": self.bytes,
        }


@dataclass(frozen=True)
class CopyProblem:
    """Something a copy could not do as asked; the message names the ids involved."""

    kind: str
    """``conflict`` (the destination holds the id with other content), ``orphaned_nested`` (a
    source record nested in a container that is not stored), ``tombstone_not_recreated``,
    ``refused_file`` (an import: a file MAF would not load)."""
    checkpoint_id: CheckpointID | None
    workflow_name: str
    message: str
    refused_type: str | None = None
    """For ``refused_file``: the ``module:qualname`` MAF's allow-list refused, when that was why."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "checkpoint_id": self.checkpoint_id,
            "workflow_name": self.workflow_name,
            "message": self.message,
            "refused_type": self.refused_type,
        }


@dataclass
class CopyReport:
    """The outcome of :func:`copy_store`."""

    source: str
    destination: str
    dry_run: bool
    workflows: list[WorkflowCopy] = field(default_factory=list)
    problems: list[CopyProblem] = field(default_factory=list)
    order_preserved: bool = True
    """False when the source's sequences admit no single commit order (a damaged store): the
    checkpoints were then copied workflow by workflow, each in its own order."""
    verify_reports: list[VerifyReport] = field(default_factory=list)
    """verify of the destination after the copy (one per workflow given, else one); empty on a dry
    run, when verification was not asked for, or when the destination does not declare what
    verify needs (``inspect`` and ``raw_access``)."""

    @property
    def ok(self) -> bool:
        return not self.problems and self.order_preserved and all(r.ok for r in self.verify_reports)

    @property
    def conflicts(self) -> list[CopyProblem]:
        return [problem for problem in self.problems if problem.kind == "conflict"]

    def totals(self) -> WorkflowCopy:
        total = WorkflowCopy("total")
        for item in self.workflows:
            for name in ("checkpoints", "nested", "tombstones", "writes", "written", "present", "bytes"):
                setattr(total, name, getattr(total, name) + getattr(item, name))
        return total

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "destination": self.destination,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "order_preserved": self.order_preserved,
            "workflows": [item.to_dict() for item in self.workflows],
            "totals": self.totals().to_dict(),
            "problems": [problem.to_dict() for problem in self.problems],
            "verify": [report.to_dict() for report in self.verify_reports],
        }


__all__ = ["CopyProblem", "CopyProgress", "CopyReport", "WorkflowCopy"]
