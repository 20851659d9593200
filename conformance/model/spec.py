"""The contract as a model: what every observable of a storage must be after any sequence of calls.

Written from docs/contract.md alone, in plain Python, and sharing no code with the engine or any
backend: a model that reused the engine could not disagree with it. It keeps records (top-level
and nested), one commit counter per workflow name, tombstones and pending writes, and answers each
operation with an :class:`Expect`: the value the storage must return, or the errors it may raise.

Where the contract leaves a choice open (a walk that meets its depth limit and a cycle at once),
the model lists every acceptable answer rather than picking the engine's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from storages.backend import RIVALS_LIMIT
from storages.contract import AncestryEnd
from storages.errors import (
    CheckpointConflictError,
    GraphSignatureMismatchError,
    InvalidCheckpointError,
    InvalidCheckpointIdError,
    NestedCheckpointDeletionError,
    StaleWriterError,
)

from .terms import (
    FIELDS,
    VALUE_FIELDS,
    Draft,
    Embedded,
    Expect,
    Record,
    Walk,
    Write,
    Writes,
    identifier_problem,
    same_content,
)


class ContractModel:
    """The store as the contract describes it, for one storage's declared capabilities."""

    def __init__(self, *, nested: bool) -> None:
        self.nested = nested
        self.records: dict[str, Record] = {}
        self.counters: dict[str, int] = {}
        self.tombstones: dict[str, dict[str, None]] = {}
        self.writes: dict[tuple[str, str], Writes] = {}
        self.racing_deletes: set[str] = set()
        """Ids deleted by a call of the concurrent round being checked: another delete of the same
        id in that round may also answer True (a store without an atomic delete, S3, cannot tell)."""
        self.blurred: set[str] = set()
        """Pruned ids saved again, or pruned from two workflows: whether and where a tombstone
        still lists them is left open by the contract."""

    def clone(self) -> ContractModel:
        twin = ContractModel(nested=self.nested)
        twin.records = dict(self.records)
        twin.counters = dict(self.counters)
        twin.tombstones = {name: dict(ids) for name, ids in self.tombstones.items()}
        twin.blurred = set(self.blurred)
        twin.racing_deletes = set(self.racing_deletes)
        twin.writes = {
            key: Writes(list(log.order), dict(log.by_key), set(log.calls)) for key, log in self.writes.items()
        }
        return twin

    def fingerprint(self) -> tuple[Any, ...]:
        """Equal for models no observation can tell apart (used to merge linearizations)."""
        order = tuple(sorted((r.workflow, r.sequence, r.checkpoint_id) for r in self.records.values()))
        ranks = tuple(sorted(self._ranks().items()))
        tombs = tuple(sorted((name, tuple(sorted(ids))) for name, ids in self.tombstones.items() if ids))
        writes = tuple(
            sorted(
                (key, tuple((k, repr(log.by_key[k])) for k in log.order)) for key, log in self.writes.items()
            )
        )
        return (tuple((w, i) for w, _, i in order), ranks, tombs, writes)

    def _ranks(self) -> dict[str, int]:
        ranks: dict[str, int] = {}
        by_workflow: dict[str, list[Record]] = {}
        for record in self.records.values():
            by_workflow.setdefault(record.workflow, []).append(record)
        for records in by_workflow.values():
            for rank, record in enumerate(sorted(records, key=lambda r: r.sequence)):
                ranks[record.checkpoint_id] = rank
        return ranks

    # ------------------------------------------------------------------ queries

    def top_level(self, workflow: str, signature: str | None = None) -> list[Record]:
        return sorted(
            (
                r
                for r in self.records.values()
                if r.container is None
                and r.workflow == workflow
                and (signature is None or r.draft.graph_signature_hash == signature)
            ),
            key=lambda r: r.sequence,
        )

    def listed(self, workflow: str, signature: str | None, include_nested: bool) -> list[Record]:
        return sorted(
            (
                r
                for r in self.records.values()
                if r.workflow == workflow
                and (include_nested or r.container is None)
                and (signature is None or r.draft.graph_signature_hash == signature)
            ),
            key=lambda r: r.sequence,
        )

    def head(self, workflow: str, signature: str | None = None) -> Record | None:
        """What fenced saves compare with: the top-level checkpoint committed last (of the
        signature, if given); then, while top-level checkpoints of the same workflow and
        signature name the current one as their previous id, the one of them committed last,
        never one already visited."""
        top = self.top_level(workflow, signature)
        if not top:
            return None
        current = top[-1]
        visited = {current.checkpoint_id}
        everyone = self.top_level(workflow)
        while True:
            successors = [
                r
                for r in everyone
                if r.draft.previous_checkpoint_id == current.checkpoint_id
                and r.draft.graph_signature_hash == current.draft.graph_signature_hash
                and r.checkpoint_id not in visited
            ]
            if not successors:
                return current
            current = successors[-1]
            visited.add(current.checkpoint_id)

    def rivals(self, head: Record) -> list[Record]:
        """The head's rivals, in commit order, the RIVALS_LIMIT committed last, each a leaf (none
        with its signature continues it): for a head with a previous id, the other top-level
        checkpoints of its workflow with that previous id and signature; for a root head, the
        roots of its signature committed right before it, back to the first top-level
        checkpoint of the workflow that is not such a leaf root."""
        everyone = self.top_level(head.workflow)
        continued = {(r.draft.previous_checkpoint_id, r.draft.graph_signature_hash) for r in everyone}

        def leaf_with_heads_signature(r: Record) -> bool:
            signature = r.draft.graph_signature_hash
            return (
                signature == head.draft.graph_signature_hash and (r.checkpoint_id, signature) not in continued
            )

        if head.draft.previous_checkpoint_id is None:
            before = [r for r in everyone if r.sequence < head.sequence]
            run: list[Record] = []
            while (
                before
                and before[-1].draft.previous_checkpoint_id is None
                and leaf_with_heads_signature(before[-1])
            ):
                run.insert(0, before.pop())
            return run[-RIVALS_LIMIT:]
        rivals = [
            r
            for r in everyone
            if r is not head
            and r.draft.previous_checkpoint_id == head.draft.previous_checkpoint_id
            and leaf_with_heads_signature(r)
        ]
        return rivals[-RIVALS_LIMIT:]

    def latest(self, workflow: str, signature: str | None = None) -> Record | None:
        """The checkpoint a run resumes from: of the head and its rivals, the newest timestamp;
        equal timestamps by commit order."""
        head = self.head(workflow, signature)
        if head is None:
            return None
        # Ranked independently of the engine's resume_point: (moment, sequence), with a
        # timestamp that does not parse below every one that does.
        return max([head, *self.rivals(head)], key=lambda r: (_moment(r.draft.timestamp), r.sequence))

    def latest_id(self, workflow: str) -> str | None:
        """The head's id: what a fenced save must expect."""
        head = self.head(workflow)
        return None if head is None else head.checkpoint_id

    def workflows(self) -> set[str]:
        return {r.workflow for r in self.records.values() if r.container is None}

    def family(self, root_id: str) -> list[Record]:
        return [r for r in self.records.values() if r.root == root_id]

    def all_tombstones(self) -> set[str]:
        return {checkpoint_id for ids in self.tombstones.values() for checkpoint_id in ids}

    # ------------------------------------------------------------------ operations

    def save(self, draft: Draft, *, fenced: bool = False, expected_latest: str | None = None) -> Expect:
        for name in ("checkpoint_id", "workflow_name"):
            if identifier_problem(getattr(draft, name)):
                return Expect.error(InvalidCheckpointIdError)
        if draft.previous_checkpoint_id is not None and identifier_problem(draft.previous_checkpoint_id):
            return Expect.error(InvalidCheckpointIdError)
        if type(draft.iteration_count) is not int:
            return Expect.error(InvalidCheckpointError)
        checkpoint_id = draft.checkpoint_id
        existing = self.records.get(checkpoint_id)
        if existing is not None:
            if not same_content(existing.draft, draft):
                return Expect.error(CheckpointConflictError)
            if existing.container is not None:
                # An equal top-level save of a nested record's id: a no-op or a conflict.
                return Expect(values=(checkpoint_id,), errors=(CheckpointConflictError,))
            if fenced and self.latest_id(existing.workflow) != checkpoint_id:
                return Expect.error(StaleWriterError)
            return Expect.value(checkpoint_id)
        embedded = draft.embedded() if self.nested else []
        for child, _ in embedded:
            if identifier_problem(child.checkpoint_id) or identifier_problem(child.workflow_name):
                return Expect.error(InvalidCheckpointIdError)
            if child.checkpoint_id in self.records or child.checkpoint_id == checkpoint_id:
                return Expect.error(CheckpointConflictError)
        if fenced and self.latest_id(draft.workflow_name) != expected_latest:
            return Expect.error(StaleWriterError)
        self._insert(draft, None, checkpoint_id, 0)
        for position, (child, container) in enumerate(embedded, start=1):
            self._insert(child, str(container.checkpoint_id), checkpoint_id, position)
        return Expect.value(checkpoint_id)

    def _insert(self, draft: Draft, container: str | None, root: str, position: int) -> None:
        workflow = str(draft.workflow_name)
        if str(draft.checkpoint_id) in self.all_tombstones():
            self.blurred.add(str(draft.checkpoint_id))
        sequence = self.counters.get(workflow, 0) + 1
        self.counters[workflow] = sequence
        self.records[str(draft.checkpoint_id)] = Record(draft, sequence, container, root, position)

    def load(self, checkpoint_id: str, expected_signature: str | None = None) -> Expect:
        record = self.records.get(checkpoint_id)
        if record is None:
            return Expect.missing()
        if expected_signature is not None and record.draft.graph_signature_hash != expected_signature:
            return Expect.error(GraphSignatureMismatchError)
        return Expect.value(record.draft)

    def get_latest(self, workflow: str, signature: str | None = None) -> Expect:
        latest = self.latest(workflow, signature)
        return Expect.value(None if latest is None else latest.draft)

    def list_checkpoints(self, workflow: str, signature: str | None, include_nested: bool) -> Expect:
        return Expect.value([r.draft for r in self.listed(workflow, signature, include_nested)])

    def list_checkpoint_ids(self, workflow: str, signature: str | None, include_nested: bool) -> Expect:
        return Expect.value([r.checkpoint_id for r in self.listed(workflow, signature, include_nested)])

    def families(self) -> dict[str, str]:
        """Each stored id's family (the top-level id it was saved with). A family is one atomic
        commit: where several of its records share a workflow, their order among themselves is
        the backend's (Redis Cluster numbers the nested ones first), their place is not."""
        return {checkpoint_id: record.root for checkpoint_id, record in self.records.items()}

    def delete(self, checkpoint_id: str) -> Expect:
        record = self.records.get(checkpoint_id)
        if record is None:
            return (
                Expect(values=(False, True)) if checkpoint_id in self.racing_deletes else Expect.value(False)
            )
        if record.container is not None:
            return Expect.error(NestedCheckpointDeletionError)
        for member in self.family(checkpoint_id):
            del self.records[member.checkpoint_id]
        self.racing_deletes.add(checkpoint_id)
        return Expect.value(True)

    def walk(self, checkpoint_id: str, max_depth: int) -> Expect:
        record = self.records.get(checkpoint_id)
        if record is None:
            return Expect.missing()
        tombstones = self.all_tombstones()
        ids = [checkpoint_id]
        visited = {checkpoint_id}
        answers: list[Walk] = []
        while True:
            previous = record.draft.previous_checkpoint_id
            if previous is None:
                answers.append(self._walked(ids, AncestryEnd.ROOT, record.checkpoint_id))
                break
            if len(ids) >= max_depth:
                answers.append(self._walked(ids, AncestryEnd.DEPTH_LIMIT, record.checkpoint_id))
                if previous in visited:  # both true at once: either answer is the contract's
                    answers.append(self._walked(ids, AncestryEnd.CYCLE, previous))
                break
            if previous in visited:
                answers.append(self._walked(ids, AncestryEnd.CYCLE, previous))
                break
            following = self.records.get(previous)
            if following is None:
                if previous in self.blurred:  # pruned, then saved again and removed since
                    answers.append(self._walked(ids, AncestryEnd.MISSING, previous))
                    answers.append(self._walked(ids, AncestryEnd.PRUNED, previous))
                    break
                end = AncestryEnd.PRUNED if previous in tombstones else AncestryEnd.MISSING
                answers.append(self._walked(ids, end, previous))
                break
            ids.append(previous)
            visited.add(previous)
            record = following
        return Expect(values=tuple(answers))

    def _walked(self, ids: list[str], end: AncestryEnd, end_id: str | None) -> Walk:
        return Walk(tuple(ids), end, end_id, tuple(self.records[i].draft for i in ids))

    def prune(self, workflow: str, keep_last: Any) -> Expect:
        if type(keep_last) is not int or keep_last < 0:
            return Expect.error(InvalidCheckpointError)
        top = self.top_level(workflow)
        head = self.head(workflow)
        if keep_last == 0 or head is None:
            victims = top
        else:
            # The head and its rivals are kept, wherever they are in the order, and keep_last - 1
            # of the others.
            protected = [head, *self.rivals(head)]
            others = [r for r in top if all(r is not kept for kept in protected)]
            victims = others[: max(len(others) - (keep_last - 1), 0)]
        graves = self.tombstones.setdefault(workflow, {})
        for victim in victims:
            for member in self.family(victim.checkpoint_id):
                del self.records[member.checkpoint_id]
                if member.checkpoint_id in self.all_tombstones():
                    self.blurred.add(member.checkpoint_id)
                graves[member.checkpoint_id] = None
        # Only the survivors keep their writes: a pruned checkpoint's go, and so do the writes a
        # plain delete left behind.
        survivors = {r.checkpoint_id for r in self.top_level(workflow)}
        for key in [key for key in self.writes if key[0] == workflow and key[1] not in survivors]:
            del self.writes[key]
        return Expect.value(len(victims))

    def delete_workflow(self, workflow: str) -> Expect:
        top = self.top_level(workflow)
        for record in top:
            for member in self.family(record.checkpoint_id):
                del self.records[member.checkpoint_id]
        self.tombstones.pop(workflow, None)
        for key in [key for key in self.writes if key[0] == workflow]:
            del self.writes[key]
        return Expect.value(len(top))

    def list_nested(self, checkpoint_id: str) -> Expect:
        if checkpoint_id not in self.records:
            return Expect.missing()
        children = sorted(
            (r for r in self.records.values() if r.container == checkpoint_id), key=lambda r: r.position
        )
        return Expect.value([r.checkpoint_id for r in children])

    def info(self, checkpoint_id: str) -> Expect:
        record = self.records.get(checkpoint_id)
        if record is None:
            return Expect.value(None)
        draft = record.draft
        return Expect.value(
            (draft.workflow_name, draft.previous_checkpoint_id, draft.graph_signature_hash, record.container)
        )

    def records_of(self, workflow: str) -> Expect:
        """list_records(workflow_name=...): the workflow's record ids, nested ones too, in commit order."""
        records = self.listed(workflow, None, include_nested=True)
        return Expect.value([r.checkpoint_id for r in records])

    def tombstones_of(self, workflow: str) -> tuple[set[str], set[str]]:
        """(ids list_tombstones must list, ids it may list or not)."""
        graves = set(self.tombstones.get(workflow, {}))
        unclear = self.blurred | set(self.records)
        return graves - unclear, unclear

    def put_writes(self, checkpoint_id: str, workflow: str, writes: Sequence[Write]) -> Expect:
        if identifier_problem(checkpoint_id) or identifier_problem(workflow):
            return Expect.error(InvalidCheckpointIdError)
        for write in writes:
            bad_task = not isinstance(write.task_id, str) or not write.task_id
            bad_channel = not isinstance(write.channel, str) or not write.channel
            if bad_task or bad_channel or type(write.index) is not int:
                return Expect.error(InvalidCheckpointError)
        log = self.writes.setdefault((workflow, checkpoint_id), Writes())
        call = repr([(w.task_id, w.index, w.channel, w.task_path, w.value) for w in writes])
        if call in log.calls:
            return Expect.value(None)  # repeating a call changes nothing (a retry is safe)
        log.calls.add(call)
        for write in writes:
            key = (write.task_id, write.index)
            if key not in log.by_key:
                log.order.append(key)
                log.by_key[key] = write
            elif write.index < 0:
                log.by_key[key] = write
        return Expect.value(None)

    def list_writes(self, checkpoint_id: str, workflow: str) -> Expect:
        log = self.writes.get((workflow, checkpoint_id))
        return Expect.value([] if log is None else [log.by_key[key] for key in log.order])

    def delete_writes(self, checkpoint_id: str, workflow: str) -> Expect:
        """The count's value is the storage's to choose; that it is not zero when writes were
        stored, and zero when none were, is the contract's."""
        log = self.writes.pop((workflow, checkpoint_id), None)
        return Expect.value(log is not None and bool(log.order))

    def workflow_writes(self, workflow: str) -> Expect:
        return Expect.value(
            {
                checkpoint_id: [log.by_key[key] for key in log.order]
                for (name, checkpoint_id), log in self.writes.items()
                if name == workflow and log.order
            }
        )


def with_changes(draft: Draft, **changes: Any) -> Draft:
    return replace(draft, **changes)


__all__ = [
    "FIELDS",
    "VALUE_FIELDS",
    "ContractModel",
    "Draft",
    "Embedded",
    "Expect",
    "Record",
    "Walk",
    "Write",
    "identifier_problem",
    "same_content",
    "with_changes",
]


_NO_MOMENT = (0, datetime.min.replace(tzinfo=UTC))


def _moment(timestamp: object) -> tuple[int, datetime]:
    """A timestamp as a sortable moment (ISO 8601, UTC when it names no offset)."""
    try:
        moment = datetime.fromisoformat(timestamp) if isinstance(timestamp, str) else None
    except ValueError:
        moment = None
    if moment is None:
        return _NO_MOMENT
    return (1, moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC))
