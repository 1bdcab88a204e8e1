"""notify / listen: wakes for commits after ``listen``, through every receiver shape."""

from __future__ import annotations

import asyncio
import threading

import pytest

import alkstore
from alkstore import Wake
from alkstore.engine import Capabilities, TestProvider
from alkstore_contract_tests.suite._api import break_wakes
from alkstore_contract_tests.suite._support import eventually, needs


def test_a_notify_from_another_store_wakes_the_listener(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    with store.listen("orders") as wakes:
        threading.Timer(0.05, peer.notify, ["orders", {"id": 1}]).start()
        assert wakes.recv(5) == Wake("orders")


def test_a_wake_carries_the_channel_and_never_the_payload(store: alkstore.Store) -> None:
    with store.listen("orders") as wakes:
        store.notify("orders", {"secret": 1})
        wake = wakes.recv(5)
    assert wake == Wake("orders")
    assert not hasattr(wake, "payload")


def test_every_listener_of_a_channel_is_woken(store: alkstore.Store, peer: alkstore.Store) -> None:
    receivers = [store.listen("c") for _ in range(20)] + [peer.listen("c") for _ in range(5)]
    store.notify("c", None)
    assert all(receiver.recv(5) == Wake("c") for receiver in receivers)
    for receiver in receivers:
        receiver.close()


def test_a_notify_committed_after_listen_returned_is_never_lost(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    for round_ in range(25):
        with store.listen(f"c{round_}") as wakes:
            peer.notify(f"c{round_}", round_)
            assert wakes.recv(5) == Wake(f"c{round_}"), f"round {round_}"


def test_notifies_before_listen_are_not_delivered_later(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    peer.notify("c", 1)
    with store.listen("c") as wakes:
        while wakes.recv(0.2) is not None:  # an in-flight wake may still arrive: drain
            pass
        assert wakes.recv(0.2) is None


def test_notify_tx_wakes_only_on_commit(store: alkstore.Store, peer: alkstore.Store) -> None:
    with peer.listen("c") as wakes:
        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.notify_tx("c", 1)
            raise RuntimeError("roll back")
        assert wakes.recv(0.3) is None
        tx = store.begin_tx()
        tx.notify_tx("c", 2)
        assert wakes.recv(0.2) is None
        tx.commit()
        assert wakes.recv(5) == Wake("c")


def test_notify_tx_wakes_no_listener_of_its_own_store_before_commit(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    with store.listen("c") as own, peer.listen("c") as other:
        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.notify_tx("c", 1)
            raise RuntimeError("roll back")
        assert own.recv(0.3) is None
        tx = store.begin_tx()
        tx.notify_tx("c", 2)
        assert own.recv(0.2) is None
        assert other.recv(0) is None
        tx.commit()
        assert own.recv(5) == Wake("c")
        assert other.recv(5) == Wake("c")


def test_one_commit_wakes_every_channel_it_notified(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    channels = ["a", "b", "c"]
    receivers = [s.listen(channel) for s in (store, peer) for channel in channels]
    with store.transaction() as tx:
        for channel in channels:
            tx.notify_tx(channel, None)
    try:
        assert [receiver.recv(5) for receiver in receivers] == [Wake(c) for c in channels * 2]
    finally:
        for receiver in receivers:
            receiver.close()


def test_notifies_in_one_transaction_wake_per_notify_or_coalesced_as_declared(
    store: alkstore.Store, peer: alkstore.Store, capabilities: Capabilities
) -> None:
    notifies = 5
    with peer.listen("c") as wakes:
        with store.transaction() as tx:
            for n in range(notifies):
                tx.notify_tx("c", n)
        received = 0
        while wakes.recv(0.3) is not None:
            received += 1
    assert received >= 1
    if not capabilities.wakes_coalesce:
        assert received >= notifies, f"{notifies} notifies in one commit, {received} wakes"


def test_wakes_per_notify_or_coalesced_as_declared(
    store: alkstore.Store, peer: alkstore.Store, capabilities: Capabilities
) -> None:
    with store.listen("c") as wakes:
        for n in range(5):
            peer.notify("c", n)
        received = 0
        while wakes.recv(0.3) is not None:
            received += 1
    assert received >= 1
    if not capabilities.wakes_coalesce:
        assert received >= 5


def test_recv_times_out_with_none_and_other_channels_do_not_wake(
    store: alkstore.Store,
) -> None:
    with store.listen("quiet") as wakes:
        store.notify("loud", 1)
        assert wakes.recv(0.2) is None
        assert not wakes.closed


def test_close_ends_iteration_and_makes_recv_return_none(store: alkstore.Store) -> None:
    wakes = store.listen("c")
    seen: list[Wake] = []
    threading.Timer(0.05, store.notify, ["c", 1]).start()
    # Closed once the wake came (on a loaded machine a fixed timer could close
    # first), or after 10 s, when the assertion below says none came.
    gave_up = threading.Timer(10, wakes.close)
    gave_up.start()
    for wake in wakes:
        if not seen:
            threading.Timer(0.05, wakes.close).start()
        seen.append(wake)
    gave_up.cancel()
    assert seen[:1] == [Wake("c")]
    assert wakes.closed
    assert wakes.recv(0) is None


def test_async_recv_and_async_iteration(store: alkstore.Store, peer: alkstore.Store) -> None:
    async def scenario() -> list[Wake]:
        wakes = store.listen("c")
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, peer.notify, "c", 1)
        first = await wakes.recv_async(5)
        loop.call_later(0.05, peer.notify, "c", 2)
        # Closed while the iteration waits, once the second wake came (on a
        # loaded machine a fixed timer could close first), or after 10 s,
        # when the assertion below says none came.
        gave_up = loop.call_later(10, wakes.close)
        rest: list[Wake] = []
        async for wake in wakes:
            if not rest:
                loop.call_later(0.05, wakes.close)
            rest.append(wake)
        gave_up.cancel()
        assert first is not None
        return [first, *rest]

    wakes = asyncio.run(scenario())
    assert wakes[:2] == [Wake("c"), Wake("c")]


def test_closing_the_store_closes_its_receivers(store: alkstore.Store) -> None:
    wakes = store.listen("c")
    store.close()
    assert wakes.closed
    assert wakes.recv(1) is None


def test_a_broken_wake_path_is_an_event_never_silence(
    provider: TestProvider,
    store: alkstore.Store,
    peer: alkstore.Store,
    capabilities: Capabilities,
) -> None:
    needs(provider, "break_wakes")
    wakes = store.listen("c")
    break_wakes(provider, store)
    if capabilities.reconnect_wakes:
        assert wakes.recv(10) == Wake(alkstore.RECONNECT_CHANNEL)
        peer.notify("c", 1)
        assert wakes.recv(10) == Wake("c"), "the listener must listen again after reconnecting"
    else:
        eventually(lambda: wakes.closed)
        assert wakes.recv(0) is None
    wakes.close()
