"""What ``checkpoint-storages`` promises a person and a script, held to one table: every exit
status of every command (docs/tooling.md, each command's --help and what each command does),
options that cannot go together refused, no traceback for a file that cannot be written, nothing
found said and never green, the application's modules importable (--app-dir) with the right
advice when they are not, refused types grouped (one fix, not one per checkpoint), and decoded
values a script can use."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import decimal
import enum
import json
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storages import WorkflowCheckpoint, open_storage
from storages.tools.cli.arguments import (
    COMMANDS,
    EXIT_CLOSED_PIPE,
    EXIT_STATUSES,
    exit_status_epilog,
    exit_status_table,
)
from storages.tools.cli.main import main
from storages.tools.terminal import EXIT_BROKEN_PIPE

pytestmark = pytest.mark.sqlite

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("checkpoint-storages")


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def seeded(directory: Path, name: str = "ck.db", *, dangling: bool = False) -> str:
    url = f"sqlite:///{directory}/{name}"

    async def seed() -> None:
        async with open_storage(url) as storage:
            await storage.save(WorkflowCheckpoint("flow", "sig", "c1", state={"n": 1}))
            await storage.save(WorkflowCheckpoint("flow", "sig", "c2", "c1", state={"n": 2}))
            if dangling:
                await storage.save(WorkflowCheckpoint("flow", "sig", "c3", "never-saved"))

    asyncio.run(seed())
    return url


# ---------------------------------------------------------------------- one table of exit statuses


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_exit_status_table_is_the_one_in_the_docs_and_in_every_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = (ROOT / "docs" / "tooling.md").read_text(encoding="utf-8")
    assert exit_status_table() in docs, "regenerate the table in docs/tooling.md from exit_status_table()"
    assert set(EXIT_STATUSES) == set(COMMANDS)
    assert EXIT_CLOSED_PIPE == EXIT_BROKEN_PIPE
    for command in COMMANDS:
        assert main([command, "--help"]) == 0
        assert _words(exit_status_epilog(command)) in _words(capsys.readouterr().out), command


def _maf_directory(directory: Path, *, module: str | None = None) -> Path:
    """A MAF FileCheckpointStorage directory of two checkpoints (holding ``module``'s Job when
    given, which MAF's allow-list refuses unless told)."""
    from agent_framework import FileCheckpointStorage
    from agent_framework import WorkflowCheckpoint as MafCheckpoint

    state: dict[str, Any] = {"n": 1}
    if module is not None:
        state["job"] = sys.modules[module].Job("j", ["plan"])
    allowed = [] if module is None else [f"{module}:Job"]
    files = FileCheckpointStorage(directory, allowed_checkpoint_types=allowed)

    async def write() -> None:
        first = MafCheckpoint(workflow_name="flow", graph_signature_hash="sig", state=state)
        await files.save(first)
        await files.save(
            MafCheckpoint(
                workflow_name="flow",
                graph_signature_hash="sig",
                previous_checkpoint_id=first.checkpoint_id,
                state=state,
            )
        )

    asyncio.run(write())
    return directory


@pytest.mark.maf
def test_every_exit_status_of_every_command_is_what_the_table_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = seeded(tmp_path)
    bad = seeded(tmp_path, "bad.db", dangling=True)
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    maf_dir = _maf_directory(tmp_path / "maf")
    (tmp_path / "refused").mkdir()
    (tmp_path / "refused" / "broken.json").write_text("{not json", encoding="utf-8")
    damaged = seeded(tmp_path, "damaged.db")
    asyncio.run(_damage(damaged, "c2"))
    conflicting = seeded(tmp_path, "conflict.db")
    asyncio.run(_resave_other(conflicting))

    scenarios: dict[tuple[str, int], list[str]] = {
        ("verify", 0): ["verify", good],
        ("verify", 1): ["verify", bad],
        ("verify", 2): ["verify", "ftp://nowhere"],
        ("verify", 3): ["verify", good, "--workflow", "nobody"],
        ("inspect", 0): ["inspect", good, "flow"],
        ("inspect", 1): ["inspect", damaged, "--checkpoint", "c2"],
        ("inspect", 2): ["inspect", good, "flow", "--json", "--html", str(tmp_path / "x.html")],
        ("inspect", 3): ["inspect", good, "nobody"],
        ("diff", 0): ["diff", good, "c1", "c2"],
        ("diff", 2): ["diff", good, "c1", "c2", "--html", str(tmp_path / "no" / "x.html")],
        ("diff", 3): ["diff", good, "c1", "nothing"],
        ("copy", 0): ["copy", good, f"sqlite:///{tmp_path}/copy.db"],
        ("copy", 1): ["copy", good, conflicting],
        ("copy", 2): ["copy", good, "ftp://nowhere"],
        ("copy", 3): ["copy", good, f"sqlite:///{tmp_path}/never.db", "--workflow", "nobody"],
        ("import-maf", 0): ["import-maf", str(maf_dir), f"sqlite:///{tmp_path}/imported.db"],
        ("import-maf", 1): ["import-maf", str(tmp_path / "refused"), f"sqlite:///{tmp_path}/never.db"],
        ("import-maf", 2): ["import-maf", str(tmp_path / "nowhere"), f"sqlite:///{tmp_path}/never.db"],
        ("import-maf", 3): ["import-maf", str(empty_dir), f"sqlite:///{tmp_path}/never.db"],
        ("backends", 0): ["backends"],
        ("backends", 2): ["backends", "--no-such-option"],
    }
    seen: set[tuple[str, int]] = set()
    for (command, expected), args in scenarios.items():
        status, out, err = run(args, capsys)
        assert status == expected, (args, out, err)
        if expected in (2, 3):
            assert out == "", (args, out, err)
            assert "Traceback" not in err, (args, err)
        seen.add((command, status))
    assert not (tmp_path / "never.db").exists()

    # A refused entry point (backends 1), Ctrl-C (130) and a closed pipe (141), for every command.
    from storages import registry
    from storages.tools.cli import main as cli

    refused = registry.BackendRegistry.build(
        registry.BUILTIN_BACKENDS, [_BrokenEntryPoint("broken", "no_such_module:BACKEND", "group")]
    )
    monkeypatch.setattr(cli, "registry", lambda: refused)
    status, _, _ = run(["backends"], capsys)
    seen.add(("backends", status))
    for command in COMMANDS:
        for error, expected in ((KeyboardInterrupt, 130), (BrokenPipeError, 141)):
            monkeypatch.setattr(cli, "option_conflict", _raising(error))
            status, _, err = run([command, *_minimal_arguments(command, good, tmp_path)], capsys)
            assert status == expected, (command, error)
            assert "Traceback" not in err, (command, error)
            seen.add((command, status))
    table = {(command, status) for command, meanings in EXIT_STATUSES.items() for status in meanings}
    assert seen == table


@dataclasses.dataclass(frozen=True)
class _BrokenEntryPoint:
    name: str
    value: str
    group: str
    dist: Any = None

    def load(self) -> Any:
        raise ModuleNotFoundError("No module named 'no_such_module'")


def _raising(error: type[BaseException]) -> Any:
    def conflict(args: Any) -> None:
        raise error

    return conflict


def _minimal_arguments(command: str, url: str, directory: Path) -> list[str]:
    return {
        "verify": [url],
        "inspect": [url],
        "diff": [url, "c1", "c2"],
        "copy": [url, "memory://"],
        "import-maf": [str(directory), "memory://"],
        "backends": [],
    }[command]


async def _damage(url: str, checkpoint_id: str) -> None:
    async with open_storage(url) as storage:
        await storage.write_raw_body(checkpoint_id, b"\x00damaged")


async def _resave_other(url: str) -> None:
    """``url``'s c1 replaced by a record with other content (a conflict for a copy into it)."""
    import sqlite3

    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM checkpoints WHERE checkpoint_id IN ('c1', 'c2')")
    connection.close()
    async with open_storage(url) as storage:
        await storage.save(WorkflowCheckpoint("flow", "sig", "c1", state={"n": "other"}))


# ---------------------------------------------------------------------- conflicts and tracebacks


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["inspect", "{url}", "flow", "--json", "--html", "{dir}/x.html"], "not allowed with argument"),
        (["diff", "{url}", "c1", "c2", "--html", "{dir}/x.html", "--json"], "not allowed with argument"),
        (["inspect", "{url}", "--checkpoint", "c1", "--html", "{dir}/x.html"], "not one --checkpoint"),
        (["inspect", "{url}", "flow", "--strict"], "--strict applies to --checkpoint"),
        (["verify", "{url}", "--structure-only", "--allow-type", "a:B"], "would have no effect"),
        (["verify", "{url}", "--structure-only", "--strict"], "would have no effect"),
        (["import-maf", "{dir}", "{url}", "--allowed-modules", "app"], "unrecognized arguments"),
        (["copy", "{url}", "memory://", "--strict"], "unrecognized arguments"),
        (["diff", "{url}", "c1", "c2", "--strict"], "unrecognized arguments"),
    ],
)
def test_options_that_cannot_go_together_are_refused(
    tmp_path: Path, args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = seeded(tmp_path)
    status, out, err = run([arg.format(url=url, dir=tmp_path) for arg in args], capsys)
    assert (status, out) == (2, "")
    assert said in err
    assert not (tmp_path / "x.html").exists()


def test_a_page_that_cannot_be_written_is_one_line_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = seeded(tmp_path)
    (tmp_path / "a-directory").mkdir()
    for args in (
        ["inspect", url, "flow", "--html", "/nonexistent/x.html"],
        ["inspect", url, "flow", "--html", str(tmp_path / "a-directory")],
        ["diff", url, "c1", "c2", "--html", "/nonexistent/x.html"],
    ):
        status, out, err = run(args, capsys)
        assert (status, out) == (2, "")
        assert err.startswith("checkpoint-storages: error: cannot write "), err
        assert err.count("\n") == 1, err
    # The console script as a person runs it: one line, no Python traceback.
    done = subprocess.run(
        [str(SCRIPT), "inspect", url, "flow", "--html", "/nonexistent/x.html"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


# ---------------------------------------------------------------------- nothing there


@pytest.mark.maf
def test_finding_nothing_is_said_and_exits_3_writing_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = seeded(tmp_path)
    destination = tmp_path / "destination.db"
    (tmp_path / "empty").mkdir()
    for args, said in (
        (["verify", url, "--workflow", "nosuchflow"], "no records of workflow 'nosuchflow'"),
        (["inspect", url, "nosuchflow"], "no records of workflow 'nosuchflow'"),
        (["copy", url, f"sqlite:///{destination}", "--workflow", "nosuchflow"], "no records of workflow"),
        (["copy", url, f"sqlite:///{destination}", "--workflow", "nosuchflow", "--json"], "nothing to copy"),
        (["import-maf", str(tmp_path / "empty"), f"sqlite:///{destination}"], "holds no MAF checkpoint file"),
        (["import-maf", str(tmp_path / "empty"), f"sqlite:///{destination}", "--json"], "holds no MAF"),
    ):
        status, out, err = run(args, capsys)
        assert (status, out) == (3, ""), args
        assert err.startswith("checkpoint-storages: nothing there: "), err
        assert said in err, err
    assert not destination.exists()


# ---------------------------------------------------------------------- the application's types


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A directory holding an application module (``flow_<hex>.py`` with a dataclass Job) that
    this process can import while the test seeds, and the module's name."""
    directory = tmp_path / "app"
    directory.mkdir()
    module = f"flow_{uuid.uuid4().hex[:8]}"
    (directory / f"{module}.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass

            @dataclass
            class Job:
                name: str
                steps: list
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(directory))
    __import__(module)
    yield directory, module
    sys.modules.pop(module, None)


def _forget(module: str, directory: Path) -> None:
    """The application module is no longer importable here: as for a console script run
    anywhere but the application's own directory."""
    sys.modules.pop(module, None)
    while str(directory) in sys.path:
        sys.path.remove(str(directory))


def _app_store(url: str, module: str, count: int) -> None:
    job = sys.modules[module].Job

    async def seed() -> None:
        async with open_storage(f"{url}?allowed_modules={module}") as storage:
            previous = None
            for index in range(count):
                checkpoint_id = f"{uuid.UUID(int=index)}"  # ids as long as MAF's (36 characters)
                await storage.save(
                    WorkflowCheckpoint("flow", "sig", checkpoint_id, previous, state={"job": job("j", ["a"])})
                )
                previous = checkpoint_id

    asyncio.run(seed())


def test_sixteen_refused_checkpoints_are_one_finding_with_one_fix_at_80_columns(
    app: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, module = app
    url = f"sqlite:///{tmp_path}/app.db"
    _app_store(url, module, 16)
    _forget(module, directory)
    monkeypatch.setenv("COLUMNS", "80")

    status, out, err = run(["verify", url], capsys)
    assert status == 0  # intact data, judged by another policy: a warning
    lines = out.splitlines() + err.splitlines()
    assert len(lines) <= 20, "\n".join(lines)  # 358 lines before, each finding repeating the fix
    assert all(len(line) <= 80 for line in lines)
    assert _words(out).count("Fix:") == 1
    assert f"16 checkpoints hold {module}:Job" in _words(out.replace("│", " "))
    assert f"--allow-type {module}:Job" in _words(out.replace("│", " "))
    assert "and 12 more" in _words(out.replace("│", " "))  # four 36-character ids, then a count

    status, out, _ = run(["verify", url, "--json"], capsys)
    findings = json.loads(out)["findings"]
    assert len(findings) == 16
    assert {f["refused_type"] for f in findings} == {f"{module}:Job"}

    # The type allowed, its module not importable here: the advice is --app-dir, not the option given.
    status, out, err = run(["verify", url, "--allow-type", f"{module}:Job"], capsys)
    assert status == 0
    assert "--app-dir" in _words(out.replace("│", " "))
    assert "is allowed, but its module" in _words(out.replace("│", " "))
    one = str(uuid.UUID(int=3))
    status, out, err = run(["inspect", url, "--checkpoint", one, "--allow-type", f"{module}:Job"], capsys)
    assert "--app-dir" in _words(err)


def test_app_dir_makes_the_applications_types_importable_for_the_console_script(
    app: tuple[Path, str], tmp_path: Path
) -> None:
    directory, module = app
    url = f"sqlite:///{tmp_path}/app.db"
    _app_store(url, module, 3)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False, cwd=elsewhere
        )

    without = script("verify", url, "--allow-type", f"{module}:Job", "--strict")
    assert without.returncode == 1, without.stderr
    assert "--app-dir" in _words(without.stdout.replace("│", " "))
    with_dir = script("verify", url, "--allow-type", f"{module}:Job", "--strict", "--app-dir", str(directory))
    assert with_dir.returncode == 0, with_dir.stdout + with_dir.stderr
    assert "no problems found in 3 records" in _words(with_dir.stdout)
    found_at = ("--allowed-modules", module, "--app-dir", str(directory))
    shown = script("inspect", url, "--checkpoint", str(uuid.UUID(int=1)), "--json", *found_at)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["fields"]["state"]["job"] == {
        "$type": f"{module}:Job",
        "name": "j",
        "steps": ["a"],
    }
    missing = script("verify", url, "--app-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert "--app-dir" in missing.stderr


@pytest.mark.maf
def test_import_maf_says_the_command_lines_fix_and_creates_nothing_when_it_fails_up_front(
    app: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, module = app
    maf = _maf_directory(tmp_path / "maf", module=module)
    _forget(module, directory)
    destination = tmp_path / "imported.db"
    url = f"sqlite:///{destination}"

    status, out, err = run(["import-maf", str(maf), url], capsys)
    assert status == 1
    said = _words(out)
    assert f"--allow-type {module}:Job" in said
    assert "decode_checkpoint_value" not in out + err  # MAF's own advice is about its internals
    assert said.count("Fix:") == 1  # two files refused for one type: one line
    assert not destination.exists()  # nothing importable: nothing created

    status, out, err = run(["import-maf", str(maf), url, "--allow-type", f"{module}:Job"], capsys)
    assert status == 1
    assert "--app-dir" in _words(out)
    assert not destination.exists()

    status, out, err = run(
        ["import-maf", str(maf), url, "--allow-type", f"{module}:Job", "--app-dir", str(directory)], capsys
    )
    assert status == 0, out + err
    assert destination.exists()


# ---------------------------------------------------------------------- values a script can use


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_inspect_and_diff_json_carry_the_values_themselves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/values.db?allowed_modules=test_cli_contract"
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    state = {
        "steps": ["plan", "act", "review", "ship", "celebrate", "rest", "again"],
        "blob": b"\x00\xff",
        "pair": (1, 2),
        "tags": {"b", "a"},
        "when": moment,
        "amount": decimal.Decimal("1.50"),
        "colour": Colour.RED,
        "point": Point(1, 2),
        "by_number": {1: "one"},
        "long": "x" * 1000,
    }

    async def seed() -> None:
        async with open_storage(url) as storage:
            inner = WorkflowCheckpoint("child", "sig-c", "inner")
            await storage.save(WorkflowCheckpoint("flow", "sig", "a", state={**state, "child": inner}))
            await storage.save(WorkflowCheckpoint("flow", "sig", "b", "a", state={**state, "pair": (1, 3)}))

    asyncio.run(seed())
    status, out, _ = run(["inspect", url, "--checkpoint", "a", "--json"], capsys)
    assert status == 0
    shown = json.loads(out)["fields"]["state"]
    assert shown == {
        "steps": state["steps"],
        "blob": {"$bytes": "AP8="},
        "pair": [1, 2],
        "tags": ["a", "b"],
        "when": "2026-01-02T03:04:05+00:00",
        "amount": "1.50",
        "colour": {"$enum": "test_cli_contract:Colour.RED", "value": "red"},
        "point": {"$type": "test_cli_contract:Point", "x": 1, "y": 2},
        "by_number": {"$dict": [[1, "one"]]},
        "long": "x" * 1000,
        "child": {"$checkpoint": "inner"},
    }
    status, out, _ = run(["diff", url, "a", "b", "--json"], capsys)
    changes = {change["path"]: change for change in json.loads(out)["changes"]}
    assert (changes["state.pair[1]"]["old"], changes["state.pair[1]"]["new"]) == (2, 3)
    assert changes["state.child"] == {
        "path": "state.child",
        "kind": "removed",
        "old": {"$checkpoint": "inner"},
        "new": None,
    }


def test_a_hostile_depth_is_bounded_in_json() -> None:
    from storages.tools.inspection.values import MAX_DEPTH, json_value

    deep: Any = "bottom"
    for _ in range(10_000):  # far beyond the recursion limit
        deep = [deep]
    shown = json_value(deep)
    for _ in range(MAX_DEPTH):
        shown = shown[0]
    assert set(shown) == {"$type", "$repr"}
    assert len(shown["$repr"]) <= 1000
    assert re.fullmatch(r"builtins:list", shown["$type"])
