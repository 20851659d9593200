"""How ``checkpoint-storages`` shows what verify found and what to do about a refused type: the
findings grouped so that a thousand alike stay a few lines at 80 columns, each fix said once and
in the command line's own words (``--allow-type``, ``--app-dir``), never the library's keywords.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from ..terminal import plain, printable
from .report import Finding, FindingKind, VerifyReport

ROWS_PER_KIND = 20
"""Findings of one kind drawn one per row; the rest are counted (``--json`` lists every one)."""
IDS_PER_GROUP = 10
"""Ids named in one grouped row at most; the rest are counted."""
IDS_WIDTH = 160
"""Characters of ids named in one grouped row at most (four UUIDs): two or three lines of it."""


@dataclass(frozen=True, slots=True)
class TypePolicy:
    """What the command line allowed: the types and modules a refused type is judged against."""

    types: frozenset[str] = frozenset()
    modules: tuple[str, ...] = ()
    module_option: bool = True
    """Whether the command takes ``--allowed-modules`` (import-maf does not: MAF allows types only)."""

    def allows(self, type_key: str) -> bool:
        module = type_key.partition(":")[0]
        return type_key in self.types or any(module == m or module.startswith(m + ".") for m in self.modules)


def type_advice(type_key: str, policy: TypePolicy, *, structure_only: bool = False) -> str:
    """What to do about a refused ``type_key``, in the command line's options."""
    module = type_key.partition(":")[0]
    if policy.allows(type_key):
        if not importable(module):
            return (
                f"{type_key} is allowed, but its module {module!r} cannot be imported here: run from "
                f"the application's directory with --app-dir DIR (the directory holding {module}), "
                "or set PYTHONPATH"
            )
        return (
            f"{type_key} is allowed and {module!r} imports, but it defines no class by that exact "
            "name: check the spelling of the type"
        )
    options = f"--allow-type {type_key}" + (f" or --allowed-modules {module}" if policy.module_option else "")
    return (
        f"allow it with {options}"
        + (" (its module must import here: --app-dir DIR)" if not importable(module) else "")
        + ("; or check without values: verify --structure-only" if structure_only else "")
    )


def importable(module: str) -> bool:
    """Whether ``module`` can be imported here (found on the path; nothing is executed but its
    parent packages, which the allow-list named)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def name_ids(ids: Sequence[str], limit: int = IDS_PER_GROUP, width: int = IDS_WIDTH) -> str:
    """``a, b, c`` and, past ``limit`` ids or ``width`` characters, ``and N more``."""
    shown: list[str] = []
    used = 0
    for checkpoint_id in ids[:limit]:
        text = printable(checkpoint_id)
        if shown and used + len(text) + 2 > width:
            break
        shown.append(text)
        used += len(text) + 2
    more = len(ids) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


@dataclass(frozen=True, slots=True)
class FindingGroup:
    """One row: a finding, alike findings (the same refused type), or the count of those left."""

    kind: FindingKind
    message: str


def group_findings(findings: Iterable[Finding], policy: TypePolicy) -> list[FindingGroup]:
    """The rows of a report: refused types one row per type, every other kind one row per finding
    up to :data:`ROWS_PER_KIND`, then one row counting the rest."""
    by_kind: dict[FindingKind, list[Finding]] = {}
    for finding in findings:
        by_kind.setdefault(finding.kind, []).append(finding)
    rows: list[FindingGroup] = []
    for kind in FindingKind:
        found = by_kind.get(kind, [])
        if kind is FindingKind.TYPE_NOT_ALLOWED:
            rows += _refused_rows(found, policy)
            continue
        rows += [FindingGroup(kind, finding.message) for finding in found[:ROWS_PER_KIND]]
        if len(found) > ROWS_PER_KIND:
            more = len(found) - ROWS_PER_KIND
            rows.append(
                FindingGroup(kind, f"… and {more} more {kind.value} findings (--json lists every one)")
            )
    return rows


def _refused_rows(found: list[Finding], policy: TypePolicy) -> list[FindingGroup]:
    by_type: dict[str | None, list[Finding]] = {}
    for finding in found:
        by_type.setdefault(finding.refused_type, []).append(finding)
    rows: list[FindingGroup] = []
    for type_key, alike in by_type.items():
        if type_key is None:  # a finding that does not say its type: shown as it is
            rows += [FindingGroup(FindingKind.TYPE_NOT_ALLOWED, finding.message) for finding in alike]
            continue
        ids = [finding.checkpoint_ids[0] for finding in alike]
        noun = "checkpoint holds" if len(ids) == 1 else f"{len(ids)} checkpoints hold"
        rows.append(
            FindingGroup(
                FindingKind.TYPE_NOT_ALLOWED,
                f"{noun} {type_key}, which this codec does not build (the data is intact): "
                f"{name_ids(ids)}. Fix: {type_advice(type_key, policy, structure_only=True)}",
            )
        )
    return rows


def findings_table(report: VerifyReport, policy: TypePolicy) -> Table:
    """The findings, grouped (:func:`group_findings`): a kind column and a wide one, so ids (a
    UUID is 36 characters) stay on one line at 80 columns."""
    count = len(report.findings)
    title = plain(f"{printable(report.storage)}: {count} finding{'' if count == 1 else 's'}")
    table = Table(title=title, title_justify="left")
    kinds = [row.kind.value for row in group_findings(report.findings, policy)]
    table.add_column("Kind", style="bold red", no_wrap=True, min_width=max(map(len, kinds), default=4))
    table.add_column("What is wrong", ratio=1, overflow="fold", min_width=38)
    for row in group_findings(report.findings, policy):
        table.add_row(plain(row.kind.value), plain(row.message))
    return table


def verdict(report: VerifyReport) -> Text:
    scope = "" if report.workflow_name is None else f" of workflow {report.workflow_name!r}"
    checked = f"{report.records_checked} record{'' if report.records_checked == 1 else 's'}{scope}"
    if report.ok:
        return plain(f"{report.storage}: no problems found in {checked}.", style="bold green")
    counts = ", ".join(f"{n} {kind.value}" for kind in FindingKind if (n := len(report.of_kind(kind))))
    return plain(f"{report.storage}: {counts} in {checked}.", style="bold red")


__all__ = [
    "IDS_PER_GROUP",
    "IDS_WIDTH",
    "ROWS_PER_KIND",
    "FindingGroup",
    "TypePolicy",
    "findings_table",
    "group_findings",
    "importable",
    "name_ids",
    "type_advice",
    "verdict",
]
