"""What the lineage shows of a body, read without constructing a value (no application type is
needed) and without the records nested in it (a container's references to them are skipped, not
resolved): its timestamp and step, the nodes it is about, and whether it waits on a person.

* MAF: the step is the superstep (``iteration_count``); the nodes are the executors whose
  messages the checkpoint holds (they ran in that superstep; the messages go out in the next);
  a pending request (``pending_request_info_events``: ``request_info``, a human in the loop)
  is a checkpoint waiting on an answer.
* LangGraph: the step and source (``input``, ``loop``, ``update``, ``fork``) are its metadata's;
  the nodes are the ones it runs next (its ``branch:to:<node>`` channels, or ``__start__``);
  whether it waits on an interrupt is in its pending writes, which :func:`stream_lineage` reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ...codec import frame as framing
from ...codec.decoding import RECORD_VERSION
from ...contract import CHECKPOINT_FIELDS, CheckpointID, CheckpointStorage
from ...errors import CheckpointCorruptedError, InvalidCheckpointIdError

_TIMESTAMP = 2 + CHECKPOINT_FIELDS.index("timestamp")
_ITERATION = 2 + CHECKPOINT_FIELDS.index("iteration_count")
_MESSAGES = 2 + CHECKPOINT_FIELDS.index("messages")
_STATE = 2 + CHECKPOINT_FIELDS.index("state")
_PENDING = 2 + CHECKPOINT_FIELDS.index("pending_request_info_events")
_RECORD_LENGTH = 2 + len(CHECKPOINT_FIELDS)
TIMESTAMP_WIDTH = 64
"""Longest timestamp kept from a body, in characters (a stored one is hostile data)."""
NAME_WIDTH = 64
"""Longest node or executor name kept from a body, in characters."""
NAMES_KEPT = 8
"""Node or executor names kept from one body at most."""
_BRANCH_TO = "branch:to:"


@dataclass(frozen=True, slots=True)
class BodyFields:
    """What a lineage line shows of a body; ``error`` says why it is absent, if it is."""

    timestamp: str | None = None
    iteration_count: int | None = None
    error: str | None = None
    step: int | None = None
    """LangGraph's step (its metadata's), else the superstep (``iteration_count``)."""
    nodes: tuple[str, ...] = ()
    """LangGraph: the nodes it runs next; MAF: the executors whose messages it holds."""
    nodes_role: str | None = None
    """``"next"`` (LangGraph) or ``"from"`` (MAF) for :attr:`nodes`."""
    source: str | None = None
    """LangGraph: what made the checkpoint (``input``, ``loop``, ``update``, ``fork``)."""
    waiting: int = 0
    """MAF: requests waiting on an answer (``request_info``)."""
    interrupt: str | None = None
    """LangGraph: ``"waiting"`` on an interrupt, or ``"answered"`` (resumed since)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "iteration_count": self.iteration_count,
            "step": self.step,
            "nodes": list(self.nodes),
            "nodes_role": self.nodes_role,
            "source": self.source,
            "waiting": self.waiting,
            "interrupt": self.interrupt,
            "body_error": self.error,
        }


def _skip_extension(code: int, data: memoryview) -> None:
    return None


