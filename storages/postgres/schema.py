"""The tables, indexes and the save functions, versioned: ``schema_version`` holds how many of
:data:`MIGRATIONS` were applied, and opening a storage applies the missing ones in one
transaction under an advisory lock, so processes opening one schema at once migrate it once.

Every statement is a template: ``{s}.name`` is the storage's object ``name`` in its schema,
after its table prefix (``"schema".prefixname``); ``{p}`` is the table prefix alone (index
names, which live in their table's schema); any other ``{s}`` is the quoted schema name. Both
are lower-case identifiers checked by :class:`~storages.postgres.config.PostgresOptions`.

Sequences (version 2): a save takes a transaction-level advisory lock per workflow it writes
(keyed by the schema and the workflow name, held until commit), then gives each row one more than
the largest sequence the workflow holds or ever held. "Holds" is read from the unique index
``(workflow_name, nested, sequence)`` by a statement that starts after the lock is granted, so in
READ COMMITTED it sees every save that held the lock before (a lock is released only once its
transaction's commit is visible): no two saves take one number, and numbers follow commit order.
"Ever held" is ``workflows.next_sequence``, a high-water mark that a statement trigger writes
whenever rows are deleted (delete, prune, delete_workflow, or anyone's DELETE), so a sequence
never goes back after the newest row is deleted. Version 1 took every number from that row with
an UPDATE: a new row version, its WAL record and a page write per save.

Indexes, each justified by the statements that use it:

* ``checkpoint_id`` primary key: load, raw get, info, the save's "is this id stored" probe,
  delete, the ancestry walk's recursive step, the nested-bodies join.
* ``checkpoints_by_kind_and_sequence (workflow_name, nested, sequence)``, unique: latest, list,
  list ids, prune and the fenced save's latest probe (top-level rows, newest first, one descent);
  a root head's rivals (the row committed right before each, one descent per step back); the
  save's next sequence (the largest of each kind, one descent each); listings that include
  nested rows (one workflow's rows of both kinds, sorted). Version 1 had a unique
  ``(workflow_name, sequence)`` and a partial ``(workflow_name, sequence) WHERE NOT nested``
  instead: one index more per save.
* ``checkpoints_top_by_signature (workflow_name, graph_signature_hash, sequence) WHERE NOT
  nested``: latest and listings with a signature filter.
* ``checkpoints_by_successor (previous_checkpoint_id, graph_signature_hash, sequence) WHERE NOT
  nested AND previous_checkpoint_id IS NOT NULL`` (version 3): whether a row is continued by
  another, for latest through the lineage (lineage.py): one probe per latest, finding nothing in
  the common case; a head's siblings; whether a root before a root head is a leaf.
* ``checkpoints_by_container (container_id, position)`` and ``checkpoints_by_root (root_id)``,
  partial (nested rows only, so a top-level save does not touch them): a checkpoint's children
  in order; a family's nested bodies, deletes and prunes.
"""

from __future__ import annotations

import hashlib
import re

from .lineage import CREATE_SUCCESSOR_INDEX
from .save_functions import (
    CONFLICT_SQLSTATE,
    FENCE_SQLSTATE,
    INSERT_CHECKPOINT,
    KEEP_HIGH_WATER,
    PRIMARY_KEY,
    RETRY_SQLSTATE,
    SAVE_FAMILY,
    SAVE_FAMILY_V1,
    SAVE_FAMILY_V2,
    SAVE_FAMILY_V3,
    SAVE_ONE,
    SAVE_ONE_V2,
    SAVE_ONE_V3,
    SEQUENCE_INDEX,
    with_constants,
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: sequence counters, checkpoints with their nested records, tombstones, the save function.
    (
        "CREATE TABLE {s}.workflows (name text PRIMARY KEY, next_sequence bigint NOT NULL)",
        """
        CREATE TABLE {s}.checkpoints (
            checkpoint_id text PRIMARY KEY,
            workflow_name text NOT NULL,
            sequence bigint NOT NULL,
            previous_checkpoint_id text,
            graph_signature_hash text NOT NULL,
            digest text NOT NULL,
            body bytea NOT NULL,
            nested boolean NOT NULL,
            container_id text,
            root_id text,
            position integer NOT NULL
        )
        """,
        "CREATE UNIQUE INDEX {p}checkpoints_by_sequence ON {s}.checkpoints (workflow_name, sequence)",
        """
        CREATE INDEX {p}checkpoints_top_by_sequence ON {s}.checkpoints (workflow_name, sequence)
        WHERE NOT nested
        """,
        """
        CREATE INDEX {p}checkpoints_top_by_signature
        ON {s}.checkpoints (workflow_name, graph_signature_hash, sequence) WHERE NOT nested
        """,
        """
        CREATE INDEX {p}checkpoints_by_container ON {s}.checkpoints (container_id, position)
        WHERE container_id IS NOT NULL
        """,
        "CREATE INDEX {p}checkpoints_by_root ON {s}.checkpoints (root_id) WHERE root_id IS NOT NULL",
        "CREATE TABLE {s}.tombstones (checkpoint_id text PRIMARY KEY, workflow_name text NOT NULL)",
        "CREATE INDEX {p}tombstones_by_workflow ON {s}.tombstones (workflow_name)",
        SAVE_FAMILY_V1,
    ),
    # 2: sequences from the index under a per-workflow advisory lock, not from a counter row each
    # save rewrites; the counters become high-water marks kept by a delete trigger; one unique
    # (workflow_name, nested, sequence) index instead of two; save_one for single checkpoints.
    (
        "CREATE UNIQUE INDEX {p}" + SEQUENCE_INDEX + " ON {s}.checkpoints (workflow_name, nested, sequence)",
        "DROP INDEX {s}.checkpoints_by_sequence",
        "DROP INDEX {s}.checkpoints_top_by_sequence",
        with_constants(KEEP_HIGH_WATER),
        """
        CREATE TRIGGER checkpoints_keep_high_water AFTER DELETE ON {s}.checkpoints
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION {s}.keep_high_water()
        """,
        with_constants(SAVE_FAMILY_V2),
        with_constants(SAVE_ONE_V2),
    ),
    # 3: latest through the lineage: the rows naming each previous id, and the save functions
    # whose fence checks that latest.
    (
        CREATE_SUCCESSOR_INDEX,
        with_constants(SAVE_FAMILY_V3),
        with_constants(SAVE_ONE_V3),
    ),
    # 4: every checkpoint row written by one function, insert_checkpoint, which both save
    # functions call: a column is written in one place. save_family probes each nested id
    # before its insert instead of the insert skipping a stored id.
    (
        with_constants(INSERT_CHECKPOINT),
        with_constants(SAVE_FAMILY),
        with_constants(SAVE_ONE),
    ),
)
"""Schema migrations, applied in order; step ``n`` (1-based) brings the schema to version ``n``.
Append new steps, never edit old ones: databases in the field are at every earlier version."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes and reads."""

