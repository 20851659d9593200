"""Runs the kit on every storage of one blind batch, each in a process of its own with a
timeout, and prints one JSON line per storage: caught (the failed clause ids) or missed, for a
broken storage; pass or fail, for an honest one or one judged not to break the contract.

    python -m tests.kit.run_blind_batch BATCH [NAME ...]

BATCH names a module of tests/kit (``blind_batch_five``) that defines ``ENTRIES``, ``HONEST``
and ``BY_NAME``, and may define ``NOT_VIOLATIONS``.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from types import ModuleType

TIMEOUT = 240.0


def batch_module(batch: str) -> ModuleType:
    if not batch.isidentifier() or not batch.startswith("blind_batch"):
        raise SystemExit(f"BATCH must name a blind batch module of tests/kit, not {batch!r}")
    return importlib.import_module(f"tests.kit.{batch}")


def run_one(batch: str, name: str) -> dict[str, object]:
    from conformance import validate

    report = validate(batch_module(batch).BY_NAME[name]())
    backend = report.backends[0]
    failed = [r for r in backend.results if str(r.outcome.value) == "failed"]
    return {
        "name": name,
        "failed": [r.clause_id for r in failed],
        "messages": {r.clause_id: (r.message or "")[:300] for r in failed},
        "error": str(backend.error or ""),
    }


def main(batch: str, names: list[str]) -> None:
    module = batch_module(batch)
    passing = module.HONEST + getattr(module, "NOT_VIOLATIONS", [])
    # A storage judged not to break the contract must pass, as an honest one does.
    must_pass = {name for name, _, _ in passing}
    chosen = names or [name for name, _, _ in passing + module.ENTRIES]
    for name in chosen:
        started = time.monotonic()
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import json; from tests.kit.run_blind_batch import run_one; "
                    f"print('RESULT', json.dumps(run_one({batch!r}, {name!r})))",
                ],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            result = json.loads(lines[-1][7:]) if lines else {"failed": [], "error": done.stderr[-500:]}
        except subprocess.TimeoutExpired:
            result = {"failed": ["<timeout>"], "error": "timeout"}
        took = time.monotonic() - started
        kind = "honest" if name in must_pass else "broken"
        flagged = bool(result["failed"] or result.get("error"))
        verdict = ("FAIL" if flagged else "PASS") if kind == "honest" else ("caught" if flagged else "MISSED")
        line = {"name": name, "kind": kind, "verdict": verdict, "seconds": round(took, 1), **result}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
