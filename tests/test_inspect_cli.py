"""The checkpoint-storages command: verify's exit statuses and reports, inspect's workflow list,
lineage tree and checkpoint view. main() runs in-process on a SQLite file, so state persists
between calls; one test runs the installed console script."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from storages import Capability, InMemoryCheckpointStorage, WorkflowCheckpoint, open_storage
from storages.cli import main
from storages.memory import MemoryBackend

pytestmark = pytest.mark.sqlite

SIG_A = "a1b2c3d4e5f6" * 4
SIG_B = "f0e1d2c3b4a5" * 4
SIG_SUB = "5ub5ub5ub5ub"
STAMP = "2026-01-02T03:04:05.123456+00:00"
SHOWN = "2026-01-02T03:04:05Z"


def cp(workflow: str, checkpoint_id: str, previous: str | None = None, **fields: Any) -> WorkflowCheckpoint:
    fields.setdefault("graph_signature_hash", SIG_A)
    fields.setdefault("timestamp", STAMP)
    return WorkflowCheckpoint(
        workflow_name=workflow, checkpoint_id=checkpoint_id, previous_checkpoint_id=previous, **fields
    )


def sub(checkpoint_id: str, previous: str | None = None, **fields: Any) -> WorkflowCheckpoint:
    return cp("sub", checkpoint_id, previous, graph_signature_hash=SIG_SUB, **fields)


async def _seed_forked_nested_run(url: str) -> None:
    async with open_storage(url) as storage:
        await storage.save(cp("run", "r1", iteration_count=0))
        inner = cp("inner", "i1", graph_signature_hash=SIG_B)
        await storage.save(cp("run", "r2", "r1", state={"executor": {"sub": sub("s1", state={"x": inner})}}))
        await storage.save(cp("run", "r3", "r2"))
        await storage.save(cp("run", "r4", "r3"))
        await storage.save(cp("run", "r3b", "r2"))  # a fork: resumed from r2 a second time
        await storage.save(
            cp(
                "run",
                "r4b",
                "r3b",
                state={"sub": sub("s2", "s1"), "notes": "n" * 500},
                iteration_count=7,
                messages={"executor": ["hello", "world"]},
            )
        )
        for index in range(1, 4):
            await storage.save(cp("old", f"o{index}", f"o{index - 1}" if index > 1 else None))
        await storage.prune(workflow_name="old", keep_last=1)


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite file holding a forked run with nested records and a pruned workflow."""
    monkeypatch.setenv("COLUMNS", "120")  # rich's width when not on a terminal
    address = f"sqlite:///{tmp_path}/ck.db"
    asyncio.run(_seed_forked_nested_run(address))
    return address


def path_of(url: str) -> str:
    return url.removeprefix("sqlite:///")


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


# ---------------------------------------------------------------------- inspect


def test_inspect_draws_the_tree_of_a_forked_nested_run(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["inspect", url, "run"], capsys)

    assert (status, err) == (0, "")
    assert lines(out) == [
        "workflow run  (6 checkpoints, 3 nested)",
        f"├── r1  #1  step 0  {SHOWN}  sig a1b2c3d4…  root",
        f"└── r2  #2  step 0  {SHOWN}",
        f"    ├── nested s1  #1  step 0  {SHOWN}  sig 5ub5ub5u…  workflow sub",
        f"    │   └── nested i1  #1  step 0  {SHOWN}  sig f0e1d2c3…  workflow inner",
        "    ├── branch 1 of 2",
        f"    │   ├── r3  #3  step 0  {SHOWN}",
        f"    │   └── r4  #4  step 0  {SHOWN}",
        "    └── branch 2 of 2",
        f"        ├── r3b  #5  step 0  {SHOWN}",
        f"        └── r4b  #6  step 7  from executor  {SHOWN}  latest",
        f"            └── nested s2  #2  step 0  {SHOWN}  sig 5ub5ub5u…  workflow sub  previous s1",
    ]


