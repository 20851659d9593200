"""The server-side functions a save runs (``save_one``, ``save_family``, the high-water trigger):
their SQL, the SQLSTATEs they raise for the client to tell apart, and the indexes those refer to.

Apart from schema.py (tables, migrations, the statements of reads) because a change to how a
save takes its sequence or checks a conflict is made here, in one place, and installed by a
migration there.
"""

from __future__ import annotations

from .lineage import tip_subquery

CONFLICT_SQLSTATE = "CSCNF"
"""Raised by ``save_family`` when a nested record's id is already stored: nothing is written."""
FENCE_SQLSTATE = "CSFNC"
"""Raised by a fenced ``save_family`` when the workflow's latest is not the expected one: nothing is
written; the message is the latest id (empty, with detail ``none``, when there is none)."""
RETRY_SQLSTATE = "CSRTY"
"""Raised by ``save_family`` of schema versions 1 to 3 when another transaction stored the top id
after this one looked (under another workflow's lock); version 4 raises a unique violation on
PRIMARY_KEY instead."""
SEQUENCE_INDEX = "checkpoints_by_kind_and_sequence"
"""The unique index a save's sequence lands in (version 2). A unique violation on it means the
save read the largest sequence from a snapshot older than the lock (REPEATABLE READ or
SERIALIZABLE sessions): nothing is written, and the call is repeated."""
PRIMARY_KEY = "checkpoints_pkey"
"""A unique violation on it from ``insert_checkpoint`` (either save function): a concurrent save
(under another workflow's lock) stored the same id after this one probed: nothing is written,
and the call is repeated (it then finds the id)."""

