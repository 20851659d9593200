"""A second process for tests/test_sqlite.py.

``python sqlite_worker.py save PATH WORKFLOW COUNT PREFIX``: open the file, print ``ready``, wait
for a line on stdin, save COUNT checkpoints with ids PREFIX-0..COUNT-1 2 ms apart, close, print
``done``.

``python sqlite_worker.py save-and-exit PATH WORKFLOW``: save one checkpoint, close, return;
the process exits only if closing released the connection's thread.
"""

from __future__ import annotations

import asyncio
import sys

from storages import SQLiteCheckpointStorage, WorkflowCheckpoint


async def save_many(path: str, workflow: str, count: int, prefix: str) -> None:
    async with SQLiteCheckpointStorage(path) as storage:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        for index in range(count):
            checkpoint = WorkflowCheckpoint(
                workflow_name=workflow,
                graph_signature_hash="sig",
                checkpoint_id=f"{prefix}-{index}",
                iteration_count=index,
            )
            await storage.save(checkpoint)
            await asyncio.sleep(0.002)
    print("done", flush=True)


# Kept alive to interpreter exit, as an application's long-lived storage would be: an unclosed
# connection's thread would then block exit (garbage collection cannot stop it first).
HANDLES: list[SQLiteCheckpointStorage] = []


async def save_and_exit(path: str, workflow: str) -> None:
    storage = SQLiteCheckpointStorage(path)
    HANDLES.append(storage)
    await storage.save(WorkflowCheckpoint(workflow_name=workflow, graph_signature_hash="sig"))
    await storage.aclose()
    print("closed", flush=True)


def main(argv: list[str]) -> None:
    mode, path, workflow, *rest = argv
    if mode == "save":
        asyncio.run(save_many(path, workflow, int(rest[0]), rest[1]))
    elif mode == "save-and-exit":
        asyncio.run(save_and_exit(path, workflow))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
