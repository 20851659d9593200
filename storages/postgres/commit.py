"""The commit protocol: how a save, delete, prune and delete_workflow are made atomic, and safe
across processes and hosts, each in one statement (one round trip, one transaction).

* A save is one call of a server-side function (schema.py): ``save_one`` for a checkpoint with
  nothing nested (scalar parameters, the body in binary), ``save_family`` for a family (arrays).
  Either takes its workflows' advisory locks (held until commit; in key order, so two families
  never deadlock), checks the fence under them, takes each record's sequence from the index and
  inserts. A top id already stored writes nothing and returns the stored digest, so a retry
  after an ambiguous connection loss finds the first attempt's record and the base calls it a
  no-op. A refused fence (``CSFNC``), a nested id already stored (``CSCNF``), a top id stored
  meanwhile by a concurrent statement (a unique violation on the primary key, from the one
  function that writes a row) or a sequence read from a stale snapshot (a unique violation on
  the sequence index, outside READ COMMITTED) is raised, so the statement rolls back: all or
  nothing; the last two are repeated here.
* Delete, prune and delete_workflow are single statements with data-modifying CTEs: they see one
  snapshot and commit together; a statement trigger records each workflow's high-water mark.
  Server-side locks, never process-local ones, order concurrent writers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from ..backend import CheckpointRecord, FenceCheck, InsertResult, nested_id_conflict
from ..contract import CheckpointID
from ..errors import CheckpointConflictError, NestedCheckpointDeletionError
from .client import Connection, PostgresClient
from .lineage import rivals_cte, tip_ctes
from .save_functions import CONFLICT_SQLSTATE, FENCE_SQLSTATE, PRIMARY_KEY, SEQUENCE_INDEX
from .schema import render

# %b: in binary. A body goes as it is (in text it would travel hex-encoded, twice its size, and a
# text array of them is escaped on the client and parsed on the server); the rest are short.
_SAVE_ONE = """
    SELECT existing_digest, latest_id, inserted FROM {s}.save_one(%s, %s, %s, %s, %s, %b, %s, %s)
"""
_SAVE = """
    SELECT existing_digest, latest_id, inserted FROM {s}.save_family(
        %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::bytea[], %b::text[],
        %b::text[], %b::integer[], %s, %s
    )
"""
_REMOVE = """
    WITH target AS (SELECT container_id FROM {s}.checkpoints WHERE checkpoint_id = %(id)s),
    deleted AS (
        DELETE FROM {s}.checkpoints
        WHERE (checkpoint_id = %(id)s OR root_id = %(id)s)
            AND NOT EXISTS (SELECT 1 FROM target WHERE container_id IS NOT NULL)
    )
    SELECT EXISTS (SELECT 1 FROM target), (SELECT container_id FROM target)
"""
_OVERWRITE = "UPDATE {s}.checkpoints SET body = %s, digest = %s WHERE checkpoint_id = %s RETURNING 1"
# Tombstones name every deleted id (nested ones too) under the pruned workflow, as SQLite does.
# Kept: the head (wherever it is in the order), its rivals, and the keep - 1 others committed
# last; with keep = 0, nothing.
_PRUNE = (
    "WITH RECURSIVE "  # noqa: S608 - constant SQL
    + tip_ctes("%(workflow)s")
    + """,
    head AS (
        SELECT c.checkpoint_id, c.workflow_name, c.previous_checkpoint_id, c.graph_signature_hash,
            c.sequence
        FROM {s}.checkpoints AS c
        WHERE c.checkpoint_id = (SELECT checkpoint_id FROM lineage_tip) AND %(keep)s > 0
    ),
    """
    + rivals_cte("c.checkpoint_id")
    + """,
    others AS (
        SELECT checkpoint_id, row_number() OVER (ORDER BY sequence DESC) AS rank FROM {s}.checkpoints
        WHERE workflow_name = %(workflow)s AND NOT nested AND checkpoint_id NOT IN (
            SELECT checkpoint_id FROM head UNION ALL SELECT checkpoint_id FROM rivals
        )
    ),
    doomed AS (SELECT checkpoint_id FROM others WHERE rank >= %(keep)s),
    family AS (
        SELECT checkpoint_id FROM doomed
        UNION ALL
        SELECT c.checkpoint_id FROM {s}.checkpoints AS c WHERE c.root_id IN (SELECT checkpoint_id FROM doomed)
    ),
    buried AS (
        INSERT INTO {s}.tombstones (checkpoint_id, workflow_name)
        SELECT checkpoint_id, %(workflow)s FROM family ON CONFLICT (checkpoint_id) DO NOTHING
    ),
    deleted AS (DELETE FROM {s}.checkpoints WHERE checkpoint_id IN (SELECT checkpoint_id FROM family))
    SELECT count(*) FROM doomed
"""
)
# The delete trigger keeps the workflow's high-water mark: its sequence must never go back.
_DELETE_WORKFLOW = """
    WITH doomed AS (
        SELECT checkpoint_id FROM {s}.checkpoints WHERE workflow_name = %(workflow)s AND NOT nested
    ),
    tops AS (DELETE FROM {s}.checkpoints WHERE checkpoint_id IN (SELECT checkpoint_id FROM doomed)),
    nested AS (DELETE FROM {s}.checkpoints WHERE root_id IN (SELECT checkpoint_id FROM doomed)),
    unburied AS (DELETE FROM {s}.tombstones WHERE workflow_name = %(workflow)s)
    SELECT count(*) FROM doomed
