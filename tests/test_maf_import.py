"""``import_maf_directory`` and ``checkpoint-storages import-maf``: a directory written by real MAF
workflows through MAF's own FileCheckpointStorage (a loop forked by a resume, a parent with a
sub-workflow, a human-in-the-loop request) is imported with its ids, chains, embedded
sub-workflow checkpoints and MAF's order; files MAF's allow-list refuses are reported."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from agent_framework import FileCheckpointStorage
from copy_support import comparable
from maf_workflows import LOOP_INPUT, allow_user_types, hitl_workflow, loop_workflow, sub_workflow

from storages import InMemoryCheckpointStorage
from storages.sqlite import SQLiteCheckpointStorage
from storages.tools.cli.main import main
from storages.tools.copying.maf_import import import_maf_directory

pytestmark = pytest.mark.maf

USER_TYPES = ["maf_workflows:Tally", "maf_workflows:Question"]
WORKFLOWS = ("imp-loop", "imp-sub", "imp-hitl")


async def _write_directory(directory: Path) -> FileCheckpointStorage:
    files = FileCheckpointStorage(directory, allowed_checkpoint_types=USER_TYPES)
    await loop_workflow("imp-loop", 4, files).run(LOOP_INPUT)
    first_run = sorted(await files.list_checkpoints(workflow_name="imp-loop"), key=_maf_order)
    await loop_workflow("imp-loop", 4).run(checkpoint_id=first_run[1].checkpoint_id, checkpoint_storage=files)
    await sub_workflow("imp-sub", 2, files).run(LOOP_INPUT)
    await hitl_workflow("imp-hitl", files).run(LOOP_INPUT)
    return files


def _maf_order(checkpoint: Any) -> datetime:
    return datetime.fromisoformat(checkpoint.timestamp)


async def test_a_maf_directory_imports_with_ids_chains_nested_records_and_maf_order(tmp_path: Path) -> None:
    files = await _write_directory(tmp_path / "maf")
    destination = allow_user_types(InMemoryCheckpointStorage())
    steps: list[tuple[int, int]] = []

    report = await import_maf_directory(
        tmp_path / "maf",
        destination,
        allowed_checkpoint_types=USER_TYPES,
        progress=lambda done, total: steps.append((done, total)),
    )

    assert report.ok, report.to_dict()
    assert steps[-1][0] == steps[-1][1] == len(list((tmp_path / "maf").glob("*.json")))
    for name in WORKFLOWS:
        theirs = sorted(await files.list_checkpoints(workflow_name=name), key=_maf_order)
        ours = await destination.list_checkpoints(workflow_name=name)
        assert [c.checkpoint_id for c in ours] == [c.checkpoint_id for c in theirs]
        assert [comparable(c) for c in ours] == [comparable(c) for c in theirs]
        latest = await destination.get_latest(workflow_name=name)
        maf_latest = await files.get_latest(workflow_name=name)
        assert latest is not None
        assert maf_latest is not None
        assert latest.checkpoint_id == maf_latest.checkpoint_id
        for checkpoint in ours:  # every chain is whole
            walk = await destination.walk_ancestry_ids(checkpoint.checkpoint_id)
            assert walk.end.value == "root"
    forks = await destination.list_checkpoints(workflow_name="imp-loop")
    parents = [c.previous_checkpoint_id for c in forks if c.previous_checkpoint_id is not None]
    assert len(parents) > len(set(parents))  # the resume forked the loop
    # The sub-workflow's checkpoints embedded in its parent's state are nested records.
    nested = await destination.list_checkpoint_ids(workflow_name="imp-sub-child", include_nested=True)
    assert nested
    for checkpoint_id in nested:
        info = await destination.checkpoint_info(checkpoint_id)
        assert info is not None
        assert info.container_id is not None

    again = await import_maf_directory(tmp_path / "maf", destination, allowed_checkpoint_types=USER_TYPES)
    assert again.ok
    assert again.totals().written == 0
    assert again.totals().present == report.totals().written


async def test_files_mafs_allow_list_refuses_are_reported_and_the_rest_imported(tmp_path: Path) -> None:
    directory = tmp_path / "maf"
    files = FileCheckpointStorage(directory, allowed_checkpoint_types=USER_TYPES)
    await hitl_workflow("imp-plain", files).run(LOOP_INPUT)  # Tally in every checkpoint
    (directory / "broken.json").write_text("{not json", encoding="utf-8")
    (directory / "moved.json").write_text(
        (directory / f"{(await files.list_checkpoint_ids(workflow_name='imp-plain'))[0]}.json").read_text(
            encoding="utf-8"
        ),
        encoding="utf-8",
    )
    destination = allow_user_types(InMemoryCheckpointStorage())

    refused = await import_maf_directory(directory, destination)  # MAF's own types only

    kinds = {problem.checkpoint_id: problem.kind for problem in refused.problems}
    assert set(kinds.values()) == {"refused_file"}
    assert "broken" in kinds
    assert len(kinds) == len(list(directory.glob("*.json")))
    assert await destination.list_workflows() == []

    allowed = await import_maf_directory(directory, destination, allowed_checkpoint_types=USER_TYPES)

    assert sorted(p.checkpoint_id for p in allowed.problems) == ["broken", "moved"]
    assert "not the one its name says" in next(
        p.message for p in allowed.problems if p.checkpoint_id == "moved"
    )
    assert (
        len(await destination.list_checkpoint_ids(workflow_name="imp-plain")) == allowed.totals().written > 0
    )


@pytest.mark.sqlite
def test_the_command_imports_into_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(_write_directory(tmp_path / "maf"))
    url = f"sqlite:///{tmp_path}/imported.db"
    allow = [option for item in USER_TYPES for option in ("--allow-type", item)]

    assert main(["import-maf", str(tmp_path / "maf"), url, "--dry-run", *allow]) == 0
    assert not (tmp_path / "imported.db").exists()
    assert "would write" in " ".join(capsys.readouterr().out.split())
    assert main(["import-maf", str(tmp_path / "maf"), url, "--json", *allow]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"]
    # The sub-workflow's checkpoints MAF embedded are stored as nested records, and counted.
    assert {item["workflow_name"] for item in data["workflows"]} == {*WORKFLOWS, "imp-sub-child"}
    nested = next(item for item in data["workflows"] if item["workflow_name"] == "imp-sub-child")
    assert nested["nested"] == nested["written"] > 0
    assert data["totals"]["nested"] == nested["nested"]
    assert main(["import-maf", str(tmp_path / "maf"), url]) == 1  # the user types are refused now
    assert "refused_file" in capsys.readouterr().out
    assert main(["import-maf", str(tmp_path / "nowhere"), url]) == 2
    assert "no such directory" in capsys.readouterr().err

    async def count() -> int:
        async with allow_user_types(SQLiteCheckpointStorage(tmp_path / "imported.db")) as storage:
            return len(await storage.list_records())  # top-level and nested

    assert asyncio.run(count()) == data["totals"]["written"]
