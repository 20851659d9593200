"""A MAF parent workflow with a sub-workflow, checkpointed to a SQLite file and resumed mid-run.

Run: ``python examples/maf_subworkflow_sqlite.py [PATH]`` (default: a file in a temporary directory).
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from maf_subworkflow_common import run_then_resume

from storages import open_storage


async def main(path: Path) -> None:
    async with open_storage(f"sqlite:///{path}") as storage:
        await run_then_resume(storage)
    print(f"checkpoints kept in {path}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(directory) / "checkpoints.db"))
