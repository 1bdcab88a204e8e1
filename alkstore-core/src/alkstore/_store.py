"""The Store: one handle on every mechanism, whatever engine is behind it."""

from __future__ import annotations

import abc
import contextlib
import inspect
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from alkstore._adopt import adoptable, refused_kind
from alkstore._capabilities import Capabilities
from alkstore._codec import encode
from alkstore._errors import Closed, InvalidSpec
from alkstore._every import parse_spec
from alkstore._inspect import Inspector
from alkstore._lock import Lock
from alkstore._names import check_identifier, check_name, outbox_queue_name
from alkstore._offload import WouldWait
from alkstore._options import OUTBOX_QUEUE_OPTS, QueueOpts, ScheduleOpts, check_duration
from alkstore._outbox import Outbox
from alkstore._queue import Queue
from alkstore._receivers import WakeReceiver
from alkstore._scheduler import run_scheduler
from alkstore._stamp import JobStamp
from alkstore._store_basics import DEFAULT_SCHEDULER_LEASE_S, StoreBasics
from alkstore._stream import Stream
from alkstore._tx import TxHandle
from alkstore._values import Schedule

if TYPE_CHECKING:
    from alkstore._scheduler import DueSchedule, DueSchedules, Fired

__all__ = [
    "DEFAULT_SCHEDULER_LEASE_S", "StopSignal", "Store", "check_async_stop_signal",
    "check_schedule", "check_stop_signal", "check_store", "default_owner",
]  # fmt: skip


T = TypeVar("T")

_BUSY_TX_POLL_S = 0.002
"""How often ``close`` looks again at a transaction busy with a statement."""


