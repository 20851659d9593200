"""The storage contract as every built-in backend implements it (through CheckpointStore)."""

from __future__ import annotations

import hashlib
import types
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import xxhash

from storages import (
    Capability,
    CheckpointConflictError,
    CheckpointCorruptedError,
    CheckpointNotFoundError,
    CheckpointStore,
    GraphSignatureMismatchError,
    InvalidCheckpointError,
    InvalidCheckpointIdError,
    StorageClosedError,
    UnsupportedOperationError,
    WorkflowCheckpoint,
    open_storage,
)
from storages.backend import InsertResult, body_digest
from storages.contract import CHECKPOINT_FIELDS
from storages.memory import MemoryBackend

SameTypes = Callable[[Any, Any], bool]


def checkpoint(checkpoint_id: str, workflow_name: str = "wf", **fields: Any) -> WorkflowCheckpoint:
    fields.setdefault("graph_signature_hash", "sig")
    return WorkflowCheckpoint(workflow_name=workflow_name, checkpoint_id=checkpoint_id, **fields)


async def save_all(storage: CheckpointStore, *checkpoints: WorkflowCheckpoint) -> None:
    for cp in checkpoints:
        assert await storage.save(cp) == cp.checkpoint_id


# ---------------------------------------------------------------------------- copies and snapshots


async def test_save_snapshots_and_reads_return_fresh_copies(
    storage: CheckpointStore, same_types: SameTypes
) -> None:
    cp = checkpoint("c1", state={"items": [1, 2], "nested": {"set": {1}}}, messages={"e": [("m", 1)]})
    await storage.save(cp)
    cp.state["items"].append(3)  # after save: must not reach the stored snapshot
    cp.state["nested"]["set"].add(2)
    expected = checkpoint("c1", state={"items": [1, 2], "nested": {"set": {1}}}, messages={"e": [("m", 1)]})
    expected.timestamp = cp.timestamp

    first = await storage.load("c1")
    assert same_types(first, expected)
    first.state["items"].clear()
    first.messages["e"].append("mutated")

    second = await storage.load("c1")
    assert second is not first
    assert same_types(second, expected)
    (listed,) = await storage.list_checkpoints(workflow_name="wf")
    latest = await storage.get_latest(workflow_name="wf")
    assert listed is not second
    assert latest is not second
    assert latest is not listed
    assert same_types(listed, expected)
    assert same_types(latest, expected)


async def test_load_returns_the_class_that_was_saved(storage: CheckpointStore) -> None:
    await storage.save(checkpoint("c1"))
    assert type(await storage.load("c1")) is WorkflowCheckpoint


# ---------------------------------------------------------------------------- immutability


async def test_resaving_equal_content_is_a_no_op(storage: CheckpointStore) -> None:
    first, second = checkpoint("a", state={"k": 1}), checkpoint("b")
    await save_all(storage, first, second)
    again = checkpoint("a", state={"k": 1}, timestamp=first.timestamp)
    assert await storage.save(again) == "a"
    assert await storage.save(first) == "a"
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a", "b"]
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None
    assert latest.checkpoint_id == "b"


async def test_different_content_under_an_existing_id_conflicts_and_keeps_the_original(
    storage: CheckpointStore,
) -> None:
    original = checkpoint("a", state={"k": 1})
    await storage.save(original)
    for changed in (
        checkpoint("a", state={"k": 2}, timestamp=original.timestamp),
        checkpoint("a", state={"k": 1}),  # a different timestamp is different content
        checkpoint("a", state={"k": 1}, timestamp=original.timestamp, iteration_count=1),
        checkpoint("a", workflow_name="other", state={"k": 1}, timestamp=original.timestamp),
    ):
        with pytest.raises(CheckpointConflictError) as caught:
            await storage.save(changed)
        assert caught.value.checkpoint_id == "a"
        assert "'a'" in str(caught.value)
    loaded = await storage.load("a")
    assert loaded == original
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a"]
    assert await storage.list_checkpoint_ids(workflow_name="other") == []


