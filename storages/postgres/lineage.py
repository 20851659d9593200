"""Latest through the lineage (docs/contract.md, "Latest"), as SQL every statement that needs it
embeds: reads (latest), the save functions (a fenced save's check) and prune.

:func:`tip_ctes` renders three common table expressions: ``lineage_newest``, the top-level row
committed last (of a signature, if given: one descent of an index); ``lineage_walk``, from it to
the successor committed last (a top-level row of its workflow and signature naming it as
previous id, never one already visited) and on, one probe of ``checkpoints_by_successor`` per
step; and ``lineage_tip``, the row the walk ended at. In the common case the first probe finds
nothing and the walk is one row. A statement using them starts with ``WITH RECURSIVE``.

:func:`rivals_cte` renders ``rivals``, the head's rivals (storages.backend.rivals_of) of a CTE
named ``head``: one probe of ``checkpoints_by_successor`` that, in the common case, finds the head
alone (a root, with a NULL previous id, finds nothing: roots have no rivals), so a read of the
head alone costs one index probe more.
"""

from __future__ import annotations

from ..backend import RIVALS_LIMIT

SUCCESSOR_INDEX = "checkpoints_by_successor"
"""The partial index (previous id, signature, sequence) of top-level rows with a previous id."""

CREATE_SUCCESSOR_INDEX = (
    "CREATE INDEX {p}" + SUCCESSOR_INDEX + " ON {s}.checkpoints "
    "(previous_checkpoint_id, graph_signature_hash, sequence) "
    "WHERE NOT nested AND previous_checkpoint_id IS NOT NULL"
)

_NEWEST = """lineage_newest AS (
        SELECT c.checkpoint_id, c.graph_signature_hash FROM {s}.checkpoints AS c
        WHERE c.workflow_name = {name} AND NOT c.nested{signature_filter}
        ORDER BY c.sequence DESC LIMIT 1
    ),
    lineage_walk (checkpoint_id, graph_signature_hash, depth, visited) AS (
        SELECT checkpoint_id, graph_signature_hash, 0, ARRAY[checkpoint_id] FROM lineage_newest
        UNION ALL
        SELECT s.checkpoint_id, w.graph_signature_hash, w.depth + 1, w.visited || s.checkpoint_id
        FROM lineage_walk AS w CROSS JOIN LATERAL (
            SELECT c.checkpoint_id FROM {s}.checkpoints AS c
            WHERE c.previous_checkpoint_id = w.checkpoint_id AND NOT c.nested
                AND c.graph_signature_hash = w.graph_signature_hash AND c.workflow_name = {name}
                AND c.checkpoint_id <> ALL (w.visited)
            ORDER BY c.sequence DESC LIMIT 1
        ) AS s
    ),
    lineage_tip AS (SELECT checkpoint_id FROM lineage_walk ORDER BY depth DESC LIMIT 1)"""


def tip_ctes(name: str, signature: str | None = None) -> str:
    """The three CTEs (without ``WITH RECURSIVE``) for the workflow named by the SQL expression
    ``name``, of the signature named by ``signature`` (None: any)."""
    signature_filter = "" if signature is None else f" AND c.graph_signature_hash = {signature}"
    return _NEWEST.replace("{name}", name).replace("{signature_filter}", signature_filter)


def tip_subquery(name: str) -> str:
    """A scalar subquery: the workflow's latest top-level id (any signature), or NULL."""
    return "(WITH RECURSIVE " + tip_ctes(name) + " SELECT checkpoint_id FROM lineage_tip)"  # noqa: S608


# OFFSET 0 keeps the NOT EXISTS a subplan, one probe of the successor index per candidate, which
# the planner would otherwise turn into an anti join hashing every top-level row of the workflow.
_RIVALS_ARM = """
        SELECT r.* FROM head CROSS JOIN LATERAL (
            SELECT {columns}, c.sequence FROM {s}.checkpoints AS c
            WHERE c.previous_checkpoint_id = head.previous_checkpoint_id AND NOT c.nested
                AND c.graph_signature_hash = head.graph_signature_hash
                AND c.workflow_name = head.workflow_name AND c.checkpoint_id <> head.checkpoint_id
                AND NOT EXISTS (
                    SELECT 1 FROM {s}.checkpoints AS s
                    WHERE s.previous_checkpoint_id = c.checkpoint_id AND NOT s.nested
                        AND s.graph_signature_hash = c.graph_signature_hash
                        AND s.workflow_name = c.workflow_name
                    OFFSET 0
                )
            ORDER BY c.sequence DESC LIMIT {limit}
        ) AS r"""


def rivals_cte(columns: str) -> str:
    """The CTE ``rivals`` (without a leading comma): ``columns`` (of ``c``, a rival's row) and
    ``sequence`` of the :data:`~storages.backend.RIVALS_LIMIT` rivals committed last of the row
    in the CTE ``head`` (its ``checkpoint_id``, ``workflow_name``, ``previous_checkpoint_id`` and
    ``graph_signature_hash``), in no particular order."""
    arm = _RIVALS_ARM.replace("{columns}", columns).replace("{limit}", str(RIVALS_LIMIT))
    return "rivals AS (" + arm + "\n    )"
