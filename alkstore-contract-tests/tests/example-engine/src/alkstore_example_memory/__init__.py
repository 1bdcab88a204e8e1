"""An engine that keeps everything in the memory of one process.

It is the smallest complete alkstore engine, kept as a template for engine
authors: one class per contract class, each implementing the ``_`` hooks
that core calls after it has checked names, options and payloads. Its stores
on the same ``memory://NAME`` target share one in-process database, so two
stores act as peers; other processes do not see it, which its capabilities
declare. Concurrency is the simplest that is correct: one writer at a time,
and a transaction holds the database from begin to commit.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from alkstore import (
    SCHEDULER_LOCK,
    ConsumerStats,
    EnqueueOpts,
    JobInfo,
    JobState,
    LeadershipLost,
    LockInfo,
    QueueOpts,
    QueueStats,
    Schedule,
    ScheduleOpts,
    StreamEvent,
    StreamStats,
    Wake,
)
from alkstore import Database as DatabaseError
from alkstore.engine import (
    BufferedWakeReceiver,
    Capabilities,
    Engine,
    Inspector,
    Job,
    JobStamp,
    Lock,
    Queue,
    StopSignal,
    Store,
    StoreTarget,
    Stream,
    TestProvider,
    TxHandle,
    WakeReceiver,
    decode,
    first_boundary_after,
    offset_past_head,
    plan_fires,
    run_scheduler,
    stamp_job,
)

__all__ = ["MemoryEngine", "MemoryStore", "MemoryTestProvider"]

QUEUE_KEY, STREAM_KEY, SCHEDULES_KEY = "__alkstore_q:", "__alkstore_s:", "__alkstore_schedules"
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


class Database:
    """Everything one target holds."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.ids = itertools.count(1)
        self.jobs: dict[int, Row] = {}
        self.dead: dict[int, Row] = {}
        self.events: list[tuple[int, str, str | None, str, float]] = []
        self.offsets: dict[tuple[str, str], int] = {}
        self.locks: dict[str, tuple[str, float]] = {}
        self.schedules: dict[str, dict[str, Any]] = {}
        self.business: set[str] = set()
        self.receivers: dict[str, set[BufferedWakeReceiver]] = {}
        self.wakes_failed: BaseException | None = None

    def wake(self, keys: set[str]) -> None:
        with self.lock:
            if self.wakes_failed is not None:
                return
            targets = [r for key in keys for r in self.receivers.get(key, ())]
        for receiver in targets:
            receiver.deliver(Wake(receiver.channel))

    def to_dead(self, row: Row, error: str, now: float) -> None:
        del self.jobs[row.id]
        row.last_error, row.died_at, row.deadline = error, now, None
        self.dead[row.id] = row


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
        died_at=row.died_at,
    )  # fmt: skip


_DATABASES: dict[str, Database] = {}
_DATABASES_LOCK = threading.Lock()


def database(name: str) -> Database:
    with _DATABASES_LOCK:
        return _DATABASES.setdefault(name, Database())


