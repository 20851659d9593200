"""A fresh process for tests/test_langgraph_graphs.py.

``python langgraph_worker.py resume URL THREAD ANSWER``: open the storage at URL, rebuild the
tour graph, resume THREAD with ``Command(resume=ANSWER)`` and print the final state as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys

from langgraph.types import Command

from conformance._langgraph_graphs import build_tour, thread_config
from storages.runners.langgraph import StorageSaver


async def resume(url: str, thread_id: str, answer: str) -> None:
    async with StorageSaver.from_url(url) as saver:
        graph = build_tour(saver)
        final = await graph.ainvoke(Command(resume=answer), thread_config(thread_id))
        print(json.dumps(final), flush=True)


if __name__ == "__main__":
    command, url, thread_id, answer = sys.argv[1:]
    if command != "resume":
        raise SystemExit(f"unknown command {command!r}")
    asyncio.run(resume(url, thread_id, answer))
