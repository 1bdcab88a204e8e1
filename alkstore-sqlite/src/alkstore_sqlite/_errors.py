"""Turning driver errors into the contract's ``Database`` error."""

from __future__ import annotations

import sqlite3

from alkstore.engine import DriverErrors

__all__ = ["met_a_lock", "translate"]


class translate(DriverErrors):  # noqa: N801 - used like a function: `with translate(...)`
    """Re-raise ``sqlite3`` errors met while doing ``action`` as ``Database``, cause chained."""

    __slots__ = ()
    driver_errors = (sqlite3.Error,)

    def describe(self, exc: BaseException) -> str:
        message = str(exc) or type(exc).__name__
        if met_a_lock(exc):
            return f"{message} (another connection held the write lock past the busy timeout)"
        return message


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
