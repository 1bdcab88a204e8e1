"""Sleeping until a file in a folder changes, or a timeout passes.

On Linux an inotify descriptor on the database's folder wakes the watcher
as soon as a commit writes the WAL file, so an idle store costs almost no
CPU and a wake costs no polling delay. Elsewhere (or if inotify is not
available) it degrades to sleeping for the timeout. Either way a local
``poke`` ends the sleep at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import sys
import threading

__all__ = ["FolderWaiter"]

_IN_MODIFY = 0x00000002
_IN_CREATE = 0x00000100
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_DELETE = 0x00000200
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000


class FolderWaiter:
    """``wait(timeout)`` returns when a file in ``folder`` is written, created,
    moved or deleted, on ``poke``, or when ``timeout`` passes: the waiter of
    core's ``PollingWatcher`` for the SQLite engine."""

    def __init__(self, folder: str) -> None:
        self._poke_read, self._poke_write = os.pipe()
        os.set_blocking(self._poke_read, False)
        os.set_blocking(self._poke_write, False)
        self._inotify = _inotify_on(folder)
        # Any thread may poke while the owner closes: a closed descriptor's
        # number can be reused by another file, so never write after close.
        self._lock = threading.Lock()
        self._closed = False

    @property
    def event_driven(self) -> bool:
        """True when file changes wake :meth:`wait` (inotify), not only pokes and its timeout."""
        return self._inotify is not None

    def wait(self, timeout: float) -> bool:
        """Sleep until a change, a poke or ``timeout``; False when the timeout passed."""
        sources = [self._poke_read] if self._inotify is None else [self._poke_read, self._inotify]
        ready, _, _ = select.select(sources, [], [], timeout)
        for source in ready:
            _drain(source)
        return bool(ready)

    def poke(self) -> None:
        with self._lock:
            if self._closed:
                return
            with contextlib.suppress(BlockingIOError):  # a poke is already pending
                os.write(self._poke_write, b"!")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for descriptor in (self._poke_read, self._poke_write, self._inotify):
                if descriptor is not None:
                    with contextlib.suppress(OSError):
                        os.close(descriptor)


def _inotify_on(folder: str) -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        descriptor = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if descriptor < 0:
            return None
        # Deletes and moves too: the watched file itself may be removed or replaced.
        mask = _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO | _IN_MOVED_FROM | _IN_DELETE
        if libc.inotify_add_watch(descriptor, os.fsencode(folder), mask) < 0:
            os.close(descriptor)
            return None
    except (OSError, AttributeError):
        return None
    return int(descriptor)


def _drain(descriptor: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(descriptor, 65536):
            pass
