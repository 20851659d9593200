"""The CLI against real servers: a password-protected Redis, and moto's S3 server on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis_servers
from redis.asyncio import Redis

from conformance.cli import main
from storages.redis import delete_prefix

PASSWORD = "secretpw-do-not-print"


@pytest.fixture
def protected_redis() -> Iterator[redis_servers.RedisServerProcess]:
    """A private redis-server that requires a password (set after start: its PING needs none then)."""
    server = redis_servers.RedisServerProcess()
    server.start()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as connection:
        connection.sendall(f"CONFIG SET requirepass {PASSWORD}\r\n".encode())
        assert connection.recv(64).startswith(b"+OK")
    try:
        yield server
    finally:
        server.stop()


async def _members(port: int, key: bytes) -> list[bytes]:
    client = Redis(host="127.0.0.1", port=port, password=PASSWORD)
    try:
        return list(await client.zrange(key, 0, -1))
    finally:
        await client.aclose()


def _keys(port: int, pattern: str = "*") -> list[bytes]:
    async def scan() -> list[bytes]:
        client = Redis(host="127.0.0.1", port=port, password=PASSWORD)
        try:
            return [key async for key in client.scan_iter(match=pattern)]
        finally:
            await client.aclose()

    return asyncio.run(scan())


@pytest.mark.redis
def test_a_password_url_shows_the_password_nowhere(
    protected_redis: redis_servers.RedisServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path, junit_path = tmp_path / "report.json", tmp_path / "junit.xml"
    url = f"redis://:{PASSWORD}@127.0.0.1:{protected_redis.port}/0?prefix=mine"
    status = main([url, "--clause", "contract", "--json", str(json_path), "--junit-xml", str(junit_path)])
    captured = capsys.readouterr()
    assert status == 0, captured.out + captured.err
    report = json.loads(json_path.read_text(encoding="utf-8"))
    [backend] = report["backends"]
    assert backend["backend"] == f"redis://:***@127.0.0.1:{protected_redis.port}/0?prefix=mine"
    assert backend["summary"]["passed"] > 0
    for text in (captured.out, captured.err, json_path.read_text(), junit_path.read_text()):
        assert PASSWORD not in text
    # The run wrote under a run prefix of its own inside the given one and deleted every workflow
    # it made; what remains are the storage's per-workflow sequence counters, which outlive
    # delete_workflow() by design (a recreated workflow keeps counting up), and the run prefix's
    # workflow index holding only its completeness mark (docs/redis.md, "The workflow index").
    left = _keys(protected_redis.port)
    assert left
    assert all(key.startswith(b"mine:ck-run-") and key.endswith((b":seq", b":workflows")) for key in left), (
        left
    )
    indexes = [key for key in left if key.endswith(b":workflows")]
    assert len(indexes) == 1
    assert asyncio.run(_members(protected_redis.port, indexes[0])) == [b""]


@pytest.mark.redis
def test_a_wrong_password_is_one_connectivity_failure_exit_2_redacted(
    protected_redis: redis_servers.RedisServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path = tmp_path / "report.json"
    url = f"redis://:wrong-{PASSWORD}@127.0.0.1:{protected_redis.port}/0"
    assert main([url, "--json", str(json_path)]) == 2
    captured = capsys.readouterr()
    assert "could not reach the storage" in captured.err
    for text in (captured.out, captured.err, json_path.read_text()):
        assert PASSWORD not in text


@pytest.mark.redis
def test_keep_leaves_the_workflows_under_the_run_prefix(
    protected_redis: redis_servers.RedisServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{protected_redis.port}/0?prefix=kept"
    assert main([url, "--clause", "contract.save_returns_id", "--keep"]) == 0
    keys = _keys(protected_redis.port)
    assert keys
    assert all(key.startswith(b"kept:ck-run-") for key in keys), keys

    async def wipe() -> None:
        client = Redis(host="127.0.0.1", port=protected_redis.port, password=PASSWORD)
        try:
            prefixes = {key.decode().split(":{", 1)[0] for key in keys}
            for prefix in prefixes:
                await delete_prefix(client, prefix)
        finally:
            await client.aclose()

    asyncio.run(wipe())


@pytest.mark.s3
def test_create_bucket_in_an_s3_url_works_through_the_kit(monkeypatch: pytest.MonkeyPatch) -> None:
    from conformance.s3_moto import start_server

    endpoint, stop = start_server()
    try:
        for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
            monkeypatch.setenv(name, value)
        url = f"s3://ckpt-created-by-kit/base?endpoint_url={endpoint}&region=us-east-1&create_bucket=true"
        assert main([url, "--clause", "contract", "--quiet"]) == 0
        client: Any = _client(endpoint)
        client.head_bucket(Bucket="ckpt-created-by-kit")  # the kit's run created it
        listed = client.list_objects_v2(Bucket="ckpt-created-by-kit").get("Contents", [])
        # Every workflow the kit wrote was deleted again (only tombstones may remain, run-prefixed).
        assert all(item["Key"].startswith("base/ck-run-") for item in listed), listed
    finally:
        stop()


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.session.Session().client("s3", endpoint_url=endpoint, region_name="us-east-1")


@pytest.mark.redis
def test_expiry_url_runs_the_expiry_family_on_a_short_lived_store(tmp_path: Path) -> None:
    server = redis_servers.redis_url()
    prefix = redis_servers.fresh_prefix("cli-expiry")
    url = redis_servers.with_query(server, prefix=prefix)
    expiring = redis_servers.with_query(server, prefix=f"{prefix}-expiring", ttl="1")

    def expiry_outcome(*options: str) -> str:
        report = tmp_path / "report.json"
        assert main([url, "--clause", "expiry", "--quiet", "--json", str(report), *options]) == 0
        [result] = json.loads(report.read_text())["backends"][0]["results"]
        return str(result["outcome"])

    try:
        assert expiry_outcome() == "not_applicable"  # the store keeps its records: no ttl to judge
        assert expiry_outcome("--expiry-url", expiring) == "passed"
    finally:
        asyncio.run(redis_servers.wipe(server, prefix))


def test_expiry_url_with_other_than_one_url_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory://", "memory://", "--expiry-url", "memory://?ttl=1"]) == 2
    assert "give exactly one URL with it, not 2" in capsys.readouterr().err
