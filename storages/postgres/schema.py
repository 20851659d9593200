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
  the save's next sequence (the largest of each kind, one descent each); listings that include
  nested rows (one workflow's rows of both kinds, sorted). Version 1 had a unique
  ``(workflow_name, sequence)`` and a partial ``(workflow_name, sequence) WHERE NOT nested``
  instead: one index more per save.
* ``checkpoints_top_by_signature (workflow_name, graph_signature_hash, sequence) WHERE NOT
  nested``: latest and listings with a signature filter.
* ``checkpoints_by_container (container_id, position)`` and ``checkpoints_by_root (root_id)``,
  partial (nested rows only, so a top-level save does not touch them): a checkpoint's children
  in order; a family's nested bodies, deletes and prunes.
"""

from __future__ import annotations

import hashlib
import re

CONFLICT_SQLSTATE = "CSCNF"
"""Raised by ``save_family`` when a nested record's id is already stored: nothing is written."""
FENCE_SQLSTATE = "CSFNC"
"""Raised by a fenced ``save_family`` when the workflow's latest is not the expected one: nothing is
written; the message is the latest id (empty, with detail ``none``, when there is none)."""
RETRY_SQLSTATE = "CSRTY"
"""Raised by ``save_family`` when another transaction stored the top id after this one looked
(under another workflow's lock): nothing is written, and the call is repeated."""
SEQUENCE_INDEX = "checkpoints_by_kind_and_sequence"
"""The unique index a save's sequence lands in (version 2). A unique violation on it means the
save read the largest sequence from a snapshot older than the lock (REPEATABLE READ or
SERIALIZABLE sessions): nothing is written, and the call is repeated."""
PRIMARY_KEY = "checkpoints_pkey"
"""A unique violation on it in ``save_one``: a concurrent save (under another workflow's lock)
stored the same id after this one probed: nothing is written, and the call is repeated (it then
finds the id)."""

# Constant SQL: {s} is a checked identifier, {retry}, {conflict} and {fence} are constants.
_SAVE_FAMILY = (
    """
CREATE FUNCTION {s}.save_family(
    p_ids text[], p_names text[], p_previous text[], p_signatures text[], p_digests text[],
    p_bodies bytea[], p_containers text[], p_roots text[], p_positions integer[],
    p_fenced boolean, p_expected text
) RETURNS TABLE (existing_digest text, latest_id text, inserted boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_existing text;
    v_latest text;
    v_name text;
    v_count integer;
    v_next bigint;
    v_sequences jsonb := '{}';
    v_sequence bigint;
    v_inserted integer;
BEGIN
    SELECT c.digest INTO v_existing FROM {s}.checkpoints AS c WHERE c.checkpoint_id = p_ids[1];
    IF v_existing IS NOT NULL THEN
        -- Stored already (a retry, or a repeat): nothing to write. A fenced caller also gets the
        -- latest, to tell "this is the latest" (a harmless retry) from a stale writer.
        IF p_fenced THEN
            SELECT c.checkpoint_id INTO v_latest FROM {s}.checkpoints AS c
            WHERE c.workflow_name = p_names[1] AND NOT c.nested ORDER BY c.sequence DESC LIMIT 1;
        END IF;
        RETURN QUERY SELECT v_existing, v_latest, false;
        RETURN;
    END IF;
    -- Take the sequence numbers: the UPDATE row-locks each workflow's counter until commit, so
    -- saves of one workflow commit one after the other, in any process on any host, and their
    -- sequences follow commit order. Names are locked in order, so two families never deadlock.
    IF cardinality(p_ids) = 1 THEN
        UPDATE {s}.workflows SET next_sequence = next_sequence + 1 WHERE name = p_names[1]
        RETURNING next_sequence - 1 INTO v_sequence;
        IF v_sequence IS NULL THEN
            INSERT INTO {s}.workflows AS w (name, next_sequence) VALUES (p_names[1], 2)
            ON CONFLICT (name) DO UPDATE SET next_sequence = w.next_sequence + 1
            RETURNING w.next_sequence - 1 INTO v_sequence;
        END IF;
    ELSE
        FOR v_name, v_count IN SELECT n, count(*) FROM unnest(p_names) AS n GROUP BY n ORDER BY n LOOP
            INSERT INTO {s}.workflows AS w (name, next_sequence) VALUES (v_name, 1 + v_count)
            ON CONFLICT (name) DO UPDATE SET next_sequence = w.next_sequence + v_count
            RETURNING w.next_sequence - v_count INTO v_next;
            v_sequences := v_sequences || jsonb_build_object(v_name, v_next);
        END LOOP;
    END IF;
    IF p_fenced THEN
        SELECT c.checkpoint_id INTO v_latest FROM {s}.checkpoints AS c
        WHERE c.workflow_name = p_names[1] AND NOT c.nested ORDER BY c.sequence DESC LIMIT 1;
        IF v_latest IS DISTINCT FROM p_expected THEN
            -- Raised, not returned, so the sequence numbers just taken roll back with it.
            RAISE EXCEPTION USING ERRCODE = '{fence}', MESSAGE = coalesce(v_latest, ''),
                DETAIL = CASE WHEN v_latest IS NULL THEN 'none' ELSE 'id' END;
        END IF;
    END IF;
    FOR i IN 1 .. cardinality(p_ids) LOOP
        IF cardinality(p_ids) > 1 THEN
            v_sequence := (v_sequences ->> p_names[i])::bigint;
            v_sequences := v_sequences || jsonb_build_object(p_names[i], v_sequence + 1);
        END IF;
        INSERT INTO {s}.checkpoints (
            checkpoint_id, workflow_name, sequence, previous_checkpoint_id, graph_signature_hash,
            digest, body, nested, container_id, root_id, position
        ) VALUES (
            p_ids[i], p_names[i], v_sequence, p_previous[i], p_signatures[i], p_digests[i],
            p_bodies[i], p_containers[i] IS NOT NULL, p_containers[i], p_roots[i], p_positions[i]
        ) ON CONFLICT (checkpoint_id) DO NOTHING;
        GET DIAGNOSTICS v_inserted = ROW_COUNT;
        IF v_inserted = 0 THEN
            -- The exception rolls back the whole statement: none of the family is written.
            IF i = 1 THEN
                RAISE EXCEPTION USING ERRCODE = '{retry}', MESSAGE = p_ids[i];
            END IF;
            RAISE EXCEPTION USING ERRCODE = '{conflict}', MESSAGE = p_ids[i];
        END IF;
    END LOOP;
    RETURN QUERY SELECT NULL::text, NULL::text, true;
END
$$
""".replace("{retry}", RETRY_SQLSTATE)
    .replace("{conflict}", CONFLICT_SQLSTATE)
    .replace("{fence}", FENCE_SQLSTATE)
)


# Version 2. Every template below also takes {retry}, {conflict} and {fence}, constants.

# The advisory lock of one workflow of this schema: a signed 64-bit key. Another application's
# advisory locks on the same key (or two names with one hash) only make saves wait, never wrong.
_WORKFLOW_LOCK = "hashtextextended('checkpoint-storages:{s}:{p}' || {name}, 0)"

# One past the largest sequence of either kind, and at least the high-water mark deletions
# left; read in one statement (one snapshot, taken after the lock). ORDER BY ... LIMIT 1, not
# max(): a backward index descent whatever the planner estimates for a kind (a generic plan's
# guess).
_NEXT_SEQUENCE_EXPRESSION = """greatest(
        (SELECT c.sequence + 1 FROM {s}.checkpoints AS c
         WHERE c.workflow_name = {name} AND NOT c.nested ORDER BY c.sequence DESC LIMIT 1),
        (SELECT c.sequence + 1 FROM {s}.checkpoints AS c
         WHERE c.workflow_name = {name} AND c.nested ORDER BY c.sequence DESC LIMIT 1),
        (SELECT w.next_sequence FROM {s}.workflows AS w WHERE w.name = {name}),
        1
    )"""
_NEXT_SEQUENCE = "SELECT " + _NEXT_SEQUENCE_EXPRESSION

# Outside READ COMMITTED a statement's snapshot is the transaction's, taken before the lock was
# granted, so the largest sequence read may be stale. A stale number already taken hits the
# unique index (SEQUENCE_INDEX, the call is repeated); writing the high-water mark makes one
# taken and since deleted a serialization failure (retried) instead of a number going back.
_HIGH_WATER_IF_NOT_READ_COMMITTED = """
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        INSERT INTO {s}.workflows AS w (name, next_sequence)
        SELECT c.workflow_name, max(c.sequence) + 1 FROM {s}.checkpoints AS c
        WHERE c.checkpoint_id = ANY({ids}) GROUP BY c.workflow_name ORDER BY c.workflow_name
        ON CONFLICT (name) DO UPDATE SET next_sequence = greatest(w.next_sequence, excluded.next_sequence);
    END IF;
"""

_LATEST_TOP = """
    SELECT c.checkpoint_id INTO {into} FROM {s}.checkpoints AS c
    WHERE c.workflow_name = {name} AND NOT c.nested ORDER BY c.sequence DESC LIMIT 1
"""

# The common save: one top-level checkpoint with nothing nested, in scalar parameters (the body
# travels in binary: no hex text array to build on the client or to parse on the server).
_SAVE_ONE = (
    """
CREATE FUNCTION {s}.save_one(
    p_id text, p_name text, p_previous text, p_signature text, p_digest text, p_body bytea,
    p_fenced boolean, p_expected text,
    OUT existing_digest text, OUT latest_id text, OUT inserted boolean
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_sequence bigint;
BEGIN
    -- Held until commit: saves of one workflow commit one after the other, in any process on
    -- any host. Every statement below takes its snapshot after the lock is granted.
    PERFORM pg_advisory_xact_lock("""  # noqa: S608 - constant SQL: {s} is a checked identifier
    + _WORKFLOW_LOCK.replace("{name}", "p_name")
    + """);
    -- One statement, so one executor start: the id probe, the next sequence and, when fenced,
    -- the latest (a CASE arm not taken never runs its sub-select). A probe, not INSERT ... ON
    -- CONFLICT: no speculative insertion (its extra WAL record) on every save; a concurrent
    -- insert of this id under another workflow's lock makes the INSERT below a unique
    -- violation on the primary key instead, and the call is repeated.
    SELECT
        (SELECT c.digest FROM {s}.checkpoints AS c WHERE c.checkpoint_id = p_id),
        CASE WHEN p_fenced THEN ("""
    + _LATEST_TOP.replace(" INTO {into}", "").replace("{name}", "p_name").strip()
    + """) END,
        """
    + _NEXT_SEQUENCE_EXPRESSION.replace("{name}", "p_name")
    + """
    INTO existing_digest, latest_id, v_sequence;
    IF existing_digest IS NOT NULL THEN
        -- Stored already (a retry, a repeat, or another workflow's record): the base compares,
        -- and with the latest tells a harmless retry of a fenced save from a stale writer.
        inserted := false;
        RETURN;
    END IF;
    IF p_fenced AND latest_id IS DISTINCT FROM p_expected THEN
        RAISE EXCEPTION USING ERRCODE = '{fence}', MESSAGE = coalesce(latest_id, ''),
            DETAIL = CASE WHEN latest_id IS NULL THEN 'none' ELSE 'id' END;
    END IF;
    INSERT INTO {s}.checkpoints (
        checkpoint_id, workflow_name, sequence, previous_checkpoint_id, graph_signature_hash,
        digest, body, nested, container_id, root_id, position
    ) VALUES (
        p_id, p_name, v_sequence, p_previous, p_signature, p_digest, p_body, false, NULL, NULL, 0
    );
    """
    + _HIGH_WATER_IF_NOT_READ_COMMITTED.replace("{ids}", "ARRAY[p_id]").strip()
    + """
    latest_id := NULL;
    inserted := true;
END
$$
"""
)

# A family (a checkpoint and the records nested in it), in arrays; same signature as version 1's,
# so a handle of older code still running calls this one.
_SAVE_FAMILY_2 = (
    """
CREATE OR REPLACE FUNCTION {s}.save_family(
    p_ids text[], p_names text[], p_previous text[], p_signatures text[], p_digests text[],
    p_bodies bytea[], p_containers text[], p_roots text[], p_positions integer[],
    p_fenced boolean, p_expected text
) RETURNS TABLE (existing_digest text, latest_id text, inserted boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_existing text;
    v_latest text;
    v_key bigint;
    v_name text;
    v_next bigint;
    v_sequences jsonb := '{}';
    v_sequence bigint;
    v_inserted integer;
BEGIN
    SELECT c.digest INTO v_existing FROM {s}.checkpoints AS c WHERE c.checkpoint_id = p_ids[1];
    IF v_existing IS NOT NULL THEN
        -- Stored already (a retry, or a repeat): nothing to write. A fenced caller also gets the
        -- latest, to tell "this is the latest" (a harmless retry) from a stale writer.
        IF p_fenced THEN
            """  # noqa: S608 - constant SQL: {s} is a checked identifier
    + _LATEST_TOP.replace("{into}", "v_latest").replace("{name}", "p_names[1]").strip()
    + """;
        END IF;
        RETURN QUERY SELECT v_existing, v_latest, false;
        RETURN;
    END IF;
    -- Every workflow of the family, in key order, so two families never deadlock.
    FOR v_key IN SELECT DISTINCT """
    + _WORKFLOW_LOCK.replace("{name}", "n")
    + """ FROM unnest(p_names) AS n ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(v_key);
    END LOOP;
    IF p_fenced THEN
        """
    + _LATEST_TOP.replace("{into}", "v_latest").replace("{name}", "p_names[1]").strip()
    + """;
        IF v_latest IS DISTINCT FROM p_expected THEN
            RAISE EXCEPTION USING ERRCODE = '{fence}', MESSAGE = coalesce(v_latest, ''),
                DETAIL = CASE WHEN v_latest IS NULL THEN 'none' ELSE 'id' END;
        END IF;
    END IF;
    FOR v_name IN SELECT DISTINCT n FROM unnest(p_names) AS n LOOP
        """
    + _NEXT_SEQUENCE.replace("{name}", "v_name").strip()
    + """ INTO v_next;
        v_sequences := v_sequences || jsonb_build_object(v_name, v_next);
    END LOOP;
    FOR i IN 1 .. cardinality(p_ids) LOOP
        v_sequence := (v_sequences ->> p_names[i])::bigint;
        v_sequences := v_sequences || jsonb_build_object(p_names[i], v_sequence + 1);
        INSERT INTO {s}.checkpoints (
            checkpoint_id, workflow_name, sequence, previous_checkpoint_id, graph_signature_hash,
            digest, body, nested, container_id, root_id, position
        ) VALUES (
            p_ids[i], p_names[i], v_sequence, p_previous[i], p_signatures[i], p_digests[i],
            p_bodies[i], p_containers[i] IS NOT NULL, p_containers[i], p_roots[i], p_positions[i]
        ) ON CONFLICT (checkpoint_id) DO NOTHING;
        GET DIAGNOSTICS v_inserted = ROW_COUNT;
        IF v_inserted = 0 THEN
            -- The exception rolls back the whole statement: none of the family is written.
            IF i = 1 THEN
                RAISE EXCEPTION USING ERRCODE = '{retry}', MESSAGE = p_ids[i];
            END IF;
            RAISE EXCEPTION USING ERRCODE = '{conflict}', MESSAGE = p_ids[i];
        END IF;
    END LOOP;
    """
    + _HIGH_WATER_IF_NOT_READ_COMMITTED.replace("{ids}", "p_ids").strip()
    + """
    RETURN QUERY SELECT NULL::text, NULL::text, true;
END
$$
"""
)

# Every DELETE of checkpoint rows, by this code, by older code or by hand, leaves each affected
# workflow's high-water mark (rows locked in name order, so two deletes never deadlock).
_KEEP_HIGH_WATER = """
CREATE FUNCTION {s}.keep_high_water() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {s}.workflows AS w (name, next_sequence)
    SELECT g.workflow_name, max(g.sequence) + 1 FROM gone AS g
    GROUP BY g.workflow_name ORDER BY g.workflow_name
    ON CONFLICT (name) DO UPDATE SET next_sequence = greatest(w.next_sequence, excluded.next_sequence);
    RETURN NULL;
END
$$
"""


def _constants(template: str) -> str:
    return (
        template.replace("{retry}", RETRY_SQLSTATE)
        .replace("{conflict}", CONFLICT_SQLSTATE)
        .replace("{fence}", FENCE_SQLSTATE)
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
        _SAVE_FAMILY,
    ),
    # 2: sequences from the index under a per-workflow advisory lock, not from a counter row each
    # save rewrites; the counters become high-water marks kept by a delete trigger; one unique
    # (workflow_name, nested, sequence) index instead of two; save_one for single checkpoints.
    (
        "CREATE UNIQUE INDEX {p}" + SEQUENCE_INDEX + " ON {s}.checkpoints (workflow_name, nested, sequence)",
        "DROP INDEX {s}.checkpoints_by_sequence",
        "DROP INDEX {s}.checkpoints_top_by_sequence",
        _constants(_KEEP_HIGH_WATER),
        """
        CREATE TRIGGER checkpoints_keep_high_water AFTER DELETE ON {s}.checkpoints
        REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION {s}.keep_high_water()
        """,
        _constants(_SAVE_FAMILY_2),
        _constants(_SAVE_ONE),
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
