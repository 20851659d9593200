"""Turns the results dict (the same one written as JSON) into tables and conclusions.

Tables are built once as plain rows and rendered twice: rich for the console, markdown for docs.
Conclusions are computed from the numbers, so the text can never claim what a run did not show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from .measure import TIMES
from .storage_bench import OPERATIONS, op_key

OPERATION_NAMES = {"save": "save", "load": "load", "latest": "get_latest"}
FLAT_LIMIT = 1.5
"""get_latest counts as flat when 10,000 stored costs at most this many times 10 stored."""


@dataclass
class TableData:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""

    def to_rich(self) -> Table:
        table = Table(title=self.title, caption=self.caption or None, title_justify="left")
        for index, column in enumerate(self.columns):
            table.add_column(column, justify="left" if index == 0 else "right", no_wrap=True)
        for row in self.rows:
            table.add_row(*row)
        return table

    def to_markdown(self) -> str:
        lines = [
            "| " + " | ".join(self.columns) + " |",
            "|" + "|".join(["---"] + ["---:"] * (len(self.columns) - 1)) + "|",
        ]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in self.rows]
        text = "\n".join(lines)
        return f"{text}\n\n{self.caption}" if self.caption else text


def fmt_us(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def fmt_ratio(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}{TIMES}"
    if value >= 10:
        return f"{value:.1f}{TIMES}"
    return f"{value:.2f}{TIMES}"


def faster_or_slower(maf_over_ours: float) -> str:
    if maf_over_ours >= 1:
        return f"{fmt_ratio(maf_over_ours)} faster"
    return f"{fmt_ratio(1 / maf_over_ours)} slower"


# ---------------------------------------------------------------- tables


def codec_table(codec: dict[str, Any]) -> TableData:
    table = TableData(
        "1. Codec: encode + decode of the benchmark checkpoint (µs per op, median)",
        ["codec", "body bytes", "encode µs", "decode µs", "encode+decode µs", "÷ ours (encode+decode)"],
        caption="The last column is this codec's encode+decode time divided by ours: "
        "above 1, ours is faster.",
    )
    ours_roundtrip = codec["rows"]["ours"]["roundtrip"]["median_us"]
    for row in codec["rows"].values():
        table.rows.append(
            [
                row["label"],
                f"{row['body_bytes']:,}",
                fmt_us(row["encode"]["median_us"]),
                fmt_us(row["decode"]["median_us"]),
                fmt_us(row["roundtrip"]["median_us"]),
                fmt_ratio(row["roundtrip"]["median_us"] / ours_roundtrip),
            ]
        )
    return table


def _op_columns(sizes: dict[str, int]) -> list[tuple[str, str]]:
    return [
        (op_key(op, n), f"{OPERATION_NAMES[op]} @{n:,}")
        for op in OPERATIONS
        for n in (sizes["small"], sizes["large"])
    ]


def storage_table(storages: dict[str, Any]) -> TableData:
    columns = _op_columns(storages["sizes"])
    table = TableData(
        "2a. Storages: µs per operation (median), by number of checkpoints stored in the workflow",
        ["storage"] + [f"{title} µs" for _, title in columns],
    )
    for subject in storages["subjects"].values():
        table.rows.append(
            [subject["label"]] + [fmt_us(subject["ops"][key]["median_us"]) for key, _ in columns]
        )
    return table


def ratio_table(storages: dict[str, Any]) -> TableData:
    columns = _op_columns(storages["sizes"])
    table = TableData(
        "2b. Storages: ratios of the medians above",
        ["comparison"] + [title for _, title in columns],
        caption='Rows "ours ÷ raw" give our cost in multiples of the raw backend '
        f"(lower is better; 1{TIMES} is "
        'the floor). Rows "MAF ÷ ours" give how many times faster ours is (above 1, ours is faster).',
    )
    subjects = storages["subjects"]
    for comparison in storages["comparisons"]:
        numerator = subjects[comparison["numerator"]]["label"]
        denominator = subjects[comparison["denominator"]]["label"]
        table.rows.append(
            [f"{numerator} ÷ {denominator}"] + [fmt_ratio(comparison["values"][key]) for key, _ in columns]
        )
    return table


def flatness_table(storages: dict[str, Any]) -> TableData:
    small, large = storages["sizes"]["small"], storages["sizes"]["large"]
    table = TableData(
        f"3. get_latest flatness: cost at {large:,} stored ÷ cost at {small:,} stored",
        ["storage", f"get_latest @{small:,} µs", f"get_latest @{large:,} µs", f"@{large:,} ÷ @{small:,}"],
        caption=f"1{TIMES} means get_latest does not depend on how many checkpoints the workflow holds.",
    )
    for key, subject in storages["subjects"].items():
        table.rows.append(
            [
                subject["label"],
                fmt_us(subject["ops"][op_key("latest", small)]["median_us"]),
                fmt_us(subject["ops"][op_key("latest", large)]["median_us"]),
                fmt_ratio(storages["latest_large_over_small"][key]),
            ]
        )
    return table


def populate_table(storages: dict[str, Any]) -> TableData:
    large = storages["sizes"]["large"]
    table = TableData(
        f"2c. Populate: saving {large:,} checkpoints one by one into one workflow",
        ["storage", "seconds", "µs per save", "saves per second"],
    )
    for subject in storages["subjects"].values():
        populate = subject["populate"]
        table.rows.append(
            [
                subject["label"],
                f"{populate['seconds']:.2f}",
                fmt_us(populate["per_op_us"]),
                f"{1e6 / populate['per_op_us']:,.0f}",
            ]
        )
    return table


def all_tables(results: dict[str, Any]) -> list[TableData]:
    tables = [codec_table(results["codec"])]
    storages = results.get("storages")
    if storages:
        tables += [
            storage_table(storages),
            ratio_table(storages),
            populate_table(storages),
            flatness_table(storages),
        ]
    return tables


# ---------------------------------------------------------------- conclusions


def _gap(microseconds: float) -> str:
    if microseconds >= 0:
        return f"{fmt_us(microseconds)} µs more than"
    return f"{fmt_us(-microseconds)} µs less than"


def conclusions(results: dict[str, Any]) -> list[str]:
    """Statements computed from this run's numbers."""
    found: list[str] = []
    codec = results["codec"]
    rows = codec["rows"]
    compact = codec["maf_over_ours"]["maf-json"]["roundtrip"]
    file_style = codec["maf_over_ours"]["maf-file"]["roundtrip"]
    verdict = "met" if compact >= 2 else "NOT met"
    ours_us = rows["ours"]["roundtrip"]["median_us"]
    maf_us = rows["maf-json"]["roundtrip"]["median_us"]
    found.append(
        f"Codec: encode+decode of the checkpoint takes {fmt_us(ours_us)} µs with ours and "
        f"{fmt_us(maf_us)} µs with MAF's encoder and compact JSON: ours is {fmt_ratio(compact)} "
        f"faster (the issue's target of at least 2{TIMES} is {verdict}). Against what "
        f"FileCheckpointStorage actually does per checkpoint (indented JSON, validating decode on save) "
        f"ours is {fmt_ratio(file_style)} faster. Our body is {rows['ours']['body_bytes']:,} bytes against "
        f"{rows['maf-json']['body_bytes']:,} bytes of compact JSON."
    )
    storages = results.get("storages")
    if not storages:
        return found
    subjects = storages["subjects"]
    small, large = storages["sizes"]["small"], storages["sizes"]["large"]

    def median(key: str, op: str, n: int) -> float:
        return float(subjects[key]["ops"][op_key(op, n)]["median_us"])

    for comparison in storages["comparisons"]:
        ours_key, other_key = comparison["denominator"], comparison["numerator"]
        if subjects[other_key]["kind"] != "maf":
            continue
        values = comparison["values"]
        parts = [
            f"{OPERATION_NAMES[op]} {faster_or_slower(values[op_key(op, small)])} at {small:,} and "
            f"{faster_or_slower(values[op_key(op, large)])} at {large:,}"
            for op in OPERATIONS
        ]
        found.append(
            f"{subjects[ours_key]['label']} against {subjects[other_key]['label']}: " + "; ".join(parts) + "."
        )

    decode_us = rows["ours"]["decode"]["median_us"]
    encode_us = rows["ours"]["encode"]["median_us"]
    for comparison in storages["comparisons"]:
        ours_key, raw_key = comparison["numerator"], comparison["denominator"]
        if subjects[raw_key]["kind"] != "raw":
            continue
        values = list(comparison["values"].values())
        load_gap = median(ours_key, "load", large) - median(raw_key, "load", large)
        save_gap = median(ours_key, "save", large) - median(raw_key, "save", large)
        found.append(
            f"{subjects[ours_key]['label']} costs {fmt_ratio(min(values))} to {fmt_ratio(max(values))} the "
            f"{subjects[raw_key]['label']}, which moves ready-made bytes. At {large:,} stored, load costs "
            f"{_gap(load_gap)} the raw read (our codec's decode alone is {fmt_us(decode_us)} µs) and save "
            f"{_gap(save_gap)} the raw write (encode alone is {fmt_us(encode_us)} µs)."
        )
        if min(values) < 1:
            found.append(
                f"Ratios below 1{TIMES} against {subjects[raw_key]['label']} are not savings: ours runs the "
                "same statement or more for every operation and decodes the body too. They show how much "
                "a single run's medians can move on this machine (each aiosqlite call is two thread "
                "hops, whose latency depends on where the scheduler puts the threads); every sample is "
                "in the JSON output."
            )

    flat = storages["latest_large_over_small"]
    described = []
    for key, growth in flat.items():
        shape = "flat" if growth <= FLAT_LIMIT else "grows"
        described.append(f"{subjects[key]['label']} {fmt_ratio(growth)} ({shape})")
    found.append(
        f"get_latest from {small:,} to {large:,} stored checkpoints: " + ", ".join(described) + f". "
        f'"Flat" here means at most {FLAT_LIMIT}{TIMES}.'
    )
    return found


