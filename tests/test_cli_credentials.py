"""A secret given in a URL never reaches any output of either command line: every command of
``checkpoint-storages`` (verify, inspect, inspect --html, diff, copy from and into, import-maf)
and ``checkpoint-conformance``, every scheme, every error path: a URL its parser refuses (an S3
bucket name built from ``user:password@host``, a Redis database that is not a number, a port
that is not one, an option that is not known or has no value), a server that cannot be reached
or refuses the credentials, a store that does not exist. Output is checked folded (newlines and
table borders removed) at 80 and 200 columns, so a secret split across lines is found too.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

import pytest
import redis_servers

from storages import WorkflowCheckpoint, open_storage
from storages.tools.cli.main import main

SECRET = f"Zq{uuid.uuid4().hex[:10]}Xy"
"""A password: random, so that only a leak could put it in the output."""
FREE_PORT = redis_servers.free_port()
PG = f"postgresql://app:{SECRET}@127.0.0.1:5432"

# (id, URL with the secret in it, marks): every scheme, and each way its URL can be refused.
URLS = [
    ("sqlite-host", f"sqlite://app:{SECRET}@host/x.db", (pytest.mark.sqlite,)),
    ("sqlite-option", f"sqlite:///x.db?password={SECRET}", (pytest.mark.sqlite,)),
    ("sqlite-token-value", f"sqlite:///x.db?busy_timeout_ms={SECRET}&token={SECRET}", (pytest.mark.sqlite,)),
    ("memory-host", f"memory://app:{SECRET}@host", (pytest.mark.sqlite,)),
    ("unknown-scheme", f"ftp://app:{SECRET}@example.com/x", (pytest.mark.sqlite,)),
    ("no-scheme", f"app:{SECRET}@example.com/x", (pytest.mark.sqlite,)),
    ("raw-at-in-password", f"redis://app:{SECRET}@x@127.0.0.1:{FREE_PORT}/0", (pytest.mark.redis,)),
    ("redis-database", f"redis://app:{SECRET}@127.0.0.1:6379/abc", (pytest.mark.redis,)),
    ("redis-port", f"redis://:{SECRET}@127.0.0.1:port/0", (pytest.mark.redis,)),
    ("redis-option", f"redis://:{SECRET}@127.0.0.1:6379/0?ttl=soon", (pytest.mark.redis,)),
    ("redis-unreachable", f"redis://:{SECRET}@127.0.0.1:{FREE_PORT}/0", (pytest.mark.redis,)),
    ("redis-refused-login", f"redis://nobody:{SECRET}@127.0.0.1:6379/0", (pytest.mark.redis,)),
    ("s3-userinfo-bucket", f"s3://KEY:{SECRET}@bucket/p", (pytest.mark.s3,)),
    ("s3-option", f"s3://bucket/p?aws_secret_access_key={SECRET}", (pytest.mark.s3,)),
    (
        "s3-endpoint",
        f"s3://bucket/p?endpoint_url=http://app:{SECRET}@127.0.0.1:{FREE_PORT}&max_attempts=1",
        (pytest.mark.s3,),
    ),
    (
        "postgres-option",
        f"postgresql://app:{SECRET}@127.0.0.1:5432/x?pool_size=lots",
        (pytest.mark.postgres,),
    ),
    (
        "postgres-schema",
        f"postgresql://app:{SECRET}@127.0.0.1:5432/x?schema=Bad-Name",
        (pytest.mark.postgres,),
    ),
    (
        "postgres-unreachable",
        f"postgresql://app:{SECRET}@127.0.0.1:{FREE_PORT}/x?retries=0",
        (pytest.mark.postgres,),
    ),
    (
        "postgres-no-database",
        f"postgresql://postgres:{SECRET}@127.0.0.1:5432/no_such_db_{uuid.uuid4().hex[:6]}?retries=0",
        (pytest.mark.postgres,),
    ),
]


def _folded(text: str) -> str:
    """``text`` without whitespace and table borders: a secret folded over lines is whole again."""
    return re.sub(r"[\s│┃|]", "", text)


def _check(outputs: list[str]) -> None:
    for output in outputs:
        assert SECRET not in output
        assert SECRET not in _folded(output)


@pytest.fixture
def good_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/good.db"

    async def seed() -> None:
        async with open_storage(url) as storage:
            await storage.save(WorkflowCheckpoint("flow", "sig", "c1"))
            await storage.save(WorkflowCheckpoint("flow", "sig", "c2", "c1"))

    asyncio.run(seed())
    return url


@pytest.mark.parametrize("columns", ["80", "200"])
@pytest.mark.parametrize("url", [pytest.param(url, id=name, marks=marks) for name, url, marks in URLS])
def test_no_command_shows_a_secret_of_its_url(
    url: str,
    columns: str,
    good_store: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "page.html"
    maf_directory = tmp_path / "maf"
    maf_directory.mkdir()
    (maf_directory / "one.json").write_text("{}", encoding="utf-8")
    commands = [
        ["verify", url],
        ["verify", url, "--json"],
        ["inspect", url],
        ["inspect", url, "--json"],
        ["inspect", url, "flow", "--html", str(page)],
        ["inspect", url, "--checkpoint", "c1"],
        ["diff", url, "c1", "c2", "--json"],
        ["copy", url, "memory://"],
        ["copy", good_store, url],
        ["copy", good_store, url, "--json"],
        ["import-maf", str(maf_directory), url],
    ]
    outputs: list[str] = []
    for command in commands:
        status = main(command)
        captured = capsys.readouterr()
        assert status in (1, 2, 3), (command, captured.out, captured.err)  # an error path, each time
        outputs += [captured.out, captured.err]
    if page.exists():
        outputs.append(page.read_text(encoding="utf-8"))
    _check(outputs)


@pytest.mark.parametrize("url", [pytest.param(url, id=name, marks=marks) for name, url, marks in URLS])
def test_checkpoint_conformance_shows_no_secret_of_its_url(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from conformance.cli import main as conformance_main

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.chdir(tmp_path)
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    status = conformance_main(
        [url, "--clause", "contract.save_returns_id", "--json", str(report), "--junit-xml", str(junit)]
    )
    captured = capsys.readouterr()
    assert status in (1, 2), (captured.out, captured.err)
    _check([captured.out, captured.err, *(path.read_text() for path in (report, junit) if path.exists())])