OWN_TABLES = ("workflows", "checkpoints", "tombstones")

CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {s}"
"""Run only when the schema does not exist (checked in pg_namespace first): PostgreSQL checks
CREATE on the database before it looks whether the schema exists, so a role that owns its schema
but may not create schemas could never start if this ran every time."""
CREATE_SCHEMA_VERSION = """
    CREATE TABLE IF NOT EXISTS {s}.schema_version (
        singleton integer PRIMARY KEY CHECK (singleton = 1),
        version integer NOT NULL
    )
"""
# One query, readable by any role that may connect: does the schema exist, may this role use and
# create in it, may it create schemas, is there a version table, and which of our tables exist
# without it. to_regclass needs USAGE on the schema (it raises otherwise), hence the CASE; tables
# from pg_class, not information_schema, which hides tables the role has no privilege on.
SELECT_STATE = """
    SELECT
        n.oid IS NOT NULL,
        coalesce(has_schema_privilege(n.oid, 'USAGE'), false),
        coalesce(has_schema_privilege(n.oid, 'CREATE'), false),
        has_database_privilege(current_database(), 'CREATE'),
        current_user::text,
        current_database()::text,
        CASE WHEN has_schema_privilege(n.oid, 'USAGE') THEN to_regclass(%(version_table)s) IS NOT NULL END,
        (SELECT string_agg(c.relname::text, ', ' ORDER BY c.relname) FROM pg_class AS c
         WHERE c.relnamespace = n.oid AND c.relname = ANY(%(tables)s::text[]))
    FROM (SELECT 1) AS one LEFT JOIN pg_namespace AS n ON n.nspname = %(schema)s
"""
SELECT_VERSION = "SELECT version FROM {s}.schema_version"
RECORD_VERSION = """
    INSERT INTO {s}.schema_version (singleton, version) VALUES (1, %s)
    ON CONFLICT (singleton) DO UPDATE SET version = excluded.version
"""
LOCK_MIGRATION = "SELECT pg_advisory_xact_lock(%s)"
MIGRATION_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '100ms'"
"""Set after the migration lock is granted: each DDL statement waits at most 100 ms for a table
lock. A DDL statement waiting for its lock makes every later reader of that table wait behind
it, so a migration behind one long reader would stall all reads; it gives up instead, rolls
back and tries again after a backoff (client.py)."""


def quoted(schema: str) -> str:
    return '"' + schema + '"'


_OBJECT = re.compile(r"\{s\}\.(?=[a-z_])")


def render(template: str, schema: str, table_prefix: str = "") -> str:
    """``template`` with ``{s}.name`` replaced by ``"schema".<table_prefix>name``, ``{p}`` by the
    table prefix and any other ``{s}`` by the quoted schema name (no other braces are touched)."""
    qualified = _OBJECT.sub(lambda _: quoted(schema) + "." + table_prefix, template)
    return qualified.replace("{p}", table_prefix).replace("{s}", quoted(schema))


def object_names(table_prefix: str) -> tuple[str, ...]:
    """Our tables' names in the schema, the version table's first."""
    return tuple(table_prefix + name for name in ("schema_version", *OWN_TABLES))


def migration_lock_key(schema: str) -> int:
    """The advisory lock (a signed 64-bit key) that serialises migrations of one schema, whatever
    their table prefix: two stores creating one schema at once would otherwise race in
    ``CREATE SCHEMA IF NOT EXISTS`` (it is not safe against a concurrent create)."""
    digest = hashlib.blake2b(f"checkpoint-storages:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


__all__ = [
    "PRIMARY_KEY",
    "CONFLICT_SQLSTATE",
    "FENCE_SQLSTATE",
    "MIGRATIONS",
    "RETRY_SQLSTATE",
    "SCHEMA_VERSION",
    "SEQUENCE_INDEX",
    "migration_lock_key",
    "object_names",
    "render",
]
