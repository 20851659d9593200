"""Import a MAF ``FileCheckpointStorage`` directory: ``checkpoint-storages import-maf`` and
:func:`import_maf_directory`.

Each ``<checkpoint_id>.json`` file is read by MAF's own ``FileCheckpointStorage.load``, so MAF's
allow-list decides what decodes, exactly as it would for the application: MAF's built-in safe
types, ``agent_framework`` and OpenAI SDK types, types registered with
``register_checkpoint_type``, and the ``allowed_checkpoint_types`` given here. A file MAF refuses
(a type not allowed, not JSON, not UTF-8, an id that is not its file name) is reported and not
imported; everything else is.

What is kept: ids, every field, previous links, graph signatures, and the sub-workflow checkpoints
MAF embeds in a parent's state (stored as nested records of their container). What is inferred:
the commit order, which a directory of files does not have. MAF itself orders by timestamp, so
checkpoints are saved in timestamp order, except that a checkpoint always comes after the
checkpoint it continues (its previous id) when that one is in the directory too; ties go to the
checkpoint id. The destination then numbers them in that order.
"""

from __future__ import annotations

import asyncio
import heapq
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ...codec import CheckpointCodec
from ...contract import Capability, CheckpointID, CheckpointStorage
from ...errors import CheckpointConflictError, MissingDependencyError, UnsupportedOperationError
from ..verify import describe_storage, verify
from .report import CopyProblem, CopyProgress, CopyReport, WorkflowCopy


async def import_maf_directory(
    directory: str | Path,
    destination: CheckpointStorage,
    *,
    allowed_checkpoint_types: Iterable[str] = (),
    dry_run: bool = False,
    progress: CopyProgress | None = None,
    verify_destination: bool = True,
) -> CopyReport:
    """Save every checkpoint of a MAF ``FileCheckpointStorage`` directory into ``destination``
    (see the module docstring). Idempotent: importing again stores nothing new, and a checkpoint
    the destination holds with other content is reported as a conflict and left as it is."""
    try:
        from agent_framework import FileCheckpointStorage
    except ImportError as exc:  # pragma: no cover - the maf extra is part of the dev install
        raise MissingDependencyError("import-maf", "maf", "agent_framework") from exc
    if Capability.INSPECT not in destination.capabilities:
        raise UnsupportedOperationError(describe_storage(destination), "import-maf", Capability.INSPECT.value)
    path = Path(directory)
    sizes = await asyncio.to_thread(_checkpoint_files, path)
    files = FileCheckpointStorage(path, allowed_checkpoint_types=list(allowed_checkpoint_types))
    codec: CheckpointCodec | None = getattr(destination, "codec", None)
    report = CopyReport(str(path), describe_storage(destination), dry_run)

    allowed = list(allowed_checkpoint_types)
    checkpoints: dict[CheckpointID, Any] = {}
    for checkpoint_id in sizes:
        file = path / f"{checkpoint_id}.json"
        try:
            checkpoint = await files.load(checkpoint_id)
        except Exception as exc:  # MAF raises its WorkflowCheckpointException, or a decoder's error
            refused_type, why = _refusal(exc, allowed)
            report.problems.append(_refused(checkpoint_id, f"MAF refuses {file.name}: {why}", refused_type))
            continue
        if checkpoint.checkpoint_id != checkpoint_id:
            report.problems.append(
                _refused(
                    checkpoint_id,
                    f"{file.name} holds checkpoint {checkpoint.checkpoint_id!r}, not the one its name says; "
                    "MAF would not find it under either id",
                )
            )
            continue
        checkpoints[checkpoint_id] = checkpoint

    if not checkpoints:
        return report  # nothing to import: the destination is not even opened
    ordered, report.order_preserved = _inferred_order(checkpoints)
    present = {info.checkpoint_id for info in await destination.list_records()}
    stats: dict[str, WorkflowCopy] = {}
    total = len(ordered)
    if progress is not None:
        progress(0, total)
    for done, checkpoint in enumerate(ordered, start=1):
        counted = stats.setdefault(checkpoint.workflow_name, WorkflowCopy(checkpoint.workflow_name))
        counted.checkpoints += 1
        counted.bytes += sizes[checkpoint.checkpoint_id]
        # The sub-workflow checkpoints MAF embedded: each is stored as a nested record of its own,
        # counted under its own workflow name as copy counts them.
        nested = [] if codec is None else codec.encode_checkpoint_tree(checkpoint)[1:]
        try:
            if not dry_run:
                await destination.save(checkpoint)
        except CheckpointConflictError as exc:
            report.problems.append(
                CopyProblem(
                    "conflict",
                    checkpoint.checkpoint_id,
                    checkpoint.workflow_name,
                    f"not imported: {exc}; the destination keeps what it holds",
                )
            )
        else:
            if checkpoint.checkpoint_id in present:
                counted.present += 1
            else:
                counted.written += 1
            for node in nested:
                name = node.checkpoint.workflow_name
                inner = stats.setdefault(name, WorkflowCopy(name))
                inner.nested += 1
                if node.checkpoint.checkpoint_id in present:
                    inner.present += 1
                else:
                    inner.written += 1
        if progress is not None:
            progress(done, total)
    report.workflows = [stats[name] for name in sorted(stats)]
    if not dry_run and verify_destination:
        for name in sorted(stats):
            report.verify_reports.append(await verify(destination, workflow_name=name))
    return report


