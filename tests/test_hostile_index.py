"""A store is hostile: what a damaged or crafted index (ids, names, fields; not bodies, see
test_hostile_bodies.py) makes a read do. Each hostile value is put in through the backend's own
client, as a damaged or hostile store would hold it; every read then raises a typed error
naming the record (or the workflow name), never UnicodeDecodeError, AssertionError or an error
saying the backend is unavailable, and the read changes nothing in the store.

Each test here failed on the code before: Redis replies decoded with a bare ``bytes.decode``;
SQLite (and PostgreSQL, in a SQL_ASCII database) reported a TEXT value that is not UTF-8 as
StorageUnavailableError; SQLite took a body stored as TEXT for bytes; PostgreSQL listed a
SQL_ASCII database's ids as "b'...'"; S3 took any JSON type in a record header and unquoted key
bytes that are not UTF-8 to U+FFFD; list_workflows handed on names no caller could have saved.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import postgres_servers
import psycopg
import pytest
import redis_servers
from s3_support import BUCKET, S3Store, s3_store

from storages import (
    CheckpointCorruptedError,
    InvalidCheckpointIdError,
    WorkflowCheckpoint,
)
from storages.postgres import PostgresCheckpointStorage
from storages.postgres.config import DEFAULT_SCHEMA
from storages.records import listed_ids
from storages.redis import RedisCheckpointStorage
from storages.s3 import S3CheckpointStorage
from storages.sqlite import SQLiteCheckpointStorage

Read = Callable[[Any], Awaitable[object]]

READS: dict[str, Read] = {
    "list_checkpoint_ids": lambda s: s.list_checkpoint_ids(workflow_name="wf"),
    "list_checkpoint_ids(include_nested)": lambda s: s.list_checkpoint_ids(
        workflow_name="wf", include_nested=True
    ),
    "list_checkpoints": lambda s: s.list_checkpoints(workflow_name="wf"),
    "get_latest": lambda s: s.get_latest(workflow_name="wf"),
    "get_latest(signature)": lambda s: s.get_latest(workflow_name="wf", graph_signature_hash="sig"),
    "load": lambda s: s.load("b"),
    "walk_ancestry": lambda s: s.walk_ancestry("b"),
    "walk_ancestry_ids": lambda s: s.walk_ancestry_ids("b"),
    "checkpoint_info": lambda s: s.checkpoint_info("b"),
    "list_nested": lambda s: s.list_nested("b"),
    "list_records": lambda s: s.list_records(),
    "list_records(workflow)": lambda s: s.list_records(workflow_name="wf"),
    "list_tombstones": lambda s: s.list_tombstones(),
    "list_tombstones(workflow)": lambda s: s.list_tombstones(workflow_name="wf"),
    "list_workflows": lambda s: s.list_workflows(),
}


async def _save_two(storage: Any) -> None:
    await storage.save(WorkflowCheckpoint("wf", "sig", checkpoint_id="a", state={}))
    await storage.save(
        WorkflowCheckpoint("wf", "sig", checkpoint_id="b", previous_checkpoint_id="a", state={})
    )


async def _expect(storage: Any, read: str, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as caught:
        await READS[read](storage)
    # Typed and named: the one clear error, not a decoding error chained under another.
    assert not isinstance(caught.value.__cause__, UnicodeDecodeError)


# ---------------------------------------------------------------------------------------- Redis

NOT_UTF8_ID = r"Checkpoint \"b'\\\\xff'\" is corrupted: the index of workflow 'wf'"
NAMED_B = r"Checkpoint 'b' is corrupted: its index entry has a malformed"

REDIS_CASES: list[tuple[str, str, list[str], str, type[Exception]]] = [
    # (case, what is planted, reads that meet it, message pattern, error)
    (
        "an id in the workflow's index",
        "top",
        ["list_checkpoint_ids", "list_checkpoint_ids(include_nested)", "list_checkpoints", "get_latest"],
        NOT_UTF8_ID + r" holds it, but it is not UTF-8",
        CheckpointCorruptedError,
    ),
    (
        "an id in a signature's index",
        "sig",
        ["get_latest(signature)"],
        NOT_UTF8_ID + r" \(graph signature 'sig'\) holds it, but it is not UTF-8",
        CheckpointCorruptedError,
    ),
    (
        "an id in the index read by list_records",
        "top",
        ["list_records", "list_records(workflow)"],
        NOT_UTF8_ID,
        CheckpointCorruptedError,
    ),
    (
        "a previous id",
        "previous",
        ["walk_ancestry", "walk_ancestry_ids", "checkpoint_info"],
        NAMED_B + " previous id",
        CheckpointCorruptedError,
    ),
    ("a child id", "child", ["list_nested"], NAMED_B + " nested id", CheckpointCorruptedError),
    (
        "a nested index member",
        "nested",
        ["list_checkpoint_ids(include_nested)", "list_records(workflow)"],
        r"is corrupted: the nested index of workflow 'wf' holds it, but it is not UTF-8",
        CheckpointCorruptedError,
    ),
    (
        "a tombstone",
        "tombstone",
        ["list_tombstones", "list_tombstones(workflow)"],
        r"is corrupted: the tombstones of workflow 'wf' holds it, but it is not UTF-8",
        CheckpointCorruptedError,
    ),
    (
        "a workflow key",
        "workflow key",
        ["list_workflows", "list_records"],
        r"Invalid workflow_name .*not UTF-8 text",
        InvalidCheckpointIdError,
    ),
    # StorageUnavailableError before, which invites a retry that cannot help.
    (
        "a workflow's index that is not a sorted set",
        "wrong type",
        ["list_checkpoint_ids", "list_checkpoints", "get_latest"],
        r"Checkpoint '<(list_checkpoint_ids|list_checkpoints|get_latest)>' is corrupted: .*a key of this "
        r"storage holds another kind of value than this storage writes there .*WRONGTYPE",
        CheckpointCorruptedError,
    ),
    (
        "a workflow name with a control character",
        "control name",
        ["list_workflows"],
        r"Invalid workflow_name 'bad\\x01'.*control character.*from the store",
        InvalidCheckpointIdError,
    ),
]


async def _plant(storage: RedisCheckpointStorage, what: str) -> None:
    client, keys = storage.backend.client, storage.keys
    prefix = keys.prefix.encode()
    if what == "top":
        await client.zadd(keys.top("wf"), {b"\xff": 99})
    elif what == "sig":
        await client.zadd(keys.signature("wf", "sig"), {b"\xff": 99})
    elif what == "previous":
        await client.hset(keys.record("wf", "b"), "p", b"\xff")
    elif what == "child":
        await client.rpush(prefix + b":{wf}:k:b", b"\xff")
    elif what == "nested":
        await client.zadd(keys.nested("wf"), {b"\xff:\xfe": 5})
    elif what == "tombstone":
        await client.sadd(keys.tombstones("wf"), b"\xff")
    elif what == "workflow key":
        await client.zadd(prefix + b":{\xff}:top", {b"x": 1})
        await client.zadd(keys.workflows, {b"\xff": float("inf")})
    elif what == "control name":
        await client.zadd(prefix + b":{bad\x01}:top", {b"x": 1})
        await client.zadd(keys.workflows, {b"bad\x01": float("inf")})
    elif what == "wrong type":
        await client.delete(keys.top("wf"))
        await client.set(keys.top("wf"), b"not an index")
    else:  # pragma: no cover
        raise AssertionError(what)


async def _dump(storage: RedisCheckpointStorage) -> dict[bytes, object]:
    """Every key of the storage's prefix with its value: a read must change none of them."""
    client = storage.backend.client
    found: dict[bytes, object] = {}
    async for key in client.scan_iter(match=storage.keys.prefix + ":*"):
        kind = await client.type(key)
        if kind == b"hash":
            found[key] = await client.hgetall(key)
        elif kind == b"zset":
            found[key] = await client.zrange(key, 0, -1, withscores=True)
        elif kind == b"set":
            found[key] = await client.smembers(key)
        elif kind == b"list":
            found[key] = await client.lrange(key, 0, -1)
        else:
            found[key] = await client.get(key)
    return found


