"""Core's polling watcher, fed by a source in memory as a polling engine's table would be.

The SQLite engine's watcher is the same class reading a real file (its own
tests and the contract suite); PostgreSQL proves it with a real table in
test_commit_cursor_postgres.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import alkstore
from alkstore import Wake, _polling
from alkstore.engine import PollingWatcher, WakeSource

LOGGER = "alkstore.tests.polling"


class Outage(Exception):
    """What the test source treats as passing by itself (a lock, a restart)."""


class Notices(WakeSource):
    """A notices table in memory: commits append keys; the watcher reads past them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: list[str] = []
        self._read = 0
        self.failing: Exception | None = None
        """Raised by every open and look while set."""
        self.looks = 0
        self.closes = 0

    def commit(self, *keys: str) -> None:
        with self._lock:
            self._rows.extend(keys)

    def open(self) -> None:
        self._fail_if_told()
        with self._lock:
            self._read = len(self._rows)

    def look(self) -> set[str]:
        self.looks += 1
        self._fail_if_told()
        with self._lock:
            keys = set(self._rows[self._read :])
            self._read = len(self._rows)
        return keys

    def close(self) -> None:
        self.closes += 1

    def transient(self, error: Exception) -> BaseException | None:
        return error if isinstance(error, Outage) else None

    def _fail_if_told(self) -> None:
        failing = self.failing
        if failing is not None:
            raise failing


class EventWaiter:
    """A waiter every commit wakes, as kernel file events do; counts its waits."""

    event_driven = True

    def __init__(self) -> None:
        self._woken = threading.Event()

    def wait(self, timeout: float) -> bool:
        woken = self._woken.wait(timeout)
        self._woken.clear()
        return woken

    def poke(self) -> None:
        self._woken.set()

    def close(self) -> None:
        """Nothing to release."""


class EventNotices(Notices):
    def waiter(self) -> EventWaiter:
        return EventWaiter()


Watching = Callable[..., PollingWatcher]


@pytest.fixture
def watching() -> Iterator[Watching]:
    """Make watchers of a source (interval 10 ms unless told); stops them all at the end."""
    made: list[PollingWatcher] = []

    def make(
        source: WakeSource, *, interval_s: float = 0.01, start_timeout_s: float = 5.0
    ) -> PollingWatcher:
        watcher = PollingWatcher(
            source,
            target="memory:test",
            log=logging.getLogger(LOGGER),
            interval_s=interval_s,
            start_timeout_s=start_timeout_s,
        )
        made.append(watcher)
        return watcher

    yield make
    for watcher in made:
        watcher.stop()


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == level]


def watcher_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "alkstore-watcher memory:test"]


def test_a_receiver_hears_the_commits_made_after_it_exists(watching: Watching) -> None:
    notices = Notices()
    watcher = watching(notices, interval_s=10.0)
    notices.commit("orders")  # before the baseline: not news
    orders, other = watcher.subscribe("orders"), watcher.subscribe("other")
    assert orders.recv(0.1) is None
    notices.commit("orders", "orders", "nobody-listens")
    watcher.poke()  # a local commit: no waiting for the 10 s poll
    assert orders.recv(5) == Wake("orders")
    assert orders.recv(0.1) is None  # wakes of one look coalesce
    assert other.recv(0) is None


def test_the_poll_finds_commits_nobody_poked_about(watching: Watching) -> None:
    notices = Notices()
    receiver = watching(notices, interval_s=0.05).subscribe("orders")
    notices.commit("orders")
    assert receiver.recv(5) == Wake("orders")


