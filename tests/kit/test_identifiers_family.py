"""The identifiers family passes a correct storage and catches storages that mangle, fold, or
wave through ids and workflow names."""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Sequence
from typing import Any, Self

import pytest

from conformance import BackendReport, Outcome, StorageTarget, select_clauses
from storages.backend import Backend, CheckpointRecord, InsertResult, StoredBody
from storages.contract import CheckpointID
from storages.errors import InvalidCheckpointIdError
from storages.memory import InMemoryCheckpointStorage

from . import support
from .double import DoubleStorage
from .support import failed

FAMILY = "identifiers"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


INVALID_INPUT_CLAUSES = {
    "identifiers.invalid_ids_rejected",
    "identifiers.invalid_names_rejected",
    "identifiers.refused_save_stores_nothing",
}


# ---------------------------------------------------------------- mutants, one defect each


class _CleansIdentifiers(DoubleStorage):
    """Passes every id and workflow name through ``clean`` before the real storage sees it."""

    @staticmethod
    def clean(value: Any) -> Any:
        raise NotImplementedError

    async def save(self, checkpoint: Any) -> CheckpointID:
        cleaned = copy.copy(checkpoint)
        cleaned.checkpoint_id = self.clean(checkpoint.checkpoint_id)
        cleaned.workflow_name = self.clean(checkpoint.workflow_name)
        return await super().save(cleaned)

    async def load(self, checkpoint_id: CheckpointID, **options: Any) -> Any:
        return await super().load(self.clean(checkpoint_id), **options)

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        return await super().delete(self.clean(checkpoint_id))

    async def list_checkpoints(self, *, workflow_name: str, **options: Any) -> list[Any]:
        return await super().list_checkpoints(workflow_name=self.clean(workflow_name), **options)

    async def list_checkpoint_ids(self, *, workflow_name: str, **options: Any) -> list[CheckpointID]:
        return await super().list_checkpoint_ids(workflow_name=self.clean(workflow_name), **options)

    async def get_latest(self, *, workflow_name: str, **options: Any) -> Any | None:
        return await super().get_latest(workflow_name=self.clean(workflow_name), **options)


class TruncatesLongIdentifiers(_CleansIdentifiers):
    """Silently cuts ids and workflow names to 256 characters instead of refusing longer ones."""

    @staticmethod
    def clean(value: Any) -> Any:
        return value[:256] if isinstance(value, str) else value


class StripsControlCharacters(_CleansIdentifiers):
    """Removes control and surrogate characters from ids and names instead of refusing them."""

    @staticmethod
    def clean(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return "".join(ch for ch in value if unicodedata.category(ch) not in ("Cc", "Cs"))


class RefusesPathCharacters(DoubleStorage):
    """Refuses ids containing path syntax, as a file storage guarding against traversal does."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        checkpoint_id = checkpoint.checkpoint_id
        if isinstance(checkpoint_id, str) and any(part in checkpoint_id for part in ("/", "\\", "..")):
            raise InvalidCheckpointIdError("checkpoint_id", checkpoint_id, "looks like a path")
        result: CheckpointID = await super().save(checkpoint)
        return result


def _folded(value: str) -> str:
    """The key a naive file storage on a case-insensitive, normalising filesystem ends up with."""
    return unicodedata.normalize("NFKC", value).casefold().replace("/", "_").replace("\\", "_").strip()


class FoldsKeys(Backend):
    """Keys ids and workflow names by a folded form, so look-alikes share one slot."""

    def __init__(self, records: dict[str, CheckpointRecord] | None = None) -> None:
        # folded id -> record, in insertion (commit) order
        self._records: dict[str, CheckpointRecord] = {} if records is None else records

    def new_handle(self) -> Self:
        return type(self)(self._records)

    def _in(self, workflow_name: str) -> list[CheckpointRecord]:
        key = _folded(workflow_name)
        return [r for r in self._records.values() if _folded(r.workflow_name) == key]

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        existing = self._records.get(_folded(record.checkpoint_id))
        if existing is not None:
            return InsertResult.of_stored_digest(existing.digest, record)
        self._records[_folded(record.checkpoint_id)] = record
        return InsertResult.INSERTED

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        record = self._records.get(_folded(checkpoint_id))
        return None if record is None else StoredBody(checkpoint_id, record.body)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        records = self._in(workflow_name)
        return StoredBody(records[-1].checkpoint_id, records[-1].body) if records else None

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        return [StoredBody(r.checkpoint_id, r.body) for r in self._in(workflow_name)]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return [r.checkpoint_id for r in self._in(workflow_name)]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return self._records.pop(_folded(checkpoint_id), None) is not None


# ---------------------------------------------------------------- tests


def test_in_memory_storage_passes_every_identifiers_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert {r.clause_id: r.outcome for r in backend.results} == {
        c.id: Outcome.PASSED for c in select_clauses([FAMILY])
    }
    assert len(backend.results) >= 8


def test_truncating_long_ids_fails_the_invalid_input_clauses() -> None:
    backend = run_family(TruncatesLongIdentifiers)
    assert failed(backend) == INVALID_INPUT_CLAUSES
    assert "<257 characters" in backend.result("identifiers.invalid_ids_rejected").message
    assert "<256 characters" in backend.result("identifiers.refused_save_stores_nothing").message


def test_stripping_control_characters_fails_the_invalid_input_clauses() -> None:
    backend = run_family(StripsControlCharacters)
    assert failed(backend) == INVALID_INPUT_CLAUSES
    assert "\\nline' returned" in backend.result("identifiers.invalid_ids_rejected").message


def test_refusing_path_syntax_fails_hostile_ids_round_trip() -> None:
    """Over-strict is a failure too: '../x' and 'a/b' are valid ids that must be stored."""
    backend = run_family(RefusesPathCharacters)
    assert failed(backend) == {"identifiers.hostile_ids_round_trip", "identifiers.distinct_ids"}
    message = backend.result("identifiers.hostile_ids_round_trip").message
    assert "save() of relative path traversal id" in message
    assert "InvalidCheckpointIdError" in message


def test_folding_keys_fails_the_distinctness_clauses() -> None:
    backend = run_family(FoldsKeys)
    assert failed(backend) == {"identifiers.distinct_ids", "identifiers.distinct_workflow_names"}
    assert "look-alike ids could not all be saved" in backend.result("identifiers.distinct_ids").message
    names_message = backend.result("identifiers.distinct_workflow_names").message
    assert "look-alike workflow names collide" in names_message


@pytest.mark.maf
def test_maf_in_memory_storage_stores_hostile_ids_but_accepts_invalid_ones() -> None:
    """MAF's in-memory storage is a plain dict: anything goes, including '', None and control characters."""
    agent_framework = pytest.importorskip("agent_framework")
    backend = run_family(
        StorageTarget(
            name="agent_framework.InMemoryCheckpointStorage",
            factory=agent_framework.InMemoryCheckpointStorage,
            checkpoint_class=agent_framework.WorkflowCheckpoint,
        )
    )
    assert failed(backend) == {*INVALID_INPUT_CLAUSES, "identifiers.invalid_previous_id_rejected"}
    for clause_id in (
        "identifiers.hostile_ids_round_trip",
        "identifiers.hostile_names_round_trip",
        "identifiers.distinct_ids",
        "identifiers.distinct_workflow_names",
    ):
        assert backend.result(clause_id).outcome is Outcome.PASSED, clause_id