async def _redis_case(
    storage: RedisCheckpointStorage, what: str, reads: list[str], match: str, error: type[Exception]
) -> None:
    await _save_two(storage)
    await _plant(storage, what)
    before = await _dump(storage)
    fresh = storage.new_handle()
    try:
        for read in reads:
            for handle in (storage, fresh):
                await _expect(handle, read, error, match)
    finally:
        await fresh.aclose()
    assert await _dump(storage) == before


@pytest.fixture
async def fake_redis() -> AsyncIterator[RedisCheckpointStorage]:
    async with redis_servers.fake_store() as maker, maker() as storage:
        yield storage


@pytest.fixture
async def real_redis() -> AsyncIterator[RedisCheckpointStorage]:
    async with redis_servers.server_store(redis_servers.redis_url()) as maker, maker() as storage:
        yield storage


@pytest.mark.redis
@pytest.mark.parametrize(
    ("case", "what", "reads", "match", "error"), REDIS_CASES, ids=[c[0] for c in REDIS_CASES]
)
async def test_redis_values_that_are_not_text_are_reported_on_fakeredis(
    fake_redis: RedisCheckpointStorage,
    case: str,
    what: str,
    reads: list[str],
    match: str,
    error: type[Exception],
) -> None:
    await _redis_case(fake_redis, what, reads, match, error)


