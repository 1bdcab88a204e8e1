"""Keeping the engine's own threads out of SQLite while the process forks.

SQLite guards its allocator and its file-lock bookkeeping with process-wide
mutexes. A thread inside any SQLite call at the instant another thread forks
leaves them locked in the child for good: the child's first
``sqlite3.connect`` hangs, and so does its own store's open. The wake
watcher reads the file from a thread of the engine's own, at moments the
application does not choose; it reads inside a :class:`ForkGate`, which a
fork closes first (waiting out the read in progress), so a child forked by
any other thread finds no SQLite mutex held by it. The application's own
threads are the application's: a process whose threads are writing (a
worker's, say) should start processes by spawning (docs/workers.md).
"""

from __future__ import annotations

import os
import threading
import time
import weakref

__all__ = ["ForkGate"]

_WAIT_S = 1.0
"""How long a fork waits for a gate (a read in progress takes milliseconds;
one stuck in SQLite's busy handler, its 0.1 s): past it, the fork goes on."""

_gates: weakref.WeakSet[ForkGate] = weakref.WeakSet()
_closed_for_fork: list[ForkGate] = []


class ForkGate:
    """``with gate:`` around the SQLite calls of an engine thread; a fork waits
    for the block in progress, and none begins until the fork is done."""

    def __init__(self) -> None:
        self._inside = threading.Lock()
        _gates.add(self)

    def __enter__(self) -> None:
        self._inside.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._inside.release()


def _close_before_fork() -> None:
    deadline = time.monotonic() + _WAIT_S  # one wait for every gate, not one each
    for gate in list(_gates):
        if gate._inside.acquire(timeout=max(0.0, deadline - time.monotonic())):
            _closed_for_fork.append(gate)


def _open_after_fork() -> None:
    while _closed_for_fork:
        _closed_for_fork.pop()._inside.release()


if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(
        before=_close_before_fork,
        after_in_parent=_open_after_fork,
        after_in_child=_open_after_fork,
    )
