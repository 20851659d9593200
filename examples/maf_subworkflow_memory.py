"""A MAF parent workflow with a sub-workflow, checkpointed in memory and resumed mid-run.

Run: ``python examples/maf_subworkflow_memory.py``
"""

import asyncio

from maf_subworkflow_common import run_then_resume

from storages import InMemoryCheckpointStorage


async def main() -> None:
    async with InMemoryCheckpointStorage() as storage:
        await run_then_resume(storage)


if __name__ == "__main__":
    asyncio.run(main())
