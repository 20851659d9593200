"""A MAF parent workflow with a sub-workflow, checkpointed to Redis and resumed mid-run.

Run: ``REDIS_URL=redis://127.0.0.1:6379/0 python examples/maf_subworkflow_redis.py``. The example
keeps its keys under a prefix of its own and deletes them (with SCAN, never FLUSHALL) when it is done.
"""

import asyncio
import os
import uuid

from maf_subworkflow_common import run_then_resume
from redis.asyncio import Redis

from storages import open_storage
from storages.redis import delete_prefix


async def main() -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"maf-example-{uuid.uuid4().hex[:8]}"
    async with open_storage(f"{url}{'&' if '?' in url else '?'}prefix={prefix}") as storage:
        try:
            await run_then_resume(storage)
        finally:
            client = Redis.from_url(url)
            await delete_prefix(client, prefix)
            await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
