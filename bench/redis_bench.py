"""Redis: our storage against a raw floor on the same server, at 10, 10,000 and 100,000 checkpoints.

Run alone with ``python -m bench.redis_bench [--url redis://...] [--quick]`` (prints the tables),
or as part of ``python -m bench.run``, which adds the section to ``docs/benchmarks.md``.

* Ours: ``RedisCheckpointStorage`` (one Lua script per save, per get_latest, per load). A save is
  also timed in its two halves: ``encode`` (checks, codec, digest: no I/O) and ``write`` (the
  script round trip for bytes already encoded, digest included), the half that does what the raw
  floor does.
* Raw floor: the exact bytes our codec produces, written with one pipelined ``SET`` + ``ZADD``
  round trip per save (the id in a sorted set by a client-side counter), read with ``GET``; its
  latest is ``ZREVRANGE 0 0`` then ``GET`` (two round trips: without a script there is no one);
  its listing ``ZRANGE 0 -1``. The floors with the codec (``save_encoded``, ``load_decoded``) add
  our encode before the write and our decode after the GET: the issue's load and save targets
  are ratios to them.
* Peer: each LangGraph call through StorageSaver next to langgraph-checkpoint-plainredis
  (bench/redis_peer_bench.py).
* Ancestry: a chain of 1,000 checkpoints walked by ``walk_ancestry_ids`` and ``walk_ancestry``
  (one script each), against the ``load``-by-``load`` walk a caller without a walk must do.

Every store lives under a fresh key prefix on the server and is deleted (SCAN + DEL) afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from storages.backend import CheckpointRecord, InsertResult, body_digest
from storages.codec import CheckpointCodec
from storages.contract import WorkflowCheckpoint
from storages.redis import RedisCheckpointStorage, delete_prefix

from .ancestry_bench import load_chain
from .measure import TIMES, AsyncCase, Budget, Measurement, ratio, time_async
from .redis_peer_bench import QUICK_STORED, STORED, run_peer
from .redis_peer_bench import table as peer_table
from .report import TableData, fmt_ratio, fmt_us
from .workload import WORKFLOW_NAME, numbered, template

DEFAULT_URL = "redis://127.0.0.1:6379/0"
SMALL, MEDIUM, LARGE = 10, 10_000, 100_000
QUICK_LARGE = 10_000
DEPTH = 1_000
POPULATE_CONCURRENCY = 50
FLAT_TARGET = 1.5
"""get_latest at 100,000 stored may cost at most this many times get_latest at 10."""
SAVE_TARGET = 0.8
"""The write half should reach at least this fraction of the raw write's speed (raw ÷ ours)."""
LOAD_TARGET = 1.2
"""load ÷ (GET + decode of the same bytes), at most."""
LIST_TARGET = 1.5
"""list_checkpoint_ids ÷ (ZRANGE of the index, ids decoded), at most, at 10,000 and 100,000."""
WHOLE_SAVE_TARGET = 1.2
"""save ÷ (encode + the raw write of the bytes), at most."""

_CODEC = CheckpointCodec()
_BASE = template(WorkflowCheckpoint)


def checkpoint_at(index: int, series: str = "main") -> Any:
    """The benchmark checkpoint numbered ``index`` in ``series`` (deterministic ids)."""
    return numbered(_BASE, index, series)


@dataclass
class _Subject:
    save: Callable[[Any], Awaitable[Any]]
    load: Callable[[str], Awaitable[Any]]
    latest: Callable[[Any], Awaitable[Any]]
    make_item: Callable[[int, str], Any]
    list_ids: Callable[[Any], Awaitable[Any]]


