"""The wake watcher of an engine that finds commits by looking at its storage.

An engine without a native notify (no ``LISTEN``) learns of other
connections' commits by reading: a notices table, new rows, a change counter.
:class:`PollingWatcher` is everything around that reading — the thread, the
"from now on" baseline, the pacing, outages, death and shutdown — and feeds a
:class:`~alkstore.engine.WakeFanout`. The engine supplies a
:class:`WakeSource`: how to open a reader, look, tell a passing failure from a
fatal one, close, and (optionally) how to sleep between looks.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import Protocol, TypeVar

from alkstore._backoff import backoff_ceiling
from alkstore._errors import Closed, Database
from alkstore._fanout import WakeFanout
from alkstore._receivers import BufferedWakeReceiver

__all__ = ["PollingWatcher", "Waiter", "WakeSource"]

_BACKUP_POLL_S = 0.5
"""The poll of a watcher woken by every commit: it only guards against a missed
event, and each look costs an idle store CPU."""
_FOLLOW_UP_S = 0.1
"""How long a watcher woken by an event keeps looking again: a commit's write
raises the event before the commit can be read (its sync and its publication
raise none), so the looks that follow it span longer than a sync usually takes."""
_SHORTEST_FOLLOW_UP_S = 0.001
_FIRST_PAUSE_S = 0.05
_MAX_PAUSE_S = 1.0
_READY_SLICE_S = 0.05

_T = TypeVar("_T")


class Waiter(Protocol):
    """How a watcher sleeps between looks. Its :meth:`poke` may be called from
    any thread; everything else runs on the watcher's thread."""

    @property
    def event_driven(self) -> bool:
        """True when every commit, by anyone, ends :meth:`wait` (as kernel file
        events do): the watcher's poll then only backs up a missed event.

        The commit may end it before it can be read (a file event comes with
        its write, not its sync): the watcher looks again a few times after."""

    def wait(self, timeout: float) -> bool:
        """Sleep until woken or ``timeout`` seconds pass; False when the time passed."""

    def poke(self) -> None:
        """End the current or next :meth:`wait` now. Harmless after :meth:`close`."""

    def close(self) -> None:
        """Release what the waiter holds."""


class PokeWaiter:
    """The default :class:`Waiter`: woken by pokes (the store's own commits) and timeouts."""

    event_driven = False

    def __init__(self) -> None:
        self._poked = threading.Event()

    def wait(self, timeout: float) -> bool:
        woken = self._poked.wait(timeout)
        self._poked.clear()  # a poke from now on ends the next wait; the next look follows it
        return woken

    def poke(self) -> None:
        self._poked.set()

    def close(self) -> None:
        """Nothing to release."""


class WakeSource(abc.ABC):
    """What a :class:`PollingWatcher` reads: the part an engine writes.

    Every method but :meth:`waiter`'s pokes runs on the watcher's thread, one
    at a time, so a source needs no lock of its own. :meth:`open` is retried
    while it fails with a :meth:`transient` error, :meth:`look` likewise;
    any other error kills the watcher. A source should read with a
    connection of its own that never writes, and bound how long one read may
    block (a lock timeout): the watcher can only stop between reads.
    """

    @abc.abstractmethod
    def open(self) -> None:
        """Open the reader and read the baseline: what is committed now is not news.

        Called once as the watcher starts (again after a transient failure);
        ``listen`` returns only after it succeeded. Whatever it raises, it
        must release what it took first.
        """

    @abc.abstractmethod
    def look(self) -> Collection[str]:
        """The keys touched by commits since the baseline or the last look.

        A look that raises must move past nothing: the next one reads the
        same commits again, so the wakes an outage held back are delivered
        when it ends. Report every key the commit touched: a user channel on
        notify, ``queue_wake_key``/``stream_wake_key``/``SCHEDULES_WAKE_KEY``
        on the writes the engine contract lists. Keys nobody listens to are
        dropped by the fan-out.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release what :meth:`open` took; called once after a successful open."""

    def transient(self, error: Exception) -> BaseException | None:
        """The error to report if ``error`` is an outage that passes by itself
        (a lock held by someone else, a server restarting), else None.

        Return ``error`` itself or, e.g., the driver error chained inside it;
        its message goes into the outage's warning. The default treats every
        error as fatal.
        """
        return None

    def waiter(self) -> Waiter:
        """A new :class:`Waiter` for the watcher's thread, made as it starts and
        closed as it ends. The default is woken by the store's own commits
        (:meth:`PollingWatcher.poke`) and by its poll."""
        return PokeWaiter()


