"""The README's pytest snippet works as pasted, under pytest-asyncio's default strict mode.

The block is taken from README.md verbatim, written to a fresh directory with a ``my_backend``
module (the worked example of docs/backends.md as ``MyStorage``) and an empty pytest.ini (so
pytest-asyncio runs in its default strict mode), and run by a separate pytest process that reads
none of this project's configuration."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- pytest-base-class-snippet"


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    after = text[text.index(MARKER) :]
    match = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    assert match is not None, "the snippet marker is not followed by a python block"
    return match.group(1)


def _run(directory: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfE", *options],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=600,
    )


@pytest.mark.memory
def test_the_readme_snippet_runs_as_pasted_in_strict_mode(tmp_path: Path) -> None:
    (tmp_path / "test_snippet.py").write_text(readme_snippet(), encoding="utf-8")
    (tmp_path / "my_backend.py").write_text(
        "from examples.dict_storage import DictCheckpointStorage as MyStorage\n\n__all__ = ['MyStorage']\n",
        encoding="utf-8",
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # pytest-asyncio's defaults
    completed = _run(tmp_path, "--conformance-clause", "contract", "--conformance-clause", "ancestry")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "asyncio: mode=Mode.STRICT" in output, output  # pytest-asyncio's header line
    passed = re.search(r"(\d+) passed", output)
    assert passed is not None, output
    assert int(passed.group(1)) >= 20, output
    assert " failed" not in output, output


@pytest.mark.memory
def test_a_broken_backend_fails_through_the_same_snippet(tmp_path: Path) -> None:
    # The same run on a storage whose latest is the oldest checkpoint must fail: the snippet's
    # green is the kit's verdict, not a collection that ran nothing.
    (tmp_path / "test_snippet.py").write_text(readme_snippet(), encoding="utf-8")
    (tmp_path / "my_backend.py").write_text(
        "from examples.dict_storage import DictBackend\n"
        "from storages.engine import CheckpointStore\n\n\n"
        "class OldestAsLatest(DictBackend):\n"
        "    async def latest(self, workflow_name, graph_signature_hash):\n"
        "        rows = await self.list_bodies(workflow_name, graph_signature_hash)\n"
        "        return rows[0] if rows else None\n\n\n"
        "class MyStorage(CheckpointStore):\n"
        "    def __init__(self, **options):\n"
        "        super().__init__(OldestAsLatest(), **options)\n",
        encoding="utf-8",
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\n", encoding="utf-8")
    completed = _run(tmp_path, "--conformance-clause", "contract")
    assert completed.returncode == 1, completed.stdout + completed.stderr
    failed_item = "FAILED test_snippet.py::TestMyStorage::test_clause[contract.latest_returns_saved]"
    assert failed_item in completed.stdout, completed.stdout
