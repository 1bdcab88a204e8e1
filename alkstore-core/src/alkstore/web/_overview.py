"""The overview's reads (queues, streams, locks, schedules), shared by every viewer.

Counting every queue's jobs reads one index entry per job: about half a
second at 1,000,000 jobs. While a read costs less than ``budget_s``, each
page reads for itself, so what it shows is never older than the request.
Once a read costs more, the dashboard reads once for every viewer, in the
background, and pages render from the latest read (and say when it was
taken): again as soon as a shown queue or stream is woken (an enqueue, a
retry, a publish, a schedule change), at least every ``period_s`` for what
wakes nothing (claims, acks, locks), never more than a third of the time,
and only while someone looks. Live viewers (server-sent events) are fed
from the same reads.

A page never waits out a slow read: it renders what the last read saw,
and before any read has ended it waits ``wait_s`` at most, then says one is
under way; the read goes on and reaches the page's live updates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import overload

from alkstore import LockInfo, QueueStats, Schedule, StreamStats, WakeReceiver
from alkstore._despite_cancel import retrieve
from alkstore._errors import Error
from alkstore._names import SCHEDULES_WAKE_KEY, queue_wake_key, stream_wake_key
from alkstore.web._backlog import Backlog
from alkstore.web._source import Source

__all__ = ["Overview", "OverviewRead"]

_log = logging.getLogger("alkstore.web")


@dataclass(frozen=True, slots=True)
class OverviewRead:
    """One read of everything the overview shows."""

    number: int
    """Reads of this dashboard are numbered from 1, in the order they ended;
    the latest is the one that began last."""
    queues: list[QueueStats]
    streams: list[StreamStats]
    locks: list[LockInfo]
    schedules: list[Schedule]
    read_at: float
    """Unix seconds when the read began: nothing it shows is older."""
    took_s: float
    """How long the four reads took together."""


@dataclass(eq=False)
class _LoopState:
    """What one event loop's viewers share (asyncio primitives belong to one loop)."""

    loop: asyncio.AbstractEventLoop
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    latest: OverviewRead | None = None
    seen: float = 0.0
    refresher: asyncio.Task[None] | None = None
    first_read: asyncio.Task[OverviewRead] | None = None
    """A page's read while none has ended: later pages wait for it too."""


