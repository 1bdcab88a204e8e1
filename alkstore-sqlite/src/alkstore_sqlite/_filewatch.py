"""Sleeping until a file in a folder changes, or a timeout passes.

On Linux an inotify descriptor on the database's folder wakes the watcher
as soon as a commit writes the WAL file, so an idle store costs almost no
CPU and a wake costs no polling delay; changes to other files in the folder
are read and ignored. Elsewhere (or if inotify is not available) it
degrades to sleeping for the timeout. Either way a local ``poke`` ends the
sleep at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import struct
import sys
import threading
import time

__all__ = ["FolderWaiter"]

_IN_MODIFY = 0x00000002
_IN_CREATE = 0x00000100
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_DELETE = 0x00000200
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name


class FolderWaiter:
    """``wait(timeout)`` returns when a file in ``folder`` whose name starts
    with ``name_prefix`` is written, created, moved or deleted, on ``poke``,
    or when ``timeout`` passes: the waiter of core's ``PollingWatcher`` for the
    SQLite engine, given the database's name (its -wal, -shm and -journal
    files share it)."""

    def __init__(self, folder: str, name_prefix: str = "") -> None:
        self._name_prefix = os.fsencode(name_prefix)
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
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select(sources, [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return False
            woken = False
            for source in ready:
                events = _drain(source)
                woken |= source == self._poke_read or self._concern_the_files(events)
            if woken:
                return True

    def _concern_the_files(self, events: bytes) -> bool:
        """Whether inotify ``events`` touch a watched file, or may have (the queue overflowed)."""
        concerned = False
        offset = 0
        while offset < len(events):
            _, mask, _, length = _EVENT.unpack_from(events, offset)
            name = events[offset + _EVENT.size : offset + _EVENT.size + length]
            offset += _EVENT.size + length
            concerned |= bool(mask & (_IN_Q_OVERFLOW | _IN_IGNORED))
            concerned |= name.rstrip(b"\0").startswith(self._name_prefix)
        return concerned

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


def _drain(descriptor: int) -> bytes:
    """Everything the non-blocking ``descriptor`` has to read (whole inotify events)."""
    chunks: list[bytes] = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(descriptor, 65536):
            chunks.append(chunk)
    return b"".join(chunks)
