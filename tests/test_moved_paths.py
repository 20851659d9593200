"""Every old import path of a module that moved still works: it warns, naming the new path, and
hands on the very same objects."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from storages.errors import MissingDependencyError

MOVED = {
    "storages.maf": "storages.runners.maf",
    "storages.langgraph": "storages.runners.langgraph",
    "storages.crewai": "storages.runners.crewai",
    "storages.burr": "storages.runners.burr",
    "storages.copying": "storages.tools.copying",
    "storages.inspection": "storages.tools.inspection",
    "storages.maf_import": "storages.tools.copying.maf_import",
    "storages.verify": "storages.tools.verify",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_warns_and_hands_on_the_same_objects(old: str, new: str) -> None:
    try:
        moved = importlib.import_module(new)
    except MissingDependencyError as error:
        pytest.skip(str(error))
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"^{old} has moved to {new}:") as caught:
        exec(compile(f"import {old}\n", "importer.py", "exec"), {})  # a plain import statement
    assert [warning.filename for warning in caught] == ["importer.py"]  # it names the importing line
    shim = sys.modules[old]
    assert shim.__all__ == moved.__all__
    for name in moved.__all__:
        assert getattr(shim, name) is getattr(moved, name), name


def test_the_old_script_entry_point_still_runs_the_command_and_stays_quiet() -> None:
    # An install made before the move runs storages.cli:main; its stderr must stay the command's own.
    from storages.tools.cli import main as moved

    sys.modules.pop("storages.cli", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shim = importlib.import_module("storages.cli")
    assert shim.main is moved.main
    assert shim.__all__ == moved.__all__


def test_the_configured_filter_fails_a_run_that_imports_an_old_path() -> None:
    # pyproject.toml's filterwarnings makes the warning an error, so our own code cannot use a shim.
    sys.modules.pop("storages.maf", None)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", r"storages\.[a-z_.]+ has moved to", DeprecationWarning)
        with pytest.raises(DeprecationWarning):
            importlib.import_module("storages.maf")
