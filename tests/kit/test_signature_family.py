"""The signature family passes correct storages and catches each way of mishandling graph signatures."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from conformance import BackendReport, Outcome, select_clauses, target_from_url, validate
from storages.backend import CheckpointRecord, InsertResult, StoredBody
from storages.contract import CheckpointID, WorkflowCheckpoint
from storages.errors import InvalidCheckpointError, StorageUnavailableError
from storages.memory import InMemoryCheckpointStorage

from . import blind_batch_seven, support
from .blind_batch_three import RootRivalsOverFilteredRows, over
from .double import DoubleBackend, DoubleStorage
from .support import caught_only_by, failed

FAMILY = "signature"


def run_family(subject: Any, **target: Any) -> BackendReport:
    return support.run_family(FAMILY, subject, **target)


def _all_passed(backend: BackendReport) -> None:
    assert {r.clause_id: r.outcome for r in backend.results} == {
        c.id: Outcome.PASSED for c in select_clauses([FAMILY])
    }, [(r.clause_id, r.message) for r in backend.failures]


def _fold(signature: str) -> str:
    """What a case-insensitive, whitespace-trimming comparison sees."""
    return signature.strip().lower()


# ---------------------------------------------------------------- mutants, one defect each


class NormalisesSignature(DoubleStorage):
    """Stores every checkpoint with its signature trimmed and lower-cased, as a "canonical" hash."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        rewritten = copy.copy(checkpoint)
        rewritten.graph_signature_hash = _fold(checkpoint.graph_signature_hash)
        return await super().save(rewritten)


class CaseInsensitiveSignatureIndex(DoubleBackend):
    """Indexes signatures folded (a case-insensitive, trailing-space-insensitive collation); bodies
    keep the exact hash, but filters and checkpoint_info see the folded one."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        folded = [r.replaced(graph_signature_hash=_fold(r.graph_signature_hash)) for r in records]
        return await super().insert(folded)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        query = None if graph_signature_hash is None else _fold(graph_signature_hash)
        return await super().latest(workflow_name, query)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        query = None if graph_signature_hash is None else _fold(graph_signature_hash)
        return await super().list_bodies(workflow_name, query, include_nested=include_nested)

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        query = None if graph_signature_hash is None else _fold(graph_signature_hash)
        return await super().list_ids(workflow_name, query, include_nested=include_nested)


class SignatureLatestByTimestamp(DoubleBackend):
    """get_latest(graph_signature_hash=h) picks h's checkpoint with the greatest timestamp."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        if graph_signature_hash is None:
            return await super().latest(workflow_name, None)
        stored = await self.list_bodies(workflow_name, graph_signature_hash)
        if not stored:
            return None
        clocks = [datetime.fromisoformat((await self.decode(item)).timestamp) for item in stored]
        return stored[clocks.index(max(clocks))]  # the first of the greatest


class IgnoresExpectedSignature(DoubleStorage):
    """load() accepts expected_graph_signature_hash and never checks it."""

    async def load(
        self, checkpoint_id: CheckpointID, *, expected_graph_signature_hash: str | None = None
    ) -> Any:
        return await super().load(checkpoint_id)


class SignatureFilterIgnored(DoubleBackend):
    """get_latest(graph_signature_hash=h) returns the workflow's latest, whatever its signature."""

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        return await super().latest(workflow_name, None)


class NestedIndexedWithContainerSignature(DoubleBackend):
    """Indexes nested records under their top-level checkpoint's signature instead of their own."""

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        top = records[0].graph_signature_hash
        return await super().insert(
            [records[0], *(r.replaced(graph_signature_hash=top) for r in records[1:])]
        )


class NulStrippedFromSignature(DoubleStorage):
    """Strips NUL from a checkpoint's signature before storing it, as a C-string column would."""

    async def save(self, checkpoint: Any) -> CheckpointID:
        rewritten = copy.copy(checkpoint)
        rewritten.graph_signature_hash = checkpoint.graph_signature_hash.replace("\x00", "")
        return await super().save(rewritten)


