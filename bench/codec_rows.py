"""Every codec row side by side: encode+decode of small, 100 KB and 1 MB checkpoints.

``python -m bench.codec_rows [--calls N] [--rounds R] [--no-callgrind] [--json PATH]
[--markdown PATH]``. Rows: the benchmark checkpoint (bench/workload.py) with 1 KB, 100 KB or
1 MB more state: one ``bytes`` value, a list of 1 KB text messages, or a list of floats
(bench/tails_bench.py's ``large_checkpoint``). Subjects, each an encode then a decode of the same
checkpoint: our ``CheckpointCodec``; plain msgspec (``msgspec.msgpack.encode`` and a typed
``Decoder``); orjson (``dumps`` of the dataclass, ``bytes`` as base64 through ``default``, and
``loads`` to plain dicts: it checks nothing and rebuilds no type); LangGraph's
``JsonPlusSerializer`` (``dumps_typed``/``loads_typed``).

Times: the four subjects interleaved call by call (the order rotating), in rounds; a round gives
each subject's median time per call and ours ÷ each peer's, and a row's figure is the median over
rounds. Instruction counts (when valgrind is installed, unless ``--no-callgrind``): each subject in
a fresh interpreter under callgrind with N calls and with none (bench/callgrind_codec.py's
method), the difference over N; machine load cannot move them.
"""

from __future__ import annotations

import argparse
import base64
import functools
import gc
import json
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python bench/codec_rows.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.callgrind_codec import instructions_per_call
from bench.measure import TIMES
from bench.sections import CODEC_ROWS_END, CODEC_ROWS_HEADING, CODEC_ROWS_START

SIZES: tuple[tuple[str, int], ...] = (("small", 1_000), ("100 KB", 100_000), ("1 MB", 1_000_000))
"""Row label -> bytes of state added to the benchmark checkpoint ("small": 1 KB more)."""
SHAPES: tuple[tuple[str, str], ...] = (("bytes", "blob"), ("text", "text"), ("floats", "floats"))
"""Row label -> ``large_checkpoint``'s shape."""
SUBJECTS = ("ours", "msgspec", "orjson", "jsonplus")
PEERS = SUBJECTS[1:]
PEER_NAMES = {"msgspec": "msgspec", "orjson": "orjson", "jsonplus": "JsonPlus"}
CALLGRIND_CALLS = {"small": 100, "100 KB": 10, "1 MB": 3}
"""Calls per callgrind run: enough that one call's count dwarfs the run-to-run noise."""

START, END, HEADING = CODEC_ROWS_START, CODEC_ROWS_END, CODEC_ROWS_HEADING
"""The section ``--markdown`` replaces (``bench.run --markdown`` keeps it: bench/sections.py)."""


def _bytes_as_base64(value: Any) -> str:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(type(value).__name__)


def _state_keys(decoded: Any) -> set[str]:
    return set(decoded["state"] if isinstance(decoded, dict) else decoded.state)


def round_trip(subject: str, shape: str, size: int) -> Callable[[], Any]:
    """One encode+decode of the row's checkpoint by ``subject``, checked once before it is timed."""
    from bench.tails_bench import large_checkpoint
    from storages.contract import WorkflowCheckpoint

    checkpoint = large_checkpoint(shape, size)
    call: Callable[[], Any]
    if subject == "ours":
        from storages.codec import CheckpointCodec

        codec = CheckpointCodec()
        encode, decode = codec.encode_checkpoint, codec.decode_checkpoint

        def call() -> Any:
            return decode(encode(checkpoint), checkpoint_id="x")

        expected: Any = checkpoint
    elif subject == "msgspec":
        import msgspec

        packb = msgspec.msgpack.Encoder().encode
        unpackb = msgspec.msgpack.Decoder(WorkflowCheckpoint).decode

        def call() -> Any:
            return unpackb(packb(checkpoint))

        # Typed by its fields only: tuples come back as lists, datetimes in state as strings.
        expected = unpackb(packb(checkpoint))
    elif subject == "orjson":
        import orjson

        def call() -> Any:
            return orjson.loads(orjson.dumps(checkpoint, default=_bytes_as_base64))

        expected = orjson.loads(orjson.dumps(checkpoint, default=_bytes_as_base64))
    elif subject == "jsonplus":
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        serde = JsonPlusSerializer(allowed_msgpack_modules=[("storages.contract", "WorkflowCheckpoint")])

        def call() -> Any:
            return serde.loads_typed(serde.dumps_typed(checkpoint))

        expected = call()  # tuples come back as lists
    else:
        raise ValueError(f"unknown subject {subject!r}; one of {', '.join(SUBJECTS)}")
    result = call()
    if result != expected or _state_keys(result) != set(checkpoint.state):
        raise AssertionError(f"{subject} did not round-trip the {shape} checkpoint of {size} bytes")
    return call