def test_inspect_tree_as_json_and_after_a_prune(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def resume_with_a_changed_graph() -> None:
        async with open_storage(url) as storage:
            await storage.save(cp("run", "r5b", "r4b", graph_signature_hash=SIG_B))

    asyncio.run(resume_with_a_changed_graph())
    status, out, _ = run(["inspect", url, "run", "--json"], capsys)
    assert status == 0
    tree = json.loads(out)
    assert (tree["workflow_name"], tree["checkpoints"], tree["nested"], tree["pruned"]) == ("run", 7, 3, 0)
    # A flat list in drawing order, each node naming what it hangs under: nothing nested to build.
    nodes = {node["checkpoint_id"]: node for node in tree["nodes"] if "checkpoint_id" in node}
    assert [node.get("checkpoint_id", node.get("heading")) for node in tree["nodes"]] == [
        "r1", "r2", "s1", "i1", "branch 1 of 2", "r3", "r4", "branch 2 of 2", "r3b", "r4b", "s2", "r5b",
    ]  # fmt: skip
    assert (nodes["r1"]["start"], nodes["r1"]["latest"], nodes["r1"]["parent_id"]) == ("root", False, None)
    assert [(nodes[i]["parent_id"], nodes[i]["relation"]) for i in ("r3", "r3b", "s1", "i1")] == [
        ("r2", "child"), ("r2", "child"), ("r2", "nested"), ("s1", "nested"),
    ]  # fmt: skip
    assert (nodes["r4b"]["timestamp"], nodes["r4b"]["iteration_count"]) == (STAMP, 7)
    r4b = nodes["r4b"]
    assert (r4b["step"], r4b["nodes"], r4b["nodes_role"]) == (7, ["executor"], "from")
    assert (nodes["r3"]["branch"], nodes["r4b"]["branch"], nodes["s2"]["branch"], nodes["r2"]["branch"]) == (
        "1 of 2",
        "2 of 2",
        "2 of 2",
        None,
    )
    assert (nodes["r4b"]["signature_changed"], nodes["r5b"]["signature_changed"]) == (False, True)
    assert nodes["r5b"]["latest"]
    status, out, _ = run(["inspect", url, "run"], capsys)
    assert f"r5b  #7  step 0  {SHOWN}  sig f0e1d2c3…  signature changed  latest" in out

    status, out, _ = run(["inspect", url, "old"], capsys)
    assert status == 0
    assert lines(out) == [
        "workflow old  (1 checkpoint, 0 nested, 2 pruned)",
        f"└── o3  #3  step 0  {SHOWN}  sig a1b2c3d4…  after pruned o2  latest",
    ]


def test_inspect_lists_workflows_with_counts(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["inspect", url, "--json"], capsys)
    assert status == 0
    columns = ("workflow_name", "checkpoints", "nested", "pruned", "signatures", "latest_id")
    assert [tuple(row[c] for c in columns) for row in json.loads(out)["workflows"]] == [
        ("inner", 0, 1, 0, 1, None),
        ("old", 1, 0, 2, 1, "o3"),
        ("run", 6, 0, 0, 1, "r4b"),
        ("sub", 0, 2, 0, 1, None),
    ]

    status, out, _ = run(["inspect", url], capsys)
    assert status == 0
    assert "ck.db: 4 workflows" in out.replace("\n", "")
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines(out) if line.startswith("│")]
    assert rows == [
        ["inner", "0", "1", "0", "1", "-"],
        ["old", "1", "0", "2", "1", "o3"],
        ["run", "6", "0", "0", "1", "r4b"],
        ["sub", "0", "2", "0", "1", "-"],
    ]