class StopSignal(Protocol):
    """What ``run_schedules`` needs of its stop argument (a ``threading.Event`` fits)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


def check_store(store: object) -> None:
    """Refuse what is not an open-able store for a runner (``Worker``, ``Consumer``).

    Raises:
        TypeError: ``store`` is neither a ``Store`` nor an ``AsyncStore``.
    """
    from alkstore._async_store import AsyncStore  # noqa: PLC0415 - it imports this module

    if not isinstance(store, (Store, AsyncStore)):
        raise TypeError(
            "store must be a Store (alkstore.open) or an AsyncStore (alkstore.open_async), "
            f"not {type(store).__name__}"
        )


def check_stop_signal(stop: object) -> None:
    """Refuse, up front, a ``stop`` argument of a blocking runner that cannot
    say it is set, or whose ``wait()`` must be awaited (an ``asyncio.Event``:
    it would pass until the runner first waited on it).

    Raises:
        TypeError: ``stop`` has no ``is_set()`` and ``wait()``, or its
            ``wait()`` is a coroutine function.
    """
    _check_event(stop, "a threading.Event")
    if inspect.iscoroutinefunction(getattr(stop, "wait", None)):
        raise TypeError(
            f"stop must be a threading.Event, not {type(stop).__name__}: its wait() must be "
            "awaited, and this call blocks; in asyncio code use the run_async twin"
        )


def check_async_stop_signal(stop: object) -> None:
    """Refuse, up front, a ``stop`` argument of an async runner that is not an
    asyncio event: a ``threading.Event``'s ``wait()`` would block the event loop.

    Raises:
        TypeError: ``stop`` has no ``is_set()``, or its ``wait()`` is not a
            coroutine function.
    """
    _check_event(stop, "an asyncio.Event")
    if not inspect.iscoroutinefunction(getattr(stop, "wait", None)):
        raise TypeError(
            f"stop must be an asyncio.Event, not {type(stop).__name__}: its wait() "
            "would block the event loop"
        )


def _check_event(stop: object, kind: str) -> None:
    if not (callable(getattr(stop, "is_set", None)) and callable(getattr(stop, "wait", None))):
        raise TypeError(f"stop must be {kind} (is_set() and wait()), not {type(stop).__name__}")


class Store(StoreBasics, abc.ABC):
    """One open store: notify/listen, streams, queues, outboxes, locks, schedules.

    Get one with ``alkstore.open(target)``. A Store is safe to share between
    threads. Mechanism handles (``queue``, ``stream``, ``outbox``) are cheap
    views. After :meth:`close` every call raises :class:`~alkstore.Closed`.

    Every name-bearing method checks its names (``InvalidName``,
    ``ReservedName``) and encodes its payload (``Codec``) before touching the
    database, so bad input changes nothing.
    """

    cron_schedules: ClassVar[bool] = False
    """Engines set it True when ``_schedule`` stores ``opts.tz`` and
    ``_due_schedules`` gives each ``DueSchedule`` its ``spec`` and ``tz``
    (engine contract 1.4); core refuses cron specs on a store without it."""

    def __init__(
        self,
        location: str,
        capabilities: Capabilities,
        *,
        scheduler_lease_s: float = DEFAULT_SCHEDULER_LEASE_S,
    ) -> None:
        super().__init__(location, capabilities, scheduler_lease_s=scheduler_lease_s)
        # Guards _closed against transactions beginning while the store closes.
        self._lifecycle_lock = threading.Lock()
        self._open_txs: weakref.WeakSet[TxHandle] = weakref.WeakSet()

    # Lifecycle

    def close(self) -> None:
        """Release every connection and close every receiver; idempotent.

        A transaction still open on one of the store's connections is rolled
        back first (its later ``commit`` raises ``Closed``), so nothing it
        wrote stays held: no lock, no connection; a statement under way on it
        in another thread is let finish first. A transaction adopted with
        :meth:`adopt_tx` belongs to the caller and is left alone.
        """
        with self._lifecycle_lock:
            if self._closed:
                return
            self._closed = True
            open_txs = list(self._open_txs)
        # Each as soon as no statement is under way on it: a statement may be
        # waiting on a row lock that another of them holds.
        while open_txs := [tx for tx in open_txs if not tx._end_with_store(wait=False)]:
            time.sleep(_BUSY_TX_POLL_S)
        self._close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # notify / listen

    def notify(self, channel: str, payload: object) -> None:
        """Wake every current listener of ``channel``, fire-and-forget, in its own transaction.

        Raises:
            PayloadTooLarge: the encoded payload exceeds the engine's notify limit.
        """
        self._check_open()
        channel = check_name(channel, "channel")
        self._notify(channel, self._check_notify_payload(encode(payload)))

    def listen(self, channel: str) -> WakeReceiver:
        """Return a receiver of wakes for notifies on ``channel`` committed from now on."""
        self._check_open()
        return self._watch(check_name(channel, "channel"))

    # Mechanism handles

    def stream(self, name: str) -> Stream:
        """Return the stream ``name`` (created on first publish)."""
        self._check_open()
        return self._stream(check_name(name, "stream"))

    def queue(self, name: str, opts: QueueOpts | None = None) -> Queue:
        """Return the queue ``name``, declaring ``opts`` for it in this Store.

        Jobs are stamped with the opts at enqueue. Without ``opts``, the opts
        this Store last declared for ``name`` apply, else the defaults; the
        same goes for ``tx.enqueue_tx``.
        """
        self._check_open()
        name = check_name(name, "queue")
        return self._queue(name, self._declare_queue_opts(name, opts))

    def outbox(self, name: str) -> Outbox:
        """Return the outbox ``name`` over its backing queue ``__alkstore_outbox:{name}``."""
        self._check_open()
        name = check_name(name, "outbox")
        return Outbox(name, self._queue(outbox_queue_name(name), OUTBOX_QUEUE_OPTS))

    # Locks

    def try_lock(self, name: str, owner: str, ttl_s: float) -> Lock | None:
        """Acquire the lock ``name`` for ``owner`` for ``ttl_s`` seconds.

        Returns None when another owner holds it unexpired (contention is a
        value, never an error). The same owner re-acquiring a lock it holds
        gets a handle and the TTL is not refreshed; use ``renew`` for that.
        """
        self._check_open()
        name = check_name(name, "lock")
        owner = check_identifier(owner, "lock owner")
        return self._try_lock(name, owner, check_duration(ttl_s, "ttl_s", zero_ok=False))

    # Scheduler

    def schedule(
        self,
        name: str,
        spec: str,
        queue: str,
        payload: object,
        opts: ScheduleOpts | None = None,
    ) -> Schedule:
        """Create or replace the schedule ``name``: enqueue ``payload`` into
        ``queue`` at every boundary of ``spec``.

        ``spec`` is ``@every <n><unit>`` (boundaries anchored at the schedule's
        creation time), five cron fields or ``@hourly``, ``@daily``,
        ``@weekly``, ``@monthly`` (wall-clock boundaries in ``opts.tz``, UTC by
        default; see the cron guide for daylight-saving changes). Schedules
        fire only while some process runs :meth:`run_schedules`.

        Raises:
            InvalidSpec: ``spec`` is none of these, an ``@every`` spec was
                given ``opts.tz``, or this store's engine predates cron
                schedules (engine contract 1.4).
        """
        self._check_open()
        name, interval_s, queue, opts = check_schedule(name, spec, queue, opts)
        if interval_s == 0:
            refuse_cron_unless_stored(self, spec)
        self._refuse_key_unless_kept(opts.key)
        return self._schedule(name, spec, interval_s, queue, encode(payload), opts)

    def unschedule(self, name: str) -> bool:
        """Delete the schedule ``name``; True if it existed."""
        self._check_open()
        return self._unschedule(check_name(name, "schedule"))

    def run_schedules(self, stop: StopSignal, *, owner: str | None = None) -> None:
        """Fire due schedules until ``stop`` is set.

        One runner across all processes is leader (it holds the lock
        ``__alkstore_scheduler``); the others wait as standbys. For each
        elapsed boundary the leader enqueues once, the enqueue and the
        boundary advance in one transaction; at most 64 missed boundaries
        are caught up, then it skips to the next future boundary.

        Raises:
            LeadershipLost: this runner was leader and failed to renew.
            TypeError: ``stop`` is not an event (``threading.Event``).
        """
        self._check_open()
        check_stop_signal(stop)
        owner = default_owner() if owner is None else check_identifier(owner, "owner")
        run_scheduler(self, stop, owner)

    # Transactions

    def begin_tx(self) -> TxHandle:
        """Open a transaction for a business write and ``*_tx`` side effects."""
        self._check_open()
        return self._track_tx(self._begin_tx())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[TxHandle]:
        """Run the block in a transaction: commit on success, roll back on an exception."""
        with self.begin_tx() as tx:
            yield tx

    def adopt_tx(self, connection: Any) -> TxHandle:
        """Write ``*_tx`` side effects through the caller's own open transaction.

        ``connection`` is what the application holds: a driver connection
        (``sqlite3.Connection``, ``psycopg.Connection``), an SQLAlchemy
        ``Connection`` or ``Session``, or Django's ``django.db.connection``
        inside ``transaction.atomic()``. The caller owns the transaction: its
        commit or rollback decides the side effects too, savepoints included
        (rolling one back drops what was written inside it). Outside one, a
        driver connection begins a transaction (its caller commits it, or
        ``tx.commit()`` does); an SQLAlchemy connection begins one as its
        autobegin would. A framework's handle leaves commit and rollback to
        the framework (``tx.commit()`` raises ``RuntimeError``).

        Raises:
            TypeError: ``connection`` is none of these, or the engine's
                driver does not match (the message lists what is accepted).
            ValueError: the connection reaches other storage than this
                store's, or Django's connection is not in a transaction.
        """
        self._check_open()
        found = adoptable(connection)
        try:
            tx = self._adopt_tx(found.connection)
        except TypeError as exc:
            raise refused_kind(exc, found) from None
        tx.owner, tx.catch_up = found.owner, found.catch_up
        return tx

    # Inspection

    def inspect(self) -> Inspector:
        """Return a read-only view of queues, jobs, streams, locks and schedules."""
        self._check_open()
        return self._inspect()

    # Helpers for engines and mechanism handles

    def _disown_after_fork(self, parent_pid: int) -> None:
        self._lifecycle_lock = threading.Lock()  # another thread may have held it
        super()._disown_after_fork(parent_pid)

    def _track_tx(self, tx: TxHandle) -> TxHandle:
        """Remember an open transaction, so ``close`` can roll it back."""
        with self._lifecycle_lock:
            if not self._closed:
                self._open_txs.add(tx)
                return tx
        tx._end_with_store()
        raise Closed(f"{self!r} closed while the transaction began")

    def _closing_ends(self, tx: TxHandle) -> bool:
        """Whether ``close`` rolls ``tx`` back and has begun: it is closed, and
        ``tx`` is one of its own (not adopted). A forked child's copy of a store
        is closed too, but what it holds is the parent's, never to be touched."""
        return self._closed and self._inherited_from is None and tx in self._open_txs

    def _forget_tx(self, tx: TxHandle) -> None:
        with self._lifecycle_lock:
            self._open_txs.discard(tx)

    # Engine hooks: arguments are already checked and encoded.

    @abc.abstractmethod
    def _close(self) -> None:
        """Release connections, stop watchers, close every receiver."""

    @abc.abstractmethod
    def _notify(self, channel: str, payload_json: str) -> None:
        """Send a notify in its own transaction."""

    @abc.abstractmethod
    def _watch(self, key: str) -> WakeReceiver:
        """Return a receiver woken by every commit touching ``key`` from when this returns.

        ``key`` is a user's channel (``listen``) or an internal wake key
        (``queue_wake_key``, ``stream_wake_key``, ``SCHEDULES_WAKE_KEY``).
        """

    @abc.abstractmethod
    def _stream(self, name: str) -> Stream:
        """Return the engine's Stream view."""

    @abc.abstractmethod
    def _queue(self, name: str, opts: QueueOpts) -> Queue:
        """Return the engine's Queue view (``name`` may be an outbox's backing queue)."""

    @abc.abstractmethod
    def _try_lock(self, name: str, owner: str, ttl_s: float) -> Lock | None:
        """Acquire or re-acquire (without refreshing) the lock, else None."""

    @abc.abstractmethod
    def _schedule(
        self,
        name: str,
        spec: str,
        interval_s: int,
        queue: str,
        payload_json: str,
        opts: ScheduleOpts,
    ) -> Schedule:
        """Upsert the schedule row."""

    @abc.abstractmethod
    def _unschedule(self, name: str) -> bool:
        """Delete the schedule row; True if one went."""

    @abc.abstractmethod
    def _due_schedules(self) -> DueSchedules:
        """Read every schedule whose next boundary is at or before the engine's now."""

    @abc.abstractmethod
    def _fire_boundary(
        self,
        lock: Lock,
        schedule: DueSchedule,
        boundary: float,
        advance_to: float,
        stamp: JobStamp,
    ) -> Fired:
        """Fire one boundary in ONE transaction, or write nothing but (at most) the
        lock's renewal.

        Renew ``lock`` for ``lock.ttl_s`` (only its unexpired holder can), else
        return ``Fired.NOT_LEADER``; move the schedule from ``boundary`` to
        ``advance_to`` only if it is still at ``boundary``, else return
        ``Fired.SCHEDULE_CHANGED``; enqueue ``schedule.payload_json`` into
        ``schedule.queue`` stamped with ``stamp`` (waking the queue); commit.
        """

    @abc.abstractmethod
    def _until_next_fire(self) -> float | None:
        """Seconds until the earliest schedule's next boundary; None with no schedules."""

    @abc.abstractmethod
    def _begin_tx(self) -> TxHandle:
        """Start a transaction on a connection of the engine's."""

    @abc.abstractmethod
    def _inspect(self) -> Inspector:
        """Return the engine's Inspector."""

    @abc.abstractmethod
    def _adopt_tx(self, connection: Any) -> TxHandle:
        """Wrap the caller's connection; refuse one to other storage with a clear error."""

    # Optional hooks, with defaults.

    def _without_waiting(self, call: Callable[..., T], *args: Any) -> T:
        """Run ``call(*args)``, one of this store's own hooks, on the calling thread
        if it can finish without waiting (for a lock, a disk flush or the
        network); else raise :class:`WouldWait` having done nothing.

        The async API over this store (core's thread offload) asks first, on
        the event loop's thread, and runs the call on one of its threads only
        when refused: a prompt call saves the hand-off between threads. A
        call must not block the loop for longer than a short statement
        takes. The default refuses every call.
        """
        raise WouldWait


