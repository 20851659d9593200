"""``copy_store`` and ``checkpoint-storages copy``: a store written by real MAF workflows (forks,
nested sub-workflows, tombstones, two signatures, pending writes) and by LangGraph graphs
(pending writes, subgraphs) reads the same after a copy, between every pair of backends; a copy
cut at random points and rerun ends the same, without duplicates; a dry run writes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import BACKENDS, StorageMaker
from copy_support import (
    FailingAfter,
    InjectedFailure,
    observe,
    observe_langgraph,
    write_langgraph_store,
    write_maf_store,
)
from maf_workflows import allow_user_types

from storages import CheckpointStore, InMemoryCheckpointStorage, WorkflowCheckpoint
from storages.contract import PendingWrite
from storages.integrity import IntegrityKeys
from storages.sqlite import SQLiteCheckpointStorage
from storages.tools.cli.main import main
from storages.tools.copying import PLACEHOLDER_SIGNATURE, copy_store
from storages.tools.verify import verify


@asynccontextmanager
async def fresh(backend: str, directory: Path) -> AsyncIterator[StorageMaker]:
    async with BACKENDS[backend].fresh_store(directory) as maker:
        yield maker


def _allowed(storage: CheckpointStore) -> CheckpointStore:
    allow_user_types(storage)
    return storage


# ---------------------------------------------------------------------- core: in memory


async def test_a_maf_store_reads_the_same_after_a_copy() -> None:
    source = _allowed(InMemoryCheckpointStorage())
    await write_maf_store(source)
    assert (await verify(source)).ok
    destination = _allowed(InMemoryCheckpointStorage())

    steps: list[tuple[int, int]] = []
    report = await copy_store(source, destination, progress=lambda done, total: steps.append((done, total)))

    assert report.ok, report.to_dict()
    assert await observe(destination) == await observe(source)
    assert steps[0] == (0, steps[-1][1])
    assert steps[-1][0] == steps[-1][1] > 0
    by_name = {item.workflow_name: item for item in report.workflows}
    assert (
        by_name["copy-pruned"].tombstones
        == len(await source.list_tombstones(workflow_name="copy-pruned"))
        > 0
    )
    assert by_name["copy-sub-child"].nested > 0
    assert by_name["copy-loop"].writes == 4
    assert report.totals().written == len(await source.list_records())
    assert report.totals().present == 0
    # The placeholders are gone: only tombstones remain of them.
    assert all(r.graph_signature_hash != PLACEHOLDER_SIGNATURE for r in await destination.list_records())


class Skipping:
    """A destination that silently skips one kind of write: a broken copy the comparison must see."""

    def __init__(self, inner: CheckpointStore, skipped: str) -> None:
        self.inner = inner
        self.skipped = skipped

    def __getattr__(self, name: str) -> Any:
        if name == self.skipped:

            async def nothing(*args: Any, **kwargs: Any) -> None:
                return None

            return nothing
        return getattr(self.inner, name)


@pytest.mark.parametrize("skipped", ["prune", "put_writes"])
async def test_the_comparison_sees_a_copy_without_tombstones_or_writes(skipped: str) -> None:
    source = _allowed(InMemoryCheckpointStorage())
    await write_maf_store(source)
    destination = _allowed(InMemoryCheckpointStorage())

    await copy_store(source, Skipping(destination, skipped), verify_destination=False)  # type: ignore[arg-type]

    assert await observe(destination) != await observe(source)


async def test_the_comparison_sees_a_copy_in_another_order() -> None:
    source = _allowed(InMemoryCheckpointStorage())
    await write_maf_store(source)
    destination = _allowed(InMemoryCheckpointStorage())
    await copy_store(source, destination, workflows=["copy-pruned", "copy-sub", "copy-two-sigs"])
    for checkpoint_id in reversed(await source.list_checkpoint_ids(workflow_name="copy-loop")):
        await destination.save(await source.load(checkpoint_id))
    await copy_store(source, destination)  # the writes; every checkpoint is present

    assert await observe(destination) != await observe(source)


async def test_a_second_copy_writes_nothing_and_reports_everything_present() -> None:
    source = _allowed(InMemoryCheckpointStorage())
    await write_maf_store(source)
    destination = _allowed(InMemoryCheckpointStorage())
    await copy_store(source, destination)
    before = await observe(destination)
    records = await destination.list_records()

    again = await copy_store(source, destination)

    assert again.ok, again.to_dict()
    assert again.totals().written == 0
    assert again.totals().present == len(records)
    assert await destination.list_records() == records  # same sequences: nothing re-stored
    assert await observe(destination) == before


async def test_a_copy_cut_at_random_points_and_rerun_ends_the_same() -> None:
    source = _allowed(InMemoryCheckpointStorage())
    await write_maf_store(source)
    expected = await observe(source)
    complete = _allowed(InMemoryCheckpointStorage())
    counting = FailingAfter(complete, writes=10**9)
    await copy_store(source, counting)  # type: ignore[arg-type]
    writes = len(counting.calls)
    expected_records = [(r.checkpoint_id, r.workflow_name, r.sequence) for r in await complete.list_records()]

    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for cut in [*sorted(rng.sample(range(1, writes), 4)), 0, writes - 1]:
        destination = _allowed(InMemoryCheckpointStorage())
        with pytest.raises(InjectedFailure):
            await copy_store(source, FailingAfter(destination, cut))  # type: ignore[arg-type]
        second_cut = rng.randrange(1, writes)  # a second interruption on the rerun, maybe
        with contextlib.suppress(InjectedFailure):
            await copy_store(source, FailingAfter(destination, second_cut))  # type: ignore[arg-type]
        report = await copy_store(source, destination)
        assert report.ok, (seed, cut, report.to_dict())
        assert await observe(destination) == expected, (seed, cut)
        records = await destination.list_records()
        assert len(records) == len(expected_records), (seed, cut)  # no duplicates, no leftovers
        # Each workflow's records in the source's order (sequence numbers may be higher).
        for name in {r.workflow_name for r in records}:
            mine = [
                r.checkpoint_id for r in sorted(records, key=lambda r: r.sequence) if r.workflow_name == name
            ]
            theirs = [i for i, n, _ in sorted(expected_records, key=lambda r: r[2]) if n == name]
            assert mine == theirs, (seed, cut, name)


async def test_a_dry_run_writes_nothing_and_says_what_a_copy_would_do() -> None:
    source = _allowed(InMemoryCheckpointStorage())
    await write_maf_store(source)
    destination = _allowed(InMemoryCheckpointStorage())
    with pytest.raises(InjectedFailure):  # the destination partly holds the copy
        await copy_store(source, FailingAfter(destination, 20))  # type: ignore[arg-type]
    before = await observe(destination)
    watched = FailingAfter(destination, 0)  # any write raises

    report = await copy_store(source, watched, dry_run=True)  # type: ignore[arg-type]

    assert watched.calls == []
    assert await observe(destination) == before
    assert report.dry_run
    assert report.verify_reports == []
    total = report.totals()
    assert total.present > 0
    assert total.written > 0
    assert total.present + total.written == len(await source.list_records())


async def test_a_conflicting_checkpoint_is_reported_and_kept() -> None:
    source = InMemoryCheckpointStorage()
    destination = InMemoryCheckpointStorage()
    await source.save(WorkflowCheckpoint("flow", "sig", checkpoint_id="a", state={"v": 1}))
    await source.save(WorkflowCheckpoint("flow", "sig", checkpoint_id="b", previous_checkpoint_id="a"))
    await source.put_writes("a", [PendingWrite("task", 0, "channel", 1)], workflow_name="flow")
    await source.put_writes("b", [PendingWrite("task", 0, "channel", 2)], workflow_name="flow")
    await destination.save(WorkflowCheckpoint("flow", "sig", checkpoint_id="a", state={"v": 2}))

    for dry_run in (True, False):
        report = await copy_store(source, destination, dry_run=dry_run)
        assert not report.ok
        assert [(p.kind, p.checkpoint_id) for p in report.problems] == [("conflict", "a")]
    assert (await destination.load("a")).state == {"v": 2}
    assert (await destination.load("b")).previous_checkpoint_id == "a"
    assert await destination.list_writes("a", workflow_name="flow") == []  # they belong to other content
    assert await destination.list_writes("b", workflow_name="flow") == [PendingWrite("task", 0, "channel", 2)]


async def test_one_workflow_is_copied_with_what_is_nested_in_it() -> None:
    source = _allowed(InMemoryCheckpointStorage())
    await write_maf_store(source)
    destination = _allowed(InMemoryCheckpointStorage())

    report = await copy_store(source, destination, workflows=["copy-sub"])

    assert report.ok, report.to_dict()
    assert await destination.list_workflows() == ["copy-sub"]
    assert await destination.list_tombstones() == await source.list_tombstones(workflow_name="copy-sub")
    nested = await source.list_checkpoint_ids(workflow_name="copy-sub-child", include_nested=True)
    assert (
        await destination.list_checkpoint_ids(workflow_name="copy-sub-child", include_nested=True) == nested
    )
    assert [r.workflow_name for r in report.verify_reports] == ["copy-sub"]


async def test_tombstones_are_not_recreated_where_a_prune_would_take_more() -> None:
    source = InMemoryCheckpointStorage()
    destination = InMemoryCheckpointStorage()
    for index in range(3):
        previous = None if index == 0 else f"c{index - 1}"
        await source.save(
            WorkflowCheckpoint("flow", "sig", checkpoint_id=f"c{index}", previous_checkpoint_id=previous)
        )
    await source.prune(workflow_name="flow", keep_last=1)
    await destination.save(WorkflowCheckpoint("flow", "sig", checkpoint_id="theirs"))

    report = await copy_store(source, destination)

    assert sorted((p.kind, p.checkpoint_id) for p in report.problems) == [
        ("tombstone_not_recreated", "c0"),
        ("tombstone_not_recreated", "c1"),
    ]
    assert await destination.list_checkpoint_ids(workflow_name="flow") == ["theirs", "c2"]
    assert await destination.list_tombstones() == []


@pytest.mark.sqlite
async def test_a_keyed_destination_seals_what_it_stores_and_receipts_its_tombstones(tmp_path: Path) -> None:
    source = _allowed(InMemoryCheckpointStorage())
    await write_maf_store(source)
    destination = _allowed(
        SQLiteCheckpointStorage(tmp_path / "keyed.db", integrity_key=IntegrityKeys(b"k" * 32))
    )
    try:
        report = await copy_store(source, destination)
        assert report.ok, report.to_dict()
        assert await observe(destination) == await observe(source)
        again = await copy_store(source, destination)  # re-saves of sealed records are no-ops
        assert again.ok, again.to_dict()
        assert again.totals().written == 0
        walk = await destination.walk_ancestry_ids(
            (await destination.list_checkpoint_ids(workflow_name="copy-pruned"))[0]
        )
        assert walk.end.value == "pruned"
    finally:
        await destination.aclose()


# ---------------------------------------------------------------------- the command


ALLOW = ["--allow-type", "maf_workflows:Tally", "--allow-type", "maf_workflows:Question"]


async def _maf_sqlite_store(path: Path) -> None:
    storage = _allowed(SQLiteCheckpointStorage(path))
    async with storage:
        await write_maf_store(storage)


async def _observed(path: Path) -> dict[str, Any]:
    async with _allowed(SQLiteCheckpointStorage(path)) as storage:
        return await observe(storage)


@pytest.mark.sqlite
def test_the_command_copies_a_sqlite_store_and_prints_a_summary_at_80_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    asyncio.run(_maf_sqlite_store(tmp_path / "src.db"))
    source_url, destination_url = f"sqlite:///{tmp_path}/src.db", f"sqlite:///{tmp_path}/dst.db"

    assert main(["copy", source_url, destination_url, "--dry-run", *ALLOW]) == 0
    assert not (tmp_path / "dst.db").exists()  # a dry run does not even create the file
    dry = capsys.readouterr().out
    assert "would write" in dry

    assert main(["copy", source_url, destination_url, *ALLOW]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert max(len(line) for line in lines) <= 80, out.out
    for header in ("Workflow", "Nested", "Pruned", "Writes", "Written", "Present", "Bytes"):
        assert header in out.out
    assert "copy-loop" in out.out
    assert "total" in out.out
    assert "verify of the destination: no problems" in " ".join(out.out.split())
    assert "checkpoints" in out.err  # piped: progress as a few plain lines
    assert len(out.err.splitlines()) <= 11

    assert asyncio.run(_observed(tmp_path / "dst.db")) == asyncio.run(_observed(tmp_path / "src.db"))

    assert main(["copy", source_url, destination_url, "--json", *ALLOW]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"]
    assert data["totals"]["written"] == 0
    assert data["totals"]["present"] > 0
    assert [report["ok"] for report in data["verify"]] == [True]


@pytest.mark.sqlite
def test_the_command_exits_1_on_a_conflict_and_never_prints_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def write(path: Path, value: int) -> None:
        async with SQLiteCheckpointStorage(path) as storage:
            await storage.save(WorkflowCheckpoint("flow", "sig", checkpoint_id="a", state={"v": value}))

    asyncio.run(write(tmp_path / "src.db", 1))
    asyncio.run(write(tmp_path / "dst.db", 2))

    status = main(["copy", f"sqlite:///{tmp_path}/src.db", f"sqlite:///{tmp_path}/dst.db"])

    assert status == 1
    assert "conflict" in capsys.readouterr().out
    secret = f"redis://user:{uuid.uuid4().hex}@127.0.0.1:1/0"
    assert main(["copy", f"sqlite:///{tmp_path}/src.db", secret]) == 2
    captured = capsys.readouterr()
    assert secret.split(":")[2].split("@")[0] not in captured.out + captured.err
    assert main(["copy", f"sqlite:///{tmp_path}/missing.db", f"sqlite:///{tmp_path}/dst2.db"]) == 3
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "dst2.db").exists()  # nothing to copy: nothing created


# ---------------------------------------------------------------------- between backends


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("sqlite", marks=pytest.mark.sqlite),
    ]
)
def server_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.langgraph
async def test_maf_and_langgraph_stores_copy_from_sqlite_to_a_server_and_back(
    server_backend: str, tmp_path: Path
) -> None:
    source = _allowed(SQLiteCheckpointStorage(tmp_path / "src.db"))
    back = _allowed(SQLiteCheckpointStorage(tmp_path / "back.db"))
    async with source, back, fresh(server_backend, tmp_path) as maker:
        await write_maf_store(source)
        await write_langgraph_store(source)
        expected, expected_graphs = await observe(source), await observe_langgraph(source)
        async with _allowed(maker()) as server:
            there = await copy_store(source, server)
            assert there.ok, there.to_dict()
            assert await observe(server) == expected
            assert await observe_langgraph(server) == expected_graphs
            again = await copy_store(source, server)
            assert again.ok, again.to_dict()
            assert again.totals().written == 0
            back_report = await copy_store(server, back)
            assert back_report.ok, back_report.to_dict()
        assert await observe(back) == expected
        assert await observe_langgraph(back) == expected_graphs


async def test_a_copy_to_a_server_cut_at_a_random_point_and_rerun_ends_the_same(
    server_backend: str, tmp_path: Path
) -> None:
    source = _allowed(InMemoryCheckpointStorage())
    await write_maf_store(source)
    expected = await observe(source)
    counting = FailingAfter(_allowed(InMemoryCheckpointStorage()), writes=10**9)
    await copy_store(source, counting, verify_destination=False)  # type: ignore[arg-type]
    seed = random.randrange(2**32)
    cut = random.Random(seed).randrange(1, len(counting.calls))
    async with fresh(server_backend, tmp_path) as maker, _allowed(maker()) as server:
        with pytest.raises(InjectedFailure):
            await copy_store(source, FailingAfter(server, cut))  # type: ignore[arg-type]
        report = await copy_store(source, server)
        assert report.ok, (seed, cut, report.to_dict())
        assert await observe(server) == expected, (seed, cut)
        assert len(await server.list_records()) == len(await source.list_records()), (seed, cut)


@pytest.mark.sqlite
def test_the_command_shows_hostile_names_as_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the name on one line
    hostile = "[bold]evil\u202e[/]"  # markup and a bidi override (control characters are refused)

    async def write() -> None:
        async with SQLiteCheckpointStorage(tmp_path / "src.db") as storage:
            await storage.save(WorkflowCheckpoint(hostile, "sig", checkpoint_id=f"id-{hostile}"))

    asyncio.run(write())
    status = main(
        ["copy", f"sqlite:///{tmp_path}/src.db", f"sqlite:///{tmp_path}/dst.db", "--workflow", hostile]
    )

    assert status == 0
    out = capsys.readouterr().out
    assert "\u202e" not in out
    assert "[bold]evil\\u202e[/]" in out


@pytest.mark.sqlite
def test_on_a_terminal_the_command_shows_a_bar_instead_of_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich takes stdout for a terminal
    monkeypatch.setenv("COLUMNS", "80")

    async def write() -> None:
        async with SQLiteCheckpointStorage(tmp_path / "src.db") as storage:
            for index in range(3):
                await storage.save(WorkflowCheckpoint("flow", "sig", checkpoint_id=f"c{index}"))

    asyncio.run(write())
    assert main(["copy", f"sqlite:///{tmp_path}/src.db", f"sqlite:///{tmp_path}/dst.db"]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert "copy" in out.out
    assert "3/3" in out.out  # the bar's count, drawn while copying
    # Where TERM names a terminal, rich colours the count apart from its words.
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.out)
    assert "3 records in 1 workflow" in " ".join(shown.split())
