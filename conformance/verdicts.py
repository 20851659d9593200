"""How a clause says its verdict: fail, a runner finding, or not applicable.

Kept apart from :mod:`conformance.clause` (the registry) so that the context a clause runs in can
fail a clause without importing the registry that names the context's type.
"""

from __future__ import annotations

from typing import Any, NoReturn


class ClauseFailure(AssertionError):
    """A clause's guarantee does not hold."""


class RunnerFinding(ClauseFailure):
    """The runner driving the storage broke the guarantee, not the storage: reported as a
    finding of its own (:attr:`~conformance.report.Outcome.FINDING`), which does not fail the run."""


class ClauseNotApplicable(Exception):
    """The target cannot be checked for this guarantee (it gives the kit no way to); reported as
    skipped with the message, like an undeclared capability."""


def not_applicable(message: str) -> NoReturn:
    raise ClauseNotApplicable(message)


def fail(message: str) -> NoReturn:
    raise ClauseFailure(message)


def ensure_runner(condition: object, message: str) -> None:
    """Report a runner finding with ``message`` unless ``condition`` is true."""
    if not condition:
        raise RunnerFinding(message)


def ensure(condition: object, message: str) -> None:
    """Fail with ``message`` unless ``condition`` is true."""
    if not condition:
        raise ClauseFailure(message)


def ensure_equal(actual: Any, expected: Any, what: str) -> None:
    """Fail unless ``actual == expected``, showing both."""
    if actual != expected:
        raise ClauseFailure(f"{what}: expected {_short(expected)}, got {_short(actual)}")


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = [
    "ClauseFailure",
    "ClauseNotApplicable",
    "RunnerFinding",
    "ensure",
    "ensure_equal",
    "ensure_runner",
    "fail",
    "not_applicable",
]