def test_inspect_shows_one_checkpoints_fields(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["inspect", url, "--checkpoint", "r4b", "--json"], capsys)
    assert status == 0
    view = json.loads(out)
    assert view["previous_checkpoint_id"] == "r3b"
    assert view["previous_status"] == "stored"
    assert view["graph_signature_hash"] == SIG_A  # in full here
    assert view["nested_ids"] == ["s2"]
    assert view["container_id"] is None
    assert view["error"] is None
    # Values a script can use: the decoded fields as JSON, in full, not their abbreviations.
    assert view["fields"]["iteration_count"] == 7
    assert view["fields"]["messages"] == {"executor": ["hello", "world"]}
    assert view["fields"]["state"] == {"sub": {"$checkpoint": "s2"}, "notes": "n" * 500}
    assert view["fields"]["timestamp"] == STAMP

    status, out, _ = run(["inspect", url, "--checkpoint", "r4b"], capsys)
    assert "2 keys: {" in out  # drawn for a person: abbreviated
    assert "n" * 500 not in out.replace("\n", "").replace("│", "").replace(" ", "")

    status, out, _ = run(["inspect", url, "--checkpoint", "s2"], capsys)
    assert status == 0
    assert "r4b (workflow run)" in out  # the container
    assert "s1 (stored)" in out  # the previous checkpoint, itself nested


def test_inspect_reports_a_checkpoint_that_cannot_be_loaded(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(path_of(url)) as connection:
        connection.execute("UPDATE checkpoints SET body = X'00' WHERE checkpoint_id = 'r3'")
    connection.close()

    status, out, _ = run(["inspect", url, "--checkpoint", "r3"], capsys)

    assert status == 1
    assert "cannot be loaded" in out
    assert "r2 (stored)" in out  # the index view is still shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "{url}", "run", "--checkpoint", "r1"], "not both"),
        (["verify", "ftp://example.com"], "Unknown storage URL scheme 'ftp'"),
        (["verify", "{url}", "--allow-type", "not-a-type-key"], "module:qualname"),
    ],
)
def test_usage_errors_exit_2(
    url: str, tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run([arg.format(url=url, dir=tmp_path) for arg in args], capsys)

    assert status == 2
    assert out == ""
    assert err.startswith("checkpoint-storages: error: ")
    assert message in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "{url}", "nobody"], "no records of workflow 'nobody'"),
        (["inspect", "{url}", "--checkpoint", "nothing"], "No checkpoint found with ID nothing"),
        (["inspect", "sqlite:///{dir}/absent.db"], "no such file"),
        (["verify", "{url}", "--workflow", "nobody"], "no records of workflow 'nobody'"),
        (["diff", "{url}", "r1", "nothing"], "No checkpoint found with ID nothing"),
    ],
)
def test_what_names_nothing_exits_3(
    url: str, tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = run([arg.format(url=url, dir=tmp_path) for arg in args], capsys)

    assert status == 3
    assert out == ""
    assert err.startswith("checkpoint-storages: nothing there: ")
    assert message in err
    assert not (tmp_path / "absent.db").exists()  # the tool only reads; it creates no store


def test_argparse_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["verify"]) == 2
    assert main(["frobnicate", "memory://"]) == 2
    assert "usage: checkpoint-storages" in capsys.readouterr().err


# ---------------------------------------------------------------------- verify


def test_verify_exits_0_on_a_clean_storage(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["verify", url], capsys)

    assert (status, err) == (0, "")
    assert " ".join(out.split()) == f"{url}: no problems found in 10 records."

    status, out, _ = run(["verify", url, "--workflow", "run", "--json"], capsys)
    assert status == 0
    report = json.loads(out)
    assert (report["ok"], report["workflow_name"], report["records_checked"]) == (True, "run", 9)


def _seed_defects(url: str) -> None:
    async def seed() -> None:
        async with open_storage(url) as storage:
            await storage.save(cp("run", "r5", "never-saved"))
            await storage.save(cp("run", "r5b", "r4b", graph_signature_hash=SIG_B))
            await storage.save(cp("loop", "la", "lb"))
            await storage.save(cp("loop", "lb", "la"))
            await storage.write_raw_body("r3", b"garbage")

    asyncio.run(seed())
    with sqlite3.connect(path_of(url)) as connection:  # leaves s1 and i1 without their container
        connection.execute("DELETE FROM checkpoints WHERE checkpoint_id = 'r2'")
    connection.close()