class NulSignatureUnavailable(DoubleStorage):
    """Fails a save or a filter whose signature holds NUL as the store's driver reports it (a text
    column that cannot hold NUL): StorageUnavailableError, which tells the caller to retry."""

    def _refuse(self, signature: str | None) -> None:
        if signature is not None and "\x00" in signature:
            raise StorageUnavailableError("save", "DataError: text fields cannot contain NUL (0x00) bytes")

    async def save(self, checkpoint: Any) -> CheckpointID:
        self._refuse(checkpoint.graph_signature_hash)
        return await super().save(checkpoint)

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        self._refuse(graph_signature_hash)
        return await super().get_latest(
            workflow_name=workflow_name, graph_signature_hash=graph_signature_hash
        )


class NulFilterFailsOnly(DoubleStorage):
    """Refuses a NUL signature on save as the contract allows, but its listing filter fails on
    one with the driver's error instead of refusing it or answering."""

    async def list_checkpoint_ids(
        self, *, workflow_name: str, graph_signature_hash: str | None = None, include_nested: bool = False
    ) -> list[CheckpointID]:
        if graph_signature_hash is not None and "\x00" in graph_signature_hash:
            raise StorageUnavailableError("save", "DataError: text fields cannot contain NUL (0x00) bytes")
        return await super().list_checkpoint_ids(
            workflow_name=workflow_name,
            graph_signature_hash=graph_signature_hash,
            include_nested=include_nested,
        )


# ---------------------------------------------------------------- tests


def test_in_memory_storage_passes_every_signature_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    _all_passed(backend)
    assert len(backend.results) >= 7


@pytest.mark.sqlite
def test_sqlite_storage_passes_every_signature_clause(tmp_path: Path) -> None:
    # A temp-file store reached by URL, as the CLI checks it.
    _all_passed(run_family(target_from_url(f"sqlite:///{tmp_path.as_posix()}/signature.db")))


def test_normalised_signature_fails_every_clause_that_reads_an_odd_signature() -> None:
    backend = run_family(NormalisesSignature)
    assert failed(backend) == {
        "signature.preserved_exactly",
        "signature.filter_is_exact",
        # The error reports the rewritten hash as the stored one.
        "signature.load_rejects_mismatch",
        # The exact hash the checkpoint was saved with no longer matches it.
        "signature.load_accepts_match",
    }
    assert "expected 'SHA256:Ünïcödé/日本語/🙂\\xa0sig', got 'sha256:ünïcödé/日本語/🙂\\xa0sig'" in (
        backend.result("signature.preserved_exactly").message
    )


def test_case_insensitive_signature_index_fails_the_filter_clauses() -> None:
    backend = run_family(CaseInsensitiveSignatureIndex)
    assert failed(backend) == {
        "signature.preserved_exactly",  # through checkpoint_info; bodies keep the exact hash
        "signature.latest_by_signature",
        "signature.list_by_signature",
        "signature.filter_is_exact",
        # loads see the folded index entry disagree with the exact hash in the body
        "signature.load_accepts_match",
        "signature.load_rejects_mismatch",
    }
    assert "indexed with graph signature 'sha256:" in backend.result("signature.preserved_exactly").message
    assert "graph_signature_hash='SIG-LIST-A'), a signature no checkpoint has: expected [], got [" in (
        backend.result("signature.list_by_signature").message
    )


def test_signature_latest_by_timestamp_fails_latest_by_signature() -> None:
    backend = run_family(SignatureLatestByTimestamp)
    # Among roots, too, the clock decides where only commit order should.
    assert failed(backend) == {
        "signature.latest_by_signature",
        "signature.latest_root_rivals_across_signatures",
    }
    message = backend.result("signature.latest_by_signature").message
    assert "get_latest(graph_signature_hash='sig-latest-a') after saving" in message
    assert message.endswith("(saved last with that signature; timestamps fall as commits rise)")


def test_ignoring_the_expected_signature_fails_load_rejects_mismatch() -> None:
    backend = run_family(IgnoresExpectedSignature)
    caught_only_by(
        backend,
        "signature.load_rejects_mismatch",
        "it must raise GraphSignatureMismatchError",
    )


def test_latest_ignoring_the_signature_fails_every_filtered_latest() -> None:
    backend = run_family(SignatureFilterIgnored)
    assert failed(backend) == {
        "signature.latest_by_signature",
        "signature.latest_root_rivals_across_signatures",
        "signature.filter_is_exact",
        "signature.nested_keep_own",
    }
    # The engine checks the body against the signature asked for, so the wrong answer is refused.
    assert "indexed with graph signature 'sig-own-child' but its body says 'sig-own-parent'" in (
        backend.result("signature.nested_keep_own").message
    )


