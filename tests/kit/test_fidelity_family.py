"""The fidelity family passes the in-memory storage and catches storages that change values."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from conformance import BackendReport, Outcome, all_clauses
from storages.errors import UnserializableValueError
from storages.memory import InMemoryCheckpointStorage

from . import support
from .double import DoubleStorage
from .support import caught_only_by, failed

FAMILY = "fidelity"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


def _tuples_to_lists(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_tuples_to_lists(item) for item in value]
    if isinstance(value, dict):
        return {key: _tuples_to_lists(item) for key, item in value.items()}
    return value


class TuplesBecomeLists(DoubleStorage):
    """Stores tuples as lists, as any JSON-shaped codec does."""

    async def save(self, checkpoint: Any) -> str:
        return await super().save(dataclasses.replace(checkpoint, state=_tuples_to_lists(checkpoint.state)))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(item) for item in value]
    if value is None or isinstance(value, (str, int, float)):
        return value
    return repr(value)


class JsonState(DoubleStorage):
    """Passes state through JSON (keys as str, other values as their repr), like a naive JSON backend."""

    async def save(self, checkpoint: Any) -> str:
        state = json.loads(json.dumps(_jsonable(checkpoint.state)))
        return await super().save(dataclasses.replace(checkpoint, state=state))


class AcceptsUnencodable(DoubleStorage):
    """Stores the repr of values it cannot encode instead of refusing the save."""

    async def save(self, checkpoint: Any, **options: Any) -> str:
        try:
            return await super().save(checkpoint, **options)
        except UnserializableValueError:
            state = json.loads(json.dumps(_jsonable(checkpoint.state)))
            return await super().save(dataclasses.replace(checkpoint, state=state), **options)


class StripsSignature(DoubleStorage):
    """Trims whitespace off graph signatures, as a backend normalising keys might."""

    async def save(self, checkpoint: Any) -> str:
        signature = checkpoint.graph_signature_hash.strip()
        return await super().save(dataclasses.replace(checkpoint, graph_signature_hash=signature))


class DropsMetadata(DoubleStorage):
    """Forgets metadata, as a backend storing only the fields it indexes might."""

    async def save(self, checkpoint: Any) -> str:
        return await super().save(dataclasses.replace(checkpoint, metadata={}))


class CapsEachValue(DoubleStorage):
    """Keeps the first 64 KiB of each top-level str value, as a store with a text column per value
    might: the body it writes still decodes."""

    async def save(self, checkpoint: Any) -> str:
        state = {k: v[: 64 * 1024] if isinstance(v, str) else v for k, v in checkpoint.state.items()}
        return await super().save(dataclasses.replace(checkpoint, state=state))


def test_in_memory_storage_passes_every_fidelity_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert len(backend.results) == len([c for c in all_clauses() if c.family == FAMILY])
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures


def test_tuples_turned_into_lists_are_caught() -> None:
    backend = run_family(TuplesBecomeLists)
    assert "fidelity.collections" in failed(backend)
    message = backend.result("fidelity.collections").message
    assert "should be tuple" in message
    assert "list" in message
    # Clauses without tuples still pass: each failure points at the guarantee that broke.
    assert backend.result("fidelity.json_natives").outcome is Outcome.PASSED
    assert backend.result("fidelity.bytes").outcome is Outcome.PASSED


def test_json_shaped_state_is_caught_by_every_type_clause() -> None:
    backend = run_family(JsonState)
    assert {
        "fidelity.bytes",
        "fidelity.collections",
        "fidelity.datetimes",
        "fidelity.uuid_and_decimal",
        "fidelity.non_string_keys",
        "fidelity.nested_checkpoints",
        "fidelity.large_payload",
    } <= failed(backend)
    assert "lost key 1" in backend.result("fidelity.non_string_keys").message
    assert backend.result("fidelity.json_natives").outcome is Outcome.PASSED
    assert backend.result("fidelity.envelope_lookalikes").outcome is Outcome.PASSED


def test_a_save_that_accepts_unencodable_values_is_caught() -> None:
    backend = run_family(AcceptsUnencodable)
    caught_only_by(backend, "fidelity.unencodable_rejected", "accepted checkpoint")


def test_a_mangled_graph_signature_is_caught() -> None:
    backend = run_family(StripsSignature)
    assert "fidelity.graph_signature" in failed(backend)
    assert "graph_signature_hash" in backend.result("fidelity.graph_signature").message


def test_dropped_checkpoint_fields_are_caught() -> None:
    backend = run_family(DropsMetadata)
    assert "fidelity.maf_fields" in failed(backend)
    assert "checkpoint.metadata" in backend.result("fidelity.maf_fields").message


def test_a_store_that_truncates_long_values_is_caught() -> None:
    caught_only_by(run_family(CapsEachValue), "fidelity.large_payload", "state['text']")
