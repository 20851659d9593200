"""StorageSaver's own promises beyond LangGraph's kit: names that never collide, ids kept per
thread, loud corruption, commit-order latest, capability checks, and the sync interface."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from storages.contract import Capability
from storages.errors import CheckpointCorruptedError, InvalidCheckpointIdError, UnsupportedOperationError
from storages.langgraph import StorageSaver, escape_part, stored_id_for, workflow_for
from storages.memory import InMemoryCheckpointStorage, MemoryBackend
from storages.verify import verify

pytestmark = [pytest.mark.langgraph, pytest.mark.memory]


def _checkpoint(checkpoint_id: str, **values: Any) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    checkpoint["channel_values"] = dict(values)
    return checkpoint


def _config(thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None) -> Any:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("a:b", ""), ("a", "b:")),
        (("a", "b:c"), ("a:b", "c")),
        (("a%3Ab", ""), ("a:b", "")),
        (("", "x"), ("x", "")),
    ],
)
def test_distinct_thread_and_namespace_pairs_never_share_a_workflow(
    first: tuple[str, str], second: tuple[str, str]
) -> None:
    assert workflow_for(*first) != workflow_for(*second)


async def test_hostile_pairs_stay_apart_and_each_reads_its_own() -> None:
    saver = StorageSaver(InMemoryCheckpointStorage())
    pairs = [("a:b", ""), ("a", "b:"), ("t\x00\n", "ns|x:1"), ("../..", "%2F")]
    for index, (thread_id, namespace) in enumerate(pairs):
        await saver.aput(_config(thread_id, namespace), _checkpoint(f"cp-{index}", who=index), {}, {})
    for index, (thread_id, namespace) in enumerate(pairs):
        found = await saver.aget_tuple(_config(thread_id, namespace))
        assert found is not None
        assert found.checkpoint["channel_values"] == {"who": index}
        assert found.config["configurable"]["checkpoint_ns"] == namespace
    listed = [item async for item in saver.alist(None)]
    assert sorted(item.checkpoint["id"] for item in listed) == [f"cp-{i}" for i in range(len(pairs))]


async def test_copied_threads_keep_langgraph_ids_under_distinct_stored_ids() -> None:
    storage = InMemoryCheckpointStorage()
    saver = StorageSaver(storage)
    first = await saver.aput(_config("src"), _checkpoint("cp-1", n=1), {}, {})
    await saver.aput(first, _checkpoint("cp-2", n=2), {}, {})
    await saver.acopy_thread("src", "dst")
    copied = [item async for item in saver.alist(_config("dst"))]
    assert [item.checkpoint["id"] for item in copied] == ["cp-2", "cp-1"]
    assert copied[0].parent_config is not None
    assert copied[0].parent_config["configurable"] == {
        "thread_id": "dst",
        "checkpoint_ns": "",
        "checkpoint_id": "cp-1",
    }
    source_ids = await storage.list_checkpoint_ids(workflow_name=workflow_for("src", ""))
    target_ids = await storage.list_checkpoint_ids(workflow_name=workflow_for("dst", ""))
    assert not set(source_ids) & set(target_ids)
    assert target_ids == [stored_id_for(workflow_for("dst", ""), cp) for cp in ("cp-1", "cp-2")]


async def test_latest_is_commit_order_even_when_ids_sort_the_other_way() -> None:
    saver = StorageSaver(InMemoryCheckpointStorage())
    first = await saver.aput(_config("t"), _checkpoint("zzz", n=1), {}, {})
    await saver.aput(first, _checkpoint("aaa", n=2), {}, {})
    latest = await saver.aget_tuple(_config("t"))
    assert latest is not None
    assert latest.checkpoint["id"] == "aaa"
    # LangGraph's own InMemorySaver picks the largest id instead.
    native = InMemorySaver()
    native_first = await native.aput(_config("t"), _checkpoint("zzz", n=1), {}, {})
    await native.aput(native_first, _checkpoint("aaa", n=2), {}, {})
    native_latest = await native.aget_tuple(_config("t"))
    assert native_latest is not None
    assert native_latest.checkpoint["id"] == "zzz"


async def test_a_damaged_serde_payload_is_reported_naming_the_stored_id() -> None:
    storage = InMemoryCheckpointStorage()
    saver = StorageSaver(storage)
    await saver.aput(_config("t"), _checkpoint("cp", n=1), {}, {})
    stored_id = stored_id_for(workflow_for("t", ""), "cp")
    stored = await storage.load(stored_id)
    payload = stored.state["checkpoint"]
    stored.state["checkpoint"] = payload[: len(payload) // 2]
    body = storage.codec.encode_checkpoint(stored)
    await storage.write_raw_body(stored_id, body)
    with pytest.raises(CheckpointCorruptedError) as raised:
        await saver.aget_tuple(_config("t", checkpoint_id="cp"))
    assert stored_id in str(raised.value)
    with pytest.raises(CheckpointCorruptedError):
        _ = [item async for item in saver.alist(_config("t"))]


@pytest.mark.parametrize(
    ("field", "damage"),
    [
        ("checkpoint_type", None),  # the serde type is gone
        ("checkpoint", "not bytes"),  # the payload is no longer bytes
        ("metadata_type", 7),
    ],
)
async def test_a_state_missing_its_typed_payload_is_reported_naming_the_stored_id(
    field: str, damage: Any
) -> None:
    storage = InMemoryCheckpointStorage()
    saver = StorageSaver(storage)
    await saver.aput(_config("t"), _checkpoint("cp", n=1), {}, {})
    stored_id = stored_id_for(workflow_for("t", ""), "cp")
    stored = await storage.load(stored_id)
    stored.state[field] = damage
    await storage.write_raw_body(stored_id, storage.codec.encode_checkpoint(stored))
    with pytest.raises(CheckpointCorruptedError, match="not a \\(type, bytes\\) pair") as raised:
        await saver.aget_tuple(_config("t"))
    assert stored_id in str(raised.value)


async def test_over_long_thread_ids_are_refused_naming_the_field() -> None:
    saver = StorageSaver(InMemoryCheckpointStorage())
    with pytest.raises(InvalidCheckpointIdError, match="thread_id"):
        await saver.aput(_config("t" * 300), _checkpoint("cp"), {}, {})
    # Names are cached; a refused one is refused again, never remembered as valid.
    with pytest.raises(InvalidCheckpointIdError, match="thread_id"):
        await saver.aput(_config("t" * 300), _checkpoint("cp"), {}, {})


def test_a_storage_without_pending_writes_is_refused_when_the_saver_is_built() -> None:
    class NoWritesBackend(MemoryBackend):
        capabilities = MemoryBackend.capabilities - {Capability.PENDING_WRITES}

    class NoWrites(InMemoryCheckpointStorage):
        backend_class = NoWritesBackend

    with pytest.raises(UnsupportedOperationError, match="pending_writes"):
        StorageSaver(NoWrites())


async def test_sync_methods_run_from_another_thread_and_refuse_the_loop_thread() -> None:
    saver = StorageSaver(InMemoryCheckpointStorage())
    stored = await saver.aput(_config("t"), _checkpoint("cp", n=1), {}, {})
    with pytest.raises(asyncio.InvalidStateError, match="async interface"):
        saver.get_tuple(stored)
    seen: dict[str, Any] = {}

    def from_a_thread() -> None:
        saver.put_writes(stored, [("channel", "value")], "task")
        found = saver.get_tuple(stored)
        seen["writes"] = None if found is None else found.pending_writes
        seen["listed"] = [item.checkpoint["id"] for item in saver.list(_config("t"))]

    await asyncio.to_thread(from_a_thread)
    assert seen == {"writes": [("task", "channel", "value")], "listed": ["cp"]}


async def test_verify_and_listings_see_checkpoints_not_the_writes_logs() -> None:
    storage = InMemoryCheckpointStorage()
    saver = StorageSaver(storage)
    first = await saver.aput(_config("t"), _checkpoint("cp-1", n=1), {}, {})
    await saver.aput_writes(first, [("channel", "value"), ("__interrupt__", "ask")], "task")
    await saver.aput(first, _checkpoint("cp-2", n=2), {}, {})
    name = workflow_for("t", "")
    assert await storage.list_workflows() == [name]
    assert {info.workflow_name for info in await storage.list_records()} == {name}
    report = await verify(storage)
    assert report.ok, report.findings
    assert report.records_checked == 2


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F)) | st.text())
def test_names_escape_exactly_as_quote_does(text: str) -> None:
    # Workflow names are stored: the fast path must give quote(safe="")'s very output.
    assert escape_part(text) == quote(text, safe="")


async def test_a_backend_with_its_own_put_writes_gets_every_batch_through_it() -> None:
    # StorageSaver hands the engine's put_writes the writes as fields; a backend that overrides
    # put_writes must still see each batch (as PendingWrites) through its own method.
    seen: list[Any] = []

    class Recording(InMemoryCheckpointStorage):
        async def put_writes(self, checkpoint_id: str, writes: Any, *, workflow_name: str) -> None:
            seen.append(list(writes))
            await super().put_writes(checkpoint_id, writes, workflow_name=workflow_name)

    for storage, through_override in ((Recording(), True), (InMemoryCheckpointStorage(), False)):
        seen.clear()
        saver = StorageSaver(storage)
        config = await saver.aput(_config("t"), _checkpoint("c1"), {}, {})
        await saver.aput_writes(config, [("out", 1), ("__error__", "boom")], "task")
        assert len(seen) == (1 if through_override else 0)
        found = await saver.aget_tuple(config)
        assert found is not None
        assert found.pending_writes == [("task", "__error__", "boom"), ("task", "out", 1)]
