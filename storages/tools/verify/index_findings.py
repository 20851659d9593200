"""What verify finds from the index alone, with no body read: previous links that form a cycle,
a signature that changes along a chain, and what is nested in a record at any depth.

Pure functions of the records a scan holds, apart from the scan's reading (scan.py) so each can
be read, and tested, on its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from ...contract import CheckpointID, CheckpointInfo
from .report import Finding, FindingKind, abbreviate_signature


def descendants(
    refs: Mapping[CheckpointID, Iterable[CheckpointID]], checkpoint_id: CheckpointID
) -> list[CheckpointID]:
    """Records nested in ``checkpoint_id`` at any depth, nearest first (``refs``: container ->
    the records it names)."""
    found: dict[CheckpointID, None] = {}
    pending = deque(refs.get(checkpoint_id, ()))
    while pending:
        current = pending.popleft()
        if current not in found:
            found[current] = None
            pending.extend(refs.get(current, ()))
    return list(found)


def signature_change(info: CheckpointInfo, previous: CheckpointInfo) -> Finding | None:
    """The finding for ``info`` having another graph signature than its previous checkpoint."""
    if info.graph_signature_hash == previous.graph_signature_hash:
        return None
    return Finding(
        FindingKind.SIGNATURE_CHANGE,
        (info.checkpoint_id, previous.checkpoint_id),
        f"checkpoint {info.checkpoint_id!r} has graph signature "
        f"{abbreviate_signature(info.graph_signature_hash)!r} but its previous checkpoint "
        f"{previous.checkpoint_id!r} has {abbreviate_signature(previous.graph_signature_hash)!r}",
        info.workflow_name,
    )


def cycles(scope: Mapping[CheckpointID, CheckpointInfo]) -> list[Finding]:
    """One finding per cycle of previous links among the records in ``scope``."""
    # Each record has at most one previous id, so every cycle is found by walking from each
    # record until the walk meets a record it has seen: on this walk (a cycle) or an earlier one.
    found: list[Finding] = []
    done: set[CheckpointID] = set()
    for start in scope:
        path: list[CheckpointID] = []
        on_path: dict[CheckpointID, int] = {}
        current: CheckpointID | None = start
        while current is not None and current in scope and current not in done:
            if current in on_path:
                members = path[on_path[current] :]
                chain = " -> ".join([*members, current])
                found.append(
                    Finding(
                        FindingKind.CYCLE,
                        tuple(members),
                        f"previous links form a cycle of {plural(members, 'checkpoint')}: {chain}",
                        scope[members[0]].workflow_name,
                    )
                )
                break
            on_path[current] = len(path)
            path.append(current)
            current = scope[current].previous_checkpoint_id
        done.update(path)
    return found


def plural(items: list[CheckpointID], noun: str) -> str:
    return f"{len(items)} {noun}" + ("" if len(items) == 1 else "s")


def names(ids: Iterable[CheckpointID]) -> str:
    return ", ".join(repr(i) for i in ids)


__all__ = ["cycles", "descendants", "names", "plural", "signature_change"]
