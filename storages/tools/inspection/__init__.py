"""``inspect``: what a storage holds, as data and as rich renderables.

Three views, all read from the index (capability ``inspect``) except where a body is needed:

* :func:`list_workflow_summaries`: every workflow with its counts and latest checkpoint
  (a LangGraph workflow with its thread and namespace).
* :func:`build_lineage` / :func:`stream_lineage` / :func:`render_lineage_line`: one workflow's
  checkpoints as a lineage tree, drawn line by line. A checkpoint's children are the checkpoints
  whose previous id is its id, so a fork shows as several children; records nested in a
  checkpoint hang under it, marked nested. The tree starts at every checkpoint whose previous id
  is None, pruned, not stored or in another workflow, and at one checkpoint of each cycle
  (marked), so every record appears exactly once. :func:`build_thread_lineage` draws a
  LangGraph thread, its subgraphs' runs under the parent checkpoint they started from.
* :func:`describe_checkpoint` / :func:`render_checkpoint`: one checkpoint's fields, values
  abbreviated, with its container and the records nested in it (LangGraph's decoded).

The drawn tree keeps a run of checkpoints (each continuing from the one above it) at one
indentation level, so a long run stays readable; it indents only under a container (its nested
records), at a fork (one ``branch`` entry per child) and, when the tree has several starts, once
per start (one ``line`` entry each). One level therefore never holds two runs. Drawing is
iterative and streamed: memory holds the index, never the output.
"""

from __future__ import annotations

from .lineage import (
    LineageEntry,
    LineageLine,
    LineageStart,
    LineageTree,
    Relation,
    build_lineage,
    stream_lineage,
)
from .peek import BodyFields, peek_body_fields
from .render import (
    render_checkpoint,
    render_lineage,
    render_lineage_line,
    render_lineage_row,
    render_lineage_title,
    render_workflows,
    short_timestamp,
)
from .threads import (
    AmbiguousCheckpointIdError,
    build_thread_lineage,
    langgraph_place,
    resolve_checkpoint_id,
    shown_id,
    thread_workflows,
)
from .views import (
    VALUE_WIDTH,
    CheckpointView,
    WorkflowSummary,
    abbreviate_value,
    describe_checkpoint,
    list_workflow_summaries,
)

__all__ = [
    "VALUE_WIDTH",
    "AmbiguousCheckpointIdError",
    "BodyFields",
    "CheckpointView",
    "LineageEntry",
    "LineageLine",
    "LineageStart",
    "LineageTree",
    "Relation",
    "WorkflowSummary",
    "abbreviate_value",
    "build_lineage",
    "build_thread_lineage",
    "describe_checkpoint",
    "langgraph_place",
    "list_workflow_summaries",
    "peek_body_fields",
    "render_checkpoint",
    "render_lineage",
    "render_lineage_line",
    "render_lineage_row",
    "render_lineage_title",
    "render_workflows",
    "resolve_checkpoint_id",
    "short_timestamp",
    "shown_id",
    "stream_lineage",
    "thread_workflows",
]
