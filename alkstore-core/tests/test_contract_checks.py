"""What core does around every engine: check, encode, stamp, then call the hook.

A recording engine stands in for a database here. It records each hook call,
so these tests see exactly what core hands an engine — and that bad input
reaches no hook at all. Engine behaviour is the contract suite's business.
"""

from __future__ import annotations

import threading
from typing import Any, NoReturn

import pytest

import alkstore
from alkstore import EnqueueOpts, QueueOpts, ScheduleOpts, StreamEvent, Wake
from alkstore._options import OUTBOX_QUEUE_OPTS
from alkstore.engine import (
    BufferedWakeReceiver,
    Capabilities,
    DueSchedules,
    Fired,
    Job,
    JobStamp,
    Lock,
    Params,
    Queue,
    Store,
    Stream,
    TxHandle,
)

Calls = list[tuple[Any, ...]]


class RecordingStore(Store):
    def __init__(self) -> None:
        super().__init__("recording", Capabilities(notify_payload_limit=20))
        self.calls: Calls = []
        self.events: list[StreamEvent] = []
        self.receivers: list[BufferedWakeReceiver] = []

    def calls_of(self, kind: str) -> list[Any]:
        return [call[1] for call in self.calls if call[0] == kind]

    def _close(self) -> None:
        self.calls.append(("close",))
        for receiver in self.receivers:
            receiver.close()

    def _notify(self, channel: str, payload_json: str) -> None:
        self.calls.append(("notify", channel, payload_json))

    def _watch(self, key: str) -> BufferedWakeReceiver:
        receiver = BufferedWakeReceiver(key)
        self.receivers.append(receiver)
        return receiver

    def _stream(self, name: str) -> RecordingStream:
        return RecordingStream(self, name)

    def _queue(self, name: str, opts: QueueOpts) -> RecordingQueue:
        self.calls.append(("queue", name, opts))
        return RecordingQueue(self, name, opts)

    def _try_lock(self, name: str, owner: str, ttl_s: float) -> Lock | None:
        self.calls.append(("try_lock", name, owner, ttl_s))
        return RecordingLock(self, name, owner, ttl_s)

    def _schedule(self, *args: Any) -> alkstore.Schedule:
        self.calls.append(("schedule", *args))
        name, spec, _, queue, payload_json, _ = args
        return alkstore.Schedule(name, spec, queue, payload_json, 0.0)

    def _unschedule(self, name: str) -> bool:
        self.calls.append(("unschedule", name))
        return True

    def _due_schedules(self) -> DueSchedules:
        return DueSchedules(0.0, [])

    def _fire_boundary(self, *args: Any) -> Fired:
        raise NotImplementedError

    def _until_next_fire(self) -> None:
        return None

    def _begin_tx(self) -> RecordingTx:
        return RecordingTx(self)

    def _inspect(self) -> NoReturn:
        raise NotImplementedError

    def _adopt_tx(self, connection: Any) -> RecordingTx:
        return RecordingTx(self)


class RecordingStream(Stream):
    _store: RecordingStore

    def _publish(self, key: str | None, payload_json: str) -> int:
        offset = len(self._store.events) + 1
        payload = alkstore.engine.decode(payload_json)
        self._store.events.append(StreamEvent(offset, self.name, key, payload, 0.0))
        for receiver in self._store.receivers:
            receiver.deliver(Wake(self.name))
        return offset

    def _read_since(self, offset: int, limit: int) -> list[StreamEvent]:
        return [e for e in self._store.events if e.offset > offset][:limit]

    def _get_offset(self, consumer: str) -> int:
        saved: dict[str, int] = dict(self._store.calls_of("save_offset"))
        return saved.get(consumer, 0)

    def _save_offset(self, consumer: str, offset: int) -> bool:
        self._store.calls.append(("save_offset", (consumer, offset)))
        return True


