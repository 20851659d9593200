"""The writes family passes the built-in backends and catches storages that keep pending writes
wrongly: duplicated, first-wins everywhere, shared across workflows, half-stored, or orphaned."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conformance import Outcome, StorageTarget, select_clauses
from storages import open_storage
from storages.contract import Capability, PendingWrite
from storages.engine import writes_log_name
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from . import support
from .blind_batch_three import PutWritesDropsTailChunk
from .support import caught_only_by, failed

FAMILY = "writes"


def run_family(subject: Any, **target: Any) -> Any:
    return support.run_family(FAMILY, subject, **target)


class AppendsEveryWrite(InMemoryCheckpointStorage):
    """Lists every stored write, so a retried call shows up twice."""

    async def list_writes(self, checkpoint_id: str, *, workflow_name: str) -> list[PendingWrite]:
        log = writes_log_name(workflow_name)
        rows: list[PendingWrite] = []
        for stored in await self.backend.list_bodies(log, checkpoint_id):
            batch = self.codec.decode_checkpoint(stored.body, checkpoint_id=stored.checkpoint_id)
            rows.extend(PendingWrite(*row) for row in batch.state["writes"])
        return rows


class SpecialChannelsKeepFirst(InMemoryCheckpointStorage):
    """Keeps the first write per (task, index) even for special channels: a resumed interrupt
    would replay its first answer forever."""

    async def list_writes(self, checkpoint_id: str, *, workflow_name: str) -> list[PendingWrite]:
        first: dict[tuple[str, int], PendingWrite] = {}
        for write in await AppendsEveryWrite.list_writes(self, checkpoint_id, workflow_name=workflow_name):  # type: ignore[arg-type]
            first.setdefault((write.task_id, write.index), write)
        return list(first.values())


class OneLogForAllWorkflows(InMemoryCheckpointStorage):
    """Files every workflow's writes in one log, so a checkpoint id reads another workflow's writes."""

    async def put_writes(
        self, checkpoint_id: str, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None:
        await super().put_writes(checkpoint_id, writes, workflow_name="shared")

    async def list_writes(self, checkpoint_id: str, *, workflow_name: str) -> list[PendingWrite]:
        return await super().list_writes(checkpoint_id, workflow_name="shared")

    async def delete_writes(self, checkpoint_id: str, *, workflow_name: str) -> int:
        return await super().delete_writes(checkpoint_id, workflow_name="shared")

    async def list_workflow_writes(self, *, workflow_name: str) -> dict[str, list[PendingWrite]]:
        return await super().list_workflow_writes(workflow_name="shared")


class StoresWriteByWrite(InMemoryCheckpointStorage):
    """Stores each write of a call on its own, so a refused write leaves the earlier ones behind."""

    async def put_writes(
        self, checkpoint_id: str, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None:
        for write in writes:
            await super().put_writes(checkpoint_id, [write], workflow_name=workflow_name)


class PruneKeepsAllWrites(InMemoryCheckpointStorage):
    """Prunes checkpoints but leaves their writes in the log."""

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        return await self.backend.prune(workflow_name, keep_last)


class UndeclaredWrites(InMemoryCheckpointStorage):
    """Keeps writes without declaring pending_writes."""

    capabilities = MemoryBackend.capabilities - {Capability.PENDING_WRITES}

    async def put_writes(
        self, checkpoint_id: str, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None:
        return None


def test_in_memory_storage_passes_every_writes_clause() -> None:
    backend = run_family(InMemoryCheckpointStorage)
    assert {r.clause_id: (r.outcome, r.message) for r in backend.results} == {
        clause.id: (Outcome.PASSED, "") for clause in select_clauses([FAMILY])
    }
    assert len(backend.results) >= 4


@pytest.mark.sqlite
def test_sqlite_storage_passes_every_writes_clause(tmp_path: Path) -> None:
    root = open_storage(f"sqlite:///{tmp_path}/writes.db")
    backend = run_family(
        StorageTarget(name="sqlite (temp file)", factory=root.new_handle, cleanup=root.aclose)
    )
    assert {r.clause_id: (r.outcome, r.message) for r in backend.results} == {
        clause.id: (Outcome.PASSED, "") for clause in select_clauses([FAMILY])
    }


def test_listing_every_write_fails_idempotent_only() -> None:
    caught_only_by(run_family(AppendsEveryWrite), "writes.idempotent", "(task, -1) takes the latest")


def test_special_channels_keeping_first_fail_idempotent_only() -> None:
    caught_only_by(run_family(SpecialChannelsKeepFirst), "writes.idempotent", "boom 2")


def test_one_log_for_all_workflows_fails_its_listings_and_retention() -> None:
    backend = run_family(OneLogForAllWorkflows)
    # Pruning and deleting a workflow reach its own log, so the shared log's writes survive too.
    assert failed(backend) == {"writes.round_trip", "writes.whole_workflow", "writes.go_with_checkpoints"}
    assert "under workflow" in backend.result("writes.round_trip").message


def test_storing_write_by_write_fails_all_or_nothing_only() -> None:
    caught_only_by(run_family(StoresWriteByWrite), "writes.all_or_nothing", "refused call")


def test_prune_keeping_writes_fails_go_with_checkpoints_only() -> None:
    caught_only_by(run_family(PruneKeepsAllWrites), "writes.go_with_checkpoints", "pruned checkpoint")


def test_undeclared_writes_are_skipped_here_and_caught_by_capabilities() -> None:
    backend = run_family(UndeclaredWrites)
    assert {result.outcome for result in backend.results} == {Outcome.SKIPPED}
    capabilities = support.run_family("capabilities", UndeclaredWrites)
    caught_only_by(capabilities, "capabilities.pending_writes", "UnsupportedOperationError")


class WholeWorkflowListsEveryWrite(InMemoryCheckpointStorage):
    """Reads a workflow's writes at once without the reading rule: a retried special channel keeps
    its first value in a listed history (alist) while get_tuple shows the latest."""

    async def list_workflow_writes(self, *, workflow_name: str) -> dict[str, list[PendingWrite]]:
        log = writes_log_name(workflow_name)
        whole: dict[str, list[PendingWrite]] = {}
        for stored in await self.backend.list_bodies(log, None):
            batch = self.codec.decode_checkpoint(stored.body, checkpoint_id=stored.checkpoint_id)
            whole.setdefault(batch.graph_signature_hash, []).extend(
                PendingWrite(*row) for row in batch.state["writes"]
            )
        return whole


def test_whole_workflow_writes_without_the_reading_rule_fail_whole_workflow_only() -> None:
    caught_only_by(
        run_family(WholeWorkflowListsEveryWrite), "writes.whole_workflow", "a special channel's latest"
    )


class PruneDropsEmbeddedWrites(InMemoryCheckpointStorage):
    """After a prune, deletes the writes of every checkpoint the top-level listing does not name:
    a kept checkpoint's embedded one loses its writes."""

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        pruned = await super().prune(workflow_name=workflow_name, keep_last=keep_last)
        listed = set(await self.list_checkpoint_ids(workflow_name=workflow_name))
        for owner in await self.list_workflow_writes(workflow_name=workflow_name):
            if owner not in listed:
                await self.delete_writes(owner, workflow_name=workflow_name)
        return pruned


def test_a_prune_dropping_embedded_writes_is_caught() -> None:
    caught_only_by(
        run_family(PruneDropsEmbeddedWrites),
        "writes.go_with_checkpoints",
        "the writes of a kept checkpoint's embedded one",
    )


def test_a_call_split_in_chunks_that_drops_the_last_fails_large_call_whole_only() -> None:
    backend = run_family(PutWritesDropsTailChunk)
    caught_only_by(backend, "writes.large_call_whole", "of 37 writes returned 32 of them")
