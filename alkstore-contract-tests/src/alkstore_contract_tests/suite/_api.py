"""Which API the session runs the suite through, and opening stores through it.

``--alkstore-api=sync`` (the default) hands tests the engine's ``Store``s.
``--alkstore-api=async`` hands them a sync facade over an ``AsyncStore``
opened with the engine's ``open_async`` (see :mod:`._facade`), on an event
loop of the test's own.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast

import pytest

import alkstore
from alkstore import Consumer, RunStats, Worker, stop_on_signals
from alkstore.engine import AsyncStore, AsyncTxHandle, StoreTarget, TestProvider
from alkstore_contract_tests.suite._facade import ConnectionFacade, StoreFacade, TxFacade, native
from alkstore_contract_tests.suite._loop import LoopThread, mirror_stop

__all__ = [
    "ASYNC",
    "SYNC",
    "StoreOpener",
    "break_wakes",
    "business_rows",
    "make_consumer",
    "make_worker",
    "open_through_the_async_api",
    "run_scenario",
    "write_business_row",
]

T = TypeVar("T")

SYNC, ASYNC = "sync", "async"


class StoreOpener:
    """Opens stores on any target through the session's API, and closes them all.

    In async mode the stores of one opener share one event loop (a thread),
    stopped once they are closed.
    """

    def __init__(self, provider: TestProvider, api: str) -> None:
        self.provider = provider
        self.api = api
        self._loop: LoopThread | None = None
        self._opened: list[alkstore.Store] = []

    @property
    def loop(self) -> LoopThread:
        """The event loop of the async mode's stores (started on first use)."""
        if self._loop is None:
            self._loop = LoopThread()
        return self._loop

    def open(self, target: StoreTarget) -> alkstore.Store:
        """Open another store on ``target`` (a peer of every other one on it)."""
        if self.api == SYNC:
            store = self.provider.open_store(target)
        else:
            opened = self.loop.run(lambda: _open_async(self.provider, target))
            store = cast("alkstore.Store", StoreFacade(opened, self.loop))
        self._opened.append(store)
        return store

    def driver_connection(self, target: StoreTarget) -> Any:
        """A new driver connection to ``target``'s storage, as ``adopt_tx`` takes one.

        In async mode: the provider's async driver connection where it has one
        (``async_driver_connection``), else its sync one, made on the event
        loop and used there (behind a facade whose calls run there).
        """
        if self.api == SYNC:
            return self.provider.driver_connection(target)
        return ConnectionFacade(
            self.loop.run(lambda: _async_driver_connection(self.provider, target)), self.loop
        )

    def close(self) -> None:
        """Close every store opened here, then stop the event loop."""
        try:
            for store in self._opened:
                store.close()
        finally:
            if self._loop is not None:
                self._loop.stop()


def open_through_the_async_api(target: str, options: dict[str, Any]) -> alkstore.Store:
    """``alkstore.open_async(target, **options)`` behind the suite's sync facade, on an
    event loop of its own (what a child process of an async-mode test runs)."""
    loop = LoopThread()
    opened = loop.run(lambda: alkstore.open_async(target, **options))
    return cast("alkstore.Store", StoreFacade(opened, loop))


async def _open_async(provider: TestProvider, target: StoreTarget) -> alkstore.AsyncStore:
    """The provider's async store on ``target``: through its engine's ``open_async``
    (``alkstore.open_async`` would pick the engine by the target's form)."""
    return await provider.engine.open_async(target.target, **target.options)


async def _async_driver_connection(provider: TestProvider, target: StoreTarget) -> Any:
    """The provider's ``async_driver_connection`` (awaited if need be), else its sync one."""
    make = getattr(provider, "async_driver_connection", None)
    if make is None:
        return provider.driver_connection(target)
    made = make(target)
    return await made if inspect.isawaitable(made) else made


# The provider's backdoors, whichever API the store came through. Each takes
# the sync store or handle in sync mode. In async mode an optional ``*_async``
# twin of the backdoor, if the provider has one, gets the AsyncStore or
# AsyncTxHandle itself; else the sync backdoor gets what serves as well.


def write_business_row(provider: TestProvider, tx: alkstore.TxHandle | TxFacade, key: str) -> None:
    """``provider.write_business_row`` in ``tx``'s transaction.

    In async mode without ``write_business_row_async``, the sync backdoor gets
    the facade of the ``AsyncTxHandle``, whose ``execute`` awaits the async one.
    """
    twin = getattr(provider, "write_business_row_async", None)
    if isinstance(tx, TxFacade) and twin is not None:
        tx.loop.run(lambda: twin(tx.async_object, key))
        return
    provider.write_business_row(cast("alkstore.TxHandle", tx), key)


def business_rows(provider: TestProvider, store: alkstore.Store | StoreFacade) -> set[str]:
    """``provider.business_rows`` as ``store`` sees them.

    In async mode, ``business_rows_async`` (by default core's reads through the
    async store's sync companion, which sees what was committed as any peer does).
    """
    if not isinstance(store, StoreFacade):
        return provider.business_rows(store)
    return store.loop.run(lambda: provider.business_rows_async(store.async_store))