def time_row(shape: str, size: int, calls: int, rounds: int) -> dict[str, Any]:
    """Median µs per call of each subject and the median over rounds of ours ÷ each peer."""
    sides = {subject: round_trip(subject, shape, size) for subject in SUBJECTS}
    medians: dict[str, list[float]] = {subject: [] for subject in SUBJECTS}
    ratios: dict[str, list[float]] = {peer: [] for peer in PEERS}
    for _ in range(rounds):
        times: dict[str, list[float]] = {subject: [] for subject in SUBJECTS}
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            for index in range(calls):
                turn = index % len(SUBJECTS)
                for subject in SUBJECTS[turn:] + SUBJECTS[:turn]:
                    start = time.perf_counter()
                    sides[subject]()
                    times[subject].append(time.perf_counter() - start)
        finally:
            if was_enabled:
                gc.enable()
        for subject in SUBJECTS:
            medians[subject].append(statistics.median(times[subject]) * 1e6)
        for peer in PEERS:
            ratios[peer].append(medians["ours"][-1] / medians[peer][-1])
    return {
        "us": {subject: statistics.median(values) for subject, values in medians.items()},
        "ratios": {peer: statistics.median(values) for peer, values in ratios.items()},
    }


def callgrind_script(subject: str, shape: str, size: int, calls: int) -> str:
    """The program callgrind counts: the subject's round trip set up (and checked), then ``calls``
    more of it."""
    # The collector paused for the calls, as in the timed rounds: a collection's cost depends on
    # the whole heap and when the allocation count trips it, not on the call.
    return (
        "import gc, warnings\nwarnings.simplefilter('ignore')\nfrom bench.codec_rows import round_trip\n"
        f"call = round_trip({subject!r}, {shape!r}, {size})\ngc.collect()\ngc.disable()\n"
        f"for _ in range({calls}):\n    call()\n"
    )


def count_row(shape: str, size: int, calls: int, jobs: int = 1) -> dict[str, Any]:
    """Instructions per encode+decode of each subject, and ours ÷ each peer; ``jobs`` callgrind
    runs at a time (each is one process counting its own instructions, so they do not blur)."""
    with tempfile.TemporaryDirectory(prefix="codec-rows-") as directory:

        def instructions(subject: str) -> float:
            script = functools.partial(callgrind_script, subject, shape, size)
            return instructions_per_call(script, calls, Path(directory) / f"callgrind.{subject}")

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            counts = dict(zip(SUBJECTS, pool.map(instructions, SUBJECTS), strict=True))
    return {"instructions": counts, "ratios": {peer: counts["ours"] / counts[peer] for peer in PEERS}}


def run(
    calls: int,
    rounds: int,
    callgrind: bool,
    only: list[str] | None = None,
    counted: list[str] | None = None,
    jobs: int = 1,
) -> dict[str, Any]:
    """Every row (or the rows named in ``only``, e.g. ``"1 MB bytes"``), timed; with
    ``callgrind``, counted too (only the rows named in ``counted``, if given)."""
    rows: dict[str, Any] = {}
    for size_label, size in SIZES:
        for shape_label, shape in SHAPES:
            label = f"{size_label} {shape_label}"
            if only is not None and label not in only:
                continue
            row = {"timed": time_row(shape, size, calls, rounds)}
            if callgrind and (counted is None or label in counted):
                row["counted"] = count_row(shape, size, CALLGRIND_CALLS[size_label], jobs)
            rows[label] = row
            print(f"measured {label}", file=sys.stderr, flush=True)
    settings = {"calls": calls, "rounds": rounds, "callgrind": callgrind, "counted": counted}
    return {"settings": settings, "rows": rows}