def colliding_sets() -> tuple[set[int], set[int]]:
    """Two equal sets that iterate in different orders (1 and 9 share a hash slot in a small table)."""
    first, second = {1, 9}, {9, 1}
    assert first == second
    assert list(first) != list(second)
    return first, second


async def test_equal_content_encoded_differently_is_not_a_conflict(storage: CheckpointStore) -> None:
    first_set, second_set = colliding_sets()
    first = checkpoint("a", state={"s": first_set})
    second = checkpoint("a", state={"s": second_set}, timestamp=first.timestamp)
    assert storage.codec.encode_checkpoint(first) != storage.codec.encode_checkpoint(second)
    await storage.save(first)
    assert await storage.save(second) == "a"
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a"]
    assert (await storage.load("a")).state == {"s": {1, 9}}


async def test_a_record_whose_digest_an_earlier_release_wrote_is_re_saved_without_a_conflict(
    storage: CheckpointStore,
) -> None:
    # Releases before XXH3 kept a BLAKE2b digest beside each unkeyed body. A re-save of the same
    # checkpoint then finds a digest that does not match its own: the decoded comparison must
    # settle it as the re-save it is, and other content under the id must still conflict.
    original = checkpoint("a", state={"k": 1})
    (record,) = storage.records_for(original)
    legacy = hashlib.blake2b(record.body, digest_size=16).hexdigest()
    assert legacy != body_digest(record.body)
    assert await storage.backend.insert([record.replaced(digest=legacy)]) is InsertResult.INSERTED
    assert await storage.save(original) == "a"
    assert await storage.load("a") == original
    with pytest.raises(CheckpointConflictError):
        await storage.save(checkpoint("a", state={"k": 2}, timestamp=original.timestamp))
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a"]


def test_the_body_digest_is_xxh3_128_of_the_body_bytes() -> None:
    # Pinned: digests kept by one release are compared by the next, so a change of algorithm
    # must be deliberate (it turns every re-save of an older record into a decoded comparison).
    assert body_digest(b"checkpoint-storages") == xxhash.xxh3_128_hexdigest(b"checkpoint-storages")
    assert body_digest(b"checkpoint-storages") == "71177a38c861d44fae17e7e8bd71ed3e"
    assert body_digest(memoryview(b"xcheckpoint-storages")[1:]) == body_digest(b"checkpoint-storages")
    assert body_digest(b"a") != body_digest(b"b")


async def test_an_id_can_be_saved_again_after_delete_and_becomes_latest(
    storage: CheckpointStore,
) -> None:
    await save_all(storage, checkpoint("a"), checkpoint("b"))
    assert await storage.delete("a") is True
    await storage.save(checkpoint("a", state={"second": "life"}))
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["b", "a"]
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None
    assert latest.state == {"second": "life"}


# ---------------------------------------------------------------------------- validation