class MemoryTx(TxHandle):
    """Holds the database from begin to end; writes apply at commit."""

    _store: MemoryStore

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.db = store.db
        self.db.lock.acquire()
        self.writes: list[Callable[[], None]] = []
        self.wakes: set[str] = set()
        self.saved: dict[tuple[str, str], int] = {}
        self.published: list[tuple[int, str, str | None, str, float]] = []

    @property
    def connection(self) -> Database:
        return self.db

    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        now = time.time()
        row = Row(
            id=next(self.db.ids), queue=queue, payload=payload_json, priority=stamp.priority,
            run_at=stamp.run_at if stamp.run_at is not None else now + stamp.delay_s,
            created_at=now,
            expires_at=None if stamp.expires_in_s is None else now + stamp.expires_in_s,
            max_attempts=stamp.max_attempts, visibility_timeout_s=stamp.visibility_timeout_s,
            backoff_base_s=stamp.backoff_base_s, retention_s=stamp.dead_letter_retention_s,
        )  # fmt: skip
        self.writes.append(lambda: self.db.jobs.__setitem__(row.id, row))
        self.wakes.add(QUEUE_KEY + queue)
        return row.id

    def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        offset = next(self.db.ids)  # the lock is held: ids are handed out in commit order
        event = (offset, stream, key, payload_json, time.time())
        self.published.append(event)
        self.writes.append(lambda: self.db.events.append(event))
        self.wakes.add(STREAM_KEY + stream)
        return offset

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        self.wakes.add(channel)

    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        head = max((o for o, s, *_ in [*self.db.events, *self.published] if s == stream), default=0)
        if offset > head:
            raise offset_past_head(stream, offset, head)
        key = (stream, consumer)
        current = self.saved.get(key, self.db.offsets.get(key, 0))
        if offset <= current:
            return False
        self.saved[key] = offset
        self.writes.append(lambda: self.db.offsets.__setitem__(key, offset))
        return True

    def _execute(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """A small dialect: ``INSERT`` (one key), ``SELECT`` (committed keys) and
        ``COMMIT``, which ends the transaction behind the handle's back: it is
        refused from then on, as every engine must."""
        if sql == "COMMIT":
            self._commit()
            raise self._ended_elsewhere()
        if sql == "INSERT":
            key = str(params[0])
            self.writes.append(lambda: self.db.business.add(key))
            return []
        if sql == "SELECT":
            return [(key,) for key in sorted(self.db.business)]
        raise ValueError(f"the memory engine understands INSERT and SELECT, not {sql!r}")

    def _commit(self) -> None:
        try:
            for write in self.writes:
                write()
        finally:
            self.db.lock.release()
        self.db.wake(self.wakes)

    def _rollback(self) -> None:
        self.db.lock.release()


class MemoryQueue(Queue):
    _store: MemoryStore

    @property
    def db(self) -> Database:
        return self._store.db

    def _enqueue(self, stamp: JobStamp, payload_json: str) -> int:
        with self._store.tx_class(self._store) as tx:
            return tx._enqueue_tx(self.name, stamp, payload_json)

    def _claim(self, worker_id: str, n: int) -> list[Job]:
        now = time.time()
        with self.db.lock:
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
            visibility_timeout_s=row.visibility_timeout_s,
        )  # fmt: skip

    def _release_lapsed(self, now: float) -> None:
        for row in list(self.db.jobs.values()):
            if row.queue == self.name and row.deadline is not None and row.deadline < now:
                if row.attempts >= row.max_attempts:
                    self.db.to_dead(row, "claim lapsed on its last attempt", now)
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
        with self.db.lock:
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
        with self.db.lock:
            for table in (self.db.jobs, self.db.dead):
                row = table.get(job_id)
                if row is not None and row.queue == self.name:
                    del table[job_id]
                    return True
        return False

    def _get_job(self, job_id: int) -> JobInfo | None:
        with self.db.lock:
            row = self.db.jobs.get(job_id) or self.db.dead.get(job_id)
            if row is None or row.queue != self.name:
                return None
            return job_info(row)

    def _sweep_expired(self) -> int:
        now, moved = time.time(), 0
        with self.db.lock:
            for row in list(self.db.jobs.values()):
                if row.queue == self.name and row.expires_at is not None and row.expires_at <= now:
                    self.db.to_dead(row, "expired", now)
                    moved += 1
            self._release_lapsed(now)
            for row in list(self.db.dead.values()):
                if row.queue == self.name and row.retention_s is not None:
                    assert row.died_at is not None
                    if row.died_at + row.retention_s <= now:
                        del self.db.dead[row.id]
        return moved

    def _wait(self, timeout: float | None) -> bool:
        with self._store.subscribe(QUEUE_KEY + self.name) as wakes:
            now = time.time()
            with self.db.lock:
                times = [
                    r.run_at if r.deadline is None else r.deadline
                    for r in self.db.jobs.values()
                    if r.queue == self.name and (r.expires_at is None or r.expires_at > now)
                ]
            next_ready = min(times, default=None)
            if next_ready is not None and next_ready <= now:
                return True
            until_ready = None if next_ready is None else next_ready - now
            if timeout is not None and (until_ready is None or timeout < until_ready):
                return wakes.recv(timeout) is not None
            return wakes.recv(until_ready) is not None or not wakes.closed

    def _ack_job(self, job: Job) -> bool:
        with self.db.lock:
            row = self._held(job, time.time())
            if row is None:
                return False
            del self.db.jobs[row.id]
            return True

    def _retry_job(self, job: Job, error: str, delay_s: float) -> bool:
        now = time.time()
        with self.db.lock:
            row = self._held(job, now)
            if row is None:
                return False
            if row.attempts >= row.max_attempts:
                self.db.to_dead(row, error, now)
                return True
            row.deadline, row.run_at, row.last_error = None, now + delay_s, error
        self.db.wake({QUEUE_KEY + self.name})
        return True

    def _fail_job(self, job: Job, error: str) -> bool:
        now = time.time()
        with self.db.lock:
            row = self._held(job, now)
            if row is None:
                return False
            self.db.to_dead(row, error, now)
            return True

    def _release_job(self, job: Job) -> bool:
        with self.db.lock:
            row = self._held(job, time.time())
            if row is None:
                return False
            row.deadline = None
            row.attempts -= 1  # the claim's attempt is given back
        self.db.wake({QUEUE_KEY + self.name})
        return True

    def _heartbeat_job(self, job: Job, extend_s: float) -> bool:
        now = time.time()
        with self.db.lock:
            row = self._held(job, now)
            if row is None:
                return False
            row.deadline = job.deadline = now + extend_s
            return True


