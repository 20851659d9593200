"""Smoke tests of the Redis bench sections: each runs end to end on the real server, tiny."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis_servers

from bench.measure import TIMES, Budget

pytestmark = pytest.mark.redis

TINY = Budget(repeats=1, batch_seconds=0.001, max_batch=3)


async def test_the_redis_section_measures_every_target_and_renders_it() -> None:
    from bench.redis_bench import markdown, run_redis

    results = await run_redis(redis_servers.redis_url(), TINY, large=30, peer_stored=3)
    assert results["sizes"] == {"small": 10, "medium": 30, "large": 30}
    for key in (
        "load@10 ours/floor",
        "list_ids@30 ours/raw",
        "save@30 ours/floor",
        "aput ours/plainredis",
        "alist ours/plainredis",
    ):
        assert results["ratios"][key] > 0, key
    text = markdown(results)
    for line in (
        f"Target load ≤ 1.2{TIMES}",
        f"Target list_checkpoint_ids ≤ 1.5{TIMES}",
        f"Target save ≤ 1.2{TIMES}",
    ):
        assert line in text
    assert "langgraph-checkpoint-plainredis" in text
    assert "unknown command 'FT.INFO'" in text


async def test_the_peer_section_gives_both_savers_the_same_calls() -> None:
    from bench.redis_peer_bench import OPERATIONS, run_peer, table

    results = await run_peer(redis_servers.redis_url(), TINY, stored=3)
    for operation in OPERATIONS:
        assert results["operations"][f"ours/{operation}"]["median_us"] > 0
        assert results["operations"][f"plainredis/{operation}"]["median_us"] > 0
    assert [row[0] for row in table(results).rows] == list(OPERATIONS)


async def test_the_langgraph_bench_runs_the_redis_pair(tmp_path: Path) -> None:
    from bench.langgraph_bench import measure_pair

    result = await measure_pair("redis", supersteps=3, runs=2, directory=tmp_path)
    assert (result.runs, result.ours_ms > 0, result.theirs_ms > 0) == (2, True, True)


def test_the_callgrind_child_runs_every_operation_it_counts() -> None:
    from bench.redis_callgrind import PAIRS, _child

    for pair in PAIRS:
        for op in pair:
            _child(redis_servers.redis_url(), op, 2, stored=5)


async def test_the_server_callgrind_pairs_run_every_operation() -> None:
    from bench.redis_server_callgrind import measure

    calls: list[int] = []

    async def count(operation: Any, runs: int) -> int:
        for index in range(runs):
            await operation(index)
        calls.append(runs)
        return runs

    rows = await measure(redis_servers.redis_url(), redis_servers.fresh_prefix("cg"), count, 5)
    assert [label.split(" @")[0] for label, _ in rows] == [
        "list_checkpoint_ids",
        "ZRANGE 0 -1",
        "load (home remembered: MULTI/EXEC)",
        "load (home not remembered: script)",
        "GET",
        "get_latest of an empty workflow (script)",
        "ZREVRANGE 0 0 of an empty index",
        "save (save_one)",
        "save (the general save script)",
        "SET+ZADD (pipelined)",
    ]
    assert len(calls) == 10