@pytest.mark.redis
@pytest.mark.parametrize(
    ("case", "what", "reads", "match", "error"), REDIS_CASES, ids=[c[0] for c in REDIS_CASES]
)
async def test_redis_values_that_are_not_text_are_reported(
    real_redis: RedisCheckpointStorage,
    case: str,
    what: str,
    reads: list[str],
    match: str,
    error: type[Exception],
) -> None:
    await _redis_case(real_redis, what, reads, match, error)


# --------------------------------------------------------------------------------------- SQLite

SQLITE_CASES: list[tuple[str, str, list[str], str, type[Exception]]] = [
    (
        "an id that is not UTF-8",
        "UPDATE checkpoints SET checkpoint_id = CAST(x'ff' AS TEXT) WHERE checkpoint_id = 'a'",
        ["list_checkpoint_ids", "list_checkpoints", "list_records", "list_records(workflow)"],
        r"Checkpoint \"b'\\\\xff'\" is corrupted: its index entry has a malformed checkpoint id",
        CheckpointCorruptedError,
    ),
    (
        "an id stored as a BLOB",
        "UPDATE checkpoints SET checkpoint_id = x'fe' WHERE checkpoint_id = 'a'",
        ["list_checkpoint_ids", "list_checkpoints", "list_records"],
        r"Checkpoint \"b'\\\\xfe'\" is corrupted: its index entry has a malformed checkpoint id",
        CheckpointCorruptedError,
    ),
    (
        "a previous id that is not UTF-8",
        "UPDATE checkpoints SET previous_checkpoint_id = CAST(x'ff' AS TEXT) WHERE checkpoint_id = 'b'",
        [
            "list_checkpoints",
            "get_latest",
            "load",
            "walk_ancestry",
            "walk_ancestry_ids",
            "checkpoint_info",
            "list_records",
        ],
        NAMED_B + " previous id",
        CheckpointCorruptedError,
    ),
    (
        "a graph signature that is not UTF-8",
        "UPDATE checkpoints SET graph_signature_hash = CAST(x'ff' AS TEXT) WHERE checkpoint_id = 'b'",
        ["list_checkpoints", "get_latest", "load", "checkpoint_info"],
        NAMED_B + " graph signature",
        CheckpointCorruptedError,
    ),
    (
        "a body stored as TEXT",
        "UPDATE checkpoints SET body = 'text' WHERE checkpoint_id = 'b'",
        ["list_checkpoints", "get_latest", "load", "walk_ancestry"],
        r"Checkpoint 'b' is corrupted: its stored body is str, not bytes",
        CheckpointCorruptedError,
    ),
    (
        "a tombstone that is not UTF-8",
        "INSERT INTO tombstones VALUES (CAST(x'ff' AS TEXT), 'wf')",
        ["list_tombstones", "list_tombstones(workflow)"],
        r"Checkpoint \"b'\\\\xff'\" is corrupted",
        CheckpointCorruptedError,
    ),
    (
        "a workflow name that is not UTF-8",
        "UPDATE checkpoints SET workflow_name = CAST(x'ff' AS TEXT) WHERE checkpoint_id = 'b'",
        ["list_workflows"],
        r"Invalid workflow_name b'\\xff': is not UTF-8 text: list_workflows read it from the store",
        InvalidCheckpointIdError,
    ),
    (
        "an id with a control character",
        "UPDATE checkpoints SET checkpoint_id = 'a' || char(7) WHERE checkpoint_id = 'a'",
        ["list_checkpoint_ids", "list_checkpoint_ids(include_nested)"],
        r"Checkpoint 'a\\x07' is corrupted: the index of workflow 'wf' lists it, and it contains a "
        r"control character",
        CheckpointCorruptedError,
    ),
    (
        "an id longer than any save allows",
        "UPDATE checkpoints SET checkpoint_id = replace(hex(zeroblob(150)), '0', 'x') || 'a' "
        "WHERE checkpoint_id = 'a'",
        ["list_checkpoint_ids", "list_checkpoint_ids(include_nested)"],
        r"the index of workflow 'wf' lists it, and it is 301 characters long; the limit is 256",
        CheckpointCorruptedError,
    ),
    (
        "an empty id",
        "UPDATE checkpoints SET checkpoint_id = '' WHERE checkpoint_id = 'a'",
        ["list_checkpoint_ids", "list_checkpoint_ids(include_nested)"],
        r"Checkpoint '' is corrupted: the index of workflow 'wf' lists it, and it must not be empty",
        CheckpointCorruptedError,
    ),
    (
        "a workflow name with a control character",
        "UPDATE checkpoints SET workflow_name = 'bad' || char(1) WHERE checkpoint_id = 'b'",
        ["list_workflows"],
        r"Invalid workflow_name 'bad\\x01'.*control character.*from the store",
        InvalidCheckpointIdError,
    ),
]


