"""``inspect``: what a storage holds, as data and as rich renderables.

Three views, all read from the index (capability ``inspect``) except the one-checkpoint view,
which also loads the checkpoint:

* :func:`list_workflow_summaries`: every workflow with its counts and latest checkpoint.
* :func:`build_lineage` / :func:`render_lineage`: one workflow's checkpoints as a lineage tree.
  A checkpoint's children are the checkpoints whose previous id is its id, so a fork shows as
  several children; records nested in a checkpoint hang under it, marked nested. The tree starts
  at every checkpoint whose previous id is None, pruned, not stored or in another workflow, and
  at one checkpoint of each cycle (marked), so every record appears exactly once.
* :func:`describe_checkpoint` / :func:`render_checkpoint`: one checkpoint's fields, values
  abbreviated, with its container and the records nested in it.

The rendered tree keeps a run of checkpoints (each continuing from the one above it) at one
indentation level, so a long run stays readable; it indents only under a container (its nested
records), at a fork (one ``branch`` entry per child) and, when the tree has several starts, once
per start (one ``line`` entry each). One level therefore never holds two runs.
"""

from __future__ import annotations

from .render import render_checkpoint, render_lineage, render_workflows
from .views import (
    VALUE_WIDTH,
    CheckpointView,
    LineageNode,
    LineageStart,
    LineageTree,
    WorkflowSummary,
    abbreviate_value,
    build_lineage,
    describe_checkpoint,
    list_workflow_summaries,
)

__all__ = [
    "VALUE_WIDTH",
    "CheckpointView",
    "LineageNode",
    "LineageStart",
    "LineageTree",
    "WorkflowSummary",
    "abbreviate_value",
    "build_lineage",
    "describe_checkpoint",
    "list_workflow_summaries",
    "render_checkpoint",
    "render_lineage",
    "render_workflows",
]
