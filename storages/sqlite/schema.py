"""The SQLite file's schema (versioned migrations) and every statement the storage runs.

Indexes, each justified by the statements that use it (every other index would only slow saves):

* ``checkpoint_id`` primary key: load, raw get, info, the save's "is this id stored" probe,
  delete, the ancestry walk's recursive step, the nested-bodies join.
* ``checkpoints_by_kind_and_sequence (workflow_name, nested, sequence)``, unique: latest, list,
  list ids, prune and the fenced save's latest probe (top-level rows only, newest first, one
  index step); a root head's rivals (the row committed right before it, one index step back,
  and only when that row is a leaf root of its signature, at most ``RIVALS_LIMIT`` rows back);
  the save's next sequence (the largest of each kind, one index step each); the listings that
  include nested records (both kinds of one workflow, sorted: listing reads every row anyway).
  Until version 4 a second unique index on ``(workflow_name, sequence)`` served only those
  listings; one index now serves both, a page fewer per save.
* ``checkpoints_top_by_signature (workflow_name, nested, graph_signature_hash, sequence)``: the
  same with a signature filter (MAF restores and ``get_latest(graph_signature_hash=...)``).
* ``checkpoints_by_successor (previous_checkpoint_id, graph_signature_hash, sequence)``,
  top-level rows with a previous id only: whether the newest row of a workflow is continued by
  another (latest through the lineage, lineage.py), and whether another row continues the one
  it continues (the head's rivals), or, for a root, whether the root committed right before it
  is continued; two probes per latest that find nothing in the common case, the walk to the tip
  and the read of the rivals when they find something. Rows are only ever looked up here by the
  id they continue, never by a NULL one, so the index need not hold roots.
* ``checkpoints_by_container (container_id, position)``, nested rows only: the children of one
  checkpoint, in order.
* ``checkpoints_by_root (root_id)``, nested rows only: deleting or pruning a family, reading a
  family's nested bodies. Both are partial (``IS NOT NULL``), so a top-level save, the common
  case, does not touch them; ``container_id = ?`` and ``root_id = ?`` imply the condition, so
  SQLite still uses them for those lookups.
* ``tombstones`` primary key and ``tombstones_by_workflow``: the walk's "pruned, not missing" test
  and delete_workflow.

Sequences: a save gives each row one more than the largest sequence its workflow holds or ever
held. "Holds" is read from the index above inside the save's ``BEGIN IMMEDIATE`` transaction, so
no other writer can take the same number; "ever held" is ``workflows.next_sequence``, a high-water
mark written only by the transactions that delete rows (delete, prune, delete_workflow), so a
sequence never goes back after the newest row is deleted. Until version 4 every save rewrote that
row: a page per save.

A top-level save's cost is the primary key plus two secondary indexes: bench/run.py measures it
next to a raw single INSERT into a table with only a primary key.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: per-workflow sequence counters and the checkpoints they order.
    (
        """
        CREATE TABLE workflows (
            name TEXT PRIMARY KEY NOT NULL,
            next_sequence INTEGER NOT NULL
        )
        """,
        """
        CREATE TABLE checkpoints (
            checkpoint_id TEXT PRIMARY KEY NOT NULL,
            workflow_name TEXT NOT NULL,
            sequence INTEGER NOT NULL,
            previous_checkpoint_id TEXT,
            graph_signature_hash TEXT NOT NULL,
            digest TEXT NOT NULL,
            body BLOB NOT NULL
        )
        """,
        "CREATE UNIQUE INDEX checkpoints_by_sequence ON checkpoints (workflow_name, sequence)",
        """
        CREATE INDEX checkpoints_by_signature
            ON checkpoints (workflow_name, graph_signature_hash, sequence)
        """,
    ),
    # 2: nested records, tombstones of pruned records, top-level-only indexes.
    (
        "ALTER TABLE checkpoints ADD COLUMN nested INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE checkpoints ADD COLUMN container_id TEXT",
        "ALTER TABLE checkpoints ADD COLUMN root_id TEXT",
        "ALTER TABLE checkpoints ADD COLUMN position INTEGER NOT NULL DEFAULT 0",
        "DROP INDEX checkpoints_by_signature",
        "CREATE INDEX checkpoints_top_by_sequence ON checkpoints (workflow_name, nested, sequence)",
        """
        CREATE INDEX checkpoints_top_by_signature
            ON checkpoints (workflow_name, nested, graph_signature_hash, sequence)
        """,
        "CREATE INDEX checkpoints_by_container ON checkpoints (container_id, position)",
        "CREATE INDEX checkpoints_by_root ON checkpoints (root_id)",
        """
        CREATE TABLE tombstones (
            checkpoint_id TEXT PRIMARY KEY NOT NULL,
            workflow_name TEXT NOT NULL
        )
        """,
        "CREATE INDEX tombstones_by_workflow ON tombstones (workflow_name)",
    ),
    # 3: the nested-record indexes hold nested rows only, so a top-level save skips both.
    (
        "DROP INDEX checkpoints_by_container",
        "DROP INDEX checkpoints_by_root",
        """
        CREATE INDEX checkpoints_by_container ON checkpoints (container_id, position)
            WHERE container_id IS NOT NULL
        """,
        "CREATE INDEX checkpoints_by_root ON checkpoints (root_id) WHERE root_id IS NOT NULL",
    ),
    # 4: one unique index orders both kinds of row; saves stop rewriting the workflows row, which
    # becomes the high-water mark deletions leave (code of version 3 refuses the file: its saves
    # would take sequences from a stale counter).
    (
        "DROP INDEX checkpoints_by_sequence",
        "DROP INDEX checkpoints_top_by_sequence",
        """
        CREATE UNIQUE INDEX checkpoints_by_kind_and_sequence
            ON checkpoints (workflow_name, nested, sequence)
        """,
    ),
    # 5: the top-level rows naming each previous id, for latest through the lineage.
    (
        """
        CREATE INDEX checkpoints_by_successor
            ON checkpoints (previous_checkpoint_id, graph_signature_hash, sequence)
            WHERE nested = 0 AND previous_checkpoint_id IS NOT NULL
        """,
    ),
)
"""Schema migrations, applied in order; step ``n`` (1-based) brings the file to version ``n``.
Append new steps, never edit old ones: files in the field are at every earlier version."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes and reads."""

