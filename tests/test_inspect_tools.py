"""The operator's tools beyond the basics: inspect at depth (no recursion, streamed, memory that
does not grow with what is printed), diff, the allow-list options and --strict, LangGraph threads,
and every table readable at 80 columns. The HTML page is checked in a real browser in
test_inspect_html.py."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import maf_workflows as flows
import pytest

from storages import InMemoryCheckpointStorage, WorkflowCheckpoint, open_storage
from storages.tools.cli.main import main
from storages.tools.inspection import LineageLine, build_lineage, stream_lineage
from storages.tools.inspection.diff import diff_checkpoints

ROOT = Path(__file__).resolve().parent.parent
SAME_MOMENT = "2026-01-02T03:04:05+00:00"


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def cp(workflow: str, checkpoint_id: str, previous: str | None = None, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=workflow,
        graph_signature_hash=fields.pop("graph_signature_hash", "sig-a"),
        checkpoint_id=checkpoint_id,
        previous_checkpoint_id=previous,
        **fields,
    )


async def _save_chain(url: str, workflow: str, length: int) -> None:
    async with open_storage(url) as storage:
        previous = None
        for index in range(length):
            await storage.save(cp(workflow, f"{workflow}-{index}", previous, iteration_count=index))
            previous = f"{workflow}-{index}"


# ---------------------------------------------------------------------- depth and memory


@pytest.mark.sqlite
def test_a_chain_of_a_thousand_draws_without_recursion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    url = f"sqlite:///{tmp_path}/deep.db"
    asyncio.run(_save_chain(url, "deep", 1000))
    status, out, err = run(["inspect", url, "deep"], capsys)
    assert (status, err) == (0, "")
    drawn = out.strip().splitlines()
    assert len(drawn) == 1001  # the title, then one line per checkpoint
    assert drawn[1].startswith("├── deep-0  #1  ")
    assert drawn[1].startswith("├── deep-0  #1  step 0  ")
    assert drawn[1].endswith("sig sig-a  root")
    assert drawn[-1].startswith("└── deep-999  #1000  step 999  ")

    status, out, err = run(["inspect", url, "deep", "--json"], capsys)
    assert (status, err) == (0, "")
    nodes = json.loads(out)["nodes"]
    assert [node["checkpoint_id"] for node in nodes] == [f"deep-{index}" for index in range(1000)]
    assert [node["iteration_count"] for node in nodes[:3]] == [0, 1, 2]


def test_a_deep_chain_under_a_low_recursion_limit() -> None:
    """Drawn with Python's recursion limit far below the chain's length."""

    async def scenario() -> int:
        storage = InMemoryCheckpointStorage()
        previous = None
        for index in range(3000):
            await storage.save(cp("run", f"c{index}", previous))
            previous = f"c{index}"
        tree = await build_lineage(storage, "run")
        return sum([1 async for _ in stream_lineage(storage, tree)])

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        assert asyncio.run(scenario()) == 3000
    finally:
        sys.setrecursionlimit(limit)


async def _peak_of_streaming(length: int) -> tuple[int, int, int]:
    """(peak bytes while building and streaming the tree, bytes the index takes, lines) for a
    chain of ``length`` checkpoints in memory, the storage's own data excluded."""
    storage = InMemoryCheckpointStorage()
    previous = None
    for index in range(length):
        await storage.save(WorkflowCheckpoint("run", "sig", f"c{index}", previous))
        previous = f"c{index}"
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        records = await storage.list_records()  # what any reader of the index must hold
        index_bytes = tracemalloc.get_traced_memory()[0] - base
        del records
        gc.collect()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        tree = await build_lineage(storage, "run")
        lines = 0
        async for line in stream_lineage(storage, tree):
            lines += isinstance(line, LineageLine)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, index_bytes, lines


