"""verify, inspect and diff only read, on every backend, and so does copy of its source: each
built-in storage's ``read_only_handle()`` creates nothing (no SQLite file, no PostgreSQL schema
or table, no S3 bucket or probe object), refuses a store that does not exist (exit status 3, as
for one that holds nothing) and refuses every write, at the server where the server can.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import psycopg
import pytest
import redis_servers

from storages import (
    S3CheckpointStorage,
    StorageConfigurationError,
    StorageUnavailableError,
    StoreNotFoundError,
    WorkflowCheckpoint,
    open_storage,
)
from storages.tools.cli.main import main

READ_ONLY_COMMANDS = (
    ["verify", "{url}"],
    ["verify", "{url}", "--json"],
    ["inspect", "{url}"],
    ["inspect", "{url}", "flow"],
    ["inspect", "{url}", "--checkpoint", "c1"],
    ["diff", "{url}", "c1", "c2"],
    ["copy", "{url}", "memory://"],
)


def _exits_3_writing_nothing(url: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Every read-only command on ``url`` exits 3 with one line on stderr and nothing on stdout."""
    said = []
    for command in READ_ONLY_COMMANDS:
        status = main([part.format(url=url) for part in command])
        out, err = capsys.readouterr()
        assert (status, out) == (3, ""), (command, out, err)
        assert err.startswith("checkpoint-storages: nothing there: "), err
        assert err.count("\n") == 1, err
        said.append(err)
    return said


async def _two_checkpoints(url: str) -> None:
    async with open_storage(url) as storage:
        await storage.save(WorkflowCheckpoint("flow", "sig", "c1", state={"n": 1}))
        await storage.save(WorkflowCheckpoint("flow", "sig", "c2", "c1", state={"n": 2}))


# ---------------------------------------------------------------------- SQLite


@pytest.mark.sqlite
def test_sqlite_a_missing_or_empty_file_is_refused_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.db"
    said = _exits_3_writing_nothing(f"sqlite:///{missing}", capsys)
    assert all("no such file" in line for line in said)
    assert sorted(tmp_path.iterdir()) == []
    empty = tmp_path / "empty.db"
    empty.touch()  # a file, but no store: no tables of ours
    said = _exits_3_writing_nothing(f"sqlite:///{empty}", capsys)
    assert all("holds no checkpoint storage" in line for line in said)
    assert empty.read_bytes() == b""
    assert main(["verify", f"sqlite:///{tmp_path}"]) == 2  # a directory: said so, not "disk I/O error"
    assert "is a directory, not a SQLite file" in capsys.readouterr().err


# ---------------------------------------------------------------------- PostgreSQL


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as connection:
        return {row[0] for row in connection.execute("SELECT nspname FROM pg_namespace").fetchall()}


