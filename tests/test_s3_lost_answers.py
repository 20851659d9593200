"""S3 requests whose answer is lost after the store applied them: botocore sends them again and
the resend is refused (412) by the request's own effect. Each protocol reads back before it
decides another writer won or the store is misconfigured (docs/s3.md, "Lost answers")."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from s3_support import BUCKET, LostAnswers, S3Store, s3_store, server_endpoint

from conformance.s3_moto import make_client
from storages.contract import WorkflowCheckpoint
from storages.errors import CheckpointCorruptedError
from storages.s3 import S3CheckpointStorage, escape_component
from storages.tools.cli.main import main as cli_main

pytestmark = pytest.mark.s3


@pytest.fixture(params=["in-process", "server"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[S3Store]:
    async with s3_store(server=request.param == "server") as opened:
        yield opened


def checkpoint(previous: WorkflowCheckpoint | None = None, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="sig",
        previous_checkpoint_id=None if previous is None else previous.checkpoint_id,
        **fields,
    )


def ids(items: list[WorkflowCheckpoint]) -> list[str]:
    return [item.checkpoint_id for item in items]


async def test_a_fenced_save_whose_swap_answer_was_lost_keeps_its_committed_record(store: S3Store) -> None:
    """A's pointer swap is applied but its answer lost; before botocore's resend, writer B sees the
    pointer ahead, commits A's checkpoint for it and saves its own after it. The resend gets 412:
    A reads back, finds its checkpoint committed, and neither deletes its record nor fails."""
    lost = LostAnswers(store.client)
    first = checkpoint()
    a_save = checkpoint(first)
    b_save = checkpoint(a_save)

    def writer_b() -> None:
        async def save() -> None:
            async with S3CheckpointStorage(BUCKET, store.prefix, client=store.client) as other:
                await other.save(b_save, expected_latest_id=a_save.checkpoint_id)

        asyncio.run(save())

    async with store.storage() as storage:
        await storage.save(first, expected_latest_id=None)
        lost.arm(f"{store.prefix}/w/wf/head", writer_b)
        assert await storage.save(a_save, expected_latest_id=first.checkpoint_id) == a_save.checkpoint_id
        assert lost.lost, "the fault was not injected"
        assert ids(await storage.list_checkpoints(workflow_name="wf")) == ids([first, a_save, b_save])
        latest = await storage.get_latest(workflow_name="wf")
        assert latest is not None
        assert latest.checkpoint_id == b_save.checkpoint_id
        assert await storage.load(a_save.checkpoint_id) == a_save
        after = checkpoint(b_save)
        assert await storage.save(after, expected_latest_id=b_save.checkpoint_id) == after.checkpoint_id


async def test_a_fenced_save_whose_swap_answer_was_lost_commits_once(store: S3Store) -> None:
    """The same lost answer with no other writer: the pointer still names A, so A commits its
    record at the sequence it swapped in, without a second attempt."""
    lost = LostAnswers(store.client)
    first = checkpoint()
    second = checkpoint(first)
    async with store.storage() as storage:
        await storage.save(first, expected_latest_id=None)
        lost.arm(f"{store.prefix}/w/wf/head")
        store.requests.reset()
        assert await storage.save(second, expected_latest_id=first.checkpoint_id) == second.checkpoint_id
        assert lost.lost
        # One record PUT and its group key, the swap and its resend, the order key: no record
        # written again.
        assert store.requests.snapshot()["PutObject"] == 5
        assert ids(await storage.list_checkpoints(workflow_name="wf")) == ids([first, second])


async def test_the_open_probe_whose_create_answer_was_lost_accepts_the_store(store: S3Store) -> None:
    """The probe's create-only PUT is applied, its answer lost, and the resend gets 412: that is
    the probe's own object, not a store ignoring If-None-Match, so the store opens."""
    lost = LostAnswers(store.client)
    lost.arm(f"{store.prefix}/probe/", prefix=True)
    async with store.storage() as storage:
        await storage.save(checkpoint())
    assert lost.lost
    assert lost.lost[0].startswith(f"{store.prefix}/probe/")


def test_verify_reports_an_order_key_without_its_record_and_repair_removes_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The leftover a lost answer used to leave (and a record deleted by hand still leaves): an
    order key whose record is gone wedges the workflow. verify reports it (exit 1), ``--repair``
    removes it and says so (exit 0), and the workflow reads and takes fenced saves again."""
    endpoint = server_endpoint()
    client = make_client(endpoint)
    client.create_bucket(Bucket=BUCKET)
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    url = f"s3://{BUCKET}/{prefix}?endpoint_url={endpoint}&region=us-east-1"
    first = checkpoint()
    gone = checkpoint(first)

    asyncio.run(_save_then_lose(client, prefix, first, gone))
    capsys.readouterr()
    assert cli_main(["inspect", url, "--json"]) == 1  # counted, and named as listed without its record
    (summary,) = json.loads(capsys.readouterr().out)["workflows"]
    assert (summary["checkpoints"], summary["listed_without_record"]) == (2, [gone.checkpoint_id])
    assert cli_main(["verify", url]) == 1
    out = capsys.readouterr().out
    assert "index_without_record" in out
    assert gone.checkpoint_id in out
    assert cli_main(["verify", url, "--repair"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # lines wrap at 80 columns
    # Its order key and its group key.
    assert f"repaired: removed 2 key(s) of lost checkpoint {gone.checkpoint_id!r}" in out
    assert "no problems found" in out
    assert cli_main(["verify", url]) == 0

    async def use() -> None:
        async with S3CheckpointStorage(BUCKET, prefix, client=client) as storage:
            assert ids(await storage.list_checkpoints(workflow_name="wf")) == ids([first])
            latest = await storage.get_latest(workflow_name="wf")
            assert latest == first
            after = checkpoint(first)
            assert await storage.save(after, expected_latest_id=first.checkpoint_id) == after.checkpoint_id
            assert ids(await storage.list_checkpoints(workflow_name="wf")) == ids([first, after])

    asyncio.run(use())
    client.close()


async def _save_then_lose(
    client: Any, prefix: str, first: WorkflowCheckpoint, gone: WorkflowCheckpoint
) -> None:
    async with S3CheckpointStorage(BUCKET, prefix, client=client) as storage:
        await storage.save(first)
        await storage.save(gone)
        client.delete_object(Bucket=BUCKET, Key=f"{prefix}/r/{escape_component(gone.checkpoint_id)}")
        with pytest.raises(CheckpointCorruptedError):
            await storage.list_checkpoints(workflow_name="wf")
