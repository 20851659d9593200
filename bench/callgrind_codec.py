"""Instruction counts of codec encode/decode (valgrind's callgrind): figures machine load cannot blur.

``python -m bench.callgrind_codec [--calls N] [--json PATH] [--tree PATH]``: ``--tree`` puts another
checkout first on the measured programs' path (its ``storages/``, and its ``bench/`` helpers where
it has them), for counts before and after a change in one run (bench/before_after.py). Each measured
operation runs in a fresh interpreter under ``valgrind --tool=callgrind`` twice, once with N calls
and once with none; the difference divided by N is the instructions one call costs (interpreter
start-up and imports cancel out). Subjects, on the benchmark checkpoint (bench/workload.py): our
CheckpointCodec, plain msgspec of the same dataclass (``msgspec.msgpack.encode`` and a typed
``Decoder``), and LangGraph's JsonPlusSerializer (``dumps_typed`` / ``loads_typed``); and the memory
operations, ours (``InMemoryCheckpointStorage``: save, load, get_latest, list_checkpoints) against
LangGraph's ``InMemorySaver`` (aput, aget_tuple by id, aget_tuple latest, alist) of the same data,
the reads over the same 10-checkpoint history each (bench/targets_bench.py builds both sides).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

_SETUP = """
import warnings
warnings.simplefilter("ignore")
from bench.workload import template
from storages.contract import WorkflowCheckpoint
checkpoint = template(WorkflowCheckpoint)
"""

SUBJECTS: dict[str, tuple[str, str]] = {
    "ours/encode": (
        "from storages.codec import CheckpointCodec\ncodec = CheckpointCodec()\n"
        "codec.encode_checkpoint(checkpoint)",
        "codec.encode_checkpoint(checkpoint)",
    ),
    "ours/decode": (
        "from storages.codec import CheckpointCodec\ncodec = CheckpointCodec()\n"
        "body = codec.encode_checkpoint(checkpoint)\ncodec.decode_checkpoint(body, checkpoint_id='x')",
        "codec.decode_checkpoint(body, checkpoint_id='x')",
    ),
    "msgspec/encode": (
        "import msgspec\nencode = msgspec.msgpack.Encoder().encode\nencode(checkpoint)",
        "encode(checkpoint)",
    ),
    "msgspec/decode": (
        "import msgspec\nbody = msgspec.msgpack.encode(checkpoint)\n"
        "decoder = msgspec.msgpack.Decoder(WorkflowCheckpoint)\ndecoder.decode(body)",
        "decoder.decode(body)",
    ),
    "jsonplus/encode": (
        "from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer\nserde = JsonPlusSerializer()\n"
        "serde.dumps_typed(checkpoint)",
        "serde.dumps_typed(checkpoint)",
    ),
    "jsonplus/decode": (
        "from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer\nserde = JsonPlusSerializer()\n"
        "typed = serde.dumps_typed(checkpoint)\nserde.loads_typed(typed)",
        "serde.loads_typed(typed)",
    ),
    "memory-ours/save": (
        "import asyncio, dataclasses, itertools\nfrom storages.memory import InMemoryCheckpointStorage\n"
        "storage = InMemoryCheckpointStorage()\nloop = asyncio.new_event_loop()\nids = itertools.count()\n"
        "def save():\n"
        "    fresh = dataclasses.replace(checkpoint, checkpoint_id=f'c{next(ids)}')\n"
        "    loop.run_until_complete(storage.save(fresh))\n"
        "save()",
        "save()",
    ),
    "memory-inmemorysaver/save": (
        "import asyncio\nfrom langgraph.checkpoint.memory import InMemorySaver\n"
        "from bench.targets_bench import _langgraph_put\nput = _langgraph_put(InMemorySaver(), checkpoint)\n"
        "loop = asyncio.new_event_loop()\ndef save():\n    loop.run_until_complete(put(None))\nsave()",
        "save()",
    ),
}
"""Name -> (setup, including one warm-up call; the measured call)."""

MEMORY_READS = ("load", "latest", "list")
for _read in MEMORY_READS:
    for _side, _make in (
        (
            "ours",
            "from storages.memory import InMemoryCheckpointStorage as Subject\n"
            "from bench.targets_bench import _our_reads as reads_of",
        ),
        (
            "inmemorysaver",
            "from langgraph.checkpoint.memory import InMemorySaver as Subject\n"
            "from bench.targets_bench import _langgraph_reads as reads_of",
        ),
    ):
        SUBJECTS[f"memory-{_side}/{_read}"] = (
            f"import asyncio\n{_make}\nloop = asyncio.new_event_loop()\n"
            f"read = loop.run_until_complete(reads_of(Subject(), checkpoint))[{_read!r}]\n"
            "def call():\n    loop.run_until_complete(read(None))\ncall()",
            "call()",
        )

_TOTAL = re.compile(r"^summary:\s+(\d+)", re.MULTILINE)


def _script(setup: str, call: str, calls: int, tree: str = "") -> str:
    first = f"import sys\nsys.path.insert(0, {tree!r})\n" if tree else ""
    return f"{first}{_SETUP}\n{setup}\nfor _ in range({calls}):\n    {call}\n"


def instructions_per_call(
    script_for: Callable[[int], str], calls: int, out: Path, *, warm_up: int = 0
) -> float:
    """Instructions one call costs: the program ``script_for(n)`` makes ``n`` calls, and it runs
    with ``warm_up + calls`` and with ``warm_up`` (start-up, imports and the warm-up calls cancel
    out); the difference divided by ``calls``. Outputs go to ``out`` suffixed by the call count."""
    made, baseline = (
        program_instructions(script_for(number), out.with_name(f"{out.name}.{number}"))
        for number in (warm_up + calls, warm_up)
    )
    return (made - baseline) / calls


def program_instructions(script: str, out: Path) -> int:
    """Instructions callgrind counts for ``python -c script`` (PYTHONHASHSEED=0), its output in ``out``."""
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", script],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    match = _TOTAL.search(out.read_text())
    if match is None:
        raise RuntimeError(f"no summary line in {out}")
    return int(match.group(1))


def measure(calls: int, names: list[str] | None = None, tree: str = "") -> dict[str, float]:
    """Instructions per call of each subject."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed")
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="callgrind-codec-") as directory:
        for name in names or list(SUBJECTS):
            setup, call = SUBJECTS[name]
            results[name] = instructions_per_call(
                functools.partial(_script, setup, call, tree=tree),
                calls,
                Path(directory) / f"callgrind.{name.replace('/', '-')}",
            )
    return results


