"""Run a loop until SIGTERM or SIGINT asks it to stop."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

__all__ = ["SHUTDOWN_SIGNALS", "SIGNAL_CHECK_S", "SignalStop", "stop_on_signals"]

SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT)


SIGNAL_CHECK_S = 0.2
"""The longest the main thread blocks at once while signals may need handling."""


class SignalStop(threading.Event):
    """An Event whose ``wait`` lets Python's signal handlers run.

    The kernel may deliver SIGTERM to any thread; Python then runs its handler
    only when the main thread next executes bytecode. A main thread blocked
    in an untimed ``wait`` would never get there, so this one waits in slices.
    """

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = SIGNAL_CHECK_S if deadline is None else deadline - time.monotonic()
            if super().wait(min(max(remaining, 0.0), SIGNAL_CHECK_S)):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False


@contextlib.contextmanager
def stop_on_signals(on_second: Callable[[], None] | None = None) -> Iterator[threading.Event]:
    """Yield an Event that SIGTERM or SIGINT sets; restore the old handlers on exit.

    A second signal calls ``on_second`` (an impatient operator: skip the grace
    period). Off the main thread, where Python cannot install handlers, the
    Event is only ever set by the caller. Waiting on the Event from the main
    thread is safe: it wakes in short slices so the handlers can run.
    """
    stop = SignalStop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set() and on_second is not None:
            on_second()
        stop.set()

    previous = {signum: signal.signal(signum, handle) for signum in SHUTDOWN_SIGNALS}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