def test_verify_exits_1_and_names_every_defect(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _seed_defects(url)

    status, out, err = run(["verify", url, "--json"], capsys)

    assert (status, err) == (1, "")
    report = json.loads(out)
    assert {(f["kind"], tuple(f["checkpoint_ids"])) for f in report["findings"]} == {
        ("dangling_link", ("r5", "never-saved")),
        ("dangling_link", ("r3", "r2")),
        ("dangling_link", ("r3b", "r2")),
        ("cycle", ("la", "lb")),
        ("undecodable_body", ("r3",)),
        ("orphaned_nested", ("s1", "r2")),
        ("signature_change", ("r5b", "r4b")),
    }

    status, out, _ = run(["verify", url], capsys)
    assert status == 1
    assert "7 findings" in out
    for name in ("dangling_link", "cycle", "orphaned_nested", "undecodable_body", "signature_change"):
        assert name in out
    assert "never-saved" in out
    assert " ".join(out.split()).endswith(
        "3 dangling_link, 1 cycle, 1 orphaned_nested, 1 undecodable_body, 1 signature_change in 13 records."
    )


class WithoutRawAccessBackend(MemoryBackend):
    capabilities = MemoryBackend.capabilities - {Capability.RAW_ACCESS}


class WithoutRawAccess(InMemoryCheckpointStorage):
    backend_class = WithoutRawAccessBackend


def test_verify_on_a_storage_without_raw_access_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        "storages.cli_common.open_storage", lambda url, **options: WithoutRawAccess(**options)
    )

    status, _, err = run(["verify", "memory://"], capsys)

    assert status == 2
    assert "does not support verify() (capability 'raw_access' is not declared)" in err


def test_the_installed_console_script(url: str) -> None:
    _seed_defects(url)
    script = Path(sys.executable).with_name("checkpoint-storages")
    assert script.exists(), f"{script} is missing: reinstall the package (pip install -e .)"

    completed = subprocess.run(
        [str(script), "verify", url, "--workflow", "loop", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 1, completed.stderr
    assert [f["kind"] for f in json.loads(completed.stdout)["findings"]] == ["cycle"]


def test_inspect_draws_a_broken_run_one_line_of_descent_each(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed_defects(url)

    status, out, _ = run(["inspect", url, "run"], capsys)

    assert status == 0
    assert lines(out) == [
        "workflow run  (7 checkpoints, 1 nested)",
        "├── line 1 of 4",
        f"│   └── r1  #1  step 0  {SHOWN}  sig a1b2c3d4…  root",
        "├── line 2 of 4",
        "│   ├── r3  #3  body unreadable: body does not start with the checkpoint magic  sig a1b2c3d4…  "
        "previous r2 missing",
        f"│   └── r4  #4  step 0  {SHOWN}",
        "├── line 3 of 4",
        f"│   ├── r3b  #5  step 0  {SHOWN}  sig a1b2c3d4…  previous r2 missing",
        f"│   ├── r4b  #6  step 7  from executor  {SHOWN}",
        f"│   │   └── nested s2  #2  step 0  {SHOWN}  sig 5ub5ub5u…  workflow sub  previous s1",
        f"│   └── r5b  #8  step 0  {SHOWN}  sig f0e1d2c3…  signature changed  latest",
        "└── line 4 of 4",
        f"    └── r5  #7  step 0  {SHOWN}  sig a1b2c3d4…  previous never-saved missing",
    ]
    status, out, _ = run(["inspect", url, "loop"], capsys)
    # In a cycle the newest (lb) is continued by la, which only lb continues: la is the latest.
    assert lines(out)[1:] == [
        f"├── la  #1  step 0  {SHOWN}  sig a1b2c3d4…  cycle: previous lb  latest",
        f"└── lb  #2  step 0  {SHOWN}",
    ]
    status, out, _ = run(["inspect", url, "sub"], capsys)
    assert lines(out)[1:] == [
        f"├── s1  #1  step 0  {SHOWN}  sig 5ub5ub5u…  nested in r2  root",
        f"│   └── nested i1  #1  step 0  {SHOWN}  sig f0e1d2c3…  workflow inner",
        f"└── s2  #2  step 0  {SHOWN}  nested in r4b",
    ]
