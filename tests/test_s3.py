"""The S3 backend: the whole kit on moto in-process and over HTTP, every crash point of a save,
racing conditional writes, injected 409/412/500/503, requests per operation, keys, URLs.

The shared contract tests run on S3 through the ``storage`` fixture (tests/conftest.py); this
module covers what is specific to object storage.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from s3_support import BUCKET, HeaderDroppingProxy, S3Store, s3_store, server_endpoint

from conformance import BackendReport, Outcome, StorageTarget, avalidate
from conformance.builtin import BUILTIN_BACKENDS, builtin_target
from conformance.cli import main as conformance_main
from conformance.embedded import S3_MOTO
from conformance.faults import SimulatedCrash
from conformance.s3_moto import FAKE_CREDENTIALS, make_client, start_in_process
from storages import open_storage
from storages.contract import Capability, WorkflowCheckpoint
from storages.errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    ConditionalWritesNotEnforcedError,
    StorageConfigurationError,
    StorageUnavailableError,
    UnsupportedOperationError,
)
from storages.s3 import S3Backend, S3CheckpointStorage, escape_component, unescape_component
from storages.s3.layout import Header, KeyLayout

pytestmark = pytest.mark.s3

HTTP_FAULT_CLAUSES = (
    "faults.transient_errors_retried",
    "faults.transient_errors_exhausted",
    "faults.conditional_conflicts_retried",
    "faults.conditional_conflicts_exhausted",
    "faults.crash_between_writes",
    "faults.crash_between_nested_writes",
)


_MANY_WRITERS = "concurrency.many_writers_number_once"
SHARED_SEQUENCES = {_MANY_WRITERS: S3_MOTO.expected_failures[_MANY_WRITERS]}
"""Overlapping saves may share a sequence number on S3 (docs/s3.md, Consistency)."""
SHARED_SEQUENCE_RACES = frozenset({"model.concurrent_histories_linearize"})
"""Clauses racing calls may fail through a shared sequence number (docs/s3.md, Consistency):
whether they do depends on timing, so they may fail but need not."""


def _failures(backend: BackendReport) -> list[tuple[str, str]]:
    """The failures other than the shared-sequence races, as (clause, message)."""
    return [(r.clause_id, r.message) for r in backend.failures if r.clause_id not in SHARED_SEQUENCE_RACES]


@pytest.fixture(params=["in-process", "server"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[S3Store]:
    async with s3_store(server=request.param == "server") as opened:
        yield opened


@pytest.fixture
async def in_process() -> AsyncIterator[S3Store]:
    async with s3_store(server=False) as opened:
        yield opened


def checkpoint(workflow_name: str = "wf", previous: Any = None, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=workflow_name,
        graph_signature_hash=fields.pop("graph_signature_hash", "sig"),
        previous_checkpoint_id=None if previous is None else previous.checkpoint_id,
        **fields,
    )


# ---------------------------------------------------------------------- the kit


# The longest test: 236 s over moto's server at load average 9 on two cores, 787 s at load average
# 10 beside valgrind, so pytest's default 300 s is no margin. It runs over moto's server only: the
# faults are injected in botocore's request path, which is the same whether moto answers in this
# process or over HTTP, and the HTTP path is the one a deployment takes (the in-process store runs
# the whole kit without faults, below, and the default run's fault clauses).
@pytest.mark.slow
@pytest.mark.timeout(1800)
async def test_the_whole_kit_passes_with_every_http_fault_injected() -> None:
    async with s3_store(server=True) as store:
        await _whole_kit_with_every_http_fault(store)


async def _whole_kit_with_every_http_fault(store: S3Store) -> None:
    root = store.storage()
    # Injected faults retry with backoff, and the 300-step walk is one GET per step: on a loaded
    # machine that outlasts the default 30 s, so this target gets twice the time per clause.
    # The model family with an operations budget (no time cap): the whole programs, the 1,030-long
    # history included, which the default run on S3 cuts short.
    target = StorageTarget(
        name="s3",
        factory=root.new_handle,
        faults=store.faults,
        timeout_factor=2.0,
        reopen=store.storage,
        model_budget="1200",
        expected_failures=SHARED_SEQUENCES,
        # One prune of the 1,030-long history is hundreds of requests, each fault retried with
        # backoff: 40 s (the default bound times 2) passed with no answer at load average 10,
        # which is slow, not stuck.
        operation_timeout=120.0,
    )
    try:
        (backend,) = (await avalidate(target)).backends
    finally:
        await root.aclose()
    assert not backend.error, backend.error
    assert _failures(backend) == []
    outcomes = {r.clause_id: r.outcome for r in backend.results}
    assert {clause_id: outcomes[clause_id] for clause_id in HTTP_FAULT_CLAUSES} == dict.fromkeys(
        HTTP_FAULT_CLAUSES, Outcome.PASSED
    )
    # Skipped: the server-process faults (kill -9, cut connections), which need a server process, and
    # what this target gives no way to check: no ttl, no other process, no round-trip counter
    # (uncounted, latest is timed when saves are fast enough, else skipped too; the same holds for
    # the 2,400 saves of history_is_kept).
    skipped = {r.clause_id for r in backend.results if r.outcome is Outcome.SKIPPED}
    skipped -= {"scale.latest_is_constant_cost", "scale.history_is_kept"}
    assert skipped == {
        "faults.server_restart_keeps_acknowledged",
        "faults.connection_cut_whole_or_nothing",
        "expiry.checkpoints_expire_after_ttl",
        "durability.across_processes",
    }
    # Every kind of fault was really injected.
    assert {"500", "503", "409", "412", "crash"} <= set(store.faults.injected)


def test_the_default_kit_run_includes_s3_on_moto() -> None:
    (backend_entry,) = [b for b in BUILTIN_BACKENDS if b.name == "s3 (moto)"]
    report = asyncio.run(avalidate(builtin_target(backend_entry), clauses=["contract", "ordering", "faults"]))
    (backend,) = report.backends
    assert not backend.error, backend.error
    assert backend.failures == [], [(r.clause_id, r.message) for r in backend.failures]
    passed = {r.clause_id for r in backend.results if r.outcome is Outcome.PASSED}
    assert set(HTTP_FAULT_CLAUSES) <= passed


async def test_the_embedded_s3_starts_each_clause_on_an_empty_bucket() -> None:
    target = builtin_target(S3_MOTO)
    try:
        first = await target.open()
        await first.save(WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="g", checkpoint_id="a"))
        await first.aclose()
        assert await target.fresh_store() is True
        second = await target.open()
        assert await second.list_workflows() == []
        with pytest.raises(CheckpointNotFoundError):
            await second.load("a")
        await second.save(WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="g", checkpoint_id="a"))
        rebuilt = target.reopen() if target.reopen is not None else None
        assert rebuilt is not None  # a rebuild opens the store the clause is on, not the first one
        assert await rebuilt.list_checkpoint_ids(workflow_name="wf") == ["a"]
        await rebuilt.aclose()
        await second.aclose()
    finally:
        assert target.cleanup is not None
        await target.cleanup()


def test_the_cli_passes_against_a_moto_server_url(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = server_endpoint()
    make_client(endpoint).create_bucket(Bucket="ckpt-conformance")
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    url = f"s3://ckpt-conformance/cli-run?endpoint_url={endpoint}&region=us-east-1"
    assert conformance_main([url, "--clause", "ordering", "--clause", "nested", "--quiet"]) == 0


# ---------------------------------------------------------------------- crash points


async def test_a_crash_after_each_write_of_a_save_leaves_all_or_nothing(store: S3Store) -> None:
    """A save writes the record and its group key, then the order key (the commit point). Crash
    after each."""
    for crash_after, visible in ((1, False), (2, False), (3, True)):
        workflow_name = f"crash-{crash_after}"
        async with store.storage() as storage:
            first = checkpoint(workflow_name)
            await storage.save(first)
            newest = checkpoint(workflow_name, previous=first)
            with pytest.raises(SimulatedCrash):
                async with store.faults.crash_after_writes(crash_after):
                    await storage.save(newest)
        async with store.storage() as reopened:
            latest = await reopened.get_latest(workflow_name=workflow_name)
            assert latest is not None
            assert latest.checkpoint_id == (newest if visible else first).checkpoint_id, crash_after
            ids = await reopened.list_checkpoint_ids(workflow_name=workflow_name)
            assert ids == [first.checkpoint_id, *([newest.checkpoint_id] if visible else [])]
            if not visible:
                with pytest.raises(CheckpointNotFoundError):
                    await reopened.load(newest.checkpoint_id)
            # Saving again finishes the job once; the next save comes after it.
            assert await reopened.save(newest) == newest.checkpoint_id
            following = checkpoint(workflow_name, previous=newest)
            await reopened.save(following)
            assert await reopened.list_checkpoint_ids(workflow_name=workflow_name) == [
                first.checkpoint_id,
                newest.checkpoint_id,
                following.checkpoint_id,
            ]
            infos = await reopened.list_records(workflow_name=workflow_name)
            assert [i.sequence for i in infos] == sorted({i.sequence for i in infos})  # unique, rising


async def test_a_nested_save_retried_after_a_crash_at_any_write_is_whole(store: S3Store) -> None:
    """Writes of a save with one nested record: nested record, container record, the nested
    workflow's pointer floor, nested order key, container order key. Crash after each, save into
    the nested workflow meanwhile, retry."""
    for crash_after in (1, 2, 3, 4, 5):
        child = WorkflowCheckpoint(f"child-{crash_after}", "sig-child", state={"n": crash_after})
        state = {"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}}
        parent = WorkflowCheckpoint(f"parent-{crash_after}", "sig", state=state)
        async with store.storage() as storage:
            with pytest.raises(SimulatedCrash):
                async with store.faults.crash_after_writes(crash_after):
                    await storage.save(parent)
        async with store.storage() as reopened:
            if crash_after < 5:
                with pytest.raises(CheckpointNotFoundError):
                    await reopened.load(parent.checkpoint_id)
            meanwhile = WorkflowCheckpoint(f"child-{crash_after}", "sig-child")
            await reopened.save(meanwhile)
            assert await reopened.save(parent) == parent.checkpoint_id
            loaded = await reopened.load(parent.checkpoint_id)
            assert loaded.state["_executor_state"]["sub"]["sub_workflow_checkpoint"] == child
            assert await reopened.load(child.checkpoint_id) == child
            assert await reopened.list_nested(parent.checkpoint_id) == [child.checkpoint_id]
            nested_ids = await reopened.list_checkpoint_ids(
                workflow_name=child.workflow_name, include_nested=True
            )
            assert sorted(nested_ids) == sorted([child.checkpoint_id, meanwhile.checkpoint_id])
            latest = await reopened.get_latest(workflow_name=parent.workflow_name)
            assert latest is not None
            assert latest.checkpoint_id == parent.checkpoint_id


async def test_a_crash_after_each_write_of_a_delete_never_lets_a_sequence_go_back(store: S3Store) -> None:
    """Deleting the newest: the pointer floor, the order keys (DeleteObjects), the records. Crash
    after each: the checkpoint is whole or gone, and the next save still numbers above it."""
    for crash_after, gone in ((1, False), (2, True), (3, True)):
        workflow_name = f"delete-crash-{crash_after}"
        async with store.storage() as storage:
            first = checkpoint(workflow_name)
            newest = checkpoint(workflow_name, previous=first)
            await storage.save(first)
            await storage.save(newest)
            (deleted_info,) = [
                i
                for i in await storage.list_records(workflow_name=workflow_name)
                if i.checkpoint_id == newest.checkpoint_id
            ]
            with pytest.raises(SimulatedCrash):
                async with store.faults.crash_after_writes(crash_after):
                    await storage.delete(newest.checkpoint_id)
        async with store.storage() as reopened:
            latest = await reopened.get_latest(workflow_name=workflow_name)
            assert latest is not None
            assert latest.checkpoint_id == (first if gone else newest).checkpoint_id, crash_after
            if gone:
                with pytest.raises(CheckpointNotFoundError):
                    await reopened.load(newest.checkpoint_id)
            following = checkpoint(workflow_name, previous=first)
            await reopened.save(following)
            infos = {
                i.checkpoint_id: i.sequence for i in await reopened.list_records(workflow_name=workflow_name)
            }
            assert infos[following.checkpoint_id] > deleted_info.sequence, crash_after
            assert await reopened.delete(newest.checkpoint_id) is not gone  # finishing the delete
            assert (
                await reopened.get_latest(workflow_name=workflow_name)
            ).checkpoint_id == following.checkpoint_id


async def test_a_crashed_nested_record_with_other_content_is_replaced_on_retry(in_process: S3Store) -> None:
    def family(value: int) -> WorkflowCheckpoint:
        child = WorkflowCheckpoint("child", "sig-child", checkpoint_id="child-1", state={"v": value})
        state = {"_executor_state": {"sub": {"sub_workflow_checkpoint": child}}}
        return WorkflowCheckpoint("parent", "sig", checkpoint_id="parent-1", state=state)

    async with in_process.storage() as storage:
        with pytest.raises(SimulatedCrash):
            async with in_process.faults.crash_after_writes(1):  # only the nested record landed
                await storage.save(family(1))
    async with in_process.storage(conflict_retries=2) as reopened:
        second = family(2)
        assert await reopened.save(second) == "parent-1"
        assert (await reopened.load("child-1")).state == {"v": 2}
        assert await reopened.load("parent-1") == second


async def test_a_pointer_behind_the_listing_does_not_hide_the_newest_checkpoint(in_process: S3Store) -> None:
    # Plain saves never move the pointer, and a crash right after the commit point leaves nothing
    # else behind: the high-water mark comes from the listing head too, so the next save sorts after.
    async with in_process.storage() as storage:
        first = checkpoint()
        await storage.save(first)
        newest = checkpoint(previous=first)
        with pytest.raises(SimulatedCrash):
            async with in_process.faults.crash_after_writes(3):  # record, group key, order key
                await storage.save(newest)
    async with in_process.storage() as other:
        after = checkpoint(previous=newest)
        await other.save(after)
        latest = await other.get_latest(workflow_name="wf")
        assert latest is not None
        assert latest.checkpoint_id == after.checkpoint_id
        infos = {i.checkpoint_id: i.sequence for i in await other.list_records(workflow_name="wf")}
        assert infos[first.checkpoint_id] < infos[newest.checkpoint_id] < infos[after.checkpoint_id]


# ---------------------------------------------------------------------- racing writers


async def test_two_writers_racing_on_one_id_exactly_one_wins(store: S3Store) -> None:
    async with store.storage() as one, store.storage() as two:
        for round_number in range(10):
            base = checkpoint("race", checkpoint_id=f"same-{round_number}")
            variants = [
                WorkflowCheckpoint("race", "sig", checkpoint_id=base.checkpoint_id, state={"writer": writer})
                for writer in (1, 2)
            ]
            results = await asyncio.gather(
                one.save(variants[0]), two.save(variants[1]), return_exceptions=True
            )
            winners = [r for r in results if r == base.checkpoint_id]
            losers = [r for r in results if isinstance(r, CheckpointConflictError)]
            assert (len(winners), len(losers)) == (1, 1), results
            stored = await one.load(base.checkpoint_id)
            assert stored.state == variants[results.index(base.checkpoint_id)].state
        assert len(await one.list_checkpoint_ids(workflow_name="race")) == 10


def test_racing_create_only_writes_on_one_key_exactly_one_wins(store: S3Store) -> None:
    """The primitive the storage relies on, on this endpoint: IfNoneMatch="*" from 8 threads."""
    for attempt in range(5):
        key = f"{store.prefix}/race-{attempt}"
        outcomes: list[str] = []
        barrier = threading.Barrier(8)

        def put(
            writer: int,
            key: str = key,
            barrier: threading.Barrier = barrier,
            outcomes: list[str] = outcomes,
        ) -> None:
            barrier.wait()
            try:
                store.client.put_object(Bucket=BUCKET, Key=key, Body=str(writer).encode(), IfNoneMatch="*")
                outcomes.append("won")
            except ClientError as exc:
                outcomes.append(exc.response["Error"]["Code"])

        threads = [threading.Thread(target=put, args=(writer,)) for writer in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["PreconditionFailed"] * 7 + ["won"]


# ---------------------------------------------------------------------- stores that ignore conditions


@pytest.fixture
def dropping_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A store that ignores If-None-Match and If-Match: the moto server behind a proxy that drops
    them. Credentials in the environment, so storages built from a URL reach it too."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_CREDENTIALS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_CREDENTIALS["aws_secret_access_key"])
    proxy = HeaderDroppingProxy(server_endpoint())
    make_client(proxy.endpoint).create_bucket(Bucket=BUCKET)
    try:
        yield proxy.endpoint
    finally:
        proxy.close()


def keys_under(prefix: str, client: Any = None) -> list[str]:
    client = client or make_client(server_endpoint())
    response = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for item in response.get("Contents", [])]


def test_the_proxy_really_makes_conditional_writes_succeed(dropping_proxy: str) -> None:
    """What the tests below stand on: through the proxy, a create-only write over an existing
    object and a compare-and-swap with a wrong ETag both overwrite."""
    client, key = make_client(dropping_proxy), f"proxy-{uuid.uuid4().hex}"
    client.put_object(Bucket=BUCKET, Key=key, Body=b"1", IfNoneMatch="*")
    client.put_object(Bucket=BUCKET, Key=key, Body=b"2", IfNoneMatch="*")
    client.put_object(Bucket=BUCKET, Key=key, Body=b"3", IfMatch='"not-its-etag"')
    assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"3"
    client.delete_object(Bucket=BUCKET, Key=key)


async def test_a_store_that_ignores_conditional_writes_is_refused_at_open(dropping_proxy: str) -> None:
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    url = f"s3://{BUCKET}/{prefix}?endpoint_url={dropping_proxy}&region=us-east-1"
    for storage in (
        S3CheckpointStorage(BUCKET, prefix, client=make_client(dropping_proxy)),
        open_storage(url),
    ):
        for attempt in range(2):  # refused at every open: a refusal is not remembered
            with pytest.raises(ConditionalWritesNotEnforcedError) as raised:
                await storage.save(checkpoint("wf"))
            message = str(raised.value)
            assert isinstance(raised.value, StorageConfigurationError)
            assert f"s3://{BUCKET}/{prefix}/ at {dropping_proxy}" in message, message
            assert "If-None-Match" in message, message
            assert "docs/s3.md" in message, message
            assert "unsafe_single_writer=true" in message, message
            assert FAKE_CREDENTIALS["aws_secret_access_key"] not in message, attempt
        await storage.aclose()
    # The probe cleaned up after itself and nothing was saved.
    assert keys_under(f"{prefix}/") == []


async def test_a_store_that_ignores_only_if_match_is_refused_too(store: S3Store) -> None:
    """A store that enforces create-only writes but not compare-and-swap (If-Match dropped by a
    botocore hook on this client, before signing) is refused, naming If-Match."""

    def drop_if_match(params: dict[str, Any], **_: Any) -> None:
        params.pop("IfMatch", None)

    store.client.meta.events.register("provide-client-params.s3.PutObject", drop_if_match)
    try:
        with pytest.raises(ConditionalWritesNotEnforcedError, match="If-Match") as raised:
            async with store.storage():
                pass
        assert raised.value.ignored.startswith("a compare-and-swap (If-Match) with a wrong ETag"), (
            raised.value
        )
    finally:
        store.client.meta.events.unregister("provide-client-params.s3.PutObject", drop_if_match)
    async with store.storage() as storage:  # the same store with the hook gone: accepted
        await storage.save(checkpoint("wf"))


async def test_the_single_writer_opt_out_opens_says_so_and_keeps_ids_create_only(
    dropping_proxy: str,
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    url = f"s3://{BUCKET}/{prefix}?endpoint_url={dropping_proxy}&region=us-east-1&unsafe_single_writer=true"
    async with open_storage(url) as storage:
        assert isinstance(storage, S3CheckpointStorage)
        assert Capability.FENCING not in storage.capabilities
        assert Capability.FENCING in S3Backend.capabilities  # the class keeps it
        assert storage.describe() == f"s3://{BUCKET}/{prefix}/ (unsafe_single_writer)"
        first = checkpoint("wf", state={"n": 1})
        await storage.save(first)
        # The store would overwrite; the storage reads first, so the id is still create-only.
        with pytest.raises(CheckpointConflictError):
            await storage.save(
                WorkflowCheckpoint("wf", "sig", checkpoint_id=first.checkpoint_id, state={"n": 2})
            )
        assert await storage.save(first) == first.checkpoint_id  # same content: idempotent
        assert (await storage.load(first.checkpoint_id)).state == {"n": 1}
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [first.checkpoint_id]
        second = checkpoint("wf", previous=first)
        with pytest.raises(UnsupportedOperationError):
            await storage.save(second, expected_latest_id=first.checkpoint_id)
        async with storage.new_handle() as other:
            assert Capability.FENCING not in other.capabilities
            await other.save(second)
        assert (await storage.get_latest(workflow_name="wf")).checkpoint_id == second.checkpoint_id
    assert not any("/probe/" in key for key in keys_under(f"{prefix}/"))  # no probe was sent


@pytest.mark.parametrize("value", ["", "maybe"])
def test_the_opt_out_is_never_implied(value: str) -> None:
    with pytest.raises(StorageConfigurationError, match="unsafe_single_writer"):
        S3CheckpointStorage.from_url(f"s3://{BUCKET}/p?unsafe_single_writer={value}")
    with pytest.raises(StorageConfigurationError, match="unsafe_single_writer"):
        S3CheckpointStorage(BUCKET, "p", unsafe_single_writer=1)  # type: ignore[arg-type]


async def test_the_probe_costs_five_requests_once_per_store(store: S3Store) -> None:
    store.requests.reset()
    async with store.storage() as first:
        assert store.requests.snapshot() == {"PutObject": 4, "DeleteObjects": 1}
        store.requests.reset()
        async with first.new_handle() as second, store.storage() as third:
            await second.save(checkpoint("wf"))
            await third.get_latest(workflow_name="wf")
        # No probe: the handles share the verdict; the save and the read cost what they always do
        # for a root (no group key; the read lists its successors while it reads the record).
        assert store.requests.snapshot() == {"GetObject": 2, "ListObjectsV2": 3, "PutObject": 2}
    assert keys_under(f"{store.prefix}/probe/", store.client) == []


async def test_the_opt_out_sends_no_probe_and_one_head_per_conditional_write(in_process: S3Store) -> None:
    in_process.requests.reset()
    async with in_process.storage(unsafe_single_writer=True) as storage:
        await storage.get_latest(workflow_name="wf")
        assert in_process.requests.snapshot() == {"ListObjectsV2": 1}  # nothing at open
        in_process.requests.reset()
        await storage.save(root := checkpoint("wf"))
        # A root: its record and its order key, each checked first.
        assert in_process.requests.snapshot() == {
            "GetObject": 1,
            "ListObjectsV2": 1,
            "HeadObject": 2,
            "PutObject": 2,
        }
        in_process.requests.reset()
        await storage.save(checkpoint("wf", previous=root))
    # A continuation: its group key too (unconditional: not checked).
    assert in_process.requests.snapshot() == {
        "GetObject": 1,
        "ListObjectsV2": 1,
        "HeadObject": 2,
        "PutObject": 3,
    }


@pytest.mark.slow
async def test_the_whole_kit_passes_with_the_opt_out_fencing_not_applicable(store: S3Store) -> None:
    root = store.storage(unsafe_single_writer=True)
    target = StorageTarget(
        name="s3-single-writer",
        factory=root.new_handle,
        timeout_factor=2.0,
        expected_failures=SHARED_SEQUENCES,
    )
    try:
        (backend,) = (await avalidate(target, clauses=["contract", "fencing", "concurrency"])).backends
    finally:
        await root.aclose()
    assert not backend.error, backend.error
    assert backend.failures == [], [(r.clause_id, r.message) for r in backend.failures]
    outcomes = {r.clause_id: r.outcome for r in backend.results}
    fencing = {clause: outcome for clause, outcome in outcomes.items() if clause.startswith("fencing.")}
    assert fencing, outcomes
    assert set(fencing.values()) == {Outcome.SKIPPED}
    assert Outcome.PASSED in outcomes.values()


# ---------------------------------------------------------------------- moto's own races


def test_moto_never_walks_its_key_map_while_a_delete_changes_it() -> None:
    """Issue 27, item 10: moto's listing copies the bucket's key names, then looks each one up
    again; a DeleteObjects in between raised KeyError inside moto (seen as a failed save in
    fencing.one_winner_per_head). Here the delete is sent exactly inside that window: with every
    moto S3 request answered one at a time, it waits until the listing is done."""
    from moto.s3.utils import _VersionedKeyStore

    client, stop = start_in_process("ckpt-moto-race")
    walking, deleted = threading.Event(), threading.Event()
    lister = threading.get_ident()
    copy = _VersionedKeyStore._self_iterable

    def copy_then_wait(self: Any) -> Any:
        names = copy(self)
        if threading.get_ident() == lister and not walking.is_set():
            walking.set()
            # Unserialised, the delete lands here; serialised it cannot start until the listing ends.
            deleted_during_walk.append(deleted.wait(timeout=3))
        return names

    def delete() -> None:
        walking.wait()
        client.delete_objects(Bucket="ckpt-moto-race", Delete={"Objects": [{"Key": "p/r/doomed"}]})
        deleted.set()

    deleted_during_walk: list[bool] = []
    try:
        client.put_object(Bucket="ckpt-moto-race", Key="p/r/doomed", Body=b"")
        deleter = threading.Thread(target=delete)
        deleter.start()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_VersionedKeyStore, "_self_iterable", copy_then_wait)
            # No prefix: moto's own walk of the whole bucket (a prefix reads only the keys under it).
            listed = client.list_objects_v2(Bucket="ckpt-moto-race")
        deleter.join()
    finally:
        stop()
    assert deleted_during_walk == [False]
    assert [item["Key"] for item in listed["Contents"]] == ["p/r/doomed"]  # as before the delete


_LISTED_KEYS = [
    "p/r/a",
    "p/r/a b",
    "p/r/ab",
    "p/w/x/t/1",
    "p/w/x/t/2",
    "p/w/x/s/1/9",
    "p/w/xy/t/1",
    "p/w/y/t/3",
    "q/w/x/t/1",
    "p",
    "p/",
    "p/w/x/t/%1F",
    "p/w/\u00e9/t/1",
]


@pytest.mark.parametrize("prefix", ["p/", "p/r/a", "p/w/x/", "p/w/x/t/", "p/w/", "q", "none/", "p/w/\u00e9/"])
@pytest.mark.parametrize("arguments", [{}, {"MaxKeys": 1}, {"Delimiter": "/"}, {"StartAfter": "p/w/x/t/1"}])
def test_moto_lists_a_prefix_as_its_own_walk_does(prefix: str, arguments: dict[str, Any]) -> None:
    from moto.s3.models import S3Backend

    client, stop = start_in_process("ckpt-moto-prefix")
    try:
        for key in _LISTED_KEYS:
            client.put_object(Bucket="ckpt-moto-prefix", Key=key, Body=b"")
        client.delete_object(Bucket="ckpt-moto-prefix", Key="p/r/ab")

        def listing() -> tuple[list[str], list[str], bool]:
            answer = client.list_objects_v2(Bucket="ckpt-moto-prefix", Prefix=prefix, **arguments)
            keys = [item["Key"] for item in answer.get("Contents", [])]
            folders = [item["Prefix"] for item in answer.get("CommonPrefixes", [])]
            return keys, folders, answer["IsTruncated"]

        by_prefix = listing()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(S3Backend, "list_objects", S3Backend.list_objects.__wrapped__)
            walked = listing()
    finally:
        stop()
    assert by_prefix == walked


# ---------------------------------------------------------------------- injected errors


async def test_409_and_412_are_retried_by_the_storage_not_botocore(in_process: S3Store) -> None:
    async with in_process.storage() as storage:
        async with in_process.faults.conditional_conflicts(6):
            saved = [checkpoint(), checkpoint()]
            for item in saved:
                await storage.save(item)
        assert in_process.faults.injected["409"] == 3
        assert in_process.faults.injected["412"] == 3
        assert await storage.list_checkpoint_ids(workflow_name="wf") == [c.checkpoint_id for c in saved]


async def test_past_the_budget_the_error_names_operation_and_key(in_process: S3Store) -> None:
    async with in_process.storage(conflict_retries=2) as storage:
        item = checkpoint()
        async with in_process.faults.conditional_conflicts(100):
            with pytest.raises(StorageUnavailableError) as raised:
                await storage.save(item)
        assert raised.value.operation == "save"
        assert f"{in_process.prefix}/r/{item.checkpoint_id}" in str(raised.value)
        async with in_process.faults.transient_errors(100):
            with pytest.raises(StorageUnavailableError) as raised:
                await storage.load(item.checkpoint_id)
        assert raised.value.operation == "load"
        assert "InternalError" in str(raised.value) or "SlowDown" in str(raised.value)


async def test_an_unreachable_endpoint_is_a_typed_error() -> None:
    storage = S3CheckpointStorage(
        "ckpt-none", endpoint_url="http://127.0.0.1:9", region="us-east-1", max_attempts=1
    )
    # The first operation opens the handle, whose conditional-write probe is the first request.
    with pytest.raises(StorageUnavailableError) as raised:
        await storage.get_latest(workflow_name="wf")
    assert raised.value.operation == "open"
    assert "ckpt-none" in str(raised.value)
    await storage.aclose()


# ---------------------------------------------------------------------- requests per operation


async def test_requests_per_operation_do_not_grow_with_history(in_process: S3Store) -> None:
    """get_latest is one one-item LIST, then one GET and two LISTs (successors, siblings) together
    (two round trips), load a GET and a HEAD, a save continuing a checkpoint five requests, at 10
    checkpoints and at 1,051 (more than one LIST page)."""
    counts: dict[int, dict[str, dict[str, int]]] = {}
    async with in_process.storage() as storage:
        stored = 0
        last: WorkflowCheckpoint | None = None
        for size in (10, 1050):
            # One lineage: each save continues the one before (roots would have no group to list).
            items = []
            for i in range(stored, size):
                last = checkpoint("history", previous=last, state={"i": i})
                items.append(last)
            for start in range(0, len(items), 50):
                # Batches in order: each batch's saves are concurrent, batches follow each other.
                await asyncio.gather(*(storage.save(item) for item in items[start : start + 50]))
            stored = size
            newest = last = checkpoint("history", previous=last, state={"newest": True})
            per_operation: dict[str, dict[str, int]] = {}
            for name, operation in (
                ("save", lambda newest=newest: storage.save(newest)),
                ("load", lambda newest=newest: storage.load(newest.checkpoint_id)),
                ("get_latest", lambda: storage.get_latest(workflow_name="history")),
            ):
                in_process.requests.reset()
                result = await operation()
                per_operation[name] = in_process.requests.snapshot()
                if name == "get_latest":
                    assert result.checkpoint_id == newest.checkpoint_id
            stored += 1
            in_process.requests.reset()
            assert len(await storage.list_checkpoint_ids(workflow_name="history")) == stored
            per_operation["list_checkpoint_ids"] = in_process.requests.snapshot()
            counts[size] = per_operation
    for size in (10, 1050):
        assert counts[size]["get_latest"] == {"ListObjectsV2": 3, "GetObject": 1}, size
        assert counts[size]["load"] == {"GetObject": 1, "HeadObject": 1}, size
        assert counts[size]["save"] == {"GetObject": 1, "ListObjectsV2": 1, "PutObject": 3}, size
    # Listing ids reads keys only: one LIST request per 1,000 checkpoints, no GETs.
    assert counts[10]["list_checkpoint_ids"] == {"ListObjectsV2": 1}
    assert counts[1050]["list_checkpoint_ids"] == {"ListObjectsV2": 2}


async def test_a_burst_of_saves_uses_at_most_max_workers_threads(in_process: S3Store) -> None:
    async with in_process.storage(max_workers=3) as storage:
        seen: set[str] = set()

        async def watch() -> None:
            while True:
                seen.update(t.name for t in threading.enumerate() if t.name.startswith("s3-checkpoints"))
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        try:
            await asyncio.gather(*(storage.save(checkpoint("burst")) for _ in range(60)))
        finally:
            watcher.cancel()
        assert len(await storage.list_checkpoint_ids(workflow_name="burst")) == 60
    assert 1 <= len(seen) <= 3


# ---------------------------------------------------------------------- keys


@pytest.mark.parametrize(
    "text", ["wf", "a/b", "..", "../x", "x.y", "100%", "ünï/cödé ☃", "sp ace", "~!*'()", "a" * 256]
)
def test_escaped_components_are_reversible_and_path_free(text: str) -> None:
    escaped = escape_component(text)
    assert "/" not in escaped
    assert "." not in escaped
    assert unescape_component(escaped) == text
    assert len(escaped.encode()) <= 300


def test_very_long_unicode_ids_are_hashed_within_the_key_limit() -> None:
    text = "☃" * 256
    escaped = escape_component(text)
    assert escaped.startswith("!")
    assert unescape_component(escaped) is None
    assert escaped != escape_component("☃" * 255)


async def test_names_that_prefix_each_other_never_mix(store: S3Store) -> None:
    names = ["wf1", "wf10", "wf1/0", "wf1.0", "..", "../wf1", "wf%31", "ünï"]
    long_name = "☃" * 256
    async with store.storage() as storage:
        all_names = [*names, long_name]
        for index, name in enumerate(all_names):
            await storage.save(checkpoint(name, checkpoint_id=f"{name[:200]}-{index}"))
        for index, name in enumerate(all_names):
            assert await storage.list_checkpoint_ids(workflow_name=name) == [f"{name[:200]}-{index}"]
            latest = await storage.get_latest(workflow_name=name)
            assert latest is not None
            assert latest.checkpoint_id == f"{name[:200]}-{index}"
        assert await storage.list_workflows() == sorted([*names, long_name])


# ---------------------------------------------------------------------- construction and URLs


def test_url_options_reach_the_storage() -> None:
    storage = open_storage(
        "s3://my-bucket/some/prefix/?endpoint_url=http://127.0.0.1:1&region=eu-west-1"
        "&checksum=when_required&sse=aws:kms&sse_kms_key_id=key-1&max_workers=4&create_bucket=true"
    )
    assert isinstance(storage, S3CheckpointStorage)
    assert (storage.bucket, storage.prefix) == ("my-bucket", "some/prefix/")
    assert storage.describe() == "s3://my-bucket/some/prefix/"
    settings = storage.settings
    assert settings.put_parameters == {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "key-1"}
    assert (settings.endpoint_url, settings.region, settings.checksum) == (
        "http://127.0.0.1:1",
        "eu-west-1",
        "when_required",
    )
    assert settings.max_workers == 4
    assert settings.create_bucket
    assert not storage.new_handle().settings.create_bucket


@pytest.mark.parametrize(
    "url",
    [
        "s3://",
        "s3://ab/p",
        "s3://bucket/p?colour=red",
        "s3://bucket/p?max_workers=many",
        "s3://b/p?checksum=always",
    ],
)
def test_bad_urls_are_configuration_errors(url: str) -> None:
    with pytest.raises(StorageConfigurationError):
        open_storage(url)


async def test_put_parameters_are_sent_with_every_write(in_process: S3Store) -> None:
    async with in_process.storage(put_parameters={"ServerSideEncryption": "AES256"}) as storage:
        saved = checkpoint()
        await storage.save(saved)
    key = f"{in_process.prefix}/r/{escape_component(saved.checkpoint_id)}"
    assert in_process.client.head_object(Bucket=BUCKET, Key=key)["ServerSideEncryption"] == "AES256"


async def test_a_missing_bucket_says_how_to_fix_it_and_create_bucket_creates_it() -> None:
    client = make_client(server_endpoint())
    try:
        missing = S3CheckpointStorage("ckpt-missing-bucket", client=client)
        # Said when the handle opens (its probe is the first request), and again at every use.
        for _ in range(2):
            with pytest.raises(StorageConfigurationError, match="create_bucket=true"):
                await missing.save(checkpoint())
        await missing.aclose()
        async with S3CheckpointStorage("ckpt-created-bucket", client=client, create_bucket=True) as storage:
            await storage.save(saved := checkpoint())
            assert (await storage.load(saved.checkpoint_id)).checkpoint_id == saved.checkpoint_id
    finally:
        client.close()


async def test_closing_a_handle_leaves_an_injected_client_usable(in_process: S3Store) -> None:
    first = in_process.storage()
    async with first:
        await first.save(saved := checkpoint())
    with pytest.raises(Exception, match="closed"):
        await first.load(saved.checkpoint_id)
    async with first.new_handle() as second:
        assert (await second.load(saved.checkpoint_id)).checkpoint_id == saved.checkpoint_id


async def test_a_lost_record_is_reported_never_replaced_by_an_older_checkpoint(in_process: S3Store) -> None:
    """Its order key is listed but its record is gone (deleted behind the storage's back):
    get_latest and the listings raise naming it, instead of answering as if it never existed."""
    storage = in_process.storage()
    older = checkpoint()
    newest = checkpoint(previous=older)
    await storage.save(older)
    await storage.save(newest)
    record_key = f"{in_process.prefix}/r/{escape_component(newest.checkpoint_id)}"
    in_process.client.delete_object(Bucket=BUCKET, Key=record_key)
    for read in (
        storage.get_latest(workflow_name="wf"),
        storage.list_checkpoints(workflow_name="wf"),
    ):
        with pytest.raises(CheckpointCorruptedError, match="listed but its record is missing") as caught:
            await read
        assert caught.value.checkpoint_id == newest.checkpoint_id
    assert await storage.load(older.checkpoint_id) == older
    await storage.aclose()


# ---------------------------------------------------------------------- latest through the lineage


async def test_every_continuation_has_a_group_key_and_its_order_key_names_the_group(
    in_process: S3Store,
) -> None:
    """A continuation's group key is under its previous id, written with its record (its save is
    3 PUTs); the order key ends with the group, so get_latest walks from the newest commit to the
    tip of its lineage, and a delete takes the group key along. A root has no group key (2 PUTs)
    and its order key ends in ``.r``."""
    groups = f"{in_process.prefix}/w/chain/s/"
    async with in_process.storage() as storage:
        first = checkpoint("chain", checkpoint_id="first")
        second = checkpoint("chain", previous=first, checkpoint_id="second")
        in_process.requests.reset()
        await storage.save(first)
        assert in_process.requests.snapshot()["PutObject"] == 2
        assert keys_under(groups, in_process.client) == []
        in_process.requests.reset()
        await storage.save(second)
        assert in_process.requests.snapshot()["PutObject"] == 3
        written = keys_under(groups, in_process.client)
        assert [key.rsplit("/", 2)[-2] for key in written] == ["first"]
        assert written[0].endswith(".second.c")
        order_keys = keys_under(f"{in_process.prefix}/w/chain/t/", in_process.client)
        assert order_keys[0].endswith(".second.c.first")
        assert order_keys[1].endswith(".first.r")  # a root's: no group named
        # A child saved before its parent, then the parent, then the child's own continuation.
        parent = checkpoint("chain", previous=second, checkpoint_id="parent")
        child = checkpoint("chain", previous=parent, checkpoint_id="child")
        after_child = checkpoint("chain", previous=child, checkpoint_id="after-child")
        for item in (child, parent, after_child):
            await storage.save(item)
        assert len(keys_under(groups, in_process.client)) == 4
        latest = await storage.get_latest(workflow_name="chain")
        assert latest is not None
        assert latest.checkpoint_id == after_child.checkpoint_id
        # Deleting the tip's checkpoints takes their group keys with them.
        await storage.delete(after_child.checkpoint_id)
        await storage.delete(child.checkpoint_id)
        assert len(keys_under(groups, in_process.client)) == 2
        latest = await storage.get_latest(workflow_name="chain")
        assert latest is not None
        assert latest.checkpoint_id == parent.checkpoint_id


async def test_a_successor_key_whose_save_never_committed_is_passed_over(in_process: S3Store) -> None:
    async with in_process.storage() as storage:
        first = checkpoint("crash-lineage")
        await storage.save(first)
        await storage.save(checkpoint("crash-lineage", previous=first))
        # Continues first, which is no longer the newest: a group key, then a crash before the
        # order key (the record and the group key are written together).
        fork = checkpoint("crash-lineage", previous=first, checkpoint_id="fork")
        with pytest.raises(SimulatedCrash):
            async with in_process.faults.crash_after_writes(2):
                await storage.save(fork)
        # The second's and the fork's group keys (the root has none).
        assert len(keys_under(f"{in_process.prefix}/w/crash-lineage/s/", in_process.client)) == 2
        newest = checkpoint("crash-lineage", previous=first)
        await storage.save(newest)  # continues first too: a fork
    async with in_process.storage() as reopened:
        latest = await reopened.get_latest(workflow_name="crash-lineage")
        assert latest is not None
        assert latest.checkpoint_id == newest.checkpoint_id
        assert await reopened.save(fork) == fork.checkpoint_id  # the retry commits it
        latest = await reopened.get_latest(workflow_name="crash-lineage")
        assert latest is not None
        assert latest.checkpoint_id == newest.checkpoint_id  # it kept its first sequence


# ---------------------------------------------------------------------- the head's rivals


def stamped(workflow_name: str, previous: Any, seconds: int, **fields: Any) -> WorkflowCheckpoint:
    """A checkpoint built at 12:00:``seconds`` (its timestamp says when, whatever the commit order)."""
    return checkpoint(workflow_name, previous, timestamp=f"2026-01-01T12:00:{seconds:02d}+00:00", **fields)


async def test_get_latest_resumes_from_the_rival_built_last(in_process: S3Store) -> None:
    """Parallel steps: siblings continuing one checkpoint, committed in another order than built.
    The head (committed last) has less progress than a sibling committed before it."""
    async with in_process.storage() as storage:
        prepare = stamped("parallel", None, 0, checkpoint_id="prepare")
        await storage.save(prepare)
        built_last = stamped("parallel", prepare, 3, checkpoint_id="built-last")
        built_first = stamped("parallel", prepare, 1, checkpoint_id="built-first")
        built_second = stamped("parallel", prepare, 2, checkpoint_id="built-second")
        for item in (built_last, built_first, built_second):
            await storage.save(item)
        in_process.requests.reset()
        latest = await storage.get_latest(workflow_name="parallel")
        assert latest is not None
        assert latest.checkpoint_id == built_last.checkpoint_id
        assert latest == built_last
        # The rivals cost more: a HEAD and a LIST each, then their bodies.
        assert in_process.requests.snapshot() == {"ListObjectsV2": 5, "GetObject": 3, "HeadObject": 2}
        assert await storage.get_latest(workflow_name="parallel", graph_signature_hash="sig") == built_last
        assert await storage.get_latest(workflow_name="parallel", graph_signature_hash="other") is None


async def test_a_sibling_that_has_a_continuation_is_not_a_rival(in_process: S3Store) -> None:
    async with in_process.storage() as storage:
        root = stamped("fork", None, 0, checkpoint_id="root")
        continued = stamped("fork", root, 8, checkpoint_id="continued")
        after = stamped("fork", continued, 1, checkpoint_id="after")  # built before: its clock lags
        head = stamped("fork", root, 2, checkpoint_id="head")
        for item in (root, continued, after, head):
            await storage.save(item)
        latest = await storage.get_latest(workflow_name="fork")
        assert latest is not None
        assert latest.checkpoint_id == head.checkpoint_id
        # A sibling of another signature neither rivals nor stops a rival.
        other = stamped("fork", root, 9, checkpoint_id="other", graph_signature_hash="other")
        await storage.save(other)
        latest = await storage.get_latest(workflow_name="fork", graph_signature_hash="sig")
        assert latest is not None
        assert latest.checkpoint_id == head.checkpoint_id


async def test_parallel_roots_rival_at_the_end_of_the_order(in_process: S3Store) -> None:
    """Parallel first steps: roots saved in another order than built. A root's save writes no
    group key (2 PUTs) and its order key ends in ``.r``; the order key right before the head's is
    listed with the head's record (the probe): a root of its signature, then its successors: a
    leaf, so a rival, read with the head, and prune keeps both."""
    async with in_process.storage() as storage:
        built_last = stamped("roots", None, 7, checkpoint_id="built-last")
        built_first = stamped("roots", None, 1, checkpoint_id="built-first")
        await storage.save(built_last)
        in_process.requests.reset()
        await storage.save(built_first)
        assert in_process.requests.snapshot()["PutObject"] == 2
        assert keys_under(f"{in_process.prefix}/w/roots/s/", in_process.client) == []
        for key in keys_under(f"{in_process.prefix}/w/roots/t/", in_process.client):
            entry = KeyLayout(f"{in_process.prefix}/").parse_order_key(key, False)
            assert entry is not None
            assert (entry.mark, entry.group, entry.root, entry.rivals) == ("r", None, True, False)
        in_process.requests.reset()
        assert await storage.get_latest(workflow_name="roots") == built_last
        # The newest order key; the head's record, its successors and the probe (the order key
        # before it) together; the successors of that root; then the rival's body.
        assert in_process.requests.snapshot() == {"ListObjectsV2": 4, "GetObject": 2}
        assert await storage.latest_id(workflow_name="roots") == built_first.checkpoint_id
        stored = await storage.backend.latest("roots", None)
        assert stored is not None
        assert stored.checkpoint_id == built_first.checkpoint_id
        assert [rival.checkpoint_id for rival in stored.rivals] == [built_last.checkpoint_id]
        assert await storage.prune(workflow_name="roots", keep_last=1) == 0
        assert await storage.list_checkpoint_ids(workflow_name="roots") == ["built-last", "built-first"]


async def test_roots_past_the_first_listing_are_listed_only_when_the_probe_says_rival(
    in_process: S3Store,
) -> None:
    """Three parallel roots: the second is a leaf root, so the order keys after it are listed
    (one LIST, at most the 64 the run can take), then each one's successors."""
    async with in_process.storage() as storage:
        for name, seconds in (("r2", 2), ("r3", 3), ("r1", 1)):
            await storage.save(stamped("three", None, seconds, checkpoint_id=name))
        in_process.requests.reset()
        latest = await storage.get_latest(workflow_name="three")
        assert latest is not None
        assert latest.checkpoint_id == "r3"
        # r1's order key; r1's record, its successors and the order key before it (r3, the probe);
        # r3's successors; the order keys after r3 (r2); r2's successors; the rivals' bodies.
        assert in_process.requests.snapshot() == {"ListObjectsV2": 6, "GetObject": 3}


