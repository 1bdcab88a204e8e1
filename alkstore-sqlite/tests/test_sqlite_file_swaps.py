"""A store whose file is deleted or replaced under it refuses to go on.

The connections it holds keep the old file open: what they would write
then reaches no other process (a new store on the path opens another file)
and is gone with the last of them. So every call raises ``Database`` naming
the path, within a tenth of a second without a listener, at once after the
wake watcher has seen it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import alkstore
from alkstore_sqlite import SQLiteStore
from alkstore_sqlite._file_identity import LOOK_EVERY_S

Swap = tuple[Callable[[str], None], str]
"""The ``file_swap`` fixture (conftest): a way the file goes, and what the error says."""

CALLS: dict[str, Callable[[SQLiteStore], object]] = {
    "enqueue": lambda store: store.queue("emails").enqueue("lost?"),
    "claim": lambda store: store.queue("emails").claim_one("w"),
    "publish": lambda store: store.stream("orders").publish("lost?"),
    "notify": lambda store: store.notify("orders", "lost?"),
    "begin_tx": lambda store: store.begin_tx().enqueue_tx("emails", None, "lost?"),
    "try_lock": lambda store: store.try_lock("nightly", "me", 30),
    "inspect": lambda store: store.inspect().queues(),
}


def test_every_call_is_refused_once_the_file_is_swapped(
    store: SQLiteStore, file_swap: Swap
) -> None:
    swap, says = file_swap
    store.queue("emails").enqueue("before")
    swap(store.path)
    time.sleep(LOOK_EVERY_S * 2)
    for name, call in CALLS.items():
        with pytest.raises(alkstore.Database, match=f"{says}.*reopen the store"):
            call(store)
            pytest.fail(f"{name} went on after the swap")
    store.close()  # closing still works


def test_an_async_store_is_refused_too(path: str, file_swap: Swap) -> None:
    swap, says = file_swap

    async def main() -> None:
        async with await alkstore.open_async(path) as store:
            await store.queue("emails").enqueue("before")
            swap(path)
            await asyncio.sleep(LOOK_EVERY_S * 2)
            with pytest.raises(alkstore.Database, match=says):
                await store.queue("emails").enqueue("lost?")
            with pytest.raises(alkstore.Database, match=says):
                await store.stream("orders").publish("lost?")

    asyncio.run(main())


def test_a_swap_the_watcher_sees_is_refused_at_once(store: SQLiteStore, file_swap: Swap) -> None:
    swap, says = file_swap
    wakes = store.listen("orders")
    swap(store.path)
    assert wakes.recv(5) is None  # the watcher saw it and died
    with pytest.raises(alkstore.Database, match=says):
        store.queue("emails").enqueue("lost?")


def test_a_file_deleted_before_the_store_connected_again_is_not_made_anew(path: str) -> None:
    # The store keeps no connection between its open and its first call: a
    # new one must not create an empty file (which the freed inode could
    # make look like the old one), and the call must say what happened.
    with alkstore.open(path) as store:
        os.remove(path)
        with pytest.raises(alkstore.Database, match=r"is gone .*reopen the store"):
            store.queue("emails").enqueue("lost?")
        assert not os.path.exists(path)


def test_a_path_with_uri_characters_opens_its_own_file(tmp_path: Path) -> None:
    # Connections after the first open the file by URI: the name is quoted.
    odd = str(tmp_path / "a ?b#c%41 d.db")
    with alkstore.open(odd) as store:
        store.queue("emails").enqueue("kept")
        assert len(store.queue("emails").claim_batch("w", 10)) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == ["a ?b#c%41 d.db"]


def test_a_store_whose_file_stays_goes_on(store: SQLiteStore) -> None:
    queue = store.queue("emails")
    for _ in range(3):
        queue.enqueue("kept")
        time.sleep(LOOK_EVERY_S)
    assert len(queue.claim_batch("w", 10)) == 3


def test_a_path_that_cannot_be_looked_at_is_not_taken_for_a_swap(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(path: str, *args: object, **kwargs: object) -> os.stat_result:
        raise PermissionError(13, "Permission denied", path)

    store.queue("emails").enqueue("before")
    monkeypatch.setattr(os, "stat", refused)
    time.sleep(LOOK_EVERY_S * 2)
    store.queue("emails").enqueue("after")  # the connections still have the file
    monkeypatch.undo()
    assert len(store.queue("emails").claim_batch("w", 10)) == 2


# The runners: a swap is no outage to ride out. Each stops, logs one error,
# and raises FileChanged, instead of retrying against the old file for ever.

RUNNER_ENDS_WITHIN_S = 10.0


def _swap_once(
    handled: threading.Event, swap: Callable[[str], object], path: str, after_s: float
) -> None:
    """Swap the file at ``path`` ``after_s`` after ``handled`` is set, from a thread:
    a loaded machine may take its time to hand a runner its first item, and a swap
    on a fixed timer could land before it. Swaps anyway if it never is, so the
    runner still ends and the test says what it missed."""

    def later() -> None:
        if handled.wait(RUNNER_ENDS_WITHIN_S):
            time.sleep(after_s)
        swap(path)

    threading.Thread(target=later, daemon=True).start()


def _runs_until_raised(run: Callable[[threading.Event], object]) -> BaseException:
    """Start ``run(stop)`` on a thread; what it raised once it ended by itself."""
    stop = threading.Event()
    raised: list[BaseException] = []

    def target() -> None:
        try:
            run(stop)
        except BaseException as exc:
            raised.append(exc)

    runner = threading.Thread(target=target, daemon=True)
    runner.start()
    runner.join(RUNNER_ENDS_WITHIN_S)
    stop.set()
    runner.join(RUNNER_ENDS_WITHIN_S)
    assert not runner.is_alive(), "the runner did not end, even once told to stop"
    assert raised, f"the runner did not end within {RUNNER_ENDS_WITHIN_S} s of the swap"
    return raised[0]


def _assert_ended_by_swap(
    error: BaseException, says: str, caplog: pytest.LogCaptureFixture
) -> None:
    # FileChanged itself, or the dead wake watcher's refusal, which names it
    assert isinstance(error, alkstore.Database), repr(error)
    assert error.permanent
    assert says in str(error)
    ends = [r for r in caplog.records if "trying again cannot help; stopping" in r.getMessage()]
    assert len(ends) == 1, [r.getMessage() for r in caplog.records]  # once, however many calls
    assert ends[0].levelno == logging.ERROR


@pytest.mark.parametrize("busy", [False, True], ids=["parked", "working"])
def test_a_worker_stops_on_a_swap_and_raises_it(
    store: SQLiteStore, file_swap: Swap, busy: bool, caplog: pytest.LogCaptureFixture
) -> None:
    swap, says = file_swap
    queue = store.queue("emails")
    handled = threading.Event()

    def handler(job: alkstore.Job) -> None:
        handled.set()
        if busy:
            time.sleep(LOOK_EVERY_S * 3)  # the swap lands while it runs

    worker = alkstore.Worker(store, queue, handler, idle_wait_s=0.2, grace_s=1)

    def run(stop: threading.Event) -> None:
        queue.enqueue("first")
        # working: during the handler; parked: once the worker waits again
        _swap_once(handled, swap, store.path, LOOK_EVERY_S / 2 if busy else 0.3)
        worker.run(stop)

    _assert_ended_by_swap(_runs_until_raised(run), says, caplog)
    assert handled.is_set()


def test_an_async_worker_stops_on_a_swap_and_raises_it(
    path: str, file_swap: Swap, caplog: pytest.LogCaptureFixture
) -> None:
    swap, says = file_swap

    async def main() -> BaseException:
        async with await alkstore.open_async(path) as store:
            queue = store.queue("emails")
            await queue.enqueue("first")
            handled = threading.Event()
            worker = alkstore.Worker(store, queue, lambda job: handled.set(), idle_wait_s=0.2)
            _swap_once(handled, swap, path, 0.3)
            with pytest.raises(alkstore.Database) as raised:
                await asyncio.wait_for(worker.run_async(asyncio.Event()), RUNNER_ENDS_WITHIN_S)
            return raised.value

    _assert_ended_by_swap(asyncio.run(main()), says, caplog)


def test_a_consumer_stops_on_a_swap_and_raises_it(
    store: SQLiteStore, file_swap: Swap, caplog: pytest.LogCaptureFixture
) -> None:
    swap, says = file_swap
    orders = store.stream("orders")
    seen: list[object] = []
    handled = threading.Event()

    def handler(event: alkstore.StreamEvent) -> None:
        seen.append(event.payload)
        handled.set()

    consumer = alkstore.Consumer(store, orders, "billing", handler, idle_wait_s=0.2)

    def run(stop: threading.Event) -> None:
        orders.publish("first")
        _swap_once(handled, swap, store.path, 0.3)
        consumer.run(stop)

    _assert_ended_by_swap(_runs_until_raised(run), says, caplog)
    assert seen == ["first"]


def test_an_async_consumer_stops_on_a_swap_and_raises_it(
    path: str, file_swap: Swap, caplog: pytest.LogCaptureFixture
) -> None:
    swap, says = file_swap
    seen: list[object] = []
    handled = threading.Event()

    def handler(event: alkstore.StreamEvent) -> None:
        seen.append(event.payload)
        handled.set()

    async def main() -> BaseException:
        async with await alkstore.open_async(path) as store:
            orders = store.stream("orders")
            await orders.publish("first")
            consumer = alkstore.Consumer(store, orders, "billing", handler, idle_wait_s=0.2)
            _swap_once(handled, swap, path, 0.3)
            with pytest.raises(alkstore.Database) as raised:
                await asyncio.wait_for(consumer.run_async(asyncio.Event()), RUNNER_ENDS_WITHIN_S)
            return raised.value

    _assert_ended_by_swap(asyncio.run(main()), says, caplog)
    assert seen == ["first"]


def test_a_schedule_runner_stops_on_a_swap_and_raises_it(
    path: str, file_swap: Swap, caplog: pytest.LogCaptureFixture
) -> None:
    swap, says = file_swap
    store = alkstore.open(path, scheduler_lease_s=0.6)
    try:
        store.schedule("tick", "@every 1s", "ticks", None)

        def run(stop: threading.Event) -> None:
            threading.Timer(0.3, swap, (path,)).start()
            store.run_schedules(stop)

        _assert_ended_by_swap(_runs_until_raised(run), says, caplog)
    finally:
        store.close()