def break_wakes(provider: TestProvider, store: alkstore.Store | StoreFacade) -> None:
    """``provider.break_wakes`` of ``store``'s wake path.

    In async mode, ``break_wakes_async``: by default core's breaks the wake
    path of the async store's companion, which is the async store's own unless
    the engine listens natively; a provider that cannot is skipped with its reason.
    """
    if not isinstance(store, StoreFacade):
        provider.break_wakes(store)
        return
    try:
        store.loop.run(lambda: provider.break_wakes_async(store.async_store))
    except NotImplementedError as exc:
        pytest.skip(str(exc))


# Workers and Consumers: over the AsyncStore in async mode, on its loop.

Runner = TypeVar("Runner", Worker, Consumer)

Handler = Callable[..., object]


def make_worker(
    store: alkstore.Store | StoreFacade, queue: Any, handler: Handler, **options: Any
) -> Worker:
    """``alkstore.Worker(store, queue, handler, **options)``; in async mode over the
    AsyncStore (and its queue or outbox) behind the facades, run on the store's loop."""
    return _on_the_stores_loop(store, Worker(_store_of(store), native(queue), handler, **options))


def make_consumer(
    store: alkstore.Store | StoreFacade,
    stream: Any,
    consumer: str,
    handler: Handler,
    *,
    transactional: bool = False,
    **options: Any,
) -> Consumer:
    """``alkstore.Consumer(...)``; in async mode over the AsyncStore (and its stream)
    behind the facades, run on the store's loop. A transactional handler is
    given the async API's shape (see :func:`_handler_for_the_async_api`)."""
    if transactional and isinstance(store, StoreFacade):
        handler = _handler_for_the_async_api(handler, store.loop)
    made = Consumer(
        _store_of(store), native(stream), consumer, handler, transactional=transactional, **options
    )
    return _on_the_stores_loop(store, made)


def _handler_for_the_async_api(handler: Handler, loop: LoopThread) -> Handler:
    """A transactional handler written for the sync API, as the async API takes one.

    The sync API calls a plain ``handler(event, tx)`` with a ``TxHandle``; the
    async API awaits a coroutine function with an ``AsyncTxHandle``. So a plain
    handler becomes a coroutine function running it on a thread with the
    facade of the ``AsyncTxHandle``; and what the sync API refuses (a coroutine
    function) becomes what the async API refuses (a plain function), for the
    async API's own check to refuse.
    """
    if inspect.iscoroutinefunction(handler):

        def plain(event: Any, tx: Any) -> None:
            raise AssertionError("never called: the async API refuses a plain function")

        return plain

    async def awaited(event: Any, tx: AsyncTxHandle) -> None:
        await asyncio.to_thread(handler, event, TxFacade(tx, loop))

    return awaited


def _store_of(store: alkstore.Store | StoreFacade) -> alkstore.Store | AsyncStore:
    """What a Worker or Consumer takes: the sync store, or the facade's AsyncStore."""
    return store.async_store if isinstance(store, StoreFacade) else store


def _on_the_stores_loop(store: alkstore.Store | StoreFacade, runner: Runner) -> Runner:
    if not isinstance(store, StoreFacade):
        return runner
    return cast(Runner, OnTheLoop(runner, store.loop))


class OnTheLoop:
    """A Worker or Consumer over an AsyncStore, run where that store lives: its
    ``run(stop)`` (a ``threading.Event``) awaits ``run_async`` on the store's loop
    until ``stop`` is set; ``run_async`` must be awaited on that loop."""

    def __init__(self, runner: Worker | Consumer, loop: LoopThread) -> None:
        self._runner = runner
        self._loop = loop

    def run(self, stop: Any) -> None:
        self._loop.run(lambda: mirror_stop(stop, self._runner.run_async))

    def run_forever(self) -> None:
        """``run`` until SIGTERM or SIGINT (as the runner's own ``run_forever``)."""
        hurry = getattr(self._runner, "hurry", None)
        with stop_on_signals(on_second=hurry) as stop:
            self.run(stop)

    def run_async(self, stop: asyncio.Event | None = None) -> Coroutine[Any, Any, None]:
        if not self._loop.on_loop:
            raise RuntimeError("run_async of a runner over an AsyncStore runs on that store's loop")
        return self._runner.run_async(stop)

    def stats(self) -> RunStats:
        return self._runner.stats()

    def __repr__(self) -> str:
        return f"<{self._runner!r} on the suite's event loop>"


def run_scenario(
    store: alkstore.Store | StoreFacade,
    scenario: Callable[[], Coroutine[Any, Any, T]],
    timeout: float,
) -> T:
    """Run the asyncio ``scenario()`` to its end, within ``timeout`` seconds: on a new
    event loop in sync mode; in async mode on the loop ``store`` lives on, where the
    async API's objects must be used. A blocking call of the store's facade inside
    ``scenario`` must go through ``asyncio.to_thread``."""
    if not isinstance(store, StoreFacade):
        return asyncio.run(asyncio.wait_for(scenario(), timeout))
    return store.loop.run(lambda: asyncio.wait_for(scenario(), timeout))