def check_schedule(
    name: str, spec: str, queue: str, opts: ScheduleOpts | None
) -> tuple[str, int, str, ScheduleOpts]:
    """The arguments of ``Store.schedule`` checked: name, interval (0 for a cron
    spec), queue and opts."""
    name = check_name(name, "schedule")
    if opts is None:
        opts = ScheduleOpts()
    elif not isinstance(opts, ScheduleOpts):
        raise TypeError(f"opts must be ScheduleOpts or None, not {type(opts).__name__}")
    interval_s = parse_spec(spec, opts.tz)
    queue = check_name(queue, "queue")
    return name, interval_s, queue, opts


def refuse_cron_unless_stored(store: Store, spec: str) -> None:
    """Refuse a cron spec on a store whose engine cannot keep one.

    An engine written for engine contract 1.3 or older stores no time zone
    and reads schedules back without their spec, so its runner could only
    plan by interval: it sets no ``Store.cron_schedules``.

    Raises:
        InvalidSpec: ``type(store).cron_schedules`` is not True.
    """
    if not getattr(type(store), "cron_schedules", False):
        raise InvalidSpec(
            f"schedule spec {spec!r} is a cron spec, which {type(store).__name__} cannot "
            "store: its engine predates cron schedules (engine contract 1.4, "
            "Store.cron_schedules); use an '@every' spec, or upgrade the engine"
        )


def default_owner() -> str:
    """An owner id unique to this process and call: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
