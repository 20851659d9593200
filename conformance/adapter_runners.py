"""The runners whose profiles drive the ``runner`` clauses through one of this project's runner
adapters (``checkpoint-conformance --runner crewai|burr``): each one's profile, and what the
runner itself does not guarantee (reported as runner findings, with the reason)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ADAPTER_RUNNERS: tuple[str, ...] = ("crewai", "burr")
"""The ``--runner`` names served here."""


def adapter_runner(name: str) -> tuple[Any, dict[str, str]]:
    """(profile, runner findings) of runner ``name``; MissingDependencyError without its extra."""
    if name == "crewai":
        from .crewai_profile import CREWAI_DEVIATIONS, CrewAIRunnerProfile

        return CrewAIRunnerProfile(), CREWAI_DEVIATIONS
    if name == "burr":
        from .burr_profile import BURR_DEVIATIONS, BurrRunnerProfile

        return BurrRunnerProfile(), BURR_DEVIATIONS
    raise ValueError(f"unknown adapter runner {name!r}; known: {', '.join(ADAPTER_RUNNERS)}")


def use_adapter_runner(targets: Sequence[Any], name: str) -> None:
    """Make every target drive the runner clauses through runner ``name``."""
    profile, findings = adapter_runner(name)
    for target in targets:
        target.runner = profile
        target.runner_findings = {**target.runner_findings, **findings}


__all__ = ["ADAPTER_RUNNERS", "adapter_runner", "use_adapter_runner"]
