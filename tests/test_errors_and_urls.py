"""The error hierarchy (ours and MAF's), ``open_storage`` URLs, and what importing the packages costs."""

from __future__ import annotations

import copy
import importlib.util
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpointException

import storages
import storages.errors
from storages import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointStorageError,
    CheckpointTamperedError,
    CheckpointTypeNotAllowedError,
    GraphSignatureMismatchError,
    InMemoryCheckpointStorage,
    InvalidCheckpointError,
    InvalidCheckpointIdError,
    MissingDependencyError,
    NestedCheckpointDeletionError,
    StaleWriterError,
    StorageClosedError,
    StorageConfigurationError,
    StorageUnavailableError,
    StoreNotFoundError,
    UnserializableValueError,
    UnsupportedOperationError,
    WorkflowCheckpoint,
    open_storage,
    supported_schemes,
)
from storages.codec import CheckpointCodec
from storages.errors import (
    BackendEntryPointError,
    BackendRegistrationError,
    ConditionalWritesNotEnforcedError,
    EvictionPolicyError,
)

# One instance of every error class, as the storages raise them.
SAMPLE_ERRORS: list[CheckpointStorageError] = [
    CheckpointNotFoundError("cp-1"),
    CheckpointCorruptedError("cp-1", "checksum mismatch"),
    CheckpointTamperedError("cp-1", "mac_mismatch", "its body is not what was signed"),
    CheckpointTypeNotAllowedError("app.models:Ticket", "cp-1", "checkpoint.state['ticket']"),
    InvalidCheckpointError("bad checkpoint", field="state"),
    InvalidCheckpointIdError("checkpoint_id", "", "must not be empty"),
    UnserializableValueError("pkg:Thing", "checkpoint.state['a']", "not registered"),
    CheckpointTypeNotAllowedError("pkg:Thing", "cp-1"),
    StaleWriterError("wf", "cp-3", "cp-1", "cp-2"),
    CheckpointConflictError("cp-1"),
    CheckpointConflictError(
        "cp-2", "embedded in checkpoint 'cp-1', but a record with this id is already stored"
    ),
    NestedCheckpointDeletionError("cp-2", "cp-1"),
    GraphSignatureMismatchError("cp-1", "expected-sig", "actual-sig"),
    UnsupportedOperationError("memory://", "prune", "prune"),
    StorageUnavailableError("save", "connection refused"),
    StorageClosedError("memory://", "load"),
    StorageConfigurationError("bad url"),
    StoreNotFoundError("postgresql://db/app (schema 'ap')", "schema 'ap' does not exist in database 'app'"),
    ConditionalWritesNotEnforcedError(
        "s3://b/p/ at http://127.0.0.1:9000", "If-None-Match was ignored", "unsafe_single_writer=True"
    ),
    EvictionPolicyError("redis://h:6379/0", "allkeys-lru", None, "any key", "allow_evicting_policy=True"),
    MissingDependencyError("sqlite:// storage", "sqlite", "aiosqlite"),
    BackendRegistrationError(
        "backend 'mine' claims 's3', which is the built-in 's3' backend's", backend="mine"
    ),
    BackendEntryPointError("mine = mine_backend:BACKEND", "mine-backend", "it failed to load: ImportError"),
]


def test_samples_cover_every_exported_error() -> None:
    exported = {getattr(storages.errors, name) for name in storages.errors.__all__}
    assert exported == {type(error) for error in SAMPLE_ERRORS} | {CheckpointStorageError}


@pytest.mark.parametrize("error", SAMPLE_ERRORS, ids=lambda error: type(error).__name__)
def test_every_error_is_a_maf_checkpoint_exception(error: CheckpointStorageError) -> None:
    assert isinstance(error, CheckpointStorageError)
    assert isinstance(error, WorkflowCheckpointException)
    assert str(error) == error.message
    assert error.message
    with pytest.raises(WorkflowCheckpointException):  # how MAF's runner catches storage failures
        raise error


@pytest.mark.parametrize(
    ("error_class", "builtin"),
    [
        (CheckpointNotFoundError, LookupError),
        (InvalidCheckpointError, ValueError),
        (InvalidCheckpointIdError, ValueError),
        (InvalidCheckpointIdError, InvalidCheckpointError),
        (UnserializableValueError, TypeError),
        (UnserializableValueError, InvalidCheckpointError),
        (UnsupportedOperationError, NotImplementedError),
        (StorageConfigurationError, ValueError),
        (MissingDependencyError, ImportError),
    ],
)
def test_errors_are_also_the_builtin_exception_callers_expect(
    error_class: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error_class, builtin)