SCHEMA_TABLES = ("workflows", "checkpoints", "checkpoints_by_sequence", "checkpoints_by_signature")

CREATE_SCHEMA_VERSION = """
    CREATE TABLE IF NOT EXISTS schema_version (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        version INTEGER NOT NULL
    )
"""
SELECT_SCHEMA_VERSION = """
    SELECT
        EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'),
        (SELECT group_concat(name) FROM sqlite_master WHERE name IN (?, ?, ?, ?))
"""
RECORD_SCHEMA_VERSION = """
    INSERT INTO schema_version (singleton, version) VALUES (1, ?)
    ON CONFLICT (singleton) DO UPDATE SET version = excluded.version
"""

# Every row of a save, top-level or nested, in one statement inside the save's BEGIN IMMEDIATE
# transaction: the INSERT reads its own sequence, one past the largest its workflow holds of
# either kind and at least the workflow's high-water mark (the rows a family wrote before it count,
# so a family's rows of one workflow take consecutive numbers); an id already stored inserts
# nothing (rowcount 0), and the save then compares the stored bytes (SELECT_SAME_BODY) or refuses
# a nested id.
# VALUES, not INSERT ... SELECT: a SELECT that reads the table it inserts into is first copied
# into a temporary table (EXPLAIN shows OpenEphemeral), the whole 2.5 KB row with it, which cost
# a quarter of the statement; a one-row VALUES evaluates its sub-selects in place.
# Numbered parameters bind the row as a tuple: ?2 (the workflow) is used four times.
INSERT_CHECKPOINT = """
    INSERT INTO checkpoints (
        checkpoint_id, workflow_name, sequence, previous_checkpoint_id, graph_signature_hash, digest, body,
        nested, container_id, root_id, position
    )
    VALUES (?1, ?2, max(
            coalesce((SELECT next_sequence FROM workflows WHERE name = ?2), 1),
            1 + coalesce((SELECT max(sequence) FROM checkpoints WHERE workflow_name = ?2 AND nested = 0), 0),
            1 + coalesce((SELECT max(sequence) FROM checkpoints WHERE workflow_name = ?2 AND nested = 1), 0)
        ), ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
    ON CONFLICT (checkpoint_id) DO NOTHING
"""
# Whether the row stored under an id holds exactly the bytes being saved: no row if the id is
# absent, else 1 or 0 (0 too for a stored value that is not a BLOB). A re-save is recognised by its
# bytes, compared here on the connection's thread, not by a digest hashed on every save.
SELECT_SAME_BODY = "SELECT coalesce(body = ?2, 0) FROM checkpoints WHERE checkpoint_id = ?1"
# Before a family's rows are deleted: each of its workflows keeps the high-water mark of what it
# held, so the next save there does not take a deleted row's sequence again.
RECORD_HIGH_WATER = """
    INSERT INTO workflows (name, next_sequence)
    SELECT workflow_name, max(sequence) + 1 FROM checkpoints
    WHERE checkpoint_id = :id OR root_id = :id
    GROUP BY workflow_name
    ON CONFLICT (name) DO UPDATE SET next_sequence = max(next_sequence, excluded.next_sequence)
"""
# Reads select the body with the index entry it is checked against (_stored() reads the row).
SELECT_BODY = "SELECT body FROM checkpoints WHERE checkpoint_id = ?"
SELECT_RECORD = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash
    FROM checkpoints WHERE checkpoint_id = ?
