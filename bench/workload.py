"""The benchmark checkpoint: about 4 KB of MAF-encoded JSON, the same content for every storage.

Only values both codecs can carry: JSON natives plus a few datetimes and tuples (MAF pickles
those; our codec has typed extensions for them). Keys are strings, as MAF returns them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

WORKFLOW_NAME = "bench-workflow"
GRAPH_SIGNATURE = "9f2c4e6a1b3d5f7e9a0c2e4b6d8f1a3c5e7b9d0f2a4c6e8b1d3f5a7c9e0b2d4f"
_EPOCH = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _state() -> dict[str, Any]:
    executors: dict[str, Any] = {
        f"exec_{index:02d}": {
            "turn": index,
            "status": "waiting" if index % 3 else "done",
            "score": index * 0.25,
        }
        for index in range(40)
    }
    return {
        "_executor_state": executors,
        "plan": {
            "goal": "summarise the quarterly report",
            "steps": ["fetch", "split", "summarise", "review"],
        },
        "deadline": _EPOCH + dt.timedelta(hours=6),
        "last_tool_call": _EPOCH + dt.timedelta(minutes=42),
        "window": ("2025-01-01", "2025-03-31"),
        "budget": (1200, 4096),
    }


def _messages() -> dict[str, list[Any]]:
    def message(source: str, target: str, text: str) -> dict[str, Any]:
        return {"source_id": source, "target_id": target, "data": {"role": "assistant", "text": text}}

    return {
        "planner": [message("planner", "writer", "Outline the summary in four sections.")],
        "writer": [
            message("writer", "reviewer", "Draft of section one: revenue grew in every region."),
            message("writer", "reviewer", "Draft of section two: costs were flat."),
        ],
    }


def _metadata() -> dict[str, Any]:
    return {"superstep": 12, "created_by": "bench", "started_at": _EPOCH, "labels": ["nightly", "eu"]}


def template(checkpoint_class: type[Any]) -> Any:
    """The benchmark checkpoint as an instance of ``checkpoint_class`` (ours or MAF's)."""
    return checkpoint_class(
        workflow_name=WORKFLOW_NAME,
        graph_signature_hash=GRAPH_SIGNATURE,
        checkpoint_id="bench-00000000",
        previous_checkpoint_id=None,
        timestamp=_EPOCH.isoformat(),
        messages=_messages(),
        state=_state(),
        pending_request_info_events={},
        iteration_count=12,
        metadata=_metadata(),
    )


def checkpoint_id(index: int, series: str = "main") -> str:
    return f"bench-{series}-{index:08d}"


def numbered(base: Any, index: int, series: str = "main") -> Any:
    """``base`` with a unique id, a link to its predecessor and a strictly later timestamp.

    The content is shared with ``base``: every storage snapshots on save, so that is safe.
    Timestamps increase with ``index`` because MAF's storages pick "latest" by timestamp.
    """
    return dataclasses.replace(
        base,
        checkpoint_id=checkpoint_id(index, series),
        previous_checkpoint_id=checkpoint_id(index - 1, series) if index else None,
        timestamp=(_EPOCH + dt.timedelta(milliseconds=index)).isoformat(),
    )


def series_of(base: Any, start: int, stop: int, series: str = "main") -> Iterator[Any]:
    for index in range(start, stop):
        yield numbered(base, index, series)
