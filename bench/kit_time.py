"""The kit's own time: the README's main command (``checkpoint-conformance`` with no URL, every
built-in backend on its embedded default) for two commits, run in turn, wall and CPU time each.

``python -m bench.kit_time BEFORE [AFTER] [--rounds N]``: AFTER defaults to this checkout's
working tree. Each commit is checked out in a temporary worktree and imported from there
(``PYTHONPATH``) with this environment's packages, so both run on the same interpreter and
libraries; rounds alternate the two so that a machine growing busier or quieter slows both alike.
No server is configured for either run (``CHECKPOINT_POSTGRESQL_URL`` is unset). Run it with
nothing else on the machine: these are seconds, not instruction counts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_KIT = "from conformance.cli import console_main; console_main()"


@contextlib.contextmanager
def _worktree(revision: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kit-time-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(
            ["git", "-C", str(_ROOT), "worktree", "add", "--detach", "-q", str(tree), revision], check=True
        )
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(_ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def _run_kit(tree: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and exit status of one no-URL kit run importing ``tree``."""
    environment = {key: value for key, value in os.environ.items() if key != "CHECKPOINT_POSTGRESQL_URL"}
    environment["PYTHONPATH"] = str(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kit-time-run-") as cwd:
        done = subprocess.run(
            [sys.executable, "-c", _KIT],
            cwd=cwd,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kit_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("before", help="the commit to compare against")
    parser.add_argument("after", nargs="?", help="the commit measured (default: this working tree)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, alternated (default 2)")
    arguments = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        trees = {"before": stack.enter_context(_worktree(arguments.before))}
        trees["after"] = stack.enter_context(_worktree(arguments.after)) if arguments.after else _ROOT
        walls: dict[str, list[float]] = {"before": [], "after": []}
        print(f"{'round':>5}  {'run':<6}  {'wall s':>7}  {'cpu s':>7}  {'exit':>4}  {'load':>5}")
        for round_number in range(1, arguments.rounds + 1):
            for name, tree in trees.items():
                wall, cpu, status = _run_kit(tree)
                walls[name].append(wall)
                row = f"{round_number:>5}  {name:<6}  {wall:>7.1f}  {cpu:>7.1f}  {status:>4}"
                print(f"{row}  {os.getloadavg()[0]:>5.2f}", flush=True)
    before, after = (sum(walls[name]) / len(walls[name]) for name in ("before", "after"))
    print(f"mean wall: before {before:.1f} s, after {after:.1f} s ({after / before - 1:+.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