class RawRedis:
    """The floor: the same bytes, one pipelined SET + ZADD per save, no checks, no scripts."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.index_key = f"{prefix}:{{{WORKFLOW_NAME}}}:z"
        self.sequence = itertools.count(1)

    def body_key(self, checkpoint_id: str) -> str:
        return f"{self.prefix}:{{{WORKFLOW_NAME}}}:b:{checkpoint_id}"

    async def save(self, item: tuple[str, bytes]) -> None:
        checkpoint_id, body = item
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.body_key(checkpoint_id), body)
        pipe.zadd(self.index_key, {checkpoint_id: next(self.sequence)})
        await pipe.execute()

    async def load(self, checkpoint_id: str) -> bytes:
        body = await self.client.get(self.body_key(checkpoint_id))
        assert body is not None, checkpoint_id
        return bytes(body)

    async def latest(self, _: object) -> bytes:
        (newest,) = await self.client.zrevrange(self.index_key, 0, 0)
        return await self.load(newest.decode())

    async def save_encoded(self, checkpoint: Any) -> None:
        """Encode, then the raw write: the floor of a whole save."""
        await self.save((checkpoint.checkpoint_id, _CODEC.encode_checkpoint(checkpoint)))

    async def load_decoded(self, checkpoint_id: str) -> Any:
        """GET, then decode: the floor of a load."""
        return _CODEC.decode_checkpoint(await self.load(checkpoint_id), checkpoint_id=checkpoint_id)

    async def list_ids(self, _: object) -> list[str]:
        """ZRANGE of the whole index, ids decoded: the floor of list_checkpoint_ids."""
        return [member.decode() for member in await self.client.zrange(self.index_key, 0, -1)]


def raw_item(index: int, series: str) -> tuple[str, bytes]:
    checkpoint = checkpoint_at(index, series)
    return checkpoint.checkpoint_id, _CODEC.encode_checkpoint(checkpoint)


async def populate(save: Callable[[Any], Awaitable[Any]], items: list[Any]) -> None:
    # Concurrent batches for speed; the last item is saved alone, so it is the latest.
    body, last = items[:-1], items[-1]
    for start in range(0, len(body), POPULATE_CONCURRENCY):
        await asyncio.gather(*(save(item) for item in body[start : start + POPULATE_CONCURRENCY]))
    await save(last)


def _save_halves(
    storage: RedisCheckpointStorage, series: str, counter: itertools.count[int]
) -> dict[str, AsyncCase]:
    """A save split at its seam: encoding (no I/O) and writing bytes already encoded."""

    async def encode(checkpoint: Any) -> None:
        storage.records_for(checkpoint)

    async def write(record: CheckpointRecord) -> None:
        # The digest is the storage's work on the bytes, so it is timed here, not in encode.
        result = await storage.backend.insert([record.replaced(digest=body_digest(record.body))])
        assert result is InsertResult.INSERTED

    def checkpoints(n: int) -> list[Any]:
        return [checkpoint_at(next(counter), series) for _ in range(n)]

    def records(n: int) -> list[CheckpointRecord]:
        return [storage.records_for(checkpoint)[0] for checkpoint in checkpoints(n)]

    return {"ours/encode": AsyncCase(encode, checkpoints), "ours/write": AsyncCase(write, records)}


def _cases(
    subject: _Subject, stored: int, series: str, counter: itertools.count[int]
) -> dict[str, AsyncCase]:
    rng = random.Random(stored)

    def load_args(n: int) -> list[str]:
        return [checkpoint_at(rng.randrange(stored)).checkpoint_id for _ in range(n)]

    def save_args(n: int) -> list[Any]:
        return [subject.make_item(next(counter), series) for _ in range(n)]

    return {
        "save": AsyncCase(subject.save, save_args),
        "load": AsyncCase(subject.load, load_args),
        "latest": AsyncCase(subject.latest, lambda n: [None] * n),
        "list_ids": AsyncCase(subject.list_ids, lambda n: [None] * n),
    }


def _floor_cases(
    raw: RawRedis, stored: int, series: str, counter: itertools.count[int]
) -> dict[str, AsyncCase]:
    """The floors with the codec's share: encode + raw write, GET + decode."""
    rng = random.Random(stored + 1)
    return {
        "raw/save_encoded": AsyncCase(
            raw.save_encoded, lambda n: [checkpoint_at(next(counter), series) for _ in range(n)]
        ),
        "raw/load_decoded": AsyncCase(
            raw.load_decoded, lambda n: [checkpoint_at(rng.randrange(stored)).checkpoint_id for _ in range(n)]
        ),
    }


