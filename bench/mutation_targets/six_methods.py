"""A six-method storage: MAF's ``CheckpointStorage`` protocol and nothing else, over dicts.

Written from the protocol alone, as an outside author would: ``save``, ``load``,
``list_checkpoints``, ``list_checkpoint_ids``, ``delete`` and ``get_latest``. Checkpoints are kept
encoded by the project's codec (a value it cannot store fails the save, and every read builds a
fresh object); every handle over the same :class:`Shelf` sees the same checkpoints. No capability
is declared. ``python -m bench.mutation --target six`` mutates this module.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from storages.codec import CheckpointCodec
from storages.contract import validate_identifier
from storages.errors import CheckpointConflictError, CheckpointNotFoundError


@dataclass(frozen=True)
class Saved:
    """One stored checkpoint: its body and the fields ``get_latest`` and ``delete`` need."""

    workflow_name: str
    previous_checkpoint_id: str | None
    graph_signature_hash: str
    timestamp: object
    body: bytes


@dataclass
class Shelf:
    """The store every handle shares: checkpoints by id, and each workflow's ids in save order."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    by_id: dict[str, Saved] = field(default_factory=dict)
    order: dict[str, list[str]] = field(default_factory=dict)
    codec: CheckpointCodec = field(default_factory=lambda: CheckpointCodec(trust_saved_types=True))


class SixMethodStorage:
    """The six methods over a :class:`Shelf` (a fresh one unless given)."""

    def __init__(self, shelf: Shelf | None = None) -> None:
        self.shelf = shelf if shelf is not None else Shelf()

    async def save(self, checkpoint: Any) -> str:
        checkpoint_id = validate_identifier(checkpoint.checkpoint_id, "checkpoint_id")
        saved = Saved(
            validate_identifier(checkpoint.workflow_name, "workflow_name"),
            _previous_id(checkpoint.previous_checkpoint_id),
            checkpoint.graph_signature_hash,
            checkpoint.timestamp,
            self.shelf.codec.encode_checkpoint(checkpoint),
        )
        with self.shelf.lock:
            stored = self.shelf.by_id.get(checkpoint_id)
            if stored is not None:
                # Equal content may encode to other bytes (a set's order): equal once decoded is equal.
                if stored != saved and self._decoded(checkpoint_id, stored) != checkpoint:
                    raise CheckpointConflictError(checkpoint_id, "stored with other contents")
                return checkpoint_id
            self.shelf.by_id[checkpoint_id] = saved
            self.shelf.order.setdefault(saved.workflow_name, []).append(checkpoint_id)
        return checkpoint_id

    async def load(self, checkpoint_id: str) -> Any:
        validate_identifier(checkpoint_id, "checkpoint_id")
        with self.shelf.lock:
            stored = self.shelf.by_id.get(checkpoint_id)
        if stored is None:
            raise CheckpointNotFoundError(checkpoint_id)
        return self._decoded(checkpoint_id, stored)

    async def list_checkpoints(self, *, workflow_name: str) -> list[Any]:
        validate_identifier(workflow_name, "workflow_name")
        with self.shelf.lock:
            ids = list(self.shelf.order.get(workflow_name, []))
            stored = [self.shelf.by_id[checkpoint_id] for checkpoint_id in ids]
        return [self._decoded(i, s) for i, s in zip(ids, stored, strict=True)]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        validate_identifier(workflow_name, "workflow_name")
        with self.shelf.lock:
            return list(self.shelf.order.get(workflow_name, []))

    async def delete(self, checkpoint_id: str) -> bool:
        validate_identifier(checkpoint_id, "checkpoint_id")
        with self.shelf.lock:
            stored = self.shelf.by_id.pop(checkpoint_id, None)
            if stored is None:
                return False
            self.shelf.order[stored.workflow_name].remove(checkpoint_id)
        return True

    async def get_latest(self, *, workflow_name: str) -> Any:
        validate_identifier(workflow_name, "workflow_name")
        with self.shelf.lock:
            ids = list(self.shelf.order.get(workflow_name, []))
            saved = {checkpoint_id: self.shelf.by_id[checkpoint_id] for checkpoint_id in ids}
        if not ids:
            return None
        tip = _lineage_tip(ids, saved)
        chosen = _resume_point([*_rivals(ids, saved, tip), tip], saved)
        return self._decoded(chosen, saved[chosen])

    def _decoded(self, checkpoint_id: str, stored: Saved) -> Any:
        return self.shelf.codec.decode_checkpoint(stored.body, checkpoint_id=checkpoint_id)


def _previous_id(previous_id: str | None) -> str | None:
    return None if previous_id is None else validate_identifier(previous_id, "previous_checkpoint_id")


def _lineage_tip(ids: list[str], saved: dict[str, Saved]) -> str:
    """The checkpoint a run resumes from (docs/contract.md, "Latest"): the newest saved, then while
    a checkpoint of its graph signature names it as previous, the newest such one (each once)."""
    tip = ids[-1]
    seen = {tip}
    while True:
        following = [
            i
            for i in ids
            if saved[i].previous_checkpoint_id == tip
            and saved[i].graph_signature_hash == saved[tip].graph_signature_hash
            and i not in seen
        ]
        if not following:
            return tip
        tip = following[-1]
        seen.add(tip)


RIVALS_READ = 64
"""At most this many rivals count: the ones saved last (docs/contract.md, "Latest")."""


def _rivals(ids: list[str], saved: dict[str, Saved], tip: str) -> list[str]:
    """The tip's rivals (parallel steps), in save order: leaves of its signature (no checkpoint of
    it names them as previous) that continue the tip's previous checkpoint, or for a root tip the
    leaf roots saved right before it."""
    signature = saved[tip].graph_signature_hash
    continued = {(s.previous_checkpoint_id, s.graph_signature_hash) for s in saved.values()}

    def leaf(checkpoint_id: str) -> bool:
        return (checkpoint_id, saved[checkpoint_id].graph_signature_hash) not in continued

    previous = saved[tip].previous_checkpoint_id
    if previous is None:  # a root tip is the newest saved of its signature
        roots: list[str] = []
        for i in reversed(ids[: ids.index(tip)]):
            if (
                saved[i].previous_checkpoint_id is not None
                or saved[i].graph_signature_hash != signature
                or not leaf(i)
                or len(roots) == RIVALS_READ
            ):
                break
            roots.append(i)
        return roots[::-1]
    siblings = [
        i
        for i in ids
        if i != tip
        and saved[i].previous_checkpoint_id == previous
        and saved[i].graph_signature_hash == signature
        and leaf(i)
    ]
    return siblings[-RIVALS_READ:]


def _resume_point(candidates: list[str], saved: dict[str, Saved]) -> str:
    """Of the rivals and the tip, in save order (the tip last): the newest timestamp, the one saved
    last on equal ones; a timestamp that does not parse ranks below every one that does."""
    best, best_moment = candidates[-1], _moment(saved[candidates[-1]].timestamp)
    for i in reversed(candidates[:-1]):
        moment = _moment(saved[i].timestamp)
        if moment is not None and (best_moment is None or moment > best_moment):
            best, best_moment = i, moment
    return best


def _moment(timestamp: object) -> datetime | None:
    """An ISO 8601 timestamp as an instant (UTC when it names no offset, as MAF reads it)."""
    try:
        moment = datetime.fromisoformat(timestamp)  # type: ignore[arg-type]  # anything may be saved
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
