"""Turning driver errors into the contract's ``Database`` error."""

from __future__ import annotations

import psycopg
import psycopg_pool

from alkstore.engine import DriverErrors

__all__ = ["connect_errors", "preparing_schema", "reason", "translate"]


class translate(DriverErrors):  # noqa: N801 - used like a function: `with translate(...)`
    """Re-raise psycopg errors met while doing ``action`` as ``Database``, cause chained."""

    __slots__ = ()
    driver_errors = (psycopg.Error, psycopg_pool.PoolTimeout)


class preparing_schema(translate):  # noqa: N801 - a context manager, like translate
    """``translate`` for the schema's preparation at open: a role refused the
    right to create is told what to do about it."""

    __slots__ = ()

    def message(self, exc: BaseException) -> str:
        text = super().message(exc)
        if not isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return text
        return (
            f"{text}; the schema needs creating or migrating, and this role may not: "
            "open the store once with a role that may (the schema's owner), then grant "
            "this one its rows (docs/upgrades.md, Least privilege)"
        )


class connect_errors(translate):  # noqa: N801 - a context manager, like translate
    """Re-raise psycopg errors met while connecting to the server at ``address`` (the
    parsed target's, never the DSN: no password) as ``Database`` with libpq's reason."""

    __slots__ = ()

    def message(self, exc: BaseException) -> str:
        return f"cannot connect to PostgreSQL at {self.action}: {reason(exc)}"


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