def test_an_outage_is_waited_out_warned_once_and_its_wakes_delivered(
    watching: Watching, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    notices = Notices()
    watcher = watching(notices)
    receiver = watcher.subscribe("orders")
    notices.failing = Outage("the server restarts")
    notices.commit("orders")
    time.sleep(0.5)  # many failed looks, pausing longer each time
    assert receiver.recv(0) is None
    assert watcher.error is None
    notices.failing = None
    assert receiver.recv(5) == Wake("orders")
    [warning] = records(caplog, logging.WARNING)
    assert (
        "the wake watcher of 'memory:test' cannot read the database (the server restarts)"
        in warning.getMessage()
    )
    [info] = records(caplog, logging.INFO)
    assert "the wake watcher of 'memory:test' reads the database again" in info.getMessage()
    assert records(caplog, logging.ERROR) == []


def test_a_start_in_an_outage_fails_subscribe_after_the_timeout_but_not_the_watcher(
    watching: Watching,
) -> None:
    notices = Notices()
    notices.failing = Outage("locked")
    watcher = watching(notices, start_timeout_s=0.2)
    with pytest.raises(alkstore.Database, match=r"the database stayed unreadable \(locked\)"):
        watcher.subscribe("orders")
    threading.Timer(0.1, setattr, [notices, "failing", None]).start()
    receiver = watcher.subscribe("orders")  # waits for the baseline past the outage
    notices.commit("orders")
    assert receiver.recv(5) == Wake("orders")


@pytest.mark.parametrize(
    ("error", "with_stack"),
    [(RuntimeError("the table was dropped"), True), (alkstore.Database("the file is gone"), False)],
    ids=["driver-error", "alkstore-error"],
)
def test_any_other_error_kills_the_watcher_loudly(
    watching: Watching, caplog: pytest.LogCaptureFixture, error: Exception, with_stack: bool
) -> None:
    notices = Notices()
    watcher = watching(notices)
    receiver = watcher.subscribe("orders")
    notices.failing = error
    assert receiver.recv(5) is None
    assert receiver.closed
    assert watcher.error is error
    [logged] = records(caplog, logging.ERROR)
    assert logged.getMessage() == (
        "the wake watcher of 'memory:test' died, so every listener of this store is "
        f"closed: {error}"
    )
    assert (logged.exc_info is not None) == with_stack
    with pytest.raises(
        alkstore.Database, match=f"watcher of 'memory:test' died: {error}"
    ) as raised:
        watcher.subscribe("orders")
    assert raised.value.__cause__ is error
    watcher.stop()
    assert notices.closes == 1


def test_a_failed_open_kills_the_watcher_before_subscribe_returns(watching: Watching) -> None:
    notices = Notices()
    notices.failing = PermissionError("not readable")
    watcher = watching(notices)
    with pytest.raises(alkstore.Database, match="died: not readable"):
        watcher.subscribe("orders")
    assert notices.closes == 0  # nothing was opened


def test_stop_ends_the_thread_closes_receivers_and_is_no_death(
    watching: Watching, caplog: pytest.LogCaptureFixture
) -> None:
    notices = Notices()
    watcher = watching(notices, interval_s=10.0)
    receiver = watcher.subscribe("orders")
    watcher.stop()
    watcher.stop()
    assert watcher_threads() == []
    assert receiver.closed
    assert notices.closes == 1
    assert watcher.error is None
    assert records(caplog, logging.ERROR) == []
    with pytest.raises(alkstore.Closed):
        watcher.subscribe("orders")


def test_stop_during_an_outage_at_start_ends_the_thread(watching: Watching) -> None:
    notices = Notices()
    notices.failing = Outage("locked")
    watcher = watching(notices, start_timeout_s=0.1)
    with pytest.raises(alkstore.Database, match="stayed unreadable"):
        watcher.subscribe("orders")
    watcher.stop()
    assert watcher_threads() == []
    assert notices.closes == 0


def test_a_polled_watcher_looks_every_interval(watching: Watching) -> None:
    notices = Notices()
    watching(notices, interval_s=0.05).subscribe("orders")
    time.sleep(1.0)
    assert 5 <= notices.looks <= 21


def test_an_event_driven_watcher_idles_on_a_half_second_backup_poll(watching: Watching) -> None:
    # Idle cost: without events it looks twice a second, however short the interval.
    notices = EventNotices()
    watching(notices, interval_s=0.001).subscribe("orders")
    time.sleep(1.2)
    assert notices.looks <= 3


def test_an_event_driven_watcher_looks_at_most_once_per_interval_under_a_stream_of_commits(
    watching: Watching,
) -> None:
    notices = EventNotices()
    watcher = watching(notices, interval_s=0.1)
    receiver = watcher.subscribe("orders")
    started = time.monotonic()
    while time.monotonic() - started < 0.5:
        notices.commit("orders")
        watcher.poke()
        time.sleep(0.002)
    assert notices.looks <= 7
    assert receiver.recv(5) == Wake("orders")


def test_an_event_driven_watcher_finds_a_commit_readable_only_after_its_event(
    watching: Watching, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file event comes with a commit's write, before its sync and its
    # publication make it readable; the backup poll (30 s here) is too late.
    monkeypatch.setattr(_polling, "_BACKUP_POLL_S", 30.0)
    notices = EventNotices()
    watcher = watching(notices, interval_s=0.001)
    receiver = watcher.subscribe("orders")
    for readable_after_s in (0.002, 0.01, 0.05):
        time.sleep(0.2)  # the watcher is back to waiting for an event
        watcher.poke()  # the commit's write
        threading.Timer(readable_after_s, notices.commit, ["orders"]).start()
        assert receiver.recv(5) == Wake("orders")


def test_after_an_event_the_watcher_looks_again_a_few_times_then_only_at_the_backup_poll(
    watching: Watching, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_polling, "_BACKUP_POLL_S", 30.0)
    notices = EventNotices()
    watcher = watching(notices, interval_s=0.001)
    watcher.subscribe("orders")
    watcher.poke()
    time.sleep(0.6)
    looks_after_the_event = notices.looks
    time.sleep(0.6)
    assert 2 <= looks_after_the_event <= 10
    assert notices.looks == looks_after_the_event
