"""A Redis request cancelled while it runs ends cancelled, whatever redis-py did with it.

``asyncio.wait_for`` before Python 3.12 returns its inner result when a cancellation reaches it
just as the inner awaitable finishes, and redis-py calls it on every request (its
``send_packed_command`` waits for the socket's drain with it): a save cancelled at that moment
returned its id as if no one had cancelled it, so a runner's timeout or shutdown went unheard
(``concurrency.cancelled_calls_leave_no_trace``). The task still counts the request
(``Task.cancelling()``), so every request the connection sends (a command, a
pipeline, a script or a transaction) that returns normally after a cancellation request arrived
raises CancelledError instead; what it wrote stays written, as a cancelled save whose
request had left may land (docs/contract.md, "The methods").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

R = TypeVar("R")


def cancel_requests() -> int:
    """Cancellation requests the running task holds (0 outside a task)."""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


async def ends_cancelled(request: Awaitable[R]) -> R:
    """``request``'s result, or CancelledError when a cancellation of the calling task arrived
    while it ran and something under it swallowed the request."""
    before = cancel_requests()
    result = await request
    if cancel_requests() > before:
        raise asyncio.CancelledError
    return result