"""
# Whether a top-level row of the same workflow and signature names the row ``c`` as previous:
# the latest is then further down its lineage (lineage.py).
_HAS_SUCCESSOR = """
    EXISTS (SELECT 1 FROM checkpoints AS s INDEXED BY checkpoints_by_successor
        WHERE s.previous_checkpoint_id = c.checkpoint_id AND s.nested = 0
            AND s.graph_signature_hash = c.graph_signature_hash AND s.workflow_name = c.workflow_name)
"""
_RECORD_COLUMNS = "checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash"
# Whether a top-level row ``r`` is continued: a rival is a leaf, so one that is continued is not.
_CONTINUED = """
    EXISTS (SELECT 1 FROM checkpoints AS s INDEXED BY checkpoints_by_successor
        WHERE s.previous_checkpoint_id = r.checkpoint_id AND s.nested = 0
            AND s.graph_signature_hash = r.graph_signature_hash AND s.workflow_name = r.workflow_name)
"""
# Whether the row ``c`` has a rival (storages.backend.rivals_of).
# * ``c`` has a previous id: another top-level row of its workflow and signature naming that id
#   that nothing continues. The row itself is told by rowid, which the index entry holds: the
#   common probe (the row alone under its previous id) reads no table row for it.
# * ``c`` is a root: the top-level row committed right before it (one step back in
#   checkpoints_by_kind_and_sequence, any signature) is a root of its signature that nothing
#   continues. Only then is the run of such roots before ``c`` read (SELECT_ROOT_RIVALS).
# CASE evaluates one branch only, so a row with a previous id pays nothing for the root probe.
_HAS_RIVAL = (
    """
    CASE WHEN c.previous_checkpoint_id IS NULL THEN coalesce((
        SELECT CASE WHEN r.previous_checkpoint_id IS NULL AND r.graph_signature_hash = c.graph_signature_hash
            THEN NOT"""  # noqa: S608 - constant SQL
    + _CONTINUED
    + """ ELSE 0 END
        FROM checkpoints AS r INDEXED BY checkpoints_by_kind_and_sequence
        WHERE r.workflow_name = c.workflow_name AND r.nested = 0 AND r.sequence < c.sequence
        ORDER BY r.sequence DESC LIMIT 1
    ), 0) ELSE EXISTS (SELECT 1 FROM checkpoints AS r INDEXED BY checkpoints_by_successor
        WHERE r.previous_checkpoint_id = c.previous_checkpoint_id AND r.nested = 0
            AND r.graph_signature_hash = c.graph_signature_hash AND r.rowid <> c.rowid
            AND r.workflow_name = c.workflow_name AND NOT"""
    + _CONTINUED
    + """) END
"""
)
# The newest top-level row, whether it is continued (column 5) and whether it has a rival
# (column 6): when both are false, the common case, it is the latest, alone. The flags are named:
# sqlite3 builds each result column's name on every execution, and an unnamed one is named by
# its whole expression text (decoding it cost more than the root probe's branch does).
SELECT_LATEST = (
    "SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash,"  # noqa: S608
    + _HAS_SUCCESSOR
    + " AS continued,"
    + _HAS_RIVAL
    + """ AS rivalled
    FROM checkpoints AS c WHERE workflow_name = ? AND nested = 0
    ORDER BY sequence DESC LIMIT 1
"""
)
SELECT_LATEST_WITH_SIGNATURE = (
    "SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash,"  # noqa: S608
    + _HAS_SUCCESSOR
    + " AS continued,"
    + _HAS_RIVAL
    + """ AS rivalled
    FROM checkpoints AS c WHERE workflow_name = ? AND nested = 0 AND graph_signature_hash = ?
    ORDER BY sequence DESC LIMIT 1
