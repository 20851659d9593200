"""MAF's own checkpoint class: contract.maf_checkpoint_class_round_trips runs in every kit run where
agent_framework is installed and catches a storage that loads MAF checkpoints as another class;
``--checkpoint-class`` runs the whole kit with MAF's class, or with each class in turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance import Outcome
from conformance.cli import main
from storages.contract import CHECKPOINT_FIELDS, WorkflowCheckpoint

from . import support
from .double import DoubleStorage, double_target
from .support import caught_only_by

pytestmark = pytest.mark.maf

CLAUSE = "contract.maf_checkpoint_class_round_trips"


def _as_project_class(checkpoint: Any) -> Any:
    return WorkflowCheckpoint(**{name: getattr(checkpoint, name) for name in CHECKPOINT_FIELDS})


class LoadsProjectClass(DoubleStorage):
    """Gives back the project's WorkflowCheckpoint whatever class was saved (a from_dict of its own)."""

    async def load(self, checkpoint_id: str, **options: Any) -> Any:
        return _as_project_class(await super().load(checkpoint_id, **options))

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        latest = await super().get_latest(
            workflow_name=workflow_name, graph_signature_hash=graph_signature_hash
        )
        return None if latest is None else _as_project_class(latest)


def test_the_double_returns_maf_checkpoints_as_maf_checkpoints() -> None:
    result = support.run_family("contract", double_target()).result(CLAUSE)
    assert result.outcome is Outcome.PASSED, result.message


def test_loading_maf_checkpoints_as_another_class_is_caught() -> None:
    backend = support.run_family("contract", double_target(LoadsProjectClass))
    caught_only_by(backend, CLAUSE, "not MAF's WorkflowCheckpoint")


def test_checkpoint_class_both_runs_each_target_with_each_class(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    clauses = ["--clause", "contract.load_returns_saved"]
    status = main(["memory://", "--checkpoint-class", "both", *clauses, "--json", str(report_path)])
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert status == 0, report
    assert [b["backend"] for b in report["backends"]] == ["memory://", "memory:// [MAF class]"]


def test_checkpoint_class_maf_builds_maf_checkpoints(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    status = main(
        ["memory://", "--checkpoint-class", "maf", "--clause", "contract", "--json", str(report_path)]
    )
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert status == 0, report
    [backend] = report["backends"]
    assert backend["backend"] == "memory:// [MAF class]"
    assert all(r["outcome"] in ("passed", "not_applicable") for r in backend["results"])


def test_an_unknown_checkpoint_class_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory://", "--checkpoint-class", "pydantic"]) == 2
    assert "--checkpoint-class" in capsys.readouterr().err
