"""Turning driver errors into the contract's ``Database`` error."""

from __future__ import annotations

from types import TracebackType

import psycopg
import psycopg_pool

from alkstore import Database

__all__ = ["connect_errors", "reason", "translate"]


class translate:  # noqa: N801 - used like the function it replaces: `with translate(...)`
    """Re-raise psycopg errors met while doing ``action`` as ``Database``, cause chained.

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
        if isinstance(exc, (psycopg.Error, psycopg_pool.PoolTimeout)):
            raise Database(self._message(exc)) from exc

    def _message(self, exc: BaseException) -> str:
        return f"{self.action} failed: {_first_line(exc)}"


class connect_errors(translate):  # noqa: N801 - a context manager, like translate
    """Re-raise psycopg errors met while connecting to the server at ``address`` (the
    parsed target's, never the DSN: no password) as ``Database`` with libpq's reason."""

    __slots__ = ()

    def _message(self, exc: BaseException) -> str:
        return f"cannot connect to PostgreSQL at {self.action}: {reason(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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