"""
)
# The rivals of a head with a previous id, the RIVALS_LIMIT committed last, in ascending sequence.
_RIVALS = """
    SELECT {columns} FROM (
        SELECT r.checkpoint_id, r.body, r.workflow_name, r.previous_checkpoint_id,
            r.graph_signature_hash, r.sequence
        FROM checkpoints AS r INDEXED BY checkpoints_by_successor
        WHERE r.previous_checkpoint_id = :previous AND r.nested = 0
            AND r.graph_signature_hash = :signature AND r.workflow_name = :workflow
            AND r.checkpoint_id <> :head AND NOT {continued}
        ORDER BY r.sequence DESC LIMIT :limit
    ) ORDER BY sequence
"""
SELECT_RIVALS = _RIVALS.replace("{columns}", _RECORD_COLUMNS).replace("{continued}", _CONTINUED)
SELECT_RIVAL_IDS = _RIVALS.replace("{columns}", "checkpoint_id").replace("{continued}", _CONTINUED)
# The top-level rows committed right before a root head, newest first (a step back along
# checkpoints_by_kind_and_sequence, any signature, at most RIVALS_LIMIT rows), each with whether
# it is a root of the head's signature that nothing continues (the last column). lineage.py
# steps through them and stops at the first that is not: SQLite reads rows as they are fetched,
# so a run of n rivals costs n + 1 rows, never the workflow's history.
_ROOT_RIVALS = """
    SELECT {columns},
        CASE WHEN r.previous_checkpoint_id IS NULL AND r.graph_signature_hash = :signature
            THEN NOT {continued} ELSE 0 END AS rival
    FROM checkpoints AS r INDEXED BY checkpoints_by_kind_and_sequence
    WHERE r.workflow_name = :workflow AND r.nested = 0
        AND r.sequence < (SELECT sequence FROM checkpoints WHERE checkpoint_id = :head)
    ORDER BY r.sequence DESC LIMIT :limit
"""
SELECT_ROOT_RIVALS = _ROOT_RIVALS.replace("{columns}", _RECORD_COLUMNS).replace("{continued}", _CONTINUED)
SELECT_ROOT_RIVAL_IDS = _ROOT_RIVALS.replace("{columns}", "checkpoint_id").replace("{continued}", _CONTINUED)
SELECT_LINEAGE_ENTRY = (
    "SELECT previous_checkpoint_id, graph_signature_hash FROM checkpoints WHERE checkpoint_id = ?"
)
SELECT_NEWEST_ID = (
    "SELECT checkpoint_id, graph_signature_hash,"  # noqa: S608
    + _HAS_SUCCESSOR
    + """ AS continued
    FROM checkpoints AS c WHERE workflow_name = ? AND nested = 0
    ORDER BY sequence DESC LIMIT 1
"""
)
SELECT_SUCCESSOR_IDS = """
    SELECT checkpoint_id FROM checkpoints INDEXED BY checkpoints_by_successor
    WHERE previous_checkpoint_id = :id AND nested = 0 AND graph_signature_hash = :signature
        AND workflow_name = :workflow
    ORDER BY sequence DESC
"""
SELECT_BODIES = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash
    FROM checkpoints WHERE workflow_name = ? AND nested = 0 ORDER BY sequence
"""
SELECT_BODIES_WITH_SIGNATURE = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash FROM checkpoints
    WHERE workflow_name = ? AND nested = 0 AND graph_signature_hash = ?
    ORDER BY sequence
