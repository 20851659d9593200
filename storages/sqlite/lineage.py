"""Latest through the lineage, and the head's rivals (docs/contract.md, "Latest"), on the
connection's thread.

``SELECT_LATEST`` returns the top-level row committed last with whether a top-level row of its
workflow and signature names it as previous id (one probe of ``checkpoints_by_successor``) and
whether it has a rival: for a row with a previous id, one more probe of the same index (another
leaf under that previous id); for a root, whether the top-level row committed right before it is
a root of its signature that nothing continues (one step back along
``checkpoints_by_kind_and_sequence`` and one probe of ``checkpoints_by_successor``). Only then,
which takes a checkpoint saved before the one it continues or parallel steps, does
:func:`latest_rows` read again: the walk from each row to the successor committed last, never
to a row already visited, until a row has none (the head), then the head's rivals (for a root
head, the run of such roots committed right before it, at most ``RIVALS_LIMIT`` rows back). It
runs as one call on the connection's thread, inside one read transaction (or the write
transaction of a fenced save or a prune), so it sees one state of the file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..backend import RIVALS_LIMIT
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


def latest_rows(
    connection: sqlite3.Connection, workflow_name: str, graph_signature_hash: str | None
) -> tuple[Sequence[object], list[Sequence[object]]] | None:
    """The head's row and its rivals' rows (as SELECT_RECORD reads them, the rivals in ascending
    sequence), in one read transaction; None if the workflow has no top-level row."""
    connection.execute("BEGIN")
    try:
        newest = _newest(connection, workflow_name, graph_signature_hash)
        if newest is None:
            return None
        head: Sequence[object] | None = newest
        if newest[5]:
            tip = tip_id(connection, workflow_name, newest[0], newest[4])
            head = connection.execute(schema.SELECT_RECORD, (tip,)).fetchone()
            if head is None:  # the walk read it in this transaction: only a damaged file loses it
                return None
        elif not newest[6]:
            return newest, []
        assert head is not None
        return head, _rivals(connection, head[0], workflow_name, head[3], head[4], ids_only=False)
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


def head_and_rival_ids(connection: sqlite3.Connection, workflow_name: str) -> set[object]:
    """The ids (as stored) of the workflow's head (any signature) and of its rivals: what a prune
    keeps whatever ``keep_last`` (but 0); inside the caller's transaction."""
    head = latest_id(connection, workflow_name)
    if head is None:
        return set()
    previous, signature = connection.execute(schema.SELECT_LINEAGE_ENTRY, (head,)).fetchone()
    rivals = _rivals(connection, head, workflow_name, previous, signature, ids_only=True)
    return {head, *(row[0] for row in rivals)}


def _rivals(
    connection: sqlite3.Connection,
    head: object,
    workflow_name: str,
    previous: object,
    signature: object,
    *,
    ids_only: bool,
) -> list[Sequence[object]]:
    """The rows (or ids) of the head's rivals (storages.backend.rivals_of), as stored, in
    ascending sequence: for a head with a previous id, the leaves under that id; for a root, the
    leaf roots of its signature committed right before it."""
    parameters = {"head": head, "signature": signature, "workflow": workflow_name, "limit": RIVALS_LIMIT}
    if previous is None:
        return _root_rivals(connection, parameters, ids_only=ids_only)
    parameters["previous"] = previous
    query = schema.SELECT_RIVAL_IDS if ids_only else schema.SELECT_RIVALS
    return connection.execute(query, parameters).fetchall()


def _root_rivals(
    connection: sqlite3.Connection, parameters: dict[str, object], *, ids_only: bool
) -> list[Sequence[object]]:
    """A root head's rivals: the rows committed right before it, newest first, while each is a
    leaf root of its signature (their last column), returned in ascending sequence. The rows
    are fetched one at a time and the statement is closed at the first that is not one, so the
    run and the row that ends it are all that is read."""
    cursor = connection.execute(
        schema.SELECT_ROOT_RIVAL_IDS if ids_only else schema.SELECT_ROOT_RIVALS, parameters
    )
    try:
        rivals: list[Sequence[object]] = []
        for row in cursor:
            if not row[-1]:
                break
            rivals.append(row[:-1])
    finally:
        cursor.close()
    return rivals[::-1]


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