async def run_redis(
    url: str, budget: Budget, *, large: int = LARGE, peer_stored: int = STORED
) -> dict[str, Any]:
    """Every Redis figure, as a JSON-ready dict."""
    run = uuid.uuid4().hex[:8]
    ours_prefix, raw_prefix = f"bench-ours-{run}", f"bench-raw-{run}"
    client = Redis.from_url(url)
    storage = RedisCheckpointStorage.from_url(url + ("&" if "?" in url else "?") + f"prefix={ours_prefix}")
    raw = RawRedis(client, raw_prefix)

    async def latest(_: object) -> Any:
        return await storage.get_latest(workflow_name=WORKFLOW_NAME)

    async def list_ids(_: object) -> Any:
        return await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)

    subjects = {
        "ours": _Subject(storage.save, storage.load, latest, checkpoint_at, list_ids),
        "raw": _Subject(raw.save, raw.load, raw.latest, raw_item, raw.list_ids),
    }
    sizes = sorted({SMALL, min(MEDIUM, large), large})
    results: dict[str, Any] = {
        "url": url,
        "sizes": {"small": SMALL, "medium": min(MEDIUM, large), "large": large},
        "operations": {},
    }
    try:
        info = await client.info("server")
        persistence = await client.info("persistence")
        results["server"] = {
            "redis_version": info.get("redis_version"),
            "aof_enabled": persistence.get("aof_enabled"),
            "appendfsync": (await client.config_get("appendfsync")).get("appendfsync"),
        }
        stored = 0
        for size in sizes:
            for name, subject in subjects.items():
                make = subject.make_item
                await populate(subject.save, [make(index, "main") for index in range(stored, size)])
                latest = await subject.latest(None)
                assert latest is not None, f"{name}: nothing stored after populating {size:,}"
            stored = size
            counters = {name: itertools.count(10 * large) for name in subjects}
            cases = {
                f"{name}/{operation}": case
                for name, subject in subjects.items()
                for operation, case in _cases(subject, size, f"timed-{size}", counters[name]).items()
            }
            cases |= _save_halves(storage, f"halves-{size}", counters["ours"])
            cases |= _floor_cases(raw, size, f"floor-{size}", counters["raw"])
            measured = await time_async(cases, budget)
            results["operations"][str(size)] = {key: m.to_json() for key, m in measured.items()}
        results["ancestry"] = await _ancestry(storage, budget)
        results["peer"] = await run_peer(url, budget, stored=peer_stored)
    finally:
        await storage.aclose()
        for prefix in (ours_prefix, raw_prefix):
            await delete_prefix(client, prefix)
        await client.aclose()
    results["ratios"] = derive(results)
    return results


async def _ancestry(storage: RedisCheckpointStorage, budget: Budget) -> dict[str, Any]:
    chain = [checkpoint_at(index, "chain") for index in range(DEPTH)]
    for checkpoint in chain:
        await storage.save(checkpoint)
    newest = chain[-1].checkpoint_id

    async def walk_ids(_: object) -> int:
        return len((await storage.walk_ancestry_ids(newest)).items)

    async def walk(_: object) -> int:
        return len((await storage.walk_ancestry(newest)).items)

    async def load_by_load(_: object) -> int:
        return await load_chain(storage, newest)

    assert await walk_ids(None) == DEPTH
    cases = {
        "walk_ancestry_ids": AsyncCase(walk_ids, lambda n: [None] * n),
        "walk_ancestry": AsyncCase(walk, lambda n: [None] * n),
        "load_by_load": AsyncCase(load_by_load, lambda n: [None] * n),
    }
    measured: dict[str, Measurement] = await time_async(cases, budget)
    return {"depth": DEPTH, **{key: m.to_json() for key, m in measured.items()}}


