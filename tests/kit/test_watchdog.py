"""The watchdog: a storage that blocks the event loop fails the clause it blocked, and the run goes on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance import StorageTarget, select_clauses, validate
from conformance.cli import run
from storages.memory import InMemoryCheckpointStorage

BLOCKED = "the event loop was blocked"
FIRST_LISTING = "contract.list_ids_match_list"
"""The first contract clause that lists ids; the mutant blocks there."""
FACTOR = 0.05
"""Clause timeouts shrunk so a blocked clause fails within about two seconds."""


class Gate:
    """Holds the blocking calls of one test until it ends. ``ended`` is set when a call returns:
    still clear once a run is over, the run did not wait for the call it abandoned (what the
    watchdog is for), shown by the order of events rather than by a time limit."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.ended = threading.Event()


GATE = Gate()
"""The running test's gate (a fresh one per test: a call abandoned by an earlier test keeps its own)."""
SAFETY = 120.0
"""Seconds a blocking call waits at most, should its test never release it."""


@pytest.fixture(autouse=True)
def gate() -> Iterator[Gate]:
    global GATE
    GATE = Gate()
    yield GATE
    GATE.release.set()


def _sleep() -> None:
    gate = GATE
    gate.release.wait(SAFETY)  # a blocking wait, as time.sleep is, far past the clause's deadline
    gate.ended.set()


def _spin() -> None:
    gate, deadline = GATE, time.monotonic() + SAFETY
    while not gate.release.is_set() and time.monotonic() < deadline:
        pass
    gate.ended.set()


class BlocksOnFirstListing(InMemoryCheckpointStorage):
    """Its first ``list_checkpoint_ids`` of the whole backend blocks the event loop: a synchronous
    sleep (a blocking driver called from an async method) or a busy loop."""

    def __init__(self, block: Callable[[], None] = _sleep, **options: Any) -> None:
        super().__init__(**options)  # new_handle() passes the shared store
        self._block = block
        self._gate = threading.Event()

    def new_handle(self) -> BlocksOnFirstListing:
        handle = super().new_handle()
        handle._block, handle._gate = self._block, self._gate
        return handle

    async def list_checkpoint_ids(self, **options: Any) -> list[str]:
        if not self._gate.is_set():
            self._gate.set()
            self._block()
        return await super().list_checkpoint_ids(**options)


def blocking_target(block: Callable[[], None] = _sleep) -> StorageTarget:
    root = BlocksOnFirstListing(block)
    return StorageTarget("blocks-the-loop", root.new_handle, timeout_factor=FACTOR)


def test_the_first_listing_clause_is_the_one_the_mutant_blocks() -> None:
    contract = [c.id for c in select_clauses(["contract"])]
    assert FIRST_LISTING in contract
    assert contract.index(FIRST_LISTING) < len(contract) - 1  # clauses run after it


@pytest.mark.parametrize("block", [_sleep, _spin], ids=["sleep", "spin"])
def test_a_blocked_loop_fails_that_clause_and_the_run_goes_on(block: Callable[[], None], gate: Gate) -> None:
    (backend,) = validate(blocking_target(block), clauses=["contract", "ordering"]).backends
    assert not gate.ended.is_set(), "the run waited for the blocked clause's call to return"

    assert {r.clause_id for r in backend.failures} == {FIRST_LISTING}
    message = backend.result(FIRST_LISTING).message
    assert BLOCKED in message
    assert "time.sleep" in message
    # Every later clause ran, on a fresh loop with fresh handles, and passed.
    contract = [c.id for c in select_clauses(["contract", "ordering"])]
    assert [r.clause_id for r in backend.results] == contract
    assert all(r.outcome.value == "passed" for r in backend.results if r.clause_id != FIRST_LISTING)


def test_the_cli_reports_the_blocked_clause_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    status = run([blocking_target()], clauses=select_clauses(["contract"]))
    out = " ".join(capsys.readouterr().out.split())
    assert status == 1
    assert f"failed {FIRST_LISTING}: {BLOCKED}" in out
    assert "contract.errors_are_checkpoint_exceptions" in out  # the last clause still ran


def test_threads_left_in_an_abandoned_loop_do_not_keep_the_cli_process_alive(tmp_path: Path) -> None:
    # The mutant starts a thread that is explicitly not a daemon (threads started on the clause
    # loop inherit its daemon flag otherwise) and then blocks forever: interpreter shutdown would
    # wait for that thread without the hard exit (checked by hand: sys.exit hangs there).
    script = tmp_path / "blocked_run.py"
    script.write_text(
        textwrap.dedent(
            """
            import threading, time
            from conformance import StorageTarget
            from conformance.cli import exit_process, run
            from storages.memory import InMemoryCheckpointStorage

            class HangsOnce(InMemoryCheckpointStorage):
                blocked = threading.Event()

                async def list_checkpoint_ids(self, **options):
                    if not HangsOnce.blocked.is_set():
                        HangsOnce.blocked.set()
                        never_ends = threading.Thread(target=threading.Event().wait, daemon=False)
                        never_ends.start()
                        time.sleep(3600)
                    return await super().list_checkpoint_ids(**options)

            target = StorageTarget("hangs", HangsOnce().new_handle, timeout_factor=0.05)
            status = run([target], quiet=True)
            print("run finished with", status, flush=True)
            exit_process(status)
            """
        ),
        encoding="utf-8",
    )
    completed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert "run finished with 1" in completed.stdout, completed.stdout + completed.stderr
    assert completed.returncode == 1, completed.stdout + completed.stderr


class BlocksEveryRead(InMemoryCheckpointStorage):
    """get_latest blocks the loop every time (until the test ends), so the connectivity check
    itself never answers."""

    async def get_latest(self, **options: Any) -> Any:
        _sleep()  # the defect: a blocking wait in an async method
        return await super().get_latest(**options)


def test_a_connectivity_check_that_never_answers_is_an_unreachable_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gate: Gate
) -> None:
    import json

    json_path = tmp_path / "report.json"
    target = StorageTarget("never-answers", BlocksEveryRead().new_handle, timeout_factor=FACTOR)
    assert run([target], json_path=json_path) == 2
    assert not gate.ended.is_set(), "the run waited for the blocked connectivity check to return"
    assert "could not reach the storage: no answer within 1.5 s" in capsys.readouterr().err
    [backend] = json.loads(json_path.read_text(encoding="utf-8"))["backends"]
    assert backend["unreachable"] is True
    assert backend["results"] == []