def _tables(url: str, schema: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s",
            (schema,),
        ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.postgres
def test_postgres_a_schema_that_does_not_exist_is_refused_never_created(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import postgres_servers

    base = postgres_servers.run_database_url()
    schema = f"typo_{uuid.uuid4().hex[:10]}"
    said = _exits_3_writing_nothing(postgres_servers.with_schema(base, schema), capsys)
    assert all(f"schema '{schema}' does not exist" in line for line in said)
    assert schema not in _schemas(base)

    # A schema that exists, named with a table prefix that holds no store: refused, no table made.
    with psycopg.connect(base, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    try:
        url = postgres_servers.with_schema(base, schema) + "&table_prefix=typo_"
        said = _exits_3_writing_nothing(url, capsys)
        assert all("holds no checkpoint tables with table_prefix 'typo_'" in line for line in said)
        assert _tables(base, schema) == set()
    finally:
        asyncio.run(postgres_servers.drop_schema(base, schema))


@pytest.mark.postgres
async def test_postgres_a_read_only_handle_reads_and_the_server_refuses_its_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import postgres_servers

    from storages.postgres.backend import PostgresBackend

    base = postgres_servers.run_database_url()
    schema = postgres_servers.fresh_schema("ro")
    url = postgres_servers.with_schema(base, schema)
    await _two_checkpoints(url)
    try:
        async with open_storage(url).read_only_handle() as reader:
            assert reader.read_only
            listed = await reader.list_checkpoints(workflow_name="flow")
            assert [checkpoint.checkpoint_id for checkpoint in listed] == ["c1", "c2"]
            with pytest.raises(StorageConfigurationError, match="opened read-only"):
                await reader.save(WorkflowCheckpoint("flow", "sig", "c3", "c2"))
            # Past our own refusal, the server's: every transaction of the handle is read-only.
            monkeypatch.setattr(PostgresBackend, "_refuse_if_read_only", lambda self, operation: None)
            with pytest.raises(StorageUnavailableError, match="read-only transaction"):
                await reader.save(WorkflowCheckpoint("flow", "sig", "c3", "c2"))
        async with open_storage(url) as writer:
            assert await writer.list_checkpoint_ids(workflow_name="flow") == ["c1", "c2"]
    finally:
        await postgres_servers.drop_schema(base, schema)


# ---------------------------------------------------------------------- Redis


@pytest.mark.redis
def test_redis_a_prefix_that_holds_nothing_is_not_no_problems(capsys: pytest.CaptureFixture[str]) -> None:
    prefix = redis_servers.fresh_prefix("typo")
    url = redis_servers.with_query(redis_servers.redis_url(), prefix=prefix)
    said = _exits_3_writing_nothing(url, capsys)
    assert all(f"(prefix '{prefix}') holds no checkpoint" in line for line in said)

    async def keys() -> list[bytes]:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(redis_servers.redis_url())
        try:
            return [key async for key in client.scan_iter(match=f"{prefix}*")]
        finally:
            await client.aclose()

    assert asyncio.run(keys()) == []  # nothing was written under the prefix


@pytest.mark.redis
@pytest.mark.parametrize("database", ["abc", "0x1", "1/2", "-1"])
def test_redis_a_database_that_is_not_a_number_is_refused(
    database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # redis-py ignores a path it cannot read as a number: database 0, silently.
    assert main(["verify", f"redis://127.0.0.1:6379/{database}"]) == 2
    assert "the path names the database, a number" in capsys.readouterr().err
    with pytest.raises(StorageConfigurationError, match="names the database"):
        open_storage(f"redis://127.0.0.1:6379/{database}")


@pytest.mark.redis
async def test_redis_a_read_only_handle_refuses_every_write() -> None:
    prefix = redis_servers.fresh_prefix("ro")
    url = redis_servers.with_query(redis_servers.redis_url(), prefix=prefix)
    await _two_checkpoints(url)
    try:
        async with open_storage(url).read_only_handle() as reader:
            assert reader.read_only
            assert reader.new_handle().read_only
            assert await reader.list_checkpoint_ids(workflow_name="flow") == ["c1", "c2"]
            for write in (
                reader.save(WorkflowCheckpoint("flow", "sig", "c3", "c2")),
                reader.delete("c1"),
                reader.prune(workflow_name="flow", keep_last=1),
                reader.delete_workflow(workflow_name="flow"),
            ):
                with pytest.raises(StorageConfigurationError, match="opened read-only"):
                    await write
            assert await reader.list_checkpoint_ids(workflow_name="flow") == ["c1", "c2"]
    finally:
        await redis_servers.wipe(redis_servers.redis_url(), prefix)


# ---------------------------------------------------------------------- S3


@pytest.mark.s3
def test_s3_a_missing_bucket_or_empty_prefix_is_refused_creating_and_probing_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import s3_support

    from storages.s3.client import S3Client

    endpoint = s3_support.server_endpoint()
    s3_support.make_client(endpoint).create_bucket(Bucket=s3_support.BUCKET)  # a no-op when it is there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    bucket = f"typo-{uuid.uuid4().hex[:10]}"
    missing = f"s3://{bucket}/p?endpoint_url={endpoint}&region=us-east-1"
    empty = f"s3://{s3_support.BUCKET}/{uuid.uuid4().hex}?endpoint_url={endpoint}&region=us-east-1"
    asyncio.run(
        _two_checkpoints(f"s3://{s3_support.BUCKET}/ro-full?endpoint_url={endpoint}&region=us-east-1")
    )

    async def writes(*args: object, **kwargs: object) -> None:
        raise AssertionError("a read-only handle wrote to the store")

    for method in ("verify_conditional_writes", "put", "delete_keys"):
        monkeypatch.setattr(S3Client, method, writes)
    said = _exits_3_writing_nothing(missing, capsys)
    assert all(f"bucket '{bucket}' does not exist" in line for line in said)
    assert bucket not in {b["Name"] for b in s3_support.make_client(endpoint).list_buckets()["Buckets"]}
    said = _exits_3_writing_nothing(empty, capsys)
    assert all("holds no checkpoint" in line for line in said)
    full = f"s3://{s3_support.BUCKET}/ro-full?endpoint_url={endpoint}&region=us-east-1"
    assert main(["verify", full]) == 0
    assert main(["diff", full, "c1", "c2", "--json"]) == 0
    capsys.readouterr()


@pytest.mark.s3
async def test_s3_a_read_only_handle_refuses_writes() -> None:
    import s3_support

    async with s3_support.s3_store(server=False) as store:
        async with store.storage() as writer:
            await writer.save(WorkflowCheckpoint("flow", "sig", "c1"))
        async with store.storage().read_only_handle() as reader:
            assert reader.read_only
            assert await reader.list_checkpoint_ids(workflow_name="flow") == ["c1"]
            with pytest.raises(StorageConfigurationError, match="opened read-only"):
                await reader.save(WorkflowCheckpoint("flow", "sig", "c2", "c1"))
            with pytest.raises(StorageConfigurationError, match="opened read-only"):
                await reader.delete("c1")
        elsewhere = S3CheckpointStorage("no-such-bucket-here", "p", client=store.client).read_only_handle()
        with pytest.raises(StoreNotFoundError, match="bucket 'no-such-bucket-here' does not exist"):
            await elsewhere.list_workflows()
        await elsewhere.aclose()


# ---------------------------------------------------------------------- memory


@pytest.mark.memory
def test_memory_holds_nothing_in_a_new_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "memory://"]) == 3
    assert "memory:// holds no checkpoint" in capsys.readouterr().err
