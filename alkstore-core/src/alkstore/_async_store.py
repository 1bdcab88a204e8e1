"""The AsyncStore: every mechanism, awaited, whatever engine is behind it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, Literal, TypeVar

from alkstore._adopt import CallerThread, adoptable_async, on_its_thread, refused_kind
from alkstore._async_inspect import AsyncInspector
from alkstore._async_lock import AsyncLock
from alkstore._async_outbox import AsyncOutbox
from alkstore._async_queue import AsyncQueue
from alkstore._async_stream import AsyncStream
from alkstore._async_tx import AsyncTxHandle
from alkstore._capabilities import Capabilities
from alkstore._codec import encode
from alkstore._errors import Closed
from alkstore._names import check_identifier, check_name, outbox_queue_name
from alkstore._offload import Lane, Offloader, WouldWait
from alkstore._options import OUTBOX_QUEUE_OPTS, QueueOpts, ScheduleOpts, check_duration
from alkstore._receivers import WakeReceiver
from alkstore._scheduler import run_scheduler
from alkstore._store import Store, check_schedule, default_owner, refuse_cron_unless_stored
from alkstore._store_basics import DEFAULT_SCHEDULER_LEASE_S, StoreBasics
from alkstore._tx import TxHandle
from alkstore._values import Schedule

__all__ = ["PROMPT_TURN_S", "AsyncStore"]

T = TypeVar("T")
_PromptCall = Callable[..., Any]
"""``Store._without_waiting`` of a companion: ``call(hook, *args)``, or ``WouldWait``."""

_BEGIN_POLL_S = 0.002
"""How often ``close`` looks again for a ``begin_tx`` under way to end."""

PROMPT_TURN_S = 0.002
"""Calls an engine runs on the loop's thread (``Store._without_waiting``) give
the loop a turn at least this often, so its other tasks never wait longer."""


class AsyncStore(StoreBasics):
    """One open store for asyncio code: :class:`~alkstore.Store` with ``await`` in
    front of every call that touches the database.

    Get one with ``await alkstore.open_async(target)`` (or ``async with``).
    Same names, arguments, results and errors as the sync store. Handle
    getters (``queue``, ``stream``, ``outbox``, ``inspect``) stay plain calls;
    receivers are the sync store's (``await recv_async``, ``async for``).

    Engines: every async hook has a default that runs the matching sync hook
    of the store's *companion*, a sync :class:`~alkstore.Store` on the same
    target opened by :meth:`_open_companion`, on a small bounded pool of
    threads owned by this store. A native engine overrides the hooks it does
    natively (see the engine authors' guide).
    """

    def __init__(
        self,
        location: str,
        capabilities: Capabilities,
        *,
        scheduler_lease_s: float = DEFAULT_SCHEDULER_LEASE_S,
    ) -> None:
        super().__init__(location, capabilities, scheduler_lease_s=scheduler_lease_s)
        self._offloader = Offloader(type(self).__name__)
        self._companion_store: Store | None = None
        self._companion_lock = threading.Lock()
        self._open_txs: weakref.WeakSet[AsyncTxHandle] = weakref.WeakSet()
        self._begins_under_way = 0
        self._last_turn = 0.0  # when a prompt call last gave the loop a turn
        self._prompt_call: _PromptCall | Literal[False] | None = None
        """The companion's ``_without_waiting``; False if it has none; None before it opens."""
        self._loop = _running_loop()
        """The event loop the store belongs to: the one it was made in, or first used in."""

    # Lifecycle

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()
        if _running_loop() is not self._loop:
            self._check_loop()

    def _check_loop(self) -> None:
        """Refuse a call made on an event loop other than the store's.

        Connections, pools and wake listeners live on the loop the store was
        opened in: used from another, a store would half work (a pool that
        cannot refill, wakes that never come). A plain call (a handle getter)
        from code outside any loop is fine.
        """
        running = _running_loop()
        if running is None or running is self._loop:
            return
        if self._loop is None:
            self._loop = running
            return
        state = "now closed" if self._loop.is_closed() else "still open"
        raise RuntimeError(
            f"{self!r} belongs to the event loop it was opened in ({state}), "
            "not this one: open a store in each event loop (each asyncio.run) that uses one"
        )

    def _disown_after_fork(self, parent_pid: int) -> None:
        self._companion_lock = threading.Lock()  # another thread may have held it
        super()._disown_after_fork(parent_pid)

    async def close(self) -> None:
        """Release every connection and close every receiver; idempotent.

        A transaction still open on the store is rolled back first (its later
        ``commit`` raises ``Closed``); an adopted one is left to its caller.
        """
        if self._closed:
            return
        self._check_loop()
        self._closed = True
        # All at once: one's rollback may wait for a statement under way on it,
        # which may wait on a row lock that another of them holds; and a begin
        # under way may wait on one too, then ends what it began.
        ending = [tx._end_with_store() for tx in list(self._open_txs)]
        await asyncio.gather(*ending, self._begins_ended())
        try:
            await self._close()
        finally:
            companion = self._companion_store
            if companion is not None:
                await self._offloaded(companion.close)
            self._offloader.close()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # notify / listen

    async def notify(self, channel: str, payload: object) -> None:
        """Wake every current listener of ``channel``, fire-and-forget, in its own transaction.

        Raises:
            PayloadTooLarge: the encoded payload exceeds the engine's notify limit.
        """
        self._check_open()
        channel = check_name(channel, "channel")
        await self._notify(channel, self._check_notify_payload(encode(payload)))

    async def listen(self, channel: str) -> WakeReceiver:
        """Return a receiver of wakes for notifies on ``channel`` committed from now on."""
        self._check_open()
        return await self._watch(check_name(channel, "channel"))

    # Mechanism handles

    def stream(self, name: str) -> AsyncStream:
        """Return the stream ``name`` (created on first publish)."""
        self._check_open()
        return self._stream(check_name(name, "stream"))

    def queue(self, name: str, opts: QueueOpts | None = None) -> AsyncQueue:
        """Return the queue ``name``, declaring ``opts`` for it in this store
        (see ``Store.queue``)."""
        self._check_open()
        name = check_name(name, "queue")
        return self._queue(name, self._declare_queue_opts(name, opts))

    def outbox(self, name: str) -> AsyncOutbox:
        """Return the outbox ``name`` over its backing queue ``__alkstore_outbox:{name}``."""
        self._check_open()
        name = check_name(name, "outbox")
        return AsyncOutbox(name, self._queue(outbox_queue_name(name), OUTBOX_QUEUE_OPTS))

    # Locks

    async def try_lock(self, name: str, owner: str, ttl_s: float) -> AsyncLock | None:
        """Acquire the lock ``name`` for ``owner`` for ``ttl_s`` seconds; None when
        another owner holds it unexpired (see ``Store.try_lock``)."""
        self._check_open()
        name = check_name(name, "lock")
        owner = check_identifier(owner, "lock owner")
        return await self._try_lock(name, owner, check_duration(ttl_s, "ttl_s", zero_ok=False))

    # Scheduler

    async def schedule(
        self,
        name: str,
        spec: str,
        queue: str,
        payload: object,
        opts: ScheduleOpts | None = None,
    ) -> Schedule:
        """Create or replace the schedule ``name`` (see ``Store.schedule``).

        Raises:
            InvalidSpec: ``spec`` is not a valid spec (see ``Store.schedule``).
        """
        self._check_open()
        name, interval_s, queue, opts = check_schedule(name, spec, queue, opts)
        self._refuse_key_unless_kept(opts.key)
        return await self._schedule(name, spec, interval_s, queue, encode(payload), opts)

    async def unschedule(self, name: str) -> bool:
        """Delete the schedule ``name``; True if it existed."""
        self._check_open()
        return await self._unschedule(check_name(name, "schedule"))

    async def run_schedules(self, stop: asyncio.Event, *, owner: str | None = None) -> None:
        """Fire due schedules until ``stop`` is set (see ``Store.run_schedules``).

        The leader's loop runs on a thread of its own through the companion
        store; cancelling this await stops it.

        Raises:
            LeadershipLost: this runner was leader and failed to renew.
            TypeError: ``stop`` is not an event (``asyncio.Event``).
        """
        self._check_open()
        if not isinstance(stop, asyncio.Event):
            raise TypeError(f"stop must be an asyncio.Event, not {type(stop).__name__}")
        owner = default_owner() if owner is None else check_identifier(owner, "owner")
        companion = await self._companion()
        halt = threading.Event()
        relay = asyncio.ensure_future(_relay(stop, halt))
        runner = asyncio.ensure_future(asyncio.to_thread(run_scheduler, companion, halt, owner))
        try:
            await asyncio.shield(runner)
        finally:
            halt.set()
            relay.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.shield(runner)  # the thread is gone before we return

    # Transactions

    async def begin_tx(self) -> AsyncTxHandle:
        """Open a transaction for a business write and ``*_tx`` side effects."""
        self._check_open()
        self._begins_under_way += 1  # close waits for these: see _track_tx
        try:
            return await self._track_tx(await self._begin_tx())
        finally:
            self._begins_under_way -= 1

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncTxHandle]:
        """Run the block in a transaction: commit on success, roll back on an
        exception (cancellation included)."""
        async with await self.begin_tx() as tx:
            yield tx

    async def adopt_tx(self, connection: Any) -> AsyncTxHandle:
        """Write ``*_tx`` side effects through the caller's own open transaction
        (see ``Store.adopt_tx``); the caller's commit or rollback decides them.

        Accepts what ``Store.adopt_tx`` does and the asyncio kinds: a
        ``psycopg.AsyncConnection`` or ``aiosqlite.Connection``, an SQLAlchemy
        ``AsyncConnection`` or ``AsyncSession``. A sync connection is used
        on the calling thread, where its caller uses it; an aiosqlite one on
        aiosqlite's own thread.
        """
        self._check_open()
        found = await adoptable_async(connection)
        try:
            tx = await self._adopt_tx(found.connection)
        except TypeError as exc:
            raise refused_kind(exc, found) from None
        tx.owner, tx.catch_up = found.owner, found.catch_up
        return tx

    # Inspection

    def inspect(self) -> AsyncInspector:
        """Return a read-only view of queues, jobs, streams, locks and schedules."""
        self._check_open()
        return self._inspect()

    # Helpers for engines and mechanism handles

    async def _begins_ended(self) -> None:
        while self._begins_under_way:
            await asyncio.sleep(_BEGIN_POLL_S)

    async def _track_tx(self, tx: AsyncTxHandle) -> AsyncTxHandle:
        """Remember an open transaction, so ``close`` can roll it back; one begun
        while the store closed (the close did not know of it) is ended first."""
        if self._closed:
            await tx._end_with_store()
            raise Closed(f"{self!r} closed while the transaction began")
        self._open_txs.add(tx)
        return tx

    def _forget_tx(self, tx: AsyncTxHandle) -> None:
        self._open_txs.discard(tx)

    async def _offloaded(
        self, call: Callable[..., T], *args: Any, abandon: Callable[[T], None] | None = None
    ) -> T:
        """Await ``call(*args)``, a hook of the companion: run here when the companion
        can run it without waiting (``Store._without_waiting``), else on this
        store's threads (see ``Offloader.run``)."""
        prompt = self._prompt_call
        if prompt is None and self._companion_store is not None:
            prompt = self._prompt_call = _prompt_entry(self._companion_store)
        if prompt:
            if time.monotonic() - self._last_turn >= PROMPT_TURN_S:
                # A loop of prompt calls must not starve the loop's other tasks.
                await asyncio.sleep(0)
                self._last_turn = time.monotonic()
            try:
                result: T = prompt(call, *args)
                return result
            except WouldWait:
                pass
        return await self._offloader.run(call, *args, abandon=abandon)

    async def _companion(self) -> Store:
        """The sync store the default hooks run on, opened on first use."""
        if self._companion_store is None:
            await self._offloaded(self._open_companion_once)
        assert self._companion_store is not None
        return self._companion_store

    def _open_companion_once(self) -> None:
        with self._companion_lock:
            if self._companion_store is None:
                companion = self._open_companion()
                self._share_declarations(companion)
                self._companion_store = companion

    # Engine hooks: arguments are already checked and encoded. The defaults
    # run the companion's sync hooks on this store's threads.

    def _open_companion(self) -> Store:
        """Open the sync store on the same target (runs on a thread, once)."""
        raise NotImplementedError(
            f"{type(self).__name__} implements no hook that needs a sync companion store"
        )

    async def _close(self) -> None:
        """Release what the engine holds (the companion is closed by core)."""

    async def _notify(self, channel: str, payload_json: str) -> None:
        await self._offloaded((await self._companion())._notify, channel, payload_json)

    async def _watch(self, key: str) -> WakeReceiver:
        """A receiver of the wakes committed under ``key`` from now on (closed
        again if the caller stopped awaiting it)."""
        companion = await self._companion()
        return await self._offloaded(companion._watch, key, abandon=_close_receiver)

    def _stream(self, name: str) -> AsyncStream:
        return AsyncStream(self, name)

    def _queue(self, name: str, opts: QueueOpts) -> AsyncQueue:
        return AsyncQueue(self, name, opts)

    async def _try_lock(self, name: str, owner: str, ttl_s: float) -> AsyncLock | None:
        lock = await self._offloaded((await self._companion())._try_lock, name, owner, ttl_s)
        return None if lock is None else AsyncLock(self, name, owner, ttl_s, twin=lock)

    async def _schedule(
        self,
        name: str,
        spec: str,
        interval_s: int,
        queue: str,
        payload_json: str,
        opts: ScheduleOpts,
    ) -> Schedule:
        companion = await self._companion()
        if interval_s == 0:
            refuse_cron_unless_stored(companion, spec)
        return await self._offloaded(
            companion._schedule, name, spec, interval_s, queue, payload_json, opts
        )

    async def _unschedule(self, name: str) -> bool:
        return await self._offloaded((await self._companion())._unschedule, name)

    async def _begin_tx(self) -> AsyncTxHandle:
        """Open a transaction; a cancelled begin rolls back what the thread opened."""
        companion = await self._companion()
        lane = Lane(f"{type(self).__name__}-tx")
        try:
            twin = await lane.run(companion.begin_tx, abandon=_roll_back_quietly)
        except BaseException:
            lane.close()
            raise
        return AsyncTxHandle(self, twin, lane)

    async def _adopt_tx(self, connection: Any) -> AsyncTxHandle:
        """Adopt the caller's driver connection. A sync one is used where the
        caller uses it, on the calling thread: the caller's driver may forbid
        any other (sqlite3 does). An aiosqlite one, on the thread aiosqlite
        runs its sqlite3 connection on."""
        companion = await self._companion()
        threaded = on_its_thread(connection)
        if threaded is None:
            return AsyncTxHandle(self, companion.adopt_tx(connection))
        driver_connection, run_there = threaded
        twin = await run_there(companion.adopt_tx, driver_connection)
        return AsyncTxHandle(self, twin, CallerThread(run_there))

    def _inspect(self) -> AsyncInspector:
        return AsyncInspector(self)


async def _relay(stop: asyncio.Event, halt: threading.Event) -> None:
    await stop.wait()
    halt.set()


def _close_receiver(receiver: WakeReceiver) -> None:
    receiver.close()


def _roll_back_quietly(tx: TxHandle) -> None:
    if tx.active:
        tx.rollback()


def _prompt_entry(companion: Store) -> _PromptCall | Literal[False]:
    """``companion._without_waiting`` if its engine overrides it, else False."""
    if type(companion)._without_waiting is Store._without_waiting:
        return False
    return companion._without_waiting


_running_loop: Callable[[], asyncio.AbstractEventLoop | None] = asyncio._get_running_loop
"""The running loop of this thread, or None: asyncio's own check, without an exception."""
