"""Section 1: our codec against MAF's encoder on the same ~4 KB checkpoint."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from storages.codec import CheckpointCodec
from storages.contract import WorkflowCheckpoint

from .measure import Budget, Measurement, ratio, time_sync
from .workload import template

CODEC_ROWS: dict[str, str] = {
    "ours": "ours CheckpointCodec (msgpack)",
    "maf-json": "MAF encoder + json (compact)",
    "maf-file": "MAF as FileCheckpointStorage (indent=2, validating decode on save)",
}


STEPS = ("encode", "decode", "roundtrip")


def _steps(encode: Callable[[], Any], decode: Callable[[], Any]) -> dict[str, Callable[[], Any]]:
    def roundtrip() -> None:
        encode()
        decode()

    return {"encode": encode, "decode": decode, "roundtrip": roundtrip}


def run_codec(budget: Budget) -> dict[str, Any]:
    """Encode, decode and both, per codec; ratios are MAF time ÷ our time."""
    from agent_framework import WorkflowCheckpoint as MafWorkflowCheckpoint
    from agent_framework._workflows._checkpoint_encoding import (
        decode_checkpoint_value,
        encode_checkpoint_value,
    )

    codec = CheckpointCodec()
    ours = template(WorkflowCheckpoint)
    ours_id = ours.checkpoint_id
    ours_body = codec.encode_checkpoint(ours)
    if codec.decode_checkpoint(ours_body, checkpoint_id=ours_id) != ours:
        raise AssertionError("our codec did not round-trip the benchmark checkpoint")

    maf = template(MafWorkflowCheckpoint)
    no_extra_types: frozenset[str] = frozenset()

    def maf_encode_compact() -> str:
        return json.dumps(encode_checkpoint_value(maf.to_dict()))

    def maf_encode_as_file() -> str:
        encoded = encode_checkpoint_value(maf.to_dict())
        decode_checkpoint_value(
            encoded, allowed_types=no_extra_types
        )  # FileCheckpointStorage.save checks this
        return json.dumps(encoded, indent=2, ensure_ascii=False)

    def maf_decoder(text: str) -> Callable[[], Any]:
        return lambda: MafWorkflowCheckpoint.from_dict(
            decode_checkpoint_value(json.loads(text), allowed_types=no_extra_types)
        )

    compact_text = maf_encode_compact()
    file_text = maf_encode_as_file()
    for text in (compact_text, file_text):
        if maf_decoder(text)() != maf:
            raise AssertionError("MAF's encoder did not round-trip the benchmark checkpoint")

    candidates: dict[str, tuple[bytes | str, dict[str, Callable[[], Any]]]] = {
        "ours": (
            ours_body,
            _steps(
                lambda: codec.encode_checkpoint(ours),
                lambda: codec.decode_checkpoint(ours_body, checkpoint_id=ours_id),
            ),
        ),
        "maf-json": (compact_text, _steps(maf_encode_compact, maf_decoder(compact_text))),
        "maf-file": (file_text, _steps(maf_encode_as_file, maf_decoder(file_text))),
    }
    timings: dict[str, Measurement] = time_sync(
        {f"{key}/{step}": fn for key, (_, steps) in candidates.items() for step, fn in steps.items()}, budget
    )
    rows: dict[str, dict[str, Any]] = {
        key: {
            "label": CODEC_ROWS[key],
            "body_bytes": len(body.encode() if isinstance(body, str) else body),
        }
        | {step: timings[f"{key}/{step}"].to_json() for step in STEPS}
        for key, (body, _) in candidates.items()
    }

    def median_us(key: str, step: str) -> float:
        return float(timings[f"{key}/{step}"].median_us)

    ratios = {
        maf_key: {step: ratio(median_us(maf_key, step), median_us("ours", step)) for step in STEPS}
        for maf_key in ("maf-json", "maf-file")
    }
    return {"rows": rows, "maf_over_ours": ratios}