INVALID_FIELDS: list[tuple[str, Any, type[Exception]]] = [
    ("workflow_name", "", InvalidCheckpointIdError),
    ("workflow_name", 7, InvalidCheckpointIdError),
    ("workflow_name", None, InvalidCheckpointIdError),
    ("workflow_name", "tab\there", InvalidCheckpointIdError),
    ("workflow_name", "x" * 257, InvalidCheckpointIdError),
    ("checkpoint_id", "", InvalidCheckpointIdError),
    ("checkpoint_id", 42, InvalidCheckpointIdError),
    ("checkpoint_id", b"bytes-id", InvalidCheckpointIdError),
    ("checkpoint_id", "nul\x00byte", InvalidCheckpointIdError),
    ("checkpoint_id", "lone\ud800surrogate", InvalidCheckpointIdError),
    ("checkpoint_id", "y" * 257, InvalidCheckpointIdError),
    ("previous_checkpoint_id", "", InvalidCheckpointIdError),
    ("previous_checkpoint_id", 3, InvalidCheckpointIdError),
    ("previous_checkpoint_id", "line\nbreak", InvalidCheckpointIdError),
    ("graph_signature_hash", None, InvalidCheckpointError),
    ("graph_signature_hash", 1234, InvalidCheckpointError),
    ("graph_signature_hash", b"sig", InvalidCheckpointError),
    ("iteration_count", True, InvalidCheckpointError),
    ("iteration_count", "3", InvalidCheckpointError),
    ("iteration_count", 3.0, InvalidCheckpointError),
    ("iteration_count", None, InvalidCheckpointError),
    ("state", [], InvalidCheckpointError),
    ("state", None, InvalidCheckpointError),
    ("state", "{}", InvalidCheckpointError),
    ("messages", [], InvalidCheckpointError),
    ("metadata", None, InvalidCheckpointError),
    ("pending_request_info_events", (), InvalidCheckpointError),
    ("timestamp", 1700000000, InvalidCheckpointError),
    ("version", 1.0, InvalidCheckpointError),
]


@pytest.mark.parametrize(
    ("field", "bad", "error"),
    INVALID_FIELDS,
    ids=[f"{name}={value!r}"[:40] for name, value, _ in INVALID_FIELDS],
)
async def test_invalid_fields_are_refused_by_name_and_store_nothing(
    storage: CheckpointStore, field: str, bad: Any, error: type[Exception]
) -> None:
    cp = checkpoint("valid-id")
    setattr(cp, field, bad)
    with pytest.raises(error) as caught:
        await storage.save(cp)
    assert isinstance(caught.value, InvalidCheckpointError)
    assert isinstance(caught.value, ValueError)
    assert caught.value.field == field
    assert field in str(caught.value)
    assert await storage.list_checkpoint_ids(workflow_name="wf") == []
    with pytest.raises(CheckpointNotFoundError):
        await storage.load("valid-id")
    if Capability.LIST_WORKFLOWS in storage.capabilities:
        assert await storage.list_workflows() == []


@pytest.mark.parametrize("missing", CHECKPOINT_FIELDS)
async def test_objects_missing_a_checkpoint_field_are_refused_by_name(
    storage: CheckpointStore, missing: str
) -> None:
    fields = {name: getattr(checkpoint("valid-id"), name) for name in CHECKPOINT_FIELDS if name != missing}
    with pytest.raises(InvalidCheckpointError, match=repr(missing)) as caught:
        await storage.save(types.SimpleNamespace(**fields))
    assert caught.value.field == missing
    assert await storage.list_checkpoint_ids(workflow_name="wf") == []


@pytest.mark.parametrize("bad_id", ["", 5, None, "a\x07b", "z" * 257])
async def test_reads_and_deletes_validate_the_id(storage: CheckpointStore, bad_id: Any) -> None:
    for operation in (storage.load, storage.delete):
        with pytest.raises(InvalidCheckpointIdError) as caught:
            await operation(bad_id)
        assert caught.value.field == "checkpoint_id"
    for listing in (storage.list_checkpoints, storage.list_checkpoint_ids, storage.get_latest):
        with pytest.raises(InvalidCheckpointIdError) as caught:
            await listing(workflow_name=bad_id)
        assert caught.value.field == "workflow_name"


@pytest.mark.parametrize(
    "hostile",
    [
        "a/b",
        "..",
        "../../etc/passwd",
        "C:\\x",
        "*",
        "{}",
        "'\"",
        "%00",
        "100%",
        "名前",
        "emoji 🎉",
        " ",
        "w" * 256,
    ],
)
async def test_hostile_but_valid_ids_and_names_are_stored_safely(
    storage: CheckpointStore, hostile: str
) -> None:
    await save_all(
        storage, checkpoint(hostile, workflow_name=hostile), checkpoint("plain", workflow_name=hostile)
    )
    assert (await storage.load(hostile)).workflow_name == hostile
    assert await storage.list_checkpoint_ids(workflow_name=hostile) == [hostile, "plain"]
    assert await storage.list_checkpoint_ids(workflow_name="wf") == []
    assert await storage.delete(hostile) is True
    assert await storage.list_checkpoint_ids(workflow_name=hostile) == ["plain"]