def _sqlite_dump(path: Path) -> list[object]:
    with closing(sqlite3.connect(path)) as connection:
        connection.text_factory = bytes
        return [
            connection.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
            for table in ("checkpoints", "tombstones", "workflows")
        ]


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("case", "sql", "reads", "match", "error"), SQLITE_CASES, ids=[c[0] for c in SQLITE_CASES]
)
async def test_sqlite_values_of_the_wrong_kind_are_reported(
    tmp_path: Path, case: str, sql: str, reads: list[str], match: str, error: type[Exception]
) -> None:
    path = tmp_path / "checkpoints.db"
    async with SQLiteCheckpointStorage(path) as storage:
        await _save_two(storage)
        with closing(sqlite3.connect(path)) as connection:
            connection.execute(sql)
            connection.commit()
        before = _sqlite_dump(path)
        for read in reads:
            await _expect(storage, read, error, match)
        # The connection reads text as before once a read met a value that is not UTF-8.
        assert await storage.list_checkpoint_ids(workflow_name="nothing-here") == []
        assert _sqlite_dump(path) == before


@pytest.mark.sqlite
@pytest.mark.parametrize(
    "remove",
    [
        pytest.param(lambda s: s.prune(workflow_name="wf", keep_last=1), id="prune"),
        pytest.param(lambda s: s.delete_workflow(workflow_name="wf"), id="delete_workflow"),
    ],
)
async def test_sqlite_removal_meeting_an_id_that_is_not_text_changes_nothing(
    tmp_path: Path, remove: Callable[[Any], Awaitable[object]]
) -> None:
    """Prune and delete_workflow used to render such an id with str() ("b'\\xfe'"): the delete
    matched no row, the record stayed and a tombstone named an id nobody saved."""
    path = tmp_path / "checkpoints.db"
    async with SQLiteCheckpointStorage(path) as storage:
        await _save_two(storage)
        with closing(sqlite3.connect(path)) as connection:
            connection.execute("UPDATE checkpoints SET checkpoint_id = x'fe' WHERE checkpoint_id = 'a'")
            connection.commit()
        before = _sqlite_dump(path)
        with pytest.raises(CheckpointCorruptedError, match=r"Checkpoint \"b'\\\\xfe'\" is corrupted"):
            await remove(storage)
        assert _sqlite_dump(path) == before


