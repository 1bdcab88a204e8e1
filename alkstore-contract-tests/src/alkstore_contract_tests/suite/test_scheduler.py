"""The scheduler: upserts, one leader, one enqueue per boundary, bounded catch-up."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

import alkstore
from alkstore import QueueOpts, ScheduleOpts
from alkstore.engine import StoreTarget, TestProvider
from alkstore_contract_tests.suite._runner import Runner
from alkstore_contract_tests.suite._support import OpenStore, needs


def drain(store: alkstore.Store, queue: str) -> list[alkstore.Job]:
    return store.queue(queue).claim_batch("check", 1_000)


def boundaries_fired(store: alkstore.Store, created: alkstore.Schedule, every_s: float) -> int:
    """How many boundaries the one schedule fired: every boundary on its grid from
    the first after ``created`` to the last it remembers firing. A runner's jobs
    must number exactly this, however late a loaded machine let it stop."""
    [schedule] = store.inspect().schedules()
    if schedule.last_fire_at is None:
        return 0
    return round((schedule.last_fire_at - created.next_fire_at) / every_s) + 1


def caught_up(runner: Runner) -> None:
    """Wait until the one schedule's next boundary is ahead of now: its
    catch-up is over, however long a loaded machine took to fire it."""
    store = runner.store
    runner.until(lambda: store.inspect().schedules()[0].next_fire_at > time.time(), timeout=4.5)


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


def test_schedules_refuse_invalid_specs(store: alkstore.Store) -> None:
    for spec in ("@every 0s", "@every 5w", "0 * * *", "61 * * * *", "0 0 30 2 *", "@yearly"):
        with pytest.raises(alkstore.InvalidSpec):
            store.schedule("tick", spec, "jobs", {})
    with pytest.raises(alkstore.InvalidSpec, match="only to cron specs"):
        store.schedule("tick", "@every 1h", "jobs", {}, ScheduleOpts(tz="Europe/Berlin"))
    assert store.inspect().schedules() == []


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
    created = store.schedule("tick", "@every 1s", "jobs", {"tick": True}, ScheduleOpts(priority=4))
    runner = Runner(store, "leader", sole=True)
    runner.until(lambda: len(store.inspect().jobs("jobs")) >= 2)
    time.sleep(0.3)  # a runner firing a boundary twice would have by now
    assert runner.finish() == []
    jobs = drain(store, "jobs")
    assert len(jobs) == boundaries_fired(store, created, 1.0) >= 2
    assert all((job.payload, job.priority) == ({"tick": True}, 4) for job in jobs)


def test_fired_boundaries_stay_on_the_grid_and_never_drift(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    created = store.schedule("tick", "@every 2s", "jobs", 1)
    provider.shift_schedule(target, "tick", -2.5)  # one boundary 0.5 s overdue
    overdue = created.next_fire_at - 2.5
    runner = Runner(store, "leader", sole=True)
    runner.until(lambda: store.inspect().queues())
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
    runner = Runner(store, "leader", sole=True)
    runner.until(lambda: len(store.inspect().jobs("jobs")) == 2)
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
    created = stores[0].schedule("tick", "@every 1s", "jobs", 1)
    runners = [Runner(store, f"runner-{n}") for n, store in enumerate(stores)]
    deadline = time.monotonic() + 10
    while len(stores[0].inspect().jobs("jobs")) < 2:
        assert any(runner.thread.is_alive() for runner in runners), "every runner ended"
        assert time.monotonic() < deadline, "two boundaries did not fire within 10 s"
        time.sleep(0.01)
    time.sleep(0.3)  # a second runner firing a boundary too would have by now
    # A leader stalled past its short lease on a loaded machine loses the lease
    # to a standby and says so (LeadershipLost): a handover, not a second
    # leader. What must hold is that each boundary fired once, by one runner.
    ended = [error for runner in runners for error in runner.finish()]
    assert all(isinstance(error, alkstore.LeadershipLost) for error in ended), ended
    assert len(ended) < len(runners), f"no runner kept leading: {ended!r}"
    assert len(drain(stores[0], "jobs")) == boundaries_fired(stores[0], created, 1.0) >= 2


def test_a_standby_takes_over_when_the_leader_stops(
    open_store: OpenStore, scheduler_lease_s: float
) -> None:
    first, second = open_store(), open_store()
    first.schedule("tick", "@every 1s", "jobs", 1)
    leader = Runner(first, "first")
    time.sleep(0.2)
    standby = Runner(second, "second")
    time.sleep(1.0)
    stepped_down = leader.finish()  # releases leadership
    by_leader, by_standby = len(drain(first, "jobs")), 0

    def standby_fired() -> bool:
        nonlocal by_standby
        by_standby += len(drain(first, "jobs"))
        return by_standby >= 1 and by_leader + by_standby >= 2

    standby.until(standby_fired, timeout=scheduler_lease_s + 10)
    # A machine that stalls a leader past its lease may cost it the lock,
    # which it must report; nothing else may end either runner.
    ended = stepped_down + standby.finish()
    assert all(isinstance(error, alkstore.LeadershipLost) for error in ended), ended


def test_catch_up_fires_at_most_64_missed_boundaries_then_skips_forward(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    created = store.schedule("tick", "@every 10s", "jobs", 1)  # next boundary: created + 10 s
    provider.shift_schedule(target, "tick", -1005.0)  # now 100 boundaries behind, next in 5 s
    runner = Runner(store, "leader", sole=True)
    caught_up(runner)
    assert runner.finish() == []
    assert len(drain(store, "jobs")) == 64
    [schedule] = store.inspect().schedules()
    next_fire_at = schedule.next_fire_at
    assert time.time() < next_fire_at <= time.time() + 10
    # The first boundary after now, on the grid: 100 boundaries on from the overdue one.
    assert next_fire_at == pytest.approx(created.next_fire_at - 1005 + 1000, abs=1e-3)


def test_a_few_missed_boundaries_are_all_caught_up(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    created = store.schedule("tick", "@every 10s", "jobs", 1)
    provider.shift_schedule(target, "tick", -35.0)  # 3 boundaries behind, next in 5 s
    runner = Runner(store, "leader", sole=True)
    caught_up(runner)
    assert runner.finish() == []
    assert len(drain(store, "jobs")) == 3
    [schedule] = store.inspect().schedules()
    # Fired at created - 35, - 25 and - 15 (the next is created - 5): the last is remembered.
    assert schedule.last_fire_at == pytest.approx(created.next_fire_at - 15, abs=1e-3)


def test_a_schedule_remembers_the_boundary_it_fired_last_and_keeps_it_when_changed(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    created = store.schedule("tick", "@every 2s", "jobs", 1)
    assert created.last_fire_at is None
    assert [s.last_fire_at for s in store.inspect().schedules()] == [None]
    provider.shift_schedule(target, "tick", -2.5)  # one boundary 0.5 s overdue
    overdue = created.next_fire_at - 2.5
    runner = Runner(store, "leader", sole=True)
    runner.until(lambda: store.inspect().queues())
    assert runner.finish() == []
    [fired] = store.inspect().schedules()
    assert fired.last_fire_at == pytest.approx(overdue, abs=1e-3)
    changed = store.schedule("tick", "@every 3s", "jobs", {"v": 2})  # a new spec and payload
    assert changed.last_fire_at == pytest.approx(overdue, abs=1e-3)
    [kept] = store.inspect().schedules()
    assert kept.last_fire_at == pytest.approx(overdue, abs=1e-3)
    assert store.unschedule("tick")
    again = store.schedule("tick", "@every 2s", "jobs", 1)  # a new schedule by that name
    assert again.last_fire_at is None


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
    usurper = Runner(peer, "usurper", sole=True)
    leader.thread.join(scheduler_lease_s * 3 + 2)
    errors = leader.finish()
    assert usurper.finish() == []
    assert len(errors) == 1
    assert isinstance(errors[0], alkstore.LeadershipLost)


# Cron schedules in time zones (engine contract 1.4, docs/cron.md: every engine
# keeps it). Boundaries are computed by core; the engine stores spec and zone
# and gives them back, so these tests check what comes back and what fires.

BERLIN = ZoneInfo("Europe/Berlin")


def next_local(zone: ZoneInfo, hour: int, minute: int, after: float) -> float:
    """The first hour:minute local time after ``after`` (no DST change on the way)."""
    day = datetime.fromtimestamp(after, zone).date()
    while True:
        candidate = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
        if candidate.timestamp() > after:
            return candidate.timestamp()
        day += timedelta(days=1)


def offset_changes(zone: ZoneInfo, start: float, days: int) -> list[tuple[datetime, int]]:
    """When the zone's UTC offset changes in ``days`` days from ``start``
    (negative: back in time, latest first), as the local time just after the
    change, with the change's sign."""

    def offset(moment: datetime) -> timedelta:
        found = moment.astimezone(zone).utcoffset()
        assert found is not None
        return found

    changes = []
    step = 1 if days > 0 else -1
    origin = datetime.fromtimestamp(start, timezone.utc)
    for n in range(0, days, step):
        moment = origin + timedelta(days=n)
        before, after = offset(moment - timedelta(days=1)), offset(moment)
        if before != after:
            change = moment - timedelta(days=1)
            while offset(change) == before:  # to the minute after the change
                change += timedelta(minutes=1)
            changes.append((change.astimezone(zone), 1 if after > before else -1))
    return changes


