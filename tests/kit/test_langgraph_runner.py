"""The runner family through real LangGraph graphs (conformance.langgraph_profile) over
StorageSaver: what LangGraph guarantees passes, what it does not is a runner finding (a status of
its own, with LangGraph's reason), and a broken storage still fails as a storage defect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import BACKENDS

from conformance import BackendReport, Outcome, StorageTarget, avalidate, select_clauses, validate
from conformance.cli import main
from conformance.langgraph_profile import LANGGRAPH_DEVIATIONS, LangGraphRunnerProfile
from storages import open_storage
from storages.memory import InMemoryCheckpointStorage

pytestmark = pytest.mark.langgraph

RUNNER_CLAUSES = [clause.id for clause in select_clauses(["runner"])]
LATEST = "runner.resume_from_latest_continues"
EXPECTED = {
    clause_id: Outcome.FINDING if clause_id in LANGGRAPH_DEVIATIONS else Outcome.PASSED
    for clause_id in RUNNER_CLAUSES
}


def run_runner_family(factory: Any, **target: Any) -> BackendReport:
    (backend,) = validate(
        StorageTarget(
            name="langgraph",
            factory=factory,
            runner=LangGraphRunnerProfile(),
            runner_findings=LANGGRAPH_DEVIATIONS,
            **target,
        ),
        clauses=["runner"],
    ).backends
    assert not backend.error, backend.error
    assert [r.clause_id for r in backend.results] == RUNNER_CLAUSES
    return backend


def _check_findings(backend: BackendReport) -> None:
    assert {r.clause_id: r.outcome for r in backend.results} == EXPECTED
    messages = {r.clause_id: r.message for r in backend.results}
    assert "was not rejected" in messages["runner.changed_parent_graph_is_rejected"]
    assert "was not rejected" in messages["runner.changed_child_graph_is_rejected"]
    assert "has no previous id" in messages["runner.chain_whole_after_parent_restore"]


@pytest.mark.memory
def test_langgraph_passes_what_it_guarantees_and_reports_the_rest_as_findings() -> None:
    _check_findings(run_runner_family(InMemoryCheckpointStorage))


@pytest.mark.sqlite
def test_langgraph_on_sqlite_gives_the_same_report(tmp_path: Path) -> None:
    root = open_storage(f"sqlite:///{tmp_path}/runner.db")
    _check_findings(run_runner_family(root.new_handle, cleanup=root.aclose))


class OldestIsLatest(InMemoryCheckpointStorage):
    """get_latest returns the first checkpoint saved: a resumed thread goes back to its start."""

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        saved = await self.list_checkpoints(workflow_name=workflow_name)
        return saved[0] if saved else None


@pytest.mark.memory
def test_a_storage_with_a_wrong_latest_fails_as_a_storage_defect() -> None:
    backend = run_runner_family(OldestIsLatest)
    failed = {r.clause_id for r in backend.failures}
    assert LATEST in failed
    assert not backend.result(LATEST).message.startswith("runner finding")


@pytest.mark.memory
def test_cli_runs_the_runner_family_through_langgraph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "langgraph.json"
    assert main(["--runner", "langgraph", "--json", str(report), "memory://"]) == 0
    assert "runner finding" in capsys.readouterr().out
    (backend,) = json.loads(report.read_text(encoding="utf-8"))["backends"]
    assert {r["clause"]: r["outcome"] for r in backend["results"]} == {
        clause_id: outcome.value for clause_id, outcome in EXPECTED.items()
    }


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis-cluster", marks=pytest.mark.redis_cluster),
        pytest.param("s3-server", marks=pytest.mark.s3),
    ],
)
async def test_langgraph_gives_the_same_report_on_redis_and_s3(backend: str, tmp_path: Path) -> None:
    async with BACKENDS[backend].fresh_store(tmp_path) as maker:
        target = StorageTarget(
            name=backend,
            factory=maker,
            runner=LangGraphRunnerProfile(),
            runner_findings=LANGGRAPH_DEVIATIONS,
        )
        (report,) = (await avalidate(target, clauses=["runner"])).backends
    assert not report.error, report.error
    _check_findings(report)