def tables(results: dict[str, Any]) -> str:
    """Times (µs per encode+decode, ours ÷ each peer) and, if counted, instructions the same way."""
    header = "| row | ours | " + " | ".join(f"{PEER_NAMES[peer]} (ours {TIMES})" for peer in PEERS) + " |"
    rule = "|---|---:|" + "---:|" * len(PEERS)
    lines = ["µs per encode+decode (median), ours ÷ peer in brackets:", "", header, rule]
    for label, row in results["rows"].items():
        timed = row["timed"]
        cells = [f"{timed['us'][peer]:,.1f} ({timed['ratios'][peer]:.2f}{TIMES})" for peer in PEERS]
        lines.append(f"| {label} | {timed['us']['ours']:,.1f} | " + " | ".join(cells) + " |")
    counted = {label: row["counted"] for label, row in results["rows"].items() if "counted" in row}
    if counted:
        lines += [
            "",
            "Instructions per encode+decode (callgrind), ours ÷ peer in brackets:",
            "",
            header,
            rule,
        ]
        for label, row in counted.items():
            counts = row["instructions"]
            cells = [f"{counts[peer] / 1e3:,.0f} k ({row['ratios'][peer]:.2f}{TIMES})" for peer in PEERS]
            lines.append(f"| {label} | {counts['ours'] / 1e3:,.0f} k | " + " | ".join(cells) + " |")
    return "\n".join(lines)