class PollingWatcher:
    """One store's wake watcher: a thread that looks for commits and fans them out.

    The engine's ``Store._watch(key)`` returns :meth:`subscribe`; its commit
    path calls :meth:`poke` after each local commit; its ``_close`` calls
    :meth:`stop`. The first subscriber starts the thread, which opens the
    ``source`` and reads its baseline before ``subscribe`` returns, so a
    receiver hears every commit from the moment it exists. The thread then
    sleeps on the source's :class:`Waiter` and looks:

    - polled (the default waiter): every ``interval_s``, and at once when poked;
    - woken by every commit (an event-driven waiter, e.g. file events): when
      woken, at most once per ``interval_s`` (the next look covers the
      commits made meanwhile), then again at gaps doubling from
      ``interval_s`` (at least 1 ms) for about 0.1 s, since an event may come
      before its commit can be read; with a backup poll every
      ``max(interval_s, backup_poll_s)`` seconds (``backup_poll_s`` 0.5 by default).

    A :meth:`WakeSource.transient` failure is an outage, not a death: one
    warning, a pause growing from 0.05 to 1 s between tries, one info when
    the source reads again, and the wakes held back are then delivered. A
    subscriber that finds the watcher starting in an outage waits up to
    ``start_timeout_s`` and raises :class:`~alkstore.Database` (the watcher
    keeps trying). Any other error kills the watcher: it is logged at error
    level (with its stack, unless it is a :class:`~alkstore.Database` whose
    message tells the story), every receiver is closed, and later subscribes
    raise :class:`~alkstore.Database` naming the cause. Wakes coalesce:
    declare ``Capabilities(wakes_coalesce=True)``.

    ``target`` names the storage in messages and the thread's name (never
    with a password); ``reads`` names what the source reads ("the file").
    Wiring it into an engine's store::

        self._watcher = PollingWatcher(
            NoticesSource(dsn), target=redact(dsn), log=log,
            interval_s=0.05, start_timeout_s=settings.connect_timeout_s,
        )

        def _watch(self, key: str) -> WakeReceiver:
            return self._watcher.subscribe(key)

        def _notify(self, channel: str, payload_json: str) -> None:
            ...  # insert the notice and commit
            self._watcher.poke()

        def _close(self) -> None:
            self._watcher.stop()
            ...
    """

    def __init__(
        self,
        source: WakeSource,
        *,
        target: str,
        log: logging.Logger,
        interval_s: float,
        start_timeout_s: float,
        reads: str = "the database",
        backup_poll_s: float | None = None,
    ) -> None:
        self._source = source
        self._backup_poll_s = backup_poll_s
        self._target = target
        self._log = log
        self._interval_s = interval_s
        self._start_timeout_s = start_timeout_s
        self._reads = reads
        self._fanout = WakeFanout(coalesce=True)
        self._lock = threading.Lock()
        self._waiter: Waiter | None = None
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._name = f"the wake watcher of {target!r}"
        self._outage = _Outage(self._name, reads, log)

    def subscribe(self, key: str) -> BufferedWakeReceiver:
        """A receiver woken by every commit that touches ``key`` from now on.

        Raises:
            Database: the watcher died (the cause is named and chained), or
                the source stayed in an outage for ``start_timeout_s`` while
                the watcher started (it keeps trying: a later call may succeed).
            Closed: the watcher was stopped.
        """
        self._start()
        return self._fanout.subscribe(key)

    @property
    def error(self) -> BaseException | None:
        """Why the watcher died, or None while it lives (or never started)."""
        failure = self._fanout.error
        return None if failure is None else failure.__cause__

    def poke(self) -> None:
        """Look for commits now rather than at the next poll (after a local commit)."""
        waiter = self._waiter
        if waiter is not None:
            waiter.poke()

    def stop(self) -> None:
        """Stop the thread, wait for it, and close every receiver. Idempotent."""
        with self._lock:
            self._stopping.set()
            thread = self._thread
        self.poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._fanout.close()

    def __repr__(self) -> str:
        return f"<PollingWatcher of {self._target!r}: {self._fanout!r}>"

    def _start(self) -> None:
        with self._lock:
            if self._stopping.is_set():
                raise Closed("the store is closed")
            self._fanout.check_usable()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"alkstore-watcher {self._target}", daemon=True
                )
                self._thread.start()
        self._wait_ready()
        self._fanout.check_usable()

    def _wait_ready(self) -> None:
        """Wait for the baseline, which must be read before subscribe returns ("from now on").

        A slow start is waited out; an outage longer than the start timeout is not.
        """
        deadline = time.monotonic() + self._start_timeout_s
        while not self._ready.wait(_READY_SLICE_S):
            failure = self._outage.error
            if failure is None:
                continue
            self.poke()  # someone is waiting: retry now, not after the outage's long pause
            if time.monotonic() >= deadline:
                raise Database(
                    f"listening to {self._target!r} failed: {self._reads} stayed unreadable "
                    f"({failure}) for {self._start_timeout_s:g} s; the watcher keeps "
                    "trying, so a later listen may succeed"
                ) from failure

    def _run(self) -> None:
        waiter = self._source.waiter()
        self._waiter = waiter
        try:
            if self._through_outages(waiter, self._opened):
                try:
                    self._watch(waiter)
                finally:
                    self._source.close()
        except BaseException as exc:
            self._die(exc)
        finally:
            self._ready.set()
            self._waiter = None
            waiter.close()

    def _opened(self) -> bool:
        self._source.open()
        return True

    def _watch(self, waiter: Waiter) -> None:
        self._ready.set()
        if waiter.event_driven:
            self._watch_events(waiter)
            return
        while not self._stopping.is_set():
            waiter.wait(self._interval_s)
            self._look(waiter)

    def _watch_events(self, waiter: Waiter) -> None:
        """Look when woken and a few times after; otherwise at the backup poll."""
        backup_poll_s = max(self._interval_s, self._backup_poll_s or _BACKUP_POLL_S)
        follow_ups: Iterator[float] = iter(())
        looked_at = time.monotonic()
        while not self._stopping.is_set():
            if waiter.wait(next(follow_ups, backup_poll_s)):
                # Under a stream of commits, look at most once per interval:
                # the next look covers every commit made meanwhile.
                self._stopping.wait(max(0.0, looked_at + self._interval_s - time.monotonic()))
                follow_ups = _follow_up_gaps(self._interval_s)
            self._look(waiter)
            looked_at = time.monotonic()

    def _look(self, waiter: Waiter) -> None:
        keys = self._through_outages(waiter, self._source.look)
        if keys:
            self._fanout.deliver(keys)

    def _through_outages(self, waiter: Waiter, read: Callable[[], _T]) -> _T | None:
        """``read()``, retried with a growing pause through transient failures; None once stopping.

        Raises:
            Exception: whatever else ``read`` raised.
        """
        while not self._stopping.is_set():
            try:
                result = read()
            except Exception as exc:
                reported = self._source.transient(exc)
                if reported is None:
                    raise
                waiter.wait(self._outage.failed(reported))
                continue
            self._outage.ended()
            return result
        return None

    def _die(self, exc: BaseException) -> None:
        if self._stopping.is_set():
            return  # closing the store is not a death
        self._log.error(
            "%s died, so every listener of this store is closed: %s",
            self._name,
            exc,
            # An alkstore error tells its story in its message; anything else may need the stack.
            exc_info=None if isinstance(exc, Database) else exc,
        )
        self._fanout.fail(exc, f"{self._name} died: {exc}")