class MemoryStream(Stream):
    _store: MemoryStore

    def _publish(self, key: str | None, payload_json: str) -> int:
        with self._store.tx_class(self._store) as tx:
            return tx._publish_tx(self.name, key, payload_json)

    def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        with self._store.db.lock:
            rows = [e for e in self._store.db.events if e[1] == self.name and e[0] > offset]
        return [StreamEvent(o, s, k, decode(p), t) for o, s, k, p, t in rows[:limit]]

    def _get_offset(self, consumer: str) -> int:
        return self._store.db.offsets.get((self.name, consumer), 0)

    def _save_offset(self, consumer: str, offset: int) -> bool:
        with self._store.tx_class(self._store) as tx:
            return tx._save_offset_tx(self.name, consumer, offset)

    def _watch(self) -> WakeReceiver:
        return self._store.subscribe(STREAM_KEY + self.name)


class MemoryLock(Lock):
    _store: MemoryStore

    def _renew(self, ttl_s: float) -> bool:
        now = time.time()
        with self._store.db.lock:
            holder = self._store.db.locks.get(self.name)
            if holder is None or holder[0] != self.owner or holder[1] <= now:
                return False
            self._store.db.locks[self.name] = (self.owner, now + ttl_s)
            return True

    def _release(self) -> bool:
        with self._store.db.lock:
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
        with self.db.lock:
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
        with self.db.lock:
            infos = [job_info(row) for row in self._rows() if row.queue == queue]
        matching = [info for info in infos if state is None or info.state == state]
        return sorted(matching, key=lambda info: info.id)[:limit]

    def _streams(self) -> list[StreamStats]:
        with self.db.lock:
            events = [(stream, offset) for offset, stream, *_ in self.db.events]
            offsets = sorted(self.db.offsets.items())
        names = {stream for stream, _ in events} | {stream for (stream, _), _ in offsets}
        return [
            StreamStats(
                name=name,
                head=max((offset for stream, offset in events if stream == name), default=0),
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
        with self.db.lock:
            held = sorted(self.db.locks.items())
        return [
            LockInfo(name, owner, expires_at)
            for name, (owner, expires_at) in held
            if not self._store._expired((owner, expires_at), now)
        ]

    def _schedules(self) -> list[Schedule]:
        with self.db.lock:
            return [
                Schedule(name, s["spec"], s["queue"], decode(s["payload"]), s["next_fire_at"])
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

    capabilities: ClassVar[Capabilities] = CAPABILITIES
    tx_class: ClassVar[type[MemoryTx]] = MemoryTx
    queue_class: ClassVar[type[MemoryQueue]] = MemoryQueue
    stream_class: ClassVar[type[MemoryStream]] = MemoryStream

    def __init__(self, name: str, scheduler_lease_s: float) -> None:
        super().__init__(f"memory://{name}")
        self.db = database(name)
        self.scheduler_lease_s = scheduler_lease_s
        self._mine: set[BufferedWakeReceiver] = set()

    def subscribe(self, key: str) -> BufferedWakeReceiver:
        self._check_open()
        receiver = BufferedWakeReceiver(key, on_close=self._unsubscribe)
        with self.db.lock:
            if self.db.wakes_failed is not None:
                raise DatabaseError("the wake path died") from self.db.wakes_failed
            self.db.receivers.setdefault(key, set()).add(receiver)
            self._mine.add(receiver)
        return receiver

    def _unsubscribe(self, receiver: BufferedWakeReceiver) -> None:
        with self.db.lock:
            self.db.receivers.get(receiver.channel, set()).discard(receiver)
            self._mine.discard(receiver)

    def _close(self) -> None:
        for receiver in list(self._mine):
            receiver.shut()

    def fail_wakes(self, error: BaseException) -> None:
        """The wake path died: no wake can come any more, so every receiver closes
        (failure is an event, never silence) and later listens raise."""
        with self.db.lock:
            self.db.wakes_failed = error
            receivers = [r for group in self.db.receivers.values() for r in group]
            self.db.receivers.clear()
        for receiver in receivers:
            receiver.shut()

    def _notify(self, channel: str, payload_json: str) -> None:
        self.db.wake({channel})

    def _listen(self, channel: str) -> WakeReceiver:
        return self.subscribe(channel)

    def _stream(self, name: str) -> Stream:
        return self.stream_class(self, name)

    def _queue(self, name: str, opts: QueueOpts) -> Queue:
        return self.queue_class(self, name, opts)

    def _try_lock(self, name: str, owner: str, ttl_s: float) -> Lock | None:
        now = time.time()
        with self.db.lock:
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
        now = time.time()
        with self.db.lock:
            old = self.db.schedules.get(name)
            anchor = now if old is None else old["anchor"]
            next_fire_at = now + interval_s if old is None else old["next_fire_at"]
            if old is not None and old["spec"] != spec:
                next_fire_at = first_boundary_after(anchor, interval_s, now)
            self.db.schedules[name] = {
                "spec": spec, "interval_s": interval_s, "queue": queue, "payload": payload_json,
                "opts": opts, "anchor": anchor, "next_fire_at": next_fire_at,
            }  # fmt: skip
        self.db.wake({SCHEDULES_KEY})
        return Schedule(name, spec, queue, decode(payload_json), next_fire_at)

    def _unschedule(self, name: str) -> bool:
        with self.db.lock:
            return self.db.schedules.pop(name, None) is not None

    def _run_schedules(self, stop: StopSignal, owner: str) -> None:
        lease = self.scheduler_lease_s
        run_scheduler(
            stop,
            lease_s=lease,
            try_lead=lambda: self._try_lock(SCHEDULER_LOCK, owner, lease),
            fire_due=lambda lock: self._fire_due(lock.owner),
            watch_changes=lambda: self.subscribe(SCHEDULES_KEY),
        )

    def _fire_due(self, owner: str) -> float | None:
        now = time.time()
        with self.db.lock:
            for schedule in self.db.schedules.values():
                plan = plan_fires(schedule["next_fire_at"], schedule["interval_s"], now)
                for _ in plan.fire_at:
                    holder = self.db.locks.get(SCHEDULER_LOCK)
                    if holder is None or holder[0] != owner or holder[1] <= time.time():
                        raise LeadershipLost(f"{owner!r} no longer holds {SCHEDULER_LOCK!r}")
                    opts: ScheduleOpts = schedule["opts"]
                    stamp = stamp_job(
                        self._declared_queue_opts(schedule["queue"]),
                        EnqueueOpts(priority=opts.priority, max_attempts=opts.max_attempts,
                                    expires=opts.expires),
                    )  # fmt: skip
                    with self.tx_class(self) as tx:
                        tx._enqueue_tx(schedule["queue"], stamp, schedule["payload"])
                schedule["next_fire_at"] = plan.next_fire_at
            return min((s["next_fire_at"] for s in self.db.schedules.values()), default=None)

    def _inspect(self) -> Inspector:
        return MemoryInspector(self)

    def _begin_tx(self) -> TxHandle:
        return self.tx_class(self)

    def _adopt_tx(self, connection: Any) -> TxHandle:
        raise TypeError("the memory engine has no driver connections to adopt")


class MemoryEngine(Engine):
    """``memory://NAME``: stores in this process's memory, shared by NAME."""

    name = "memory"
    schemes = ("memory",)
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

    def write_business_row(self, tx: TxHandle, key: str) -> None:
        tx.execute("INSERT", (key,))

    def business_rows(self, store: Store) -> set[str]:
        with store.transaction() as tx:
            return {row[0] for row in tx.execute("SELECT")}

    def expire_lock(self, target: StoreTarget, name: str) -> None:
        db = database(target.target.partition("://")[2])
        with db.lock:
            owner, _ = db.locks[name]
            db.locks[name] = (owner, 0.0)

    def shift_schedule(self, target: StoreTarget, name: str, by_s: float) -> None:
        db = database(target.target.partition("://")[2])
        with db.lock:
            db.schedules[name]["next_fire_at"] += by_s

    def commit_behind_its_back(self, tx: TxHandle) -> None:
        tx.execute("COMMIT")

    def break_wakes(self, store: Store) -> None:
        assert isinstance(store, MemoryStore)
        store.fail_wakes(RuntimeError("the wake path was broken behind the store's back"))
