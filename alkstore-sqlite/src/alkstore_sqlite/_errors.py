"""Turning driver errors into the contract's ``Database`` error."""

from __future__ import annotations

import sqlite3
from types import TracebackType

from alkstore import Database

__all__ = ["translate"]


class translate:  # noqa: N801 - used like the function it replaces: `with translate(...)`
    """Re-raise ``sqlite3`` errors met while doing ``action`` as ``Database``, cause chained.

    A class rather than a generator-based context manager: it wraps every
    statement, and entering it must cost next to nothing.
    """

    __slots__ = ("action",)

    def __init__(self, action: str) -> None:
        self.action = action

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, sqlite3.Error):
            raise Database(f"{self.action} failed: {_describe(exc)}") from exc


def _describe(exc: sqlite3.Error) -> str:
    message = str(exc) or type(exc).__name__
    if "locked" in message or "busy" in message:
        return f"{message} (another connection held the write lock past the busy timeout)"
    return message
