"""The runner family driven through real MAF workflows (MafRunnerProfile), on memory and SQLite.

With the child sharing the parent's storage, every clause passes: our storages keep MAF's chains
whole. With a child storage of its own, MAF's dangling link (the child's first checkpoint after a
parent restore points at the embedded checkpoint's id, which MAF never saves on its own) fails the
ancestry clause as a runner finding; a storage that cannot load nested records fails it as a
storage defect instead.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conformance import BackendReport, Outcome, StorageTarget, select_clauses, validate
from conformance.cli import main
from conformance.maf_profile import MafRunnerProfile
from storages import CheckpointNotFoundError, SQLiteCheckpointStorage
from storages.memory import InMemoryCheckpointStorage

pytestmark = pytest.mark.maf

CHAIN = "runner.chain_whole_after_parent_restore"
RUNNER_CLAUSES = [clause.id for clause in select_clauses(["runner"])]
DANGLING = re.compile(r"points at previous id '([0-9a-f-]{36})'")


def run_runner_family(factory: Any, profile: MafRunnerProfile) -> BackendReport:
    (backend,) = validate(
        StorageTarget(name="maf", factory=factory, runner=profile), clauses=["runner"]
    ).backends
    assert not backend.error, backend.error
    assert [r.clause_id for r in backend.results] == RUNNER_CLAUSES
    return backend


def outcomes(backend: BackendReport) -> dict[str, Outcome]:
    return {r.clause_id: r.outcome for r in backend.results}


def message(backend: BackendReport, clause_id: str) -> str:
    (result,) = [r for r in backend.results if r.clause_id == clause_id]
    return result.message


class Stores:
    """One root per backend; the kit opens a new handle on it for each clause."""

    def __init__(self, backend: str, directory: Path) -> None:
        self.root = (
            InMemoryCheckpointStorage()
            if backend == "memory"
            else SQLiteCheckpointStorage(directory / "maf.db")
        )

    async def nested_info(self, checkpoint_id: str) -> Any:
        async with self.root.new_handle() as handle:
            return await handle.checkpoint_info(checkpoint_id)


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.memory),
        pytest.param("sqlite", marks=pytest.mark.sqlite),
    ]
)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Stores:
    return Stores(request.param, tmp_path)


def test_shared_child_storage_passes_every_runner_clause(stores: Stores) -> None:
    backend = run_runner_family(stores.root.new_handle, MafRunnerProfile())
    assert outcomes(backend) == dict.fromkeys(RUNNER_CLAUSES, Outcome.PASSED), [
        (r.clause_id, r.message) for r in backend.failures
    ]


def test_separate_child_storage_shows_mafs_dangling_link_as_a_runner_finding(stores: Stores) -> None:
    child_stores: list[InMemoryCheckpointStorage] = []

    def child_store() -> InMemoryCheckpointStorage:
        child_stores.append(InMemoryCheckpointStorage())
        return child_stores[-1]

    profile = MafRunnerProfile(separate_child_storage=True, child_storage_factory=child_store)
    backend = run_runner_family(stores.root.new_handle, profile)
    # A finding of its own: not a failure, and the storage still conforms.
    assert not backend.failures
    assert [r.clause_id for r in backend.findings] == [CHAIN]
    assert backend.ok
    text = message(backend, CHAIN)
    assert text.startswith("runner finding, not a storage defect:")
    maf_version = importlib.metadata.version("agent-framework-core")
    assert f"agent_framework {maf_version}, child with its own storage" in text
    assert "embedded in the restored parent checkpoint" in text
    match = DANGLING.search(text)
    assert match is not None, text
    dangling = match.group(1)

    # The id is MAF's embedded child checkpoint: a nested record in the parent's storage, and
    # nowhere in the child's own storage.
    info = asyncio.run(stores.nested_info(dangling))
    assert info is not None
    assert info.nested
    for store in child_stores:
        with pytest.raises(CheckpointNotFoundError):
            asyncio.run(store.load(dangling))


class NestedNotLoadable(InMemoryCheckpointStorage):
    """Stores nested records but will not load one by its own id: a storage defect."""

    async def load(self, checkpoint_id: str, **options: Any) -> Any:
        info = await self.checkpoint_info(checkpoint_id)
        if info is not None and info.nested:
            raise CheckpointNotFoundError(checkpoint_id)
        return await super().load(checkpoint_id, **options)


def test_a_storage_that_loses_the_embedded_checkpoint_is_a_storage_defect() -> None:
    backend = run_runner_family(NestedNotLoadable().new_handle, MafRunnerProfile())
    # The changed-graph clauses compare every record, nested ones too, before and after: they
    # cannot load them either.
    assert {r.clause_id for r in backend.failures} == {
        CHAIN,
        "runner.changed_parent_graph_is_rejected",
        "runner.changed_child_graph_is_rejected",
    }
    text = message(backend, CHAIN)
    assert not text.startswith("runner finding")
    assert "which the storage cannot load" in text


class SaveRefused(InMemoryCheckpointStorage):
    """Refuses every save; MAF only logs that, so the profile must surface it."""

    async def save(self, checkpoint: Any) -> str:
        raise RuntimeError("save refused on purpose")


def test_saves_maf_swallows_fail_the_clauses() -> None:
    backend = run_runner_family(SaveRefused().new_handle, MafRunnerProfile())
    assert outcomes(backend) == dict.fromkeys(RUNNER_CLAUSES, Outcome.FAILED)
    assert all("save refused on purpose" in r.message for r in backend.results)


def test_cli_runs_the_runner_family_through_maf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shared, separate = tmp_path / "shared.json", tmp_path / "separate.json"
    assert main(["--runner", "maf", "--quiet", "--json", str(shared), "memory://"]) == 0
    # MAF's dangling link is a runner finding: its own status, and it leaves the exit status 0.
    assert main(["--runner", "maf", "--child-storage", "separate", "--json", str(separate), "memory://"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "runner finding" in out
    assert "memory:// conforms" in out
    assert "1 runner finding(s), not storage defects" in out
    for path, findings in ((shared, set()), (separate, {CHAIN})):
        (backend,) = json.loads(path.read_text(encoding="utf-8"))["backends"]
        assert [r["clause"] for r in backend["results"]] == RUNNER_CLAUSES
        assert not {r["clause"] for r in backend["results"] if r["outcome"] == "failed"}
        assert {r["clause"] for r in backend["results"] if r["outcome"] == "finding"} == findings
        assert backend["ok"] is True


def test_child_storage_needs_the_maf_runner(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--child-storage", "separate", "memory://"]) == 2
    assert "--child-storage needs --runner maf" in capsys.readouterr().err


STALE_RUN = "runner.stale_run_cannot_clobber_successor"


def test_maf_s_runner_through_a_fenced_handle_keeps_the_successor_latest() -> None:
    """The seed's race (microsoft/agent-framework#9473) through MAF's own runner: with fencing, run
    A's late save is refused (MAF only logs it; the profile surfaces it) and latest stays on B's."""
    backend = run_runner_family(InMemoryCheckpointStorage().new_handle, MafRunnerProfile())
    assert outcomes(backend)[STALE_RUN] is Outcome.PASSED


def test_maf_s_runner_without_fencing_reports_the_clobber() -> None:
    from .double import storage_of
    from .test_fencing_family import WithoutFencing

    backend = run_runner_family(storage_of(WithoutFencing()).new_handle, MafRunnerProfile())
    assert outcomes(backend)[STALE_RUN] is Outcome.FINDING
    assert message(backend, STALE_RUN).startswith("the storage does not declare 'fencing'")