"""

RETRIES_AFTER_RACE = 8
"""How often a save repeats after a concurrent statement stored its top id first, or its
sequence came from a stale snapshot (outside READ COMMITTED)."""


def save_one_arguments(
    record: CheckpointRecord, *, fenced: bool, expected_latest_id: CheckpointID | None
) -> tuple[Any, ...]:
    """``save_one``'s parameters for one top-level record, in its signature's order (the body
    sixth, sent in binary: ``%b``)."""
    return (
        record.checkpoint_id,
        record.workflow_name,
        record.previous_checkpoint_id,
        record.graph_signature_hash,
        record.digest,
        record.body,
        fenced,
        expected_latest_id,
    )


class PostgresCommits:
    """The writes of one storage handle, on its client and schema."""

    def __init__(self, client: PostgresClient, schema_name: str, table_prefix: str = "") -> None:
        def r(template: str) -> str:
            return render(template, schema_name, table_prefix)

        self._client = client
        self._save, self._save_one, self._remove = r(_SAVE), r(_SAVE_ONE), r(_REMOVE)
        self._overwrite, self._prune, self._delete_workflow = r(_OVERWRITE), r(_PRUNE), r(_DELETE_WORKFLOW)
        self._raced_constraints = (table_prefix + PRIMARY_KEY, table_prefix + SEQUENCE_INDEX)
        self.general_path = False
        """True: every save takes save_family (the backend's test hook of that name)."""

    async def save(
        self, records: Sequence[CheckpointRecord], *, fenced: bool, expected_latest_id: CheckpointID | None
    ) -> tuple[bool, str | None, str | None]:
        """(inserted, digest stored under the top id if it existed, the workflow's latest id
        when fenced and nothing was inserted)."""
        top = records[0]
        query: str
        parameters: tuple[Any, ...]
        # The one choice between the two paths (docs/postgres.md, "One path per operation"):
        # save_family is the general one; save_one, for a checkpoint with nothing nested, sends
        # scalars instead of arrays (a third fewer client instructions per save).
        if len(records) == 1 and not self.general_path:
            query = self._save_one
            parameters = save_one_arguments(top, fenced=fenced, expected_latest_id=expected_latest_id)
        else:
            query = self._save
            parameters = (
                [r.checkpoint_id for r in records],
                [r.workflow_name for r in records],
                [r.previous_checkpoint_id for r in records],
                [r.graph_signature_hash for r in records],
                [r.digest for r in records],
                [r.body for r in records],
                [r.container_id for r in records],
                [r.root_id for r in records],
                [r.position for r in records],
                fenced,
                expected_latest_id,
            )

        async def work(connection: Connection) -> tuple[bool, str | None, str | None]:
            for _ in range(RETRIES_AFTER_RACE):
                self._client.statements += 1
                try:
                    cursor = await connection.execute(query, parameters)
                except psycopg.Error as exc:
                    if _lost_race(exc, self._raced_constraints):
                        continue
                    if exc.sqlstate == CONFLICT_SQLSTATE:
                        raise nested_id_conflict(records, _conflicting_id(records, exc)) from None
                    if exc.sqlstate == FENCE_SQLSTATE:
                        diagnostic: Any = exc.diag
                        latest = None if diagnostic.message_detail == "none" else diagnostic.message_primary
                        return False, None, None if latest is None else str(latest)
                    raise
                row = await cursor.fetchone()
                assert row is not None
                return bool(row[2]), row[0], row[1]
            raise CheckpointConflictError(records[0].checkpoint_id, "saved concurrently again and again")

        return await self._client.run("save", work)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        _, existing, _ = await self.save(records, fenced=False, expected_latest_id=None)
        return InsertResult.of_stored_digest(existing, records[0])

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        inserted, existing, latest = await self.save(
            records, fenced=True, expected_latest_id=expected_latest_id
        )
        if inserted:
            return None
        return FenceCheck(
            latest, None if existing is None else InsertResult.of_stored_digest(existing, records[0])
        )

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        rows = await self._client.fetch("delete", self._remove, {"id": checkpoint_id})
        existed, container_id = rows[0]
        if container_id is not None:
            raise NestedCheckpointDeletionError(checkpoint_id, str(container_id))
        return bool(existed)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return bool(
            await self._client.fetch("write_raw_body", self._overwrite, (body, digest, checkpoint_id))
        )

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        rows = await self._client.fetch("prune", self._prune, {"workflow": workflow_name, "keep": keep_last})
        return int(rows[0][0])

    async def delete_workflow(self, workflow_name: str) -> int:
        rows = await self._client.fetch("delete_workflow", self._delete_workflow, {"workflow": workflow_name})
        return int(rows[0][0])


def _lost_race(exc: psycopg.Error, raced_constraints: tuple[str, ...]) -> bool:
    """A unique violation that a repeated call resolves: the id stored concurrently (the save's
    probe came first: the primary key), or a sequence read from a stale snapshot (outside READ
    COMMITTED: the sequence index); both named after the table prefix."""
    diagnostic: Any = exc.diag
    return isinstance(exc, psycopg.errors.UniqueViolation) and diagnostic.constraint_name in raced_constraints


def _conflicting_id(records: Sequence[CheckpointRecord], exc: psycopg.Error) -> CheckpointID:
    diagnostic: Any = exc.diag  # the server function names the conflicting id as its message
    return str(diagnostic.message_primary or "") or records[0].checkpoint_id


__all__ = ["PostgresCommits"]