# ---------------------------------------------------------------- issue 15 targets


HISTORY_NOTE = "each side holds the same 10 checkpoints in one workflow (thread)"


def _target_note(key: str, targets: dict[str, Any]) -> str:
    """What the compared figures are made of, from this run's medians."""
    medians = targets["medians_us"]
    if key.startswith("codec"):
        return (
            f"ours {fmt_us(medians['codec/ours'])} µs, msgspec {fmt_us(medians['codec/msgspec'])} µs, "
            f"JsonPlusSerializer {fmt_us(medians['codec/jsonplus'])} µs; ours adds the header + CRC-32 "
            "(about 10,500 instructions each way), one Python hook per extension value (datetimes, "
            "tuples) on decode, and on encode for each datetime or tuple of atoms the encoder has "
            "not met before (it remembers those by object), and the field type checks of a decoded "
            "record"
        )
    if key == "s3_save_requests":
        rows = targets["s3_costs"]["rows"]
        mix = ", ".join(f"{count} {name}" for name, count in sorted(rows["save"]["requests"].items()))
        return (
            f"{mix} (moto's HTTP server, counted per request); "
            f"USD {rows['save']['usd_per_million']:,.2f} per million saves at "
            "S3 Standard list prices; load sends "
            f"{rows['load']['total']}, get_latest {rows['get_latest']['total']} (docs/s3.md)"
        )
    for prefix, peer_name in (("memory", "InMemorySaver"), ("sqlite", "AsyncSqliteSaver")):
        for read, what in (("load", "load"), ("latest", "get_latest"), ("list", "list_checkpoints")):
            if key.startswith(f"{prefix}_{read}_vs_"):
                ours, peer = medians[f"{prefix}/ours-{read}"], medians[f"{prefix}/peer-{read}"]
                return f"ours {fmt_us(ours)} µs, {peer_name} {fmt_us(peer)} µs; {HISTORY_NOTE}" + (
                    f", {what} decodes all of them" if read == "list" else ""
                )
    if key.startswith("memory"):
        ours, peer = medians["memory/ours"], medians["memory/inmemorysaver"]
        return f"ours {fmt_us(ours)} µs, InMemorySaver {fmt_us(peer)} µs"
    if key == "sqlite_32_writers_vs_raw":
        per_second = targets["writers"]["saves_per_second"]
        shared, handles, raw = (per_second[name] for name in ("ours-shared", "ours-handles", "raw-shared"))
        return (
            f"{targets['writers']['count']} writers: ours on one shared handle {shared:,.0f}/s, "
            f"one handle each {handles:,.0f}/s, raw INSERT {raw:,.0f}/s; "
            "every commit is its own fsync on both sides, ours writes more index pages per commit"
        )
    mode = "normal" if key.endswith("normal") else "full"
    ours = medians[f"sqlite/ours-{mode}"]
    peer = (
        medians["sqlite/asyncsqlitesaver"]
        if key.endswith("asyncsqlitesaver")
        else medians[f"sqlite/raw-{mode}"]
    )
    counts = targets.get("sqlite_counts")
    pages = (
        f"; pages written per save (WAL frames, load-independent): ours {counts['ours']['wal_frames']:.1f}, "
        f"raw INSERT {counts['raw']['wal_frames']:.1f}; hand-offs per save: ours "
        f"{counts['ours']['handoffs']:.0f}, raw {counts['raw']['handoffs']:.0f}"
        if counts
        else ""
    )
    return (
        f"ours {fmt_us(ours)} µs, peer {fmt_us(peer)} µs: ours also checks the fields and encodes the body "
        "(a re-save is told by comparing stored bytes in the transaction, so nothing is hashed), takes the "
        "next sequence (three index searches), "
        f"updates two secondary indexes (schema 4: no sequence row written), in one hand-off{pages}"
    )