async def test_a_root_after_a_run_that_saved_twice_costs_no_round_trip_more(in_process: S3Store) -> None:
    """The record right before a root head continues another (an earlier run saved twice): no
    rival, whatever the clocks; the probe is one LIST more in the round trip of the record."""
    async with in_process.storage() as storage:
        first = stamped("runs", None, 50, checkpoint_id="first")
        await storage.save(first)
        await storage.save(stamped("runs", first, 51, checkpoint_id="second"))
        new_run = stamped("runs", None, 1, checkpoint_id="new-run")
        await storage.save(new_run)
        in_process.requests.reset()
        assert await storage.get_latest(workflow_name="runs") == new_run
        assert in_process.requests.snapshot() == {"ListObjectsV2": 3, "GetObject": 1}
        assert await storage.prune(workflow_name="runs", keep_last=1) == 2


async def test_a_root_whose_continuation_never_committed_is_a_rival(in_process: S3Store) -> None:
    """A group key under a root whose save crashed before its order key names nothing: the root
    is still a leaf (its HEAD says so), so it rivals the root committed after it."""
    async with in_process.storage() as storage:
        built_last = stamped("crash-root", None, 9, checkpoint_id="built-last")
        await storage.save(built_last)
        with pytest.raises(SimulatedCrash):
            async with in_process.faults.crash_after_writes(2):  # its record and group key
                await storage.save(stamped("crash-root", built_last, 10, checkpoint_id="crashed"))
        head = stamped("crash-root", None, 1, checkpoint_id="head")
        await storage.save(head)
    async with in_process.storage() as reopened:
        assert await reopened.get_latest(workflow_name="crash-root") == built_last
        assert await reopened.latest_id(workflow_name="crash-root") == head.checkpoint_id