# ---------------------------------------------------------------------------- reads, deletes, order


async def test_missing_checkpoints(storage: CheckpointStore) -> None:
    with pytest.raises(CheckpointNotFoundError) as caught:
        await storage.load("nope")
    assert isinstance(caught.value, LookupError)
    assert caught.value.checkpoint_id == "nope"
    assert await storage.delete("nope") is False
    assert await storage.get_latest(workflow_name="nobody") is None
    assert await storage.list_checkpoints(workflow_name="nobody") == []
    assert await storage.list_checkpoint_ids(workflow_name="nobody") == []


async def test_delete_removes_exactly_one(storage: CheckpointStore) -> None:
    await save_all(storage, checkpoint("a"), checkpoint("b"), checkpoint("c", workflow_name="other"))
    assert await storage.delete("a") is True
    assert await storage.delete("a") is False
    with pytest.raises(CheckpointNotFoundError):
        await storage.load("a")
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["b"]
    assert await storage.list_checkpoint_ids(workflow_name="other") == ["c"]


async def test_lists_are_oldest_first_in_commit_order_never_timestamp_order(
    storage: CheckpointStore,
) -> None:
    # Ids sort against commit order and timestamps run backwards: only commit order gives c, a, b.
    # Each continues a checkpoint that is not stored, so none rivals another (roots committed one
    # after another would, by timestamp: test_root_rivals.py).
    saves = [
        checkpoint("c", timestamp="2030-01-01T00:00:00+00:00", previous_checkpoint_id="c-parent"),
        checkpoint("x", workflow_name="other"),
        checkpoint("a", timestamp="2020-01-01T00:00:00+00:00", previous_checkpoint_id="a-parent"),
        checkpoint("b", timestamp="2010-01-01T00:00:00+00:00", previous_checkpoint_id="b-parent"),
    ]
    await save_all(storage, *saves)
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["c", "a", "b"]
    assert [cp.checkpoint_id for cp in await storage.list_checkpoints(workflow_name="wf")] == ["c", "a", "b"]
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None
    assert latest.checkpoint_id == "b"

    await storage.delete("b")
    latest = await storage.get_latest(workflow_name="wf")
    assert latest is not None
    assert latest.checkpoint_id == "a"
    await storage.delete("c")
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a"]
    await save_all(storage, checkpoint("b"))
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a", "b"]


async def test_signature_filter_selects_latest_and_lists_per_graph(storage: CheckpointStore) -> None:
    await save_all(
        storage,
        checkpoint("a", graph_signature_hash="g1"),
        checkpoint("b", graph_signature_hash="g2"),
        checkpoint("c", graph_signature_hash="g1"),
        checkpoint("d", graph_signature_hash="g2"),
        checkpoint("e", workflow_name="other", graph_signature_hash="g1"),
    )
    if Capability.SIGNATURE_FILTER not in storage.capabilities:
        with pytest.raises(UnsupportedOperationError):
            await storage.get_latest(workflow_name="wf", graph_signature_hash="g1")
        return
    latest_g1 = await storage.get_latest(workflow_name="wf", graph_signature_hash="g1")
    latest_g2 = await storage.get_latest(workflow_name="wf", graph_signature_hash="g2")
    assert latest_g1 is not None
    assert latest_g1.checkpoint_id == "c"
    assert latest_g2 is not None
    assert latest_g2.checkpoint_id == "d"
    assert await storage.get_latest(workflow_name="wf", graph_signature_hash="g3") is None
    assert await storage.list_checkpoint_ids(workflow_name="wf", graph_signature_hash="g1") == ["a", "c"]
    listed = await storage.list_checkpoints(workflow_name="wf", graph_signature_hash="g2")
    assert [cp.checkpoint_id for cp in listed] == ["b", "d"]
    with pytest.raises(InvalidCheckpointError, match="graph_signature_hash"):
        await storage.get_latest(workflow_name="wf", graph_signature_hash=5)  # type: ignore[arg-type]


