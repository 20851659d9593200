"""The runner family through real CrewAI flows and real Burr applications (``--runner crewai``,
``--runner burr``) over our adapters, on every built-in backend: what the runner guarantees passes,
what it does not is a runner finding with its reason, and a broken storage still fails as a
storage defect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import runner_env  # noqa: F401 - before crewai
from conftest import BACKENDS

from conformance import BackendReport, Outcome, StorageTarget, avalidate, select_clauses
from conformance.adapter_runners import ADAPTER_RUNNERS, adapter_runner
from conformance.cli import main
from storages.memory import InMemoryCheckpointStorage

RUNNER_CLAUSES = [clause.id for clause in select_clauses(["runner"])]
LATEST = "runner.resume_from_latest_continues"
STALE = "runner.stale_run_cannot_clobber_successor"


def expected(runner: str) -> dict[str, Outcome]:
    _, findings = adapter_runner(runner)
    return {clause: Outcome.FINDING if clause in findings else Outcome.PASSED for clause in RUNNER_CLAUSES}


async def run_runner_family(runner: str, factory: Any, name: str) -> BackendReport:
    profile, findings = adapter_runner(runner)
    target = StorageTarget(name=name, factory=factory, runner=profile, runner_findings=findings)
    (backend,) = (await avalidate(target, clauses=["runner"])).backends
    assert not backend.error, backend.error
    assert [r.clause_id for r in backend.results] == RUNNER_CLAUSES
    return backend


def _check(runner: str, backend: BackendReport) -> None:
    outcomes = {r.clause_id: r.outcome for r in backend.results}
    assert outcomes == expected(runner), {r.clause_id: r.message for r in backend.results}
    messages = {r.clause_id: r.message for r in backend.results}
    assert "was not rejected" in messages["runner.changed_parent_graph_is_rejected"]
    assert "was not rejected" in messages["runner.changed_child_graph_is_rejected"]
    assert "not at the child checkpoint embedded" in messages["runner.chain_whole_after_parent_restore"]


BACKEND_PARAMS = [
    pytest.param(name, marks=getattr(pytest.mark, entry.marker)) for name, entry in BACKENDS.items()
]


@pytest.mark.parametrize("runner", ADAPTER_RUNNERS)
@pytest.mark.parametrize("backend", BACKEND_PARAMS)
async def test_the_runner_family_passes_on_every_backend(runner: str, backend: str, tmp_path: Path) -> None:
    async with BACKENDS[backend].fresh_store(tmp_path) as maker:
        _check(runner, await run_runner_family(runner, maker, backend))


class OldestIsLatest(InMemoryCheckpointStorage):
    """get_latest returns the first checkpoint saved: a resumed run goes back to its start."""

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        saved = await self.list_checkpoints(workflow_name=workflow_name)
        return saved[0] if saved else None


class ForgetsFencing(InMemoryCheckpointStorage):
    """Declares fencing but stores a fenced save whatever the latest is."""

    async def save(self, checkpoint: Any, *, expected_latest_id: Any = None, **options: Any) -> str:
        saved: str = await super().save(checkpoint)
        return saved


@pytest.mark.memory
@pytest.mark.parametrize("runner", ADAPTER_RUNNERS)
async def test_a_storage_with_a_wrong_latest_fails_as_a_storage_defect(runner: str) -> None:
    backend = await run_runner_family(runner, OldestIsLatest, "oldest-is-latest")
    failed = {r.clause_id for r in backend.failures}
    assert LATEST in failed
    assert not backend.result(LATEST).message.startswith("runner finding")


@pytest.mark.memory
@pytest.mark.parametrize("runner", ADAPTER_RUNNERS)
async def test_a_storage_that_ignores_the_fence_lets_the_stale_run_clobber(runner: str) -> None:
    backend = await run_runner_family(runner, ForgetsFencing, "forgets-fencing")
    assert STALE in {r.clause_id for r in backend.failures}


@pytest.mark.memory
@pytest.mark.parametrize("runner", ADAPTER_RUNNERS)
def test_cli_runs_the_runner_family_through_the_runner(
    runner: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / f"{runner}.json"
    assert main(["--runner", runner, "--json", str(report), "memory://"]) == 0
    assert "runner finding" in capsys.readouterr().out
    (backend,) = json.loads(report.read_text(encoding="utf-8"))["backends"]
    assert {r["clause"]: r["outcome"] for r in backend["results"]} == {
        clause_id: outcome.value for clause_id, outcome in expected(runner).items()
    }
    assert main(["--runner", runner, "--child-storage", "separate", "memory://"]) == 2
