"""``adopt_tx``: side effects in the caller's own transaction, on the caller's connection.

The caller owns the transaction: its commit — through its connection or
through the handle — makes the side effects visible and fires their wakes;
its rollback leaves nothing. An adopted handle lives exactly as long as the
transaction it adopted: once that ends, however it ends, every call on the
handle raises ``Closed`` and writes nothing, and the connection is the
caller's to go on using. Closing the store leaves the transaction alone.

Driver connections come from ``TestProvider.driver_connection`` (in async mode,
its ``async_driver_connection`` where it has one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import alkstore
from alkstore import TxState, Wake
from alkstore.engine import StoreTarget, TestProvider
from alkstore_contract_tests.suite._api import StoreOpener, business_rows, write_business_row
from alkstore_contract_tests.suite._support import SIDE_EFFECTS, OpenStore, needs, start_thread

KINDS = sorted(SIDE_EFFECTS)
THROUGH = ["connection", "handle"]
"""How the caller ends its transaction: ``connection.commit()`` or ``tx.commit()``."""

QUIET_S = 0.3
"""How long a wake that must not come is waited for."""
WAKE_S = 5.0


@pytest.fixture
def connection(provider: TestProvider, opener: StoreOpener, target: StoreTarget) -> Iterator[Any]:
    """The caller's own driver connection to the test's storage, outside any transaction."""
    needs(provider, "driver_connection")
    made = opener.driver_connection(target)
    yield made
    made.close()  # before the target is dropped: an open transaction would hold it


def commit(tx: alkstore.TxHandle, connection: Any, through: str) -> None:
    if through == "connection":
        connection.commit()
    else:
        tx.commit()


def rollback(tx: alkstore.TxHandle, connection: Any, through: str) -> None:
    if through == "connection":
        connection.rollback()
    else:
        tx.rollback()


def seen(store: alkstore.Store, kind: str, wakes: alkstore.WakeReceiver, wait_s: float) -> bool:
    """Whether ``store`` sees the side effect ``kind`` of ``SIDE_EFFECTS``; reads only,
    so it never waits on the write lock of a transaction still open."""
    if kind == "notify_tx":
        return wakes.recv(wait_s) == Wake("orders")
    if kind == "enqueue_tx":
        return bool(store.inspect().jobs("emails"))
    if kind == "outbox_enqueue_tx":
        return bool(store.inspect().jobs(store.outbox("hooks").queue_name))
    if kind == "save_offset_tx":
        return store.stream("orders").get_offset("projection") > 0
    return bool(store.stream("orders").read_since(0))


def seen_kinds(store: alkstore.Store, wakes: alkstore.WakeReceiver) -> set[str]:
    """Every side effect kind ``store`` sees (a notify only if its wake comes)."""
    return {kind for kind in KINDS if seen(store, kind, wakes, QUIET_S)}


def job_payloads(store: alkstore.Store, queue: str = "emails") -> list[object]:
    return [info.payload for info in store.inspect().jobs(queue)]


# The handle and the caller's connection


def test_an_adopted_handle_runs_on_the_callers_connection(
    store: alkstore.Store, connection: Any
) -> None:
    tx = store.adopt_tx(connection)
    assert tx.connection is connection
    assert tx.active
    connection.rollback()


@pytest.mark.parametrize("through", THROUGH)
@pytest.mark.parametrize("kind", KINDS)
def test_side_effects_appear_when_the_callers_transaction_commits(
    store: alkstore.Store, peer: alkstore.Store, connection: Any, kind: str, through: str
) -> None:
    with peer.listen("orders") as wakes:
        tx = store.adopt_tx(connection)
        SIDE_EFFECTS[kind](tx)
        assert not seen(peer, kind, wakes, QUIET_S), "visible before the caller committed"
        commit(tx, connection, through)
        assert seen(peer, kind, wakes, WAKE_S)


@pytest.mark.parametrize("through", THROUGH)
@pytest.mark.parametrize("kind", KINDS)
def test_side_effects_never_appear_when_the_callers_transaction_rolls_back(
    store: alkstore.Store, peer: alkstore.Store, connection: Any, kind: str, through: str
) -> None:
    with peer.listen("orders") as wakes:
        tx = store.adopt_tx(connection)
        SIDE_EFFECTS[kind](tx)
        rollback(tx, connection, through)
        assert not seen(peer, kind, wakes, QUIET_S)


@pytest.mark.parametrize("through", THROUGH)
def test_the_callers_business_write_and_the_side_effects_commit_or_roll_back_together(
    provider: TestProvider,
    store: alkstore.Store,
    peer: alkstore.Store,
    connection: Any,
    through: str,
) -> None:
    needs(provider, "write_business_row")
    tx = store.adopt_tx(connection)
    write_business_row(provider, tx, "rolled-back")
    tx.enqueue_tx("emails", None, "rolled-back")
    tx.publish_tx("orders", "rolled-back")
    rollback(tx, connection, through)
    assert "rolled-back" not in business_rows(provider, peer)
    assert job_payloads(peer) == []
    assert peer.stream("orders").read_since(0) == []
    tx = store.adopt_tx(connection)
    write_business_row(provider, tx, "committed")
    tx.enqueue_tx("emails", None, "committed")
    tx.publish_tx("orders", "committed")
    commit(tx, connection, through)
    assert business_rows(provider, peer) == {"committed"}
    assert job_payloads(peer) == ["committed"]
    assert [event.payload for event in peer.stream("orders").read_since(0)] == ["committed"]


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_adopting_a_connection_inside_a_transaction_joins_that_transaction(
    open_store: OpenStore, store: alkstore.Store, connection: Any, ending: str
) -> None:
    other, observer = open_store(), open_store()  # opened first: opening may write
    first = store.adopt_tx(connection)
    first.enqueue_tx("emails", None, "first")
    second = other.adopt_tx(connection)  # another store, the same caller's transaction
    second.publish_tx("orders", "second")
    getattr(connection, ending)()
    committed = ending == "commit"
    assert job_payloads(observer) == (["first"] if committed else [])
    assert [e.payload for e in observer.stream("orders").read_since(0)] == (
        ["second"] if committed else []
    )
    for handle in (first, second):
        with pytest.raises(alkstore.Closed):
            handle.enqueue_tx("emails", None, "after")
    assert job_payloads(observer) == (["first"] if committed else [])


# Ending the transaction


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_ending_through_the_handle_ends_the_callers_transaction_and_the_handle_not_the_connection(
    store: alkstore.Store, peer: alkstore.Store, connection: Any, ending: str
) -> None:
    tx = store.adopt_tx(connection)
    tx.enqueue_tx("emails", None, "through the handle")
    getattr(tx, ending)()
    assert not tx.active
    for call in (lambda: tx.enqueue_tx("emails", None, "after"), tx.commit, tx.rollback):
        with pytest.raises(alkstore.Closed):
            call()
    kept = ["through the handle"] if ending == "commit" else []
    assert job_payloads(peer) == kept
    # The connection is still the caller's, outside any transaction: adopting it
    # again begins a new one, which its own rollback and commit decide.
    store.adopt_tx(connection).enqueue_tx("emails", None, "rolled back by the connection")
    connection.rollback()
    store.adopt_tx(connection).enqueue_tx("emails", None, "committed by the connection")
    connection.commit()
    assert job_payloads(peer) == [*kept, "committed by the connection"]


CALLS: dict[str, Callable[[alkstore.TxHandle], object]] = {
    **SIDE_EFFECTS,
    "commit": lambda tx: tx.commit(),
    "rollback": lambda tx: tx.rollback(),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_once_the_caller_ends_its_transaction_the_handle_refuses_every_call_and_writes_nothing(
    store: alkstore.Store, peer: alkstore.Store, connection: Any, ending: str, call: str
) -> None:
    # Nothing a late call writes may land in autocommit, nor in a transaction the
    # handle began on the caller's connection behind the caller's back.
    with peer.listen("orders") as wakes:
        tx = store.adopt_tx(connection)
        tx.enqueue_tx("emails", None, "adopted")
        getattr(connection, ending)()
        with pytest.raises(alkstore.Closed):
            CALLS[call](tx)
        assert not tx.active
        assert tx.state is TxState.ENDED_ELSEWHERE
        for later in (tx.commit, tx.rollback, lambda: tx.notify_tx("orders", "later")):
            with pytest.raises(alkstore.Closed):
                later()
        connection.commit()  # whatever the refused calls might have begun
        assert job_payloads(peer) == (["adopted"] if ending == "commit" else [])
        assert seen_kinds(peer, wakes) == ({"enqueue_tx"} if ending == "commit" else set())


# Wakes


def _receivers(
    store: alkstore.Store, peer: alkstore.Store, queue_wait_s: float
) -> tuple[list[alkstore.WakeReceiver], alkstore.EventReceiver, threading.Event]:
    """Listeners on ``orders`` (a peer's and the adopting store's own), a peer's
    subscriber to the stream ``orders``, and a peer's ``queue.wait`` on ``emails``
    running on a thread: the returned event is set when the wait returns True."""
    listeners = [peer.listen("orders"), store.listen("orders")]
    subscriber = peer.stream("orders").subscribe("reader")
    woken = threading.Event()
    queue = peer.queue("emails")

    def wait() -> None:
        if queue.wait(queue_wait_s):
            woken.set()

    start_thread(wait)
    return listeners, subscriber, woken


@pytest.mark.parametrize("through", THROUGH)
def test_wakes_fire_once_the_callers_transaction_commits_and_not_before(
    store: alkstore.Store, peer: alkstore.Store, connection: Any, through: str
) -> None:
    listeners, subscriber, queue_woken = _receivers(store, peer, queue_wait_s=30)
    try:
        tx = store.adopt_tx(connection)
        tx.notify_tx("orders", 1)
        tx.enqueue_tx("emails", None, 1)
        tx.publish_tx("orders", "published")
        assert [listener.recv(QUIET_S) for listener in listeners] == [None, None]
        assert subscriber.recv(0) is None
        assert not queue_woken.is_set()
        commit(tx, connection, through)
        assert [listener.recv(WAKE_S) for listener in listeners] == [Wake("orders")] * 2
        event = subscriber.recv(WAKE_S)
        assert event is not None
        assert event.payload == "published"
        assert queue_woken.wait(WAKE_S), "queue.wait was not woken by the commit"
    finally:
        for listener in listeners:
            listener.close()
        subscriber.close()


@pytest.mark.parametrize("through", THROUGH)
def test_wakes_never_fire_when_the_callers_transaction_rolls_back(
    store: alkstore.Store, peer: alkstore.Store, connection: Any, through: str
) -> None:
    listeners, subscriber, queue_woken = _receivers(store, peer, queue_wait_s=2 * QUIET_S)
    try:
        tx = store.adopt_tx(connection)
        tx.notify_tx("orders", 1)
        tx.enqueue_tx("emails", None, 1)
        tx.publish_tx("orders", "published")
        rollback(tx, connection, through)
        assert [listener.recv(QUIET_S) for listener in listeners] == [None, None]
        assert subscriber.recv(0) is None
        assert not queue_woken.wait(3 * QUIET_S)
    finally:
        for listener in listeners:
            listener.close()
        subscriber.close()


# Closing the store


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_closing_the_store_leaves_an_adopted_transaction_to_its_caller(
    store: alkstore.Store, peer: alkstore.Store, connection: Any, ending: str
) -> None:
    with peer.listen("orders") as wakes:
        tx = store.adopt_tx(connection)
        tx.enqueue_tx("emails", None, "adopted")
        tx.publish_tx("orders", "adopted")
        tx.notify_tx("orders", "adopted")
        store.close()
        # The handle is closed with its store; the transaction is the caller's.
        for call in (lambda: tx.enqueue_tx("emails", None, "late"), tx.commit, tx.rollback):
            with pytest.raises(alkstore.Closed):
                call()
        getattr(connection, ending)()
        if ending == "commit":
            assert wakes.recv(WAKE_S) == Wake("orders")
            assert job_payloads(peer) == ["adopted"]
            assert [event.payload for event in peer.stream("orders").read_since(0)] == ["adopted"]
        else:
            assert wakes.recv(QUIET_S) is None
            assert job_payloads(peer) == []
            assert peer.stream("orders").read_since(0) == []


# What adopt_tx refuses


def test_a_connection_to_other_storage_is_refused_with_value_error_and_nothing_written(
    provider: TestProvider,
    opener: StoreOpener,
    store: alkstore.Store,
    peer: alkstore.Store,
    target: StoreTarget,
) -> None:
    needs(provider, "driver_connection")
    needs(provider, "other_storage_target")
    try:
        elsewhere = provider.other_storage_target(target)
    except NotImplementedError as exc:
        pytest.skip(f"the provider has no other storage: {exc}")
    try:
        with opener.open(elsewhere) as other:
            foreign = opener.driver_connection(elsewhere)
            try:
                with pytest.raises(ValueError, match=r"(?i)connection"):
                    store.adopt_tx(foreign)
                foreign.commit()  # whatever a refused adoption might have begun
            finally:
                foreign.close()
            for seen_from in (other, peer):
                view = seen_from.inspect()
                assert (view.queues(), view.streams()) == ([], []), seen_from
    finally:
        provider.drop_target(elsewhere)


def test_what_is_not_a_driver_connection_is_refused_with_type_error(
    store: alkstore.Store, target: StoreTarget
) -> None:
    for not_a_connection in (object(), None, target.target, 42):
        with pytest.raises(TypeError):
            store.adopt_tx(not_a_connection)
