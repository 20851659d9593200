"""The model family passes correct storages and catches broken ones on every axis it generates.

Each mutant is one realistic defect, written as an outside author would write it: on the public
author API (a DoubleBackend subclass overriding one primitive) or as a delegating wrapper around a
correct storage (read caches, sanitisers, a side table). None is caught by design of a clause that
names it: the family's generated programs find them. Each test names the axis of issue 26 it covers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import math
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conformance import BackendReport, Outcome, StorageTarget, validate
from conformance.model import DEFAULT_OPERATIONS, parse_budget
from conformance.model.check import linearize
from conformance.model.execute import Observation, Subject
from conformance.model.ops import Op
from conformance.model.program import Generator, Settings, retag
from conformance.model.spec import ContractModel
from storages.backend import CheckpointRecord
from storages.contract import Capability, CheckpointID, PendingWrite, WorkflowCheckpoint
from storages.errors import StaleWriterError
from storages.memory import InMemoryCheckpointStorage, MemoryBackend

from .double import DoubleBackend, DoubleState, DoubleStorage, FileBacking, Row, double_target
from .support import SixMethodsOnly

FAMILY = "model"
pytestmark = pytest.mark.memory


def run_model(subject: Any, **target: Any) -> BackendReport:
    """The family with the default seed and the default's 1,200 operations, without its time cap:
    how much of a program runs must not depend on how loaded the machine is."""
    if not isinstance(subject, StorageTarget):
        subject = StorageTarget(name=getattr(subject, "__name__", "subject"), factory=subject, **target)
    if subject.model_budget is None:
        subject = dataclasses.replace(subject, model_budget=str(DEFAULT_OPERATIONS))
    (backend,) = validate(subject, clauses=[FAMILY]).backends
    assert not backend.error, backend.error
    return backend


def failures(backend: BackendReport) -> dict[str, str]:
    return {r.clause_id: r.message for r in backend.results if r.outcome is Outcome.FAILED}


def assert_caught(backend: BackendReport) -> str:
    found = failures(backend)
    assert found, "the model family let the mutant through"
    message = next(iter(found.values()))
    assert "seed" in message
    assert "reproducer:" in message
    assert "async def reproduce(storage):" in message
    return message


# ---------------------------------------------------------------------- wrappers


class Wrapper:
    """Delegates everything to a correct storage; subclasses change one behaviour."""

    def __init__(self, inner: Any, shared: Any = None) -> None:
        self.inner = inner
        self.shared = self.fresh_shared() if shared is None else shared

    def fresh_shared(self) -> Any:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def new_handle(self) -> Any:
        return type(self)(self.inner.new_handle(), self.shared)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def wrapped(cls: type[Wrapper]) -> StorageTarget:
    root = cls(InMemoryCheckpointStorage())
    return StorageTarget(name=cls.__name__, factory=root.new_handle)


class LatestIgnoresOlderSignatures(Wrapper):
    """Axis: a second graph signature in one workflow. get_latest(signature=h) looks only at the
    workflow's newest checkpoint: None when it has another signature, instead of the newest with h."""

    async def get_latest(self, *, workflow_name: str, graph_signature_hash: str | None = None) -> Any:
        newest = await self.inner.get_latest(workflow_name=workflow_name)
        if graph_signature_hash is None or newest is None:
            return newest
        return newest if newest.graph_signature_hash == graph_signature_hash else None


class ReadCachePerHandle(Wrapper):
    """Axis: a second handle of the same store. A read cache per handle: loads are served from
    it, invalidated only by this handle's own deletes."""

    def fresh_shared(self) -> Any:
        return None

    def __init__(self, inner: Any, shared: Any = None) -> None:
        super().__init__(inner, shared)
        self.cache: dict[str, Any] = {}

    async def load(self, checkpoint_id: str, **options: Any) -> Any:
        if not options and checkpoint_id in self.cache:
            return self.cache[checkpoint_id]
        loaded = await self.inner.load(checkpoint_id, **options)
        if not options:
            self.cache[checkpoint_id] = loaded
            return await self.inner.load(checkpoint_id)
        return loaded

    async def delete(self, checkpoint_id: str) -> bool:
        self.cache.pop(checkpoint_id, None)
        return bool(await self.inner.delete(checkpoint_id))


