"""Credentials in a storage URL or a driver's message never leave the process: not in an error's
message, args or traceback (its chained causes included), not in a log record, a repr or the
``checkpoint-storages`` output. The kit's report is checked with the kit."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import traceback
from pathlib import Path

import pytest
import redis_servers

from storages import (
    CheckpointStorageError,
    InMemoryCheckpointStorage,
    S3CheckpointStorage,
    StorageConfigurationError,
    StorageUnavailableError,
    WorkflowCheckpoint,
    open_storage,
)
from storages.tools.cli.main import main

SECRET = "hunter2"


def _shown(error: BaseException) -> str:
    """Everything an error can put in front of someone: message, repr, args, its traceback with
    every chained cause, and what survives pickling."""
    return "\n".join(
        [
            str(error),
            repr(error),
            repr(error.args),
            "".join(traceback.format_exception(error)),
            str(pickle.loads(pickle.dumps(error))),
        ]
    )


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://app:{SECRET}@db.example/checkpoints?pool_size=lots",  # a bad option
        f"password={SECRET}",  # not a URL at all
        f"rediss://app:{SECRET}@cache.example:6380/0?ttl=soon",
        f"redis://:{SECRET}@cache.example/0?cluster=maybe",
        f"s3://bucket/run?aws_secret_access_key={SECRET}",
        f"s3://bucket/run?max_workers=many&aws_session_token={SECRET}",
        f"sqlite://app:{SECRET}@host/checkpoints.db",
    ],
)
def test_a_rejected_url_is_never_shown_with_its_credentials(url: str) -> None:
    with pytest.raises(StorageConfigurationError) as caught:
        open_storage(url)
    assert SECRET not in _shown(caught.value)
    assert "***" in str(caught.value)


@pytest.mark.redis
def test_a_url_the_driver_rejects_is_refused_at_open_and_shown_redacted() -> None:
    with pytest.raises(StorageConfigurationError, match="Port could not be cast") as caught:
        open_storage(f"redis://:{SECRET}@cache.example:port/0")
    assert SECRET not in _shown(caught.value)


@pytest.mark.s3
async def test_a_driver_error_quoting_the_endpoint_is_shown_redacted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # botocore's connection errors quote the endpoint URL whole, its userinfo included.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    endpoint = f"http://app:{SECRET}@127.0.0.1:{redis_servers.free_port()}"
    storage = S3CheckpointStorage("bucket", "run", endpoint_url=endpoint, region="us-east-1", max_attempts=1)
    with pytest.raises(StorageUnavailableError) as caught:
        await storage.save(WorkflowCheckpoint("wf", "sig"))
    await storage.aclose()
    error = caught.value
    assert "EndpointConnectionError" in str(error)  # the driver's message is still there, redacted
    assert SECRET not in _shown(error)
    with caplog.at_level(logging.ERROR):
        logging.getLogger("an.application").exception("save failed", exc_info=error)
    assert "save failed" in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.redis
async def test_a_redis_server_that_cannot_be_reached_is_named_without_the_password() -> None:
    storage = open_storage(f"redis://:{SECRET}@127.0.0.1:{redis_servers.free_port()}/0")
    with pytest.raises(StorageUnavailableError) as caught:
        await storage.save(WorkflowCheckpoint("wf", "sig"))
    await storage.aclose()
    assert SECRET not in _shown(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(f"rediss://app:{SECRET}@cache.example:6380/2?prefix=p", marks=pytest.mark.redis),
        pytest.param(f"redis://cache.example/0?password={SECRET}", marks=pytest.mark.redis),
        pytest.param(f"s3://bucket/run?endpoint_url=http://app:{SECRET}@minio:9000", marks=pytest.mark.s3),
    ],
)
def test_reprs_never_show_credentials(url: str) -> None:
    storage = open_storage(url)
    assert SECRET not in repr(storage)
    assert SECRET not in storage.describe()
    assert SECRET not in repr(storage.new_handle())


class _ChattyStorage(InMemoryCheckpointStorage):
    """A storage whose describe() shows its URL whole, as a third-party backend might."""

    def describe(self) -> str:
        return f"chatty://app:{SECRET}@store.example/db?token={SECRET}"


def test_verify_never_shows_a_storage_description_with_credentials(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seeded = _ChattyStorage()
    asyncio.run(seeded.save(WorkflowCheckpoint("wf", "sig")))
    monkeypatch.setattr("storages.tools.cli.common.open_storage", lambda url, **options: seeded.new_handle())
    monkeypatch.setenv("COLUMNS", "200")
    for arguments in (["verify", "memory://", "--json"], ["verify", "memory://"], ["inspect", "memory://"]):
        assert main(arguments) == 0
        out = capsys.readouterr().out
        assert SECRET not in out, arguments
        assert "chatty://app:***@store.example" in out, arguments
    assert main(["verify", "memory://", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["storage"].startswith("chatty://app:***@")


def test_every_error_class_redacts_what_it_is_given() -> None:
    # The wrapping errors redact in their constructors, so a message built anywhere is safe.
    for error in (
        StorageUnavailableError("load", f"redis://:{SECRET}@10.0.0.1:6379/0 refused"),
        StorageConfigurationError(f"bad option in s3://b/p?aws_secret_access_key={SECRET}"),
    ):
        assert isinstance(error, CheckpointStorageError)
        assert SECRET not in _shown(error)


@pytest.fixture(autouse=True)
def _no_real_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # botocore must not read this machine's AWS configuration.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    assert "AWS_PROFILE" not in os.environ