def test_nested_records_indexed_with_the_container_signature_fail_nested_keep_own() -> None:
    backend = run_family(NestedIndexedWithContainerSignature)
    # load_rejects_mismatch: loading a child sees its index entry disagree with its body
    assert failed(backend) == {"signature.nested_keep_own", "signature.load_rejects_mismatch"}
    assert "indexed with graph signature 'sig-own-parent' but its body says 'sig-own-middle'" in (
        backend.result("signature.nested_keep_own").message
    )


def test_root_rivals_chosen_among_filtered_rows_fail_the_root_rivals_clause_only() -> None:
    backend = run_family(over(RootRivalsOverFilteredRows))
    caught_only_by(
        backend,
        "signature.latest_root_rivals_across_signatures",
        "get_latest(graph_signature_hash='sig-root-a') after roots r0 (a), r1 (b), r2 (a) returned",
    )


def test_a_signature_with_nul_stripped_fails_nul_kept_or_refused() -> None:
    caught_only_by(
        run_family(NulStrippedFromSignature),
        "signature.nul_kept_or_refused",
        "graph_signature_hash of load(",
    )


def test_a_driver_error_for_a_nul_signature_fails_nul_kept_or_refused() -> None:
    caught_only_by(
        run_family(NulSignatureUnavailable),
        "signature.nul_kept_or_refused",
        "raised StorageUnavailableError: save failed: DataError: text fields cannot contain NUL "
        "(0x00) bytes; a signature holding NUL is kept byte for byte or refused with "
        "InvalidCheckpointError",
    )


def test_a_filter_failing_on_a_nul_signature_fails_nul_kept_or_refused() -> None:
    caught_only_by(
        run_family(NulFilterFailsOnly),
        "signature.nul_kept_or_refused",
        "list_checkpoint_ids(",
    )


def test_the_engine_refuses_a_nul_signature_on_save_and_as_a_filter() -> None:
    async def scenario() -> None:
        storage = InMemoryCheckpointStorage()
        async with storage:
            top = WorkflowCheckpoint(workflow_name="nul", graph_signature_hash="a\x00b")
            with pytest.raises(InvalidCheckpointError, match="graph_signature_hash holds a NUL") as refused:
                await storage.save(top)
            assert refused.value.field == "graph_signature_hash"
            child = WorkflowCheckpoint(workflow_name="nul-child", graph_signature_hash="\x00")
            parent = WorkflowCheckpoint(
                workflow_name="nul",
                graph_signature_hash="sig",
                state={"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}},
            )
            with pytest.raises(
                InvalidCheckpointError, match=f"embedded in checkpoint {parent.checkpoint_id!r}"
            ):
                await storage.save(parent)
            for call in (storage.get_latest, storage.list_checkpoint_ids, storage.list_checkpoints):
                with pytest.raises(InvalidCheckpointError) as filtered:
                    await call(workflow_name="nul", graph_signature_hash="\x00")
                assert filtered.value.field == "graph_signature_hash"
            assert await storage.list_checkpoint_ids(workflow_name="nul") == []
            assert await storage.list_checkpoint_ids(workflow_name="nul-child", include_nested=True) == []

    asyncio.run(scenario())


def test_a_six_method_storage_keeping_nul_signatures_passes_nul_kept_or_refused() -> None:
    # Storages off the engine may keep such a signature: the clause then reads it back exactly.
    factory = {name: made for name, made, _ in blind_batch_seven.HONEST}["SixPydanticRows"]
    (backend,) = validate(factory(), clauses=["signature.nul_kept_or_refused"]).backends
    assert [r.outcome for r in backend.results] == [Outcome.PASSED], backend.failures

    async def kept() -> str:
        storage = blind_batch_seven.SixPydanticRows()
        top = WorkflowCheckpoint(workflow_name="nul", graph_signature_hash="a\x00b")
        await storage.save(top)
        return str((await storage.load(top.checkpoint_id)).graph_signature_hash)

    assert asyncio.run(kept()) == "a\x00b"
