"""S3 requests whose answer is lost on the wire: a TCP proxy in front of moto's server lets the
request reach the store, which applies it, and cuts the connection before the answer reaches
the client (tests/fault_proxy.py). botocore sends the request again over a new connection and the
resend meets the request's own effect (412). The storage reads back before it decides another
writer won or the store is misconfigured (docs/s3.md, "Lost answers"); tests/test_s3_lost_answers.py
loses answers in botocore's retry path instead, with another writer acting in between."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from fault_proxy import FaultProxy
from s3_support import BUCKET, s3_store

from conformance.s3_moto import make_client
from storages.contract import WorkflowCheckpoint
from storages.s3 import S3CheckpointStorage
from storages.tools.verify import verify

pytestmark = pytest.mark.s3


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[FaultProxy, str]]:
    """A proxy in front of moto's server, and a fresh prefix in its bucket."""
    async with s3_store(server=True) as store:
        assert store.endpoint_url is not None
        endpoint = urlsplit(store.endpoint_url)
        with FaultProxy(endpoint.port or 80, endpoint.hostname or "127.0.0.1") as opened:
            yield opened, store.prefix


def storage_through(proxy: FaultProxy, prefix: str) -> S3CheckpointStorage:
    client = make_client(f"http://127.0.0.1:{proxy.port}")
    return S3CheckpointStorage(BUCKET, prefix, client=client)


def checkpoint(previous: WorkflowCheckpoint | None = None, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name="wf",
        graph_signature_hash="sig",
        previous_checkpoint_id=None if previous is None else previous.checkpoint_id,
        **fields,
    )


def put_of(key: str) -> bytes:
    """The start of the request line of a PutObject of ``key`` (path-style, as botocore sends
    it to a local endpoint)."""
    return f"PUT /{BUCKET}/{key}".encode()


async def test_a_fenced_save_whose_swap_answer_was_cut_commits_once(proxy: tuple[FaultProxy, str]) -> None:
    proxy, prefix = proxy
    first, second = checkpoint(), None
    async with storage_through(proxy, prefix) as storage:
        await storage.save(first, expected_latest_id=None)
        second = checkpoint(first)
        with proxy.losing_answers(put_of(f"{prefix}/w/wf/head")):
            assert await storage.save(second, expected_latest_id=first.checkpoint_id) == second.checkpoint_id
        listed = [c.checkpoint_id for c in await storage.list_checkpoints(workflow_name="wf")]
        assert listed == [first.checkpoint_id, second.checkpoint_id]
        latest = await storage.get_latest(workflow_name="wf")
        assert latest is not None
        assert latest.checkpoint_id == second.checkpoint_id
        # The same save again is a no-op; the next fenced save goes on from it.
        assert await storage.save(second, expected_latest_id=second.checkpoint_id) == second.checkpoint_id
        third = checkpoint(second)
        assert await storage.save(third, expected_latest_id=second.checkpoint_id) == third.checkpoint_id
        report = await verify(storage)
        assert report.ok, report


async def test_the_open_probe_whose_create_answer_was_cut_accepts_the_store(
    proxy: tuple[FaultProxy, str],
) -> None:
    proxy, prefix = proxy
    saved = checkpoint()
    with proxy.losing_answers(put_of(f"{prefix}/probe/")):
        async with storage_through(proxy, prefix) as storage:
            assert await storage.save(saved) == saved.checkpoint_id
    async with storage_through(proxy, prefix) as storage:
        loaded = await storage.load(saved.checkpoint_id)
        assert loaded.checkpoint_id == saved.checkpoint_id
