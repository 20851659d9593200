"""Executor ids of the MAF workflows the kit runs, apart from the workflows themselves so that the
profile (which must not import MAF) and the workflows (which do) both read them."""

PARENT_EXECUTOR_ID = "child"
"""The parent's WorkflowExecutor; its state holds the embedded sub-workflow checkpoint."""
WORK_EXECUTOR_ID = "work"
"""The sub-workflow's counting executor."""
