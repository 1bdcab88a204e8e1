"""The buffered wake receiver engines fan out to."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

from alkstore import Wake
from alkstore._receivers import check_timeout
from alkstore.engine import BufferedWakeReceiver


def test_a_delivered_wake_is_received() -> None:
    receiver = BufferedWakeReceiver("orders")
    receiver.deliver(Wake("orders"))
    assert receiver.recv(0) == Wake("orders")
    assert receiver.recv(0) is None


def test_recv_times_out_with_none() -> None:
    receiver = BufferedWakeReceiver("orders")
    started = time.monotonic()
    assert receiver.recv(0.05) is None
    assert time.monotonic() - started >= 0.04


def test_a_blocked_recv_wakes_on_delivery_from_another_thread() -> None:
    receiver = BufferedWakeReceiver("orders")
    threading.Timer(0.02, receiver.deliver, [Wake("orders")]).start()
    assert receiver.recv(5) == Wake("orders")


def test_coalescing_merges_equal_pending_wakes_but_keeps_distinct_ones() -> None:
    receiver = BufferedWakeReceiver("orders")
    for _ in range(5):
        receiver.deliver(Wake("orders"))
    receiver.deliver(Wake("__alkstore_listener_reconnected__"))
    assert receiver.pending == 2


def test_without_coalescing_each_delivery_is_a_wake_until_the_bound() -> None:
    receiver = BufferedWakeReceiver("orders", coalesce=False, max_pending=3)
    for _ in range(5):
        receiver.deliver(Wake("orders"))
    assert receiver.pending == 3


def test_closing_unblocks_recv_and_runs_on_close_once() -> None:
    closed: list[BufferedWakeReceiver] = []
    receiver = BufferedWakeReceiver("orders", on_close=closed.append)
    receiver.deliver(Wake("orders"))
    assert receiver.recv(0) == Wake("orders")
    # Closed only once the buffered wake was taken: a loaded machine may run
    # the timer before the next line.
    threading.Timer(0.02, receiver.close).start()
    assert receiver.recv(5) is None
    assert receiver.closed
    receiver.close()
    assert closed == [receiver]


def test_a_closed_receiver_ignores_deliveries() -> None:
    receiver = BufferedWakeReceiver("orders")
    receiver.close()
    receiver.deliver(Wake("orders"))
    assert receiver.recv(0) is None


def test_iteration_ends_when_the_receiver_closes() -> None:
    receiver = BufferedWakeReceiver("orders", coalesce=False)
    receiver.deliver(Wake("orders"))
    receiver.deliver(Wake("orders"))
    seen = []
    for wake in receiver:
        seen.append(wake)
        if len(seen) == 2:
            receiver.close()
    assert seen == [Wake("orders")] * 2


def test_context_manager_closes() -> None:
    with BufferedWakeReceiver("orders") as receiver:
        assert "open" in repr(receiver)
    assert receiver.closed
    assert "closed" in repr(receiver)


def test_recv_async_waits_without_blocking_the_loop() -> None:
    # The wake comes (from another thread) only once the loop has run a task
    # ten times during the wait: a recv_async that blocked the loop would
    # never see it, however fast or loaded the machine.
    async def scenario() -> Wake | None:
        receiver = BufferedWakeReceiver("orders")

        async def ticker() -> None:
            for _ in range(10):
                await asyncio.sleep(0.001)
            threading.Thread(target=receiver.deliver, args=[Wake("orders")]).start()

        ticking = asyncio.create_task(ticker())
        wake = await receiver.recv_async(5)
        await ticking
        return wake

    assert asyncio.run(scenario()) == Wake("orders")


def test_recv_async_times_out_and_ends_on_close() -> None:
    async def scenario() -> list[object]:
        receiver = BufferedWakeReceiver("orders")
        timed_out = await receiver.recv_async(0.02)
        asyncio.get_running_loop().call_later(0.02, receiver.close)
        seen = [wake async for wake in receiver]
        return [timed_out, seen]

    assert asyncio.run(scenario()) == [None, []]


@pytest.mark.parametrize("deliveries", [1, 50])
def test_many_threads_deliver_without_losing_the_wake(deliveries: int) -> None:
    receiver = BufferedWakeReceiver("orders")
    threads = [
        threading.Thread(target=receiver.deliver, args=(Wake("orders"),)) for _ in range(deliveries)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert receiver.recv(1) == Wake("orders")


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        (None, None), (math.inf, None), (1e10, None), (1e300, None), (10**400, None),
        (-math.inf, 0.0), (-1, 0.0), (0, 0.0), (0.25, 0.25), (2, 2.0), (86400 * 365, 86400 * 365.0),
    ],
)  # fmt: skip
def test_check_timeout_reads_every_number_as_a_wait(timeout: object, seconds: object) -> None:
    assert check_timeout(timeout) == seconds


@pytest.mark.parametrize("timeout", [math.nan, "1", True, [1]])
def test_check_timeout_refuses_nan_and_what_is_not_a_number(timeout: object) -> None:
    with pytest.raises(ValueError, match="timeout"):
        check_timeout(timeout)


def test_recv_with_a_nan_timeout_raises_instead_of_blocking() -> None:
    receiver = BufferedWakeReceiver("orders")
    with pytest.raises(ValueError, match="NaN"):
        receiver.recv(math.nan)
    with pytest.raises(ValueError, match="NaN"):
        asyncio.run(receiver.recv_async(math.nan))


@pytest.mark.parametrize("timeout", [math.inf, 1e10, 1e300])
def test_recv_with_an_infinite_or_huge_timeout_waits_for_the_wake(timeout: float) -> None:
    receiver = BufferedWakeReceiver("orders")
    threading.Timer(0.05, receiver.deliver, [Wake("orders")]).start()
    assert receiver.recv(timeout) == Wake("orders")