async def test_load_checks_an_expected_graph_signature(storage: CheckpointStore) -> None:
    await storage.save(checkpoint("a", graph_signature_hash="g1"))
    assert (await storage.load("a", expected_graph_signature_hash="g1")).checkpoint_id == "a"
    with pytest.raises(GraphSignatureMismatchError) as caught:
        await storage.load("a", expected_graph_signature_hash="g2")
    assert (caught.value.checkpoint_id, caught.value.expected, caught.value.actual) == ("a", "g2", "g1")


# ---------------------------------------------------------------------------- corruption through raw access


async def test_undecodable_bodies_raise_corrupted_from_every_decoding_read(
    storage: CheckpointStore,
) -> None:
    if Capability.RAW_ACCESS not in storage.capabilities:
        with pytest.raises(UnsupportedOperationError):
            await storage.read_raw_body("a")
        return
    await save_all(storage, checkpoint("a"), checkpoint("b"))
    body = await storage.read_raw_body("a")
    assert body is not None
    assert body == storage.codec.encode_checkpoint(await storage.load("a"))
    await storage.write_raw_body("a", body[:-3])
    for read in (
        lambda: storage.load("a"),
        lambda: storage.list_checkpoints(workflow_name="wf"),
    ):
        with pytest.raises(CheckpointCorruptedError) as caught:
            await read()
        assert caught.value.checkpoint_id == "a"
    assert await storage.list_checkpoint_ids(workflow_name="wf") == ["a", "b"]  # decodes nothing
    await storage.delete("b")
    with pytest.raises(CheckpointCorruptedError, match="'a'"):
        await storage.get_latest(workflow_name="wf")


async def test_a_body_that_belongs_to_another_checkpoint_is_corrupted(storage: CheckpointStore) -> None:
    if Capability.RAW_ACCESS not in storage.capabilities:
        with pytest.raises(UnsupportedOperationError):
            await storage.write_raw_body("a", b"")
        return
    await save_all(storage, checkpoint("a"), checkpoint("b"), checkpoint("c", workflow_name="other"))
    body_of_b = await storage.read_raw_body("b")
    body_of_c = await storage.read_raw_body("c")
    assert body_of_b is not None
    assert body_of_c is not None
    body_of_a = await storage.read_raw_body("a")
    assert body_of_a is not None
    await storage.write_raw_body("a", body_of_b)
    with pytest.raises(CheckpointCorruptedError, match="belongs to checkpoint 'b'"):
        await storage.load("a")
    await storage.write_raw_body("a", body_of_a)
    await storage.write_raw_body("b", storage.codec.encode_checkpoint(checkpoint("b", workflow_name="other")))
    with pytest.raises(CheckpointCorruptedError, match="indexed with workflow"):
        await storage.list_checkpoints(workflow_name="wf")
    with pytest.raises(CheckpointNotFoundError):
        await storage.write_raw_body("missing", body_of_c)
    assert await storage.read_raw_body("missing") is None


# ---------------------------------------------------------------------------- lifecycle