def peek_fields(body: bytes, *, checkpoint_id: CheckpointID, sealed: bool = False) -> BodyFields:
    """The timestamp and iteration number of a codec body (``sealed`` as in ``decode_checkpoint``)."""
    try:
        flags, payload = framing.check_frame(body, checkpoint_id, sealed)
        if flags & framing.FLAG_ZSTD:
            payload = memoryview(
                framing.decompress_bounded(
                    payload,
                    checkpoint_id,
                    framing.DEFAULT_MAX_PAYLOAD_BYTES,
                    framing.DEFAULT_MAX_COMPRESSION_RATIO,
                )
            )
        wire = msgspec.msgpack.decode(payload, ext_hook=_skip_extension)
    except CheckpointCorruptedError as exc:
        return BodyFields(error=exc.reason)
    except Exception as exc:  # msgspec's own errors: the payload is not msgpack
        return BodyFields(error=f"cannot be decoded: {type(exc).__name__}")
    if type(wire) is not list or len(wire) != _RECORD_LENGTH or wire[0] != RECORD_VERSION:
        return BodyFields(error="not a checkpoint record of this format version")
    timestamp, iteration = wire[_TIMESTAMP], wire[_ITERATION]
    iteration_count = iteration if type(iteration) is int else None
    fields = BodyFields(
        timestamp=timestamp[:TIMESTAMP_WIDTH] if isinstance(timestamp, str) else None,
        iteration_count=iteration_count,
        step=iteration_count,
    )
    state, messages, pending = wire[_STATE], wire[_MESSAGES], wire[_PENDING]
    graph = _langgraph_blobs(state)
    if graph is not None:
        metadata, checkpoint = graph
        step = metadata.get("step") if isinstance(metadata, dict) else None
        source = metadata.get("source") if isinstance(metadata, dict) else None
        nodes = _next_nodes(checkpoint.get("channel_values") if isinstance(checkpoint, dict) else None)
        return dataclasses.replace(
            fields,
            step=step if type(step) is int else fields.step,
            source=source[:NAME_WIDTH] if isinstance(source, str) else None,
            nodes=_names(nodes),
            nodes_role="next" if nodes else None,
        )
    senders = [name for name in messages if isinstance(name, str)] if isinstance(messages, dict) else []
    return dataclasses.replace(
        fields,
        nodes=_names(senders),
        nodes_role="from" if senders else None,
        waiting=len(pending) if isinstance(pending, dict) else 0,
    )


def _next_nodes(channels: Any) -> list[str]:
    """The nodes a LangGraph checkpoint runs next: its ``branch:to:<node>`` channels (the input
    checkpoint's is ``__start__``)."""
    if not isinstance(channels, dict):
        return []
    nodes = [
        channel[len(_BRANCH_TO) :]
        for channel in channels
        if isinstance(channel, str) and channel.startswith(_BRANCH_TO)
    ]
    return nodes or (["__start__"] if "__start__" in channels else [])


def _names(names: list[str]) -> tuple[str, ...]:
    return tuple(name[:NAME_WIDTH] for name in names[:NAMES_KEPT])


def _langgraph_blobs(state: Any) -> tuple[Any, Any] | None:
    """A LangGraph record's metadata and checkpoint, read as msgpack without constructing what
    they hold (LangGraph's serializer writes them as msgpack; other types are not read)."""
    if not isinstance(state, dict) or state.get("checkpoint_type") != "msgpack":
        return None
    metadata, checkpoint = state.get("metadata"), state.get("checkpoint")
    if state.get("metadata_type") != "msgpack" or not isinstance(metadata, bytes):
        return None
    if not isinstance(checkpoint, bytes):
        return None
    try:
        return (
            msgspec.msgpack.decode(metadata, ext_hook=_skip_extension),
            msgspec.msgpack.decode(checkpoint, ext_hook=_skip_extension),
        )
    except Exception:  # not msgpack after all: the line shows what the body itself says
        return None


async def peek_body_fields(storage: CheckpointStorage, checkpoint_id: CheckpointID) -> BodyFields:
    """The fields of a stored record's body (capability ``raw_access``), its seal checked first on
    a storage with an integrity key."""
    try:
        raw = await storage.read_raw_body(checkpoint_id)
    except InvalidCheckpointIdError as exc:  # an id the index holds but no read accepts
        return BodyFields(error=str(exc))
    if raw is None:
        return BodyFields(error="no stored body")
    open_sealed: Callable[[CheckpointID, bytes], tuple[Any, bytes]] | None = (
        getattr(storage, "open_sealed", None) if getattr(storage, "integrity_enabled", False) else None
    )
    if open_sealed is None:
        return peek_fields(raw, checkpoint_id=checkpoint_id)
    try:
        _, body = open_sealed(checkpoint_id, raw)
    except CheckpointCorruptedError as exc:  # CheckpointTamperedError too
        return BodyFields(error=exc.reason)
    return peek_fields(body, checkpoint_id=checkpoint_id, sealed=True)


__all__ = ["TIMESTAMP_WIDTH", "BodyFields", "peek_body_fields", "peek_fields"]
