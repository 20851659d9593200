"""A second process for tests/test_sqlite.py.

``python sqlite_worker.py save PATH WORKFLOW COUNT PREFIX``: open the file, print ``ready``, wait
for a line on stdin, save COUNT checkpoints with ids PREFIX-0..COUNT-1 2 ms apart, close, print
``done``. Half-way it prints ``half`` and waits for another line, so the test can make the two
writers' saves interleave whatever the machine's load.

``python sqlite_worker.py save-and-exit PATH WORKFLOW``: save one checkpoint, close, return;
the process exits only if closing released the connection's thread.

``python sqlite_worker.py exit-while-saving PATH WORKFLOW``: a daemon thread saves checkpoints
from its own event loop without end; once it has saved three, the main thread returns and the
interpreter exits with that thread still saving (print ``exiting``).

``python sqlite_worker.py fence-race PATH WORKFLOW COUNT PREFIX``: print ``ready``, wait for a
line, then COUNT times read the latest and save a checkpoint continuing it, fenced on it; print
``done WINS REFUSALS``.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import threading

from storages import SQLiteCheckpointStorage, StaleWriterError, WorkflowCheckpoint


def exit_while_saving(path: str, workflow: str) -> None:
    saved_some = threading.Event()

    async def save_forever() -> None:
        storage = SQLiteCheckpointStorage(path)  # never closed: the process ends under it
        previous = None
        for count in itertools.count(1):
            checkpoint = WorkflowCheckpoint(workflow, "sig", previous_checkpoint_id=previous)
            previous = await storage.save(checkpoint)
            if count == 3:
                saved_some.set()

    threading.Thread(target=asyncio.run, args=(save_forever(),), daemon=True).start()
    saved_some.wait(timeout=60)
    print("exiting", flush=True)


async def save_many(path: str, workflow: str, count: int, prefix: str) -> None:
    async with SQLiteCheckpointStorage(path) as storage:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        for index in range(count):
            if index == count // 2:
                print("half", flush=True)
                await asyncio.to_thread(sys.stdin.readline)
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


async def fence_race(path: str, workflow: str, count: int, prefix: str) -> None:
    wins = refusals = 0
    async with SQLiteCheckpointStorage(path) as storage:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        for index in range(count):
            latest = await storage.get_latest(workflow_name=workflow)
            head = None if latest is None else latest.checkpoint_id
            checkpoint = WorkflowCheckpoint(
                workflow_name=workflow,
                graph_signature_hash="sig",
                checkpoint_id=f"{prefix}-{index}",
                previous_checkpoint_id=head,
            )
            try:
                await storage.save(checkpoint, expected_latest_id=head)
                wins += 1
            except StaleWriterError:
                refusals += 1
    print(f"done {wins} {refusals}", flush=True)


def main(argv: list[str]) -> None:
    mode, path, workflow, *rest = argv
    if mode == "save":
        asyncio.run(save_many(path, workflow, int(rest[0]), rest[1]))
    elif mode == "save-and-exit":
        asyncio.run(save_and_exit(path, workflow))
    elif mode == "exit-while-saving":
        exit_while_saving(path, workflow)
    elif mode == "fence-race":
        asyncio.run(fence_race(path, workflow, int(rest[0]), rest[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