@pytest.mark.parametrize("error", SAMPLE_ERRORS, ids=lambda error: type(error).__name__)
def test_errors_survive_pickling_and_copying(error: CheckpointStorageError) -> None:
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert type(clone) is type(error)
        assert str(clone) == str(error)
        assert clone.args == error.args
        assert vars(clone) == vars(error)


def test_errors_carry_what_they_are_about() -> None:
    corrupted = CheckpointCorruptedError("cp-1", "checksum mismatch")
    assert (corrupted.checkpoint_id, corrupted.reason) == ("cp-1", "checksum mismatch")
    assert "'cp-1'" in str(corrupted)
    invalid = InvalidCheckpointIdError("workflow_name", "x" * 300, "too long")
    assert invalid.field == "workflow_name"
    assert len(str(invalid)) < 150  # long values are shortened in the message
    missing = MissingDependencyError("sqlite:// storage", "sqlite", "aiosqlite")
    assert "pip install 'checkpoint-storages[sqlite]'" in str(missing)


def test_not_found_message_is_mafs_exactly() -> None:
    # MAF's storages say exactly this; code and tests written against MAF match on it.
    assert str(CheckpointNotFoundError("0b7c-42")) == "No checkpoint found with ID 0b7c-42"


async def test_a_missing_checkpoint_reads_as_mafs_not_found() -> None:
    async with InMemoryCheckpointStorage() as storage:
        with pytest.raises(WorkflowCheckpointException, match=r"^No checkpoint found with ID nope$"):
            await storage.load("nope")


def test_a_refused_type_is_not_corruption_and_says_how_to_allow_it() -> None:
    refused = CheckpointTypeNotAllowedError("app.models:Ticket", "cp-1", "checkpoint.state['ticket']")
    assert not isinstance(refused, CheckpointCorruptedError)
    assert str(refused).startswith("Checkpoint deserialization blocked for type 'app.models:Ticket'")
    assert "'cp-1'" in str(refused)
    assert "checkpoint.state['ticket']" in str(refused)
    assert "allowed_checkpoint_types=['app.models:Ticket']" in str(refused)
    assert "URL option allowed_checkpoint_types=app.models:Ticket" in str(refused)
    assert (refused.type_key, refused.checkpoint_id, refused.path) == (
        "app.models:Ticket",
        "cp-1",
        "checkpoint.state['ticket']",
    )
    bare = CheckpointTypeNotAllowedError("app.models:Ticket")
    assert (bare.checkpoint_id, bare.path) == (None, None)
    assert str(bare).startswith("Checkpoint deserialization blocked for type 'app.models:Ticket'. ")


# ---------------------------------------------------------------------------- open_storage