async def test_equal_timestamps_go_to_the_head(in_process: S3Store) -> None:
    async with in_process.storage() as storage:
        start = stamped("equal", None, 0, checkpoint_id="start")
        rival = stamped("equal", start, 5, checkpoint_id="rival")
        head = stamped("equal", start, 5, checkpoint_id="head")
        for item in (start, rival, head):
            await storage.save(item)
        latest = await storage.get_latest(workflow_name="equal")
        assert latest is not None
        assert latest.checkpoint_id == head.checkpoint_id


async def test_a_group_key_whose_save_never_committed_is_no_rival(in_process: S3Store) -> None:
    async with in_process.storage() as storage:
        root = stamped("crash-rival", None, 0, checkpoint_id="root")
        head = stamped("crash-rival", root, 1, checkpoint_id="head")
        await storage.save(root)
        await storage.save(head)
        crashed = stamped("crash-rival", root, 9, checkpoint_id="crashed")
        with pytest.raises(SimulatedCrash):
            async with in_process.faults.crash_after_writes(2):  # its record and group key
                await storage.save(crashed)
    async with in_process.storage() as reopened:
        latest = await reopened.get_latest(workflow_name="crash-rival")
        assert latest is not None
        assert latest.checkpoint_id == head.checkpoint_id


async def test_a_fenced_save_rewriting_a_crashed_attempt_leaves_no_group_key_of_it(
    in_process: S3Store,
) -> None:
    """A fenced save crashed after its record and group key; another save commits in between, so
    the retry rewrites the record at a later sequence with a new group key, and removes the crashed
    attempt's (it names an order key no save will write)."""
    groups = f"{in_process.prefix}/w/fenced-rewrite/s/"
    async with in_process.storage() as storage:
        first = checkpoint("fenced-rewrite", checkpoint_id="first")
        await storage.save(first)
        retried = checkpoint("fenced-rewrite", previous=first, checkpoint_id="retried")
        with pytest.raises(SimulatedCrash):
            async with in_process.faults.crash_after_writes(2):  # its record and group key
                await storage.save(retried, expected_latest_id=first.checkpoint_id)
        (crashed_key,) = keys_under(groups, in_process.client)
        between = checkpoint("fenced-rewrite", previous=first, checkpoint_id="between")
        await storage.save(between)
        assert await storage.save(retried, expected_latest_id=between.checkpoint_id) == "retried"
        written = keys_under(groups, in_process.client)
        assert crashed_key not in written
        assert sorted(key.rsplit(".", 2)[-2] for key in written) == ["between", "retried"]
        assert await storage.list_checkpoint_ids(workflow_name="fenced-rewrite") == [
            "first",
            "between",
            "retried",
        ]


