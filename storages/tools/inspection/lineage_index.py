"""A lineage's index on disk: the records one tree draws, in a temporary SQLite file.

Drawing a workflow needs every record's links (previous, container) and, for each checkpoint
drawn, the ones hanging under it. Held in dicts, that grew with the store: about 840 bytes a
checkpoint, 76 MB more at 100,000 than at 10,000 (issue 30). Here the records stream in page by
page, the tree is worked out by SQL over indexed columns (members, parents, starts, cycles), and
drawing asks for one checkpoint's row and one list of what hangs under it at a time, so memory
stays at SQLite's page cache whatever the store holds. The file is private (a fresh temporary
directory, removed with the index) and holds only index entries, never bodies.
"""

from __future__ import annotations

import sqlite3
import tempfile
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from ...contract import CheckpointID, CheckpointInfo

NESTED: Final = "nested"
CHILD: Final = "child"
"""``relation``: how a member hangs under its ``parent`` (its container, or its previous)."""

_SCHEMA: Final = (
    """
    CREATE TABLE rec (
        id TEXT PRIMARY KEY NOT NULL,
        workflow TEXT NOT NULL,
        previous TEXT,
        signature TEXT NOT NULL,
        container TEXT,
        seq INTEGER NOT NULL,
        size INTEGER NOT NULL,
        member INTEGER NOT NULL DEFAULT 0,
        ord INTEGER,
        parent TEXT,
        relation TEXT,
        start TEXT,
        start_workflow TEXT,
        sig_changed INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID
    """,
    "CREATE INDEX rec_by_container ON rec (container) WHERE container IS NOT NULL",
    "CREATE TABLE tomb (id TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID",
)
_AFTER_LOAD: Final = (
    "CREATE INDEX rec_by_parent ON rec (parent, ord) WHERE parent IS NOT NULL",
    "CREATE INDEX rec_by_order ON rec (member, ord)",
    "CREATE INDEX rec_by_previous ON rec (previous) WHERE previous IS NOT NULL",
)
_SELECT_MEMBER: Final = (
    "SELECT id, workflow, previous, signature, container, seq, size FROM rec WHERE id = ? AND member = 1"
)
_SELECT_NODE: Final = (
    "SELECT id, workflow, previous, signature, container, seq, size, start, start_workflow, sig_changed "
    "FROM rec WHERE id = ?"
)
_SELECT_BELOW: Final = "SELECT id, relation FROM rec WHERE parent = ? ORDER BY ord"


