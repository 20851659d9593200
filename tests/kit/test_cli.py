"""The checkpoint-conformance command and the built-in targets it checks by default."""

from __future__ import annotations

import dataclasses
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
from storages.memory import InMemoryCheckpointStorage, MemoryBackend


class BrokenLoad(InMemoryCheckpointStorage):
    async def load(self, checkpoint_id: str, **options: Any) -> Any:
        raise RuntimeError("load is broken on purpose")


def test_memory_passes_and_writes_json_and_junit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    json_path, junit_path = tmp_path / "report.json", tmp_path / "junit.xml"
    status = main(["memory://", "--json", str(json_path), "--junit-xml", str(junit_path)])

    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert status == 0, report
    assert report["format"] == "checkpoint-conformance/2"
    assert set(report["summary"]) == {"passed", "failed", "not_applicable", "xfailed", "finding"}
    assert report["summary"]["failed"] == 0
    [backend] = report["backends"]
    assert backend["backend"] == "memory://"
    assert [r["clause"] for r in backend["results"]] == [c.id for c in all_clauses()]
    for result in backend["results"]:
        assert {"clause", "family", "outcome", "duration", "message", "traceback"} <= set(result)
        assert result["family"] == result["clause"].partition(".")[0]
    # One word for a clause that did not apply, in outcomes, summaries and coverage alike.
    assert '"skipped"' not in json_path.read_text(encoding="utf-8")
    not_applicable = sum(1 for r in backend["results"] if r["outcome"] == "not_applicable")
    assert not_applicable > 0
    assert report["summary"]["not_applicable"] == backend["not_applicable"]["clauses"] == not_applicable
    assert sum(family["not_applicable"] for family in backend["coverage"]) == not_applicable

    root = ET.parse(junit_path).getroot()
    cases = root.findall(".//testcase")
    assert [case.get("name") for case in cases] == [c.id for c in all_clauses()]
    # CI tools know "skipped": JUnit keeps that word for what JSON calls not_applicable.
    assert int(root.get("skipped", "-1")) == len(root.findall(".//testcase/skipped")) >= not_applicable
    assert (root.get("tests"), root.get("errors"), root.get("failures")) == (str(len(cases)), "0", "0")

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
        (
            ["memory://", "--clause", "contract.save_return_id"],
            "'contract.save_return_id': did you mean 'contract.save_returns_id'?",
        ),
        (["memory://", "--clause", "ordring"], "'ordring': did you mean 'ordering'?"),
        (["fussy://?colour=red"], "backend 'fussy' (entry point 'fussy = tests.kit.fussy:BACKEND'"),
        (["memory://", "--json", "/no/such/dir/report.json"], "does not exist"),
        (["--no-such-option"], "unrecognized arguments"),
    ],
)
def test_usage_errors_exit_2_without_a_traceback(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str], fussy_registered: None
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert says in captured.err
    assert "Traceback" not in captured.err + captured.out
    # One line says it all (after argparse's usage, for argparse's own errors).
    assert sum(line.startswith("checkpoint-conformance: error:") for line in captured.err.splitlines()) == 1


@pytest.fixture
def fussy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry with a third-party backend ``fussy://`` (tests/kit/fussy.py) added, as an
    installed distribution's entry point would add it."""
    import storages.registry as registry

    fussy = registry.RegisteredBackend(
        registry.BackendSpec(
            "fussy", ("fussy",), "tests.kit.fussy:FussyStorage", server_url_env="FUSSY_SERVER_URL"
        ),
        distribution="fussy-backend",
        entry_point="fussy = tests.kit.fussy:BACKEND",
    )
    base = registry.registry()
    monkeypatch.setattr(registry, "_registry", dataclasses.replace(base, backends=(*base.backends, fussy)))
    monkeypatch.delenv("FUSSY_SERVER_URL", raising=False)


