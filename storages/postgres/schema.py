"""The tables, indexes and the save function, versioned: ``schema_version`` holds how many of
:data:`MIGRATIONS` were applied, and opening a storage applies the missing ones in one
transaction under an advisory lock, so processes opening one schema at once migrate it once.

Every statement is a template: ``{s}`` is the storage's schema name, a lower-case identifier
checked by :class:`~storages.postgres.config.PostgresOptions` and quoted here.
"""

from __future__ import annotations

import hashlib

CONFLICT_SQLSTATE = "CSCNF"
"""Raised by ``save_family`` when a nested record's id is already stored: nothing is written."""
FENCE_SQLSTATE = "CSFNC"
"""Raised by a fenced ``save_family`` when the workflow's latest is not the expected one: nothing is
written; the message is the latest id (empty, with detail ``none``, when there is none)."""
RETRY_SQLSTATE = "CSRTY"
"""Raised by ``save_family`` when another transaction stored the top id after this one looked
(under another workflow's lock): nothing is written, and the call is repeated."""

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
        "CREATE UNIQUE INDEX checkpoints_by_sequence ON {s}.checkpoints (workflow_name, sequence)",
        """
        CREATE INDEX checkpoints_top_by_sequence ON {s}.checkpoints (workflow_name, sequence)
        WHERE NOT nested
        """,
        """
        CREATE INDEX checkpoints_top_by_signature
        ON {s}.checkpoints (workflow_name, graph_signature_hash, sequence) WHERE NOT nested
        """,
        """
        CREATE INDEX checkpoints_by_container ON {s}.checkpoints (container_id, position)
        WHERE container_id IS NOT NULL
        """,
        "CREATE INDEX checkpoints_by_root ON {s}.checkpoints (root_id) WHERE root_id IS NOT NULL",
        "CREATE TABLE {s}.tombstones (checkpoint_id text PRIMARY KEY, workflow_name text NOT NULL)",
        "CREATE INDEX tombstones_by_workflow ON {s}.tombstones (workflow_name)",
        _SAVE_FAMILY,
    ),
)
"""Schema migrations, applied in order; step ``n`` (1-based) brings the schema to version ``n``.
Append new steps, never edit old ones: databases in the field are at every earlier version."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes and reads."""

OWN_TABLES = ("workflows", "checkpoints", "tombstones")

CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {s}"
CREATE_SCHEMA_VERSION = """
    CREATE TABLE IF NOT EXISTS {s}.schema_version (
        singleton integer PRIMARY KEY CHECK (singleton = 1),
        version integer NOT NULL
    )
"""
# One query: is there a version table, its version, and which of our tables exist without it.
SELECT_STATE = """
    SELECT
        to_regclass(%(version_table)s) IS NOT NULL,
        (SELECT string_agg(table_name, ', ' ORDER BY table_name) FROM information_schema.tables
         WHERE table_schema = %(schema)s AND table_name = ANY(%(tables)s))
"""
SELECT_VERSION = "SELECT version FROM {s}.schema_version"
RECORD_VERSION = """
    INSERT INTO {s}.schema_version (singleton, version) VALUES (1, %s)
    ON CONFLICT (singleton) DO UPDATE SET version = excluded.version
"""
LOCK_MIGRATION = "SELECT pg_advisory_xact_lock(%s)"


def quoted(schema: str) -> str:
    return '"' + schema + '"'


def render(template: str, schema: str) -> str:
    """``template`` with ``{s}`` replaced by the quoted schema name (no other braces are touched)."""
    return template.replace("{s}", quoted(schema))


def migration_lock_key(schema: str) -> int:
    """The advisory lock (a signed 64-bit key) that serialises migrations of one schema."""
    digest = hashlib.blake2b(f"checkpoint-storages:{schema}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


__all__ = [
    "CONFLICT_SQLSTATE",
    "MIGRATIONS",
    "RETRY_SQLSTATE",
    "SCHEMA_VERSION",
    "migration_lock_key",
    "render",
]