async def test_prune_keeps_the_head_and_its_rivals(in_process: S3Store) -> None:
    async with in_process.storage() as storage:
        prepare = stamped("prune-rivals", None, 0, checkpoint_id="prepare")
        siblings = [stamped("prune-rivals", prepare, 10 - i, checkpoint_id=f"step-{i}") for i in range(3)]
        for item in (prepare, *siblings):
            await storage.save(item)
        assert await storage.prune(workflow_name="prune-rivals", keep_last=1) == 1
        assert sorted(await storage.list_checkpoint_ids(workflow_name="prune-rivals")) == [
            "step-0",
            "step-1",
            "step-2",
        ]
        latest = await storage.get_latest(workflow_name="prune-rivals")
        assert latest is not None
        assert latest.checkpoint_id == "step-0"
        assert await storage.prune(workflow_name="prune-rivals", keep_last=0) == 3
        assert await storage.list_checkpoint_ids(workflow_name="prune-rivals") == []
        assert keys_under(f"{in_process.prefix}/w/prune-rivals/s/", in_process.client) == []


async def test_an_earlier_releases_checkpoints_still_read_and_never_rival(in_process: S3Store) -> None:
    """Keys an earlier release wrote: order keys without a group (``.s`` for one saved out of
    lineage order, with a successor key), no key for one saved in order nor for a root."""
    prefix = in_process.prefix
    async with in_process.storage() as storage:
        root = stamped("old", None, 0, checkpoint_id="root")
        sibling = stamped("old", root, 9, checkpoint_id="sibling")
        await storage.save(root)
        await storage.save(sibling)
        # Rewrite both as an earlier release stored them: headers without "grouped", no group
        # keys, order keys without the group.
        for key in keys_under(f"{prefix}/w/old/", in_process.client):
            in_process.client.delete_object(Bucket=BUCKET, Key=key)
        keys = KeyLayout(f"{prefix}/")
        for item in (root, sibling):
            record_key = keys.record_key(item.checkpoint_id)
            raw = in_process.client.get_object(Bucket=BUCKET, Key=record_key)["Body"].read()
            line, _, body = raw.partition(b"\n")
            line = line.replace(b',"grouped":true', b"")
            in_process.client.put_object(Bucket=BUCKET, Key=record_key, Body=line + b"\n" + body)
            header = Header.decode(item.checkpoint_id, line)
            assert not header.grouped
            in_process.client.put_object(Bucket=BUCKET, Key=keys.header_order_key(header), Body=b"")
        latest = await storage.get_latest(workflow_name="old")
        assert latest is not None
        assert latest.checkpoint_id == sibling.checkpoint_id
        # A new save continuing the root: the old sibling is in no group, so it never rivals.
        head = stamped("old", root, 1, checkpoint_id="head")
        await storage.save(head)
        latest = await storage.get_latest(workflow_name="old")
        assert latest is not None
        assert latest.checkpoint_id == head.checkpoint_id
        assert await storage.prune(workflow_name="old", keep_last=1) == 2


