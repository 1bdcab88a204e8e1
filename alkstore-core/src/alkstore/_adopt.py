"""What ``adopt_tx`` accepts: the driver connection inside what an application holds.

Applications hold their transaction through a framework — an SQLAlchemy
``Session`` or ``Connection`` (sync or asyncio), Django's ``connection``
inside ``transaction.atomic()`` — or through the driver itself. This module
finds the driver connection (``sqlite3``, ``psycopg``, ``aiosqlite``) and
whose transaction it is, without importing any framework: types are
recognised by the module and name of a class in their MRO, so the core
import stays dependency-free. The engine then checks the driver connection
itself (its kind, and that it reaches the store's storage).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from alkstore._errors import Database

__all__ = [
    "ACCEPTED",
    "Adoptable",
    "CallerThread",
    "adoptable",
    "adoptable_async",
    "on_its_thread",
    "refused_kind",
]

T = TypeVar("T")

ACCEPTED = (
    "a driver connection (sqlite3.Connection, psycopg.Connection; with the async "
    "API also psycopg.AsyncConnection and aiosqlite.Connection), an SQLAlchemy "
    "Connection or Session (AsyncConnection or AsyncSession with the async API), "
    "or Django's connection (django.db.connection) inside transaction.atomic()"
)


@dataclasses.dataclass(frozen=True)
class Adoptable:
    """The driver connection to write through, and who owns its transaction."""

    connection: Any
    owner: str | None
    """The framework that commits (``"SQLAlchemy Session"``…); None for a bare
    driver connection, which the handle's ``commit()`` may end."""
    catch_up: Callable[[], Any] | None = None
    """What to call before each write (a coroutine function for the async
    API): False once the framework's transaction the handle adopted is over;
    else it lets the framework send what it defers — a Session's
    ``connection()`` emits the SAVEPOINT of a ``begin_nested()`` it began
    lazily — and returns True."""


# (module prefix, class name) of what is unwrapped, found anywhere in the MRO.
_SQLALCHEMY_SESSION = ("sqlalchemy.orm.", ("Session",))
_SQLALCHEMY_SCOPED_SESSION = ("sqlalchemy.orm.", ("scoped_session",))
_SQLALCHEMY_CONNECTION = ("sqlalchemy.engine.", ("Connection",))
_SQLALCHEMY_ASYNC_SESSION = ("sqlalchemy.ext.asyncio.", ("AsyncSession",))
_SQLALCHEMY_ASYNC_SCOPED_SESSION = ("sqlalchemy.ext.asyncio.", ("async_scoped_session",))
_SQLALCHEMY_ASYNC_CONNECTION = ("sqlalchemy.ext.asyncio.", ("AsyncConnection",))
_DJANGO_CONNECTION = ("django.", ("BaseDatabaseWrapper", "ConnectionProxy"))
_AIOSQLITE = ("aiosqlite", ("Connection",))
_PSYCOPG_ASYNC = ("psycopg", ("AsyncConnection",))
_ASYNC_KINDS = (
    _SQLALCHEMY_ASYNC_SESSION,
    _SQLALCHEMY_ASYNC_SCOPED_SESSION,
    _SQLALCHEMY_ASYNC_CONNECTION,
    _AIOSQLITE,
    _PSYCOPG_ASYNC,
)


def refused_kind(engine_says: TypeError, found: Adoptable) -> TypeError:
    """The engine's refusal of a driver connection, with what is accepted."""
    inside = "" if found.owner is None else f" (the driver connection inside the {found.owner})"
    return TypeError(f"{engine_says}{inside}; adopt_tx accepts {ACCEPTED}")


def _is(holder: object, kind: tuple[str, tuple[str, ...]]) -> bool:
    prefix, names = kind
    return any(
        cls.__name__ in names and (cls.__module__ or "").startswith(prefix)
        for cls in type(holder).__mro__
    )


def adoptable(holder: object) -> Adoptable:
    """The driver connection in ``holder``, for the sync API.

    Raises:
        TypeError: ``holder`` is an asyncio connection or session (adopt it
            through ``AsyncStore.adopt_tx``).
        ValueError: Django's connection outside ``transaction.atomic()``.
    """
    if _is(holder, _SQLALCHEMY_SCOPED_SESSION):
        registry: Any = holder
        holder = registry()  # the registry's Session for the current scope
    if _is(holder, _SQLALCHEMY_SESSION):
        session: Any = holder
        driver = _sqlalchemy_driver(session.connection())
        return Adoptable(driver, "SQLAlchemy Session", _session_catch_up(session))
    if _is(holder, _SQLALCHEMY_CONNECTION):
        return Adoptable(_sqlalchemy_driver(holder), "SQLAlchemy Connection")
    if _is(holder, _DJANGO_CONNECTION):
        return Adoptable(_django_driver(holder), "Django's transaction.atomic()")
    if any(_is(holder, kind) for kind in _ASYNC_KINDS):
        raise TypeError(
            f"adopt_tx: a {type(holder).__name__} is asyncio's; adopt it with "
            "`await AsyncStore.adopt_tx(...)` (alkstore.open_async)"
        )
    return Adoptable(holder, None)


