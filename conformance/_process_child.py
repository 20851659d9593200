"""The other process of the cross-process durability clauses, run as ``python <this file>``.

It reads one JSON request, a line on stdin: how to open the store (a storage URL or
``"module:function"``), the checkpoint class (``"module:qualname"``), what to read, checkpoints to
save and ids to delete. With ``"together"`` it first opens the store, prints that it is ready,
waits for a line on stdin and saves those checkpoints (one JSON line each), while the kit's
process saves its own. It prints one line with what it read (if asked), then one JSON line per
acknowledged save and per delete. With ``"crash"``
it ends with ``os._exit`` right after the last acknowledged write: no ``aclose()``, no atexit hooks,
no buffered writes flushed, as a killed worker would.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import sys
from typing import Any

SHARED_FIELDS = (
    "workflow_name",
    "graph_signature_hash",
    "checkpoint_id",
    "previous_checkpoint_id",
    "timestamp",
    "state",
    "iteration_count",
    "metadata",
)
"""The fields the two processes exchange (JSON values only)."""
MESSAGE_PREFIX = "checkpoint-conformance-child: "
"""Starts every line meant for the kit, so whatever the storage prints is ignored."""


def _resolve(spec: str) -> Any:
    module_name, _, qualname = spec.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


async def _open(opener: str) -> Any:
    if "://" in opener:
        from storages.urls import open_storage

        return open_storage(opener)
    storage = _resolve(opener)()
    return await storage if inspect.isawaitable(storage) else storage


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(MESSAGE_PREFIX + json.dumps(message) + "\n")
    sys.stdout.flush()


async def _main(request: dict[str, Any]) -> None:
    storage = await _open(request["opener"])
    checkpoint_class = _resolve(request["checkpoint_class"])
    together = request.get("together")
    if together is not None:
        # Connected first, then told when to start: these saves run while the kit's process saves.
        await storage.list_checkpoint_ids(workflow_name=together["workflow_name"])
        _emit({"ready": True})
        sys.stdin.readline()
        for fields in together["save"]:
            await storage.save(checkpoint_class(**fields))
            _emit({"saved_together": fields["checkpoint_id"]})
    read = request.get("read")
    if read is not None:
        found: dict[str, Any] = {}
        for checkpoint_id in read["ids"]:
            try:
                checkpoint = await storage.load(checkpoint_id)
            except Exception as exc:
                found[checkpoint_id] = f"{type(exc).__name__}: {exc}"
            else:
                found[checkpoint_id] = {name: getattr(checkpoint, name) for name in SHARED_FIELDS}
        workflow_name = read["workflow_name"]
        latest = await storage.get_latest(workflow_name=workflow_name)
        _emit(
            {
                "loaded": found,
                "ids": list(await storage.list_checkpoint_ids(workflow_name=workflow_name)),
                "latest": None if latest is None else latest.checkpoint_id,
            }
        )
    for fields in request.get("save", []):
        await storage.save(checkpoint_class(**fields))
        _emit({"saved": fields["checkpoint_id"]})
    for checkpoint_id in request.get("delete", []):
        _emit({"deleted": checkpoint_id, "existed": await storage.delete(checkpoint_id)})
    if request.get("crash"):
        os._exit(0)
    await storage.aclose()


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.stdin.readline())))