def test_a_third_party_from_url_refusing_an_option_is_a_usage_error(
    fussy_registered: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fussy://?colour=red&token=hunter2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "checkpoint-conformance: error: storage URL 'fussy://?colour=red&token=***': backend 'fussy'"
    )
    assert "refused it: TypeError:" in err
    assert "'colour'" in err
    assert "hunter2" not in err
    assert len(err.splitlines()) == 1
    assert main(["fussy://", "--clause", "contract.save_returns_id"]) == 0  # what it does accept


def test_a_configured_third_party_server_url_its_backend_refuses_is_reported_not_raised(
    fussy_registered: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FUSSY_SERVER_URL", "fussy://?colour=red")
    json_path = tmp_path / "report.json"
    assert main(["--clause", "contract.save_returns_id", "--json", str(json_path)]) == 1
    backends = {b["backend"]: b for b in json.loads(json_path.read_text(encoding="utf-8"))["backends"]}
    error = backends["fussy ($FUSSY_SERVER_URL)"]["error"]
    assert "refused $FUSSY_SERVER_URL: TypeError:" in error
    assert "'colour'" in error
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err


def test_the_no_argument_run_names_every_backend_it_did_not_run_and_why(
    fussy_registered: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from storages.registry import registry

    monkeypatch.delenv("CHECKPOINT_POSTGRESQL_URL", raising=False)
    json_path = tmp_path / "report.json"
    assert main(["--clause", "contract.save_returns_id", "--json", str(json_path)]) == 0
    report = json.loads(json_path.read_text(encoding="utf-8"))
    not_run = {entry["backend"]: entry["reason"] for entry in report["not_run"]}
    assert not_run == {
        "postgres": "needs a server: set CHECKPOINT_POSTGRESQL_URL=postgresql://... or give its URL",
        "fussy": "needs a server: set FUSSY_SERVER_URL=fussy://... or give its URL "
        "(entry point 'fussy = tests.kit.fussy:BACKEND' (fussy-backend))",
    }
    # Every registered backend was either run or named as not run.
    ran = {b["backend"].split(" ")[0].removesuffix("://") for b in report["backends"]}
    assert set(registry().names()) == ran | set(not_run)
    out = " ".join(capsys.readouterr().out.split())
    assert "Not run: postgres: needs a server: set CHECKPOINT_POSTGRESQL_URL=postgresql://..." in out
    assert "Not run: fussy: needs a server: set FUSSY_SERVER_URL=fussy://..." in out


def test_a_configured_server_that_cannot_be_reached_fails_before_the_embedded_backends_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(
        "CHECKPOINT_POSTGRESQL_URL", f"postgresql://postgres:secretpw@127.0.0.1:{port}/none?connect_timeout=5"
    )
    started: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args: Any, **kwargs: Any) -> str:  # the SQLite embedded default's start
        path: str = real_mkdtemp(*args, **kwargs)
        started.append(path)
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    json_path = tmp_path / "report.json"
    assert main(["--clause", "contract.save_returns_id", "--json", str(json_path)]) == 2
    [backend] = json.loads(json_path.read_text(encoding="utf-8"))["backends"]
    assert backend["backend"].endswith("($CHECKPOINT_POSTGRESQL_URL)")
    assert backend["unreachable"] is True
    assert not started  # no embedded backend was started
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith("checkpoint-conformance: error: postgresql://postgres:***@127.0.0.1:")
    assert "could not reach the storage" in line
    assert "secretpw" not in captured.out + captured.err


def test_an_unexpected_exception_keeps_its_traceback_in_every_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import conformance.cli as cli

    monkeypatch.setattr(cli, "_targets", lambda urls, keep=False: [StorageTarget("broken-load", BrokenLoad)])
    raised = 'raise RuntimeError("load is broken on purpose")'
    json_path, junit_path = tmp_path / "report.json", tmp_path / "junit.xml"
    argv = [
        "--clause",
        "contract.load_returns_saved",
        "--json",
        str(json_path),
        "--junit-xml",
        str(junit_path),
    ]

    assert main(argv) == 1
    out = capsys.readouterr().out
    assert raised not in out  # the console keeps it short without --verbose, and says where it is
    assert "its traceback: --verbose, or the JSON and JUnit reports" in out
    [result] = json.loads(json_path.read_text(encoding="utf-8"))["backends"][0]["results"]
    assert result["traceback"].startswith("Traceback (most recent call last):")
    assert raised in result["traceback"]
    assert result["traceback"].endswith("RuntimeError: load is broken on purpose")
    [failure] = ET.parse(junit_path).getroot().iter("failure")
    assert failure.text is not None
    assert raised in failure.text

    assert main([*argv, "--verbose"]) == 1
    out = capsys.readouterr().out
    assert raised in out
    assert "in load" in out


def test_a_clause_failure_of_its_own_carries_no_traceback(tmp_path: Path) -> None:
    json_path = tmp_path / "report.json"
    assert run([StorageTarget("bare", DeclaresNothing)], json_path=json_path, quiet=True) == 0
    [backend] = json.loads(json_path.read_text(encoding="utf-8"))["backends"]
    assert all(result["traceback"] == "" for result in backend["results"])


def test_list_prints_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for clause in all_clauses():
        assert clause.id in out
    assert f"{len(all_clauses())} clauses" in out


@pytest.mark.parametrize("columns", ["80", "200"])
def test_list_keeps_every_id_and_guarantee_at_any_width(
    columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # At 80 columns (piped, CI logs) a table of whole ids left the guarantees no room at all.
    monkeypatch.setenv("COLUMNS", columns)
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= int(columns)
    flowing = " ".join(" ".join(line.strip("│ ").split()) for line in lines)
    for clause in all_clauses():
        assert any(clause.id in line for line in lines), clause.id  # whole, on one line
        assert " ".join(clause.guarantee.split()[:3]) in flowing, clause.guarantee
    assert ("Guarantee" in out) is (columns == "200")  # the table only where it fits


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

    def without_redis(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "redis" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_redis)
    json_path = tmp_path / "report.json"
    assert main(["--clause", "contract", "--json", str(json_path)]) == 1
    backends = {b["backend"]: b for b in json.loads(json_path.read_text())["backends"]}
    assert backends["memory://"]["ok"] is True
    assert "pip install 'checkpoint-storages[redis]'" in backends["redis (fakeredis)"]["error"]
    assert "pip install 'checkpoint-storages[redis]'" in " ".join(capsys.readouterr().out.split())


def test_missing_dependency_of_an_explicit_url_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "redis" else real_find_spec(name, *a),
    )
    json_path = tmp_path / "report.json"
    assert main(["redis://127.0.0.1:6379/0", "--json", str(json_path)]) == 1
    [backend] = json.loads(json_path.read_text())["backends"]
    assert "pip install 'checkpoint-storages[redis]'" in backend["error"]


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


# ---------------------------------------------------------------------- coverage and --require


class DeclaresNothingBackend(MemoryBackend):
    capabilities = frozenset()


class DeclaresNothing(InMemoryCheckpointStorage):
    """MAF's six methods and nothing else declared: most of the kit does not apply."""

    backend_class = DeclaresNothingBackend


def test_a_storage_declaring_nothing_is_told_how_much_of_the_kit_did_not_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path = tmp_path / "report.json"
    status = run([StorageTarget("bare", DeclaresNothing().new_handle)], json_path=json_path)
    assert status == 0
    [backend] = json.loads(json_path.read_text(encoding="utf-8"))["backends"]
    total = len(all_clauses())
    not_applicable = sum(1 for c in all_clauses() if c.requires or c.injects)
    assert backend["not_applicable"] == {"clauses": not_applicable, "of": total}
    coverage = {family["family"]: family for family in backend["coverage"]}
    assert coverage["durability"]["applicable"] == 0
    assert coverage["contract"]["not_applicable"] == 0
    assert sum(f["not_applicable"] for f in coverage.values()) == not_applicable
    out = " ".join(capsys.readouterr().out.split())
    assert f"{not_applicable} of {total} not applicable" in out
    assert f"bare conforms ({total - not_applicable} of {total} clauses apply" in out
    durability = sum(1 for c in all_clauses() if c.family == "durability")
    assert f"durability: 0/{durability} passed, {durability} not applicable" in out  # the progress line


@pytest.mark.parametrize(
    "flags", [["--require", "nested,ancestry"], ["--require", "nested", "--require", "ancestry"]]
)
def test_require_fails_a_storage_that_does_not_declare_the_capabilities(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import conformance.cli as cli

    monkeypatch.setattr(cli, "_targets", lambda urls, keep=False: [StorageTarget("bare", DeclaresNothing)])
    json_path = tmp_path / "report.json"
    assert main(["--clause", "nested", "--clause", "contract", "--json", str(json_path), *flags]) == 1
    [backend] = json.loads(json_path.read_text(encoding="utf-8"))["backends"]
    assert backend["missing_capabilities"] == ["ancestry", "nested"]
    nested = [r for r in backend["results"] if r["family"] == "nested" and r["outcome"] == "failed"]
    assert nested
    assert all("which the run requires but the storage does not declare" in r["message"] for r in nested)
    assert "required but not declared: ancestry, nested" in capsys.readouterr().out


def test_require_passes_when_declared_and_rejects_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory://", "--clause", "contract", "--require", "nested,ancestry"]) == 0
    assert main(["memory://", "--require", "nestd"]) == 2
    assert "unknown capability 'nestd'" in capsys.readouterr().err


def test_validate_required_capabilities() -> None:
    (backend,) = validate(DeclaresNothing, clauses=["contract"], required_capabilities=["nested"]).backends
    assert not backend.ok
    assert backend.missing_capabilities == ["nested"]
    (backend,) = validate(
        InMemoryCheckpointStorage, clauses=["contract"], required_capabilities=["nested"]
    ).backends
    assert backend.ok


# ---------------------------------------------------------------------- report contents


def test_json_report_says_which_kit_storage_and_python_ran_and_when(tmp_path: Path) -> None:
    import platform

    from storages.version import installed_version

    json_path = tmp_path / "report.json"
    assert main(["memory://", "--clause", "contract", "--json", str(json_path)]) == 0
    report = json.loads(json_path.read_text(encoding="utf-8"))
    assert report["kit_version"] == installed_version()
    assert report["python"].endswith(platform.python_version())
    assert report["started_at"] <= report["finished_at"]
    [backend] = report["backends"]
    assert backend["storage_type"] == "storages.memory.storage.InMemoryCheckpointStorage"
    assert backend["storage_package"] == f"checkpoint-storages {installed_version()}"
    assert backend["started_at"]
    assert backend["finished_at"]
    assert all(r["duration"] > 0 for r in backend["results"])


def test_junit_classnames_leave_temporary_directories_out(tmp_path: Path) -> None:
    from conformance.report import junit_classname

    assert junit_classname(f"sqlite:///{tmp_path}/ck.db") == "conformance.sqlite.ck.db"
    assert junit_classname(f"my storage on {tmp_path}/ck.db") == "conformance.my.storage.on.ck.db"
    runs = []
    for index in range(2):
        directory = tmp_path / f"run-{index}"
        directory.mkdir()
        junit_path = tmp_path / f"junit{index}.xml"
        url = f"sqlite:///{directory}/ck.db"
        assert main([url, "--clause", "contract.save_returns_id", "--junit-xml", str(junit_path)]) == 0
        runs.append([case.get("classname") for case in ET.parse(junit_path).getroot().iter("testcase")])
    assert runs[0] == runs[1] == ["conformance.sqlite.ck.db.contract"]


def test_junit_counts_a_backend_that_could_not_open_as_an_error(tmp_path: Path) -> None:
    from conformance.builtin import unavailable_target
    from storages.errors import CheckpointStorageError

    junit_path = tmp_path / "junit.xml"
    refused = unavailable_target("refuses", CheckpointStorageError("cannot open on purpose"))
    clauses = [c for c in all_clauses() if c.id == "contract.save_returns_id"]
    assert run([refused, StorageTarget("bare", DeclaresNothing)], clauses=clauses, junit_path=junit_path) == 1
    root = ET.parse(junit_path).getroot()
    assert (root.get("tests"), root.get("errors"), root.get("failures")) == ("2", "1", "0")
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert (suites["refuses"].get("tests"), suites["refuses"].get("errors")) == ("1", "1")
    [error] = root.iter("error")
    assert "cannot open on purpose" in (error.get("message") or "")


def test_junit_classnames_are_stable_and_credential_free(tmp_path: Path) -> None:
    from conformance.report import junit_classname

    assert (
        junit_classname("redis://user:pw@127.0.0.1:6379/0?prefix=x") == "conformance.redis.127.0.0.1.6379.0"
    )
    assert junit_classname("s3 (moto)") == "conformance.s3.moto"
    runs = []
    for index in range(2):
        junit_path = tmp_path / f"junit{index}.xml"
        assert main(["memory://", "--clause", "contract", "--junit-xml", str(junit_path)]) == 0
        runs.append([case.get("classname") for case in ET.parse(junit_path).getroot().iter("testcase")])
    assert runs[0] == runs[1]
    assert runs[0][0] == "conformance.memory.contract"


def test_piped_output_fits_in_80_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    # concurrency's ids are among the longest (concurrency.cancelled_calls_leave_no_trace).
    assert main(["memory://", "--clause", "contract", "--clause", "concurrency"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    headers = [line for line in lines if line.startswith("┃ Clause")]
    assert headers, lines
    for header in headers:  # every header whole: folded ids, not cut columns
        assert all(name in header for name in ("Clause", "Outcome", "ms", "Message")), header
        assert "…" not in header, header
    longest = max((c.id for c in all_clauses() if c.family == "concurrency"), key=len)
    assert any(f"│ {longest} " in line for line in lines), longest  # whole, on one line
    contract = sum(1 for c in all_clauses() if c.family == "contract")
    assert any(line.startswith(f"memory:// contract: {contract}/{contract} passed") for line in lines)


# ---------------------------------------------------------------------- credentials and fail fast


def test_an_unreachable_target_fails_fast_with_exit_2_and_no_password_anywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    json_path, junit_path = tmp_path / "report.json", tmp_path / "junit.xml"
    url = f"redis://:secretpw@127.0.0.1:{port}/0?socket_connect_timeout=2"
    status = main([url, "--json", str(json_path), "--junit-xml", str(junit_path)])
    captured = capsys.readouterr()
    assert status == 2
    assert "could not reach the storage" in captured.err
    assert "127.0.0.1" in captured.err  # the driver's error, redacted, is shown
    report = json.loads(json_path.read_text(encoding="utf-8"))
    [backend] = report["backends"]
    assert backend["unreachable"] is True
    assert backend["results"] == []
    for text in (captured.out, captured.err, json_path.read_text(), junit_path.read_text()):
        assert "secretpw" not in text


def test_a_bad_url_with_a_secret_is_redacted_in_the_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["s3://bucket?aws_secret_access_key=topsecretkey"]) == 2
    captured = capsys.readouterr()
    assert "unknown option 'aws_secret_access_key'" in captured.err
    assert "topsecretkey" not in captured.out + captured.err


def test_validate_inside_a_running_loop_points_at_avalidate() -> None:
    import asyncio
    import gc
    import warnings

    from conformance import ConformanceUsageError, avalidate

    async def inside() -> None:
        with pytest.raises(ConformanceUsageError, match=r"await avalidate\(\.\.\.\)"):
            validate(InMemoryCheckpointStorage, clauses=["contract.save_returns_id"])
        report = await avalidate(InMemoryCheckpointStorage, clauses=["contract.save_returns_id"])
        assert report.ok

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(inside())
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


# ---------------------------------------------------------------------- cleanup


def _workflows(url: str) -> list[str]:
    import asyncio

    from storages import open_storage

    async def listing() -> list[str]:
        async with open_storage(url) as storage:
            return await storage.list_workflows()

    return asyncio.run(listing())


def test_the_kit_deletes_the_workflows_it_created_unless_keep(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path.as_posix()}/scratch.db"
    assert main([url, "--clause", "contract", "--clause", "nested"]) == 0
    assert _workflows(url) == []
    assert main([url, "--clause", "contract", "--keep"]) == 0
    kept = _workflows(url)
    assert kept
    assert all(name.startswith("ck-") for name in kept)


def test_cleanup_failures_are_reported_not_hidden(tmp_path: Path) -> None:
    class DeleteRefused(InMemoryCheckpointStorage):
        async def delete_workflow(self, **options: Any) -> int:
            raise RuntimeError("refused")

    root = DeleteRefused()
    json_path = tmp_path / "report.json"
    target = StorageTarget("refuses-deletes", root.new_handle, remove_workflows=True)
    assert (
        run(
            [target],
            clauses=[c for c in all_clauses() if c.id == "contract.save_returns_id"],
            json_path=json_path,
        )
        == 0
    )
    [backend] = json.loads(json_path.read_text(encoding="utf-8"))["backends"]
    assert len(backend["leftovers"]) == 1
    assert backend["leftovers"][0].startswith("ck-")


@pytest.mark.parametrize("fresh", [True, False])
def test_a_clause_on_a_fresh_store_leaves_its_workflows_to_the_store(fresh: bool) -> None:
    deleted: list[str] = []
    asked: list[bool] = []

    class CountsDeletes(InMemoryCheckpointStorage):
        async def delete_workflow(self, **options: Any) -> int:
            deleted.append(options["workflow_name"])
            return await super().delete_workflow(**options)

    async def fresh_store() -> bool:
        asked.append(fresh)
        return fresh

    root = CountsDeletes()
    target = StorageTarget("fresh", root.new_handle, remove_workflows=True, fresh_store=fresh_store)
    clauses = ["contract.save_returns_id", "contract.load_returns_saved"]
    (backend,) = validate(target, clauses=clauses).backends
    assert [r.outcome.value for r in backend.results] == ["passed", "passed"]
    assert len(asked) == 2  # before each clause
    if fresh:
        assert deleted == []  # the clause's store goes as a whole, with nothing left to remove
    else:
        assert len(deleted) >= 2
        assert all(name.startswith("ck-") for name in deleted)


def test_url_runs_write_under_a_run_prefix_of_their_own() -> None:
    from conformance.target import with_run_prefix

    assert with_run_prefix("redis://h:1/0", "ck-run-1") == "redis://h:1/0?prefix=checkpoints:ck-run-1"
    assert (
        with_run_prefix("redis://h:1/0?prefix=mine&ttl=5", "ck-run-1")
        == "redis://h:1/0?ttl=5&prefix=mine:ck-run-1"
    )
    assert with_run_prefix("s3://bucket/base/?region=x", "ck-run-1") == "s3://bucket/base/ck-run-1?region=x"
    assert with_run_prefix("s3://bucket", "ck-run-1") == "s3://bucket/ck-run-1"
    assert with_run_prefix("sqlite:///x.db", "ck-run-1") == "sqlite:///x.db"
    # PostgreSQL: tables of the run's own inside the given schema, which may be all a role owns.
    assert (
        with_run_prefix("postgresql://h/db?schema=app", "ck-run-1")
        == "postgresql://h/db?schema=app&table_prefix=ck_run_1_"
    )
    assert (
        with_run_prefix("postgresql://h/db?table_prefix=t_", "ck-run-1")
        == "postgresql://h/db?table_prefix=t_ck_run_1_"
    )