class RecordingQueue(Queue):
    _store: RecordingStore

    def _enqueue(self, stamp: JobStamp, payload_json: str) -> int:
        self._store.calls.append(("enqueue", self.name, stamp, payload_json))
        return 1

    def _claim(self, worker_id: str, n: int) -> list[Job]:
        self._store.calls.append(("claim", worker_id, n))
        return [
            Job(queue=self, id=1, payload={"a": 1}, priority=0, attempts=2, max_attempts=3,
                run_at=0.0, deadline=10.0, worker_id=worker_id, backoff_base_s=4.0)
        ]  # fmt: skip

    def _ack_batch(self, claims: list[tuple[int, int | None]], worker_id: str) -> int:
        self._store.calls.append(("ack_batch", claims, worker_id))
        return len(claims)

    def _cancel(self, job_id: int) -> bool:
        self._store.calls.append(("cancel", job_id))
        return True

    def _get_job(self, job_id: int) -> None:
        self._store.calls.append(("get_job", job_id))

    def _sweep_expired(self) -> int:
        return 0

    def _until_ready(self) -> None:
        self._store.calls.append(("until_ready",))

    def _ack_job(self, job: Job) -> bool:
        self._store.calls.append(("ack", job.id))
        return True

    def _retry_job(self, job: Job, error: str, delay_s: float) -> bool:
        self._store.calls.append(("retry", job.id, error, delay_s))
        return True

    def _fail_job(self, job: Job, error: str) -> bool:
        self._store.calls.append(("fail", job.id, error))
        return True

    def _release_job(self, job: Job) -> bool:
        self._store.calls.append(("release_job", job.id))
        return True

    def _heartbeat_job(self, job: Job, extend_s: float) -> bool:
        self._store.calls.append(("heartbeat", job.id, extend_s))
        return True


class RecordingLock(Lock):
    _store: RecordingStore

    def _renew(self, ttl_s: float) -> bool:
        return True

    def _release(self) -> bool:
        self._store.calls.append(("release", self.name))
        return True