class Overview:
    """The latest :class:`OverviewRead` of a store, read on demand or in the background."""

    def __init__(
        self,
        source: Source,
        backlog: Backlog,
        *,
        budget_s: float = 0.1,
        period_s: float = 2.0,
        min_gap_s: float = 0.5,
        idle_s: float = 30.0,
        max_watched: int = 256,
    ) -> None:
        self.source = source
        self.backlog = backlog
        self.budget_s = budget_s
        """A read slower than this is shared, not repeated per page."""
        self.period_s = period_s
        self.min_gap_s = min_gap_s
        self.idle_s = idle_s
        self.max_watched = max_watched
        self.failure: str | None = None
        """Why the last background read failed; None once one succeeds."""
        self._number = 0
        self._state: _LoopState | None = None

    @overload
    async def current(self) -> OverviewRead: ...
    @overload
    async def current(self, wait_s: float | None) -> OverviewRead | None: ...

    async def current(self, wait_s: float | None = None) -> OverviewRead | None:
        """A read for a page: its own while reads are cheap, else the shared latest.

        The shared latest is served however old it is: if nobody was keeping
        it fresh, the background reader starts over with a read at once.
        While reads are cheap a page waits for its own, so what it shows is
        never older than the request. Before any read has ended (how long one
        takes is not known yet), a page waits ``wait_s`` at most (None: until
        the read ends) and gets None past it; the read goes on, is shared when
        it ends, and the pages that come meanwhile wait on it rather than start
        more. A read that fails while a page waits raises (a 503 page).
        """
        state = self._loop_state()
        state.seen = time.monotonic()
        latest = state.latest
        if latest is not None and latest.took_s >= self.budget_s:
            self._keep_refreshing(state)
            return latest
        reading = state.first_read
        if latest is not None or reading is None or reading.done():
            reading = state.loop.create_task(self._page_read(state))
            reading.add_done_callback(retrieve)
            if latest is None:  # pages that come before it ends join it
                state.first_read = reading
        done, _ = await asyncio.wait({reading}, timeout=None if latest is not None else wait_s)
        if reading in done:
            return reading.result()
        return state.latest

    async def _page_read(self, state: _LoopState) -> OverviewRead:
        read = await self._read(state)
        if read.took_s >= self.budget_s:
            self._keep_refreshing(state)
        return read

    async def next_after(self, number: int, timeout: float) -> OverviewRead | None:
        """The first read numbered above ``number``; None if none comes in ``timeout`` s."""
        state = self._loop_state()
        state.seen = time.monotonic()
        self._keep_refreshing(state)

        def newer() -> bool:
            return state.latest is not None and state.latest.number > number

        async with state.changed:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(state.changed.wait_for(newer), timeout)
        return state.latest if newer() else None

    def recent(self, read: OverviewRead) -> bool:
        """False once ``read`` is older than the background reader lets a read get."""
        # A shared read older than two periods means nobody was refreshing it.
        return time.time() - read.read_at < 2 * self.period_s + 2 * read.took_s

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        if self._state is None or self._state.loop is not loop:
            self._state = _LoopState(loop)
        return self._state

    async def _read(self, state: _LoopState) -> OverviewRead:
        read_at, started = time.time(), time.perf_counter()
        # The four reads at once (threads for a sync store): the slowest decides.
        queues, streams, locks, schedules = await asyncio.gather(
            self.source.queues(), self.source.streams(),
            self.source.locks(), self.source.schedules(),
        )  # fmt: skip
        took = time.perf_counter() - started
        self.backlog.record(queues)
        self._number += 1
        read = OverviewRead(self._number, queues, streams, locks, schedules, read_at, took)
        async with state.changed:
            if state.latest is None or state.latest.read_at <= read.read_at:
                state.latest = read
            state.changed.notify_all()
        return read

    def _keep_refreshing(self, state: _LoopState) -> None:
        if state.refresher is None or state.refresher.done():
            state.refresher = state.loop.create_task(self._refresh(state))

    async def _refresh(self, state: _LoopState) -> None:
        """Read again on each wake or period, from the read that started it."""
        woken = asyncio.Event()
        watches = _Watches(self.source, woken, self.max_watched)
        try:
            if state.first_read is not None and not state.first_read.done():
                await asyncio.wait({state.first_read})  # a page's read under way: the first
            if state.latest is None or not self.recent(state.latest):
                await self._background_read(state)
            while time.monotonic() - state.seen < self.idle_s:
                if state.latest is not None:
                    await self._guarded(watches.cover(state.latest))
                await self._rest(state, woken)
                woken.clear()
                await self._background_read(state)
        finally:
            watches.close()

    async def _rest(self, state: _LoopState, woken: asyncio.Event) -> None:
        """Until a wake or the period, but twice the last read's time at least: the
        store spends at most a third of the time on the dashboard."""
        latest = state.latest
        took = self.period_s if latest is None or self.failure else latest.took_s
        pause = min(max(self.min_gap_s, 2 * took), self.period_s)
        await asyncio.sleep(pause)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(woken.wait(), self.period_s - pause)

    async def _background_read(self, state: _LoopState) -> None:
        if await self._guarded(self._read(state)):
            self.failure = None

    async def _guarded(self, step: Awaitable[object]) -> bool:
        """Await ``step``; False if it failed (logged once, kept in ``failure``)."""
        try:
            await step
        except Exception as exc:  # the refresher outlives any one read
            if not isinstance(exc, Error):
                _log.exception("alkstore web: the overview's background read failed")
            elif self.failure is None:
                _log.warning("alkstore web: the overview could not be read: %s", exc)
            self.failure = str(exc)
            return False
        return True

    def __repr__(self) -> str:
        latest = None if self._state is None else self._state.latest
        shown = (
            "no read yet" if latest is None else f"read {latest.number} took {latest.took_s:.3f} s"
        )
        return f"<Overview of {self.source!r}: {shown}, budget {self.budget_s} s>"


class _Watches:
    """Wake receivers of the shown queues and streams, each setting ``woken``."""

    def __init__(self, source: Source, woken: asyncio.Event, limit: int) -> None:
        self._source = source
        self._woken = woken
        self._limit = limit
        self._receivers: dict[str, WakeReceiver] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def cover(self, read: OverviewRead) -> None:
        keys = [SCHEDULES_WAKE_KEY]
        keys += [queue_wake_key(queue.name) for queue in read.queues]
        keys += [stream_wake_key(stream.name) for stream in read.streams]
        for key in keys:
            if key not in self._receivers and len(self._receivers) < self._limit:
                receiver = await self._source.watch(key)
                self._receivers[key] = receiver
                self._tasks.append(asyncio.create_task(self._forward(receiver)))

    async def _forward(self, receiver: WakeReceiver) -> None:
        while await receiver.recv_async() is not None:
            self._woken.set()

    def close(self) -> None:
        for receiver in self._receivers.values():
            receiver.close()
        for task in self._tasks:
            task.cancel()
        self._receivers.clear()