# Constant SQL: {s} is a checked identifier, {retry}, {conflict} and {fence} are constants.
SAVE_FAMILY_V1 = (
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

_LATEST_TOP_V2 = """
    SELECT c.checkpoint_id INTO {into} FROM {s}.checkpoints AS c
    WHERE c.workflow_name = {name} AND NOT c.nested ORDER BY c.sequence DESC LIMIT 1
"""

# Version 2 (the functions it created, kept as they were: migrations are never edited).

# The common save: one top-level checkpoint with nothing nested, in scalar parameters (the body
# travels in binary: no hex text array to build on the client or to parse on the server).
SAVE_ONE_V2 = (
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
    + _LATEST_TOP_V2.replace(" INTO {into}", "").replace("{name}", "p_name").strip()
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
SAVE_FAMILY_V2 = (
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
    + _LATEST_TOP_V2.replace("{into}", "v_latest").replace("{name}", "p_names[1]").strip()
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
    + _LATEST_TOP_V2.replace("{into}", "v_latest").replace("{name}", "p_names[1]").strip()
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

# Version 3: as version 2, with the fence checking the latest through the lineage (the functions
# it created, kept as they were).

# The common save: one top-level checkpoint with nothing nested, in scalar parameters (the body
# travels in binary: no hex text array to build on the client or to parse on the server).
SAVE_ONE_V3 = (
    """
CREATE OR REPLACE FUNCTION {s}.save_one(
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
        CASE WHEN p_fenced THEN """
    + tip_subquery("p_name")
    + """ END,
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
SAVE_FAMILY_V3 = (
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
            v_latest := """  # noqa: S608 - constant SQL: {s} is a checked identifier
    + tip_subquery("p_names[1]")
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
        v_latest := """
    + tip_subquery("p_names[1]")
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

# Version 4: as version 3, with every checkpoint row written by one function, insert_checkpoint,
# so a column is written in one place whichever path a save takes.

# The one statement that writes a checkpoint row. A plain INSERT, never ON CONFLICT (its
# speculative insertion writes one more WAL record on every save): an id stored meanwhile is a
# unique violation on the primary key, which rolls the caller's statement back and is repeated.
# Returns true (written; anything else raises) so that callers assign it: plpgsql evaluates an
# assigned call as a simple expression, where PERFORM would start an executor for a SELECT (about
# 5 µs of a save's 85 µs of server CPU).
INSERT_CHECKPOINT = """
CREATE FUNCTION {s}.insert_checkpoint(
    p_id text, p_name text, p_sequence bigint, p_previous text, p_signature text, p_digest text,
    p_body bytea, p_container text, p_root text, p_position integer
) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO {s}.checkpoints (
        checkpoint_id, workflow_name, sequence, previous_checkpoint_id, graph_signature_hash,
        digest, body, nested, container_id, root_id, position
    ) VALUES (
        p_id, p_name, p_sequence, p_previous, p_signature, p_digest, p_body, p_container IS NOT NULL,
        p_container, p_root, p_position
    );
    RETURN true;
END
$$
"""

# The common save: one top-level checkpoint with nothing nested, in scalar parameters (the body
# travels in binary: no hex text array to build on the client or to parse on the server).
SAVE_ONE = (
    """
CREATE OR REPLACE FUNCTION {s}.save_one(
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
    -- insert of this id under another workflow's lock makes the insert below a unique
    -- violation on the primary key instead, and the call is repeated.
    SELECT
        (SELECT c.digest FROM {s}.checkpoints AS c WHERE c.checkpoint_id = p_id),
        CASE WHEN p_fenced THEN """
    + tip_subquery("p_name")
    + """ END,
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
    inserted := {s}.insert_checkpoint(
        p_id, p_name, v_sequence, p_previous, p_signature, p_digest, p_body, NULL, NULL, 0
    );
    """
    + _HIGH_WATER_IF_NOT_READ_COMMITTED.replace("{ids}", "ARRAY[p_id]").strip()
    + """
    latest_id := NULL;
END
$$
"""
)

# A family (a checkpoint and the records nested in it), in arrays; same signature as version 1's,
# so a handle of older code still running calls this one.
SAVE_FAMILY = (
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
    v_written boolean;
BEGIN
    SELECT c.digest INTO v_existing FROM {s}.checkpoints AS c WHERE c.checkpoint_id = p_ids[1];
    IF v_existing IS NOT NULL THEN
        -- Stored already (a retry, or a repeat): nothing to write. A fenced caller also gets the
        -- latest, to tell "this is the latest" (a harmless retry) from a stale writer.
        IF p_fenced THEN
            v_latest := """  # noqa: S608 - constant SQL: {s} is a checked identifier
    + tip_subquery("p_names[1]")
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
        v_latest := """
    + tip_subquery("p_names[1]")
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
        -- A nested id stored already, or earlier in this family (its row is written by now), is
        -- a conflict: raised, so none of the family is written. The top id, stored by a
        -- concurrent save (another workflow's lock) since the probe above, makes the insert a
        -- unique violation on the primary key instead: the call is repeated and finds it.
        IF i > 1 AND EXISTS (SELECT 1 FROM {s}.checkpoints AS c WHERE c.checkpoint_id = p_ids[i]) THEN
            RAISE EXCEPTION USING ERRCODE = '{conflict}', MESSAGE = p_ids[i];
        END IF;
        v_sequence := (v_sequences ->> p_names[i])::bigint;
        v_sequences := v_sequences || jsonb_build_object(p_names[i], v_sequence + 1);
        v_written := {s}.insert_checkpoint(
            p_ids[i], p_names[i], v_sequence, p_previous[i], p_signatures[i], p_digests[i],
            p_bodies[i], p_containers[i], p_roots[i], p_positions[i]
        );
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
KEEP_HIGH_WATER = """
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


def with_constants(template: str) -> str:
    return (
        template.replace("{retry}", RETRY_SQLSTATE)
        .replace("{conflict}", CONFLICT_SQLSTATE)
        .replace("{fence}", FENCE_SQLSTATE)
    )


__all__ = [
    "CONFLICT_SQLSTATE",
    "FENCE_SQLSTATE",
    "INSERT_CHECKPOINT",
    "KEEP_HIGH_WATER",
    "PRIMARY_KEY",
    "RETRY_SQLSTATE",
    "SAVE_FAMILY",
    "SAVE_FAMILY_V1",
    "SAVE_FAMILY_V2",
    "SAVE_FAMILY_V3",
    "SAVE_ONE",
    "SAVE_ONE_V2",
    "SAVE_ONE_V3",
    "SEQUENCE_INDEX",
    "with_constants",
]