def _follow_up_gaps(interval_s: float) -> Iterator[float]:
    """The pauses before the looks that follow a wake: from the interval (at
    least 1 ms), doubling, until the looks span ``_FOLLOW_UP_S``.

    A look that finds the commit does not end them: the event may also stand
    for a later commit, still syncing.
    """
    gap, spanned = max(interval_s, _SHORTEST_FOLLOW_UP_S), 0.0
    while spanned < _FOLLOW_UP_S:
        yield gap
        spanned += gap
        gap *= 2


class _Outage:
    """One warning when the source turns out unreadable, one info when it reads again."""

    def __init__(self, watcher: str, reads: str, log: logging.Logger) -> None:
        self._watcher = watcher
        self._reads = reads
        self._log = log
        self._failures = 0
        self._since = 0.0
        self.error: BaseException | None = None
        """The latest transient error while the outage lasts (read by subscribers)."""

    def failed(self, error: BaseException) -> float:
        """Record a failed read; return how long to pause before the next one."""
        if self.error is None:
            self._since = time.monotonic()
            self._log.warning(
                "%s cannot read %s (%s); it retries, backing off, and wakes wait until it can",
                self._watcher,
                self._reads,
                error,
            )
        self.error = error
        self._failures += 1
        return min(backoff_ceiling(_FIRST_PAUSE_S, self._failures), _MAX_PAUSE_S)

    def ended(self) -> None:
        """Record a successful read, logging the end of an outage."""
        if self.error is None:
            return
        self._log.info(
            "%s reads %s again, after %.1f s",
            self._watcher,
            self._reads,
            time.monotonic() - self._since,
        )
        self.error = None
        self._failures = 0