class LineageIndex:
    """The records of one lineage (``member``) and every other stored record's workflow."""

    def __init__(self) -> None:
        directory = tempfile.TemporaryDirectory(prefix="checkpoint-lineage-")
        # check_same_thread off: the finalizer may run on whichever thread collects the index.
        self._db = sqlite3.connect(
            Path(directory.name) / "lineage.db", isolation_level=None, check_same_thread=False
        )
        # A scratch file nobody else opens and nobody needs after a crash.
        for pragma in ("journal_mode = OFF", "synchronous = OFF", "temp_store = FILE", "cache_size = -4096"):
            self._db.execute(f"PRAGMA {pragma}")
        for statement in _SCHEMA:
            self._db.execute(statement)
        self._finalizer = weakref.finalize(self, _remove, self._db, directory)

    def close(self) -> None:
        self._finalizer()

    # ---------------------------------------------------------------- filling

    def add(self, records: Iterable[CheckpointInfo], *, members: bool) -> None:
        """Store index entries; ``members``: they are the tree's own records (else only records
        the tree may point at). A record already added is kept as it was."""
        self._db.executemany(
            "INSERT OR IGNORE INTO rec (id, workflow, previous, signature, container, seq, size, member) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    info.checkpoint_id,
                    info.workflow_name,
                    info.previous_checkpoint_id,
                    info.graph_signature_hash,
                    info.container_id,
                    info.sequence,
                    info.size,
                    int(members),
                )
                for info in records
            ),
        )

    def add_tombstones(self, checkpoint_ids: Iterable[CheckpointID]) -> None:
        rows = ((item,) for item in checkpoint_ids)
        self._db.executemany("INSERT OR IGNORE INTO tomb (id) VALUES (?)", rows)

    def take_workflow(self, workflow_name: str) -> None:
        """Make ``workflow_name``'s records members, and what is nested in them at any depth,
        whatever its workflow name (a sub-workflow's records carry their own)."""
        self._db.execute(
            """
            WITH RECURSIVE inside(id) AS (
                SELECT id FROM rec WHERE workflow = ?
                UNION
                SELECT rec.id FROM rec JOIN inside ON rec.container = inside.id
            )
            UPDATE rec SET member = 1 WHERE id IN (SELECT id FROM inside)
            """,
            (workflow_name,),
        )

    # ---------------------------------------------------------------- the tree

    def assemble(self, workflow_name: str) -> None:
        """Order the members, hang each under its container or previous, or say why it starts a
        line; break cycles."""
        db = self._db
        db.execute(
            """
            UPDATE rec SET ord = ranked.n FROM (
                SELECT id, row_number() OVER (
                    ORDER BY workflow != ?, seq, workflow, container IS NOT NULL, id
                ) AS n FROM rec WHERE member = 1
            ) AS ranked WHERE rec.id = ranked.id
            """,
            (workflow_name,),
        )
        for statement in _AFTER_LOAD:
            db.execute(statement)
        db.execute(
            """
            UPDATE rec SET parent = container, relation = 'nested'
            WHERE member = 1 AND container IS NOT NULL
                AND EXISTS (SELECT 1 FROM rec AS up WHERE up.id = rec.container AND up.member = 1)
            """
        )
        db.execute(
            """
            UPDATE rec SET
                parent = CASE WHEN up.member = 1 THEN up.id END,
                relation = CASE WHEN up.member = 1 THEN 'child' END,
                start = CASE
                    WHEN up.member = 1 THEN NULL
                    WHEN up.id IS NOT NULL THEN 'elsewhere'
                    WHEN EXISTS (SELECT 1 FROM tomb WHERE tomb.id = rec.previous) THEN 'pruned'
                    ELSE 'missing' END,
                start_workflow = CASE WHEN up.member = 0 THEN up.workflow END
            FROM (SELECT rec.id AS below, above.id, above.member, above.workflow
                  FROM rec LEFT JOIN rec AS above ON above.id = rec.previous
                  WHERE rec.member = 1 AND rec.parent IS NULL AND rec.previous IS NOT NULL) AS up
            WHERE rec.id = up.below
            """
        )
        db.execute("UPDATE rec SET start = 'root' WHERE member = 1 AND parent IS NULL AND previous IS NULL")
        db.execute(
            """
            UPDATE rec SET sig_changed = 1 WHERE member = 1 AND EXISTS (
                SELECT 1 FROM rec AS up
                WHERE up.id = rec.previous AND up.member = 1 AND up.signature != rec.signature
            )
            """
        )
        self._break_cycles()

    def _break_cycles(self) -> None:
        """A member reachable from no start lies on (or leads into) a cycle: follow parents from
        it until one repeats and start the tree there (only hostile stores get here)."""
        db = self._db
        db.execute(
            """
            CREATE TEMP TABLE reachable AS
            WITH RECURSIVE down(id) AS (
                SELECT id FROM rec WHERE member = 1 AND start IS NOT NULL
                UNION
                SELECT rec.id FROM rec JOIN down ON rec.parent = down.id
            ) SELECT id FROM down
            """
        )
        db.execute("CREATE UNIQUE INDEX temp.reachable_id ON reachable (id)")
        (members,) = db.execute("SELECT count(*) FROM rec WHERE member = 1").fetchone()
        (reached,) = db.execute("SELECT count(*) FROM reachable").fetchone()
        if reached == members:
            return
        stranded = [
            row[0]
            for row in db.execute(
                "SELECT id FROM rec WHERE member = 1 AND id NOT IN (SELECT id FROM reachable) ORDER BY ord"
            )
        ]
        for checkpoint_id in stranded:
            path: list[CheckpointID] = []
            on_path: set[CheckpointID] = set()
            current = checkpoint_id
            while current not in on_path and not self._reachable(current):
                path.append(current)
                on_path.add(current)
                current = db.execute("SELECT parent FROM rec WHERE id = ?", (current,)).fetchone()[0]
            if current in on_path:
                db.execute(
                    "UPDATE rec SET parent = NULL, relation = NULL, start = 'cycle' WHERE id = ?", (current,)
                )
            db.executemany("INSERT OR IGNORE INTO reachable (id) VALUES (?)", ((item,) for item in path))

    def _reachable(self, checkpoint_id: CheckpointID) -> bool:
        found = self._db.execute("SELECT 1 FROM reachable WHERE id = ?", (checkpoint_id,)).fetchone()
        return found is not None

    # ---------------------------------------------------------------- reading

    def info(self, checkpoint_id: CheckpointID) -> CheckpointInfo | None:
        row = self._db.execute(_SELECT_MEMBER, (checkpoint_id,)).fetchone()
        return None if row is None else CheckpointInfo(*row)

    def node(self, checkpoint_id: CheckpointID) -> tuple[CheckpointInfo, str | None, str | None, bool]:
        """A member's index entry, why it starts a line (or None), the start's other workflow,
        and whether its signature differs from its previous checkpoint's."""
        row = self._db.execute(_SELECT_NODE, (checkpoint_id,)).fetchone()
        return CheckpointInfo(*row[:7]), row[7], row[8], bool(row[9])

    def below(self, checkpoint_id: CheckpointID) -> tuple[list[CheckpointID], list[CheckpointID]]:
        """What hangs under ``checkpoint_id``, in order: its children (the checkpoints continuing
        from it) and the records nested in it. One query."""
        children: list[CheckpointID] = []
        nested: list[CheckpointID] = []
        for below, relation in self._db.execute(_SELECT_BELOW, (checkpoint_id,)):
            (children if relation == CHILD else nested).append(below)
        return children, nested

    def roots(self) -> list[CheckpointID]:
        rows = self._db.execute("SELECT id FROM rec WHERE member = 1 AND start IS NOT NULL ORDER BY ord")
        return [row[0] for row in rows]

    def latest(self, workflow_name: str) -> CheckpointID | None:
        """The workflow's latest as get_latest chooses it (docs/contract.md, "Latest"): the
        newest commit, then through the checkpoints that continue it."""
        row = self._db.execute(
            "SELECT id, signature FROM rec WHERE member = 1 AND workflow = ? AND container IS NULL "
            "ORDER BY seq DESC LIMIT 1",
            (workflow_name,),
        ).fetchone()
        if row is None:
            return None
        current, signature = str(row[0]), row[1]
        visited = {current}
        while True:
            following = next(
                (
                    str(found)
                    for (found,) in self._db.execute(
                        "SELECT id FROM rec WHERE previous = ? AND member = 1 AND workflow = ? "
                        "AND container IS NULL AND signature = ? ORDER BY seq DESC",
                        (current, workflow_name, signature),
                    )
                    if found not in visited
                ),
                None,
            )
            if following is None:
                return current
            visited.add(following)
            current = following

    def counts(self, workflow_name: str) -> tuple[int, int]:
        """Top-level checkpoints of ``workflow_name`` among the members, and nested members."""
        row = self._db.execute(
            "SELECT count(*) FILTER (WHERE workflow = ? AND container IS NULL), "
            "count(*) FILTER (WHERE container IS NOT NULL) FROM rec WHERE member = 1",
            (workflow_name,),
        ).fetchone()
        return int(row[0]), int(row[1])

    def top_level_members(self) -> int:
        """Members that are not nested, of any workflow name."""
        (count,) = self._db.execute(
            "SELECT count(*) FROM rec WHERE member = 1 AND container IS NULL"
        ).fetchone()
        return int(count)

    def forks(self) -> int:
        """Checkpoints with more than one child."""
        (count,) = self._db.execute(
            "SELECT count(*) FROM (SELECT parent FROM rec WHERE relation = 'child' "
            "GROUP BY parent HAVING count(*) > 1)"
        ).fetchone()
        return int(count)


def _remove(db: sqlite3.Connection, directory: tempfile.TemporaryDirectory[str]) -> None:
    db.close()
    directory.cleanup()