async def adoptable_async(holder: object) -> Adoptable:
    """The driver connection in ``holder``, for the async API: what
    :func:`adoptable` accepts, and SQLAlchemy's asyncio sessions and connections."""
    if _is(holder, _SQLALCHEMY_ASYNC_SCOPED_SESSION):
        registry: Any = holder
        holder = registry()  # the registry's AsyncSession for the current scope
    if _is(holder, _SQLALCHEMY_ASYNC_SESSION):
        session: Any = holder
        driver = await _sqlalchemy_async_driver(await session.connection())
        return Adoptable(driver, "SQLAlchemy AsyncSession", _async_session_catch_up(session))
    if _is(holder, _SQLALCHEMY_ASYNC_CONNECTION):
        return Adoptable(await _sqlalchemy_async_driver(holder), "SQLAlchemy AsyncConnection")
    if _is(holder, _AIOSQLITE) or _is(holder, _PSYCOPG_ASYNC):
        return Adoptable(holder, None)
    found = adoptable(holder)
    sync_catch_up = found.catch_up
    if sync_catch_up is None:
        return found

    async def catch_up() -> bool:  # a sync Session, used on the calling thread
        return bool(sync_catch_up())

    return dataclasses.replace(found, catch_up=catch_up)


def _session_catch_up(session: Any) -> Callable[[], bool]:
    """The catch-up of a handle adopted from ``session`` (see ``Adoptable``).

    Checked first, so that a write after the session's commit or rollback
    is refused rather than autobegin a next transaction it would land in
    (with SQLAlchemy's SQLite SAVEPOINT recipe, that one emits ``BEGIN``).
    """
    adopted = session.get_transaction()

    def catch_up() -> bool:
        if session.get_transaction() is not adopted:
            return False
        session.connection()
        return True

    return catch_up


def _async_session_catch_up(session: Any) -> Callable[[], Awaitable[bool]]:
    sync_session = session.sync_session
    adopted = sync_session.get_transaction()

    async def catch_up() -> bool:
        if sync_session.get_transaction() is not adopted:
            return False
        await session.connection()
        return True

    return catch_up


def _sqlalchemy_driver(connection: Any) -> Any:
    """The driver connection under an SQLAlchemy ``Connection``, in its transaction.

    A connection that has not begun one begins it, as its next statement
    would (SQLAlchemy's autobegin): the caller's ``commit()`` then commits
    what alkstore writes, rather than finding no transaction to commit.
    """
    if not connection.in_transaction():
        connection.begin()
    return connection.connection.driver_connection


async def _sqlalchemy_async_driver(connection: Any) -> Any:
    if not connection.in_transaction():
        await connection.begin()
    raw = await connection.get_raw_connection()
    return raw.driver_connection


def _django_driver(wrapper: Any) -> Any:
    """The driver connection under Django's, which must be in a transaction
    Django commits: inside ``atomic()`` (or with autocommit turned off)."""
    if wrapper.get_autocommit():
        raise ValueError(
            "adopt_tx: Django's connection is in autocommit mode, where each statement "
            "commits alone; adopt it inside `with transaction.atomic():`"
        )
    if wrapper.needs_rollback:
        raise ValueError(
            "adopt_tx: Django's current atomic() block is marked for rollback "
            "(an error was caught inside it); nothing written there can commit"
        )
    wrapper.ensure_connection()
    return wrapper.connection


def on_its_thread(connection: object) -> tuple[Any, Callable[..., Awaitable[Any]]] | None:
    """For an ``aiosqlite.Connection``: its ``sqlite3.Connection`` and how to run
    a call on the thread that owns it (sqlite3 refuses any other). Else None.

    Uses aiosqlite's ``_conn`` and ``_execute``, stable since its 0.17: it
    exposes no public way to run a function on its thread.
    """
    if not _is(connection, _AIOSQLITE):
        return None
    held: Any = connection
    if held._connection is None:
        raise Database("adopt_tx: the aiosqlite connection is closed")
    execute: Callable[..., Awaitable[Any]] = held._execute

    async def run_there(call: Callable[..., T], *args: Any) -> T:
        if not held._running or held._connection is None:
            raise Database("the adopted aiosqlite connection is closed")
        result: T = await execute(_stop_iteration_told, call, *args)
        return result

    return held._conn, run_there


def _stop_iteration_told(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` with a ``StopIteration`` it raises made a ``RuntimeError``:
    aiosqlite cannot hand a ``StopIteration`` to the awaiting future, whose
    await then never ends."""
    try:
        return call(*args)
    except StopIteration as exc:
        raise RuntimeError(f"{call!r} raised StopIteration") from exc


class CallerThread:
    """Where an adopted connection's calls run when its driver owns a thread
    (aiosqlite): the async handle's lane, which it never closes."""

    def __init__(self, run_there: Callable[..., Awaitable[Any]]) -> None:
        self._run_there = run_there

    async def run(self, call: Callable[..., T], *args: Any) -> T:
        result: T = await self._run_there(call, *args)
        return result

    def close(self) -> None:
        """Nothing to close: the thread is the driver's."""

    def __repr__(self) -> str:
        return f"<CallerThread {self._run_there!r}>"