async def test_memory_urls_open_fresh_private_stores() -> None:
    first, second = open_storage("memory://"), open_storage("MEMORY://")
    assert type(first) is InMemoryCheckpointStorage
    assert type(second) is InMemoryCheckpointStorage
    async with first, second:
        await first.save(WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", checkpoint_id="a"))
        assert await second.list_checkpoint_ids(workflow_name="wf") == []


def test_options_reach_the_backend() -> None:
    codec = CheckpointCodec()
    assert open_storage("memory://", codec=codec).codec is codec


async def test_sqlite_relative_url_is_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with open_storage("sqlite:///rel.db") as storage:
        await storage.save(
            WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", checkpoint_id="a")
        )
    assert (tmp_path / "rel.db").is_file()
    async with open_storage(f"sqlite:///{tmp_path / 'rel.db'}") as reopened:  # same file, absolute
        assert await reopened.list_checkpoint_ids(workflow_name="wf") == ["a"]


async def test_sqlite_absolute_url_ignores_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    target = tmp_path / "data" / "abs.db"
    url = f"sqlite:///{target}"
    assert url.startswith("sqlite:////")
    async with open_storage(url) as storage:
        await storage.save(
            WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", checkpoint_id="a")
        )
    assert target.is_file()
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("url", ["nosuchdb://x", "ftp://host/file", "://nothing", "mysql://u@h/db"])
def test_unknown_scheme_lists_the_supported_ones(url: str) -> None:
    with pytest.raises(StorageConfigurationError) as caught:
        open_storage(url)
    assert isinstance(caught.value, ValueError)
    assert {"memory", "sqlite"} <= set(supported_schemes())
    for scheme in supported_schemes():
        assert f"{scheme}://" in str(caught.value)


@pytest.mark.parametrize("not_a_url", ["memory", "", "/tmp/checkpoints.db", "sqlite:relative.db", None, 42])
def test_non_urls_are_configuration_errors(not_a_url: Any) -> None:
    with pytest.raises(StorageConfigurationError, match="memory://"):
        open_storage(not_a_url)


def test_a_python_without_sqlite3_is_told_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real_find_spec = importlib.util.find_spec

    def without_sqlite3(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "sqlite3" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_sqlite3)
    with pytest.raises(MissingDependencyError) as caught:
        open_storage(f"sqlite:///{tmp_path}/t.db")
    assert (caught.value.extra, caught.value.module) == (None, "sqlite3")
    assert "standard library's 'sqlite3' module" in str(caught.value)
    assert "pip install" not in str(caught.value)  # no package brings it back
    assert not (tmp_path / "t.db").exists()


def test_missing_redis_names_the_redis_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def without_redis(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "redis" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_redis)
    with pytest.raises(MissingDependencyError) as caught:
        open_storage("redis://127.0.0.1:6379/0")
    assert (caught.value.extra, caught.value.module) == ("redis", "redis")
    assert "pip install 'checkpoint-storages[redis]'" in str(caught.value)


# Every scheme's URL options are checked when the storage is built, not at its first use.
UNKNOWN_OPTION_URLS = {
    "memory": ("memory://?bogus=1", "allowed_checkpoint_types, allowed_modules"),
    "sqlite": ("sqlite:///{dir}/t.db?bogus=1", "busy_timeout_ms"),
    "redis": ("redis://127.0.0.1:6379/0?prefix=p&bogus=1", "prefix, protocol, retry_on_timeout"),
    "rediss": ("rediss://127.0.0.1:6379/0?bogus=1", "ssl_cert_reqs"),
    "redis-cluster": ("redis://127.0.0.1:7000/0?cluster=true&bogus=1", "cluster"),
    "s3": ("s3://a-bucket/p?bogus=1", "endpoint_url"),
}


@pytest.mark.parametrize("scheme", UNKNOWN_OPTION_URLS)
def test_an_unknown_url_option_fails_at_open_listing_the_valid_ones(scheme: str, tmp_path: Path) -> None:
    template, listed = UNKNOWN_OPTION_URLS[scheme]
    with pytest.raises(StorageConfigurationError, match="unknown option 'bogus'; valid options: ") as caught:
        open_storage(template.format(dir=tmp_path))
    # Each name, not a run of them: the driver's own options change between its releases
    # (redis-py 8.2 added retry_on_error between protocol and retry_on_timeout).
    valid = str(caught.value).split("valid options: ", 1)[1].split(", ")
    assert set(listed.split(", ")) <= set(valid), valid
    assert not (tmp_path / "t.db").exists()


def test_an_unknown_url_option_in_a_url_with_a_password_does_not_show_it() -> None:
    with pytest.raises(StorageConfigurationError, match="unknown option") as caught:
        open_storage("redis://user:hunter2@127.0.0.1:6379/0?bogus=1")
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memory://somehost/path?x=1", "names a host or path"),
        ("memory:///path", "names a host or path"),
        ("redis://127.0.0.1:6379/0?db=first", "Invalid value for 'db'"),
        ("redis://127.0.0.1:6379/0?ssl_cert_reqs=none", "unknown option 'ssl_cert_reqs'"),  # TLS only
        ("redis://127.0.0.1:6379/0?timeout=3", "unknown option 'timeout'"),  # wait_seconds here
        ("redis://127.0.0.1:7000/0?cluster=true&wait_seconds=3", "unknown option 'wait_seconds'"),
        ("s3://Not_A..Bucket/p", "Invalid S3 bucket name"),
        ("s3://-bucket/p", "Invalid S3 bucket name"),
        ("s3://ab/p", "Invalid S3 bucket name"),
        ("s3://a-bucket/p?create_bucket=maybe", "create_bucket"),
    ],
)
def test_bad_names_and_values_fail_at_open(url: str, message: str) -> None:
    with pytest.raises(StorageConfigurationError, match=message):
        open_storage(url)


