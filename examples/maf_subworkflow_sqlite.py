"""A MAF parent workflow with a sub-workflow, checkpointed to a SQLite file and resumed mid-run.

Run: ``python examples/maf_subworkflow_sqlite.py [PATH]``. With PATH the checkpoints stay in that
file (look inside with ``checkpoint-storages inspect sqlite:///PATH``); without it they go to a
temporary directory that is removed when the example ends.
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


if __name__ == "__main__":
    if len(sys.argv) > 1:
        kept = Path(sys.argv[1])
        asyncio.run(main(kept))
        print(f"checkpoints kept in {kept}")
    else:
        with tempfile.TemporaryDirectory() as directory:
            asyncio.run(main(Path(directory) / "checkpoints.db"))
        print(f"checkpoints written to {directory}, now removed; pass a path to keep them")
