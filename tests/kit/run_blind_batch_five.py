"""Runs the kit on every storage of tests/kit/blind_batch_five.py, each in a process of its own
with a timeout, and prints one line per storage: caught (the failed clause ids) or missed.

    python -m tests.kit.run_blind_batch_five [NAME ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

TIMEOUT = 240.0


def run_one(name: str) -> dict[str, object]:
    from conformance import validate
    from tests.kit.blind_batch_five import BY_NAME

    report = validate(BY_NAME[name]())
    backend = report.backends[0]
    failed = [r.clause_id for r in backend.results if str(r.outcome.value) == "failed"]
    messages = {
        r.clause_id: (r.message or "")[:300] for r in backend.results if str(r.outcome.value) == "failed"
    }
    return {"name": name, "failed": failed, "messages": messages, "error": str(backend.error or "")}


def main(names: list[str]) -> None:
    from tests.kit.blind_batch_five import ENTRIES, HONEST, NOT_VIOLATIONS

    # A storage judged not to break the contract must pass, as an honest one does.
    honest = {name for name, _, _ in HONEST + NOT_VIOLATIONS}
    chosen = names or [name for name, _, _ in HONEST + NOT_VIOLATIONS + ENTRIES]
    for name in chosen:
        started = time.monotonic()
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import json; from tests.kit.run_blind_batch_five import run_one; "
                    f"print('RESULT', json.dumps(run_one({name!r})))",
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
        kind = "honest" if name in honest else "broken"
        verdict = (
            ("PASS" if not result["failed"] and not result.get("error") else "FAIL")
            if kind == "honest"
            else ("caught" if result["failed"] or result.get("error") else "MISSED")
        )
        print(
            json.dumps({"name": name, "kind": kind, "verdict": verdict, "seconds": round(took, 1), **result}),
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
