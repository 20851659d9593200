"""Smoke test of the S3 bench (bench/s3_bench.py, bench/s3_costs.py) at tiny sizes: the timed
rows, the interleaved ratio, and the requests-and-cost section, on the tests' moto server."""

from __future__ import annotations

import pytest
from s3_support import server_endpoint

from bench import s3_bench, s3_costs

pytestmark = pytest.mark.s3


async def test_the_s3_bench_reports_requests_ratios_and_costs() -> None:
    results = await s3_bench._measure(server_endpoint(), 3, 6, 3, langgraph=(2, 1))
    results.update(seconds=0.0, date="now")
    ours, raw = results["rows"][s3_bench.OURS], results["rows"][s3_bench.RAW]
    for operation in ("save@3", "save@6", "load@3", "get_latest@6"):
        assert len(ours[operation]["samples_s"]) == len(raw[operation]["samples_s"]) == 2
    # The counted save is the first of its series, a root: no group key (its order key says it is one).
    assert ours["save@6"]["requests"] == {"GetObject": 1, "ListObjectsV2": 1, "PutObject": 2}
    # The head continues a checkpoint: its successors and its group are listed with its record.
    assert ours["get_latest@6"]["requests"] == {"GetObject": 1, "ListObjectsV2": 3}
    assert raw["save@6"]["requests"] == s3_costs.RAW_FLOOR
    costs = results["costs"]
    rows = costs["rows"]
    # The costed save continues a checkpoint: its record, its group key (the head's rivals are
    # found through it) and its order key.
    assert rows["save"]["requests"] == {"GetObject": 1, "ListObjectsV2": 1, "PutObject": 3}
    assert rows["save"]["total"] == 5
    # The newest order key, then its record, its successors (latest through the lineage) and its
    # group (its rivals).
    assert rows["get_latest"]["requests"] == {"GetObject": 1, "ListObjectsV2": 3}
    assert rows["load"]["requests"] == {"GetObject": 1, "HeadObject": 1}
    assert costs["save_requests_vs_raw"] == 5.0
    # 1 GET at $0.0004/1,000 + 4 PUT/LIST at $0.005/1,000, per million saves.
    assert rows["save"]["usd_per_million"] == pytest.approx(20.40)
    assert costs["raw_floor"]["usd_per_million"] == pytest.approx(5.00)
    assert all(row["total"] > 0 for row in rows.values())
    text = s3_bench.markdown(results, "python -m bench.s3_bench --quick")
    assert "## Requests and cost per operation" in text
    assert "| save | 1 GetObject, 1 ListObjectsV2, 3 PutObject | 5 | 20.40 |" in text
    assert "ours ÷ raw" in text
    pair = results["langgraph"]
    assert pair["runs"] == 1
    assert min(pair["s3_ms"], pair["memory_ms"], pair["usd_per_million_runs"]) > 0
    assert pair["requests"].get("PutObject", 0) > 0
    assert "## LangGraph: StorageSaver over S3 vs over memory" in text


def test_an_unpriced_request_kind_is_refused_not_counted_free() -> None:
    with pytest.raises(KeyError):
        s3_costs.cost_per_million({"SelectObjectContent": 1})
    assert s3_costs.cost_per_million({"PutObject": 2, "GetObject": 1}) == pytest.approx(10.40)
