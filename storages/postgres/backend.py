"""The PostgreSQL backend: one schema, shared safely by handles, processes and hosts (needs
``psycopg`` and ``psycopg_pool``). The commit protocol is in commit.py, connections and retries
in client.py, the tables in schema.py; this module wires them into the primitives
(storages/backend.py).

Reads are single statements, so each sees one snapshot: a load or latest returns the record and
the bodies of everything nested in it in one round trip; latest is one descent of the index
``(workflow_name, nested, sequence)`` (O(log n) whatever the history) and one probe of the
successor index, walking on only where a checkpoint continues the newest; a root head's
rivals are read one descent back at a time, RIVALS_LIMIT descents at most (lineage.py). An
ancestry walk is one recursive CTE over the primary key. The walk uses ``UNION`` on (id,
previous id) rows, so a cycle yields a repeated row that PostgreSQL drops and the recursion ends
by itself, and ``LIMIT`` on the walked rows caps it at ``max_depth`` (PostgreSQL evaluates a
recursive CTE only as far as its reader fetches).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, Self

from psycopg_pool import AsyncConnectionPool

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
from ..errors import StorageConfigurationError
from ..records import index_text, stored_body, stored_id, stored_ids, stored_row
from .client import Connection, PostgresClient
from .commit import PostgresCommits
from .config import (
    PostgresOptions,
    describe_namespace,
    describe_url,
    driver_conninfo,
    is_postgres_url,
    options_from_url,
)
from .lineage import rivals_cte, tip_ctes
from .schema import render

_COLUMNS = "checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash"
_FAMILY_OF_HEAD = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash, true FROM head
    UNION ALL
    SELECT n.checkpoint_id, n.body, NULL, NULL, NULL, false
    FROM head JOIN {s}.checkpoints AS n ON n.root_id = head.family
"""
_LOAD = (
    f"WITH head AS (SELECT {_COLUMNS}, coalesce(root_id, checkpoint_id) AS family "  # noqa: S608
    "FROM {s}.checkpoints WHERE checkpoint_id = %(id)s)" + _FAMILY_OF_HEAD
)
# The head, its rivals and the rows nested in each, as (id, body, workflow, previous id,
# signature, kind, family, sequence): kind 0 for the head, 1 for a rival, 2 for a nested row of
# the top-level row named by family. Kinds are numbers: a database whose text is not UTF-8
# (SQL_ASCII) hands text over as bytes, and a kind must still be told apart.
_LATEST_HEAD = (
    f", head AS (SELECT {_COLUMNS}, sequence FROM {{s}}.checkpoints "  # noqa: S608
    "WHERE checkpoint_id = (SELECT checkpoint_id FROM lineage_tip)),\n    "
    + rivals_cte("c.checkpoint_id, c.body, c.workflow_name, c.previous_checkpoint_id, c.graph_signature_hash")
    + f"""
    SELECT {_COLUMNS}, 0, checkpoint_id, NULL::bigint FROM head
    UNION ALL
    SELECT {_COLUMNS}, 1, checkpoint_id, sequence FROM rivals
    UNION ALL
    SELECT n.checkpoint_id, n.body, NULL, NULL, NULL, 2, n.root_id, NULL
    FROM (SELECT checkpoint_id FROM head UNION ALL SELECT checkpoint_id FROM rivals) AS t
    JOIN {{s}}.checkpoints AS n ON n.root_id = t.checkpoint_id
"""  # noqa: S608 - constant SQL
)
_LATEST = "WITH RECURSIVE " + tip_ctes("%(workflow)s") + _LATEST_HEAD
_LATEST_WITH_SIGNATURE = "WITH RECURSIVE " + tip_ctes("%(workflow)s", "%(signature)s") + _LATEST_HEAD
_GET = "SELECT body FROM {s}.checkpoints WHERE checkpoint_id = %s"
_NESTED_BODIES = """
    SELECT n.checkpoint_id, n.body
    FROM {s}.checkpoints AS c JOIN {s}.checkpoints AS n ON n.root_id = coalesce(c.root_id, c.checkpoint_id)
    WHERE c.checkpoint_id = ANY(%s::text[])
"""
_TOP = " AND NOT nested"
_BY_SIGNATURE = " AND graph_signature_hash = %(signature)s"
_LIST = f"SELECT {_COLUMNS} FROM {{s}}.checkpoints WHERE workflow_name = %(workflow)s"  # noqa: S608
_LIST_IDS = "SELECT checkpoint_id FROM {s}.checkpoints WHERE workflow_name = %(workflow)s"
_CHILDREN = """
    SELECT EXISTS (SELECT 1 FROM {s}.checkpoints WHERE checkpoint_id = %(id)s),
        ARRAY(SELECT checkpoint_id FROM {s}.checkpoints WHERE container_id = %(id)s ORDER BY position)
"""
_WALK = """
    WITH RECURSIVE walk (checkpoint_id, previous_checkpoint_id) AS (
        SELECT checkpoint_id, previous_checkpoint_id FROM {s}.checkpoints WHERE checkpoint_id = %(start)s
        UNION
        SELECT c.checkpoint_id, c.previous_checkpoint_id
        FROM walk JOIN {s}.checkpoints AS c ON c.checkpoint_id = walk.previous_checkpoint_id
    ),
    reached AS MATERIALIZED (SELECT checkpoint_id, previous_checkpoint_id FROM walk LIMIT %(max_depth)s)
"""
_WALK_IDS = (
    _WALK  # noqa: S608 - constant SQL
    + """
    SELECT r.checkpoint_id, r.previous_checkpoint_id,
        EXISTS (SELECT 1 FROM {s}.tombstones AS t WHERE t.checkpoint_id = r.previous_checkpoint_id),
        NULL, true
    FROM reached AS r
"""
)
_WALK_WITH_BODIES = (
    _WALK  # noqa: S608 - constant SQL
    + """
    SELECT r.checkpoint_id, r.previous_checkpoint_id,
        EXISTS (SELECT 1 FROM {s}.tombstones AS t WHERE t.checkpoint_id = r.previous_checkpoint_id),
        c.body, true
    FROM reached AS r JOIN {s}.checkpoints AS c ON c.checkpoint_id = r.checkpoint_id
    UNION ALL
    SELECT n.checkpoint_id, NULL, false, n.body, false
    FROM reached AS r
    JOIN {s}.checkpoints AS c ON c.checkpoint_id = r.checkpoint_id
    JOIN {s}.checkpoints AS n ON n.root_id = coalesce(c.root_id, c.checkpoint_id)
"""
)
_WORKFLOW_NAMES = "SELECT DISTINCT workflow_name FROM {s}.checkpoints WHERE NOT nested"
_ALL_INFO = """
    SELECT checkpoint_id, workflow_name, previous_checkpoint_id, graph_signature_hash, container_id,
        sequence, octet_length(body)
    FROM {s}.checkpoints
"""
_INFO = _ALL_INFO + " WHERE checkpoint_id = %s"
_INFO_FIRST_PAGE = _ALL_INFO + " ORDER BY checkpoint_id LIMIT %s"
_INFO_PAGE_AFTER = _ALL_INFO + " WHERE checkpoint_id > %s ORDER BY checkpoint_id LIMIT %s"
_WORKFLOW_INFO = _ALL_INFO + " WHERE workflow_name = %s"
_TOMBSTONES = "SELECT checkpoint_id FROM {s}.tombstones"
_WORKFLOW_TOMBSTONES = _TOMBSTONES + " WHERE workflow_name = %s"


