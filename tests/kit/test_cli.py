"""The checkpoint-conformance command and the built-in targets it checks by default."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from conformance import StorageTarget, all_clauses, validate
from conformance.builtin import BUILTIN_BACKENDS, builtin_target, builtin_targets
from conformance.cli import main, run
from storages.memory import InMemoryCheckpointStorage


class BrokenLoad(InMemoryCheckpointStorage):
    async def load(self, checkpoint_id: str, **options: Any) -> Any:
        raise RuntimeError("load is broken on purpose")


def test_memory_passes_and_writes_json_and_junit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    json_path, junit_path = tmp_path / "report.json", tmp_path / "junit.xml"
    status = main(["memory://", "--json", str(json_path), "--junit-xml", str(junit_path)])

    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert status == 0, report
    assert set(report["summary"]) >= {"passed", "failed", "skipped"}
    assert report["summary"]["failed"] == 0
    [backend] = report["backends"]
    assert backend["backend"] == "memory://"
    assert [r["clause"] for r in backend["results"]] == [c.id for c in all_clauses()]
    for result in backend["results"]:
        assert {"clause", "family", "outcome", "duration", "message"} <= set(result)
        assert result["family"] == result["clause"].partition(".")[0]

    cases = ET.parse(junit_path).getroot().findall(".//testcase")
    assert [case.get("name") for case in cases] == [c.id for c in all_clauses()]

    out = capsys.readouterr().out
    assert "contract.save_returns_id" in out
    assert "Every backend conforms" in out
    assert "\x1b[" not in out  # not a terminal: no colour codes, no progress bar


def test_a_failing_target_exits_1_and_still_writes_the_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path, junit_path = tmp_path / "report.json", tmp_path / "junit.xml"
    target = StorageTarget("broken-load", BrokenLoad)
    status = run([target], json_path=json_path, junit_path=junit_path)

    assert status == 1
    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert report["ok"] is False
    failed = {r["clause"]: r["message"] for r in report["backends"][0]["results"] if r["outcome"] == "failed"}
    assert "unexpected RuntimeError: load is broken on purpose" in failed["contract.load_returns_saved"]
    assert ET.parse(junit_path).getroot().findall(".//testcase/failure")
    out = " ".join(capsys.readouterr().out.split())
    assert "failed contract.load_returns_saved: unexpected RuntimeError: load is broken on purpose" in out
    assert "Does not conform: broken-load" in out


def test_quiet_shows_only_failures(capsys: pytest.CaptureFixture[str]) -> None:
    from conformance import select_clauses

    status = run([StorageTarget("broken-load", BrokenLoad)], clauses=select_clauses(["contract"]), quiet=True)
    assert status == 1
    out = capsys.readouterr().out
    assert "contract.load_returns_saved" in out
    assert "contract.save_returns_id" not in out


def test_clause_option_selects_ids_and_families(tmp_path: Path) -> None:
    json_path = tmp_path / "report.json"
    assert main(["memory://", "--clause", "contract", "--json", str(json_path)]) == 0
    clauses = [r["clause"] for r in json.loads(json_path.read_text())["backends"][0]["results"]]
    assert clauses == [c.id for c in all_clauses() if c.family == "contract"]

    assert main(["memory://", "--clause", "contract.save_returns_id", "--json", str(json_path)]) == 0
    clauses = [r["clause"] for r in json.loads(json_path.read_text())["backends"][0]["results"]]
    assert clauses == ["contract.save_returns_id"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["nosuch://x"], "Unknown storage URL scheme 'nosuch'"),
        (["not a url"], "Not a storage URL"),
        (
            ["memory://", "--clause", "contract.no_such_clause"],
            "unknown clause ids or families: contract.no_such_clause",
        ),
        (["memory://", "--json", "/no/such/dir/report.json"], "does not exist"),
        (["--no-such-option"], "unrecognized arguments"),
    ],
)
def test_usage_errors_exit_2_without_a_traceback(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert says in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_list_prints_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for clause in all_clauses():
        assert clause.id in out
    assert f"{len(all_clauses())} clauses" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("checkpoint-conformance ")


def test_no_url_checks_every_builtin_backend(tmp_path: Path) -> None:
    json_path = tmp_path / "report.json"
    status = main(["--clause", "contract", "--json", str(json_path)])
    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert [b["backend"] for b in report["backends"]] == [b.name for b in BUILTIN_BACKENDS]
    assert status == (0 if report["ok"] else 1)


def test_builtin_targets_cover_memory_and_sqlite() -> None:
    names = [t.name for t in builtin_targets()]
    assert names[:2] == ["memory://", "sqlite (temp file)"]


def test_sqlite_temp_directory_is_removed_after_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[Path] = []
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args: Any, **kwargs: Any) -> str:
        path: str = real_mkdtemp(*args, **kwargs)
        created.append(Path(path))
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    [sqlite] = [b for b in BUILTIN_BACKENDS if b.name.startswith("sqlite")]
    target = builtin_target(sqlite)
    assert not created  # nothing starts before the target is opened
    validate(target, clauses=["contract.save_returns_id"])
    assert len(created) == 1
    assert not created[0].exists()


def test_missing_dependency_is_reported_not_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real_find_spec = importlib.util.find_spec

    def without_aiosqlite(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "aiosqlite" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_aiosqlite)
    json_path = tmp_path / "report.json"
    assert main(["--clause", "contract", "--json", str(json_path)]) == 1
    backends = {b["backend"]: b for b in json.loads(json_path.read_text())["backends"]}
    assert backends["memory://"]["ok"] is True
    assert "pip install 'checkpoint-storages[sqlite]'" in backends["sqlite (temp file)"]["error"]
    assert "pip install 'checkpoint-storages[sqlite]'" in " ".join(capsys.readouterr().out.split())


def test_missing_dependency_of_an_explicit_url_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "aiosqlite" else real_find_spec(name, *a),
    )
    json_path = tmp_path / "report.json"
    assert main([f"sqlite:///{tmp_path}/ck.db", "--json", str(json_path)]) == 1
    [backend] = json.loads(json_path.read_text())["backends"]
    assert "pip install 'checkpoint-storages[sqlite]'" in backend["error"]


def test_console_script_is_installed_and_works(tmp_path: Path) -> None:
    script = shutil.which("checkpoint-conformance", path=str(Path(sys.executable).parent))
    assert script is not None, "checkpoint-conformance is not installed next to this Python"
    json_path = tmp_path / "report.json"
    completed = subprocess.run(
        [script, "memory://", "--json", str(json_path)], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert json.loads(json_path.read_text(encoding="utf-8"))["ok"] is True
    assert "memory://" in completed.stdout
    assert "\x1b[" not in completed.stdout
