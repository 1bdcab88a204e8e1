"""The LISTEN connection for real: one wake per notify, a LISTEN set that follows the
live receivers, and one warning per outage."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
import pytest

import alkstore
from alkstore import RECONNECT_CHANNEL, Wake
from alkstore_postgres import PostgresStore
from alkstore_postgres._names import channel_identifier
from alkstore_postgres.testing import ThrowawayServer

OpenStore = Callable[..., PostgresStore]


def test_each_notify_of_one_transaction_is_its_own_wake(open_store: OpenStore) -> None:
    store, peer = open_store(), open_store()
    with peer.listen("c") as wakes:
        with store.transaction() as tx:
            for n in range(100):
                tx.notify_tx("c", n)
        assert [wakes.recv(5) for _ in range(100)] == [Wake("c")] * 100
        assert wakes.recv(0.2) is None


@pytest.mark.parametrize(
    "key", ["with:colon", "\\#7:looks tagged", "back\\slash", "\\", "nul\x00byte", "é" * 300]
)
def test_a_notify_reaches_exactly_its_own_key(open_store: OpenStore, key: str) -> None:
    store = open_store()
    with store.listen(key) as wakes, store.listen("looks tagged") as other:
        with store.transaction() as tx:
            tx.notify_tx(key, None)
            tx.notify_tx(key, None)
        store.notify(key, None)
        assert [wakes.recv(5) for _ in range(3)] == [Wake(key)] * 3
        assert other.recv(0.2) is None


def test_closed_receivers_leave_the_listen_set(open_store: OpenStore) -> None:
    store = open_store()
    live = [store.listen(f"live {n}") for n in range(3)]
    for n in range(10_000):
        store.listen(f"gone {n}").close()
    expected = {channel_identifier(store.settings.schema, f"live {n}") for n in range(3)}
    assert store.listening_channels() == expected
    for receiver in live:
        receiver.close()
    assert store.listening_channels() == set()


def test_a_subscribe_right_after_the_last_close_stays_listening(open_store: OpenStore) -> None:
    store, peer = open_store(), open_store()
    for round_ in range(200):
        store.listen("c").close()  # queues the UNLISTEN
        with store.listen("c") as wakes:  # the channel must stay (or be) listened to
            peer.notify("c", round_)
            assert wakes.recv(5) == Wake("c")
    assert store.listening_channels() == set()


def test_receivers_opened_and_closed_from_many_threads_each_hear_what_follows(
    open_store: OpenStore,
) -> None:
    """Each thread closes its channel's only receiver and opens the next at once,
    so LISTENs and UNLISTENs of four channels meet in the listener's batches:
    each receiver must still hear the notify sent once ``listen`` returned."""
    store, peer = open_store(), open_store()
    missed: list[tuple[int, int]] = []
    kept: list[alkstore.WakeReceiver] = []

    def churn(thread: int) -> None:
        for n in range(150):
            receiver = store.listen(f"t{thread}")
            peer.notify(f"t{thread}", None)
            if receiver.recv(5) is None:
                missed.append((thread, n))
            if n == 149 and thread < 2:
                kept.append(receiver)
            else:
                receiver.close()

    threads = [threading.Thread(target=churn, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert missed == []
    schema = store.settings.schema
    kept_keys = {receiver.channel for receiver in kept}
    assert store.listening_channels() == {channel_identifier(schema, k) for k in kept_keys}
    for receiver in kept:
        receiver.close()
    assert store.listening_channels() == set()


def test_a_reconnect_listens_only_to_channels_with_live_receivers(dsn: str, schema: str) -> None:
    name = f"alk_listener_{uuid.uuid4().hex[:12]}"
    store = alkstore.open(
        f"{dsn}{'&' if '?' in dsn else '?'}application_name={name}", schema=schema
    )
    assert isinstance(store, PostgresStore)
    try:
        for n in range(2_000):
            store.listen(f"gone {n}").close()
        with store.listen("live") as wakes:
            _terminate_listener(dsn, name)
            assert wakes.recv(15) == Wake(RECONNECT_CHANNEL)
            assert store.listening_channels() == {channel_identifier(schema, "live")}
    finally:
        store.close()


def _terminate_listener(dsn: str, application_name: str) -> None:
    """Kill the backend of the LISTEN connection named ``application_name``."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s "
            "AND (query ~ '^(UN)?LISTEN ' OR query = 'SELECT pg_listening_channels()')",
            (application_name,),
        ).fetchall()
    assert len(killed) == 1


def test_an_outage_is_one_warning_then_one_info_line_without_the_password(
    throwaway_server: ThrowawayServer, caplog: pytest.LogCaptureFixture
) -> None:
    password = "s3cret-pass"
    target = throwaway_server.dsn.replace("postgres@", f"postgres:{password}@")
    store = alkstore.open(target, connect_timeout_s=1)
    try:
        with store.listen("c") as wakes, caplog.at_level(logging.INFO, "alkstore.postgres"):
            throwaway_server.stop()
            time.sleep(4)  # several reconnect attempts fail meanwhile
            throwaway_server.start()
            assert wakes.recv(30) == Wake(RECONNECT_CHANNEL)
            store.notify("c", None)
            assert wakes.recv(10) == Wake("c")
    finally:
        store.close()
    records = [r for r in caplog.records if r.name == "alkstore.postgres"]
    assert [r.levelname for r in records] == ["WARNING", "INFO"]
    warning, info = (r.getMessage() for r in records)
    address = f"127.0.0.1:{throwaway_server.port}"
    assert warning.startswith(f"the LISTEN connection to PostgreSQL at {address} was lost: ")
    assert info.startswith(f"the LISTEN connection to PostgreSQL at {address} is back after ")
    for message in (warning, info):
        assert password not in message
        assert "postgresql://" not in message
