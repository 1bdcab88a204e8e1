"""The wake watcher's reads and ``os.fork()``: a fork waits for the read in progress.

A thread inside SQLite at the instant of a fork leaves SQLite's process-wide
mutexes locked in the child, whose first ``sqlite3.connect`` then hangs (it
did, now and then, in ``tests/test_fork.py`` on a loaded machine). The
watcher reads inside a ``ForkGate``; these tests fork from the test process
itself, and each child leaves with ``os._exit`` at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator

import pytest

from alkstore_sqlite import _fork_gate
from alkstore_sqlite._fork_gate import ForkGate

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="this platform cannot fork")


def fork_and_wait(child: Callable[[], object] | None = None) -> tuple[float, int]:
    """Fork; in the child run ``child`` (a callable) and leave; in the parent
    return how long ``os.fork()`` took and the child's exit status."""
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads: the point
        pid = os.fork()
    if pid == 0:
        code = 0
        try:
            if child is not None:
                child()
        except BaseException:  # the child's only report is its status
            code = 1
        os._exit(code)
    took = time.monotonic() - started
    _, status = os.waitpid(pid, 0)
    return took, status


@contextlib.contextmanager
def held_by_a_thread(gate: ForkGate, for_s: float) -> Iterator[None]:
    """A thread inside ``gate`` for ``for_s``, as the watcher is while it reads."""
    inside = threading.Event()

    def read() -> None:
        with gate:
            inside.set()
            time.sleep(for_s)

    thread = threading.Thread(target=read)
    thread.start()
    assert inside.wait(5)
    try:
        yield
    finally:
        thread.join(10)


def test_a_fork_waits_for_a_read_in_progress_and_the_child_may_read() -> None:
    gate = ForkGate()
    with held_by_a_thread(gate, 0.3):

        def child() -> None:
            with gate:  # open in the child: the read ended before the fork
                pass

        took, status = fork_and_wait(child)
        assert status == 0
        assert took >= 0.2
    with gate:  # and open in the parent again
        pass


def test_a_read_stuck_past_the_wait_does_not_stop_the_fork() -> None:
    gate = ForkGate()
    with held_by_a_thread(gate, _fork_gate._WAIT_S + 1.5):
        took, status = fork_and_wait()
        assert status == 0
        assert _fork_gate._WAIT_S * 0.9 <= took < _fork_gate._WAIT_S + 1.0
    with gate:
        pass


def test_a_fork_with_no_read_in_progress_does_not_wait() -> None:
    gates = [ForkGate() for _ in range(3)]

    def child() -> None:
        for gate in gates:
            with gate:
                pass

    took, status = fork_and_wait(child)
    assert status == 0
    assert took < 0.5
