"""Latest through the lineage (docs/contract.md, "Latest"), on the connection's thread.

``SELECT_LATEST`` returns the top-level row committed last with whether a top-level row of its
workflow and signature names it as previous id (one probe of ``checkpoints_by_successor``). Only
then, which takes a checkpoint saved before the one it continues, does the rule walk on: from
each row to the successor committed last, never to a row already visited, until a row has none.
The walk runs as one call on the connection's thread, inside one read transaction (or the write
transaction of a fenced save or a prune), so it sees one state of the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from . import schema


def tip_id(connection: sqlite3.Connection, workflow_name: str, start: object, signature: object) -> object:
    """The id the walk from ``start`` (a top-level row with successors) ends at, as stored."""
    current, visited = start, {start}
    while True:
        rows = connection.execute(
            schema.SELECT_SUCCESSOR_IDS, {"id": current, "signature": signature, "workflow": workflow_name}
        ).fetchall()
        following = next((row[0] for row in rows if row[0] not in visited), None)
        if following is None:
            return current
        visited.add(following)
        current = following


def latest_row(
    connection: sqlite3.Connection, workflow_name: str, graph_signature_hash: str | None
) -> Sequence[object] | None:
    """The latest row (as SELECT_RECORD reads it), in one read transaction."""
    connection.execute("BEGIN")
    try:
        newest = _newest(connection, workflow_name, graph_signature_hash)
        if newest is None:
            return None
        if not newest[5]:
            return newest
        tip = tip_id(connection, workflow_name, newest[0], newest[4])
        row: Sequence[object] | None = connection.execute(schema.SELECT_RECORD, (tip,)).fetchone()
        return row
    finally:
        connection.execute("COMMIT")


def latest_id(connection: sqlite3.Connection, workflow_name: str) -> object:
    """The latest top-level id of the workflow (any signature) as stored, or None; inside the
    caller's transaction."""
    newest = connection.execute(schema.SELECT_NEWEST_ID, (workflow_name,)).fetchone()
    if newest is None:
        return None
    checkpoint_id, signature, has_successor = newest
    return tip_id(connection, workflow_name, checkpoint_id, signature) if has_successor else checkpoint_id


def _newest(
    connection: sqlite3.Connection, workflow_name: str, graph_signature_hash: str | None
) -> Sequence[object] | None:
    if graph_signature_hash is None:
        row: Sequence[object] | None = connection.execute(schema.SELECT_LATEST, (workflow_name,)).fetchone()
    else:
        row = connection.execute(
            schema.SELECT_LATEST_WITH_SIGNATURE, (workflow_name, graph_signature_hash)
        ).fetchone()
    return row
