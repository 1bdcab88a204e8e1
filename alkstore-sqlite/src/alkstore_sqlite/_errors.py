"""Turning driver errors into the contract's ``Database`` error."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from alkstore import Database

__all__ = ["translate"]


@contextmanager
def translate(action: str) -> Iterator[None]:
    """Re-raise ``sqlite3`` errors met while doing ``action`` as ``Database``, cause chained."""
    try:
        yield
    except sqlite3.Error as exc:
        raise Database(f"{action} failed: {_describe(exc)}") from exc


def _describe(exc: sqlite3.Error) -> str:
    message = str(exc) or type(exc).__name__
    if "locked" in message or "busy" in message:
        return f"{message} (another connection held the write lock past the busy timeout)"
    return message