class CapsListingsAt1000(Wrapper):
    """Axis: listings larger than 1,000. Listings return the first page of 1,000 only."""

    async def list_checkpoint_ids(self, **options: Any) -> list[str]:
        return list(await self.inner.list_checkpoint_ids(**options))[:1000]

    async def list_checkpoints(self, **options: Any) -> list[Any]:
        return list(await self.inner.list_checkpoints(**options))[:1000]


class PrunesOneBatch(Wrapper):
    """Axis: prunes larger than 1,000. Prune deletes at most 1,000 checkpoints per call (one
    batch of a bulk-delete API) and reports the count it was asked to delete."""

    async def prune(self, *, workflow_name: str, keep_last: int) -> int:
        ids = await self.inner.list_checkpoint_ids(workflow_name=workflow_name)
        doomed = ids[: max(len(ids) - keep_last, 0)]
        if len(doomed) <= 1000:
            return int(await self.inner.prune(workflow_name=workflow_name, keep_last=keep_last))
        for checkpoint_id in doomed[:1000]:
            await self.inner.delete(checkpoint_id)
        return len(doomed)


class _Sanitiser(Wrapper):
    """Rewrites values on their way in, as a JSON-minded layer does; subclasses say which."""

    fields: tuple[str, ...] = ("messages", "state", "pending_request_info_events", "metadata")

    def clean(self, value: Any) -> Any:
        return value

    async def save(self, checkpoint: Any, **options: Any) -> str:
        cleaned = type(checkpoint)(
            **{
                name: self.walk(getattr(checkpoint, name))
                if name in self.fields
                else getattr(checkpoint, name)
                for name in checkpoint.__dataclass_fields__
            }
        )
        return str(await self.inner.save(cleaned, **options))

    def _walk(self, value: Any) -> Any:
        value = self.clean(value)
        if isinstance(value, dict):
            return {key: self.walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.walk(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.walk(item) for item in value)
        return value


class MetadataThroughJson(_Sanitiser):
    """Axis: values outside state. Metadata and pending events go through JSON (tuples become
    lists, non-string keys strings), state is kept as is."""

    fields = ("metadata", "pending_request_info_events")

    def _walk(self, value: Any) -> Any:
        return json.loads(json.dumps(value, default=repr))


class NormalisesFloats(_Sanitiser):
    """Axis: floats like -0.0 and NaN. Signed zeros become 0.0 and NaN becomes None."""

    def clean(self, value: Any) -> Any:
        if isinstance(value, float):
            return None if math.isnan(value) else value + 0.0
        return value


class BigIntegersAsFloats(_Sanitiser):
    """Axis: integers past 2**53. Integers a double cannot hold exactly are stored as floats."""

    def clean(self, value: Any) -> Any:
        if type(value) is int and abs(value) > 2**53:
            return float(value)
        return value


class AwareDatetimesToUtc(_Sanitiser):
    """Axis: aware datetimes. Every aware datetime is converted to naive UTC."""

    def clean(self, value: Any) -> Any:
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            return value.astimezone(dt.UTC).replace(tzinfo=None)
        return value


class BytearraysAsBytes(_Sanitiser):
    """Axis: bytearrays. A bytearray comes back as bytes."""

    def clean(self, value: Any) -> Any:
        return bytes(value) if isinstance(value, bytearray) else value


class SideTableWrites(Wrapper):
    """Axis: pending writes added by a side table. Writes are keyed by checkpoint id only (the
    workflow name is ignored), so two workflows' writes for one id mix, and prune keeps them."""

    def fresh_shared(self) -> Any:
        return {}

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset(self.inner.capabilities) | {Capability.PENDING_WRITES}

    async def put_writes(
        self, checkpoint_id: str, writes: Sequence[PendingWrite], *, workflow_name: str
    ) -> None:
        from storages.errors import InvalidCheckpointError

        for write in writes:
            if (
                not isinstance(write.task_id, str)
                or not write.task_id
                or not write.channel
                or type(write.index) is not int
            ):
                raise InvalidCheckpointError("writes", "a write needs a task_id, an int index and a channel")
        table: dict[tuple[str, int], PendingWrite] = self.shared.setdefault(checkpoint_id, {})
        for write in writes:
            key = (write.task_id, write.index)
            if key not in table or write.index < 0:
                table[key] = write

    async def list_writes(self, checkpoint_id: str, *, workflow_name: str) -> list[PendingWrite]:
        return list(self.shared.get(checkpoint_id, {}).values())

    async def delete_writes(self, checkpoint_id: str, *, workflow_name: str) -> int:
        return len(self.shared.pop(checkpoint_id, {}))

    async def list_workflow_writes(self, *, workflow_name: str) -> dict[str, list[PendingWrite]]:
        ids = set(await self.inner.list_checkpoint_ids(workflow_name=workflow_name))
        return {i: list(w.values()) for i, w in self.shared.items() if i in ids and w}


class CheckThenSaveFencing(Wrapper):
    """Axis: concurrency. A fenced save checks the latest, then saves: not one atomic step, so two
    writers expecting the same head can both succeed."""

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset(self.inner.capabilities) | {Capability.FENCING}

    async def save(self, checkpoint: Any, **options: Any) -> str:
        if "expected_latest_id" not in options:
            return str(await self.inner.save(checkpoint))
        expected = options["expected_latest_id"]
        latest = await self.inner.get_latest(workflow_name=checkpoint.workflow_name)
        await asyncio.sleep(0)  # the driver's round trip: other tasks run here
        actual = None if latest is None else latest.checkpoint_id
        if actual != expected and actual != checkpoint.checkpoint_id:
            raise StaleWriterError(checkpoint.checkpoint_id, checkpoint.workflow_name, expected, actual)
        return str(await self.inner.save(checkpoint))


class PlainDelegate(Wrapper):
    """A correct wrapper: the baseline the mutants are measured against."""


class SoftDeletesInProcess(Wrapper):
    """Axis: a store rebuilt from its settings. Deletes are remembered by the process (a set its
    handles share) and hidden from reads, and never reach the store: a storage built anew from
    the same file shows them again."""

    def fresh_shared(self) -> Any:
        return set()

    async def delete(self, checkpoint_id: str) -> bool:
        if checkpoint_id in self.shared:
            return False
        try:
            await self.inner.load(checkpoint_id)
        except Exception:
            return bool(await self.inner.delete(checkpoint_id))
        info = await self.inner.checkpoint_info(checkpoint_id)
        if info is not None and info.container_id is not None:
            return bool(await self.inner.delete(checkpoint_id))  # raises as the contract says
        self.shared.add(checkpoint_id)
        return True

    async def load(self, checkpoint_id: str, **options: Any) -> Any:
        if checkpoint_id in self.shared:
            from storages.errors import CheckpointNotFoundError

            raise CheckpointNotFoundError(checkpoint_id)
        return await self.inner.load(checkpoint_id, **options)

    async def list_checkpoint_ids(self, **options: Any) -> list[str]:
        return [i for i in await self.inner.list_checkpoint_ids(**options) if i not in self.shared]

    async def list_checkpoints(self, **options: Any) -> list[Any]:
        return [c for c in await self.inner.list_checkpoints(**options) if c.checkpoint_id not in self.shared]

    async def get_latest(self, **options: Any) -> Any:
        listed = await self.list_checkpoints(**options)
        return listed[-1] if listed else None

    @property
    def capabilities(self) -> frozenset[Capability]:
        return frozenset({Capability.DURABLE, Capability.SHARED})


# ---------------------------------------------------------------------- author-API mutants


class CaseInsensitiveNames(DoubleBackend):
    """Axis: bystander names differing by case. Workflow names compare case-insensitively (a SQL
    collation's default), so listing 'Flow' shows 'flow' too."""

    def _rows(self, workflow_name: str, signature: str | None, include_nested: bool) -> list[Row]:
        rows = self._read().rows.values()
        return sorted(
            (
                row
                for row in rows
                if row.record.workflow_name.casefold() == workflow_name.casefold()
                and (include_nested or not row.record.nested)
                and signature in (None, row.record.graph_signature_hash)
            ),
            key=lambda row: row.sequence,
        )


class NormalisesIds(DoubleBackend):
    """Axis: Unicode normalisation. Ids are keyed in NFC (a file system's way), so an NFD id and
    its NFC twin are one record."""

    def _key(self, checkpoint_id: CheckpointID) -> str:
        return unicodedata.normalize("NFC", checkpoint_id)


class StripsTrailingSpace(DoubleBackend):
    """Axis: trailing spaces. Ids are keyed without trailing spaces (a CHAR column's padding)."""

    def _key(self, checkpoint_id: CheckpointID) -> str:
        return checkpoint_id.rstrip(" ")


class PrefixMatchesWorkflows(DoubleBackend):
    """Axis: names sharing a prefix. A listing scans the workflow name as a key prefix, so 'flo'
    lists 'flow' and 'flow:1' too."""

    def _rows(self, workflow_name: str, signature: str | None, include_nested: bool) -> list[Row]:
        rows = self._read().rows.values()
        return sorted(
            (
                row
                for row in rows
                if row.record.workflow_name.startswith(workflow_name)
                and (include_nested or not row.record.nested)
                and signature in (None, row.record.graph_signature_hash)
            ),
            key=lambda row: row.sequence,
        )


class NestedInContainerSequence(DoubleBackend):
    """Axis: nested numbering (a backend author's real mistake). Nested records are numbered in
    the container's workflow sequence instead of their own."""

    def _write_family(self, state: DoubleState, records: Sequence[CheckpointRecord]) -> None:
        for record in records[1:]:
            if self._key(record.checkpoint_id) in state.rows:
                from storages.backend import nested_id_conflict

                raise nested_id_conflict(records, record.checkpoint_id)
        top = records[0].workflow_name
        for record in records:
            state.rows[self._key(record.checkpoint_id)] = Row(record, self._next_sequence(state, top))
        self._commit(state)


class TwoLevelsOfNesting(DoubleBackend):
    """Axis: a third level of nesting. The nested bodies read with a container are its children
    and grandchildren only (two joins, not a recursive query)."""

    async def nested_bodies(self, ids: Sequence[CheckpointID]) -> dict[CheckpointID, bytes]:
        state = self._read()
        found: dict[CheckpointID, bytes] = {}
        level = list(ids)
        for _ in range(2):
            below = [row for parent in level for row in state.children(parent)]
            found.update({row.record.checkpoint_id: row.record.body for row in below})
            level = [row.record.checkpoint_id for row in below]
        return found


# ---------------------------------------------------------------------- the tests


MUTANTS: list[tuple[str, Any]] = [
    ("second signature in one workflow", lambda: wrapped(LatestIgnoresOlderSignatures)),
    ("second handle of the same store", lambda: wrapped(ReadCachePerHandle)),
    ("listing larger than 1,000", lambda: wrapped(CapsListingsAt1000)),
    ("prune larger than 1,000", lambda: wrapped(PrunesOneBatch)),
    ("value outside state (metadata, pending events)", lambda: wrapped(MetadataThroughJson)),
    ("floats -0.0 and NaN", lambda: wrapped(NormalisesFloats)),
    ("integers past 2**53", lambda: wrapped(BigIntegersAsFloats)),
    ("aware datetimes", lambda: wrapped(AwareDatetimesToUtc)),
    ("bytearrays", lambda: wrapped(BytearraysAsBytes)),
    ("pending writes in a side table", lambda: wrapped(SideTableWrites)),
    ("concurrent fenced saves", lambda: wrapped(CheckThenSaveFencing)),
    ("bystander name differing by case", lambda: double_target(CaseInsensitiveNames)),
    ("ids differing by Unicode normalisation", lambda: double_target(NormalisesIds)),
    ("ids differing by a trailing space", lambda: double_target(StripsTrailingSpace)),
    ("bystander name sharing a prefix", lambda: double_target(PrefixMatchesWorkflows)),
    ("nested records numbered in the container's sequence", lambda: double_target(NestedInContainerSequence)),
    ("third level of nesting", lambda: double_target(TwoLevelsOfNesting)),
]


@pytest.mark.parametrize(("axis", "make"), MUTANTS, ids=[axis for axis, _ in MUTANTS])
def test_the_family_catches_a_mutant_on_each_axis(axis: str, make: Any) -> None:
    assert_caught(run_model(make()))


# The file double rewrites its whole pickle at every write, so a program costs the square of its
# length; a quarter of the default still reopens the store many times over.
FILE_BACKED_OPERATIONS = DEFAULT_OPERATIONS // 4


def test_a_store_rebuilt_from_its_settings_is_an_axis(tmp_path: Path) -> None:
    """Axis: a store reopened from its configuration (not new_handle(), which shares memory)."""
    path = tmp_path / "store.pickle"
    root = SoftDeletesInProcess(DoubleStorage(FileBacking(path)))
    target = StorageTarget(
        name="SoftDeletesInProcess",
        factory=root.new_handle,
        reopen=lambda: SoftDeletesInProcess(DoubleStorage(FileBacking(path))),
        model_budget=str(FILE_BACKED_OPERATIONS),
    )
    assert_caught(run_model(target))


@pytest.mark.parametrize(
    "make",
    [
        lambda: StorageTarget(name="memory", factory=InMemoryCheckpointStorage),
        lambda: double_target(),
        lambda: wrapped(PlainDelegate),
    ],
    ids=["memory", "double", "delegating wrapper"],
)
def test_correct_storages_pass(make: Any) -> None:
    backend = run_model(make())
    assert failures(backend) == {}
    assert {r.outcome for r in backend.results} == {Outcome.PASSED}


def test_a_durable_store_rebuilt_from_its_settings_passes(tmp_path: Path) -> None:
    path = tmp_path / "store.pickle"
    root = DoubleStorage(FileBacking(path))
    target = StorageTarget(
        name="file double",
        factory=root.new_handle,
        reopen=lambda: DoubleStorage(FileBacking(path)),
        model_budget=str(FILE_BACKED_OPERATIONS),
    )
    assert failures(run_model(target)) == {}


def test_a_six_method_storage_passes() -> None:
    backend = run_model(SixMethodsOnly)
    assert failures(backend) == {}


def test_the_same_seed_draws_the_same_program() -> None:
    settings = Settings(MemoryBackend.capabilities, handles=2)
    first = Generator(settings, 5, "aaaaaa").program(80)
    second = Generator(settings, 5, "aaaaaa").program(80)
    assert [(op.kind, op.handle, repr(op.params)) for op in first] == [
        (op.kind, op.handle, repr(op.params)) for op in second
    ]
    other = Generator(settings, 6, "aaaaaa").program(80)
    assert [op.kind for op in other] != [op.kind for op in first]


def test_retag_renames_every_string_and_keeps_aliases() -> None:
    settings = Settings(MemoryBackend.capabilities)
    ops = Generator(settings, 11, "q9q8q7").program(120)
    renamed = retag(ops, "q9q8q7", "zyxwvu")
    assert "q9q8q7" not in repr([op.params for op in renamed])
    before, after = repr([op.params for op in ops]), repr([op.params for op in renamed])
    assert after.count("zyxwvu") == before.count("q9q8q7") > 0
    aliased = [op for op in ops if op.kind == "save" and "alias" in op["draft"].metadata]
    assert aliased, "the program embeds one checkpoint twice somewhere"
    for op, twin in zip(ops, renamed, strict=True):
        if op in aliased:
            draft = twin["draft"]
            # One object embedded twice is still one object: renaming did not split the alias.
            assert len(draft.embedded()) == len(op["draft"].embedded())


def test_a_failure_names_its_seed_and_a_runnable_reproducer() -> None:
    message = assert_caught(
        run_model(StorageTarget(name="m", factory=wrapped(NormalisesFloats).factory, model_seed=7))
    )
    assert "--model-seed 7" in message
    code = message.split("reproducer:\n", 1)[1]
    namespace: dict[str, Any] = {}
    exec(compile(code, "<reproducer>", "exec"), namespace)  # the reproducer is valid Python
    assert asyncio.iscoroutinefunction(namespace["reproduce"])


def test_linearizability_refuses_two_winners_of_one_fence() -> None:
    model = ContractModel(nested=False)
    subject = Subject(None, lambda: None, None, WorkflowCheckpoint, "ck-")
    settings = Settings(frozenset({Capability.FENCING}))
    generator = Generator(settings, 1, "tagtag")
    first = generator._draft("ck-mtagtag-flow", None)
    second = generator._draft("ck-mtagtag-flow", None)
    calls = [
        Op("save_fenced", 0, {"draft": first, "expected_latest_id": None}),
        Op("save_fenced", 1, {"draft": second, "expected_latest_id": None}),
    ]
    both_won = [Observation(first.checkpoint_id, None, 1, 3), Observation(second.checkpoint_id, None, 2, 4)]
    _, problem = linearize([model], calls, both_won, subject)
    assert "no order of these 2 concurrent calls" in problem
    one_won = [
        Observation(first.checkpoint_id, None, 1, 3),
        Observation(None, StaleWriterError("x", "w", None, "y"), 2, 4),
    ]
    states, problem = linearize([model], calls, one_won, subject)
    assert problem == ""
    assert len(states) == 1


def test_budget_parsing() -> None:
    assert parse_budget(None).operations == 1200
    assert parse_budget(None).seconds == 12.0
    assert parse_budget("900").operations == 900
    assert parse_budget("20s").seconds == 20.0
    with pytest.raises(ValueError, match="--model-budget"):
        parse_budget("lots")
