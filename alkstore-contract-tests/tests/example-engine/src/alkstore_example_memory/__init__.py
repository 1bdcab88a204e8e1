"""An engine that keeps everything in the memory of one process.

It is the smallest complete alkstore engine, kept as a template for engine
authors: one class per contract class, each implementing the ``_`` hooks
that core calls after it has checked names, options and payloads. Its stores
on the same ``memory://NAME`` target share one in-process database, so two
stores act as peers; other processes do not see it, which its capabilities
declare. Concurrency is the simplest that is correct: one writer at a time,
a transaction holds the writer's lock from begin to commit, and readers see
what is committed without waiting for it.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from alkstore import (
    SCHEDULER_LOCK,
    ConsumerStats,
    JobInfo,
    JobState,
    LockInfo,
    QueueOpts,
    QueueStats,
    Schedule,
    ScheduleOpts,
    StreamEvent,
    StreamStats,
    StreamTrimmed,
)
from alkstore.engine import (
    EXPIRED,
    LAPSED_ON_LAST_ATTEMPT,
    SCHEDULES_WAKE_KEY,
    BufferedWakeReceiver,
    Capabilities,
    DueSchedule,
    DueSchedules,
    Engine,
    Fired,
    Inspector,
    Job,
    JobStamp,
    Lock,
    Params,
    PlacedSchedule,
    Queue,
    Store,
    StoreTarget,
    Stream,
    TestProvider,
    TrimRule,
    TxHandle,
    WakeFanout,
    WakeReceiver,
    decode,
    offset_past_head,
    place_schedule,
    queue_wake_key,
    stream_wake_key,
)

__all__ = ["MemoryConnection", "MemoryEngine", "MemoryStore", "MemoryTestProvider"]

CAPABILITIES = Capabilities(wakes_coalesce=True, shared_between_processes=False)


@dataclass
class Row:
    """One job, live or dead."""

    id: int
    queue: str
    payload: str
    priority: int
    run_at: float
    created_at: float
    expires_at: float | None
    max_attempts: int
    visibility_timeout_s: float
    backoff_base_s: float
    retention_s: float | None
    attempts: int = 0
    worker_id: str | None = None
    deadline: float | None = None
    last_error: str | None = None
    died_at: float | None = None
    key: str | None = None
    traceparent: str | None = None


class WriterLock:
    """The database's writer lock, reentrant for the thread that holds it.

    Unlike ``threading.RLock`` it can be released from another thread on its
    holder's behalf: a store closed on one thread rolls back transactions
    begun on others (docs/engine-authors.md, "Closing a store ends its
    transactions"), and must free the database they held.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._holder: int | None = None
        self._depth = 0

    def acquire(self) -> int:
        """Wait for the lock; return the holder to release it for."""
        me = threading.get_ident()
        with self._changed:
            self._changed.wait_for(lambda: self._holder in (None, me))
            self._holder = me
            self._depth += 1
        return me

    def release(self, holder: int) -> None:
        """Release one hold of ``holder`` (what its ``acquire`` returned), from any thread."""
        with self._changed:
            if self._holder != holder:
                raise RuntimeError("the writer lock is not held for that holder")
            self._depth -= 1
            if self._depth == 0:
                self._holder = None
                self._changed.notify_all()

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release(threading.get_ident())


class Database:
    """Everything one target holds.

    ``lock`` is the writer's: one write at a time, and a transaction holds it
    from begin to commit. ``state`` guards the data for a moment: readers take
    only it, so they see what is committed and never wait for a transaction.
    """

    def __init__(self) -> None:
        self.lock = WriterLock()
        self.state = threading.RLock()
        self.ids = itertools.count(1)
        self.jobs: dict[int, Row] = {}
        self.dead: dict[int, Row] = {}
        self.events: list[tuple[int, str, str | None, str, float]] = []
        self.offsets: dict[tuple[str, str], int] = {}
        self.trimmed: dict[str, int] = {}
        """Each trimmed stream's ``trimmed_through`` (contract 1.5)."""
        self.locks: dict[str, tuple[str, float]] = {}
        self.schedules: dict[str, dict[str, Any]] = {}
        self.business: set[str] = set()
        self.wakes = WakeFanout(coalesce=True)
        """Every store on this database subscribes here; commits deliver here."""

    def head(self, stream: str, pending: Iterable[tuple[int, str, Any, Any, Any]] = ()) -> int:
        """The stream's head: its newest event, or how far it is trimmed (never lower)."""
        newest = max((o for o, s, *_ in [*self.events, *pending] if s == stream), default=0)
        return max(newest, self.trimmed.get(stream, 0))

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the writer's lock, and the data, for one write outside a transaction."""
        with self.lock, self.state:
            yield

    def wake(self, keys: set[str]) -> None:
        self.wakes.deliver(keys)

    def to_dead(self, row: Row, error: str, now: float) -> None:
        del self.jobs[row.id]
        row.last_error, row.died_at, row.deadline = error, now, None
        self.dead[row.id] = row

    def live_job_with_key(self, queue: str, key: str, now: float) -> int | None:
        """The id of the live job of ``queue`` holding ``key``, if there is one. One past
        its expiry holds none (it is never handed out again): it goes to dead letters."""
        for row in list(self.jobs.values()):
            if row.queue == queue and row.key == key:
                if row.expires_at is None or row.expires_at > now:
                    return row.id
                self.to_dead(row, EXPIRED, now)
        return None


def job_info(row: Row) -> JobInfo:
    """What ``get_job`` and the inspector show of a row."""
    state: JobState = "pending"
    if row.died_at is not None:
        state = "dead"
    elif row.deadline is not None:
        state = "processing"
    return JobInfo(
        id=row.id, queue=row.queue, state=state, payload=decode(row.payload),
        priority=row.priority, attempts=row.attempts, max_attempts=row.max_attempts,
        run_at=row.run_at, created_at=row.created_at, expires_at=row.expires_at,
        worker_id=row.worker_id, deadline=row.deadline, last_error=row.last_error,
        died_at=row.died_at, key=row.key,
    )  # fmt: skip


_DATABASES: dict[str, Database] = {}
_DATABASES_LOCK = threading.Lock()


def database(name: str) -> Database:
    with _DATABASES_LOCK:
        return _DATABASES.setdefault(name, Database())


class MemoryConnection:
    """A connection to one database, as a driver hands one to an application; what
    ``adopt_tx`` accepts. A transaction holds the database from ``begin`` to
    ``commit`` or ``rollback``; its writes apply, and its wakes go out, at commit."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.in_transaction = False
        self.holder = 0
        """The writer lock's holder while a transaction is open (``WriterLock.acquire``)."""
        self.writes: list[Callable[[], None]] = []
        self.wakes: set[str] = set()
        self.saved: dict[tuple[str, str], int] = {}
        self.published: list[tuple[int, str, str | None, str, float]] = []
        self.keyed: dict[tuple[str, str], int] = {}
        """The keyed jobs this transaction enqueued: (queue, key) to id."""

    def begin(self) -> None:
        self.holder = self.db.lock.acquire()
        self.in_transaction = True

    def commit(self) -> None:
        if not self.in_transaction:
            return
        wakes = self.wakes
        try:
            with self.db.state:
                for write in self.writes:
                    write()
        finally:
            self._end()
        self.db.wake(wakes)

    def rollback(self) -> None:
        if self.in_transaction:
            self._end()

    def close(self) -> None:
        self.rollback()

    def _end(self) -> None:
        self.writes, self.wakes, self.saved, self.published = [], set(), {}, []
        self.keyed = {}
        self.in_transaction = False
        self.db.lock.release(self.holder)


class MemoryTx(TxHandle):
    """A transaction on a connection of the store's own, or on the caller's
    (``adopt_tx``), which joins the transaction open on it or begins one."""

    _store: MemoryStore

    def __init__(self, store: MemoryStore, adopted: MemoryConnection | None = None) -> None:
        super().__init__(store)
        self.db = store.db
        self.adopted = adopted is not None
        self._connection = adopted or MemoryConnection(store.db)
        if not self._connection.in_transaction:
            self._connection.begin()

    @property
    def connection(self) -> MemoryConnection:
        return self._connection

    def _check_still_open(self) -> None:
        """Refuse every call once the transaction ended through the connection: a
        late write would apply outside the transaction it was meant to share. The
        caller ending its own transaction ends an adopted handle with it."""
        if self._connection.in_transaction:
            return
        if not self.adopted:
            raise self._ended_elsewhere()
        raise self._ended_by_its_caller()

    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        self._check_still_open()
        if stamp.key is not None and (live := self._live_job_with_key(queue, stamp.key)):
            return live
        now = time.time()
        row = Row(
            id=next(self.db.ids), queue=queue, payload=payload_json, priority=stamp.priority,
            run_at=stamp.run_at if stamp.run_at is not None else now + stamp.delay_s,
            created_at=now,
            expires_at=None if stamp.expires_in_s is None else now + stamp.expires_in_s,
            max_attempts=stamp.max_attempts, visibility_timeout_s=stamp.visibility_timeout_s,
            backoff_base_s=stamp.backoff_base_s, retention_s=stamp.dead_letter_retention_s,
            key=stamp.key, traceparent=stamp.traceparent,
        )  # fmt: skip
        if stamp.key is not None:
            self._connection.keyed[queue, stamp.key] = row.id
        self._connection.writes.append(lambda: self.db.jobs.__setitem__(row.id, row))
        self._connection.wakes.add(queue_wake_key(queue))
        return row.id

    def _live_job_with_key(self, queue: str, key: str) -> int | None:
        """This transaction's job of ``queue`` with ``key``, else the committed live
        one (the transaction holds the database: no one races it)."""
        live = self._connection.keyed.get((queue, key))
        if live is None:
            with self.db.state:
                live = self.db.live_job_with_key(queue, key, time.time())
        return live

    def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        self._check_still_open()
        offset = next(self.db.ids)  # the lock is held: ids are handed out in commit order
        event = (offset, stream, key, payload_json, time.time())
        self._connection.published.append(event)
        self._connection.writes.append(lambda: self.db.events.append(event))
        self._connection.wakes.add(stream_wake_key(stream))
        return offset

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        self._check_still_open()
        self._connection.wakes.add(channel)

    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        self._check_still_open()
        pending = self._connection
        head = self.db.head(stream, pending.published)
        if offset > head:
            raise offset_past_head(stream, offset, head)
        key = (stream, consumer)
        current = pending.saved.get(key, self.db.offsets.get(key, 0))
        if offset <= current:
            return False
        pending.saved[key] = offset
        pending.writes.append(lambda: self.db.offsets.__setitem__(key, offset))
        return True

    def _execute(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        """A small dialect: ``INSERT`` (one key), ``SELECT`` (committed keys) and
        ``COMMIT``, which ends the transaction behind the handle's back: it is
        refused from then on, as every engine must."""
        self._check_still_open()
        if sql == "COMMIT":
            self._connection.commit()
            raise self._ended_by_its_caller() if self.adopted else self._ended_elsewhere()
        if sql == "INSERT":
            key = str(next(iter(params.values() if isinstance(params, Mapping) else params)))
            self._connection.writes.append(lambda: self.db.business.add(key))
            return []
        if sql == "SELECT":
            return [(key,) for key in sorted(self.db.business)]
        raise ValueError(f"the memory engine understands INSERT and SELECT, not {sql!r}")

    def _commit(self) -> None:
        self._check_still_open()
        self._connection.commit()

    def _rollback(self) -> None:
        self._check_still_open()
        self._connection.rollback()


class MemoryQueue(Queue):
    _store: MemoryStore

    @property
    def db(self) -> Database:
        return self._store.db

    def _claim(self, worker_id: str, n: int) -> list[Job]:
        now = time.time()
        with self.db.writing():
            self._release_lapsed(now)
            ready = sorted(
                (r for r in self.db.jobs.values() if self._claimable(r, now)),
                key=lambda r: (-r.priority, r.run_at, r.id),
            )[:n]
            for row in ready:
                self._mark_claimed(row, worker_id, now)
            return [self._job(row, worker_id) for row in ready]

    def _claimable(self, row: Row, now: float) -> bool:
        return (
            row.queue == self.name
            and row.deadline is None
            and row.run_at <= now
            and (row.expires_at is None or row.expires_at > now)
        )

    def _mark_claimed(self, row: Row, worker_id: str, now: float) -> None:
        row.attempts += 1
        row.deadline = now + row.visibility_timeout_s
        row.worker_id = worker_id

    def _job(self, row: Row, worker_id: str) -> Job:
        assert row.deadline is not None
        return Job(
            queue=self, id=row.id, payload=decode(row.payload), priority=row.priority,
            attempts=row.attempts, max_attempts=row.max_attempts, run_at=row.run_at,
            deadline=row.deadline, worker_id=worker_id, backoff_base_s=row.backoff_base_s,
            visibility_timeout_s=row.visibility_timeout_s, key=row.key,
            traceparent=row.traceparent,
        )  # fmt: skip

    def _release_lapsed(self, now: float) -> None:
        for row in list(self.db.jobs.values()):
            if row.queue == self.name and row.deadline is not None and row.deadline < now:
                if row.attempts >= row.max_attempts:
                    self.db.to_dead(row, LAPSED_ON_LAST_ATTEMPT, now)
                else:
                    row.deadline = None

    def _held(self, job: Job, now: float) -> Row | None:
        row = self.db.jobs.get(job.id)
        holds = (
            row is not None
            and row.attempts == job.attempts
            and row.worker_id == job.worker_id
            and row.deadline is not None
            and row.deadline >= now
        )
        return row if holds else None

    def _ack_batch(self, claims: list[tuple[int, int | None]], worker_id: str) -> int:
        now, acked = time.time(), 0
        with self.db.writing():
            for job_id, attempt in claims:
                row = self.db.jobs.get(job_id)
                if row is None or row.queue != self.name or row.worker_id != worker_id:
                    continue
                if attempt is not None and row.attempts != attempt:
                    continue  # fenced: the job was claimed again since
                if row.deadline is not None and row.deadline >= now:
                    del self.db.jobs[job_id]
                    acked += 1
        return acked

    def _cancel(self, job_id: int) -> bool:
        with self.db.writing():
            for table in (self.db.jobs, self.db.dead):
                row = table.get(job_id)
                if row is not None and row.queue == self.name:
                    del table[job_id]
                    return True
        return False

    def _get_job(self, job_id: int) -> JobInfo | None:
        with self.db.state:
            row = self.db.jobs.get(job_id) or self.db.dead.get(job_id)
            if row is None or row.queue != self.name:
                return None
            return job_info(row)

    def _sweep_expired(self) -> int:
        now, moved = time.time(), 0
        with self.db.writing():
            for row in list(self.db.jobs.values()):
                if row.queue == self.name and row.expires_at is not None and row.expires_at <= now:
                    self.db.to_dead(row, EXPIRED, now)
                    moved += 1
            self._release_lapsed(now)
            for row in list(self.db.dead.values()):
                if row.queue == self.name and row.retention_s is not None:
                    assert row.died_at is not None
                    if row.died_at + row.retention_s <= now:
                        del self.db.dead[row.id]
        return moved

    def _requeue_dead(self, job_ids: list[int] | None, reset_attempts: bool) -> int:
        now, moved = time.time(), 0
        with self.db.writing():
            for job_id in sorted(self.db.dead) if job_ids is None else job_ids:
                row = self.db.dead.get(job_id)
                if row is None or row.queue != self.name:
                    continue
                if row.key is not None and self.db.live_job_with_key(row.queue, row.key, now):
                    continue  # the key belongs to a live job: this one stays dead
                del self.db.dead[job_id]
                row.run_at, row.expires_at, row.died_at, row.deadline = now, None, None, None
                if reset_attempts:
                    row.attempts = 0
                self.db.jobs[job_id] = row
                moved += 1
        if moved:
            self.db.wake({queue_wake_key(self.name)})
        return moved

    def _purge_dead(self, older_than_s: float | None) -> int:
        cutoff = time.time() - (older_than_s or 0.0)
        with self.db.writing():
            gone = [
                row.id
                for row in self.db.dead.values()
                if row.queue == self.name and (older_than_s is None or (row.died_at or 0) <= cutoff)
            ]
            for job_id in gone:
                del self.db.dead[job_id]
        return len(gone)

    def _until_ready(self) -> float | None:
        now = time.time()
        with self.db.state:
            times = [
                r.run_at if r.deadline is None else r.deadline
                for r in self.db.jobs.values()
                if r.queue == self.name and (r.expires_at is None or r.expires_at > now)
            ]
        return None if not times else min(times) - now

    def _ack_job(self, job: Job) -> bool:
        with self.db.writing():
            row = self._held(job, time.time())
            if row is None:
                return False
            del self.db.jobs[row.id]
            return True

    def _retry_job(self, job: Job, error: str, delay_s: float) -> bool:
        now = time.time()
        with self.db.writing():
            row = self._held(job, now)
            if row is None:
                return False
            row.deadline, row.run_at, row.last_error = None, now + delay_s, error
        self.db.wake({queue_wake_key(self.name)})
        return True

    def _fail_job(self, job: Job, error: str) -> bool:
        now = time.time()
        with self.db.writing():
            row = self._held(job, now)
            if row is None:
                return False
            self.db.to_dead(row, error, now)
            return True

    def _release_job(self, job: Job) -> bool:
        with self.db.writing():
            row = self._held(job, time.time())
            if row is None:
                return False
            row.deadline = None
            row.attempts -= 1  # the claim's attempt is given back
        self.db.wake({queue_wake_key(self.name)})
        return True

    def _heartbeat_job(self, job: Job, extend_s: float) -> bool:
        now = time.time()
        with self.db.writing():
            row = self._held(job, now)
            if row is None:
                return False
            row.deadline = job.deadline = now + extend_s
            return True


class MemoryStream(Stream):
    _store: MemoryStore

    def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        with self._store.db.state:
            rows = [e for e in self._store.db.events if e[1] == self.name and e[0] > offset]
            trimmed_through = self._store.db.trimmed.get(self.name, 0)
        if offset < trimmed_through:
            raise StreamTrimmed(self.name, offset, trimmed_through)
        return [StreamEvent(o, s, k, decode(p), t) for o, s, k, p, t in rows[:limit]]

    def _trimmed_through(self) -> int:
        with self._store.db.state:
            return self._store.db.trimmed.get(self.name, 0)

    def _trim(self, rule: TrimRule) -> int:
        db = self._store.db
        with db.writing():
            old = db.trimmed.get(self.name, 0)
            mine = [e for e in db.events if e[1] == self.name and e[0] > old]
            cutoff = min(limit for limit in self._limits(rule, mine) if limit is not None)
            taken = [e for e in mine if e[0] <= cutoff]
            if not taken:
                return 0
            db.trimmed[self.name] = taken[-1][0]
            gone = {e[0] for e in taken}
            db.events[:] = [e for e in db.events if e[0] not in gone]
            return len(taken)

    def _limits(
        self, rule: TrimRule, mine: list[tuple[int, str, str | None, str, float]]
    ) -> list[int | None]:
        """The last offset each limit of ``rule`` lets go (see ``TrimRule``)."""
        head = mine[-1][0] if mine else 0
        retention: list[int] = []  # an event goes when either of these says so
        if rule.keep_last is not None:
            retention.append(mine[-rule.keep_last - 1][0] if len(mine) > rule.keep_last else 0)
        if rule.max_age_s is not None:
            born_after = time.time() - rule.max_age_s
            young = [offset for offset, *_, created in mine if created >= born_after]
            retention.append(young[0] - 1 if young else head)
        consumers = [o for (s, _), o in self._store.db.offsets.items() if s == self.name]
        lowest = min(consumers) if rule.spare_consumers and consumers else None
        return [head, rule.up_to, max(retention) if retention else None, lowest]

    def _get_offset(self, consumer: str) -> int:
        with self._store.db.state:
            return self._store.db.offsets.get((self.name, consumer), 0)


class MemoryLock(Lock):
    _store: MemoryStore

    def _renew(self, ttl_s: float) -> bool:
        now = time.time()
        with self._store.db.writing():
            holder = self._store.db.locks.get(self.name)
            if holder is None or holder[0] != self.owner or holder[1] <= now:
                return False
            self._store.db.locks[self.name] = (self.owner, now + ttl_s)
            return True

    def _release(self) -> bool:
        with self._store.db.writing():
            holder = self._store.db.locks.get(self.name)
            if holder is None or holder[0] != self.owner:
                return False
            del self._store.db.locks[self.name]
            return holder[1] > time.time()


class MemoryInspector(Inspector):
    """Each listing reads the database under its lock: one moment, as a snapshot would."""

    _store: MemoryStore

    @property
    def db(self) -> Database:
        return self._store.db

    def _rows(self) -> list[Row]:
        return [*self.db.jobs.values(), *self.db.dead.values()]

    def _queues(self) -> list[QueueStats]:
        now = time.time()
        counts: dict[str, dict[str, int]] = {}
        ready_since: dict[str, float] = {}
        with self.db.state:
            for row in self._rows():
                state = _counted_as(row, now)
                tally = counts.setdefault(row.queue, dict.fromkeys(_COUNTED_AS, 0))
                tally[state] += 1
                if state == "ready":
                    ready_since[row.queue] = min(row.run_at, ready_since.get(row.queue, now))
        return [
            QueueStats(
                name, **counts[name],
                oldest_ready_age_s=now - ready_since[name] if name in ready_since else None,
            )
            for name in sorted(counts)
        ]  # fmt: skip

    def _jobs(self, queue: str, state: JobState | None, limit: int) -> list[JobInfo]:
        return self._jobs_after(queue, state, limit, 0)

    def _jobs_after(
        self, queue: str, state: JobState | None, limit: int, after: int
    ) -> list[JobInfo]:
        with self.db.state:
            infos = [job_info(row) for row in self._rows() if row.queue == queue and row.id > after]
        matching = [info for info in infos if state is None or info.state == state]
        return sorted(matching, key=lambda info: info.id)[:limit]

    def _streams(self) -> list[StreamStats]:
        with self.db.state:
            events = [(stream, offset) for offset, stream, *_ in self.db.events]
            offsets = sorted(self.db.offsets.items())
            trimmed = dict(self.db.trimmed)
        names = (
            {stream for stream, _ in events} | {stream for (stream, _), _ in offsets} | set(trimmed)
        )
        return [
            StreamStats(
                name=name,
                head=max(
                    max((offset for stream, offset in events if stream == name), default=0),
                    trimmed.get(name, 0),
                ),
                consumers=tuple(
                    ConsumerStats(
                        consumer, saved, sum(1 for s, o in events if s == name and o > saved)
                    )
                    for (stream, consumer), saved in offsets
                    if stream == name
                ),
            )
            for name in sorted(names)
        ]

    def _locks(self) -> list[LockInfo]:
        now = time.time()
        with self.db.state:
            held = sorted(self.db.locks.items())
        return [
            LockInfo(name, owner, expires_at)
            for name, (owner, expires_at) in held
            if not self._store._expired((owner, expires_at), now)
        ]

    def _schedules(self) -> list[Schedule]:
        with self.db.state:
            return [
                Schedule(
                    name,
                    s["spec"],
                    s["queue"],
                    decode(s["payload"]),
                    s["placed"].next_fire_at,
                    s["placed"].tz,
                    s["last_fire_at"],
                )
                for name, s in sorted(self.db.schedules.items())
            ]


_COUNTED_AS = ("ready", "scheduled", "expired", "processing", "dead")


def _counted_as(row: Row, now: float) -> str:
    """Which count of ``QueueStats`` a row adds to."""
    if row.died_at is not None:
        return "dead"
    if row.deadline is not None:
        return "processing"
    if row.expires_at is not None and row.expires_at <= now:
        return "expired"
    return "ready" if row.run_at <= now else "scheduled"


class MemoryStore(Store):
    """A store on one in-process database. Subclasses swap the parts below."""

    job_keys = True  # MemoryTx._enqueue_tx honours JobStamp.key (contract 1.4)

    tx_class: ClassVar[type[MemoryTx]] = MemoryTx
    queue_class: ClassVar[type[MemoryQueue]] = MemoryQueue
    stream_class: ClassVar[type[MemoryStream]] = MemoryStream
    cron_schedules = True  # keeps opts.tz, and gives DueSchedule its spec and tz

    def __init__(self, name: str, scheduler_lease_s: float) -> None:
        super().__init__(f"memory://{name}", CAPABILITIES, scheduler_lease_s=scheduler_lease_s)
        self.db = database(name)
        self._mine: weakref.WeakSet[BufferedWakeReceiver] = weakref.WeakSet()

    def _watch(self, key: str) -> WakeReceiver:
        receiver = self.db.wakes.subscribe(key)
        self._mine.add(receiver)  # closed with this store; its peers' stay open
        return receiver

    def _close(self) -> None:
        for receiver in list(self._mine):
            receiver.close()

    def fail_wakes(self, error: BaseException) -> None:
        """The wake path died: every receiver on the database closes (failure is
        an event, never silence) and later listens raise ``Database``."""
        self.db.wakes.fail(error, f"the wake path of {self.location} died: {error}")

    def _notify(self, channel: str, payload_json: str) -> None:
        self.db.wake({channel})

    def _stream(self, name: str) -> Stream:
        return self.stream_class(self, name)

    def _queue(self, name: str, opts: QueueOpts) -> Queue:
        return self.queue_class(self, name, opts)

    def _try_lock(self, name: str, owner: str, ttl_s: float) -> Lock | None:
        now = time.time()
        with self.db.writing():
            holder = self.db.locks.get(name)
            if holder is None or self._expired(holder, now):
                self.db.locks[name] = (owner, now + ttl_s)
            elif holder[0] != owner:
                return None
        return MemoryLock(self, name, owner, ttl_s)

    def _expired(self, holder: tuple[str, float], now: float) -> bool:
        return holder[1] <= now

    def _schedule(
        self, name: str, spec: str, interval_s: int, queue: str, payload_json: str,
        opts: ScheduleOpts,
    ) -> Schedule:  # fmt: skip
        with self.db.writing():
            old = self.db.schedules.get(name)
            existing = None if old is None else old["placed"]
            placed = place_schedule(existing, spec, interval_s, time.time(), opts.tz)
            last_fire_at = None if old is None else old["last_fire_at"]
            self.db.schedules[name] = {
                "spec": spec, "interval_s": interval_s, "queue": queue, "payload": payload_json,
                "opts": opts, "placed": placed, "last_fire_at": last_fire_at,
            }  # fmt: skip
        self.db.wake({SCHEDULES_WAKE_KEY})
        return Schedule(
            name, spec, queue, decode(payload_json), placed.next_fire_at, placed.tz, last_fire_at
        )

    def _unschedule(self, name: str) -> bool:
        with self.db.writing():
            return self.db.schedules.pop(name, None) is not None

    def _due_schedules(self) -> DueSchedules:
        now = time.time()
        with self.db.state:
            due = [
                DueSchedule(name, s["interval_s"], s["queue"], s["payload"], s["opts"].priority,
                            s["opts"].max_attempts, s["opts"].expires, s["placed"].next_fire_at,
                            s["spec"], s["placed"].tz, s["opts"].key)
                for name, s in self.db.schedules.items()
                if s["placed"].next_fire_at <= now
            ]  # fmt: skip
        return DueSchedules(now, due)

    def _fire_boundary(
        self, lock: Lock, schedule: DueSchedule, boundary: float, advance_to: float,
        stamp: JobStamp,
    ) -> Fired:  # fmt: skip
        with self.begin_tx() as tx:  # holds the database until it commits
            holder = self.db.locks.get(SCHEDULER_LOCK)
            if holder is None or holder[0] != lock.owner or holder[1] <= time.time():
                return Fired.NOT_LEADER
            with self.db.state:
                self.db.locks[SCHEDULER_LOCK] = (lock.owner, time.time() + lock.ttl_s)
            row = self.db.schedules.get(schedule.name)
            placed: PlacedSchedule | None = None if row is None else row["placed"]
            if placed is None or placed.next_fire_at != boundary:
                return Fired.SCHEDULE_CHANGED
            with self.db.state:
                row["placed"] = PlacedSchedule(placed.spec, placed.anchor, advance_to, placed.tz)  # type: ignore[index]
                row["last_fire_at"] = boundary  # type: ignore[index]
            tx._enqueue_tx(schedule.queue, stamp, schedule.payload_json)
        return Fired.FIRED

    def _until_next_fire(self) -> float | None:
        with self.db.state:
            times = [s["placed"].next_fire_at for s in self.db.schedules.values()]
        return None if not times else min(times) - time.time()

    def _inspect(self) -> Inspector:
        return MemoryInspector(self)

    def _begin_tx(self) -> TxHandle:
        return self.tx_class(self)

    def _adopt_tx(self, connection: Any) -> TxHandle:
        if not isinstance(connection, MemoryConnection):
            raise TypeError(f"adopt_tx needs a MemoryConnection, not {type(connection).__name__}")
        if connection.db is not self.db:
            raise ValueError("adopt_tx: the connection is to another database than this store's")
        return self.tx_class(self, connection)


class MemoryEngine(Engine):
    """``memory://NAME``: stores in this process's memory, shared by NAME."""

    name = "memory"
    schemes = ("memory",)
    contract_version = "1.7"
    capabilities = CAPABILITIES
    store_class: ClassVar[type[MemoryStore]] = MemoryStore

    def open(self, target: str, **options: Any) -> Store:
        unknown = set(options) - {"scheduler_lease_s"}
        if unknown:
            raise TypeError(f"the memory engine has no option {', '.join(sorted(unknown))}")
        _, _, name = target.partition("://")
        if not name:
            raise ValueError(f"{target!r}: expected memory://NAME")
        return self.store_class(name, float(options.get("scheduler_lease_s", 30.0)))

    def test_provider(self, options: Mapping[str, str]) -> TestProvider:
        return MemoryTestProvider(self, options)


class MemoryTestProvider(TestProvider):
    """A fresh database name per target; backdoors reach into the database."""

    scheduler_lease_s = 0.6

    def create_target(self) -> StoreTarget:
        return StoreTarget(
            f"memory://{uuid.uuid4().hex}", {"scheduler_lease_s": self.scheduler_lease_s}
        )

    def drop_target(self, target: StoreTarget) -> None:
        with _DATABASES_LOCK:
            _DATABASES.pop(target.target.partition("://")[2], None)

    def driver_connection(self, target: StoreTarget) -> MemoryConnection:
        return MemoryConnection(database(target.target.partition("://")[2]))

    def other_storage_target(self, target: StoreTarget) -> StoreTarget:
        return self.create_target()  # each target is a database of its own

    def write_business_row(self, tx: TxHandle, key: str) -> None:
        tx.execute("INSERT", (key,))

    def business_rows(self, store: Store) -> set[str]:
        with store.transaction() as tx:
            return {row[0] for row in tx.execute("SELECT")}

    def expire_lock(self, target: StoreTarget, name: str) -> None:
        db = database(target.target.partition("://")[2])
        with db.writing():
            owner, _ = db.locks[name]
            db.locks[name] = (owner, 0.0)

    def shift_schedule(self, target: StoreTarget, name: str, by_s: float) -> None:
        db = database(target.target.partition("://")[2])
        with db.writing():
            placed = db.schedules[name]["placed"]
            db.schedules[name]["placed"] = PlacedSchedule(
                placed.spec, placed.anchor, placed.next_fire_at + by_s, placed.tz
            )

    def commit_behind_its_back(self, tx: TxHandle) -> None:
        tx.execute("COMMIT")

    def break_wakes(self, store: Store) -> None:
        assert isinstance(store, MemoryStore)
        store.fail_wakes(RuntimeError("the wake path was broken behind the store's back"))
