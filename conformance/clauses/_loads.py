"""Load checks several families share: a checkpoint loads back equal, or is absent."""

from __future__ import annotations

from typing import Any

from ..clause import fail
from ._maf import is_not_found
from .fidelity import first_difference


async def expect_loads_equal(storage: Any, checkpoint: Any, when: str) -> None:
    """load() of ``checkpoint``'s id returns a checkpoint equal to it."""
    loaded = await storage.load(checkpoint.checkpoint_id)
    problem = first_difference(checkpoint, loaded)
    if problem is not None:
        fail(f"load({checkpoint.checkpoint_id!r}) {when}: {problem}")


async def loads_equal_or_absent(storage: Any, checkpoint: Any, when: str) -> bool:
    """True if ``checkpoint`` loads equal, False if not found; anything else fails the clause."""
    try:
        loaded = await storage.load(checkpoint.checkpoint_id)
    except Exception as exc:
        if is_not_found(exc):
            return False
        fail(f"load({checkpoint.checkpoint_id!r}) {when} raised {type(exc).__name__}: {exc}")
    problem = first_difference(checkpoint, loaded)
    if problem is not None:
        fail(f"load({checkpoint.checkpoint_id!r}) {when}: {problem}")
    return True
