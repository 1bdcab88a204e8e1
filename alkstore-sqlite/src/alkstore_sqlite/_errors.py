"""Turning driver errors into the contract's ``Database`` error."""

from __future__ import annotations

import collections
import os
import sqlite3
import threading

from alkstore.engine import DriverErrors

__all__ = [
    "inherited_at_fork", "met_a_lock", "transaction_ended", "transaction_opened", "translate",
]  # fmt: skip


class _OpenTransactions:
    """Open transactions of this process's stores, by the thread that began each."""

    def __init__(self) -> None:
        self.forget_all()

    def forget_all(self) -> None:
        """Start over (in a forked child, which began none of the parent's)."""
        self.by_thread: collections.Counter[int] = collections.Counter()
        self.lock = threading.Lock()  # another thread of the parent may have held it


_open = _OpenTransactions()
if hasattr(os, "register_at_fork"):  # not on Windows, which cannot fork
    os.register_at_fork(after_in_child=_open.forget_all)

_inherited_files: set[str] = set()
"""The files of the stores this process inherited, forked, from its parent."""


def inherited_at_fork(path: str) -> None:
    """Note, in a forked child, that the parent had a store open on ``path``."""
    _inherited_files.add(path)


_FORKED_HINT = (
    "this process was forked from one that had {files} open: if a thread there was "
    "in a write transaction at the fork, SQLite's lock state copied into this process "
    "holds the write lock for good, and no connection of this process can write to "
    "that file, even after the parent committed; start processes with "
    "multiprocessing's 'spawn' or 'forkserver' method, or fork before opening a store"
)

_OWN_LOCK_HINT = (
    "this thread holds an open alkstore transaction, which holds the write lock of its "
    "file: a write to that file from this thread outside the transaction waits for it "
    "to end, in vain; write through the transaction (tx.enqueue_tx and the like) or "
    "end it first"
)

_BUSY_SNAPSHOT = 517  # SQLITE_BUSY_SNAPSHOT (Python 3.11+ tells extended codes)
_STALE_SNAPSHOT_HINT = (
    "this transaction began by reading, and another connection has written since: "
    "SQLite cannot let it write on a snapshot that old, and no wait helps; roll it "
    "back and run it again, and begin transactions that write with BEGIN IMMEDIATE "
    "(Django: the database's OPTIONS {'transaction_mode': 'IMMEDIATE'})"
)


class translate(DriverErrors):  # noqa: N801 - used like a function: `with translate(...)`
    """Re-raise ``sqlite3`` errors met while doing ``action`` as ``Database``, cause chained."""

    __slots__ = ()
    driver_errors = (sqlite3.Error,)

    def describe(self, exc: BaseException) -> str:
        message = str(exc) or type(exc).__name__
        if not met_a_lock(exc):
            return message
        if getattr(exc, "sqlite_errorcode", None) == _BUSY_SNAPSHOT:
            return f"{message} ({_STALE_SNAPSHOT_HINT})"
        if _open.by_thread[threading.get_ident()]:
            return f"{message} ({_OWN_LOCK_HINT})"
        if _inherited_files:
            files = ", ".join(repr(path) for path in sorted(_inherited_files))
            return (
                f"{message} (another connection held the write lock past the busy timeout; "
                f"{_FORKED_HINT.format(files=files)})"
            )
        return f"{message} (another connection held the write lock past the busy timeout)"


def transaction_opened() -> int:
    """Count a transaction the calling thread began; return the thread's ident."""
    thread = threading.get_ident()
    with _open.lock:
        _open.by_thread[thread] += 1
    return thread


def transaction_ended(thread: int) -> None:
    """Uncount a transaction ``thread`` began (from whichever thread ends it)."""
    with _open.lock:
        _open.by_thread[thread] -= 1
        if _open.by_thread[thread] <= 0:
            del _open.by_thread[thread]


_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED: primary codes, the low byte of extended ones


def met_a_lock(exc: BaseException | None) -> bool:
    """True if ``exc`` is SQLite saying a lock was held (busy or locked)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in _BUSY
    message = str(exc)
    return "locked" in message or "busy" in message
