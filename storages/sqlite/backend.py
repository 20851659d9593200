"""The SQLite backend: the primitives (storages/backend.py) over one SQLite file.

Nested records are rows of the same table with ``container_id`` (the checkpoint whose body refers
to them) and ``root_id`` (the top-level checkpoint they were saved with); a save inserts the whole
family in its one transaction, and a delete removes every row whose root is the deleted id.
Listing and latest read top-level rows only, through indexes that lead with ``nested``.

The ancestry walk is one recursive CTE over the ``checkpoint_id`` primary key. It uses ``UNION``
(not ``UNION ALL``) on (id, previous id) rows, so a cycle produces a repeated row that SQLite
drops and the recursion ends by itself; ``LIMIT`` caps it at ``max_depth`` rows. The same
statement returns the bodies of the walked rows and their nested rows, and whether a missing
previous id is a tombstone: one round trip whatever the depth.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Self

from ..backend import (
    Backend,
    CheckpointRecord,
    FenceCheck,
    InsertResult,
    StoredBody,
    WalkRecords,
    info_from_index,
)
from ..contract import Capability, CheckpointID, CheckpointInfo
from ..records import index_text, stored_body, stored_id, stored_ids, stored_row
from . import commit, lineage, schema
from .client import SQLiteClient
from .config import (
    DEFAULT_BUSY_TIMEOUT_MS,
    DEFAULT_SYNCHRONOUS,
    URL_PREFIX,
    Access,
    Synchronous,
    checked_access,
    checked_busy_timeout,
    checked_path,
    checked_synchronous,
)


class SQLiteBackend(Backend):
    """Checkpoints in a SQLite file. Backends on one file, in any process, share one store.

    Args:
        path: the file (created with its directory if missing).
        busy_timeout_ms: how long a write waits for another connection's write lock.
        synchronous: ``"full"`` (default: every acknowledged save survives a power cut) or
            ``"normal"`` (faster commits; a power cut or OS crash may roll back the newest
            acknowledged saves, each whole; see ``storages.sqlite.config.SYNCHRONOUS_MODES``).
        read_only: open the file with SQLite's ``mode=ro``: never created, migrated or
            written; every write raises StorageConfigurationError.
        immutable: open it with ``immutable=1`` (read-only too): no locks, no ``-wal`` or
            ``-shm`` file, for read-only media; only while nothing writes the file.
        statement_trace: a test hook (docs/sqlite.md): called with every SQL statement the
            connection runs (sqlite3's trace callback); the kit counts round trips with it.
    """

    capabilities = frozenset(
        {
            Capability.SIGNATURE_FILTER,
            Capability.ANCESTRY,
            Capability.NESTED,
            Capability.PRUNE,
            Capability.LIST_WORKFLOWS,
            Capability.RAW_ACCESS,
            Capability.INSPECT,
            Capability.PENDING_WRITES,
            Capability.SHARED,
            Capability.DURABLE,
            Capability.FENCING,
        }
    )

    orders_inserts = True  # one queue of group commits per handle, committed in queue order

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
        synchronous: Synchronous = DEFAULT_SYNCHRONOUS,
        read_only: bool = False,
        immutable: bool = False,
        statement_trace: Callable[[str], object] | None = None,
    ) -> None:
        # Resolved now, so a later chdir changes neither this backend nor its new handles.
        self.path: Path = checked_path(path)
        self.busy_timeout_ms: int = checked_busy_timeout(busy_timeout_ms)
        self.synchronous: Synchronous = checked_synchronous(synchronous)
        self.access: Access = checked_access(read_only, immutable)
        self.statement_trace = statement_trace
        self._client = SQLiteClient(
            self.path,
            busy_timeout_ms=self.busy_timeout_ms,
            synchronous=self.synchronous,
            describe=self.describe(),
            access=self.access,
            statement_trace=statement_trace,
        )

    @property
    def read_only(self) -> bool:
        """The backend only reads (``read_only`` or ``immutable``)."""
        return self.access != "rw"

    def new_handle(self, *, read_only: bool | None = None) -> Self:
        """A backend on the same file with the same settings (``read_only=True``: one that only
        reads, ``immutable`` if this one is)."""
        return type(self)(
            self.path,
            busy_timeout_ms=self.busy_timeout_ms,
            synchronous=self.synchronous,
            read_only=self.read_only if read_only is None else read_only,
            immutable=self.access == "immutable",
            statement_trace=self.statement_trace,
        )

    def describe(self) -> str:
        return URL_PREFIX + "/" + self.path.as_posix()

    @property
    def connection(self) -> Any:
        """The :class:`~storages.sqlite.thread.ConnectionThread` while open, else None. A test
        hook (docs/sqlite.md): ``execute_fetchall``, ``handoffs``, ``thread``."""
        return self._client.connection

    @property
    def release_at_exit(self) -> Any:
        """What closes an abandoned connection at interpreter exit. A test hook (docs/sqlite.md)."""
        return self._client.release_at_exit

    # ------------------------------------------------------------------ lifecycle

    async def open(self, operation: str) -> None:
        await self._client.open(self)

    async def follow_loop(self) -> None:
        # The connection's thread answers each call on the loop that made it: nothing to move.
        return None

    async def close(self) -> None:
        await self._client.close()

    # ------------------------------------------------------------------ primitives

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        # An id already stored is recognised by its bytes in the transaction (commit.py): an
        # unkeyed save hashes nothing (hashing the body would be a sixth of a save's instructions).
        return await self._client.save(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        return await self._client.run("save", commit.insert_fenced, records, expected_latest_id)

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        rows = await self._client.fetchall("load", schema.SELECT_RECORD, (checkpoint_id,))
        return _stored(rows[0]) if rows else None

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        ids = json.dumps(list(dict.fromkeys(checkpoint_ids)))
        rows = await self._client.fetchall("load", schema.SELECT_NESTED_BODIES, (ids,))
        return {stored_id(row[0]): stored_body(row[0], row[1]) for row in rows}

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        # One path (docs/sqlite.md, "One path per operation"): the newest row says whether the
        # walk to the head or the read of rivals is needed, and both run in one read transaction,
        # so they see one state of the file.
        found = await self._client.read(
            "get_latest", lineage.latest_rows, workflow_name, graph_signature_hash
        )
        if found is None:
            return None
        head, rivals = found
        stored = _stored(head)
        return replace(stored, rivals=[_stored(row) for row in rivals]) if rivals else stored

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        unfiltered, by_signature = (
            (schema.SELECT_ALL_BODIES, schema.SELECT_ALL_BODIES_WITH_SIGNATURE)
            if include_nested
            else (schema.SELECT_BODIES, schema.SELECT_BODIES_WITH_SIGNATURE)
        )
        query, parameters = _query_for(unfiltered, by_signature, workflow_name, graph_signature_hash)
        rows = await self._client.fetchall("list_checkpoints", query, parameters)
        return [_stored(row) for row in rows]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        unfiltered, by_signature = (
            (schema.SELECT_ALL_IDS, schema.SELECT_ALL_IDS_WITH_SIGNATURE)
            if include_nested
            else (schema.SELECT_IDS, schema.SELECT_IDS_WITH_SIGNATURE)
        )
        query, parameters = _query_for(unfiltered, by_signature, workflow_name, graph_signature_hash)
        rows = await self._client.fetchall("list_checkpoint_ids", query, parameters)
        return stored_ids(rows)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        return await self._client.run("delete", commit.remove, checkpoint_id)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        return await self._client.run("write_raw_body", commit.overwrite_body, checkpoint_id, body, digest)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        parameters = {"start": checkpoint_id, "max_depth": max_depth}
        query = schema.WALK_WITH_BODIES if with_bodies else schema.WALK_IDS
        rows = await self._client.fetchall("walk_ancestry", query, parameters)
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        for row in rows:
            row_id = stored_id(row[0])
            if with_bodies:
                bodies[row_id] = stored_body(row_id, row[3])
                if not row[4]:
                    continue  # a row nested in a walked one: its body only
            previous = None if row[1] is None else index_text(row[1], row_id, "previous id")
            links[row_id] = previous
            if row[2] and previous is not None:
                tombstones.add(previous)
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        rows = await self._client.fetchall("list_nested", schema.SELECT_CHILDREN, {"id": checkpoint_id})
        exists, children = rows[0]
        if not exists:
            return None
        return [index_text(child, checkpoint_id, "nested id") for child in json.loads(children)]

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        return await self._client.run("prune", commit.prune, workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        return await self._client.run("delete_workflow", commit.delete_workflow, workflow_name)

    async def workflow_names(self) -> list[str]:
        rows = await self._client.fetchall("list_workflows", schema.SELECT_WORKFLOW_NAMES)
        return [row[0] for row in rows]  # the engine checks each name (listed_workflow_name)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        rows = await self._client.fetchall("checkpoint_info", schema.SELECT_INFO, (checkpoint_id,))
        return info_from_index(*rows[0]) if rows else None

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        if workflow_name is None:
            rows = await self._client.fetchall("list_records", schema.SELECT_ALL_INFO)
        else:
            rows = await self._client.fetchall("list_records", schema.SELECT_WORKFLOW_INFO, (workflow_name,))
        return [info_from_index(*row) for row in rows]

    async def records_after(self, after: CheckpointID | None, limit: int) -> Sequence[CheckpointInfo]:
        if after is None:
            rows = await self._client.fetchall("iter_records", schema.SELECT_INFO_FIRST_PAGE, (limit,))
        else:
            rows = await self._client.fetchall("iter_records", schema.SELECT_INFO_PAGE_AFTER, (after, limit))
        return [info_from_index(*row) for row in rows]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        if workflow_name is None:
            rows = await self._client.fetchall("list_tombstones", schema.SELECT_TOMBSTONES)
        else:
            rows = await self._client.fetchall(
                "list_tombstones", schema.SELECT_WORKFLOW_TOMBSTONES, (workflow_name,)
            )
        return stored_ids(rows)


def _query_for(
    unfiltered: str, by_signature: str, workflow_name: str, graph_signature_hash: str | None
) -> tuple[str, tuple[str, ...]]:
    if graph_signature_hash is None:
        return unfiltered, (workflow_name,)
    return by_signature, (workflow_name, graph_signature_hash)


_stored = stored_row