def _checkpoint_files(path: Path) -> dict[CheckpointID, int]:
    """``{checkpoint id: file size}`` of the directory's ``<id>.json`` files, by name."""
    if not path.is_dir():  # MAF's storage would create it: an import never does
        raise FileNotFoundError(f"{path}: no such directory")
    return {file.name[: -len(".json")]: file.stat().st_size for file in sorted(path.glob("*.json"))}


def _refused(checkpoint_id: CheckpointID, message: str, refused_type: str | None = None) -> CopyProblem:
    return CopyProblem("refused_file", checkpoint_id, "", message, refused_type)


_BLOCKED_TYPE = re.compile(r"blocked for (?:nested )?type '([^']+)'")
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def _refusal(error: Exception, allowed: list[str]) -> tuple[str | None, str]:
    """The type MAF refused (if that was why) and why, in words of our own: MAF's message speaks
    of its private decoder's arguments, not of what the importer can do."""
    text = str(error)
    blocked = _BLOCKED_TYPE.search(text)
    if blocked is not None:
        return blocked[1], f"it holds type {blocked[1]}, which MAF's allow-list does not include"
    missing = _MISSING_MODULE.search(text)
    if missing is not None:
        module = missing[1]
        key = next((t for t in allowed if module in _module_and_parents(t.partition(":")[0])), None)
        what = f"type {key}" if key is not None else "a type"
        return key, f"it holds {what}, allowed, but its module {module!r} cannot be imported here"
    return None, f"MAF cannot load it: {text}"


def _module_and_parents(module: str) -> list[str]:
    """``a.b.c``: ``a.b.c``, ``a.b``, ``a`` (an import of any of them can be what failed)."""
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(len(parts), 0, -1)]


def _inferred_order(checkpoints: dict[CheckpointID, Any]) -> tuple[list[Any], bool]:
    """Timestamp order, each checkpoint after its previous one (when present); ties by id."""
    waiting_on: dict[CheckpointID, list[CheckpointID]] = {}
    blocked: set[CheckpointID] = set()
    for checkpoint_id, checkpoint in checkpoints.items():
        previous = checkpoint.previous_checkpoint_id
        if previous is not None and previous in checkpoints and previous != checkpoint_id:
            waiting_on.setdefault(previous, []).append(checkpoint_id)
            blocked.add(checkpoint_id)

    def key(checkpoint_id: CheckpointID) -> tuple[datetime, str, CheckpointID]:
        stamp = checkpoints[checkpoint_id].timestamp
        return (_when(stamp), str(stamp), checkpoint_id)

    ready = [(key(i), i) for i in checkpoints if i not in blocked]
    heapq.heapify(ready)
    ordered: list[Any] = []
    while ready:
        _, checkpoint_id = heapq.heappop(ready)
        ordered.append(checkpoints[checkpoint_id])
        for after in waiting_on.get(checkpoint_id, ()):
            heapq.heappush(ready, (key(after), after))
    if len(ordered) == len(checkpoints):
        return ordered, True
    # Previous links that loop: the rest in timestamp order.
    done = {checkpoint.checkpoint_id for checkpoint in ordered}
    rest = sorted((i for i in checkpoints if i not in done), key=key)
    return ordered + [checkpoints[i] for i in rest], False


_EARLIEST = datetime.min.replace(tzinfo=UTC)


def _when(stamp: object) -> datetime:
    """A checkpoint's timestamp as an aware datetime (naive: UTC); unreadable ones first."""
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return _EARLIEST
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


__all__ = ["import_maf_directory"]