def ratios(counts: dict[str, float]) -> dict[str, float]:
    """Ours over each peer, encode+decode."""

    def roundtrip(subject: str) -> float:
        return counts[f"{subject}/encode"] + counts[f"{subject}/decode"]

    found = {
        "ours_over_msgspec": roundtrip("ours") / roundtrip("msgspec"),
        "ours_over_jsonplus": roundtrip("ours") / roundtrip("jsonplus"),
    }
    for operation in ("save", *MEMORY_READS):
        ours, peer = f"memory-ours/{operation}", f"memory-inmemorysaver/{operation}"
        if ours in counts and peer in counts:
            found[f"memory_{operation}_over_inmemorysaver"] = counts[ours] / counts[peer]
    return found


def table(counts: dict[str, float]) -> str:
    lines = [
        "| subject | encode (instructions) | decode (instructions) | encode+decode |",
        "|---|---:|---:|---:|",
    ]
    for subject in ("ours", "msgspec", "jsonplus"):
        encode, decode = counts[f"{subject}/encode"], counts[f"{subject}/decode"]
        lines.append(f"| {subject} | {encode:,.0f} | {decode:,.0f} | {encode + decode:,.0f} |")
    found = ratios(counts)
    for operation in ("save", *MEMORY_READS):
        if f"memory_{operation}_over_inmemorysaver" in found:
            lines.append(f"| memory {operation}: ours | {counts[f'memory-ours/{operation}']:,.0f} | | |")
            lines.append(
                f"| memory {operation}: InMemorySaver | "
                f"{counts[f'memory-inmemorysaver/{operation}']:,.0f} | | |"
            )
    lines.append("")
    lines.append(
        f"ours ÷ plain msgspec {found['ours_over_msgspec']:.2f}, "
        f"ours ÷ JsonPlusSerializer {found['ours_over_jsonplus']:.2f} (encode+decode instructions)"
        + (
            "; memory ours ÷ InMemorySaver: "
            + ", ".join(
                f"{operation} {found[f'memory_{operation}_over_inmemorysaver']:.2f}"
                for operation in ("save", *MEMORY_READS)
                if f"memory_{operation}_over_inmemorysaver" in found
            )
            + "."
            if "memory_save_over_inmemorysaver" in found
            else "."
        )
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.callgrind_codec", description=__doc__)
    parser.add_argument("--calls", type=int, default=200, help="measured calls per subject")
    parser.add_argument("--json", type=Path, metavar="PATH")
    parser.add_argument("--tree", default="", help="a checkout whose storages/ to measure instead")
    args = parser.parse_args(argv)
    counts = measure(args.calls, tree=args.tree)
    print(table(counts))
    if args.json is not None:
        payload: dict[str, Any] = {"calls": args.calls, "instructions": counts, "ratios": ratios(counts)}
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