@pytest.mark.parametrize(
    "url",
    [
        "memory://",
        "sqlite:///{dir}/t.db?busy_timeout_ms=250",
        "redis://127.0.0.1:6379/0?prefix=p&ttl=5&wait_seconds=2&socket_timeout=1&db=3",
        "rediss://127.0.0.1:6379/0?ssl_cert_reqs=none&ssl_check_hostname=false",
        "redis://127.0.0.1:7000/0?cluster=true&max_connections=8",
        "s3://a-bucket/p?region=eu-west-1&create_bucket=false&max_workers=2",
    ],
)
def test_valid_url_options_are_accepted(url: str, tmp_path: Path) -> None:
    open_storage(url.format(dir=tmp_path))


def test_sqlite_takes_its_busy_timeout_from_the_url_unless_a_keyword_says_otherwise(tmp_path: Path) -> None:
    from storages.sqlite import SQLiteCheckpointStorage

    url = f"sqlite:///{tmp_path}/t.db?busy_timeout_ms=250"
    assert SQLiteCheckpointStorage.from_url(url).busy_timeout_ms == 250
    assert SQLiteCheckpointStorage.from_url(url, busy_timeout_ms=9).busy_timeout_ms == 9
    assert SQLiteCheckpointStorage.from_url(url).path == tmp_path / "t.db"


@pytest.mark.parametrize(
    "url",
    [
        "memory://?shared_option=x",
        "sqlite:///{dir}/t.db?shared_option=x",
        "redis://127.0.0.1:6379/0?shared_option=x",
        "redis://127.0.0.1:7000/0?cluster=true&shared_option=x",
        "s3://a-bucket/p?shared_option=x",
    ],
)
def test_a_common_url_option_is_taken_by_every_scheme(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import storages.query_options

    monkeypatch.setattr(storages.query_options, "COMMON_URL_OPTIONS", ("shared_option",))
    open_storage(url.format(dir=tmp_path))
    if url.startswith("redis"):
        from storages.redis import _driver_url

        assert "shared_option" not in _driver_url(url)  # never handed to redis-py


# ---------------------------------------------------------------------------- import cost


IMPORT_PROBE = """
import json, os, socket, sys

class RefusedSocket(socket.socket):
    def __init__(self, *args, **kwargs):
        raise AssertionError("a socket was opened at import time")

socket.socket = RefusedSocket
import {module}
print(json.dumps({{"modules": sorted(sys.modules), "files": sorted(os.listdir("."))}}))
"""


def import_in_subprocess(module: str, cwd: Path) -> dict[str, list[str]]:
    """Import ``module`` in a fresh interpreter (sockets refused) in ``cwd``; its modules and files."""
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE.format(module=module)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded: dict[str, list[str]] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


BACKEND_DEPENDENCIES = {
    "aiosqlite",
    "sqlite3",
    "redis",
    "boto3",
    "botocore",
    "zstandard",
    "fakeredis",
    "moto",
}


def top_level(modules: list[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_importing_storages_loads_no_backend_dependency(tmp_path: Path) -> None:
    loaded = import_in_subprocess("storages", tmp_path)
    assert "storages" in loaded["modules"]
    assert top_level(loaded["modules"]) & (BACKEND_DEPENDENCIES | {"rich", "pydantic"}) == set()
    assert loaded["files"] == []


@pytest.mark.parametrize("module", ["conformance", "conformance.pytest_plugin"])
def test_importing_the_kit_loads_no_backend_and_touches_nothing(tmp_path: Path, module: str) -> None:
    loaded = import_in_subprocess(module, tmp_path)
    assert module in loaded["modules"]
    assert top_level(loaded["modules"]) & BACKEND_DEPENDENCIES == set()
    assert loaded["files"] == []


def test_the_sqlite_backend_loads_lazily_on_attribute_access(tmp_path: Path) -> None:
    probe = "import sys, storages; storages.SQLiteCheckpointStorage; print('sqlite3' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        storages.NoSuchThing  # noqa: B018