class RecordingTx(TxHandle):
    _store: RecordingStore

    @property
    def connection(self) -> None:
        return None

    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        self._store.calls.append(("enqueue_tx", queue, stamp, payload_json))
        return 1

    def _publish_tx(self, stream: str, key: str | None, payload_json: str) -> int:
        self._store.calls.append(("publish_tx", stream, key, payload_json))
        return 1

    def _notify_tx(self, channel: str, payload_json: str) -> None:
        self._store.calls.append(("notify_tx", channel, payload_json))

    def _save_offset_tx(self, stream: str, consumer: str, offset: int) -> bool:
        self._store.calls.append(("save_offset_tx", stream, consumer, offset))
        return True

    def _execute(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        self._store.calls.append(("execute", sql, tuple(params)))
        return []

    def _commit(self) -> None:
        self._store.calls.append(("commit",))

    def _rollback(self) -> None:
        self._store.calls.append(("rollback",))


@pytest.fixture
def store() -> RecordingStore:
    return RecordingStore()


NAME_ENTRY_POINTS = {
    "notify": lambda s, n: s.notify(n, {}),
    "listen": lambda s, n: s.listen(n),
    "stream": lambda s, n: s.stream(n),
    "queue": lambda s, n: s.queue(n),
    "outbox": lambda s, n: s.outbox(n),
    "try_lock": lambda s, n: s.try_lock(n, "me", 1),
    "schedule": lambda s, n: s.schedule(n, "@every 1s", "q", {}),
    "schedule queue": lambda s, n: s.schedule("s", "@every 1s", n, {}),
    "unschedule": lambda s, n: s.unschedule(n),
    "enqueue_tx": lambda s, n: s.begin_tx().enqueue_tx(n, None, {}),
    "publish_tx": lambda s, n: s.begin_tx().publish_tx(n, {}),
    "publish_with_key_tx": lambda s, n: s.begin_tx().publish_with_key_tx(n, "k", {}),
    "notify_tx": lambda s, n: s.begin_tx().notify_tx(n, {}),
    "save_offset_tx": lambda s, n: s.begin_tx().save_offset_tx(n, "c", 1),
    "outbox_enqueue_tx": lambda s, n: s.begin_tx().outbox_enqueue_tx(n, None, {}),
}


@pytest.mark.parametrize("entry_point", sorted(NAME_ENTRY_POINTS))
@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("", alkstore.InvalidName),
        (None, alkstore.InvalidName),
        ("__alkstore_x", alkstore.ReservedName),
        ("__alkstore_outbox:x", alkstore.ReservedName),
    ],
)
def test_every_entry_point_refuses_bad_names_before_the_engine_sees_them(
    store: RecordingStore, entry_point: str, name: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        NAME_ENTRY_POINTS[entry_point](store, name)
    assert store.calls == []


def test_bad_payloads_reach_no_engine(store: RecordingStore) -> None:
    with pytest.raises(alkstore.Codec):
        store.queue("q").enqueue({1, 2})
    with pytest.raises(alkstore.Codec):
        store.begin_tx().publish_tx("s", float("nan"))
    assert [call[0] for call in store.calls] == ["queue"]


def test_notify_over_the_declared_limit_raises_payload_too_large(store: RecordingStore) -> None:
    store.notify("c", "x" * 18)  # 20 bytes encoded, with the quotes: at the limit
    with pytest.raises(alkstore.PayloadTooLarge, match="21 bytes"):
        store.notify("c", "x" * 19)
    with pytest.raises(alkstore.PayloadTooLarge):
        store.begin_tx().notify_tx("c", "é" * 10)  # 22 bytes in UTF-8
    assert store.calls == [("notify", "c", '"' + "x" * 18 + '"')]


def test_everything_raises_closed_after_close(store: RecordingStore) -> None:
    queue = store.queue("q")
    job = queue.claim_one("w")
    tx = store.begin_tx()
    receiver = store.listen("c")
    store.close()
    store.close()  # idempotent
    assert store.closed
    assert receiver.closed
    for call in (
        lambda: store.notify("c", 1),
        lambda: store.queue("q"),
        lambda: queue.enqueue(1),
        lambda: job.ack() if job else None,
        lambda: tx.enqueue_tx("q", None, 1),
        store.begin_tx,
    ):
        with pytest.raises(alkstore.Closed, match="closed"):
            call()


def test_enqueue_stamps_the_queue_opts_and_the_job_opts(store: RecordingStore) -> None:
    store.queue("q", QueueOpts(visibility_timeout_s=9, max_attempts=2)).enqueue(
        {"a": 1}, EnqueueOpts(priority=5)
    )
    _, name, stamp, payload_json = store.calls[-1]
    assert (name, payload_json) == ("q", '{"a":1}')
    assert (stamp.visibility_timeout_s, stamp.max_attempts, stamp.priority) == (9, 2, 5)


def test_enqueue_tx_uses_the_opts_this_store_last_declared(store: RecordingStore) -> None:
    store.queue("q", QueueOpts(max_attempts=7))
    store.queue("q")  # no opts: keeps the declaration
    with store.transaction() as tx:
        tx.enqueue_tx("q", None, 1)
        tx.enqueue_tx("other", None, 1)
    stamps = [call[2] for call in store.calls if call[0] == "enqueue_tx"]
    assert [stamp.max_attempts for stamp in stamps] == [7, 3]


def test_outbox_enqueue_tx_derives_the_backing_queue_with_outbox_opts(
    store: RecordingStore,
) -> None:
    with store.transaction() as tx:
        tx.outbox_enqueue_tx("webhooks", EnqueueOpts(max_attempts=2), {"u": 1})
    _, queue, stamp, _ = next(call for call in store.calls if call[0] == "enqueue_tx")
    assert queue == "__alkstore_outbox:webhooks"
    assert (stamp.visibility_timeout_s, stamp.max_attempts, stamp.backoff_base_s) == (60, 2, 5)


def test_outbox_runs_on_its_backing_queue(store: RecordingStore) -> None:
    outbox = store.outbox("webhooks")
    assert outbox.queue_name == "__alkstore_outbox:webhooks"
    assert ("queue", "__alkstore_outbox:webhooks", OUTBOX_QUEUE_OPTS) in store.calls
    delivered: list[Any] = []
    assert outbox.run_once("w", delivered.append)
    assert delivered == [{"a": 1}]
    assert store.calls[-1] == ("ack", 1)

    def refuse(payload: Any) -> None:
        raise ConnectionError("endpoint down")

    assert outbox.run_once("w", refuse)
    retry: tuple[Any, ...] = store.calls[-1]
    assert retry[:3] == ("retry", 1, "ConnectionError: endpoint down")
    assert 0 <= retry[3] <= 8.0  # the recorded job's stamped base 4 s, attempt 2


def test_transaction_commits_on_success_and_rolls_back_on_error(store: RecordingStore) -> None:
    with store.transaction() as tx:
        tx.execute("INSERT 1", (1,))

    def broken_business_rule() -> None:
        with store.transaction() as tx:
            tx.execute("INSERT 2")
            raise RuntimeError("business rule broken")

    with pytest.raises(RuntimeError):
        broken_business_rule()
    assert [call[0] for call in store.calls] == ["execute", "commit", "execute", "rollback"]

    tx = store.begin_tx()
    tx.rollback()
    with pytest.raises(alkstore.Closed, match="rolled back"):
        tx.execute("INSERT 3")


def test_a_handle_ends_with_commit_or_rollback(store: RecordingStore) -> None:
    tx = store.begin_tx()
    tx.commit()
    assert not tx.active
    for end in (tx.commit, tx.rollback):
        with pytest.raises(alkstore.Closed, match="already committed"):
            end()
    with store.transaction() as tx:
        tx.rollback()  # ending it inside the block is allowed
    assert [call[0] for call in store.calls] == ["commit", "rollback"]


def test_job_retry_follows_the_curve_of_the_rows_stamped_base(store: RecordingStore) -> None:
    job = store.queue("q").claim_one("w")
    assert job is not None
    for _ in range(50):
        job.retry(ValueError("bad"))
        *_, delay = store.calls[-1]
        assert 4.0 <= delay <= 8.0  # base 4 s, attempt 2: ceiling 8
    job.retry("explicit", 1.5)
    assert store.calls[-1] == ("retry", 1, "explicit", 1.5)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda job: job.retry("e", -1), "delay_s"),
        (lambda job: job.heartbeat(0), "extend_s"),
        (lambda job: job.heartbeat(float("inf")), "extend_s"),
    ],
)
def test_job_handle_refuses_nonsense(store: RecordingStore, call: Any, field: str) -> None:
    job = store.queue("q").claim_one("w")
    with pytest.raises(ValueError, match=field):
        call(job)
    assert store.calls[-1][0] == "claim"


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda q: q.claim_one(""), "worker_id"),
        (lambda q: q.claim_batch("w", 0), "n must be"),
        (lambda q: q.claim_batch("w", 10_001), "n must be"),
        (lambda q: q.ack_batch([0], "w"), "job_id"),
        (lambda q: q.cancel("1"), "job_id"),
        (lambda q: q.get_job(True), "job_id"),
        (lambda q: q.wait(-1), "timeout"),
    ],
)
def test_queue_calls_refuse_nonsense(store: RecordingStore, call: Any, says: str) -> None:
    queue = store.queue("q")
    with pytest.raises((ValueError, alkstore.InvalidName), match=says):
        call(queue)
    assert [c[0] for c in store.calls] == ["queue"]


