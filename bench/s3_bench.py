"""S3 section: our S3 storage next to raw boto3 on the same moto server, with requests counted.

``python -m bench.s3_bench [--quick] [--markdown PATH] [--json PATH]`` (or ``python -m bench.run
--s3 ...``). A moto ``ThreadedMotoServer`` is started on a free loopback port in this process,
so every request is real HTTP; the server shares the machine (and this process's GIL) with the
client, so absolute times mean little and the ratio to raw boto3 on the same endpoint is what
counts. The floor stores the exact bytes our codec produces: ``put_object`` for save,
``get_object`` by key for load, and ``get_object`` of the newest key (known to the caller) for
get_latest, the two taking turns call by call. Requests per operation are counted with a botocore
hook; they, not the times, are the claim: latest costs the same requests at 10 and at 10,000
checkpoints. Then one call of every operation, counted and priced (bench/s3_costs.py), and a
LangGraph pair: StorageSaver over S3 vs over memory (bench/s3_langgraph.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import TIMES
from bench.s3_costs import count_operations
from bench.s3_costs import markdown as costs_markdown
from bench.workload import WORKFLOW_NAME, numbered, template
from conformance.s3_moto import RequestCounter, make_client, start_server
from storages.codec import CheckpointCodec
from storages.contract import WorkflowCheckpoint
from storages.s3 import S3CheckpointStorage

BUCKET = "ckpt-bench"
RAW_BUCKET = "ckpt-bench-raw"
"""The floor's objects live apart: moto lists a prefix by scanning every key of the bucket."""
FULL = (10, 10_000, 200)
QUICK = (10, 1_000, 60)
"""(small store, large store, timed calls per operation and size)."""
LANGGRAPH_FULL = (10, 21)
LANGGRAPH_QUICK = (5, 7)
"""(supersteps per run, runs) of the LangGraph pair."""
POPULATE_BATCH = 50
OURS = "ours S3CheckpointStorage"
RAW = "raw boto3 (floor)"


async def _interleaved(operations: list[Callable[[int], Awaitable[Any]]], calls: int) -> list[list[float]]:
    """Samples of each operation, the operations taking turns call by call."""
    samples: list[list[float]] = [[] for _ in operations]
    for index in range(calls):
        for operation, own in zip(operations, samples, strict=True):
            started = time.perf_counter()
            await operation(index)
            own.append(time.perf_counter() - started)
    return samples


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


