"""Shielded steps that cost no turn of the event loop when they need not wait.

Giving a connection back to the pool must not be cut short by a
cancellation, so it runs shielded, in a task of its own. A plain task starts
on the loop's next turn and hands its result back on the turn after, though
the step seldom suspends at all; from Python 3.12 such a task starts
eagerly instead: it runs at once, and one that never suspends is done
before its caller goes on.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["shielded", "start_now"]

T = TypeVar("T")


def start_now(coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A task running ``coroutine``, started eagerly where asyncio can (3.12+)."""
    if sys.version_info >= (3, 12):
        return asyncio.Task(coroutine, loop=asyncio.get_running_loop(), eager_start=True)
    return asyncio.ensure_future(coroutine)


async def shielded(coroutine: Coroutine[Any, Any, T]) -> T:
    """Await ``coroutine`` in a task of its own that a cancellation of this
    await does not cancel (see ``asyncio.shield``)."""
    task = start_now(coroutine)
    if task.done():
        return task.result()
    return await asyncio.shield(task)
