"""Latest through the lineage (docs/contract.md, "Latest"), as SQL every statement that needs it
embeds: reads (latest), the save functions (a fenced save's check) and prune.

:func:`tip_ctes` renders three common table expressions: ``lineage_newest``, the top-level row
committed last (of a signature, if given: one descent of an index); ``lineage_walk``, from it to
the successor committed last (a top-level row of its workflow and signature naming it as
previous id, never one already visited) and on, one probe of ``checkpoints_by_successor`` per
step; and ``lineage_tip``, the row the walk ended at. In the common case the first probe finds
nothing and the walk is one row. A statement using them starts with ``WITH RECURSIVE``.

:func:`rivals_cte` renders ``rivals``, the head's rivals (storages.backend.rivals_of) of a CTE
named ``head``, in two arms, of which a head takes one:

* a head with a previous id, its siblings: one probe of ``checkpoints_by_successor`` that, in
  the common case, finds the head alone, so a read of the head alone costs one index probe more;
* a root head (no previous id), the leaf roots of its signature committed right before it
  (``root_run``): one descent of ``checkpoints_by_kind_and_sequence`` to the top-level row
  committed right before the head and, if it is a root of the head's signature, one probe of the
  successor index (is it a leaf?); only if it is such a leaf root, the same step again from it,
  and on, :data:`~storages.backend.RIVALS_LIMIT` steps at most, ending at the first row that is
  not. A head with a previous id never takes a step.
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


# OFFSET 0 keeps each NOT EXISTS a subplan, one probe of the successor index per candidate, which
# the planner would otherwise turn into an anti join hashing every top-level row of the workflow.
_IS_LEAF = """NOT EXISTS (
                    SELECT 1 FROM {s}.checkpoints AS s
                    WHERE s.previous_checkpoint_id = c.checkpoint_id AND NOT s.nested
                        AND s.graph_signature_hash = c.graph_signature_hash
                        AND s.workflow_name = c.workflow_name
                    OFFSET 0
                )"""
_SIBLINGS = """
        SELECT r.* FROM head CROSS JOIN LATERAL (
            SELECT {columns}, c.sequence FROM {s}.checkpoints AS c
            WHERE c.previous_checkpoint_id = head.previous_checkpoint_id AND NOT c.nested
                AND c.graph_signature_hash = head.graph_signature_hash
                AND c.workflow_name = head.workflow_name AND c.checkpoint_id <> head.checkpoint_id
                AND {is_leaf}
            ORDER BY c.sequence DESC LIMIT {limit}
        ) AS r"""
# The run of leaf roots before a root head, newest first. Step 0 is the head, only if it is a
# root; step n is the top-level row committed right before step n - 1's, kept while it is a root
# of the head's signature that no top-level row of its signature continues: the first row that
# is not ends the run (the WHERE drops it, and the recursion stops). A head with a previous id
# starts no run, and the depth check comes before each step, so the step past the limit never
# descends the index. Each step reads the whole row (``*``), so a root of the run is read once,
# with the columns it is returned with; the run's columns are named after ``columns``, so they
# read the same from the run as from ``c``. One recursive CTE, starting from ``head`` itself,
# rather than a first step apart: every plan node costs each latest its setup, run or not.
_ROOT_RUN = """root_run AS (
        SELECT {columns}, c.sequence, c.workflow_name AS run_workflow,
            c.graph_signature_hash AS run_signature, 0 AS depth
        FROM head AS c WHERE c.previous_checkpoint_id IS NULL
        UNION ALL
        SELECT {columns}, c.sequence, r.run_workflow, r.run_signature, r.depth + 1
        FROM root_run AS r CROSS JOIN LATERAL (
            SELECT * FROM {s}.checkpoints AS b
            WHERE b.workflow_name = r.run_workflow AND NOT b.nested AND b.sequence < r.sequence
            ORDER BY b.sequence DESC LIMIT 1
        ) AS c
        WHERE r.depth < {limit} AND c.previous_checkpoint_id IS NULL
            AND c.graph_signature_hash = r.run_signature AND {is_leaf}
    )"""
_ROOTS = """
        SELECT {columns}, c.sequence FROM root_run AS c WHERE c.depth > 0"""


def rivals_cte(columns: str) -> str:
    """The CTEs ``root_run`` and ``rivals`` (without a leading comma): ``rivals`` has
    ``columns`` (of ``c``, a rival's row) and ``sequence`` of the rivals of the row in the CTE
    ``head``, at most :data:`~storages.backend.RIVALS_LIMIT`, in no particular order. ``head``
    has ``columns`` too, and ``checkpoint_id``, ``workflow_name``, ``previous_checkpoint_id``,
    ``graph_signature_hash`` and ``sequence``. A statement using them starts with
    ``WITH RECURSIVE``."""

    def rendered(template: str) -> str:
        return (
            template.replace("{is_leaf}", _IS_LEAF)
            .replace("{columns}", columns)
            .replace("{limit}", str(RIVALS_LIMIT))
        )

    return (
        rendered(_ROOT_RUN)
        + ",\n    rivals AS ("
        + rendered(_SIBLINGS)
        + "\n        UNION ALL"
        + rendered(_ROOTS)
        + "\n    )"
    )
