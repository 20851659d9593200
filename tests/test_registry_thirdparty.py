"""Third-party backends as an outside author ships them: tests/thirdparty/'s two distributions are
built and installed (pip, no build isolation, no index) into a temporary ``--target`` directory,
then ``open_storage``, ``checkpoint-conformance`` and ``checkpoint-storages`` run on ``mine://``
in processes that see that directory and this checkout, nothing else.

``mine-backend`` registers ``mine://``; ``bad-backends`` registers four entry points the registry
must refuse (docs/registry.md), and none of them may break another scheme.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

THIRDPARTY = Path(__file__).parent / "thirdparty"
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory both distributions are installed into (the dev environment is untouched)."""
    target = tmp_path_factory.mktemp("thirdparty-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(THIRDPARTY / "mine"),
            str(THIRDPARTY / "bad"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert (target / "mine_backend" / "__init__.py").is_file()
    assert any(target.glob("mine_backend-0.1.0.dist-info"))
    return target


def run(site: Path, *command: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``command`` (a console script next to this Python, or ``python``) seeing ``site``."""
    program = sys.executable if command[0] == "python" else shutil.which(command[0], path=str(BIN))
    assert program is not None, f"{command[0]} is not installed next to {sys.executable}"
    environment = {name: value for name, value in os.environ.items() if name != "MINE_SERVER_URL"}
    # This checkout's packages first (an editable install may point at another copy), then site.
    environment.update(env or {}, PYTHONPATH=os.pathsep.join((str(ROOT), str(site))), COLUMNS="200")
    return subprocess.run(
        [program, *command[1:]], capture_output=True, text=True, env=environment, check=False, timeout=240
    )


def test_the_distributions_are_not_in_this_environment() -> None:
    import importlib.util

    assert importlib.util.find_spec("mine_backend") is None
    assert importlib.util.find_spec("bad_backends") is None


OPEN_MINE = """
import asyncio, json
from storages import MissingDependencyError
from storages.errors import BackendEntryPointError, BackendRegistrationError
from storages import WorkflowCheckpoint, open_storage, supported_schemes

async def main():
    out = {"schemes": supported_schemes()}
    async with open_storage("mine://") as storage:
        saved = await storage.save(WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s"))
        out["type"] = type(storage).__module__ + "." + type(storage).__qualname__
        out["loaded"] = (await storage.load(saved)).checkpoint_id == saved
    for url in ("broken://", "notaspec://", "clash://", "needy://"):
        try:
            open_storage(url)
        except (BackendRegistrationError, MissingDependencyError) as exc:
            out[url] = [type(exc).__name__, str(exc)]
    out["s3"] = type(open_storage("s3://bucket/p")).__name__
    out["memory"] = type(open_storage("memory://")).__name__
    print(json.dumps(out))

asyncio.run(main())
"""


def test_open_storage_opens_mine_and_refuses_each_bad_entry_point_alone(site: Path) -> None:
    completed = run(site, "python", "-c", OPEN_MINE)
    assert completed.returncode == 0, completed.stderr
    out: dict[str, Any] = json.loads(completed.stdout)
    assert out["type"] == "mine_backend.MineStorage"
    assert out["loaded"] is True
    assert "mine" in out["schemes"]
    assert "clash" not in out["schemes"]
    assert out["s3"] == "S3CheckpointStorage"  # the clash did not take the built-in scheme
    assert out["memory"] == "InMemoryCheckpointStorage"
    kind, message = out["broken://"]
    assert kind == "BackendEntryPointError"
    assert "'broken = bad_backends.broken:BACKEND' of bad-backends" in message
    assert "ModuleNotFoundError" in message
    assert "no_such_module_for_broken" in message
    kind, message = out["notaspec://"]
    assert kind == "BackendEntryPointError"
    assert "names a dict, not a storages.registry.BackendSpec" in message
    kind, message = out["clash://"]
    assert kind == "BackendRegistrationError"
    assert "'s3', which is the built-in 's3' backend's" in message
    kind, message = out["needy://"]
    assert kind == "MissingDependencyError"
    assert "pip install 'bad-backends[fast]'" in message


def test_checkpoint_conformance_runs_on_mine(site: Path, tmp_path: Path) -> None:
    report_path = tmp_path / "mine.json"
    completed = run(
        site, "checkpoint-conformance", "mine://", "--clause", "contract", "--json", str(report_path)
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    [backend] = json.loads(report_path.read_text(encoding="utf-8"))["backends"]
    assert backend["backend"] == "mine://"
    assert backend["storage_type"] == "mine_backend.MineStorage"
    assert backend["ok"] is True
    assert sum(1 for result in backend["results"] if result["outcome"] == "passed") >= 10


def test_the_default_run_shows_mine_its_server_and_the_refused_entry_points(
    site: Path, tmp_path: Path
) -> None:
    report_path = tmp_path / "default.json"
    completed = run(
        site,
        "checkpoint-conformance",
        "--clause",
        "contract.save_returns_id",
        "--json",
        str(report_path),
        env={"MINE_SERVER_URL": "mine://"},
    )
    report = json.loads(report_path.read_text(encoding="utf-8"))
    backends = {b["backend"]: b for b in report["backends"]}
    assert completed.returncode == 1, completed.stdout + completed.stderr  # the refusals are errors
    assert backends["mine (memory)"]["ok"] is True
    assert backends["mine:// ($MINE_SERVER_URL)"]["ok"] is True
    assert backends["memory://"]["ok"] is True
    assert "ModuleNotFoundError" in backends["entry point broken = bad_backends.broken:BACKEND"]["error"]
    assert "built-in 's3' backend's" in backends["clash"]["error"]
    assert "Traceback" not in completed.stdout + completed.stderr
    # The configured server ran first; what could not run is named, with what it needs.
    assert next(iter(backends)) == "mine:// ($MINE_SERVER_URL)"
    not_run = {entry["backend"]: entry["reason"] for entry in report["not_run"]}
    assert "pip install 'bad-backends[fast]'" in not_run["needy"]
    assert "give its URL" in not_run["needy"]
    assert "Not run: needy: has no embedded default" in completed.stdout


def test_checkpoint_storages_verifies_and_lists_mine(site: Path) -> None:
    verified = run(site, "checkpoint-storages", "verify", "mine://", "--json")
    # A fresh mine:// store (in this process's memory) holds nothing: said, never "no problems".
    assert verified.returncode == 3, verified.stdout + verified.stderr
    assert verified.stdout == ""
    assert "nothing there: mine:// holds no checkpoint" in verified.stderr
    refused = run(site, "checkpoint-storages", "verify", "mine://somewhere")
    assert refused.returncode == 2
    assert (
        "mine URL 'mine://somewhere': expected mine:// with no host or path" in refused.stderr
    )  # its from_url ran
    listed = run(site, "checkpoint-storages", "backends", "--json")
    assert listed.returncode == 1  # some entry points were refused
    backends = {b["name"]: b for b in json.loads(listed.stdout)["backends"]}
    assert backends["mine"]["origin"] == "entry point 'mine = mine_backend:BACKEND' (mine-backend)"
    assert "pip install 'bad-backends[fast]'" in backends["needy"]["missing"]
    assert len(json.loads(listed.stdout)["problems"]) == 3
