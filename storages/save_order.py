"""Saves of one workflow through one handle commit in the order ``save`` was called: the engine
queues a handle's saves with it, and a fenced handle its own.

A runner that saves from several tasks at once builds its checkpoints in one order and awaits
their saves concurrently: MAF's functional workflows save each completed step as a task of its
own, and parallel steps overlap. On a store with latency the backend could commit those saves in
another order, and latest (docs/contract.md, "Latest") would then name a checkpoint built
earlier, with less progress, than one committed before it: a resume would run completed steps
again. Queueing one workflow's saves per handle and event loop makes commit order the order the
runner called ``save``, which is the order it built its checkpoints. Saves of other workflows,
and of other handles or processes, still run concurrently.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable

_Key = tuple[object, asyncio.AbstractEventLoop]


class SaveOrder:
    """A FIFO turn per (workflow name, event loop). The first save of a workflow takes the turn
    without waiting; later ones queue behind it until it is handed on."""

    __slots__ = ("_queues",)

    def __init__(self) -> None:
        self._queues: dict[_Key, deque[asyncio.Future[None]] | None] = {}
        """Key -> the saves waiting for their turn (None: one save holds it, nobody waits). A
        key is present exactly while some save of that workflow holds the turn."""

    def take(self, workflow_name: Hashable) -> tuple[_Key, asyncio.Future[None] | None]:
        """The caller's key and, when another save of the workflow holds the turn, the future
        that resolves on the caller's turn (None: the caller holds it now). Called before the
        caller's first await: that is what makes the order the call order."""
        loop = asyncio.get_running_loop()
        key = (workflow_name, loop)
        queues = self._queues
        if key not in queues:
            queues[key] = None
            return key, None
        waiting = queues[key]
        if waiting is None:
            waiting = queues[key] = deque()
        turn: asyncio.Future[None] = loop.create_future()
        waiting.append(turn)
        return key, turn

    def hand_on(self, key: _Key) -> None:
        """Pass the turn to the next save still waiting for it, or free it."""
        queues = self._queues
        waiting = queues.get(key)
        while waiting:
            turn = waiting.popleft()
            if not turn.done():  # a waiter cancelled meanwhile left a cancelled future
                turn.set_result(None)
                return
        queues.pop(key, None)


def handed(turn: asyncio.Future[None]) -> bool:
    """True when the turn was handed to its waiter (who must hand it on), even if the waiter
    was cancelled before it resumed."""
    return turn.done() and not turn.cancelled()


__all__ = ["SaveOrder", "handed"]