async def _measure(
    endpoint: str, small: int, large: int, calls: int, langgraph: tuple[int, int] | None = None
) -> dict[str, Any]:
    """Every section in one run; ``langgraph`` = (supersteps, runs) of the LangGraph pair."""
    base = template(WorkflowCheckpoint)
    codec = CheckpointCodec()
    client = make_client(endpoint)
    client.create_bucket(Bucket=BUCKET)
    client.create_bucket(Bucket=RAW_BUCKET)
    counter = RequestCounter()
    counter.attach(client)
    storage = S3CheckpointStorage(BUCKET, "ours", client=client)
    results: dict[str, Any] = {"sizes": [small, large], "calls": calls, "rows": {}}
    raw_keys: list[str] = []
    stored = 0
    async with storage:
        for size in (small, large):
            # Populate both to ``size`` checkpoints (ours through the storage, raw by put_object).
            items = [numbered(base, index, "main") for index in range(stored, size)]
            for start in range(0, len(items), POPULATE_BATCH):
                batch = items[start : start + POPULATE_BATCH]
                await asyncio.gather(*(storage.save(item) for item in batch))
                await asyncio.gather(
                    *(
                        asyncio.to_thread(
                            client.put_object,
                            Bucket=RAW_BUCKET,
                            Key=f"raw/{item.checkpoint_id}",
                            Body=codec.encode_checkpoint(item),
                        )
                        for item in batch
                    )
                )
                raw_keys += [f"raw/{item.checkpoint_id}" for item in batch]
            stored = size
            fresh = [numbered(base, index, f"timed{size}") for index in range(calls)]
            encoded = [codec.encode_checkpoint(item) for item in fresh]
            probe_ids = [
                numbered(base, (index * 7919) % size, "main").checkpoint_id for index in range(calls)
            ]

            async def ours_save(index: int, fresh: list[Any] = fresh) -> None:
                await storage.save(fresh[index])

            async def ours_load(index: int, probe_ids: list[str] = probe_ids) -> None:
                await storage.load(probe_ids[index])

            async def ours_latest(_: int) -> None:
                await storage.get_latest(workflow_name=WORKFLOW_NAME)

            async def raw_save(
                index: int,
                fresh: list[Any] = fresh,
                encoded: list[bytes] = encoded,
                raw_keys: list[str] = raw_keys,
            ) -> None:
                key = f"raw/{fresh[index].checkpoint_id}"
                await asyncio.to_thread(client.put_object, Bucket=RAW_BUCKET, Key=key, Body=encoded[index])
                raw_keys.append(key)

            async def raw_load(index: int, probe_ids: list[str] = probe_ids) -> None:
                response = await asyncio.to_thread(
                    client.get_object, Bucket=RAW_BUCKET, Key=f"raw/{probe_ids[index]}"
                )
                response["Body"].read()

            async def raw_latest(_: int, raw_keys: list[str] = raw_keys) -> None:
                response = await asyncio.to_thread(client.get_object, Bucket=RAW_BUCKET, Key=raw_keys[-1])
                response["Body"].read()

            for operation_name, ours, raw in (
                ("save", ours_save, raw_save),
                ("load", ours_load, raw_load),
                ("get_latest", ours_latest, raw_latest),
            ):
                requests: dict[str, dict[str, int]] = {}
                for row, operation in ((OURS, ours), (RAW, raw)):
                    counter.reset()
                    await operation(0)  # warm-up, and the request count of one call
                    requests[row] = counter.snapshot()
                # Interleaved, call by call: load on the machine hits both subjects alike.
                samples = await _interleaved(
                    [ours, raw] if operation_name != "save" else [_shifted(ours), _shifted(raw)], calls - 1
                )
                for row, row_samples in zip((OURS, RAW), samples, strict=True):
                    results["rows"].setdefault(row, {})[f"{operation_name}@{size}"] = {
                        "median_us": _median_us(row_samples),
                        "requests": requests[row],
                        "samples_s": row_samples,
                    }
        latest = await storage.get_latest(workflow_name=WORKFLOW_NAME)
        expected = numbered(base, calls - 1, f"timed{large}").checkpoint_id
        if latest is None or latest.checkpoint_id != expected:
            raise AssertionError(
                f"latest is {latest!r}, expected {expected!r}: the store did not hold the saves"
            )
        costs_storage = S3CheckpointStorage(BUCKET, "costs", client=client)
        async with costs_storage:
            results["costs"] = await count_operations(costs_storage, counter, base, WorkflowCheckpoint)
        if langgraph is not None:
            results["langgraph"] = await _langgraph_pair(client, counter, *langgraph)
    client.close()
    return results


async def _langgraph_pair(client: Any, counter: Any, supersteps: int, runs: int) -> dict[str, Any] | str:
    try:
        import langgraph  # noqa: F401
    except ImportError:
        return "langgraph is not installed (pip install 'checkpoint-storages[langgraph]')"
    from bench.s3_langgraph import measure

    return await measure(client, counter, BUCKET, supersteps=supersteps, runs=runs)


def _shifted(operation: Callable[[int], Awaitable[Any]]) -> Callable[[int], Awaitable[Any]]:
    """Saves after the warm-up one: each call saves a checkpoint not saved before."""

    async def call(index: int) -> None:
        await operation(index + 1)

    return call


