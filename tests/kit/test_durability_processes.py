"""durability.across_processes: a store written in one process reads in another, and a writer
killed after acknowledged saves loses none; write-behind and process-memory stores are caught."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance import Outcome, StorageTarget

from . import double, support
from .support import caught_only_by, failed

CLAUSE = "durability.across_processes"


def _target(opener: Callable[[], Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> StorageTarget:
    monkeypatch.setenv(double.PATH_VARIABLE, str(tmp_path / "store.pickle"))
    root = opener()
    return StorageTarget(
        name=opener.__name__, factory=root.new_handle, process_opener=f"{opener.__module__}:{opener.__name__}"
    )


def test_a_file_store_passes_across_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    backend = support.run_family("durability", _target(double.open_file_double, monkeypatch, tmp_path))
    assert all(r.outcome is Outcome.PASSED for r in backend.results), backend.failures


def test_without_a_process_opener_the_clause_is_skipped_and_says_why() -> None:
    root = double.storage_of(double.ProcessMemoryStorage())
    backend = support.run_family("durability", StorageTarget(name="no-opener", factory=root.new_handle))
    result = backend.result(CLAUSE)
    assert result.outcome is Outcome.SKIPPED
    assert "gives no process_opener" in result.message


@pytest.mark.parametrize(
    ("opener", "says"),
    [
        (double.open_write_behind, "could not load"),
        (double.open_process_memory, "kept in this process only"),
        (double.open_process_sequence, "did its sequence restart?"),
        (double.open_process_local_deletes, "after another process deleted it"),
    ],
)
def test_stores_that_only_look_durable_are_caught(
    opener: Callable[[], double.DoubleBackend], says: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    backend = support.run_family("durability", _target(opener, monkeypatch, tmp_path))
    if opener is double.open_process_memory:
        # A store in process memory, built anew from its settings, is empty: the same-process
        # clauses catch it too, since the kit rebuilds the store rather than taking a new handle.
        assert {CLAUSE, "durability.survives_reopen"} <= failed(backend)
        assert says in backend.result(CLAUSE).message
        return
    # The others keep everything within one process, so only the other process tells.
    caught_only_by(backend, CLAUSE, says)