def derive(results: dict[str, Any]) -> dict[str, float]:
    small, medium, large = (str(results["sizes"][k]) for k in ("small", "medium", "large"))
    ops = results["operations"]

    def median(size: str, key: str) -> float:
        return float(ops[size][key]["median_us"])

    ratios: dict[str, float] = {}
    for size in sorted({small, medium, large}, key=int):
        for operation in ("save", "load", "latest", "list_ids"):
            ours, raw = median(size, f"ours/{operation}"), median(size, f"raw/{operation}")
            ratios[f"{operation}@{size} ours/raw"] = ratio(ours, raw)
        ratios[f"save@{size} raw/ours"] = ratio(median(size, "raw/save"), median(size, "ours/save"))
        ratios[f"write@{size} raw/ours"] = ratio(median(size, "raw/save"), median(size, "ours/write"))
        ratios[f"encode@{size} share of save"] = ratio(median(size, "ours/encode"), median(size, "ours/save"))
        ratios[f"save@{size} ours/floor"] = ratio(median(size, "ours/save"), median(size, "raw/save_encoded"))
        ratios[f"load@{size} ours/floor"] = ratio(median(size, "ours/load"), median(size, "raw/load_decoded"))
    ratios["latest flatness ours"] = ratio(median(large, "ours/latest"), median(small, "ours/latest"))
    ratios["latest flatness raw"] = ratio(median(large, "raw/latest"), median(small, "raw/latest"))
    for operation, value in results.get("peer", {}).get("ratios", {}).items():
        ratios[f"{operation} ours/plainredis"] = value
    return ratios


def _timing_table(results: dict[str, Any]) -> TableData:
    small, large = results["sizes"]["small"], results["sizes"]["large"]
    ops = results["operations"]
    names = (("save", "save"), ("load", "load"), ("latest", "get_latest"))
    columns = ["subject"] + [f"{label} @{size:,}" for _, label in names for size in (small, large)]
    table = TableData("Redis: µs per operation (median)", columns)
    for name, label in (
        ("ours", "ours RedisCheckpointStorage"),
        ("raw", "raw SET+ZADD / GET / ZREVRANGE+GET"),
    ):
        row = [label]
        for operation, _ in names:
            row += [fmt_us(ops[str(size)][f"{name}/{operation}"]["median_us"]) for size in (small, large)]
        table.rows.append(row)
    floors = (("save_encoded", "raw floor with the codec: encode + SET+ZADD / GET + decode"),)
    for key, label in floors:
        cells = [fmt_us(ops[str(size)][f"raw/{key}"]["median_us"]) for size in (small, large)]
        cells += [fmt_us(ops[str(size)]["raw/load_decoded"]["median_us"]) for size in (small, large)]
        table.rows.append([label, *cells, "", ""])
    halves = (("encode", "ours, save's encode half (no I/O)"), ("write", "ours, save's write half"))
    for half, label in halves:
        cells = [fmt_us(ops[str(size)][f"ours/{half}"]["median_us"]) for size in (small, large)]
        table.rows.append([label, *cells, *[""] * (len(columns) - 3)])
    return table


def _list_table(results: dict[str, Any]) -> TableData:
    sizes = sorted({results["sizes"]["medium"], results["sizes"]["large"]})
    ops = results["operations"]
    table = TableData(
        "Redis: list_checkpoint_ids, µs per call (median)", ["subject", *(f"@{n:,}" for n in sizes)]
    )
    for name, label in (
        ("ours", "ours (a store without TTL or eviction: the same ZRANGE)"),
        ("raw", "raw ZRANGE 0 -1"),
    ):
        table.rows.append([label, *(fmt_us(ops[str(n)][f"{name}/list_ids"]["median_us"]) for n in sizes)])
    return table