def every_operation(storage: CheckpointStore) -> dict[str, Callable[[], Awaitable[Any]]]:
    operations: dict[str, Callable[[], Awaitable[Any]]] = {
        "save": lambda: storage.save(checkpoint("late")),
        "load": lambda: storage.load("a"),
        "list_checkpoints": lambda: storage.list_checkpoints(workflow_name="wf"),
        "list_checkpoint_ids": lambda: storage.list_checkpoint_ids(workflow_name="wf"),
        "delete": lambda: storage.delete("a"),
        "get_latest": lambda: storage.get_latest(workflow_name="wf"),
    }
    if Capability.LIST_WORKFLOWS in storage.capabilities:
        operations["list_workflows"] = storage.list_workflows
    if Capability.RAW_ACCESS in storage.capabilities:
        operations["read_raw_body"] = lambda: storage.read_raw_body("a")
    return operations


async def test_every_operation_after_aclose_raises_closed(storage: CheckpointStore) -> None:
    await storage.save(checkpoint("a"))
    await storage.aclose()
    for name, operation in every_operation(storage).items():
        with pytest.raises(StorageClosedError) as caught:
            await operation()
        assert caught.value.operation == name
        assert name in str(caught.value)
    await storage.aclose()  # idempotent
    await storage.aclose()


async def test_aclose_before_any_use_is_fine(storage_url: str) -> None:
    storage = open_storage(storage_url)
    await storage.aclose()
    await storage.aclose()
    with pytest.raises(StorageClosedError):
        await storage.load("a")


async def test_async_context_manager_opens_and_closes(storage_url: str) -> None:
    storage = open_storage(storage_url)
    async with storage as entered:
        assert entered is storage
        await entered.save(checkpoint("a"))
    with pytest.raises(StorageClosedError):
        await storage.load("a")


async def test_new_handle_works_after_close_and_shares_when_declared(storage: CheckpointStore) -> None:
    await storage.save(checkpoint("a"))
    await storage.aclose()
    async with storage.new_handle() as handle:
        assert type(handle) is type(storage)
        assert handle.codec is storage.codec
        assert handle.capabilities == storage.capabilities
        await handle.save(checkpoint("b"))
        shared_ids = await handle.list_checkpoint_ids(workflow_name="wf")
        if Capability.SHARED in storage.capabilities:
            assert shared_ids == ["a", "b"]
            assert (await handle.load("a")).checkpoint_id == "a"
        else:
            assert shared_ids == ["b"]


async def test_handles_are_closed_independently(storage: CheckpointStore) -> None:
    other = storage.new_handle()
    await other.save(checkpoint("a"))
    await other.aclose()
    assert await storage.save(checkpoint("b")) == "b"


# ---------------------------------------------------------------------------- capabilities


async def test_capabilities_are_declared_as_a_frozenset_of_capability(storage: CheckpointStore) -> None:
    declared = storage.capabilities
    assert isinstance(declared, frozenset)
    assert declared
    assert all(isinstance(capability, Capability) for capability in declared)


def test_memory_declares_exactly_what_it_implements() -> None:
    assert MemoryBackend.capabilities == {
        Capability.SIGNATURE_FILTER,
        Capability.ANCESTRY,
        Capability.NESTED,
        Capability.PRUNE,
        Capability.LIST_WORKFLOWS,
        Capability.RAW_ACCESS,
        Capability.INSPECT,
        Capability.PENDING_WRITES,
        Capability.SHARED,
        Capability.FENCING,
    }