def targets_table(targets: dict[str, Any]) -> TableData:
    """Each of issue 15's targets for the codec, memory and SQLite with its measured ratio."""
    from .targets_bench import COUNTS, FLOORS, TARGETS, target_met

    table = TableData(
        "Issue 15 targets: codec, memory, SQLite, S3 (ratios of medians measured in this run)",
        ["target", "bound", "measured", "verdict", "what the figures are made of"],
        caption="Ratios are ours ÷ peer (time), except the 32-writer row, which is ours ÷ raw in saves "
        "per second (a floor: at least the bound), and the S3 row, a count of requests. Redis's "
        "targets are in the Redis section below, PostgreSQL's in its own. Instruction counts, which "
        "load cannot blur: `python -m bench.callgrind_codec`.",
    )
    for key, (label, bound) in TARGETS.items():
        value = targets["measured"][key]
        met = target_met(key, value)
        sign = "≥" if key in FLOORS else "≤"
        if key in COUNTS:
            shown, limit = f"{value:g}", f"{sign} {bound:g}"
        else:
            shown, limit = fmt_ratio(value), f"{sign} {bound:g}{TIMES}"
        if met:
            verdict = "met"
        elif key in COUNTS:
            verdict = f"missed by {value - bound:g}"
        elif key in FLOORS:
            verdict = f"missed by {fmt_ratio(bound / value)}"
        else:
            verdict = f"missed by {fmt_ratio(value / bound)}"
        table.rows.append([label, limit, shown, verdict, _target_note(key, targets)])
    if "callgrind" in targets:
        table.rows += callgrind_target_rows(targets["callgrind"]["ratios"])
    return table


def callgrind_target_rows(found: dict[str, float]) -> list[list[str]]:
    """The targets table's rows measured in instructions (bench/callgrind_codec.py's ratios)."""
    checks = [
        ("Codec encode+decode instructions ÷ plain msgspec (callgrind)", "ours_over_msgspec", 1.5),
        ("Codec encode+decode instructions ÷ JsonPlusSerializer (callgrind)", "ours_over_jsonplus", 1.0),
    ] + [
        (f"Memory {label} instructions ÷ InMemorySaver (callgrind)", f"memory_{key}_over_inmemorysaver", 1.0)
        for key, label in (
            ("save", "save"),
            ("load", "load"),
            ("latest", "get_latest"),
            ("list", "list_checkpoints"),
        )
    ]
    rows = []
    for label, key, bound in checks:
        value = found.get(key)
        if value is None:
            continue
        verdict = "met" if value <= bound else f"missed by {fmt_ratio(value / bound)}"
        rows.append(
            [
                label,
                f"≤ {bound:g}{TIMES}",
                fmt_ratio(value),
                verdict,
                "instruction counts, independent of machine load",
            ]
        )
    return rows
