"""The benchmark's own helpers, on a short chain: a broken bench must fail here, not on the next
full run."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.ancestry_bench import _operations, load_chain
from storages import WorkflowCheckpoint
from storages.memory import InMemoryCheckpointStorage


@pytest.mark.memory
async def test_every_ancestry_operation_walks_the_whole_chain() -> None:
    storage = InMemoryCheckpointStorage()
    previous = None
    for index in range(5):
        checkpoint = WorkflowCheckpoint("wf", "sig", previous_checkpoint_id=previous, iteration_count=index)
        previous = await storage.save(checkpoint)
    assert previous is not None
    assert await load_chain(storage, previous) == 5
    operations = _operations(storage, previous)
    assert set(operations) == {"walk_ids", "walk", "load_chain"}
    for name, operation in operations.items():
        assert await operation() == 5, name


@pytest.mark.memory
async def test_the_fencing_bench_times_plain_and_fenced_saves_of_unbroken_chains() -> None:
    from bench.fencing_bench import cases, table
    from bench.measure import Budget, time_async

    storage = InMemoryCheckpointStorage()
    measured = await time_async(cases(storage, "smoke"), Budget(repeats=2, batch_seconds=0.002))
    assert set(measured) == {"plain", "fenced"}
    for name in ("plain", "fenced"):
        ids = await storage.list_checkpoint_ids(workflow_name=f"smoke-{name}")
        # Every fenced save expected its predecessor: a refusal would have raised above.
        assert len(ids) >= 3
        chain = await storage.list_checkpoints(workflow_name=f"smoke-{name}")
        assert [c.previous_checkpoint_id for c in chain[1:]] == ids[:-1]
    assert "| memory |" in table({"memory": measured})


@pytest.mark.sqlite
async def test_langgraph_bench_runs_each_pair_on_the_same_workload(tmp_path: Path) -> None:
    from bench.langgraph_bench import PAIRS, measure_pair

    for backend in [name for name in PAIRS if name != "redis"]:  # redis: test_bench_redis_smoke.py
        result = await measure_pair(backend, supersteps=3, runs=2, directory=tmp_path)
        assert result.runs == 2
        assert result.ours_ms > 0
        assert result.theirs_ms > 0


@pytest.mark.sqlite
async def test_the_integrity_section_times_both_handles_on_both_storages() -> None:
    from bench.integrity_bench import render, run, seal_and_check_us
    from bench.measure import Budget

    tiny = Budget(repeats=1, batch_seconds=0.001, max_batch=5)
    rows = await run(tiny)
    assert [(row.backend, row.operation) for row in rows] == [
        ("memory", "save"),
        ("memory", "load"),
        ("sqlite", "save"),
        ("sqlite", "load"),
    ]
    assert all(row.plain_us > 0 and row.keyed_us > 0 for row in rows)
    assert render(rows).count("\n") == len(rows) + 1
    alone = seal_and_check_us(tiny)
    assert alone["body_bytes"] > 2_000
    assert alone["seal"] > 0
    assert alone["check"] > 0


@pytest.mark.memory
@pytest.mark.sqlite
def test_the_integrity_callgrind_programs_run_and_the_table_renders() -> None:
    import subprocess
    import sys

    from bench.integrity_callgrind import REPO_ROOT, SUBJECTS, script_for, table

    for subject in SUBJECTS:  # without valgrind: the programs it would measure must run
        subprocess.run([sys.executable, "-c", script_for(subject, 2)], cwd=REPO_ROOT, check=True)
    # Past one pass over the preloaded records, first loads go on through a new handle.
    subprocess.run([sys.executable, "-c", script_for("first_load/keyed", 201)], cwd=REPO_ROOT, check=True)
    rendered = table({"save/plain": 100.0, "save/keyed": 110.0, "load/plain": 200.0, "load/keyed": 220.0})
    assert "| memory | save | 0 k | 0 k | +10.0% |" in rendered
    assert "first load" not in rendered
    assert "sqlite" not in rendered
    counts = {f"first_load/{variant}": 1000.0 * n for variant, n in (("plain", 3), ("keyed", 4))}
    assert "| memory | first load | 3 k | 4 k | +33.3% |" in table(
        {**counts, "save/plain": 1.0, "save/keyed": 1.0}
    )
    sqlite = {"sqlite_load/plain": 2000.0, "sqlite_load/keyed": 2100.0}
    assert "| sqlite | load | 2 k | 2 k | +5.0% |" in table(sqlite)


@pytest.mark.sqlite
def test_the_sqlite_callgrind_programs_run_and_exit() -> None:
    import subprocess
    import sys

    from bench.callgrind_codec import REPO_ROOT
    from bench.sqlite_callgrind import SUBJECTS, script_for

    for subject in SUBJECTS:  # without valgrind; a program left hanging (a thread) times out
        subprocess.run([sys.executable, "-c", script_for(subject, 2)], cwd=REPO_ROOT, check=True, timeout=120)


def _run_server_callgrind_programs(backend: str, endpoint: str) -> None:
    import subprocess
    import sys

    from bench.callgrind_codec import REPO_ROOT
    from bench.postgres_bench import DEFAULT_URL
    from bench.server_callgrind import OPERATIONS, script_for

    for operation in OPERATIONS:  # without valgrind; each program checks what it stored
        script = script_for(backend, operation, 2, tree="", url=DEFAULT_URL, endpoint=endpoint)
        subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, check=True, timeout=120)


@pytest.mark.postgres
def test_the_postgres_callgrind_programs_run_and_store_what_they_save() -> None:
    _run_server_callgrind_programs("postgres", endpoint="")


@pytest.mark.s3
def test_the_s3_callgrind_programs_run_against_moto_in_a_process_of_its_own() -> None:
    from bench.server_callgrind import moto_server

    with moto_server() as endpoint:
        _run_server_callgrind_programs("s3", endpoint)