GATED: list[tuple[str, Capability, Callable[[CheckpointStore], Awaitable[Any]]]] = [
    ("walk_ancestry", Capability.ANCESTRY, lambda s: s.walk_ancestry("a")),
    ("walk_ancestry_ids", Capability.ANCESTRY, lambda s: s.walk_ancestry_ids("a")),
    ("list_nested", Capability.NESTED, lambda s: s.list_nested("a")),
    ("prune", Capability.PRUNE, lambda s: s.prune(workflow_name="wf", keep_last=1)),
    ("delete_workflow", Capability.PRUNE, lambda s: s.delete_workflow(workflow_name="wf")),
    ("list_workflows", Capability.LIST_WORKFLOWS, lambda s: s.list_workflows()),
    ("read_raw_body", Capability.RAW_ACCESS, lambda s: s.read_raw_body("a")),
    ("write_raw_body", Capability.RAW_ACCESS, lambda s: s.write_raw_body("a", b"")),
    ("put_writes", Capability.PENDING_WRITES, lambda s: s.put_writes("a", [], workflow_name="wf")),
    ("list_writes", Capability.PENDING_WRITES, lambda s: s.list_writes("a", workflow_name="wf")),
    ("delete_writes", Capability.PENDING_WRITES, lambda s: s.delete_writes("a", workflow_name="wf")),
    (
        "list_checkpoints(include_nested=True)",
        Capability.NESTED,
        lambda s: s.list_checkpoints(workflow_name="wf", include_nested=True),
    ),
    (
        "list_checkpoint_ids(include_nested=True)",
        Capability.NESTED,
        lambda s: s.list_checkpoint_ids(workflow_name="wf", include_nested=True),
    ),
    (
        "get_latest(graph_signature_hash=...)",
        Capability.SIGNATURE_FILTER,
        lambda s: s.get_latest(workflow_name="wf", graph_signature_hash="sig"),
    ),
    (
        "list_checkpoint_ids(graph_signature_hash=...)",
        Capability.SIGNATURE_FILTER,
        lambda s: s.list_checkpoint_ids(workflow_name="wf", graph_signature_hash="sig"),
    ),
    (
        "save(expected_latest_id=...)",
        Capability.FENCING,
        lambda s: s.save(checkpoint("b"), expected_latest_id="a"),
    ),
]


@pytest.mark.parametrize(("operation", "capability", "call"), GATED, ids=[name for name, *_ in GATED])
async def test_extensions_work_when_declared_and_raise_unsupported_when_not(
    storage: CheckpointStore,
    operation: str,
    capability: Capability,
    call: Callable[[CheckpointStore], Awaitable[Any]],
) -> None:
    await storage.save(checkpoint("a"))
    if capability in storage.capabilities:
        await call(storage)  # declared: must not raise UnsupportedOperationError (or anything else)
        return
    with pytest.raises(UnsupportedOperationError) as caught:
        await call(storage)
    assert isinstance(caught.value, NotImplementedError)
    assert caught.value.capability == capability.value
    assert operation.split("(")[0] in str(caught.value)


class BareMemoryBackend(MemoryBackend):
    """The in-memory backend with nothing beyond MAF's six methods declared."""

    capabilities = frozenset()


def BareMemoryStorage() -> CheckpointStore[BareMemoryBackend]:
    return CheckpointStore(BareMemoryBackend())


@pytest.mark.parametrize(("operation", "capability", "call"), GATED, ids=[name for name, *_ in GATED])
async def test_a_backend_declaring_nothing_refuses_every_extension(
    operation: str, capability: Capability, call: Callable[[CheckpointStore], Awaitable[Any]]
) -> None:
    async with BareMemoryStorage() as storage:
        await storage.save(checkpoint("a"))
        with pytest.raises(UnsupportedOperationError) as caught:
            await call(storage)
        assert caught.value.capability == capability.value
        assert (await storage.load("a")).checkpoint_id == "a"  # MAF's six methods still work


async def test_list_workflows_names_each_workflow_with_a_checkpoint(storage: CheckpointStore) -> None:
    if Capability.LIST_WORKFLOWS not in storage.capabilities:
        with pytest.raises(UnsupportedOperationError):
            await storage.list_workflows()
        return
    assert await storage.list_workflows() == []
    await save_all(storage, checkpoint("a", workflow_name="zeta"), checkpoint("b", workflow_name="alpha"))
    await save_all(storage, checkpoint("c", workflow_name="alpha"))
    assert await storage.list_workflows() == ["alpha", "zeta"]
    await storage.delete("a")
    assert await storage.list_workflows() == ["alpha"]