FINDINGS: tuple[str, ...] = (
    "- **Passes over a 1 MB payload.** msgspec's round trip is two: its encode's write and the "
    "`bytes` its decode builds. Ours, for a `bytes` value of 64 KiB or more at the top of the "
    "state (where LangGraph's saver keeps its serialized checkpoint, and these rows their blob), "
    "is four: the value's one copy, into the body; the checksum on encode; the checksum on "
    "decode; msgspec's copy on decode. ormsgpack packs the rest of the record with a placeholder "
    "in the value's place, the payload is split there, and the body is joined once from the "
    "parts, the value and the trailer, its XXH3-64 streamed over them: the same bytes as before "
    "(tests/test_codec_large_values.py compares such bodies with the exact walk's, and traces one "
    "copy of the value on encode and one on decode). A codec looks for such values from the first "
    "encode that held one on (the look is about 1% of a small encode). Any other large payload "
    "(text, or `bytes` deeper in the state) takes four: ormsgpack's write, the two checksums and "
    "msgspec's copy; since body format version 3 its frame is a trailer appended to ormsgpack's "
    "`bytes` in place, not a header the payload is copied behind.",
    "- **Body format version 2 (issue 43).** The two checksum passes are XXH3-64 instead of "
    'CRC-32 (docs/contract.md, "Corruption is loud", has the measurement and the strength of '
    "each). On this machine (AVX-512) ISA-L's CRC-32 was already fast, 13 µs a megabyte against "
    "XXH3-64's 19 to 23 µs, so the times above moved within the machine's noise; without AVX-512 "
    "(as under callgrind, whose CPU reports none) XXH3-64 takes 296 k instructions a MiB against "
    "the CRC's 514 k. Counted the same way (`valgrind --tool=callgrind`, N calls against none, "
    "bench/callgrind_codec.py's subjects), before and after: the 2.5 KB benchmark checkpoint's "
    "encode+decode 251,991 -> 246,829 instructions, a memory save 246,275 -> 245,882, a memory "
    "load 257,501 -> 255,966; our 1 MB round trip 4,343,764 -> 4,125,903 "
    "(`bytes`) and 7,671,898 -> 7,407,199 (text), 3 calls with the collector paused.",
    "- **Fewer passes (issue 43).** The value joined by reference (above) took the 1 MB `bytes` "
    "round trip from 4,126 k instructions (1.86x msgspec, this section's previous run of the same "
    "command) to 2,997 k (1.36x), and its time from 1.86x to 1.65x msgspec. The check that every "
    "bin came from `bytes` now goes through the state a level at a time in native calls (the "
    "types of a level in one set, the next level in one `gc.get_referents`) instead of a Python "
    "call per container: 220 k -> 92 k instructions on the small `bytes` row's record, which is "
    "most of what moved the small and 100 KB `bytes` rows (2.50x -> 2.15x and 2.57x -> 1.68x "
    "msgspec). The 2.5 KB benchmark checkpoint's encode+decode, which has no bin to check: "
    "246,771 -> 246,044 instructions (2,000 calls against none, PYTHONHASHSEED=0, both trees "
    "in one run). Text takes none of these paths: ours of 1 MB text, the same program against "
    "both trees in one run, 7,417 k -> 7,442 k instructions (5 calls), and its rows above moved "
    "within the run-to-run spread (msgspec's own 1 MB text count moved from 5,480 k to 6,282 k "
    "between this section's two runs).",
    "- **Body format version 3 (issue 43).** The frame moved after the payload: `payload, flags, "
    'XXH3-64 seeded with the flags, version, magic` (docs/contract.md, "Corruption is loud"; '
    "versions 1 and 2 still read, committed bodies of both in tests/data). A `BytesIO` made from "
    "the `bytes` ormsgpack returns, while it alone holds it, grows it in place and hands it back, "
    "so a payload of 64 KiB or more is no longer copied behind a header: that copy was 25 µs a "
    "megabyte in cache, about a seventh of our 1 MB text encode. Ours of 1 MB text, this command "
    "before and after: 7,786 k -> 6,443 k instructions (1.24x -> 1.16x msgspec, 1.03x -> 0.85x "
    "JsonPlusSerializer). The small body's frame is one join of the payload and the trailer's "
    "parts: the 2.5 KB benchmark checkpoint's encode 84,686 -> 84,260 instructions, its decode "
    "162,792 -> 162,764 (bench/callgrind_codec.py's method, 400 and 200 calls, PYTHONHASHSEED=0, "
    "both trees in one run); `python -m bench.before_after --calls 200` "
    "against main (e7852f6, which has commits this branch does not): every "
    "memory, SQLite and Redis save, load, latest and list within -1.3% to +1.9%, SQLite save "
    "the +1.9% (its run-to-run spread is larger).",
    "- **Long lists of plain values (issue 43).** An embedding's floats hold bin markers by "
    "chance (the 1 MB floats row's 111,111 hold thousands), so every encode of one took the check "
    "that every bin came from `bytes`, and the set of 111,111 types it built cost 30 ns a float, "
    "ten times ormsgpack's own write of them. A list of 256 or more items, under a level of at "
    "most 64 values, is now tested by one strict `msgspec.convert` to plain values, where its "
    "items are (6 ns an item); it refuses `bytes`, `bytearray`, `memoryview` and every container, "
    "and what it passes besides exact atoms (subclasses of `int` and `str`, `Decimal`) the native "
    "walk hands to the hook, whose extension contents now check their own bins "
    "(tests/test_codec_fast_path.py: a bytearray ending such a list, or given by a hook inside it, "
    "still reads back as a bytearray). The same rows before and after, in instructions "
    "(`python -m bench.codec_rows --calls 10 --rounds 3` with `--row` for each, before and after "
    "the change in one worktree each, PYTHONHASHSEED=0): 1 MB floats 73,463 k -> 55,595 k (2.11x "
    "-> 1.60x msgspec, 1.78x -> 1.33x JsonPlusSerializer), 100 KB floats 7,860 k -> 6,337 k "
    "(2.17x -> 1.79x), small floats 412 k -> 414 k, small bytes 336 k -> 341 k. In a payload "
    "under 64 KiB a level's lists are looked for only once the values under it number 256 or "
    "more, since each look costs about what a small level's whole step does (looking at every "
    "level holding a list cost the small `bytes` row 42 k more). In a payload of 64 KiB or more "
    "they are looked for before the level below is gathered, so a long list's items are never "
    "gathered only to be set aside (85 instructions an item): 1 MB floats 55,095 k -> 46,623 k "
    "instructions (1.63x -> 1.38x msgspec, 1.32x -> 1.12x JsonPlusSerializer), 100 KB floats "
    "5,879 k -> 5,015 k, and in time 1.78x -> 1.52x msgspec, 1.33x -> 1.15x JsonPlusSerializer "
    "(`python -m bench.codec_rows --no-callgrind --calls 20 --rounds 5 --row '1 MB floats'`, "
    "each tree in turn at a load average near 3); small bytes 339,683 -> 334,933, small floats "
    "413,722 -> 412,939, small text 247,076 -> 242,296, 100 KB bytes 571,504 -> 572,183, 100 KB "
    "text 913,693 -> 915,494, 1 MB bytes and text within 0.1% (ours only, bench/codec_rows.py's "
    "callgrind program per row, PYTHONHASHSEED=0, a worktree per tree). What is left of the "
    "1 MB floats row is the test itself (5 ns a float, half of our encode) and ormsgpack's write "
    "of floats (446 µs for the row's list, msgspec's whole encode of the checkpoint 284 µs).",
    "- **What is left.** Times on this machine were taken while other jobs ran (the 1 MB rows move "
    "by 10 to 20% between runs of this command), so the instruction counts are the figures to "
    "compare. 1 MB text is at its bounds in time (1.53x msgspec, 1.01x JsonPlusSerializer in this "
    "run) and under them in instructions (1.16x, 0.85x); what it does beyond msgspec is the two "
    "XXH3-64 passes (17 µs a megabyte each in cache; python-xxhash already dispatches to its "
    "AVX-512 path here, and a checksum cannot read the payload faster than that) and three scans "
    "for msgpack bin markers (`0xc4`, `0xc5`, `0xc6`, 13 µs a megabyte each: `memchr`, and no "
    "Python call searches for three byte values in one pass faster; walking the state for "
    "`bytearray` and `memoryview` first costs 95 µs on this row, more than the scans). 1 MB "
    "`bytes` is above 1.5x in time (1.67x) and under it in instructions (1.37x): it copies the "
    "value as often as msgspec does, and what it does beyond is the two XXH3-64 passes, which "
    "the format requires and msgspec, checking nothing, does not make, and the fixed cost of our "
    "encode and decode of the rest of the state (about 17 µs warm, 50 µs with the caches cold "
    "after the other subjects' runs). In cache (`taskset -c 1`, ours and msgspec alone) the row "
    "is 1.42x to 1.74x msgspec depending on what ran before; with the two checksum passes it "
    "cannot reach 1.5x reliably. The small `bytes` rows still pay the look for `bytearray` and "
    "`memoryview` (bin markers are found in the payload, and the state is walked; ormsgpack has "
    "no option to hand those types to the hook).",
)
"""What the rows show, kept with them in the section (their figures are the commands' named)."""


