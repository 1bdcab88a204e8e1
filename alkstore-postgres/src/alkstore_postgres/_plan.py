"""Operations written once, run on a sync or an async psycopg connection.

An operation is a *plan*: a generator that yields what to run and is sent
each result back, like psycopg's own generators. It holds the operation's
SQL, bind parameters, row mapping and decisions, and does no I/O itself, so
the sync store runs it with :func:`run_plan` on a ``psycopg.Connection``
and the async store with :func:`run_plan_async` on a
``psycopg.AsyncConnection``, alike.

A plan run on its own connection first yields an :class:`Operation`: what it
is doing (for error messages) and whether its statements need one
transaction. Then it yields steps:

- a :class:`Statement` is sent back its result, as its ``fetch`` says: the
  row count, the first row (or None), every row, the rows if the statement
  returns any, or None;
- a :class:`Pipeline` runs its statements in one round trip (pipelined
  statements before the sync run as one implicit transaction) and is sent
  back the list of their results.

Plans compose with ``yield from``: a plan without an :class:`Operation`
(``insert_job``, say) runs inside another, or inside a transaction handle.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.rows import tuple_row

from alkstore_postgres._eager import start_now

__all__ = [
    "Fetch", "Operation", "Pipeline", "Plan", "Statement", "Step",
    "opening", "run_plan", "run_plan_async", "run_step", "run_step_async", "run_steps",
    "run_steps_async",
]  # fmt: skip

T = TypeVar("T")


class Fetch(enum.Enum):
    """What a statement's step is sent back."""

    NOTHING = enum.auto()
    ROWCOUNT = enum.auto()
    ONE = enum.auto()
    ALL = enum.auto()
    ROWS_IF_ANY = enum.auto()
    """Every row, or ``[]`` for a statement that returns none (``tx.execute``)."""


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement to run, and what to fetch from it."""

    sql: str
    params: Any = None
    fetch: Fetch = Fetch.NOTHING
    binary: bool = False
    """Rows come back in binary: no number is printed by the server and parsed
    here (reads of many rows)."""


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Statements sent together, in one round trip."""

    statements: tuple[Statement, ...]


@dataclass(frozen=True, slots=True)
class Operation:
    """A plan's first yield: what it does, and whether it needs one transaction."""

    action: str
    transaction: bool = False


Step = Statement | Pipeline
Plan = Generator[Step | Operation, Any, T]


def opening(plan: Plan[Any]) -> Operation:
    """Start ``plan`` and return its :class:`Operation`."""
    first = next(plan)
    assert isinstance(first, Operation), f"a plan run on its own opens with an Operation: {first}"
    return first


def run_steps(connection: psycopg.Connection, plan: Plan[T]) -> T:
    """Run the steps of ``plan`` (past its opening) on ``connection``; its value."""
    result: Any = None
    while True:
        try:
            step = plan.send(result)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        assert not isinstance(step, Operation), "an Operation comes first, or not at all"
        result = run_step(connection, step)


def run_plan(connection: psycopg.Connection, plan: Plan[T]) -> T:
    """Run a whole plan, its :class:`Operation` included, on ``connection``."""
    if opening(plan).transaction:
        with connection.transaction():
            return run_steps(connection, plan)
    return run_steps(connection, plan)


def run_step(connection: psycopg.Connection, step: Step) -> Any:
    """Run one step on ``connection``; its result."""
    if isinstance(step, Statement):
        return _fetched(_execute(connection, step), step.fetch)
    with connection.pipeline():
        cursors = [_execute(connection, each) for each in step.statements]
    return [_fetched(c, each.fetch) for c, each in zip(cursors, step.statements, strict=True)]


def _execute(connection: psycopg.Connection, statement: Statement) -> psycopg.Cursor[Any]:
    """Run ``statement`` on a plain cursor of ``connection``: ``%s`` placeholders,
    rows as tuples, whatever ``cursor_factory`` and ``row_factory`` the
    connection has (an adopted one is the caller's: ``dict_row``, ``RawCursor``)."""
    cursor = psycopg.Cursor(connection, row_factory=tuple_row)
    return cursor.execute(statement.sql, statement.params, binary=statement.binary)


async def _execute_async(
    connection: psycopg.AsyncConnection, statement: Statement
) -> psycopg.AsyncCursor[Any]:
    """:func:`_execute` on an async connection."""
    cursor = psycopg.AsyncCursor(connection, row_factory=tuple_row)
    return await cursor.execute(statement.sql, statement.params, binary=statement.binary)


def _fetched(cursor: psycopg.Cursor[Any], fetch: Fetch) -> Any:
    if fetch is Fetch.ROWCOUNT:
        return cursor.rowcount
    if fetch is Fetch.ONE:
        return cursor.fetchone()
    if fetch is Fetch.ALL or (fetch is Fetch.ROWS_IF_ANY and cursor.description is not None):
        return cursor.fetchall()
    return [] if fetch is Fetch.ROWS_IF_ANY else None


async def run_steps_async(connection: psycopg.AsyncConnection, plan: Plan[T]) -> T:
    """:func:`run_steps` on an async connection."""
    result: Any = None
    while True:
        try:
            step = plan.send(result)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        assert not isinstance(step, Operation), "an Operation comes first, or not at all"
        result = await run_step_async(connection, step)


async def run_plan_async(connection: psycopg.AsyncConnection, plan: Plan[T]) -> T:
    """:func:`run_plan` on an async connection."""
    if opening(plan).transaction:
        async with connection.transaction():
            return await run_steps_async(connection, plan)
    return await run_steps_async(connection, plan)


async def run_step_async(connection: psycopg.AsyncConnection, step: Step) -> Any:
    """:func:`run_step` on an async connection.

    A pipeline runs to its end even when the caller is cancelled meanwhile
    (which then waits for it): psycopg cannot leave a pipeline half-way
    cleanly, and a second cancellation while it tries would leave its exit
    unfinished on a closed connection. A lone statement is psycopg's to
    cancel (it asks the server to cancel it, and waits).
    """
    if isinstance(step, Statement):
        return await _fetched_async(await _execute_async(connection, step), step.fetch)
    running = start_now(_run_pipeline(connection, step))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await _outlive_cancellations(running)
        raise


async def _outlive_cancellations(running: asyncio.Future[Any]) -> None:
    """Wait until ``running`` is done, whatever cancels the wait; its outcome is dropped."""
    while not running.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([running])
    if not running.cancelled():
        running.exception()  # retrieved: the caller was cancelled, that is what it raises


async def _run_pipeline(connection: psycopg.AsyncConnection, step: Pipeline) -> list[Any]:
    async with connection.pipeline():
        cursors = [await _execute_async(connection, each) for each in step.statements]
    return [
        await _fetched_async(c, each.fetch)
        for c, each in zip(cursors, step.statements, strict=True)
    ]


async def _fetched_async(cursor: psycopg.AsyncCursor[Any], fetch: Fetch) -> Any:
    if fetch is Fetch.ROWCOUNT:
        return cursor.rowcount
    if fetch is Fetch.ONE:
        return await cursor.fetchone()
    if fetch is Fetch.ALL or (fetch is Fetch.ROWS_IF_ANY and cursor.description is not None):
        return await cursor.fetchall()
    return [] if fetch is Fetch.ROWS_IF_ANY else None