def test_ack_batch_passes_distinct_ids_and_skips_the_engine_when_empty(
    store: RecordingStore,
) -> None:
    queue = store.queue("q")
    assert queue.ack_batch([], "w") == 0
    assert queue.ack_batch([3, 1, 3], "w") == 2
    assert store.calls[-1] == ("ack_batch", [(1, None), (3, None)], "w")


def test_ack_batch_fences_ids_by_the_attempt_this_store_claimed_them_at(
    store: RecordingStore,
) -> None:
    queue = store.queue("q")
    job = queue.claim_one("w")
    assert job is not None
    queue.ack_batch([job.id], "w")
    assert store.calls.pop() == ("ack_batch", [(job.id, job.attempts)], "w")
    queue.ack_batch([job.id], "another worker")  # not a claim this store handed to it
    assert store.calls.pop() == ("ack_batch", [(job.id, None)], "another worker")
    store.queue("elsewhere").ack_batch([job.id], "w")  # nor one of this queue
    assert store.calls.pop() == ("ack_batch", [(job.id, None)], "w")


def test_ack_batch_takes_jobs_and_skips_released_ones(store: RecordingStore) -> None:
    queue = store.queue("q")
    job = queue.claim_one("w")
    assert job is not None
    queue.ack_batch([job], "w")
    assert store.calls[-1] == ("ack_batch", [(job.id, job.attempts)], "w")
    job._released = True
    assert queue.ack_batch([job], "w") == 0