def section(results: dict[str, Any], command: str) -> str:
    settings = results["settings"]
    return "\n".join(
        [
            START,
            f"`{command}` (bench/codec_rows.py; {settings['rounds']} rounds of {settings['calls']} "
            "interleaved calls of each subject per row). orjson rebuilds no type and checks nothing; "
            "its decode gives plain dicts and base64 text for `bytes`.",
            "",
            tables(results),
            "",
            *FINDINGS,
            END,
        ]
    )


def replace_section(document: str, new_section: str) -> str:
    """``document`` with its codec-rows section replaced by ``new_section`` (appended, under its
    heading, if it has none)."""
    first, last = document.find(START), document.find(END)
    if first == -1 or last == -1 or last < first:
        return document.rstrip("\n") + "\n\n" + HEADING + "\n\n" + new_section + "\n"
    return document[:first] + new_section + document[last + len(END) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.codec_rows", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40, help="interleaved calls per round (default 40)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per row (default 5)")
    parser.add_argument("--no-callgrind", action="store_true", help="times only, even with valgrind")
    parser.add_argument("--row", action="append", metavar="LABEL", help='only this row, e.g. "1 MB bytes"')
    parser.add_argument(
        "--count-row",
        action="append",
        metavar="LABEL",
        help="count instructions of this row only (default: all)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="callgrind runs at a time (default 1)")
    parser.add_argument("--json", type=Path, metavar="PATH")
    parser.add_argument(
        "--markdown", type=Path, metavar="PATH", help="replace this file's codec-rows section"
    )
    args = parser.parse_args(argv)
    callgrind = not args.no_callgrind and shutil.which("valgrind") is not None
    if not args.no_callgrind and not callgrind:
        print("valgrind is not installed: times only", file=sys.stderr)
    known = {f"{size} {shape}" for size, _ in SIZES for shape, _ in SHAPES}
    for label in (*(args.row or ()), *(args.count_row or ())):
        if label not in known:
            parser.error(f"unknown row {label!r}; rows: {', '.join(sorted(known))}")
    results = run(args.calls, args.rounds, callgrind, args.row, args.count_row, args.jobs)
    print(tables(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    if args.markdown is not None:
        command = "python -m bench.codec_rows " + shlex.join(argv if argv is not None else sys.argv[1:])
        document = args.markdown.read_text(encoding="utf-8") if args.markdown.exists() else ""
        args.markdown.write_text(
            replace_section(document, section(results, command.strip())), encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
