"""``inspect --html`` and ``diff --html`` pages, loaded in a real browser: headless Chromium (the
Debian package ``chromium``) runs the page's script, and the test reads what it drew from the
DOM it dumps. A screenshot of each page is kept in tests/artifacts/ for a person to look at.
Without Chromium these tests fail: the page's drawing is only checked here."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_inspect_tools import _langgraph_store, _maf_store

from storages import InMemoryCheckpointStorage, WorkflowCheckpoint
from storages.tools.cli.main import main
from storages.tools.inspection import build_lineage
from storages.tools.inspection.page import lineage_page_data, page

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1200",
    "--virtual-time-budget=10000",
)


def _chromium() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    pytest.fail("headless Chromium is needed to check the HTML page: apt-get install -y chromium")


def browse(page_file: Path, tmp_path: Path, *, fragment: str = "", screenshot: str | None = None) -> str:
    """The DOM after the page's script ran (and a screenshot into tests/artifacts/)."""
    address = page_file.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    command = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run(
        [*command, "--dump-dom", address], capture_output=True, text=True, timeout=180, check=False
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    if screenshot is not None:
        ARTIFACTS.mkdir(exist_ok=True)
        target = ARTIFACTS / screenshot
        target.unlink(missing_ok=True)
        shot = subprocess.run(
            [*command, f"--screenshot={target}", address],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert shot.returncode == 0, shot.stderr[-2000:]
        assert target.stat().st_size > 1000
    assert 'data-ready="1"' in dom.stdout, "the page's script did not finish"
    return dom.stdout


def drawn(dom: str) -> list[tuple[str, str]]:
    """(classes, data-id) of every node the script drew."""
    return re.findall(r'<g class="(node [^"]*)" data-id="([^"]*)"', dom)


def summary(dom: str) -> dict[str, int]:
    tag = re.search(r'<div id="summary"([^>]*)>', dom)
    assert tag is not None
    return {name: int(value) for name, value in re.findall(r'data-([a-z]+)="(\d+)"', tag.group(1))}


@pytest.mark.sqlite
@pytest.mark.maf
def test_a_maf_stores_lineage_drawn_in_a_browser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/maf.db"
    middle = asyncio.run(_maf_store(url))
    out = tmp_path / "maf.html"
    assert main(["inspect", url, "parent", "--html", str(out), "--allowed-modules", "maf_workflows"]) == 0
    capsys.readouterr()
    html = out.read_text()
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # nothing fetched
    assert "https://" not in html

    dom = browse(out, tmp_path, fragment=f"select={middle}", screenshot="inspect-maf.png")
    nodes = drawn(dom)
    counts = summary(dom)
    assert counts["nodes"] == len(nodes) > 10  # every checkpoint of the small store is in view
    assert counts["forks"] == 1
    forks = [node_id for classes, node_id in nodes if " fork" in classes]
    assert forks == [middle]  # the resume forked the run where it restored
    nested = [node_id for classes, node_id in nodes if " nested" in classes]
    assert nested
    assert counts["nested"] == len(nested)
    # A sub-workflow's records are drawn nested under their container, never at the top lane.
    assert re.search(r'class="edge nested"', dom)
    # The selected checkpoint shows its fields and what changed against its parent.
    assert f'id="selected" data-id="{middle}"' in dom
    assert '<table id="fields">' in dom
    assert '<table id="diff">' in dom
    assert "iteration_count" in dom


@pytest.mark.sqlite
@pytest.mark.langgraph
def test_a_langgraph_threads_lineage_drawn_in_a_browser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/graphs.db"
    fork_point = asyncio.run(_langgraph_store(url, "t-1"))
    out = tmp_path / "graph.html"
    assert main(["inspect", url, "--thread", "t-1", "--html", str(out)]) == 0
    capsys.readouterr()

    dom = browse(out, tmp_path, fragment=f"select={fork_point}", screenshot="inspect-langgraph.png")
    nodes = drawn(dom)
    assert summary(dom)["nodes"] == len(nodes) >= 16
    assert [node_id for classes, node_id in nodes if " fork" in classes] == [
        node_id for node_id in (node for _, node in nodes) if node_id.startswith(fork_point + "@")
    ]
    subgraph_starts = [node_id for classes, node_id in nodes if " subgraph" in classes]
    assert len(subgraph_starts) == 2
    assert re.search(r'class="edge subgraph"', dom)
    assert 'id="selected"' in dom
    assert "channel_values" in dom


@pytest.mark.sqlite
def test_a_diff_page_and_a_pruned_run_in_a_browser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/pruned.db"

    async def seed() -> None:
        from storages import open_storage

        async with open_storage(url) as storage:
            previous = None
            for index in range(5):
                sig = "sig-a" if index < 4 else "sig-b"
                await storage.save(WorkflowCheckpoint("run", sig, f"r{index}", previous, state={"n": index}))
                previous = f"r{index}"
            await storage.prune(workflow_name="run", keep_last=3)

    asyncio.run(seed())
    out = tmp_path / "pruned.html"
    assert main(["inspect", url, "run", "--html", str(out)]) == 0
    dom = browse(out, tmp_path, screenshot="inspect-pruned.png")
    classes = dict((node_id, kind) for kind, node_id in drawn(dom))
    assert classes["r1"].startswith("node tombstone")  # the pruned predecessor, drawn as such
    assert "signature-changed" in classes["r4"]
    assert "latest" in classes["r4"]

    diff_page = tmp_path / "diff.html"
    assert main(["diff", url, "r2", "r4", "--html", str(diff_page)]) == 0
    capsys.readouterr()
    dom = browse(diff_page, tmp_path)
    assert '<table id="diff">' in dom
    assert "state.n" in dom
    assert "graph_signature_hash" in dom


def test_ten_thousand_checkpoints_draw_only_what_is_in_view(tmp_path: Path) -> None:
    """The page of a 10,000-checkpoint run loads and draws the rows in view, not all of them."""

    async def page_of_a_long_run() -> str:
        storage = InMemoryCheckpointStorage()
        previous = None
        for index in range(10_000):
            await storage.save(WorkflowCheckpoint("run", "sig", f"c{index}", previous, state={"i": index}))
            previous = f"c{index}"
        tree = await build_lineage(storage, "run")
        return page(await lineage_page_data(storage, tree, title="memory://"))

    out = tmp_path / "long.html"
    out.write_text(asyncio.run(page_of_a_long_run()))
    dom = browse(out, tmp_path, fragment="select=c9000", screenshot="inspect-10000.png")
    counts = summary(dom)
    assert counts["nodes"] == 10_000
    shown = [node_id for _, node_id in drawn(dom)]
    assert "c9000" in shown
    assert 10 < len(shown) < 500  # virtualised: the rows around the view only
    assert 'id="selected" data-id="c9000"' in dom
    assert "state.i" in dom


# ---------------------------------------------------------------------- what a person picks by


def _attribute(dom: str, name: str) -> str:
    found = re.search(rf'<body[^>]* data-{name}="([^"]*)"', dom)
    assert found is not None, name
    return found.group(1)


def _labels(dom: str) -> dict[str, str]:
    """data-id -> the text drawn beside the node."""
    return {
        node_id: html.unescape(text)
        for node_id, text in re.findall(
            r'<g class="node [^"]*" data-id="([^"]*)"[^>]*>.*?<text[^>]*>([^<]*)</text>', dom
        )
    }


def _fields(dom: str) -> list[tuple[str, str]]:
    """(name, the cell's text) of each row of the selected checkpoint's fields table."""
    table = re.search(r'<table id="fields">(.*?)</table>', dom, re.S)
    assert table is not None
    rows = re.findall(r"<tr[^>]*><td>([^<]*)</td><td>(.*?)</td></tr>", table.group(1), re.S)
    return [(name, html.unescape(re.sub(r"<[^>]+>", " ", cell))) for name, cell in rows]


@pytest.mark.sqlite
@pytest.mark.maf
def test_a_maf_page_shows_step_executor_branch_and_whole_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/maf.db"
    middle = asyncio.run(_maf_store(url))
    out = tmp_path / "maf.html"
    assert main(["inspect", url, "parent", "--html", str(out), "--allowed-modules", "maf_workflows"]) == 0
    capsys.readouterr()
    dom = browse(out, tmp_path, fragment=f"select={middle}", screenshot="inspect-maf-picking.png")
    labels = _labels(dom)
    assert all(re.search(r"  step \d+  ", label) for label in labels.values())
    # The executors whose messages a checkpoint holds: the ones that ran in its superstep.
    assert any("  from sub  " in label for label in labels.values())
    assert any("  from rounds  " in label for label in labels.values())
    assert sum("branch 1 of 2" in label for label in labels.values()) == 1
    assert sum("branch 2 of 2" in label for label in labels.values()) == 1
    fields = dict(_fields(dom))
    assert fields["step"].strip() == "3"
    assert "messages from" in fields
    # A value abbreviated in its row opens to the whole of it, as JSON.
    state = re.search(r"<td>state</td><td><details><summary>([^<]*)</summary><pre>([^<]*)</pre>", dom)
    assert state is not None
    assert "…" in html.unescape(state.group(1))
    whole = json.loads(html.unescape(state.group(2)))
    assert whole["_executor_state"]["sub"]["sub_workflow_checkpoint"] == {
        "$checkpoint": whole["_executor_state"]["sub"]["sub_workflow_checkpoint"]["$checkpoint"]
    }


@pytest.mark.sqlite
@pytest.mark.langgraph
def test_a_langgraph_page_marks_interrupts_and_next_nodes_and_names_each_field_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from conformance._langgraph_graphs import build_tour, thread_config
    from storages.runners.langgraph import StorageSaver

    url = f"sqlite:///{tmp_path}/waiting.db"

    async def interrupted() -> None:
        async with StorageSaver.from_url(url) as saver:
            await build_tour(saver).ainvoke({"steps": []}, thread_config("t-2"))  # waits on a person

    asyncio.run(interrupted())
    out = tmp_path / "waiting.html"
    assert main(["inspect", url, "--thread", "t-2", "--html", str(out)]) == 0
    capsys.readouterr()
    assert main(["inspect", url, "t-2"]) == 0
    tree = capsys.readouterr().out
    assert "interrupt waiting" in tree
    assert "next ask" in tree

    dom = browse(out, tmp_path, screenshot="inspect-langgraph-waiting.png")
    labels = _labels(dom)
    waiting = [node_id for classes, node_id in drawn(dom) if " interrupt" in classes]
    assert waiting
    assert all("interrupt waiting" in labels[node_id] for node_id in waiting)
    assert any("next ask" in label for label in labels.values())
    assert any("step -1" in label and "next __start__" in label for label in labels.values())
    dom = browse(out, tmp_path, fragment=f"select={waiting[0]}")
    names = [name for name, _ in _fields(dom)]
    assert names.count("thread_id") == 1  # once, not from the index and again from the body
    assert names.count("checkpoint_ns") == 1
    assert dict(_fields(dom))["interrupt"].strip() == "waiting"


@pytest.mark.sqlite
def test_a_damaged_node_is_coloured_and_its_cause_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/damaged.db"

    async def seed() -> None:
        from storages import open_storage

        async with open_storage(f"{url}?allowed_modules=test_inspect_html") as storage:
            previous = None
            for index in range(4):
                await storage.save(
                    WorkflowCheckpoint("run", "sig", f"r{index}", previous, state={"n": index})
                )
                previous = f"r{index}"
            body = bytearray(await storage.read_raw_body("r1") or b"")
            body[len(body) // 2] ^= 0x01  # a payload bit flipped on disk: its checksum no longer matches
            await storage.write_raw_body("r1", bytes(body))
            await storage.save(
                WorkflowCheckpoint("run", "sig", "r4", "r3", state={"app": _AppType(1)}),
            )

    asyncio.run(seed())
    out = tmp_path / "damaged.html"
    assert main(["inspect", url, "run", "--html", str(out)]) == 0
    capsys.readouterr()
    dom = browse(out, tmp_path, fragment="select=r1", screenshot="inspect-damaged.png")
    classes = {node_id: kind for kind, node_id in drawn(dom)}
    assert "damaged" in classes["r1"].split()
    assert "refused" in classes["r4"].split()
    assert "damaged" not in classes["r4"].split()
    assert not any(flag in classes["r2"].split() for flag in ("damaged", "refused"))
    r1 = r'<g class="node checkpoint[^"]*damaged[^"]*" data-id="r1"[^>]*>'
    shape = re.search(r1 + r'.*?<rect class="mark"[^>]*fill="([^"]*)"', dom)
    assert shape is not None
    assert shape.group(1) == "#9b2c2c"  # the damaged colour, a diamond
    assert "checksum mismatch" in _labels(dom)["r1"]
    assert "checksum mismatch" in dict(_fields(dom))["body"]
    assert "cannot be loaded with this codec" not in dom
    dom = browse(out, tmp_path, fragment="select=r4")
    body = dict(_fields(dom))["body"]
    assert "intact" in body
    assert "does not build" in body


@dataclasses.dataclass
class _AppType:
    value: int


@pytest.mark.sqlite
def test_a_diff_page_uses_the_whole_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/diff.db"

    async def seed() -> None:
        from storages import open_storage

        async with open_storage(url) as storage:
            await storage.save(WorkflowCheckpoint("run", "sig", "a", state={"n": 1, "notes": "x" * 300}))
            await storage.save(WorkflowCheckpoint("run", "sig", "b", "a", state={"n": 2, "notes": "y" * 300}))

    asyncio.run(seed())
    out = tmp_path / "diff.html"
    assert main(["diff", url, "a", "b", "--html", str(out)]) == 0
    capsys.readouterr()
    dom = browse(out, tmp_path, screenshot="diff-page.png")
    assert _attribute(dom, "left-shown") == "0"  # no empty graph and legend beside it
    assert int(_attribute(dom, "panel-width")) >= 0.9 * int(_attribute(dom, "window-width"))
    notes = re.search(
        r"~ state\.notes</td><td class=\"old\"><details><summary>[^<]*</summary><pre>([^<]*)</pre>", dom
    )
    assert notes is not None
    assert json.loads(html.unescape(notes.group(1))) == "x" * 300  # the whole value, expandable