def test_ack_batch_fences_a_job_given_as_handle_and_id_by_the_handles_claim(
    store: RecordingStore,
) -> None:
    queue = store.queue("q")
    job = queue.claim_one("w")
    assert job is not None

    def ledger_remembers_attempt_1() -> None:  # a whole ack makes it forget
        job.attempts = 1
        store._claims.remember("q", [job])
        job.attempts = 7  # the handle's claim, not the one the ledger remembers

    orders: list[list[int | Job]] = [[job.id, job], [job, job.id]]
    for items in orders:
        ledger_remembers_attempt_1()
        queue.ack_batch(items, "w")
        assert store.calls.pop() == ("ack_batch", [(job.id, 7)], "w")
    ledger_remembers_attempt_1()
    job._released = True  # a released handle acks nothing; its id alone still counts
    queue.ack_batch([job, job.id], "w")
    assert store.calls.pop() == ("ack_batch", [(job.id, 1)], "w")


def test_the_claim_ledger_forgets_the_oldest_claims_past_its_capacity() -> None:
    from alkstore._claims import ClaimLedger

    ledger = ClaimLedger(capacity=2)
    queue = RecordingStore().queue("q")
    jobs = [
        Job(queue=queue, id=n, payload=None, priority=0, attempts=1, max_attempts=3,
            run_at=0.0, deadline=1.0, worker_id="w", backoff_base_s=1.0)
        for n in (1, 2, 3)
    ]  # fmt: skip
    ledger.remember("q", jobs)
    assert len(ledger) == 2
    assert ledger.attempt("q", 1, "w") is None
    assert ledger.attempt("q", 3, "w") == 1


def test_schedule_parses_the_spec_and_checks_the_target_queue(store: RecordingStore) -> None:
    with pytest.raises(alkstore.InvalidSpec):
        store.schedule("s", "*/5 * * * *", "q", {})
    store.schedule("s", "@every 2m", "q", {"k": 1}, ScheduleOpts(priority=3))
    assert store.calls == [("schedule", "s", "@every 2m", 120, "q", '{"k":1}', ScheduleOpts(3))]


class _OneLook:
    """A stop signal set once the runner has looked at it twice: one campaign."""

    def __init__(self) -> None:
        self.looks = 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > 1

    def wait(self, timeout: float | None = None) -> bool:
        return self.is_set()


def test_run_schedules_gives_a_unique_default_owner(store: RecordingStore) -> None:
    store.run_schedules(_OneLook())
    store.run_schedules(_OneLook())
    owners = [call[2] for call in store.calls if call[0] == "try_lock"]
    assert len(set(owners)) == 2
    assert all(owner.count(":") == 2 for owner in owners)


def test_try_lock_checks_owner_and_ttl(store: RecordingStore) -> None:
    with pytest.raises(alkstore.InvalidName, match="lock owner"):
        store.try_lock("l", "", 1)
    with pytest.raises(ValueError, match="ttl_s"):
        store.try_lock("l", "me", 0)
    lock = store.try_lock("l", "me", 0.5)
    assert lock is not None
    with lock:
        assert (lock.name, lock.owner, lock.ttl_s) == ("l", "me", 0.5)
    assert store.calls[-1] == ("release", "l")