# ----------------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def sql_ascii_url() -> Iterator[str]:
    """A private database with encoding SQL_ASCII, whose text columns hold any bytes but NUL (the
    one kind of PostgreSQL database where text need not be UTF-8); dropped afterwards."""
    name = f"cs_hostile_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_servers.server_url(), autocommit=True) as connection:
        connection.execute(
            f"CREATE DATABASE \"{name}\" ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'"
        )
    try:
        yield postgres_servers.with_database(postgres_servers.server_url(), name)
    finally:
        postgres_servers.drop_database(postgres_servers.server_url(), name)


async def _postgres_execute(url: str, sql: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        await connection.execute(sql)


@pytest.mark.postgres
async def test_postgres_sql_ascii_database_lists_ids_as_text(sql_ascii_url: str) -> None:
    """psycopg hands a SQL_ASCII database's text over as bytes unless the connection asks for
    UTF-8: the old code listed "b'a'" for id 'a', and load then called the record corrupted."""
    async with PostgresCheckpointStorage.from_url(sql_ascii_url) as storage:
        await _save_two(storage)
        assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a", "b"]
        assert await storage.list_workflows() == ["wf"]
        assert (await storage.load("b")).previous_checkpoint_id == "a"
        assert [c.checkpoint_id for c in (await storage.walk_ancestry("b")).items] == ["b", "a"]


POSTGRES_CASES: list[tuple[str, str, list[str], str, type[Exception]]] = [
    (
        "an id that is not UTF-8",
        "UPDATE {s}.checkpoints SET checkpoint_id = convert_from('\\xff'::bytea, 'SQL_ASCII') "
        "WHERE checkpoint_id = 'a'",
        ["list_checkpoint_ids", "list_checkpoints", "list_records", "list_records(workflow)"],
        r"Checkpoint \"b'\\\\xff'\" is corrupted: its index entry has a malformed checkpoint id",
        CheckpointCorruptedError,
    ),
    (
        "a previous id that is not UTF-8",
        "UPDATE {s}.checkpoints SET previous_checkpoint_id = convert_from('\\xff'::bytea, 'SQL_ASCII') "
        "WHERE checkpoint_id = 'b'",
        ["list_checkpoints", "get_latest", "load", "walk_ancestry_ids", "checkpoint_info", "list_records"],
        NAMED_B + " previous id",
        CheckpointCorruptedError,
    ),
    (
        "a tombstone that is not UTF-8",
        "INSERT INTO {s}.tombstones VALUES (convert_from('\\xff'::bytea, 'SQL_ASCII'), 'wf')",
        ["list_tombstones", "list_tombstones(workflow)"],
        r"Checkpoint \"b'\\\\xff'\" is corrupted",
        CheckpointCorruptedError,
    ),
    (
        "a workflow name that is not UTF-8",
        "UPDATE {s}.checkpoints SET workflow_name = convert_from('\\xff'::bytea, 'SQL_ASCII') "
        "WHERE checkpoint_id = 'b'",
        ["list_workflows"],
        r"Invalid workflow_name b'\\xff': is not UTF-8 text: list_workflows read it from the store",
        InvalidCheckpointIdError,
    ),
    (
        "a workflow name with a control character",
        "UPDATE {s}.checkpoints SET workflow_name = 'bad' || chr(1) WHERE checkpoint_id = 'b'",
        ["list_workflows"],
        r"Invalid workflow_name 'bad\\x01'.*control character.*from the store",
        InvalidCheckpointIdError,
    ),
]


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("case", "sql", "reads", "match", "error"), POSTGRES_CASES, ids=[c[0] for c in POSTGRES_CASES]
)
async def test_postgres_values_that_are_not_text_are_reported(
    sql_ascii_url: str, case: str, sql: str, reads: list[str], match: str, error: type[Exception]
) -> None:
    async with PostgresCheckpointStorage.from_url(sql_ascii_url) as storage:
        await _save_two(storage)
        await _postgres_execute(sql_ascii_url, sql.format(s=DEFAULT_SCHEMA))
        for read in reads:
            await _expect(storage, read, error, match)
        # The connection reads text as UTF-8 again after a read met a value that is not.
        assert await storage.list_checkpoint_ids(workflow_name="nothing-here") == []


