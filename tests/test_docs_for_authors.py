"""What docs/backends.md tells a backend author works as written: persisting a CheckpointRecord
and rebuilding it, a per-test store that ``durability.across_processes`` opens in another
process through ``process_opener``, and the ``pytest`` extra that installs what the kit's plugin
needs. The README says the Python the package requires and names no coverage figure a run does
not print."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from storages.backend import CheckpointRecord

ROOT = Path(__file__).resolve().parent.parent
BACKENDS_DOC = ROOT / "docs" / "backends.md"


def _snippet(marker: str) -> str:
    text = BACKENDS_DOC.read_text(encoding="utf-8")
    after = text[text.index(f"<!-- {marker}") :]
    match = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    assert match is not None, f"the {marker} marker is not followed by a python block"
    return match.group(1)


def test_a_record_persisted_as_the_docs_say_comes_back_whole() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(_snippet("backend-record-snippet"), "backends.md", "exec"), namespace)
    row_of, record_of = namespace["row_of"], namespace["record_of"]
    for record in (
        CheckpointRecord("c1", "flow", None, "sig", b"\x00body\xff"),
        CheckpointRecord(
            "n1", "child", "n0", "sig-c", b"nested", container_id="c1", root_id="c1", position=2
        ),
    ):
        row = json.loads(json.dumps(row_of(record, 7)))  # through the medium: JSON text
        again, sequence = record_of(row)
        assert sequence == 7
        assert again.info(sequence) == record.info(7)
        assert (again.body, again.digest, again.root_id, again.position) == (
            record.body,
            record.digest,
            record.root_id,
            record.position,
        )


@pytest.mark.sqlite
def test_a_per_test_store_is_opened_by_the_other_process(tmp_path: Path) -> None:
    """The docs' fixture, run by pytest in a directory of its own with SQLite as ``MyStorage``:
    durability.across_processes passes (not skipped for want of a process_opener)."""
    (tmp_path / "test_my_storage.py").write_text(_snippet("per-test-store-snippet"), encoding="utf-8")
    (tmp_path / "my_backend.py").write_text(
        "from storages import SQLiteCheckpointStorage as MyStorage\n\n__all__ = ['MyStorage']\n",
        encoding="utf-8",
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rA",
            "--conformance-clause",
            "durability",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(
        r"PASSED test_my_storage.py::TestMyStorage::test_clause\[durability.across_processes\]", output
    )
    assert "SKIPPED" not in output, output


def _pyproject_value(name: str) -> str:
    """A top-level ``name = ...`` line's value in pyproject.toml."""
    found = re.search(
        rf"^{re.escape(name)} = (.+)$", (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M
    )
    assert found is not None, name
    return found.group(1)


def test_the_pytest_extra_installs_what_the_plugin_needs() -> None:
    requirements = json.loads(_pyproject_value("pytest"))
    names = {re.split(r"[<>=\[ ]", requirement)[0] for requirement in requirements}
    assert {"pytest", "pytest-asyncio"} <= names
    assert "checkpoint-storages[pytest]" in BACKENDS_DOC.read_text(encoding="utf-8")


def test_the_readme_says_the_python_it_needs_and_prints_no_invented_figure() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    minimum = json.loads(_pyproject_value("requires-python")).removeprefix(">=")
    assert f"Python {minimum}" in readme
    # A coverage line as a run prints it ("N of M clauses apply") only with the figures left open:
    # the catalogue grows, and no run printed the example figures.
    assert not re.search(r"\b\d+ of \d+ clauses apply", readme)