def _ratio_table(results: dict[str, Any]) -> TableData:
    small, medium, large = (results["sizes"][k] for k in ("small", "medium", "large"))
    r = results["ratios"]
    save_target, flat_target = f"≥ {SAVE_TARGET}{TIMES}", f"≤ {FLAT_TARGET}{TIMES}"
    rows = [
        [f"load ÷ (GET + decode) @{small:,}", r[f"load@{small} ours/floor"], f"≤ {LOAD_TARGET}{TIMES}"],
        [f"load ÷ (GET + decode) @{large:,}", r[f"load@{large} ours/floor"], f"≤ {LOAD_TARGET}{TIMES}"],
        [
            f"list_checkpoint_ids ÷ ZRANGE @{medium:,}",
            r[f"list_ids@{medium} ours/raw"],
            f"≤ {LIST_TARGET}{TIMES}",
        ],
        [
            f"list_checkpoint_ids ÷ ZRANGE @{large:,}",
            r[f"list_ids@{large} ours/raw"],
            f"≤ {LIST_TARGET}{TIMES}",
        ],
        [
            f"save ÷ (encode + raw write) @{small:,}",
            r[f"save@{small} ours/floor"],
            f"≤ {WHOLE_SAVE_TARGET}{TIMES}",
        ],
        [
            f"save ÷ (encode + raw write) @{large:,}",
            r[f"save@{large} ours/floor"],
            f"≤ {WHOLE_SAVE_TARGET}{TIMES}",
        ],
        [
            f"write of the same bytes: raw ÷ ours @{small:,} (share of the raw write's speed)",
            r[f"write@{small} raw/ours"],
            save_target,
        ],
        [f"write of the same bytes: raw ÷ ours @{large:,}", r[f"write@{large} raw/ours"], save_target],
        [f"encode half ÷ save @{large:,}", r[f"encode@{large} share of save"], ""],
        [f"load: ours ÷ raw GET @{large:,}", r[f"load@{large} ours/raw"], ""],
        [f"get_latest: ours ÷ raw @{large:,}", r[f"latest@{large} ours/raw"], ""],
        [f"get_latest flatness, ours (@{large:,} ÷ @{small:,})", r["latest flatness ours"], flat_target],
        [f"get_latest flatness, raw (@{large:,} ÷ @{small:,})", r["latest flatness raw"], ""],
    ]
    for operation in results.get("peer", {}).get("ratios", {}):
        rows.append([f"{operation}: ours ÷ plainredis", r[f"{operation} ours/plainredis"], f"≤ 1.0{TIMES}"])
    table = TableData("Redis: ratios", ["figure", "value", "target"])
    table.rows = [[label, fmt_ratio(value), target] for label, value, target in rows]
    return table


def _walk_table(results: dict[str, Any]) -> TableData:
    ancestry = results["ancestry"]
    table = TableData(
        f"Redis: ancestry of a {ancestry['depth']:,}-checkpoint chain (µs per walk, median)",
        ["walk", "µs", "÷ walk_ancestry_ids"],
    )
    base = ancestry["walk_ancestry_ids"]["median_us"]
    for key, label in (
        ("walk_ancestry_ids", "walk_ancestry_ids (one script)"),
        ("walk_ancestry", "walk_ancestry (one script, bodies decoded)"),
        ("load_by_load", "load by load (one round trip per checkpoint)"),
    ):
        median = ancestry[key]["median_us"]
        table.rows.append([label, fmt_us(median), fmt_ratio(ratio(median, base))])
    return table


def tables(results: dict[str, Any]) -> list[TableData]:
    found = [_timing_table(results), _list_table(results), _ratio_table(results), _walk_table(results)]
    if "peer" in results:
        found.append(peer_table(results["peer"]))
    return found