# ------------------------------------------------------------------------------------------- S3


def _rewrite_header(store: S3Store, storage: S3CheckpointStorage, field: str, value: object) -> None:
    key = storage.backend.keys.record_key("b")
    raw = store.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    head, _, body = raw.partition(b"\n")
    header = json.loads(head)
    header[field] = value
    store.client.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(header).encode() + b"\n" + body)


def _plant_key(store: S3Store, key: str) -> None:
    store.client.put_object(Bucket=BUCKET, Key=key, Body=b"")


S3_RECORD_READS = [
    "list_checkpoints",
    "get_latest",
    "load",
    "checkpoint_info",
    "walk_ancestry_ids",
    "list_records",
]
S3_CASES: list[
    tuple[str, Callable[[S3Store, S3CheckpointStorage], None], list[str], str, type[Exception]]
] = [
    # tuple("xy") and str(5) passed these on before: a header's fields are now typed as written.
    (
        "children that are a string",
        lambda store, storage: _rewrite_header(store, storage, "children", "xy"),
        [*S3_RECORD_READS, "list_nested"],
        r"Checkpoint 'b' is corrupted: the S3 record header is unreadable: field 'children' is str, not list",
        CheckpointCorruptedError,
    ),
    (
        "a previous id that is a number",
        lambda store, storage: _rewrite_header(store, storage, "previous", 5),
        S3_RECORD_READS,
        r"Checkpoint 'b' is corrupted: the S3 record header is unreadable: field 'previous' is int, not str",
        CheckpointCorruptedError,
    ),
    (
        "a sequence that is a string",
        lambda store, storage: _rewrite_header(store, storage, "seq", "2"),
        S3_RECORD_READS,
        r"Checkpoint 'b' is corrupted: the S3 record header is unreadable: field 'seq' is '2'",
        CheckpointCorruptedError,
    ),
    (
        "a member that is not a list of four",
        lambda store, storage: _rewrite_header(store, storage, "members", [["x", "wf", 3]]),
        ["load", "checkpoint_info"],
        r"Checkpoint 'b' is corrupted: the S3 record header is unreadable: a member is",
        CheckpointCorruptedError,
    ),
    # unquote replaced these bytes with U+FFFD before, handing on an id no key spells.
    (
        "an order key whose id is not UTF-8",
        lambda store, storage: _plant_key(
            store, storage.backend.keys.order_prefix("wf", False) + "0000000000000000001.x.%FF"
        ),
        ["list_checkpoint_ids", "list_checkpoints", "get_latest", "list_records"],
        r"Checkpoint '%FF' is corrupted: an S3 key spells it, and its %XX bytes are not UTF-8 text",
        CheckpointCorruptedError,
    ),
    # Skipped before: a listing without it looked complete.
    (
        "an order key no save writes",
        lambda store, storage: _plant_key(store, storage.backend.keys.order_prefix("wf", False) + "0000.x.y"),
        ["list_checkpoint_ids", "list_checkpoints", "get_latest", "list_records", "list_records(workflow)"],
        r"Checkpoint '0000.x.y' is corrupted: the S3 order key '.*/0000.x.y' is not one a save writes",
        CheckpointCorruptedError,
    ),
    (
        "an order key whose sequence is not ASCII digits",
        lambda store, storage: _plant_key(
            store, storage.backend.keys.order_prefix("wf", False) + "000000000000000000\u00b2.x.y"
        ),
        ["list_checkpoint_ids", "list_records(workflow)"],
        r"is not one a save writes",
        CheckpointCorruptedError,
    ),
    (
        "a tombstone key that is not UTF-8",
        lambda store, storage: _plant_key(
            store, storage.backend.keys.tombstone_keys("wf", "x")[0][:-1] + "%FF"
        ),
        ["list_tombstones(workflow)"],
        r"Checkpoint '%FF' is corrupted: an S3 key spells it",
        CheckpointCorruptedError,
    ),
    (
        "a workflow key that is not UTF-8",
        lambda store, storage: _plant_key(
            store, storage.backend.keys.workflows_prefix() + "%FF/t/0000000000000000001.x.y"
        ),
        ["list_workflows"],
        r"Invalid workflow_name '%FF': is not UTF-8 text",
        InvalidCheckpointIdError,
    ),
    (
        "a workflow key with a control character",
        lambda store, storage: _plant_key(
            store, storage.backend.keys.workflows_prefix() + "bad%01/t/0000000000000000001.x.y"
        ),
        ["list_workflows"],
        r"Invalid workflow_name 'bad\\x01'.*control character.*from the store",
        InvalidCheckpointIdError,
    ),
]


