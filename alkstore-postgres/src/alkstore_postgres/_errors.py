"""Turning driver errors into the contract's ``Database`` error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import psycopg_pool

from alkstore import Database

__all__ = ["reason", "translate"]


@contextmanager
def translate(action: str) -> Iterator[None]:
    """Re-raise psycopg errors met while doing ``action`` as ``Database``, cause chained."""
    try:
        yield
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Database(f"{action} failed: {message}") from exc


def reason(exc: BaseException) -> str:
    """The why of a failed connection, on one line: "Connection refused", not the hint.

    libpq names no password in its messages; the address it names is left out
    too (``connection to server at "host", port N failed: <why>``), as the
    caller names the address itself.
    """
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    return " ".join(lines[0].rsplit(" failed: ", 1)[-1].split())