def clear_of_the_hour() -> None:
    """Wait while the next full hour (UTC, and in every zone of a whole-hour
    offset) is less than 5 s away, so a test scheduling an hourly spec and then
    firing it sees the same next boundary throughout."""
    while (3_600 - time.time() % 3_600) < 5:
        time.sleep(0.5)


def test_a_cron_schedule_keeps_its_spec_and_zone_and_fires_at_local_time(
    store: alkstore.Store,
) -> None:
    created = store.schedule(
        "nightly", "30 3 * * *", "jobs", {"v": 1}, ScheduleOpts(tz="Europe/Berlin")
    )
    assert (created.spec, created.tz) == ("30 3 * * *", "Europe/Berlin")
    expected = next_local(BERLIN, 3, 30, time.time() - 5)
    if expected <= time.time():  # 03:30 in Berlin is passing right now
        expected = next_local(BERLIN, 3, 30, time.time())
    assert created.next_fire_at == expected
    before = time.time()
    daily = store.schedule("daily", "@daily", "jobs", 2)  # no zone: UTC
    assert (daily.spec, daily.tz) == ("@daily", None)
    assert daily.next_fire_at in {(t // 86_400 + 1) * 86_400 for t in (before, time.time())}
    assert store.inspect().schedules() == [daily, created]


def test_the_same_cron_spec_again_keeps_its_timing_and_another_zone_moves_it(
    store: alkstore.Store,
) -> None:
    opts = ScheduleOpts(tz="Europe/Berlin")
    created = store.schedule("nightly", "0 3 * * *", "jobs", 1, opts)
    again = store.schedule("nightly", "0 3 * * *", "jobs", 2, opts)
    assert again.next_fire_at == created.next_fire_at
    moved = store.schedule("nightly", "0 3 * * *", "jobs", 2, ScheduleOpts(tz="Asia/Tokyo"))
    assert moved.tz == "Asia/Tokyo"
    tokyo = ZoneInfo("Asia/Tokyo")
    assert moved.next_fire_at in {
        next_local(tokyo, 3, 0, time.time() - 5),
        next_local(tokyo, 3, 0, time.time()),
    }
    back = store.schedule("nightly", "@every 1h", "jobs", 3)
    assert (back.spec, back.tz) == ("@every 1h", None)
    [listed] = store.inspect().schedules()
    assert listed == back


def test_a_local_time_skipped_by_the_next_spring_forward_fires_at_the_end_of_the_gap(
    store: alkstore.Store,
) -> None:
    day, _ = next(c for c in offset_changes(BERLIN, time.time() + 86_400, 400) if c[1] > 0)
    spec = f"30 2 {day.day} {day.month} *"  # 02:30 on a day that has no 02:30
    created = store.schedule("gap", spec, "jobs", 1, ScheduleOpts(tz="Europe/Berlin"))
    assert datetime.fromtimestamp(created.next_fire_at, BERLIN) == datetime(
        day.year, day.month, day.day, 3, 0, tzinfo=BERLIN
    )


def test_a_local_time_repeated_by_the_next_fall_back_fires_at_its_first_occurrence(
    store: alkstore.Store,
) -> None:
    day, _ = next(c for c in offset_changes(BERLIN, time.time() + 86_400, 400) if c[1] < 0)
    spec = f"30 2 {day.day} {day.month} *"  # 02:30 happens twice that day
    created = store.schedule("twice", spec, "jobs", 1, ScheduleOpts(tz="Europe/Berlin"))
    first = datetime(day.year, day.month, day.day, 2, 30, tzinfo=BERLIN, fold=0)
    assert created.next_fire_at == first.timestamp()
    assert first.utcoffset() == timedelta(hours=2)  # summer time: the first of the two


@pytest.mark.parametrize(
    ("sign", "hours", "fires"),
    [pytest.param(1, "0-5", 6, id="spring forward: 02:30 fires at 03:00"),
     pytest.param(-1, "0-4", 5, id="fall back: 02:30 fires once")],
)  # fmt: skip
def test_a_runner_catching_up_across_the_last_dst_change_fires_each_local_time_once(
    provider: TestProvider,
    target: StoreTarget,
    store: alkstore.Store,
    scheduler_lease_s: float,
    sign: int,
    hours: str,
    fires: int,
) -> None:
    needs(provider, "shift_schedule")
    day, _ = next(c for c in offset_changes(BERLIN, time.time() - 86_400, -400) if c[1] == sign)
    spec = f"30 {hours} {day.day} {day.month} *"  # :30 past each hour around the change
    created = store.schedule("dst", spec, "jobs", 1, ScheduleOpts(tz="Europe/Berlin"))
    past = datetime(day.year, day.month, day.day, 0, 30, tzinfo=BERLIN).timestamp()
    provider.shift_schedule(target, "dst", past - created.next_fire_at)
    runner = Runner(store, "leader", sole=True)
    runner.until(lambda: len(store.inspect().jobs("jobs")) >= fires)
    time.sleep(0.3)  # a runner firing too much would have by now
    assert runner.finish() == []
    assert len(drain(store, "jobs")) == fires
    [schedule] = store.inspect().schedules()
    assert schedule.next_fire_at == created.next_fire_at  # next year's first :30


def test_cron_catch_up_fires_at_most_64_missed_boundaries_then_skips_forward(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    clear_of_the_hour()
    created = store.schedule("hourly", "@hourly", "jobs", 1)
    provider.shift_schedule(target, "hourly", -100 * 3_600.0)  # 100 boundaries behind
    runner = Runner(store, "leader", sole=True)
    runner.until(lambda: len(store.inspect().jobs("jobs")) >= 64)
    time.sleep(0.3)
    assert runner.finish() == []
    assert len(drain(store, "jobs")) == 64
    [schedule] = store.inspect().schedules()
    assert schedule.next_fire_at == created.next_fire_at  # the first boundary after now


def test_a_few_missed_cron_boundaries_are_all_caught_up(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, scheduler_lease_s: float
) -> None:
    needs(provider, "shift_schedule")
    clear_of_the_hour()
    created = store.schedule("hourly", "0 * * * *", "jobs", 1, ScheduleOpts(tz="Asia/Tokyo"))
    provider.shift_schedule(target, "hourly", -3 * 3_600.0)
    runner = Runner(store, "leader", sole=True)
    runner.until(lambda: len(store.inspect().jobs("jobs")) >= 3)
    time.sleep(0.3)
    assert runner.finish() == []
    assert len(drain(store, "jobs")) == 3
    [schedule] = store.inspect().schedules()
    assert (schedule.next_fire_at, schedule.tz) == (created.next_fire_at, "Asia/Tokyo")
