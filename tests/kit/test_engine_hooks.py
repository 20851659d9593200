"""What the engine owns for every backend: capabilities checked against primitives at class
creation, named missing-primitive errors, driver-error translation, the default ``_insert`` and
``new_handle``, index-entry building and the nested-id conflict."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

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
    implemented_capabilities,
    info_from_index,
    nested_id_conflict,
)
from storages.contract import Capability, CheckpointID, WorkflowCheckpoint
from storages.engine import CheckpointStore
from storages.engine.primitives import StoragePrimitives
from storages.errors import (
    CheckpointConflictError,
    CheckpointCorruptedError,
    StorageConfigurationError,
    StorageUnavailableError,
)
from storages.integrity import IntegrityKeys
from storages.memory import InMemoryCheckpointStorage

from .double import OPERATIONS, DoubleBackend


class CoreOnly(Backend):
    """The smallest storage: the core primitives over a dict, no capability declared."""

    def __init__(
        self, rows: dict[CheckpointID, CheckpointRecord] | None = None, *, label: str = "", **options: Any
    ) -> None:
        super().__init__(**options)
        self.rows = rows if rows is not None else {}
        self.label = label

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


# ---------------------------------------------------------------- the table


def test_the_table_names_every_capability_and_only_real_primitives() -> None:
    assert set(CAPABILITY_PRIMITIVES) == set(Capability)
    for names in CAPABILITY_PRIMITIVES.values():
        for name in names:
            assert callable(getattr(StoragePrimitives, name)), name
    for name in CORE_PRIMITIVES:
        assert getattr(getattr(StoragePrimitives, name), "__isabstractmethod__", False), name


@pytest.mark.parametrize(
    "primitive", sorted({name for names in CAPABILITY_PRIMITIVES.values() for name in names})
)
async def test_an_unimplemented_primitive_names_itself_and_its_capability(primitive: str) -> None:
    storage = CoreOnly()
    method = getattr(storage, primitive)
    arguments: dict[str, tuple[Any, ...]] = {
        "_insert_family": ((),),
        "_insert_fenced": ((), None),
        "_nested_bodies": ((),),
        "_overwrite_body": ("a", b"", ""),
        "_walk": ("a", 1),
        "_prune": ("wf", 1),
        "_records": (None,),
        "_tombstones": (None,),
        "_workflow_names": (),
    }
    args = arguments.get(primitive, ("a",))
    kwargs = {"with_bodies": False} if primitive == "_walk" else {}
    with pytest.raises(MissingPrimitiveError) as caught:
        await method(*args, **kwargs)
    assert isinstance(caught.value, NotImplementedError)
    message = str(caught.value)
    assert f"CoreOnly.{primitive} is not implemented" in message
    for capability in caught.value.capabilities:
        assert repr(capability.value) in message
    assert caught.value.capabilities, "every per-capability primitive has a capability needing it"


async def test_a_capability_raised_on_an_instance_reaches_the_named_error() -> None:
    storage = CoreOnly()
    storage.capabilities = frozenset({Capability.ANCESTRY})  # type: ignore[misc]
    await storage.save(WorkflowCheckpoint("wf", "sig", checkpoint_id="a"))
    with pytest.raises(
        MissingPrimitiveError, match=r"CoreOnly\._walk is not implemented: capability 'ancestry'"
    ):
        await storage.walk_ancestry("a")


# ---------------------------------------------------------------- checked at class creation


def test_declaring_a_capability_without_its_primitives_fails_at_class_creation() -> None:
    with pytest.raises(TypeError) as caught:

        class ClaimsTooMuch(CoreOnly):
            capabilities = frozenset({Capability.ANCESTRY, Capability.INSPECT, Capability.SHARED})

    message = str(caught.value)
    assert "ClaimsTooMuch declares capabilities whose primitives it does not implement" in message
    assert "'ancestry' needs _walk" in message
    assert "'inspect' needs _info, _records, _tombstones" in message
    assert "shared" not in message  # a property: no primitive


def test_a_storage_that_cannot_save_fails_at_class_creation() -> None:
    with pytest.raises(TypeError, match="implements neither _insert nor _insert_family"):

        class CannotSave(CheckpointStore):
            async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
                return None

            async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
                return None

            async def list_bodies(
                self, workflow_name: str, graph_signature_hash: str | None, **_: Any
            ) -> list[StoredBody]:
                return []

            async def list_ids(
                self, workflow_name: str, graph_signature_hash: str | None, **_: Any
            ) -> list[str]:
                return []

            async def remove(self, checkpoint_id: CheckpointID) -> bool:
                return False


def test_an_abstract_intermediate_class_may_declare_what_its_subclasses_implement() -> None:
    class Family(CheckpointStore):  # core primitives still abstract: not checked yet
        capabilities = frozenset({Capability.ANCESTRY})

    with pytest.raises(TypeError, match="'ancestry' needs _walk"):

        class Member(Family, CoreOnly):
            pass


def test_whole_classes_pass_and_their_capabilities_are_derivable() -> None:
    assert implemented_capabilities(CoreOnly) == frozenset()
    assert implemented_capabilities(DoubleBackend) >= OPERATIONS - {Capability.SIGNATURE_FILTER}

    class WithWalk(CoreOnly):
        capabilities = frozenset({Capability.ANCESTRY, Capability.SIGNATURE_FILTER})

        async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> Any:
            raise AssertionError("not called")

    assert Capability.ANCESTRY in implemented_capabilities(WithWalk)


# ---------------------------------------------------------------- driver errors


class DriverError(Exception):
    pass


class Flaky(CoreOnly):
    driver_errors = (DriverError,)

    async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
        raise DriverError("connection reset by peer")


async def test_a_declared_driver_error_becomes_unavailable_naming_the_operation() -> None:
    with pytest.raises(
        StorageUnavailableError, match=r"^load failed: Flaky: DriverError: connection reset"
    ) as caught:
        await Flaky().load("a")
    assert isinstance(caught.value.__cause__, DriverError)


async def test_open_is_named_and_a_credential_in_the_driver_message_is_not_chained() -> None:
    class LeakyOpen(CoreOnly):
        driver_errors = (DriverError,)

        async def open(self, operation: str) -> None:
            raise DriverError("cannot reach redis://user:hunter2@db:6379/0")

    with pytest.raises(StorageUnavailableError, match=r"^open failed: ") as caught:
        await LeakyOpen().load("a")
    assert "hunter2" not in str(caught.value)
    assert caught.value.__cause__ is None  # the driver's own message would show the password


async def test_other_errors_pass_through_and_refining_the_translation_works() -> None:
    class Refined(Flaky):
        def _driver_error(self, operation: str, exc: BaseException) -> Exception:
            return StorageConfigurationError(f"{operation}: not a database ({exc})")

    with pytest.raises(StorageConfigurationError, match="load: not a database"):
        await Refined().load("a")

    class Broken(CoreOnly):
        driver_errors = (DriverError,)

        async def _get(self, checkpoint_id: CheckpointID) -> bytes | None:
            raise KeyError(checkpoint_id)  # a bug, not the backend being unreachable

    with pytest.raises(KeyError):
        await Broken().load("a")


# ---------------------------------------------------------------- new_handle and _insert


async def test_the_default_new_handle_rebuilds_from_the_constructor_arguments() -> None:
    rows: dict[CheckpointID, CheckpointRecord] = {}
    storage = CoreOnly(rows, label="x")
    handle = storage.new_handle()
    assert type(handle) is CoreOnly
    assert handle is not storage
    assert handle.rows is rows
    assert handle.label == "x"
    await storage.save(WorkflowCheckpoint("wf", "sig", checkpoint_id="a"))
    assert (await handle.load("a")).checkpoint_id == "a"


async def test_the_default_new_handle_keeps_codec_keys_and_overrides() -> None:
    class Overriding(CoreOnly):
        def _handle_overrides(self) -> Mapping[str, object]:
            return {"label": "second"}

    keys = IntegrityKeys(b"k" * 32)
    storage = Overriding({}, label="first")
    storage.configure_integrity(keys)
    handle = storage.new_handle()
    assert handle.label == "second"
    assert handle.codec is storage.codec
    assert handle.integrity_enabled
    assert not storage.with_integrity_key(None).integrity_enabled


async def test_the_default_insert_forwards_to_insert_family() -> None:
    families: list[Sequence[CheckpointRecord]] = []

    class FamilyOnly(CoreOnly):
        _insert = CheckpointStore._insert

        async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
            families.append(records)
            return await CoreOnly._insert(self, records[0])

    await FamilyOnly().save(WorkflowCheckpoint("wf", "sig", checkpoint_id="a"))
    assert [[r.checkpoint_id for r in family] for family in families] == [["a"]]


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


def test_nested_id_conflict_names_the_id_and_its_container() -> None:
    records = [
        CheckpointRecord("top", "wf", None, "s", b"", body_digest(b"")),
        CheckpointRecord(
            "kid", "wf", None, "s", b"", body_digest(b""), container_id="top", root_id="top", position=1
        ),
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
    storage = CoreOnly()
    await storage.save(WorkflowCheckpoint("wf", "s", checkpoint_id="top"))
    storage.rows["top"] = dataclasses.replace(storage.rows["top"], body=referring)
    with pytest.raises(CheckpointCorruptedError, match="'top'"):
        await storage.load("top")
