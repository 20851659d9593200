"""One call of a generated program, as data: what the generator draws, the checker runs and the
reproducer prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Op:
    """One call: ``kind`` names the storage method (or ``reopen`` / ``concurrent``)."""

    kind: str
    handle: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    round: list[Op] = field(default_factory=list)
    """For ``concurrent``: the calls started together."""

    def __getitem__(self, name: str) -> Any:
        return self.params[name]


__all__ = ["Op"]