@pytest.mark.memory
@pytest.mark.slow
def test_inspect_streams_a_long_run_holding_the_index_and_nothing_per_line() -> None:
    """A tree of 30,000 checkpoints is drawn holding only the index: the peak per checkpoint is
    what it is at 3,000 (it does not grow ten times over with the tree), within a small multiple
    of the index the storage hands out, and no line is kept after it is yielded."""
    small_peak, _, small_lines = asyncio.run(_peak_of_streaming(3_000))
    large_peak, large_index, large_lines = asyncio.run(_peak_of_streaming(30_000))
    assert (small_lines, large_lines) == (3_000, 30_000)
    # Bytes per checkpoint: flat from 3,000 to 30,000 (a margin for dict resizing steps).
    assert large_peak / 30_000 <= 1.5 * small_peak / 3_000, (small_peak, large_peak)
    # The index is the only thing that grows: list_records' answer (~100 bytes a record) and the
    # tree's maps of ids (~330 measured), bounded at 6 times it; nothing per drawn line.
    assert large_peak <= 6 * large_index, (large_peak, large_index)


# ---------------------------------------------------------------------- diff


@pytest.mark.sqlite
def test_diff_names_every_changed_path_old_to_new(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/diff.db"

    async def seed() -> None:
        async with open_storage(url) as storage:
            await storage.save(
                cp(
                    "run",
                    "a",
                    state={"counter": 1, "keep": "same", "gone": True, "nested": {"deep": [1, 2]}},
                    messages={"exec": ["hi"]},
                    pending_request_info_events={"req-1": "question"},
                    metadata={"superstep": 1},
                    timestamp=SAME_MOMENT,
                )
            )
            await storage.save(
                cp(
                    "run",
                    "b",
                    "a",
                    state={"counter": 2, "keep": "same", "nested": {"deep": [1, 3, 4]}, "new key": "x"},
                    messages={"exec": ["hi", "there"]},
                    metadata={"superstep": 2},
                    iteration_count=1,
                    timestamp=SAME_MOMENT,
                )
            )

    asyncio.run(seed())
    status, out, err = run(["diff", url, "a", "b", "--json"], capsys)
    assert (status, err) == (0, "")
    changes = {(c["path"], c["kind"]): (c["old"], c["new"]) for c in json.loads(out)["changes"]}
    assert changes == {  # the values themselves, as JSON
        ("previous_checkpoint_id", "changed"): (None, "a"),
        ("iteration_count", "changed"): (0, 1),
        ("state.counter", "changed"): (1, 2),
        ("state.gone", "removed"): (True, None),
        ("state.nested.deep[1]", "changed"): (2, 3),
        ("state.nested.deep[2]", "added"): (None, 4),
        ("state['new key']", "added"): (None, "x"),
        ("messages.exec[1]", "added"): (None, "there"),
        ("pending_request_info_events['req-1']", "removed"): ("question", None),
        ("metadata.superstep", "changed"): (1, 2),
    }
    status, out, _ = run(["diff", url, "a", "b"], capsys)
    assert status == 0
    assert "a -> b: 10 changes" in out
    assert "state.counter" in out
    assert "metadata.superstep" in out

    status, _, err = run(["diff", url, "a", "nothing"], capsys)
    assert status == 3
    assert "nothing" in err


def test_diff_is_bounded_on_hostile_data() -> None:
    async def scenario() -> Any:
        storage = InMemoryCheckpointStorage()
        deep: Any = "bottom"
        for _ in range(200):  # far deeper than any real state, and than MAX_DEPTH
            deep = {"d": deep}
        await storage.save(cp("run", "a", state={"many": list(range(3000)), "deep": deep}))
        await storage.save(cp("run", "b", "a", state={"many": list(range(1, 3001)), "deep": {"d": 1}}))
        return await diff_checkpoints(storage, "a", "b")

    diff = asyncio.run(scenario())
    assert len(diff.changes) == 1000
    assert diff.omitted > 2000


# ---------------------------------------------------------------------- allow-list options


async def _maf_store(url: str) -> str:
    """A store written by a real MAF parent workflow with a sub-workflow (nested records), resumed
    from a middle checkpoint (a fork); its messages and state hold the test's own types."""
    name = "parent"
    async with open_storage(url) as storage:
        flows.allow_user_types(storage)
        await flows.sub_workflow(name, 3, storage, child_storage=storage).run(flows.LOOP_INPUT)
        parents = await storage.list_checkpoints(workflow_name=name)
        middle = parents[3].checkpoint_id
    async with open_storage(url) as storage:
        flows.allow_user_types(storage)
        await flows.sub_workflow(name, 3, child_storage=storage).run(
            checkpoint_id=middle, checkpoint_storage=storage
        )
    return middle


@pytest.fixture
def maf_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/maf.db"
    asyncio.run(_maf_store(url))
    return url


@pytest.mark.sqlite
@pytest.mark.maf
def test_refused_types_warn_unless_strict_and_the_apps_policy_clears_them(
    maf_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run(["verify", maf_url], capsys)
    assert status == 0  # intact data judged by another policy: a warning, not a failure
    assert "type_not_allowed" in out
    assert "--allowed-modules maf_workflows" in " ".join(out.split())  # the fix, once per type
    assert "warning:" in err
    assert "--strict" in err

    status, out, err = run(["verify", maf_url, "--json"], capsys)
    report = json.loads(out)
    assert (status, report["ok"], report["failed"], report["strict"]) == (0, False, False, False)

    status, out, err = run(["verify", maf_url, "--strict"], capsys)
    assert status == 1

    # The application's own policy, as its storage URL gives it: nothing refused, nothing to say.
    for policy in (["--allowed-modules", "maf_workflows"], ["--allowed-checkpoint-types", _user_types()]):
        status, out, err = run(["verify", maf_url, "--strict", *policy], capsys)
        assert (status, err) == (0, ""), out
        assert "no problems found" in " ".join(out.split())

    status, out, err = run(["inspect", maf_url, "--checkpoint", _any_parent(maf_url)], capsys)
    assert status == 0
    assert "codec does not build" in out
    assert "warning:" in err
    assert "--allowed-modules maf_workflows" in " ".join(err.split())
    status, out, err = run(
        ["inspect", maf_url, "--checkpoint", _any_parent(maf_url), "--allowed-modules", "maf_workflows"],
        capsys,
    )
    assert (status, err) == (0, "")
    assert "refused" not in out
    assert "_executor_state" in out  # the state, decoded


def _user_types() -> str:
    return ",".join(f"{cls.__module__}:{cls.__qualname__}" for cls in flows.USER_TYPES)


def _any_parent(url: str) -> str:
    async def first() -> str:
        async with open_storage(url) as storage:
            return (await storage.list_checkpoint_ids(workflow_name="parent"))[2]

    return asyncio.run(first())


@pytest.mark.sqlite
@pytest.mark.maf
def test_a_maf_sub_workflows_records_hang_under_their_container(
    maf_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    status, out, _ = run(["inspect", maf_url, "parent", "--json"], capsys)
    assert status == 0
    nodes = [node for node in json.loads(out)["nodes"] if "checkpoint_id" in node]
    nested = [node for node in nodes if node["container_id"] is not None]
    assert nested
    assert all(node["relation"] == "nested" and node["parent_id"] == node["container_id"] for node in nested)
    assert all(node["level"] > 0 for node in nested)  # never at the top level
    assert {node["workflow_name"] for node in nested} == {"parent-child"}
    assert [node["iteration_count"] for node in nodes if node["parent_id"] is None] == [0]
    assert all(node["timestamp"] for node in nodes)
    status, out, _ = run(["inspect", maf_url, "parent"], capsys)
    assert "branch 1 of 2" in out
    assert "branch 2 of 2" in out


# ---------------------------------------------------------------------- LangGraph


async def _langgraph_store(url: str, thread_id: str) -> str:
    """A thread whose graph runs a subgraph that interrupts, resumed, then time-travelled from
    the checkpoint before the subgraph (a fork) and resumed again; returns the fork point."""
    from langgraph.types import Command

    from conformance._langgraph_graphs import build_tour, thread_config
    from storages.runners.langgraph import StorageSaver

    async with StorageSaver.from_url(url) as saver:
        graph = build_tour(saver)
        await graph.ainvoke({"steps": []}, thread_config(thread_id))
        await graph.ainvoke(Command(resume="red"), thread_config(thread_id))
        history = [snapshot async for snapshot in graph.aget_state_history(thread_config(thread_id))]
        (before_ask,) = [snapshot for snapshot in history if snapshot.next == ("ask",)]
        fork_point: str = before_ask.config["configurable"]["checkpoint_id"]
        await graph.ainvoke(None, thread_config(thread_id, fork_point))
        await graph.ainvoke(Command(resume="blue"), thread_config(thread_id))
    return fork_point


@pytest.mark.sqlite
@pytest.mark.langgraph
def test_a_langgraph_thread_by_its_id_with_subgraphs_under_their_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    url = f"sqlite:///{tmp_path}/graphs.db"
    fork_point = asyncio.run(_langgraph_store(url, "t-1"))

    status, out, _ = run(["inspect", url, "--json"], capsys)
    places = {(row["thread_id"], row["checkpoint_ns"]) for row in json.loads(out)["workflows"]}
    assert ("t-1", "") in places
    assert len([ns for thread, ns in places if thread == "t-1" and ns.startswith("ask:")]) == 2

    for args in (["inspect", url, "t-1"], ["inspect", url, "--thread", "t-1"]):
        status, out, _ = run(args, capsys)
        assert status == 0
        assert out.startswith("langgraph thread t-1")
        assert "@" not in out  # LangGraph's own ids, not the stored ones
        assert out.count("subgraph ") == 2
    status, out, _ = run(["inspect", url, "t-1", "--json"], capsys)
    nodes = [node for node in json.loads(out)["nodes"] if "checkpoint_id" in node]
    subgraph_runs = [node for node in nodes if node["relation"] == "subgraph"]
    assert len(subgraph_runs) == 2
    by_id = {node["checkpoint_id"]: node for node in nodes}
    for run_start in subgraph_runs:
        parent = by_id[run_start["parent_id"]]
        assert parent["workflow_name"] == "langgraph:t-1:"  # the root graph's checkpoint
    assert any(node["checkpoint_id"].startswith(fork_point + "@") for node in nodes)

    status, out, _ = run(["inspect", url, "--checkpoint", fork_point, "--json"], capsys)
    assert status == 0
    view = json.loads(out)
    assert view["checkpoint_id"].startswith(fork_point + "@")
    fields = view["fields"]
    assert fields["thread_id"] == "t-1"
    assert "steps" in fields["channel_values"]
    assert isinstance(fields["metadata"]["step"], int)
    assert isinstance(fields["interrupts"], list)
    assert isinstance(fields["pending_writes"], list)

    # The interrupted subgraph checkpoint: its pending writes hold the interrupt, decoded.
    subgraph_ids = [node["checkpoint_id"] for node in nodes if node["workflow_name"] != "langgraph:t-1:"]
    shown = [json.loads(run(["inspect", url, "--checkpoint", i, "--json"], capsys)[1]) for i in subgraph_ids]
    assert any("Which colour?" in view["fields"]["interrupts"] for view in shown)  # the value asked

    status, out, _ = run(["diff", url, subgraph_ids[0], subgraph_ids[1], "--json"], capsys)
    assert status == 0
    assert any(change["path"].startswith("channel_values") for change in json.loads(out)["changes"])


# ---------------------------------------------------------------------- 80 columns


def _cells(output: str, column: int) -> str:
    """The text of one column of a rich table, folded lines joined."""
    rows = [line.split("│") for line in output.splitlines() if line.startswith("│")]
    return "".join(row[column + 1].strip() for row in rows if len(row) > column + 1)


@pytest.mark.sqlite
def test_every_table_keeps_every_column_whole_at_80_columns(tmp_path: Path) -> None:
    long_name = "a-workflow-name-long-enough-to-need-folding-" + "x" * 30
    url = f"sqlite:///{tmp_path}/narrow.db"

    async def seed() -> None:
        async with open_storage(url) as storage:
            await storage.save(cp(long_name, "id-" + "7" * 60, state={"k": "v" * 200}))
            await storage.save(cp(long_name, "second", "id-" + "7" * 60, state={"k": "w" * 200}))
            await storage.save(cp("other", "dangles", "never-saved-" + "9" * 50))

    asyncio.run(seed())
    environment = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}

    def piped(*args: str) -> str:
        completed = subprocess.run(
            [sys.executable, "-m", "storages.tools.cli.main", *args],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
            check=False,
        )
        assert completed.returncode in (0, 1), completed.stderr
        for line in completed.stdout.splitlines():
            assert len(line) <= 80, line
        return completed.stdout

    listing = piped("inspect", url)
    for header in ("Workflow", "Check-", "points", "Nested", "Pruned", "Signa-", "tures", "Latest"):
        assert header in listing
    assert long_name in _cells(listing, 0)
    assert "second" in _cells(listing, 5)

    findings = piped("verify", url)
    assert "dangling_link" in _cells(findings, 0)
    assert "never-saved-" + "9" * 50 in _cells(findings, 1)

    checkpoint = piped("inspect", url, "--checkpoint", "id-" + "7" * 60)
    assert "graph_signature_hash" in _cells(checkpoint, 0)
    assert "id-" + "7" * 60 in _cells(checkpoint, 1)

    changes = piped("diff", url, "id-" + "7" * 60, "second")
    assert "~ previous_checkpoint_id" in changes.splitlines()
    assert "~ state.k" in changes.splitlines()

    backends = piped("backends")
    for header in ("Backend", "Schemes", "Installed", "Origin", "Summary"):
        assert header in backends
    assert "sqlite://" in _cells(backends, 1)

    tree = piped("inspect", url, long_name)
    assert "second" in tree


@pytest.mark.sqlite
def test_at_80_columns_no_id_is_folded_over_three_lines_and_no_path_mid_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """MAF's and LangGraph's ids are UUIDs (36 characters): a table keeps one on at most two
    lines, a tree line never breaks one (it goes on under its own label, guides kept), and a diff
    path that must break does so between its parts."""
    import uuid

    monkeypatch.setenv("COLUMNS", "80")
    url = f"sqlite:///{tmp_path}/uuids.db"
    ids = [str(uuid.uuid4()) for _ in range(6)]
    deep_key = "a_rather_long_key_name_that_goes_on"

    async def seed() -> None:
        async with open_storage(url) as storage:
            previous = None
            for index, checkpoint_id in enumerate(ids):
                final = 1 if index < 5 else 2
                state = {deep_key: {"another_quite_long_key": [{"yet_another_key_here": {"final": final}}]}}
                sub_run = WorkflowCheckpoint(
                    "a-sub-workflow-with-a-long-name", "sig-sub", str(uuid.uuid4()), state={"x": index}
                )
                await storage.save(
                    cp(
                        "a-workflow-with-a-rather-long-name",
                        checkpoint_id,
                        previous,
                        state={**state, "child": sub_run},
                        messages={"an_executor_with_a_long_name": [index]},
                        iteration_count=index,
                        timestamp=SAME_MOMENT,
                    )
                )
                previous = checkpoint_id

    asyncio.run(seed())
    uuid_shape = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

    def lines_of(*args: str) -> list[str]:
        status, out, err = run(list(args), capsys)
        assert status == 0, err
        drawn = out.splitlines()
        assert all(len(line) <= 80 for line in drawn), out
        return drawn

    tree = lines_of("inspect", url, "a-workflow-with-a-rather-long-name")
    text = "\n".join(tree)
    assert len(re.findall(uuid_shape, text)) == 12  # every id whole on one line (6 and 6 nested)
    for line in tree[1:]:
        # A wrapped label goes on under itself: the tree's guides run down the left, never text.
        assert re.match(r"^[│ ]*(├── |└── |    |│   )", line), line
    listing = lines_of("inspect", url)
    latest = ids[-1]
    rows = [line for line in listing if line.startswith("│")]
    holding = [index for index, line in enumerate(rows) if latest[:8] in line]
    assert holding, listing
    first = holding[0]
    assert latest in "".join(row.split("│")[-2].strip() for row in rows[first : first + 2])  # two lines
    changes = lines_of("diff", url, ids[4], ids[5])
    path = f"state.{deep_key}.another_quite_long_key[0].yet_another_key_here.final"
    first = next(index for index, line in enumerate(changes) if line.startswith(f"~ state.{deep_key}"))
    pieces = [changes[first][2:]]
    for line in changes[first + 1 :]:
        if not line.startswith("  ") or line.startswith("    "):  # the values, four spaces in
            break
        pieces.append(line[2:])
    assert len(pieces) > 1  # too long for one line: broken...
    assert "".join(pieces) == path
    assert all(piece[0] in ".[" for piece in pieces[1:]), pieces  # ...only between its parts


@pytest.mark.sqlite
@pytest.mark.maf
def test_a_maf_checkpoint_waiting_on_a_person_is_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A human-in-the-loop workflow paused on its request: the line of the checkpoint that holds
    the open request says so, in the tree and in its JSON."""
    monkeypatch.setenv("COLUMNS", "200")
    url = f"sqlite:///{tmp_path}/hitl.db"

    async def paused() -> None:
        async with open_storage(url) as storage:
            flows.allow_user_types(storage)
            await flows.hitl_workflow("hitl", storage).run(flows.LOOP_INPUT)

    asyncio.run(paused())
    status, out, _ = run(["inspect", url, "hitl", "--allowed-modules", "maf_workflows"], capsys)
    assert status == 0
    waiting = [line for line in out.splitlines() if "waiting on 1 request" in line]
    assert len(waiting) == 1
    assert "latest" in waiting[0]
    status, out, _ = run(["inspect", url, "hitl", "--json"], capsys)
    nodes = [node for node in json.loads(out)["nodes"] if "checkpoint_id" in node]
    assert [node["waiting"] for node in nodes] == [0, 0, 1]
    assert [node["nodes"] for node in nodes][1] == ["ask"]


async def test_inspect_names_the_newest_rival_as_latest() -> None:
    """Parallel steps' checkpoints saved out of the order they were built in: the Latest column
    agrees with get_latest (the newest timestamp), not with the index's head."""
    from storages.tools.inspection import list_workflow_summaries

    async with InMemoryCheckpointStorage() as storage:
        await storage.save(cp("wf", "entry", timestamp="2026-01-01T00:00:00+00:00"))
        for name, second in (("built-last", 3), ("built-first", 1), ("built-second", 2)):
            await storage.save(cp("wf", name, "entry", timestamp=f"2026-01-01T00:00:0{second}+00:00"))
        (summary,) = await list_workflow_summaries(storage)
        assert summary.latest_id == "built-last"
        assert await storage.latest_id(workflow_name="wf") == "built-second"  # the head
        latest = await storage.get_latest(workflow_name="wf")
        assert latest is not None
        assert latest.checkpoint_id == "built-last"


async def test_inspect_names_the_newest_root_rival_as_latest() -> None:
    """A run's parallel first steps (roots) saved out of the order they were built in: the Latest
    column agrees with get_latest (the newest timestamp), not with the index's head."""
    from storages.tools.inspection import list_workflow_summaries

    async with InMemoryCheckpointStorage() as storage:
        for name, second in (("built-last", 3), ("built-first", 1), ("built-second", 2)):
            await storage.save(cp("wf", name, timestamp=f"2026-01-01T00:00:0{second}+00:00"))
        (summary,) = await list_workflow_summaries(storage)
        assert summary.latest_id == "built-last"
        assert await storage.latest_id(workflow_name="wf") == "built-second"  # the head
        latest = await storage.get_latest(workflow_name="wf")
        assert latest is not None
        assert latest.checkpoint_id == "built-last"