def conclusions(results: dict[str, Any]) -> list[str]:
    r, small, large = results["ratios"], results["sizes"]["small"], results["sizes"]["large"]
    flat = r["latest flatness ours"]
    write_share = min(r[f"write@{small} raw/ours"], r[f"write@{large} raw/ours"])
    save_share, encode_share = r[f"save@{large} raw/ours"], r[f"encode@{large} share of save"]
    walk = results["ancestry"]
    speedup = ratio(walk["load_by_load"]["median_us"], walk["walk_ancestry_ids"]["median_us"])
    flat_verdict = "flat, within" if flat <= FLAT_TARGET else "above"
    write_verdict = "meets" if write_share >= SAVE_TARGET else "misses"
    return [
        f"Redis get_latest at {large:,} stored costs {flat:.2f}{TIMES} what it costs at 10 "
        f"({flat_verdict} the {FLAT_TARGET}{TIMES} target).",
        f"Writing the same bytes, Redis save runs at {write_share:.2f}{TIMES} (the lower of the two sizes) "
        f"the speed of a raw pipelined SET+ZADD ({write_verdict} the {SAVE_TARGET}{TIMES} target), although "
        "its one script also checks the id, takes a sequence number and writes the record, two sorted sets "
        "and the location pointer.",
        f"With encoding, a whole save runs at {save_share:.2f}{TIMES} the raw write's speed: encoding "
        f"(checks, codec, digest, in Python) is {encode_share:.0%} of a save's time, and the raw floor "
        "is handed bytes already encoded.",
        f"Walking {walk['depth']:,} ancestors with walk_ancestry_ids is {speedup:.1f}{TIMES} faster than "
        "loading them one by one.",
        *_target_verdicts(results),
    ]


def _verdict(value: float, target: float) -> str:
    return f"{value:.2f}{TIMES}: " + ("met" if value <= target else f"missed by {value / target - 1:.0%}")


def _target_verdicts(results: dict[str, Any]) -> list[str]:
    """One line per issue target: the ratio, met or missed by how much, what the floor is."""
    r = results["ratios"]
    small, medium, large = (results["sizes"][k] for k in ("small", "medium", "large"))
    worst = {
        "load": max(r[f"load@{small} ours/floor"], r[f"load@{large} ours/floor"]),
        "list": max(r[f"list_ids@{medium} ours/raw"], r[f"list_ids@{large} ours/raw"]),
        "save": max(r[f"save@{small} ours/floor"], r[f"save@{large} ours/floor"]),
    }
    lines = [
        f"Target load ≤ {LOAD_TARGET}{TIMES} GET + decode (worse of @{small:,} and @{large:,}): "
        f"{_verdict(worst['load'], LOAD_TARGET)}. The floor is one GET of the body and the codec's decode; "
        "ours, for an id the handle saved or read (the last 16,384), is one MULTI/EXEC (location pointer, "
        "record fields, nested flag: about 24,500 server instructions), otherwise one script (the same "
        "keys and any nested bodies: about 130,000, against 6,100 for the GET; "
        "`python -m bench.redis_server_callgrind`). At 10 stored every timed load is of a remembered id; "
        "at 100,000 the timed loads range over more ids than a handle remembers, so most take the script: "
        "its fixed cost and the body crossing into Lua and back are the gap.",
        f"Target list_checkpoint_ids ≤ {LIST_TARGET}{TIMES} ZRANGE (worse of @{medium:,} and @{large:,}): "
        f"{_verdict(worst['list'], LIST_TARGET)}. The floor is ZRANGE 0 -1 with the ids decoded; ours, on a "
        "store whose records cannot expire or be evicted (this one), is the same ZRANGE, and a record "
        "deleted behind the storage's back is reported by the read that needs it. With a TTL, the "
        "eviction opt-out or on a cluster, ours is one script that reads the same range and checks every "
        "entry's record exists (a multi-key EXISTS per 1,000): no constant-cost check can see a record "
        "evicted or deleted behind the storage's back, and a sound one costs one key lookup per entry, "
        f"about 4{TIMES} a ZRANGE on the server with or without Lua, 10{TIMES} at 100,000 (docs/redis.md).",
        f"Target save ≤ {WHOLE_SAVE_TARGET}{TIMES} encode + raw write (worse of @{small:,} and @{large:,}): "
        f"{_verdict(worst['save'], WHOLE_SAVE_TARGET)}. The floor encodes with the same codec and writes "
        "with a pipelined SET+ZADD; ours also checks the fields, digests the body and runs one script "
        "(id check, INCR, record, two sorted sets, location pointer).",
    ]
    for operation, value in results.get("peer", {}).get("ratios", {}).items():
        lines.append(
            f"Target {operation} ≤ 1.0{TIMES} langgraph-checkpoint-plainredis: {_verdict(value, 1.0)}."
        )
    return lines


