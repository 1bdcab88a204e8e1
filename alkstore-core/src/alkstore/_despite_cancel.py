"""Waiting out work already under way when the awaiting task is cancelled.

A cancelled run (a ``wait_for`` timeout, a task group failing, a shutdown)
must not leave behind work it started: a claim or an ack already sent, a
batch of events a thread is handling. What that work did decides what the
run must undo, and a run that returned while its thread still handled events
would race the next run of the same consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, TypeVar

__all__ = ["OUTCOME_WAIT_S", "outcome_despite_cancel", "retrieve"]

T = TypeVar("T")

OUTCOME_WAIT_S = 5.0
"""How long a cancelled run waits for work already under way (a claim, a
settle, a batch on a thread). Work still unfinished then is left behind: a
claim to the visibility timeout, as after a crash."""


async def outcome_despite_cancel(work: asyncio.Task[T], limit_s: float) -> T | None:
    """``work``'s result once it is done, waiting up to ``limit_s`` whatever
    cancels the wait meanwhile; None if it failed or is still running then."""
    deadline = time.monotonic() + limit_s
    while not work.done() and (remaining := deadline - time.monotonic()) > 0:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([work], timeout=remaining)
    if not work.done():
        work.add_done_callback(retrieve)
        return None
    if work.cancelled() or work.exception() is not None:
        return None
    return work.result()


def retrieve(work: asyncio.Future[Any]) -> None:
    """Mark an outcome nobody awaits as retrieved (asyncio logs it otherwise)."""
    if not work.cancelled():
        work.exception()
