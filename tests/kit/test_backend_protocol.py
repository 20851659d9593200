"""What the author API guarantees every backend (storages/backend.py): the capability table,
declarations checked when a storage is built, named missing primitives, the insert result, the
lifecycle the engine runs around a backend, new handles, index-entry building and the nested-id
conflict."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any, Self

import pytest

from storages.backend import (
    CAPABILITY_PRIMITIVES,
    CORE_PRIMITIVES,
    Backend,
    CheckpointRecord,
    InsertResult,
    MissingPrimitiveError,
    StoredBody,
    body_digest,
    check_backend,
    implemented_capabilities,
    info_from_index,
    nested_id_conflict,
)
from storages.contract import Capability, CheckpointID, PendingWrite, WorkflowCheckpoint
from storages.engine import CheckpointStore
from storages.errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    StorageClosedError,
    StorageUnavailableError,
)
from storages.integrity import IntegrityKeys
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from .double import OPERATIONS, DoubleBackend


class CoreOnly(Backend):
    """The smallest backend: the core primitives over a dict, no capability declared."""

    def __init__(self, rows: dict[CheckpointID, CheckpointRecord] | None = None, *, label: str = "") -> None:
        self.rows = rows if rows is not None else {}
        self.label = label

    def new_handle(self) -> Self:
        return type(self)(self.rows, label=self.label)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        record = records[0]
        existing = self.rows.get(record.checkpoint_id)
        if existing is not None:
            return InsertResult.of_stored_digest(existing.digest, record)
        self.rows[record.checkpoint_id] = record
        return InsertResult.INSERTED

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        record = self.rows.get(checkpoint_id)
        return None if record is None else StoredBody(checkpoint_id, record.body)

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        ids = await self.list_ids(workflow_name, graph_signature_hash)
        return None if not ids else StoredBody(ids[-1], self.rows[ids[-1]].body)

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        ids = await self.list_ids(workflow_name, graph_signature_hash)
        return [StoredBody(i, self.rows[i].body) for i in ids]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        return [
            r.checkpoint_id
            for r in self.rows.values()
            if r.workflow_name == workflow_name and graph_signature_hash in (None, r.graph_signature_hash)
        ]

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return self.rows.pop(checkpoint_id, None) is not None


def checkpoint(checkpoint_id: str, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint("wf", "sig", checkpoint_id=checkpoint_id, **fields)


# ---------------------------------------------------------------- the table


def test_the_table_names_every_capability_and_only_real_primitives() -> None:
    assert set(CAPABILITY_PRIMITIVES) == set(Capability)
    for names in CAPABILITY_PRIMITIVES.values():
        for name in names:
            assert callable(getattr(Backend, name)), name
    for name in CORE_PRIMITIVES:
        assert getattr(getattr(Backend, name), "__isabstractmethod__", False), name


@pytest.mark.parametrize(
    "primitive", sorted({name for names in CAPABILITY_PRIMITIVES.values() for name in names})
)
async def test_an_unimplemented_primitive_names_itself_and_its_capability(primitive: str) -> None:
    backend = CoreOnly()
    arguments: dict[str, tuple[Any, ...]] = {
        "insert_fenced": ((), None),
        "nested_bodies": ((),),
        "overwrite_body": ("a", b"", ""),
        "walk": ("a", 1),
        "prune": ("wf", 1),
        "records": (None,),
        "tombstones": (None,),
        "workflow_names": (),
    }
    kwargs = {"with_bodies": False} if primitive == "walk" else {}
    with pytest.raises(MissingPrimitiveError) as caught:
        await getattr(backend, primitive)(*arguments.get(primitive, ("a",)), **kwargs)
    assert isinstance(caught.value, NotImplementedError)
    message = str(caught.value)
    assert f"CoreOnly.{primitive} is not implemented" in message
    assert caught.value.capabilities, "every per-capability primitive has a capability needing it"
    for capability in caught.value.capabilities:
        assert repr(capability.value) in message


# ---------------------------------------------------------------- checked when a storage is built


def test_declaring_a_capability_without_its_primitives_fails_when_the_storage_is_built() -> None:
    class ClaimsTooMuch(CoreOnly):
        capabilities = frozenset({Capability.ANCESTRY, Capability.INSPECT, Capability.SHARED})

    with pytest.raises(TypeError) as caught:
        CheckpointStore(ClaimsTooMuch())
    message = str(caught.value)
    assert "ClaimsTooMuch declares capabilities whose primitives it does not implement" in message
    assert "'ancestry' needs walk" in message
    assert "'inspect' needs info, records, tombstones" in message
    assert "shared" not in message  # a property: no primitive


def test_a_capability_declared_on_an_instance_is_checked_too() -> None:
    backend = CoreOnly()
    backend.capabilities = frozenset({Capability.PRUNE})
    with pytest.raises(TypeError, match="'prune' needs prune, delete_workflow"):
        CheckpointStore(backend)


def test_a_backend_without_the_core_primitives_cannot_be_made_and_strays_are_named() -> None:
    class CannotSave(Backend):
        async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
            return None

    with pytest.raises(TypeError, match="abstract"):
        CannotSave()  # type: ignore[abstract]
    stray = CoreOnly()
    stray.capabilities = frozenset({"ancestry"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not Capability"):
        check_backend(stray)
    with pytest.raises(TypeError, match=r"is not a storages\.backend\.Backend"):
        CheckpointStore(object())  # type: ignore[type-var]


def test_whole_backends_pass_and_their_capabilities_are_derivable() -> None:
    assert implemented_capabilities(CoreOnly) == frozenset()
    assert implemented_capabilities(DoubleBackend) >= OPERATIONS - {Capability.SIGNATURE_FILTER}
    assert implemented_capabilities(MemoryBackend) >= MemoryBackend.capabilities - {
        Capability.SIGNATURE_FILTER,
        Capability.PENDING_WRITES,
        Capability.SHARED,
    }

    class WithWalk(CoreOnly):
        capabilities = frozenset({Capability.ANCESTRY, Capability.SIGNATURE_FILTER})

        async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> Any:
            raise AssertionError("not called")

    assert Capability.ANCESTRY in implemented_capabilities(WithWalk)
    CheckpointStore(WithWalk())  # whole: builds


# ---------------------------------------------------------------- the insert result


def test_the_insert_result_of_a_stored_digest_says_what_happened() -> None:
    record = CheckpointRecord("a", "wf", None, "sig", b"body")
    assert InsertResult.of_stored_digest(None, record) is InsertResult.INSERTED
    assert InsertResult.of_stored_digest(body_digest(b"body"), record) is InsertResult.SAME_BODY
    assert InsertResult.of_stored_digest(body_digest(b"other"), record) is InsertResult.DIFFERENT_BODY
    keyed = CheckpointRecord("a", "wf", None, "sig", b"sealed", "mac-digest")
    assert keyed.digest == "mac-digest"  # a keyed save's digest is given, never recomputed


async def test_a_different_body_is_compared_by_content_before_it_is_a_conflict() -> None:
    storage = CheckpointStore(CoreOnly())
    first = checkpoint("a", state={"s": {1, 2, 3}})
    await storage.save(first)
    await storage.save(dataclasses.replace(first, state={"s": {3, 2, 1}}))  # equal content: a no-op
    with pytest.raises(CheckpointConflictError):
        await storage.save(dataclasses.replace(first, state={"s": {4}}))


# ---------------------------------------------------------------- lifecycle around a backend


class Recording(CoreOnly):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[str] = []
        self.fail_next_open = False

    async def open(self, operation: str) -> None:
        self.events.append(f"open:{operation}")
        if self.fail_next_open:
            self.fail_next_open = False
            raise StorageUnavailableError(operation, "cannot connect (injected)")

    async def follow_loop(self) -> None:
        self.events.append("follow")

    async def close(self) -> None:
        self.events.append("close")


async def test_open_is_named_retried_after_it_raised_and_run_once() -> None:
    backend = Recording()
    backend.fail_next_open = True
    storage = CheckpointStore(backend)
    with pytest.raises(StorageUnavailableError, match=r"^load failed"):
        await storage.load("a")
    await asyncio.gather(*(storage.save(checkpoint(f"c{n}")) for n in range(5)))
    await storage.aclose()
    await storage.aclose()
    assert backend.events == ["open:load", "open:save", "close"]


async def test_a_closed_handle_refuses_every_operation_by_name() -> None:
    storage = InMemoryCheckpointStorage()
    await storage.save(checkpoint("a"))
    await storage.aclose()
    operations = {
        "save": lambda: storage.save(checkpoint("b")),
        "load": lambda: storage.load("a"),
        "get_latest": lambda: storage.get_latest(workflow_name="wf"),
        "list_checkpoints": lambda: storage.list_checkpoints(workflow_name="wf"),
        "list_checkpoint_ids": lambda: storage.list_checkpoint_ids(workflow_name="wf"),
        "delete": lambda: storage.delete("a"),
        "put_writes": lambda: storage.put_writes("a", [PendingWrite("t", 0, "c", 1)], workflow_name="wf"),
        "list_writes": lambda: storage.list_writes("a", workflow_name="wf"),
        "list_workflow_writes": lambda: storage.list_workflow_writes(workflow_name="wf"),
        "walk_ancestry": lambda: storage.walk_ancestry("a"),
        "prune": lambda: storage.prune(workflow_name="wf", keep_last=1),
    }
    for name, operation in operations.items():
        with pytest.raises(StorageClosedError) as caught:
            await operation()
        assert caught.value.operation == name


def test_a_handle_used_from_a_new_loop_follows_it_and_closes_there() -> None:
    backend = Recording()
    storage = CheckpointStore(backend)
    asyncio.run(storage.save(checkpoint("a")))
    asyncio.run(storage.save(checkpoint("b")))
    assert asyncio.run(storage.load("b")).checkpoint_id == "b"
    asyncio.run(storage.aclose())
    assert backend.events == ["open:save", "follow", "follow", "follow", "close"]


# ---------------------------------------------------------------- new handles


async def test_new_handle_asks_the_backend_and_keeps_class_codec_and_keys() -> None:
    rows: dict[CheckpointID, CheckpointRecord] = {}
    storage = CheckpointStore(CoreOnly(rows, label="x"))
    storage.configure_integrity(IntegrityKeys(b"k" * 32))
    handle = storage.new_handle()
    assert type(handle) is CheckpointStore
    assert handle is not storage
    assert handle.backend is not storage.backend
    assert handle.backend.rows is rows
    assert handle.backend.label == "x"
    assert handle.codec is storage.codec
    assert handle.integrity_enabled
    assert not storage.with_integrity_key(None).integrity_enabled
    await storage.save(checkpoint("a"))
    assert (await handle.load("a")).checkpoint_id == "a"
    memory = InMemoryCheckpointStorage()
    assert type(memory.new_handle()) is InMemoryCheckpointStorage


async def test_a_backend_without_new_handle_names_it() -> None:
    class NoHandles(CoreOnly):
        new_handle = Backend.new_handle

    with pytest.raises(MissingPrimitiveError, match=r"NoHandles\.new_handle is not implemented"):
        CheckpointStore(NoHandles()).new_handle()


# ---------------------------------------------------------------- records


def test_info_from_index_reads_driver_values_and_refuses_malformed_ones() -> None:
    info = info_from_index(b"a", b"wf", None, "sig", b"c", b"7", 12)
    assert (info.checkpoint_id, info.workflow_name, info.container_id, info.sequence, info.size) == (
        "a",
        "wf",
        "c",
        7,
        12,
    )
    with pytest.raises(CheckpointCorruptedError, match="malformed sequence"):
        info_from_index("a", "wf", None, "sig", None, "seven", 1)
    with pytest.raises(CheckpointCorruptedError, match="malformed workflow name"):
        info_from_index("a", 3.5, None, "sig", None, 1, 1)
    with pytest.raises(CheckpointCorruptedError, match="malformed size"):
        info_from_index("a", "wf", None, "sig", None, 1, -4)


def test_records_are_immutable_and_replaced_with_a_digest_of_their_own() -> None:
    record = CheckpointRecord("a", "wf", None, "sig", b"one")
    with pytest.raises(AttributeError, match="immutable"):
        record.body = b"two"  # type: ignore[misc]
    changed = record.replaced(body=b"two")
    assert changed.digest == body_digest(b"two") != record.digest
    assert record.replaced(previous_checkpoint_id="p").digest == record.digest


def test_nested_id_conflict_names_the_id_and_its_container() -> None:
    records = [
        CheckpointRecord("top", "wf", None, "s", b""),
        CheckpointRecord("kid", "wf", None, "s", b"", container_id="top", root_id="top", position=1),
    ]
    error = nested_id_conflict(records, "kid")
    assert isinstance(error, CheckpointConflictError)
    assert error.checkpoint_id == "kid"
    assert "embedded in checkpoint 'top'" in str(error)
    assert "needs an id of its own" in str(error)


async def test_a_body_naming_nested_records_is_corrupted_on_a_storage_without_nested() -> None:
    # Such a storage stores embedded checkpoints inline, so a reference can only be damage (or
    # random bytes that look like one): a typed corruption, not a call to a missing primitive.
    memory = InMemoryCheckpointStorage()
    child = WorkflowCheckpoint("child", "s", checkpoint_id="kid")
    await memory.save(WorkflowCheckpoint("wf", "s", checkpoint_id="top", state={"sub": child}))
    referring = await memory.read_raw_body("top")
    assert referring is not None
    assert memory.codec.has_nested_refs(referring)
    backend = CoreOnly()
    storage = CheckpointStore(backend)
    await storage.save(WorkflowCheckpoint("wf", "s", checkpoint_id="top"))
    backend.rows["top"] = backend.rows["top"].replaced(body=referring)
    with pytest.raises(CheckpointCorruptedError, match="'top'"):
        await storage.load("top")
