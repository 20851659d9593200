"""The LangGraph bench's own parts on a short workload: a broken bench must fail here, not on the
next full run (bench/langgraph_bench.py, bench/langgraph_workload.py, bench/langgraph_callgrind.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from bench.langgraph_bench import (
    GRAPH_RUN,
    OPERATION_LABELS,
    SECTION_END,
    SECTION_START,
    environment,
    markdown,
    measure_pair,
    replace_section,
    table,
)
from bench.langgraph_callgrind import PHASES, STORAGE_PHASES, _inner
from bench.langgraph_workload import OPERATIONS, record_calls, replay
from storages.memory import InMemoryCheckpointStorage
from storages.runners.langgraph import StorageSaver

pytestmark = [pytest.mark.langgraph, pytest.mark.memory]


async def test_the_recorded_run_holds_each_kind_of_call_langgraph_makes() -> None:
    calls = await record_calls(2)
    kinds = {call.operation for call in calls}
    assert kinds == {"aput", "aput_writes", "aget_tuple"}
    # Only what a saver reads is kept: no LangGraph internals travel with a recorded config.
    assert all(not key.startswith("__") for call in calls for key in call.config["configurable"])


async def test_a_replay_times_every_operation_and_reads_back_what_it_put() -> None:
    calls = await record_calls(2)
    replayed = await replay(StorageSaver(InMemoryCheckpointStorage()), calls)
    assert set(replayed.seconds) == set(OPERATIONS)
    assert all(seconds > 0 for seconds in replayed.seconds.values())
    assert replayed.calls["aput"] == sum(call.operation == "aput" for call in calls)


class _ForgetfulSaver(InMemorySaver):
    """Answers put like a saver but stores nothing: the bench must refuse to time it."""

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}


async def test_a_replay_refuses_a_saver_that_did_not_store_the_run() -> None:
    calls = await record_calls(2)
    with pytest.raises(RuntimeError, match="latest checkpoint is not the last one put"):
        await replay(_ForgetfulSaver(), calls)


async def test_a_pair_reports_every_operation_with_its_target(tmp_path: Path) -> None:
    result = await measure_pair("memory", supersteps=2, runs=2, directory=tmp_path)
    assert [row.operation for row in result.operations] == [GRAPH_RUN, *OPERATIONS]
    assert all(row.ours_seconds > 0 and row.theirs_seconds > 0 for row in result.operations)
    assert all(len(result.samples[row.operation]["ours"]) == 2 for row in result.operations)
    assert result.ratio == result.operation(GRAPH_RUN).ratio
    assert result.round_trips is None  # memory savers have no worker thread
    rendered = table([result])
    for label in OPERATION_LABELS.values():
        assert label in rendered
    assert rendered.count("<= 1.00") == len(result.operations)
    env = {**environment(), "load_average": [1.0, 2.0, 3.0]}
    section = markdown([result], "python -m bench.langgraph_bench --quick", env)
    assert section.startswith(SECTION_START)
    assert section.rstrip().endswith(SECTION_END)
    assert "`python -m bench.langgraph_bench --quick`" in section
    assert "1.00 / 2.00 / 3.00" in section
    assert rendered in section


def test_the_markdown_section_replaces_only_its_own_part() -> None:
    old = f"# Doc\n\nbefore\n\n{SECTION_START}\nold figures\n{SECTION_END}\nafter\n"
    section = f"{SECTION_START}\nnew figures\n{SECTION_END}\n"
    replaced = replace_section(old, section)
    assert "old figures" not in replaced
    assert replaced.startswith("# Doc\n\nbefore\n\n")
    assert replaced.endswith("new figures\n" + SECTION_END + "\n\nafter\n")
    appended = replace_section("# Doc\n", section)
    assert appended == "# Doc\n\n" + section


@pytest.mark.parametrize("side", ["ours", "native"])
def test_the_callgrind_phases_run_outside_valgrind_and_count_their_calls(side: str, tmp_path: Path) -> None:
    counts = _inner("memory", side, 1, 2, tmp_path)
    assert list(counts) == [*PHASES, *(STORAGE_PHASES if side == "ours" else ())]
    assert all(count > 0 for count in counts.values())
    if side == "ours":
        # The direct storage calls are the ones StorageSaver's puts make: one per put, per batch.
        assert counts["storage.save"] == counts["aput"]
        assert counts["storage.put_writes"] == counts["aput_writes"]


@pytest.mark.sqlite
async def test_the_sqlite_pair_counts_worker_round_trips_for_both_savers(tmp_path: Path) -> None:
    import aiosqlite.core

    original = aiosqlite.core.Connection._execute
    result = await measure_pair("sqlite", supersteps=2, runs=1, directory=tmp_path)
    assert aiosqlite.core.Connection._execute is original
    assert result.round_trips is not None
    for side in ("ours", "theirs"):
        # Every write reaches the database: at least one statement per put and per write batch.
        assert result.round_trips[side]["aput"] >= 1
        assert result.round_trips[side]["aput_writes"] >= 1
    assert " / " in table([result]).splitlines()[3]
