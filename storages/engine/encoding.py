"""What a save writes: the records of one checkpoint, encoded once. The checkpoint is the first
record; with ``nested``, each checkpoint embedded in it follows, in the order met. A keyed handle
seals these drafts (sealing.py); an unkeyed one stores them as they are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codec.overrides import BodyCodec
from ..records import CheckpointRecord, RecordDraft
from .validation import check_fields


def record_drafts(codec: BodyCodec, checkpoint: Any, *, nested: bool, sealed: bool) -> list[RecordDraft]:
    """The drafts of one save, fields checked. ``sealed`` frames the bodies for a seal (no checksum:
    the MAC covers them; a codec whose overrides predate the keyword keeps it). A flat checkpoint
    (check_fields: nothing can be embedded) is one body on every backend, encoded without the
    codec's look for embedded checkpoints."""
    flat = check_fields(checkpoint)
    if flat or not nested:
        body = codec.encode_checkpoint(checkpoint, bin_from_bytes_only=flat, sealed=sealed)
        return [
            (
                checkpoint.checkpoint_id,
                checkpoint.workflow_name,
                checkpoint.previous_checkpoint_id,
                checkpoint.graph_signature_hash,
                body,
                None,
                None,
                0,
            )
        ]
    nodes = codec.encode_checkpoint_tree(checkpoint, sealed=sealed)
    top_id = checkpoint.checkpoint_id
    drafts: list[RecordDraft] = []
    for position, node in enumerate(nodes):
        embedded = node.checkpoint
        if position:
            check_fields(embedded, embedded_in=node.container_id)
        drafts.append(
            (
                embedded.checkpoint_id,
                embedded.workflow_name,
                embedded.previous_checkpoint_id,
                embedded.graph_signature_hash,
                node.body,
                node.container_id,
                top_id if position else None,
                position,
            )
        )
    return drafts


def plain_records(drafts: Sequence[RecordDraft]) -> list[CheckpointRecord]:
    """Records of an unkeyed save: the drafts as they are (a digest is computed if a backend asks)."""
    return [
        CheckpointRecord(
            checkpoint_id, workflow_name, previous_id, signature, body, "", container_id, root_id, position
        )
        for (checkpoint_id, workflow_name, previous_id, signature, body, container_id, root_id, position) in (
            drafts
        )
    ]
