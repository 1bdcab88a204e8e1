"""The scheduler: upserts, one leader, one enqueue per boundary, bounded catch-up."""

from __future__ import annotations

import threading
import time

import pytest

import alkstore
from alkstore import QueueOpts, ScheduleOpts
from alkstore.engine import StoreTarget, TestProvider
from alkstore_contract_tests.suite._support import OpenStore, eventually, needs


class Runner:
    """``run_schedules`` in a thread, keeping what it raised."""

    def __init__(self, store: alkstore.Store, owner: str) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(store, owner), daemon=True)
        self.thread.start()

    def _run(self, store: alkstore.Store, owner: str) -> None:
        try:
            store.run_schedules(self.stop, owner=owner)
        except BaseException as exc:
            self.errors.append(exc)

    def finish(self) -> list[BaseException]:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "run_schedules ignored its stop event"
        return self.errors


def drain(store: alkstore.Store, queue: str) -> list[alkstore.Job]:
    return store.queue(queue).claim_batch("check", 1_000)


def test_schedule_upserts_by_name_and_unschedule_deletes(store: alkstore.Store) -> None:
    created = store.schedule("tick", "@every 1h", "jobs", {"v": 1})
    assert (created.name, created.spec, created.queue, created.payload) == (
        "tick", "@every 1h", "jobs", {"v": 1},
    )  # fmt: skip
    assert created.next_fire_at == pytest.approx(time.time() + 3600, abs=5)
    time.sleep(0.05)  # an upsert that re-computed the next fire time from now would move it
    updated = store.schedule("tick", "@every 1h", "jobs", {"v": 2}, ScheduleOpts(priority=3))
    assert updated.payload == {"v": 2}
    assert updated.next_fire_at == pytest.approx(created.next_fire_at, abs=1e-3)
    assert store.inspect().schedules() == [updated]
    assert store.unschedule("tick")
    assert not store.unschedule("tick")


def test_schedules_refuse_cron_strings(store: alkstore.Store) -> None:
    for spec in ("0 * * * *", "@daily", "@every 0s", "@every 5w"):
        with pytest.raises(alkstore.InvalidSpec):
            store.schedule("tick", spec, "jobs", {})


def test_a_changed_spec_resumes_on_the_grid_anchored_at_creation(store: alkstore.Store) -> None:
    created = store.schedule("tick", "@every 1s", "jobs", 1)
    anchor = created.next_fire_at - 1
    time.sleep(0.3)
    unchanged = store.schedule("tick", "@every 1s", "jobs", 2)  # must not re-anchor at now
    assert unchanged.next_fire_at == pytest.approx(created.next_fire_at, abs=1e-3)
    changed = store.schedule("tick", "@every 2s", "jobs", 2)
    assert changed.next_fire_at == pytest.approx(anchor + 2, abs=1e-3)
    later = store.schedule("tick", "@every 3s", "jobs", 2)
    assert later.next_fire_at == pytest.approx(anchor + 3, abs=1e-3)


def test_nothing_fires_without_a_runner(store: alkstore.Store) -> None:
    store.schedule("tick", "@every 1s", "jobs", 1)
    time.sleep(1.2)
    assert drain(store, "jobs") == []


def test_a_runner_enqueues_once_per_elapsed_boundary(
    store: alkstore.Store, scheduler_lease_s: float
) -> None:
    store.schedule("tick", "@every 1s", "jobs", {"tick": True}, ScheduleOpts(priority=4))
    runner = Runner(store, "leader")
    time.sleep(2.4)
    assert runner.finish() == []
    jobs = drain(store, "jobs")
    assert len(jobs) == 2
    assert all((job.payload, job.priority) == ({"tick": True}, 4) for job in jobs)


