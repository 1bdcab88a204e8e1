"""The deadline a caller's timeout sets for the database reads made on its behalf.

``queue.wait(1)`` and ``receiver.recv(1)`` read the database before they wait
for a wake. During an outage such a read would wait for a connection as long
as the engine allows (PostgreSQL: ``connect_timeout_s``, 10 s by default), far
past the timeout the caller gave. Core runs those reads under the timeout's
deadline (:func:`deadline_in`), and an engine cuts its waits for a connection
to what the deadline leaves (:func:`wait_budget`). The deadline lives in a
context variable: it follows the call into a task and onto the thread
``asyncio.to_thread`` runs it on, and no further.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["SHORTEST_WAIT_S", "deadline_at", "deadline_in", "wait_budget"]

SHORTEST_WAIT_S = 0.5
"""The least :func:`wait_budget` gives: a deadline already reached (``wait(0)``,
the end of a ``recv`` timeout) still lets a busy pool hand a connection over,
rather than failing a healthy store's look for want of a free connection."""

_deadline: ContextVar[float | None] = ContextVar("alkstore_call_deadline", default=None)
"""The ``time.monotonic()`` by which the call in progress wants its answer, if any."""


@contextlib.contextmanager
def deadline_at(deadline: float | None) -> Iterator[None]:
    """Reads in the block wait for a connection until ``deadline`` (on
    ``time.monotonic()``) at most; None sets no bound of its own. An enclosing
    deadline that ends sooner still holds."""
    if deadline is None:
        yield
        return
    enclosing = _deadline.get()
    token = _deadline.set(deadline if enclosing is None else min(deadline, enclosing))
    try:
        yield
    finally:
        _deadline.reset(token)


def deadline_in(seconds: float | None) -> contextlib.AbstractContextManager[None]:
    """:func:`deadline_at` ``seconds`` from now (None: no bound of its own)."""
    return deadline_at(None if seconds is None else time.monotonic() + seconds)


def wait_budget(longest_s: float) -> float:
    """How long an engine may wait for a connection now: ``longest_s``, cut to
    what the caller's deadline leaves (see the module), but not below
    ``SHORTEST_WAIT_S``."""
    deadline = _deadline.get()
    if deadline is None:
        return longest_s
    return min(longest_s, max(deadline - time.monotonic(), SHORTEST_WAIT_S))