def markdown(results: dict[str, Any]) -> str:
    server = results.get("server", {})
    aof = server.get("aof_enabled") in (1, "1")
    persistence = f"AOF on, appendfsync {server.get('appendfsync')}" if aof else "AOF off"
    lines = [
        "## Redis",
        "",
        f"Against the Redis server at `{results['url']}` (Redis {server.get('redis_version')}, "
        f"{persistence}), each store under its own key prefix, deleted afterwards. The raw floor writes "
        "the exact bytes our codec produces with one pipelined `SET` + `ZADD` per save and reads with "
        "`GET` (latest: `ZREVRANGE 0 0` then `GET`; listing: `ZRANGE 0 -1`); its floors with the codec "
        "add our encode before the write and our decode after the GET. Stores are filled to 10, then "
        f"to {results['sizes']['medium']:,} and {results['sizes']['large']:,} checkpoints in one workflow; "
        "timed saves go on top of them. "
        "A save is also timed in its two halves: the encode half (field checks and the codec, no I/O) "
        "and the write half (the digest and the one script round trip, for bytes already encoded). The "
        "write half does what the raw floor does, so the save target applies to it; the whole save is "
        "shown next to it. `bench/redis_bench.py` describes the method. The last table gives each "
        "LangGraph call through StorageSaver next to langgraph-checkpoint-plainredis "
        "(`bench/redis_peer_bench.py`); LangGraph's official langgraph-checkpoint-redis needs the "
        "RediSearch and RedisJSON modules and fails on plain Redis (`unknown command 'FT.INFO'`), so it "
        "is not measured.",
        "",
    ]
    for table in tables(results):
        lines += [f"### {table.title}", "", table.to_markdown(), ""]
    lines += [f"- {statement}" for statement in conclusions(results)]
    return "\n".join(lines) + "\n"


def redis_arguments(parser: argparse.ArgumentParser) -> None:
    """``bench.run``'s options for this section."""
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", DEFAULT_URL),
        help="the Redis server of the Redis section (default: $REDIS_URL or %(default)s)",
    )
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis section")


async def run_redis_section(
    args: argparse.Namespace, budget: Budget, results: dict[str, Any], console: Any
) -> None:
    """Run the section for ``bench.run`` into ``results["redis"]`` and print its tables."""
    if args.no_redis:
        results["redis_skipped"] = "--no-redis given"
        return
    large = QUICK_LARGE if args.quick else LARGE
    peer_stored = QUICK_STORED if args.quick else STORED
    with console.status(f"Redis: filling {large:,} checkpoints and timing"):
        try:
            results["redis"] = await run_redis(args.redis_url, budget, large=large, peer_stored=peer_stored)
        except (OSError, RedisError) as exc:
            results["redis_skipped"] = f"{args.redis_url} unreachable: {type(exc).__name__}: {exc}"
            console.print(f"[yellow]Skipping the Redis section: {results['redis_skipped']}[/]")
            return
    for table in tables(results["redis"]):
        console.print(table.to_rich())


def redis_section(results: dict[str, Any]) -> list[str]:
    """The section's markdown lines for ``docs/benchmarks.md``."""
    if "redis" in results:
        return [*markdown(results["redis"]).splitlines(), ""]
    if "redis_skipped" in results:
        return ["## Redis", "", f"Not measured: {results['redis_skipped']}.", ""]
    return []


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="python -m bench.redis_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("REDIS_URL", DEFAULT_URL))
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_LARGE:,} instead of {LARGE:,} stored")
    args = parser.parse_args(argv)
    budget = Budget(repeats=7, batch_seconds=0.02) if args.quick else Budget(repeats=15, batch_seconds=0.03)
    results = asyncio.run(
        run_redis(
            args.url,
            budget,
            large=QUICK_LARGE if args.quick else LARGE,
            peer_stored=QUICK_STORED if args.quick else STORED,
        )
    )
    console = Console()
    for table in tables(results):
        console.print(table.to_rich())
    for statement in conclusions(results):
        console.print(f"• {statement}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
