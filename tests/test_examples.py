"""Every MAF example runs as its own process, without a warning, and ends with the resumed run
equal to the first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis_servers

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.maf
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("memory", marks=pytest.mark.memory),
        pytest.param("sqlite", marks=pytest.mark.sqlite),
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("s3", marks=pytest.mark.s3),
    ],
)
def test_maf_subworkflow_example_runs(backend: str, tmp_path: Path) -> None:
    script = EXAMPLES / f"maf_subworkflow_{backend}.py"
    arguments = [str(tmp_path / "checkpoints.db")] if backend == "sqlite" else []
    environment = {**os.environ, "REDIS_URL": redis_servers.redis_url()}
    done = subprocess.run(
        [sys.executable, str(script), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # the examples must not depend on the working directory
        env=environment,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first = next(line for line in lines if line.startswith("outputs, uninterrupted:"))
    resumed = next(line for line in lines if line.startswith("outputs, resumed:"))
    assert first.split(":", 1)[1].strip() == resumed.split(":", 1)[1].strip() == "['totals [2, 6, 14]']"
    assert (
        "sub-workflow checkpoints kept nested in the parent's: 10, the resumed one loads by its id" in lines
    )
    # MAF logs a warning (to stderr) when a sub-workflow has a storage of its own; the examples
    # follow MAF's pattern (the parent's storage checkpoints the sub-workflow) and print nothing.
    assert "has its own checkpoint storage configured" not in done.stderr
    assert done.stderr == ""
    if backend == "sqlite":
        assert (tmp_path / "checkpoints.db").exists()
        assert lines[-1] == f"checkpoints kept in {tmp_path / 'checkpoints.db'}"


@pytest.mark.maf
@pytest.mark.sqlite
def test_the_sqlite_example_without_a_path_says_its_checkpoints_are_gone(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "maf_subworkflow_sqlite.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("checkpoints written to ")
    assert last.endswith(", now removed; pass a path to keep them")
    directory = Path(last.removeprefix("checkpoints written to ").partition(",")[0])
    assert directory.is_absolute()
    assert not directory.exists()  # what it says, not "kept" in a directory it deleted
    assert list(tmp_path.iterdir()) == []  # nothing left in the working directory either
