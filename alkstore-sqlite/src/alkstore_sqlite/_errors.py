"""Turning driver errors into the contract's ``Database`` error."""

from __future__ import annotations

import sqlite3

from alkstore.engine import DriverErrors

__all__ = ["translate"]


class translate(DriverErrors):  # noqa: N801 - used like a function: `with translate(...)`
    """Re-raise ``sqlite3`` errors met while doing ``action`` as ``Database``, cause chained."""

    __slots__ = ()
    driver_errors = (sqlite3.Error,)

    def describe(self, exc: BaseException) -> str:
        message = str(exc) or type(exc).__name__
        if "locked" in message or "busy" in message:
            return f"{message} (another connection held the write lock past the busy timeout)"
        return message
