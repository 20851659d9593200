"""S3 request prices and the requests each storage operation sends, counted on a live endpoint.

:func:`count_operations` runs every operation of the contract once against a small workflow
(10 checkpoints, one with a nested record) and counts the HTTP requests a botocore hook sees;
:func:`cost_per_million` prices a request mix. The prices are public list prices, so the cost
column is the figure to plan with; moto's times are not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from bench.measure import TIMES

PRICE_LIST = (
    "Amazon S3 Standard request prices, US East (N. Virginia), aws.amazon.com/s3/pricing as quoted "
    "for this project on 2026-12-01: PUT, COPY, POST and LIST $0.005 per 1,000; GET, HEAD and all "
    "other requests $0.0004 per 1,000"
)
PRICE_PER_REQUEST: dict[str, float] = {
    "PutObject": 0.005 / 1000,
    "ListObjectsV2": 0.005 / 1000,
    "CopyObject": 0.005 / 1000,
    # DeleteObjects is a POST: priced in the PUT tier here, the conservative reading (AWS bills
    # single DELETEs as free).
    "DeleteObjects": 0.005 / 1000,
    "GetObject": 0.0004 / 1000,
    "HeadObject": 0.0004 / 1000,
}
"""US dollars per request, by botocore operation name."""
RAW_FLOOR = {"PutObject": 1}
"""What one raw save costs: one put_object of the encoded bytes."""
HISTORY = 10
"""Checkpoints in the workflow the operations run against."""


def cost_per_million(requests: dict[str, int]) -> float:
    """US dollars for a million calls sending ``requests`` each; an operation missing from the
    price list raises (a new request kind must be priced, not counted as free)."""
    return sum(PRICE_PER_REQUEST[name] * count for name, count in requests.items()) * 1_000_000


def total(requests: dict[str, int]) -> int:
    return sum(requests.values())


async def count_operations(
    storage: Any, counter: Any, base: Any, checkpoint_class: type[Any]
) -> dict[str, Any]:
    """Requests of one call of each operation, by operation (and the ratio of the save's request
    count and cost to the raw floor's). ``storage`` is an open S3 storage on an empty prefix whose
    client ``counter`` (a :class:`conformance.s3_moto.RequestCounter`) is attached to."""
    workflow = "costs"
    chain: list[Any] = []
    for index in range(HISTORY):
        previous = chain[-1].checkpoint_id if chain else None
        chain.append(
            dataclasses.replace(
                base, workflow_name=workflow, checkpoint_id=f"cost-{index}", previous_checkpoint_id=previous
            )
        )
    for item in chain[:-1]:
        await storage.save(item)
    child = checkpoint_class(
        workflow_name="costs-child", graph_signature_hash="child", checkpoint_id="cost-child"
    )
    parent = dataclasses.replace(
        chain[-1],
        checkpoint_id="cost-parent",
        state={"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}},
    )
    newest = chain[-1]
    operations: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("save", lambda: storage.save(newest)),
        ("load", lambda: storage.load(newest.checkpoint_id)),
        ("get_latest", lambda: storage.get_latest(workflow_name=workflow)),
        (f"list_checkpoint_ids ({HISTORY})", lambda: storage.list_checkpoint_ids(workflow_name=workflow)),
        (f"list_checkpoints ({HISTORY})", lambda: storage.list_checkpoints(workflow_name=workflow)),
        (f"walk_ancestry_ids ({HISTORY} deep)", lambda: storage.walk_ancestry_ids(newest.checkpoint_id)),
        ("save with 1 nested", lambda: storage.save(parent)),
        ("load with 1 nested", lambda: storage.load(parent.checkpoint_id)),
        ("delete (the newest)", lambda: storage.delete(parent.checkpoint_id)),
        ("delete (an older one)", lambda: storage.delete(chain[3].checkpoint_id)),
        ("prune (keep_last=5)", lambda: storage.prune(workflow_name=workflow, keep_last=5)),
        ("list_workflows", lambda: storage.list_workflows()),
        ("delete_workflow", lambda: storage.delete_workflow(workflow_name=workflow)),
    ]
    rows: dict[str, dict[str, Any]] = {}
    for name, operation in operations:
        counter.reset()
        await operation()
        requests = counter.snapshot()
        rows[name] = {
            "requests": requests,
            "total": total(requests),
            "usd_per_million": cost_per_million(requests),
        }
    save = rows["save"]
    return {
        "price_list": PRICE_LIST,
        "rows": rows,
        "raw_floor": {"requests": RAW_FLOOR, "usd_per_million": cost_per_million(RAW_FLOOR)},
        "save_requests_vs_raw": save["total"] / total(RAW_FLOOR),
        "save_cost_vs_raw": save["usd_per_million"] / cost_per_million(RAW_FLOOR),
    }


def markdown(costs: dict[str, Any]) -> list[str]:
    def mix(requests: dict[str, int]) -> str:
        return ", ".join(f"{count} {name}" for name, count in sorted(requests.items())) or "0"

    raw = costs["raw_floor"]
    lines = [
        "## Requests and cost per operation",
        "",
        f"One call of each, on a workflow of {HISTORY} checkpoints; prices: {costs['price_list']}.",
        "",
        "| operation | requests | total | USD per million calls |",
        "|---|---|---:|---:|",
    ]
    for name, row in costs["rows"].items():
        lines.append(f"| {name} | {mix(row['requests'])} | {row['total']} | {row['usd_per_million']:,.2f} |")
    lines += [
        f"| raw put_object (floor) | {mix(raw['requests'])} | {total(raw['requests'])} "
        f"| {raw['usd_per_million']:,.2f} |",
        "",
        f"save ÷ raw floor: {costs['save_requests_vs_raw']:.2f}{TIMES} the requests, "
        f"{costs['save_cost_vs_raw']:.2f}{TIMES} the cost.",
        "",
    ]
    return lines


__all__ = ["PRICE_LIST", "PRICE_PER_REQUEST", "RAW_FLOOR", "cost_per_million", "count_operations", "markdown"]
