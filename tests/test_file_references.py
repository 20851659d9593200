"""Every file a comment, docstring or document names is there: a path left behind by a move or a
rename sends a reader to nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PATH = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+[\w-]+\.(?:py|md|lua|sql|html|json|toml))\b")
"""A path with at least one folder: ``storages/engine/store.py``, ``engine/store.py``."""

BARE = re.compile(r"(?<![\w./-])([A-Za-z_][\w-]*\.(?:py|md|lua))\b")
"""A file named alone (``commit.py``), checked in the library and the kit only, where it means a
file of this project; tests name the files they write and the upstream suites they port."""

UPSTREAM = {
    # Test suites of the runners whose cases we port, in their own repositories.
    "tests/workflow/test_checkpoint_storage_conformance.py",
    "tests/workflow/test_checkpoint.py",
    "tests/core/test_persistence.py",
    "core/test_persistence.py",
    "integrations/persisters/test_b_aiosqlite.py",
    "integrations/persisters/test_b_redis.py",
}


def _sources() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("storages", "conformance", "bench", "examples", "tests"):
        found += sorted((ROOT / folder).rglob("*.py"))
    found += sorted((ROOT / "storages").rglob("*.lua"))
    return found


def _exists(reference: str, source: Path) -> bool:
    bases = (ROOT, ROOT / "storages", source.parent, source.parent.parent)
    return any((base / reference).exists() for base in bases)


def _dangling_in(source: Path, text: str, *, library: bool, names: set[str]) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            reference = match.group(1)
            if (
                reference not in UPSTREAM
                and not reference.startswith("pkg/")
                and not _exists(reference, source)
            ):
                found.append(f"{source.name}:{number}: {reference}")
        if library:
            found += [
                f"{source.name}:{number}: {m.group(1)}"
                for m in BARE.finditer(line)
                if m.group(1) not in names
            ]
    return found


def _library(source: Path) -> bool:
    return source.is_relative_to(ROOT / "storages") or source.is_relative_to(ROOT / "conformance")


def test_every_file_named_in_the_sources_and_docs_exists() -> None:
    names = {path.name for path in ROOT.rglob("*") if ".git" not in path.parts}
    found = [
        reference
        for source in _sources()
        for reference in _dangling_in(
            source, source.read_text(encoding="utf-8"), library=_library(source), names=names
        )
    ]
    assert found == []


def test_a_dangling_reference_is_found() -> None:
    source = ROOT / "storages" / "engine" / "extensions.py"
    gone = "engine/" + "primitives.py"  # built, so this file names no missing file itself
    text = f"# the table in {gone}, the reader in engine/reading.py, the scan in {'nowhere' + '.py'}\n"
    found = _dangling_in(source, text, library=True, names={"reading.py"})
    assert found == [f"extensions.py:1: {gone}", "extensions.py:1: nowhere.py"]