def _requests(requests: dict[str, int]) -> str:
    return ", ".join(f"{count} {name}" for name, count in sorted(requests.items())) or "0"


def markdown(results: dict[str, Any], command: str) -> str:
    small, large = results["sizes"]
    operations = [f"{op}@{size}" for op in ("save", "load", "get_latest") for size in (small, large)]
    lines = [
        "# S3 benchmark",
        "",
        "Produced by this exact command, from the repository root:",
        "",
        "```sh",
        command,
        "```",
        "",
        f"- Date: {results['date']}; Python {sys.version.split()[0]}; {results['seconds']:.0f} s in all.",
        "- Endpoint: moto's `ThreadedMotoServer` on 127.0.0.1 in the benchmark's own process (real HTTP, "
        "but the server competes with the client for the CPU and the GIL): absolute times are moto's, "
        "not S3's, and moto lists a prefix by scanning every key in the bucket, so its LIST (and so our "
        "save and get_latest) slows as the bucket grows where S3's does not. On S3 each request is a "
        "network round trip of tens of milliseconds: the request counts below are the figures to plan with.",
        f"- Median of {results['calls'] - 1} sequential calls per cell (ours and the floor take turns, "
        "call by call), after one warm-up call whose "
        "requests are the ones counted. The floor stores the exact bytes our codec produces: "
        "`put_object`, `get_object` by key, and `get_object` of the newest key (known to the caller, which "
        "a real application would have to remember somewhere).",
        "",
        "## µs per operation (median)",
        "",
        "| subject | " + " | ".join(f"{op.replace('@', ' @')}" for op in operations) + " |",
        "|---|" + "---:|" * len(operations),
    ]
    for row, cells in results["rows"].items():
        lines.append(f"| {row} | " + " | ".join(f"{cells[op]['median_us']:,.0f}" for op in operations) + " |")
    ours, raw = results["rows"][OURS], results["rows"][RAW]
    lines.append(
        "| ours ÷ raw | "
        + " | ".join(f"{ours[op]['median_us'] / raw[op]['median_us']:.2f}{TIMES}" for op in operations)
        + " |"
    )
    lines += [
        "",
        "## Requests per operation",
        "",
        "| subject | " + " | ".join(f"{op.replace('@', ' @')}" for op in operations) + " |",
        "|---|" + "---|" * len(operations),
    ]
    for row, cells in results["rows"].items():
        lines.append(f"| {row} | " + " | ".join(_requests(cells[op]["requests"]) for op in operations) + " |")
    flat = ours[f"get_latest@{large}"]["median_us"] / ours[f"get_latest@{small}"]["median_us"]
    lines += [
        "",
        f"get_latest at {large:,} stored ÷ at {small:,}: {flat:.2f}{TIMES} (requests: "
        f"{_requests(ours[f'get_latest@{small}']['requests'])} at both sizes).",
        "",
    ]
    if "costs" in results:
        lines += costs_markdown(results["costs"])
    if "langgraph" in results:
        from bench.s3_langgraph import markdown as langgraph_markdown

        lines += langgraph_markdown(results["langgraph"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.s3_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 instead of 10,000 stored; fewer calls")
    parser.add_argument(
        "--markdown", type=Path, metavar="PATH", help="write the report (docs/s3-benchmarks.md)"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every sample as JSON")
    parser.add_argument("--no-langgraph", action="store_true", help="leave out the LangGraph pair")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    command = "python -m bench.s3_bench " + " ".join(sys.argv[1:] if argv is None else argv)
    small, large, calls = QUICK if args.quick else FULL
    endpoint, stop = start_server()
    started = time.perf_counter()
    try:
        pair = LANGGRAPH_QUICK if args.quick else LANGGRAPH_FULL
        results = asyncio.run(_measure(endpoint, small, large, calls, None if args.no_langgraph else pair))
    finally:
        stop()
    results["seconds"] = time.perf_counter() - started
    results["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = markdown(results, command.strip())
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
