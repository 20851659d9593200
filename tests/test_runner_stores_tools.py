"""``checkpoint-storages inspect``, ``copy`` and ``verify`` on stores written through the CrewAI
and Burr adapters: the runner's coordinates and decoded state in the one-checkpoint view, a clean
verify, and a copy the runner reads back as it wrote it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import runner_env  # noqa: F401 - before crewai
from burr.core import State

from storages import open_storage
from storages.runners.burr import StorageStatePersister
from storages.runners.burr import workflow_for as burr_workflow
from storages.runners.crewai import StorageFlowPersistence
from storages.runners.crewai import workflow_for as crewai_workflow
from storages.tools.cli.main import main
from storages.tools.inspection.runner_records import runner_place

pytestmark = pytest.mark.sqlite


@pytest.fixture
def written(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/runners.db"
    with StorageFlowPersistence(url) as flows:
        flows.save_state("flow-1", "outline", {"id": "flow-1", "outline": ["a", "b"]})
        flows.save_state("flow-1", "review", {"id": "flow-1", "outline": ["a", "b"], "approved": True})
    with StorageStatePersister(url) as apps:
        apps.save("user-7", "chat:1", 0, "ask", State({"turns": 1}), "completed")
        apps.save("user-7", "chat:1", 1, "answer", State({"turns": 2}), "failed")
    return url


async def _latest_id(url: str, workflow: str) -> str:
    async with open_storage(url) as storage:
        latest = await storage.get_latest(workflow_name=workflow)
        assert latest is not None
        return str(latest.checkpoint_id)


def _checkpoint_view(url: str, workflow: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["inspect", url, workflow]) == 0  # the workflow's lineage draws
    assert workflow in capsys.readouterr().out
    newest = asyncio.run(_latest_id(url, workflow))
    assert main(["inspect", url, "--checkpoint", newest, "--json"]) == 0
    fields: dict[str, Any] = json.loads(capsys.readouterr().out)["fields"]
    return fields


def test_inspect_shows_the_runners_coordinates_and_state(
    written: str, capsys: pytest.CaptureFixture[str]
) -> None:
    crewai = _checkpoint_view(written, crewai_workflow("flow-1"), capsys)
    assert crewai["runner"] == "crewai"  # --json carries values, not their abbreviations
    assert crewai["method_name"] == "review"
    assert crewai["flow_state"]["approved"] is True
    burr = _checkpoint_view(written, burr_workflow("user-7", "chat:1"), capsys)
    assert burr["status"] == "failed"
    assert burr["sequence_id"] == 1
    assert burr["position"] == "answer"
    assert burr["app_state"] == {"turns": 2}
    assert runner_place(burr_workflow("user-7", "chat:1")) == (
        "burr",
        {"partition_key": "user-7", "app_id": "chat:1"},
    )


def test_verify_finds_nothing_and_copy_keeps_what_the_runners_read(
    written: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", written]) == 0
    copied = f"sqlite:///{tmp_path}/copy.db"
    assert main(["copy", written, copied]) == 0
    capsys.readouterr()
    with StorageFlowPersistence(copied) as flows:
        assert flows.load_state("flow-1") == {"id": "flow-1", "outline": ["a", "b"], "approved": True}
        flows.save_state("flow-1", "publish", {"id": "flow-1", "published": True})  # continues the copy
    with StorageStatePersister(copied) as apps:
        latest = apps.load("user-7", "chat:1")
        assert latest is not None
        assert (latest["sequence_id"], latest["status"]) == (0, "completed")
        apps.save("user-7", "chat:1", 1, "answer", State({"turns": 2}), "completed")  # the retry
    assert main(["verify", copied]) == 0