async def test_an_earlier_releases_root_never_rivals(in_process: S3Store) -> None:
    """An earlier release's order keys do not say which records are roots (no ``.r``): a root it
    saved ends the run of a root head saved after it, whatever the timestamps."""
    prefix = in_process.prefix
    async with in_process.storage() as storage:
        old_root = stamped("old-root", None, 9, checkpoint_id="old-root")
        await storage.save(old_root)
        for key in keys_under(f"{prefix}/w/old-root/", in_process.client):
            in_process.client.delete_object(Bucket=BUCKET, Key=key)
        keys = KeyLayout(f"{prefix}/")
        record_key = keys.record_key(old_root.checkpoint_id)
        raw = in_process.client.get_object(Bucket=BUCKET, Key=record_key)["Body"].read()
        line, _, body = raw.partition(b"\n")
        line = line.replace(b',"grouped":true', b"")
        in_process.client.put_object(Bucket=BUCKET, Key=record_key, Body=line + b"\n" + body)
        order_key = keys.header_order_key(Header.decode(old_root.checkpoint_id, line))
        assert order_key.endswith(".old-root")
        in_process.client.put_object(Bucket=BUCKET, Key=order_key, Body=b"")
        new_root = stamped("old-root", None, 1, checkpoint_id="new-root")
        await storage.save(new_root)
        assert await storage.get_latest(workflow_name="old-root") == new_root