class PostgresBackend(Backend):
    """Checkpoints in a PostgreSQL schema. Handles on one schema, in any process on any host,
    share one store.

    Give ``url`` (``postgresql://user:password@host:port/db``; the storage owns a bounded pool,
    one per handle) or ``pool`` (a ``psycopg_pool.AsyncConnectionPool`` whose connections are in
    autocommit) or ``connection`` (an ``AsyncConnection`` in autocommit); given ones are never
    closed by the storage. The schema (``checkpoint_storages`` unless told) is created and
    migrated on first use; ``table_prefix`` names its tables ``<prefix>checkpoints``, ..., so
    several stores share one schema.
    """

    capabilities: frozenset[Capability] = frozenset(
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

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        connection: Connection | None = None,
        schema: str | None = None,
        table_prefix: str | None = None,
        pool_size: int | None = None,
        pool_timeout: float | None = None,
        retries: int | None = None,
        read_only: bool = False,
    ) -> None:
        if sum(given is not None for given in (url, pool, connection)) != 1:
            raise StorageConfigurationError(
                "PostgresCheckpointStorage needs exactly one of url=, pool= or connection="
            )
        overrides = {
            "schema": schema,
            "table_prefix": table_prefix,
            "pool_size": pool_size,
            "pool_timeout": pool_timeout,
            "retries": retries,
        }
        conninfo: str | None = None
        if url is not None:
            if not is_postgres_url(url):
                raise StorageConfigurationError(
                    "Not a PostgreSQL URL; expected postgresql://user:password@host:port/db"
                )
            self._options = options_from_url(url, overrides)
            conninfo = driver_conninfo(url)
            self._describe = describe_url(url, self._options.schema, self._options.table_prefix)
        else:
            self._options = PostgresOptions(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
            kind = "pool" if pool is not None else "connection"
            namespace = describe_namespace(self._options.schema, self._options.table_prefix)
            self._describe = f"postgresql {kind} ({namespace})"
        self._url = url
        self._given = (pool, connection)
        if not isinstance(read_only, bool):
            raise StorageConfigurationError(f"read_only must be True or False, got {read_only!r}")
        self._client = PostgresClient(
            conninfo, self._options, self._describe, pool=pool, connection=connection, read_only=read_only
        )
        self._commits = PostgresCommits(self._client, self._options.schema, self._options.table_prefix)
        self._sql = _Queries(self._options.schema, self._options.table_prefix)

    def new_handle(self, *, read_only: bool | None = None) -> Self:
        """A backend on the same schema and tables: the given pool or connection again (its
        owner's), or a pool of its own from the URL (``read_only``: one that only reads; by
        default, as this one)."""
        pool, connection = self._given
        options = self._options
        return type(self)(
            self._url,
            pool=pool,
            connection=connection,
            schema=options.schema,
            table_prefix=options.table_prefix,
            pool_size=options.pool_size,
            pool_timeout=options.pool_timeout,
            retries=options.retries,
            read_only=self.read_only if read_only is None else read_only,
        )

    @property
    def read_only(self) -> bool:
        """The backend only reads: it neither creates nor migrates the schema (one that does not
        exist is refused with StoreNotFoundError) and every write raises."""
        return self._client.read_only

    @property
    def schema(self) -> str:
        return self._options.schema

    @property
    def table_prefix(self) -> str:
        return self._options.table_prefix

    @property
    def options(self) -> PostgresOptions:
        return self._options

    @property
    def statements_sent(self) -> int:
        """Statements (round trips) this handle has sent; the kit's ``scale`` clauses count them."""
        return self._client.statements

    @property
    def general_path(self) -> bool:
        """A test hook (docs/postgres.md, "One path per operation"): True sends every save through
        ``save_family``, the general path, so a test can hold ``save_one`` to it."""
        return self._commits.general_path

    @general_path.setter
    def general_path(self, value: bool) -> None:
        self._commits.general_path = value

    def describe(self) -> str:
        return self._describe

    # ------------------------------------------------------------------ lifecycle

    async def open(self, operation: str) -> None:
        await self._client.open(operation)

    async def follow_loop(self) -> None:
        await self._client.follow_loop()

    async def close(self) -> None:
        await self._client.close()

    # ------------------------------------------------------------------ writes (commit.py)

    async def insert(self, records: Sequence[CheckpointRecord]) -> InsertResult:
        self._refuse_if_read_only("save")
        return await self._commits.insert(records)

    async def insert_fenced(
        self, records: Sequence[CheckpointRecord], expected_latest_id: CheckpointID | None
    ) -> FenceCheck | None:
        self._refuse_if_read_only("save")
        return await self._commits.insert_fenced(records, expected_latest_id)

    async def remove(self, checkpoint_id: CheckpointID) -> bool:
        self._refuse_if_read_only("delete")
        return await self._commits.remove(checkpoint_id)

    async def overwrite_body(self, checkpoint_id: CheckpointID, body: bytes, digest: str) -> bool:
        self._refuse_if_read_only("write_raw_body")
        return await self._commits.overwrite_body(checkpoint_id, body, digest)

    async def prune(self, workflow_name: str, keep_last: int) -> int:
        self._refuse_if_read_only("prune")
        return await self._commits.prune(workflow_name, keep_last)

    async def delete_workflow(self, workflow_name: str) -> int:
        self._refuse_if_read_only("delete_workflow")
        return await self._commits.delete_workflow(workflow_name)

    def _refuse_if_read_only(self, operation: str) -> None:
        if self.read_only:
            raise StorageConfigurationError(
                f"{self._describe} was opened read-only: {operation} would write; open it without "
                "read_only to write"
            )

    # ------------------------------------------------------------------ reads

    async def load(self, checkpoint_id: CheckpointID) -> StoredBody | None:
        return _family(await self._client.fetch("load", self._sql.load, {"id": checkpoint_id}))

    async def latest(self, workflow_name: str, graph_signature_hash: str | None) -> StoredBody | None:
        if graph_signature_hash is None:
            query, parameters = self._sql.latest, {"workflow": workflow_name}
        else:
            query = self._sql.latest_with_signature
            parameters = {"workflow": workflow_name, "signature": graph_signature_hash}
        return _head_and_rivals(await self._client.fetch("get_latest", query, parameters))

    async def nested_bodies(self, checkpoint_ids: Collection[CheckpointID]) -> Mapping[CheckpointID, bytes]:
        ids = list(dict.fromkeys(checkpoint_ids))
        rows = await self._client.fetch("load", self._sql.nested_bodies, (ids,))
        return {stored_id(row[0]): stored_body(row[0], row[1]) for row in rows}

    async def list_bodies(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> Sequence[StoredBody]:
        query = self._sql.listing(self._sql.list, graph_signature_hash, include_nested)
        rows = await self._client.fetch(
            "list_checkpoints", query, {"workflow": workflow_name, "signature": graph_signature_hash}
        )
        return [_stored(row) for row in rows]

    async def list_ids(
        self, workflow_name: str, graph_signature_hash: str | None, *, include_nested: bool = False
    ) -> list[CheckpointID]:
        query = self._sql.listing(self._sql.list_ids, graph_signature_hash, include_nested)
        rows = await self._client.fetch(
            "list_checkpoint_ids", query, {"workflow": workflow_name, "signature": graph_signature_hash}
        )
        return stored_ids(rows)

    async def walk(self, checkpoint_id: CheckpointID, max_depth: int, *, with_bodies: bool) -> WalkRecords:
        query = self._sql.walk_with_bodies if with_bodies else self._sql.walk_ids
        rows = await self._client.fetch(
            "walk_ancestry", query, {"start": checkpoint_id, "max_depth": max_depth}
        )
        links: dict[CheckpointID, CheckpointID | None] = {}
        bodies: dict[CheckpointID, bytes] = {}
        tombstones: set[CheckpointID] = set()
        for stored_row_id, stored_previous, buried, body, walked in rows:
            row_id = stored_id(stored_row_id)
            if body is not None:
                bodies[row_id] = stored_body(row_id, body)
            if not walked:
                continue  # a record nested in a walked one: its body only
            previous = None if stored_previous is None else index_text(stored_previous, row_id, "previous id")
            links[row_id] = previous
            if buried and previous is not None:
                tombstones.add(previous)
        return WalkRecords(links, bodies, frozenset(tombstones))

    async def nested_ids(self, checkpoint_id: CheckpointID) -> list[CheckpointID] | None:
        rows = await self._client.fetch("list_nested", self._sql.children, {"id": checkpoint_id})
        exists, children = rows[0]
        if not exists:
            return None
        return [index_text(child, checkpoint_id, "nested id") for child in children]

    async def workflow_names(self) -> list[str]:
        rows = await self._client.fetch("list_workflows", self._sql.workflow_names)
        return [row[0] for row in rows]  # the engine checks each name (listed_workflow_name)

    async def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        rows = await self._client.fetch("checkpoint_info", self._sql.info, (checkpoint_id,))
        return info_from_index(*rows[0]) if rows else None

    async def records(self, workflow_name: str | None) -> Sequence[CheckpointInfo]:
        if workflow_name is None:
            rows = await self._client.fetch("list_records", self._sql.all_info)
        else:
            rows = await self._client.fetch("list_records", self._sql.workflow_info, (workflow_name,))
        return [info_from_index(*row) for row in rows]

    async def records_after(self, after: CheckpointID | None, limit: int) -> Sequence[CheckpointInfo]:
        if after is None:
            rows = await self._client.fetch("iter_records", self._sql.info_first_page, (limit,))
        else:
            rows = await self._client.fetch("iter_records", self._sql.info_page_after, (after, limit))
        return [info_from_index(*row) for row in rows]

    async def tombstones(self, workflow_name: str | None) -> Collection[CheckpointID]:
        if workflow_name is None:
            rows = await self._client.fetch("list_tombstones", self._sql.tombstones)
        else:
            rows = await self._client.fetch(
                "list_tombstones", self._sql.workflow_tombstones, (workflow_name,)
            )
        return stored_ids(rows)


class _Queries:
    """Every read statement, rendered once for one schema."""

    def __init__(self, schema_name: str, table_prefix: str) -> None:
        def r(template: str) -> str:
            return render(template, schema_name, table_prefix)

        self.load, self.latest, self.latest_with_signature = r(_LOAD), r(_LATEST), r(_LATEST_WITH_SIGNATURE)
        self.get, self.nested_bodies, self.children = r(_GET), r(_NESTED_BODIES), r(_CHILDREN)
        self.list, self.list_ids = r(_LIST), r(_LIST_IDS)
        self.walk_ids, self.walk_with_bodies = r(_WALK_IDS), r(_WALK_WITH_BODIES)
        self.workflow_names, self.all_info, self.info = r(_WORKFLOW_NAMES), r(_ALL_INFO), r(_INFO)
        self.workflow_info, self.tombstones = r(_WORKFLOW_INFO), r(_TOMBSTONES)
        self.workflow_tombstones = r(_WORKFLOW_TOMBSTONES)
        self.info_first_page, self.info_page_after = r(_INFO_FIRST_PAGE), r(_INFO_PAGE_AFTER)

    @staticmethod
    def listing(base: str, graph_signature_hash: str | None, include_nested: bool) -> str:
        return (
            base
            + ("" if include_nested else _TOP)
            + ("" if graph_signature_hash is None else _BY_SIGNATURE)
            + " ORDER BY sequence"
        )


_stored = stored_row


def _family(rows: Sequence[Sequence[Any]]) -> StoredBody | None:
    """The head row (flagged true) with the bodies of the rows nested in it, or None."""
    head = next((row for row in rows if row[5]), None)
    if head is None:
        return None
    nested = {stored_id(row[0]): stored_body(row[0], row[1]) for row in rows if not row[5]}
    stored = _stored(head)
    return StoredBody(stored.checkpoint_id, stored.body, nested=nested, entry=stored.entry)


_HEAD, _RIVAL, _NESTED = 0, 1, 2
"""The kinds of row the latest statement returns."""


def _head_and_rivals(rows: Sequence[Sequence[Any]]) -> StoredBody | None:
    """The head (kind 0) with its rivals (kind 1, in ascending sequence) in ``rivals``, each with
    the bodies of the rows nested in it (kind 2, by family), or None."""
    nested: dict[object, dict[CheckpointID, bytes]] = {}
    tops: list[Sequence[Any]] = []
    for row in rows:
        if row[5] == _NESTED:
            nested.setdefault(row[6], {})[stored_id(row[0])] = stored_body(row[0], row[1])
        else:
            tops.append(row)
    head = next((row for row in tops if row[5] == _HEAD), None)
    if head is None:
        return None

    def with_family(row: Sequence[Any]) -> StoredBody:
        stored = _stored(row)
        return StoredBody(
            stored.checkpoint_id, stored.body, nested=nested.get(row[6], {}), entry=stored.entry
        )

    rivals = sorted((row for row in tops if row[5] == _RIVAL), key=lambda row: int(row[7]))
    found = with_family(head)
    return replace(found, rivals=[with_family(row) for row in rivals]) if rivals else found


__all__ = ["PostgresBackend"]