"""
SELECT_ALL_BODIES = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash
    FROM checkpoints WHERE workflow_name = ? ORDER BY sequence
"""
SELECT_ALL_BODIES_WITH_SIGNATURE = """
    SELECT checkpoint_id, body, workflow_name, previous_checkpoint_id, graph_signature_hash FROM checkpoints
    WHERE workflow_name = ? AND graph_signature_hash = ?
    ORDER BY sequence
"""
SELECT_IDS = "SELECT checkpoint_id FROM checkpoints WHERE workflow_name = ? AND nested = 0 ORDER BY sequence"
SELECT_IDS_WITH_SIGNATURE = """
    SELECT checkpoint_id FROM checkpoints
    WHERE workflow_name = ? AND nested = 0 AND graph_signature_hash = ?
    ORDER BY sequence
"""
SELECT_ALL_IDS = "SELECT checkpoint_id FROM checkpoints WHERE workflow_name = ? ORDER BY sequence"
SELECT_ALL_IDS_WITH_SIGNATURE = """
    SELECT checkpoint_id FROM checkpoints
    WHERE workflow_name = ? AND graph_signature_hash = ?
    ORDER BY sequence
"""
SELECT_CONTAINER = "SELECT container_id FROM checkpoints WHERE checkpoint_id = ?"
# The workflow row is kept: its counter must outlive its checkpoints.
DELETE_FAMILY = "DELETE FROM checkpoints WHERE checkpoint_id = ? OR root_id = ?"
UPDATE_BODY = "UPDATE checkpoints SET body = ?, digest = ? WHERE checkpoint_id = ?"
SELECT_WORKFLOW_NAMES = "SELECT DISTINCT workflow_name FROM checkpoints WHERE nested = 0"
# Nested rows of the given containers, at any depth: everything saved with the same root.
SELECT_NESTED_BODIES = """
    SELECT nested.checkpoint_id, nested.body
    FROM checkpoints AS container
    JOIN checkpoints AS nested ON nested.root_id = coalesce(container.root_id, container.checkpoint_id)
    WHERE container.checkpoint_id IN (SELECT value FROM json_each(?))
"""
SELECT_CHILDREN = """
    SELECT
        EXISTS (SELECT 1 FROM checkpoints WHERE checkpoint_id = :id),
        (SELECT json_group_array(checkpoint_id) FROM (
            SELECT checkpoint_id FROM checkpoints WHERE container_id = :id ORDER BY position
        ))
"""
# UNION drops a repeated (id, previous) row, which ends the recursion on a cycle.
WALK = """
    WITH RECURSIVE walk (checkpoint_id, previous_checkpoint_id) AS (
        SELECT checkpoint_id, previous_checkpoint_id FROM checkpoints WHERE checkpoint_id = :start
        UNION
        SELECT c.checkpoint_id, c.previous_checkpoint_id
        FROM walk JOIN checkpoints AS c ON c.checkpoint_id = walk.previous_checkpoint_id
        LIMIT :max_depth
    )
"""
# Both walks are constant SQL: the CTE is shared text, not input.
WALK_IDS = (
    WALK  # noqa: S608
    + """
    SELECT walk.checkpoint_id, walk.previous_checkpoint_id,
        EXISTS (SELECT 1 FROM tombstones WHERE checkpoint_id = walk.previous_checkpoint_id)
    FROM walk
"""
)
WALK_WITH_BODIES = (
    WALK  # noqa: S608
    + """
    SELECT walk.checkpoint_id, walk.previous_checkpoint_id,
        EXISTS (SELECT 1 FROM tombstones WHERE checkpoint_id = walk.previous_checkpoint_id), c.body, 1
    FROM walk JOIN checkpoints AS c ON c.checkpoint_id = walk.checkpoint_id
    UNION ALL
    SELECT nested.checkpoint_id, NULL, 0, nested.body, 0
    FROM walk
    JOIN checkpoints AS c ON c.checkpoint_id = walk.checkpoint_id
    JOIN checkpoints AS nested ON nested.root_id = coalesce(c.root_id, c.checkpoint_id)
"""
)
SELECT_PRUNED = """
    SELECT checkpoint_id FROM checkpoints
    WHERE workflow_name = ? AND nested = 0
    ORDER BY sequence DESC LIMIT -1 OFFSET ?
"""
TOMBSTONE_FAMILY = """
    INSERT OR IGNORE INTO tombstones (checkpoint_id, workflow_name)
    SELECT checkpoint_id, ? FROM checkpoints WHERE checkpoint_id = ? OR root_id = ?
"""
SELECT_TOP_IDS = "SELECT checkpoint_id FROM checkpoints WHERE workflow_name = ? AND nested = 0"
DELETE_TOMBSTONES = "DELETE FROM tombstones WHERE workflow_name = ?"
SELECT_ALL_INFO = """
    SELECT checkpoint_id, workflow_name, previous_checkpoint_id, graph_signature_hash, container_id,
        sequence, length(body)
    FROM checkpoints
"""
SELECT_INFO = SELECT_ALL_INFO + " WHERE checkpoint_id = ?"
SELECT_INFO_FIRST_PAGE = SELECT_ALL_INFO + " ORDER BY checkpoint_id LIMIT ?"
SELECT_INFO_PAGE_AFTER = SELECT_ALL_INFO + " WHERE checkpoint_id > ? ORDER BY checkpoint_id LIMIT ?"
SELECT_WORKFLOW_INFO = SELECT_ALL_INFO + " WHERE workflow_name = ?"
SELECT_TOMBSTONES = "SELECT checkpoint_id FROM tombstones"
SELECT_WORKFLOW_TOMBSTONES = "SELECT checkpoint_id FROM tombstones WHERE workflow_name = ?"