@pytest.mark.s3
@pytest.mark.parametrize(("case", "plant", "reads", "match", "error"), S3_CASES, ids=[c[0] for c in S3_CASES])
async def test_s3_values_of_the_wrong_kind_are_reported(
    case: str,
    plant: Callable[[S3Store, S3CheckpointStorage], None],
    reads: list[str],
    match: str,
    error: type[Exception],
) -> None:
    async with s3_store(server=False) as store, store.storage() as storage:
        await _save_two(storage)
        plant(store, storage)
        listed = store.client.list_objects_v2(Bucket=BUCKET, Prefix=store.prefix)["Contents"]
        before = sorted((item["Key"], item["ETag"]) for item in listed)
        for read in reads:
            await _expect(storage, read, error, match)
        listed = store.client.list_objects_v2(Bucket=BUCKET, Prefix=store.prefix)["Contents"]
        assert sorted((item["Key"], item["ETag"]) for item in listed) == before


@pytest.mark.s3
async def test_s3_folder_marker_in_an_order_prefix_is_not_a_record() -> None:
    """A key ending in "/" (what an S3 console's "create folder" writes) holds nothing: listings
    go on without it, unlike any other key no save writes."""
    async with s3_store(server=False) as store, store.storage() as storage:
        await _save_two(storage)
        _plant_key(store, storage.backend.keys.order_prefix("wf", False))
        assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a", "b"]
        latest = await storage.get_latest(workflow_name="wf")
        assert latest is not None
        assert latest.checkpoint_id == "b"


@pytest.fixture
async def cluster_redis() -> AsyncIterator[RedisCheckpointStorage]:
    async with (
        redis_servers.server_store(redis_servers.shared_cluster().url) as maker,
        maker() as storage,
    ):
        yield storage


@pytest.mark.redis_cluster
@pytest.mark.parametrize(
    ("case", "what", "reads", "match", "error"), REDIS_CASES, ids=[c[0] for c in REDIS_CASES]
)
async def test_redis_values_that_are_not_text_are_reported_on_a_cluster(
    cluster_redis: RedisCheckpointStorage,
    case: str,
    what: str,
    reads: list[str],
    match: str,
    error: type[Exception],
) -> None:
    await _redis_case(cluster_redis, what, reads, match, error)


