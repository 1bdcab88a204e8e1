"""Run a loop until SIGTERM or SIGINT asks it to stop."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

__all__ = ["SHUTDOWN_SIGNALS", "stop_on_signals"]

SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(on_second: Callable[[], None] | None = None) -> Iterator[threading.Event]:
    """Yield an Event that SIGTERM or SIGINT sets; restore the old handlers on exit.

    A second signal calls ``on_second`` (an impatient operator: skip the grace
    period). Off the main thread, where Python cannot install handlers, the
    Event is only ever set by the caller.
    """
    stop = threading.Event()
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
