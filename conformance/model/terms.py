"""The model's terms: a checkpoint as the model drafts it (:class:`Draft`, :class:`Embedded`),
what an op may answer (:class:`Expect`), what the model stores (:class:`Record`, walks, writes),
and the checks the contract makes of ids and fields before anything is stored.

Plain data, kept apart from :class:`~conformance.model.spec.ContractModel` so that programs,
the runner and the judge can name these without importing the model's rules.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

from storages.contract import CHECKPOINT_FIELDS, AncestryEnd

FIELDS: tuple[str, ...] = CHECKPOINT_FIELDS
"""MAF's 11 checkpoint fields, in order (the order a body meets embedded checkpoints in)."""

VALUE_FIELDS = ("messages", "state", "pending_request_info_events", "metadata")


@dataclass(eq=False)
class Draft:
    """A checkpoint as data: the 11 fields, with :class:`Embedded` wherever a checkpoint is embedded."""

    workflow_name: Any
    graph_signature_hash: str
    checkpoint_id: Any
    previous_checkpoint_id: Any
    timestamp: str
    messages: dict[str, list[Any]]
    state: dict[str, Any]
    pending_request_info_events: dict[str, Any]
    iteration_count: Any
    metadata: dict[str, Any]
    version: str = "1.0"

    def embedded(self) -> list[tuple[Draft, Draft]]:
        """(embedded draft, its direct container) for every checkpoint embedded at any depth, in
        the order a body meets them (fields in order, depth first, containers before what they
        hold), each object once however often it is embedded."""
        found: list[tuple[Draft, Draft]] = []
        seen: set[int] = set()

        def visit(value: Any, container: Draft) -> None:
            if isinstance(value, Embedded):
                if id(value) in seen:
                    return
                seen.add(id(value))
                found.append((value.draft, container))
                for name in VALUE_FIELDS:
                    visit(getattr(value.draft, name), value.draft)
            elif isinstance(value, dict):
                for item in value.values():
                    visit(item, container)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    visit(item, container)

        for name in VALUE_FIELDS:
            visit(getattr(self, name), self)
        return found


@dataclass(eq=False)
class Embedded:
    """A checkpoint embedded in a value; the same Embedded object twice is one object twice (an alias)."""

    draft: Draft


@dataclass(frozen=True)
class Expect:
    """What the storage must answer: ``values`` (any one of them) or one of ``errors``."""

    values: tuple[Any, ...] = (None,)
    errors: tuple[type[BaseException], ...] = ()
    not_found: bool = False
    """The answer is "no such checkpoint" (CheckpointNotFoundError, or MAF's own exception)."""

    @classmethod
    def value(cls, value: Any) -> Expect:
        return cls(values=(value,))

    @classmethod
    def error(cls, *errors: type[BaseException]) -> Expect:
        return cls(values=(), errors=errors)

    @classmethod
    def missing(cls) -> Expect:
        return cls(values=(), not_found=True)

    @property
    def succeeds(self) -> bool:
        return not self.errors and not self.not_found


@dataclass(frozen=True)
class Record:
    draft: Draft
    sequence: int
    container: str | None
    root: str
    position: int

    @property
    def checkpoint_id(self) -> str:
        return str(self.draft.checkpoint_id)

    @property
    def workflow(self) -> str:
        return str(self.draft.workflow_name)


@dataclass(frozen=True)
class Walk:
    ids: tuple[str, ...]
    end: AncestryEnd
    end_id: str | None
    drafts: tuple[Draft, ...] = field(default=(), compare=False)
    """What walk_ancestry (with bodies) returns for each id, in order."""


@dataclass(frozen=True)
class Write:
    task_id: Any
    index: Any
    channel: Any
    value: Any
    task_path: str = ""


@dataclass
class Writes:
    order: list[tuple[Any, Any]] = field(default_factory=list)
    by_key: dict[tuple[Any, Any], Write] = field(default_factory=dict)
    calls: set[str] = field(default_factory=set)
    """The calls stored (as text): one made again is a retry and changes nothing."""


def identifier_problem(value: object) -> str:
    """Why ``value`` is not an acceptable id or workflow name ('' when it is): a non-empty string
    of at most 256 characters without control or surrogate characters."""
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a str"
    if not value:
        return "is empty"
    if len(value) > 256:
        return "is longer than 256 characters"
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in value):
        return "holds a control or surrogate character"
    return ""


def same_content(first: Draft, second: Draft) -> bool:
    """Whether two drafts are the same checkpoint, embedded checkpoints included."""
    from .values import difference

    return first is second or not difference(plain(first), plain(second))


def plain(value: Any) -> Any:
    """A draft as nested tuples and values, embedded checkpoints included, for comparing drafts."""
    from .values import KEEP, copy_value

    def rebuild(item: Any) -> Any:
        if isinstance(item, Embedded):
            return ("embedded", plain(item.draft))
        if isinstance(item, Draft):
            return tuple(
                plain(getattr(item, name)) if name in VALUE_FIELDS else getattr(item, name) for name in FIELDS
            )
        return KEEP

    return copy_value(value, rebuild)