def test_event_receiver_replays_then_waits_and_saves_only_when_asked(
    store: RecordingStore,
) -> None:
    stream = store.stream("orders")
    stream.publish("a")
    stream.publish_with_key("k", "b")
    with stream.subscribe("projection") as receiver:
        assert [receiver.recv(1), receiver.recv(1)] == store.events
        assert receiver.recv(0.01) is None
        threading.Timer(0.02, stream.publish, ["c"]).start()
        event = receiver.recv(5)
        assert event is not None
        assert (event.offset, event.payload) == (3, "c")
        assert store.calls_of("save_offset") == []
        assert receiver.save_offset()
        assert store.calls_of("save_offset") == [("projection", 3)]
    assert receiver.closed


def test_event_receiver_resumes_from_the_saved_offset(store: RecordingStore) -> None:
    stream = store.stream("orders")
    for payload in "abc":
        stream.publish(payload)
    stream.save_offset("projection", 2)
    receiver = stream.subscribe("projection")
    event = receiver.recv(1)
    assert event is not None
    assert event.payload == "c"
    assert not store.stream("orders").subscribe("fresh").save_offset()


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda s: s.read_since(-1), "offset"),
        (lambda s: s.read_since(0, 0), "limit"),
        (lambda s: s.read_since(0, 10_001), "limit"),
        (lambda s: s.save_offset("", 1), "consumer name"),
        (lambda s: s.save_offset("c", 2**63), "offset"),
        (lambda s: s.publish_with_key(None, 1), "key"),
    ],
)
def test_stream_calls_refuse_nonsense(store: RecordingStore, call: Any, says: str) -> None:
    with pytest.raises((ValueError, alkstore.InvalidName), match=says):
        call(store.stream("orders"))
    assert store.calls == []


def test_reprs_help_in_a_debugger(store: RecordingStore) -> None:
    assert repr(store) == "<RecordingStore 'recording' open>"
    assert repr(store.queue("q")).startswith("<RecordingQueue 'q' QueueOpts(")
    job = store.queue("q").claim_one("w")
    assert repr(job).startswith("<Job id=1 queue='q' attempts=2/3")
    assert repr(store.begin_tx()) == "<RecordingTx open>"
    assert repr(store.outbox("o")) == "<Outbox 'o'>"


def test_a_consumer_refuses_a_handler_that_does_not_fit_its_mode(store: RecordingStore) -> None:
    def plain(event: StreamEvent) -> None:
        """Handles one event."""

    def transactional(event: StreamEvent, tx: TxHandle) -> None:
        """Handles one event in the batch's transaction."""

    with pytest.raises(TypeError, match=r"transactional=True.*handler\(event, tx\)"):
        alkstore.Consumer(store, "s", "c", plain, transactional=True)
    with pytest.raises(TypeError, match=r"transactional=False.*handler\(event\)"):
        alkstore.Consumer(store, "s", "c", transactional)
    alkstore.Consumer(store, "s", "c", plain)
    alkstore.Consumer(store, "s", "c", transactional, transactional=True)
    alkstore.Consumer(store, "s", "c", print)  # takes *args: fits either way


def test_saving_offset_zero_never_reaches_the_engine(store: RecordingStore) -> None:
    assert store.stream("s").save_offset("c", 0) is False
    with store.transaction() as tx:
        assert tx.save_offset_tx("s", "c", 0) is False
    assert store.calls_of("save_offset") == []
    assert not [call for call in store.calls if call[0] == "save_offset_tx"]


class _ClosesItsStoreMidEnqueue(RecordingTx):
    def _enqueue_tx(self, queue: str, stamp: JobStamp, payload_json: str) -> int:
        self._store.close()  # as another thread would, between begin and commit
        return super()._enqueue_tx(queue, stamp, payload_json)


class _DefaultEnqueueQueue(RecordingQueue):
    _enqueue = Queue._enqueue  # core's default: one transaction of the engine's own


def test_a_default_enqueue_cut_short_by_close_is_rolled_back_not_left_open(
    store: RecordingStore,
) -> None:
    store._begin_tx = lambda: _ClosesItsStoreMidEnqueue(store)  # type: ignore[method-assign]
    queue = _DefaultEnqueueQueue(store, "q", QueueOpts())
    with pytest.raises(alkstore.Closed):
        queue.enqueue({"n": 1})
    assert ("rollback",) in store.calls
    assert ("commit",) not in store.calls