async def _digest_not_utf8(storage: RedisCheckpointStorage) -> None:
    """Saving an id again compares digests: a stored digest that is not UTF-8 names the record."""
    checkpoint = WorkflowCheckpoint("wf", "sig", checkpoint_id="a", state={})
    await storage.save(checkpoint)
    await storage.backend.client.hset(storage.keys.record("wf", "a"), "d", b"\xff")
    with pytest.raises(CheckpointCorruptedError, match=r"Checkpoint 'a' is corrupted: .* malformed digest"):
        await storage.save(checkpoint)
    with pytest.raises(CheckpointCorruptedError, match=r"Checkpoint 'a' is corrupted: .* malformed digest"):
        await storage.save(checkpoint, expected_latest_id="a")


@pytest.mark.redis
async def test_redis_stored_digest_that_is_not_text_is_reported_on_fakeredis(
    fake_redis: RedisCheckpointStorage,
) -> None:
    await _digest_not_utf8(fake_redis)


@pytest.mark.redis
async def test_redis_stored_digest_that_is_not_text_is_reported(real_redis: RedisCheckpointStorage) -> None:
    await _digest_not_utf8(real_redis)


@pytest.mark.redis_cluster
async def test_redis_stored_digest_that_is_not_text_is_reported_on_a_cluster(
    cluster_redis: RedisCheckpointStorage,
) -> None:
    await _digest_not_utf8(cluster_redis)


@pytest.mark.redis_cluster
async def test_cluster_location_pointer_that_is_not_text_is_reported(
    cluster_redis: RedisCheckpointStorage,
) -> None:
    """On a cluster every read by id first follows the id's location pointer from the client."""
    await _save_two(cluster_redis)
    await cluster_redis.backend.client.set(cluster_redis.keys.location("b"), b"\xff")
    for read in ("load", "checkpoint_info", "walk_ancestry_ids", "list_nested"):
        await _expect(
            cluster_redis,
            read,
            CheckpointCorruptedError,
            r"Checkpoint 'b' is corrupted: its index entry has a malformed location pointer b'\\xff'",
        )


# --------------------------------------------------------------------- ids no save could write


@pytest.mark.parametrize(
    ("listed", "named", "reason"),
    [
        (["a", "b\x00"], "b\x00", "contains a control character"),
        (["a", "\x85b"], "\x85b", "contains a control character"),
        (["a", "b\ud800"], "b\ud800", "contains a surrogate character"),
        (["a", "x" * 257], "x" * 256, "is 257 characters long"),
        (["a", ""], "", "must not be empty"),
        (["a", 7], "7", "must be a str, not int"),
    ],
)
def test_a_listing_holding_an_id_no_save_could_write_is_corruption(
    listed: list[Any], named: str, reason: str
) -> None:
    with pytest.raises(CheckpointCorruptedError) as caught:
        listed_ids(listed, "the index of workflow 'wf'")
    assert caught.value.checkpoint_id == named
    assert caught.value.reason.startswith("the index of workflow 'wf' lists it, and it " + reason)


def test_a_listing_of_ids_saves_can_write_is_returned_as_it_is() -> None:
    ids = ["a", "é-ü", "space between", "x" * 256, "\u00a0nbsp", "emoji-\U0001f600"]
    assert listed_ids(ids, "the index") is ids


async def test_a_memory_subclass_listing_ids_of_its_own_gets_them_checked() -> None:
    # The memory backend's listing is a CheckedIds (only its own checked saves write its index),
    # which the engine does not check again; a subclass that lists ids its own way is checked as
    # any backend is.
    from storages.backend import CheckedIds
    from storages.engine import CheckpointStore
    from storages.memory import MemoryBackend

    class OwnListing(MemoryBackend):
        async def list_ids(
            self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
        ) -> list[str]:
            return ["a", "b\x07"]

    assert type(await MemoryBackend().list_ids("wf", None)) is CheckedIds
    with pytest.raises(CheckpointCorruptedError, match="the index of workflow 'wf' lists it"):
        await CheckpointStore(OwnListing()).list_checkpoint_ids(workflow_name="wf")
