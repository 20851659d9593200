"""The shape issue 28 asked for, checked from the source (ast; nothing imported but storages):
no class rewrites its subclasses, the user API is small, and tests reach shipped classes only
through public names, the author API or documented test hooks."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import storages

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.core


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _shipped_private_names() -> set[str]:
    """Private attributes and methods the classes in storages/ define (``self._x = ...``,
    ``def _x``), dunders aside."""
    names: set[str] = set()
    for path in (ROOT / "storages").rglob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                for item in ast.walk(node):
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith(
                        "_"
                    ):
                        names.add(item.name)
                    if (
                        isinstance(item, ast.Attribute)
                        and isinstance(item.ctx, ast.Store)
                        and isinstance(item.value, ast.Name)
                        and item.value.id == "self"
                    ):
                        names.add(item.attr)
    return {name for name in names if name.startswith("_") and not name.endswith("__")}


def _reaches(path: Path, private: set[str]) -> list[str]:
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(_tree(path)):
        if not (isinstance(node, ast.Attribute) and node.attr in private):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue  # a test class's own attribute, or a double's
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        found.append(f"{shown}:{node.lineno}: .{node.attr}")
    return found


def test_no_class_in_storages_rewrites_its_subclasses() -> None:
    hooks = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in (ROOT / "storages").rglob("*.py")
        for node in ast.walk(_tree(path))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__init_subclass__"
    ]
    assert hooks == []


def test_the_user_api_is_small() -> None:
    assert len(storages.__all__) <= 35, storages.__all__
    assert "Backend" not in storages.__all__  # the author API is storages.backend
    assert "CheckpointRecord" not in storages.__all__


def test_tests_reach_shipped_classes_through_public_names_only() -> None:
    private = _shipped_private_names()
    assert {"_backend", "_client", "_store", "_codec"} <= private  # the scan sees what it checks
    found = [line for path in sorted((ROOT / "tests").rglob("*.py")) for line in _reaches(path, private)]
    assert found == [], "\n".join(found)


def test_the_private_access_scan_can_fail(tmp_path: Path) -> None:
    planted = tmp_path / "test_planted.py"
    planted.write_text(
        "async def test(storage):\n    storage.backend.client\n    return storage._client\n", encoding="utf-8"
    )
    assert _reaches(planted, {"_client"}) == ["test_planted.py:3: ._client"]


def _shadowing(roots: list[Path]) -> list[str]:
    """Modules and packages under ``roots`` named like a standard-library module."""
    stdlib = set(sys.stdlib_module_names)
    found = []
    for root in roots:
        for path in root.rglob("*"):
            name = path.stem if path.suffix == ".py" else path.name if path.is_dir() else ""
            if name in stdlib and name != "__init__":
                found.append(str(path.relative_to(root.parent)))
    return sorted(found)


def test_no_module_shadows_a_standard_library_name() -> None:
    # A module named like the standard library's (storages/inspect once) breaks tools that run a
    # file from inside the package and confuses every reader of an import line.
    assert _shadowing([ROOT / "storages", ROOT / "conformance"]) == []


def test_the_shadowing_scan_can_fail(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "inspect").mkdir(parents=True)
    (package / "json.py").write_text("", encoding="utf-8")
    assert _shadowing([package]) == ["pkg/inspect", "pkg/json.py"]
