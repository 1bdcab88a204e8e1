"""Which callables a runner takes as a handler, and what a handler may return.

A generator function called as a handler returns a generator without running
a line of its body; a coroutine returned where nothing awaits it is dropped
the same way. Either would count as a success: the job acked, the offset
saved, the work never done. So both are refused, up front where the shape
tells (``def`` with ``yield``, ``async def`` with ``yield``), else when the
first call returns one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["check_handler", "check_plain_result", "check_result", "is_coroutine_handler"]


def check_handler(handler: object, role: str = "handler") -> None:
    """Refuse what cannot be a handler (``role`` names it in the message).

    Raises:
        TypeError: ``handler`` is not callable, or is a generator function
            (sync or async), whose call would not run its body.
    """
    if not callable(handler):
        raise TypeError(f"{role} must be callable, not {type(handler).__name__}")
    for shape in (handler, _call_method(handler)):
        if inspect.isgeneratorfunction(shape) or inspect.isasyncgenfunction(shape):
            raise TypeError(
                f"{role} {handler!r} is a generator function: calling it runs none of its "
                "body (it only makes a generator); use a plain or an async def function"
            )


def is_coroutine_handler(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` is a coroutine function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        _call_method(handler)
    )


def _call_method(handler: object) -> object:
    """The ``__call__`` of ``handler``'s class (what calling an instance runs)."""
    return getattr(type(handler), "__call__", None)  # noqa: B004 - the method, not callability


def check_result(result: object) -> None:
    """Refuse a handler's result that means its work never ran: a generator.

    Raises:
        TypeError: ``result`` is a generator or an asynchronous generator.
    """
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        raise TypeError(
            f"the handler returned {type(result).__name__} {result!r}, whose body never ran; "
            "a handler is a plain or an async def function"
        )


def check_plain_result(result: object) -> None:
    """Refuse a result where a plain function's is due (a transactional handler on a
    sync store): a coroutine is closed unrun and refused, as is a generator.

    Raises:
        TypeError: ``result`` is awaitable or a generator.
    """
    check_result(result)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()  # never awaited: no "was never awaited" warning on top
        raise TypeError(
            f"the handler returned {type(result).__name__} {result!r}, which nothing awaits: "
            "a transactional handler on a sync Store is a plain function (on an "
            "AsyncStore, an async def one)"
        )