def test_fired_boundaries_stay_on_the_grid_and_never_drift(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    created = store.schedule("tick", "@every 2s", "jobs", 1)
    provider.shift_schedule(target, "tick", -2.5)  # one boundary 0.5 s overdue
    overdue = created.next_fire_at - 2.5
    runner = Runner(store, "leader")
    eventually(lambda: store.inspect().queues())
    assert runner.finish() == []
    assert len(drain(store, "jobs")) == 1
    [schedule] = store.inspect().schedules()
    # The next boundary follows the overdue one, not the moment it fired.
    assert schedule.next_fire_at == pytest.approx(overdue + 2, abs=1e-3)


def test_a_scheduled_job_is_stamped_with_the_schedule_opts_and_the_declared_queue_opts(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    store.queue("jobs", QueueOpts(max_attempts=7, visibility_timeout_s=30))
    store.schedule(
        "tuned", "@every 1h", "jobs", "tuned", ScheduleOpts(priority=3, max_attempts=2, expires=60)
    )
    store.schedule("plain", "@every 1h", "jobs", "plain")
    for name in ("tuned", "plain"):
        provider.shift_schedule(target, name, -3_600.5)
    runner = Runner(store, "leader")
    eventually(lambda: len(store.inspect().jobs("jobs")) == 2)
    assert runner.finish() == []
    tuned, plain = sorted(store.inspect().jobs("jobs"), key=lambda job: job.payload != "tuned")
    assert (tuned.payload, tuned.priority, tuned.max_attempts) == ("tuned", 3, 2)
    assert tuned.expires_at == pytest.approx(tuned.created_at + 60, abs=1)
    assert (plain.payload, plain.priority, plain.max_attempts, plain.expires_at) == (
        "plain", 0, 7, None,
    )  # fmt: skip
    job = store.queue("jobs").claim_one("w")
    assert job is not None
    assert job.deadline == pytest.approx(time.time() + 30, abs=2)


def test_only_one_of_several_runners_fires(open_store: OpenStore, scheduler_lease_s: float) -> None:
    stores = [open_store() for _ in range(3)]
    stores[0].schedule("tick", "@every 1s", "jobs", 1)
    runners = [Runner(store, f"runner-{n}") for n, store in enumerate(stores)]
    time.sleep(2.4)
    assert [runner.finish() for runner in runners] == [[], [], []]
    assert len(drain(stores[0], "jobs")) == 2


def test_a_standby_takes_over_when_the_leader_stops(
    open_store: OpenStore, scheduler_lease_s: float
) -> None:
    first, second = open_store(), open_store()
    first.schedule("tick", "@every 1s", "jobs", 1)
    leader = Runner(first, "first")
    time.sleep(0.2)
    standby = Runner(second, "second")
    time.sleep(1.0)
    assert leader.finish() == []  # releases leadership
    time.sleep(scheduler_lease_s + 1.5)
    assert standby.finish() == []
    assert len(drain(first, "jobs")) >= 2


def test_catch_up_fires_at_most_64_missed_boundaries_then_skips_forward(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    created = store.schedule("tick", "@every 2s", "jobs", 1)  # next boundary: created + 2 s
    provider.shift_schedule(target, "tick", -201.0)  # now 100 boundaries behind, next in 1 s
    runner = Runner(store, "leader")
    time.sleep(0.4)
    assert runner.finish() == []
    assert len(drain(store, "jobs")) == 64
    [schedule] = store.inspect().schedules()
    next_fire_at = schedule.next_fire_at
    assert time.time() < next_fire_at <= time.time() + 2
    # The first boundary after now, on the grid: 100 boundaries on from the overdue one.
    assert next_fire_at == pytest.approx(created.next_fire_at - 201 + 200, abs=1e-3)


def test_a_few_missed_boundaries_are_all_caught_up(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    store.schedule("tick", "@every 2s", "jobs", 1)
    provider.shift_schedule(target, "tick", -7.0)  # 3 boundaries behind, next in 1 s
    runner = Runner(store, "leader")
    time.sleep(0.4)
    assert runner.finish() == []
    assert len(drain(store, "jobs")) == 3


def test_a_leader_that_cannot_renew_raises_leadership_lost(
    provider: TestProvider,
    target: StoreTarget,
    store: alkstore.Store,
    peer: alkstore.Store,
    scheduler_lease_s: float,
) -> None:
    needs(provider, "expire_lock")
    leader = Runner(store, "leader")
    time.sleep(0.2)
    provider.expire_lock(target, alkstore.SCHEDULER_LOCK)
    usurper = Runner(peer, "usurper")
    leader.thread.join(scheduler_lease_s * 3 + 2)
    errors = leader.finish()
    assert usurper.finish() == []
    assert len(errors) == 1
    assert isinstance(errors[0], alkstore.LeadershipLost)
