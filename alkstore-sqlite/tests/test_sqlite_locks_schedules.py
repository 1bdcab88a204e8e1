"""Named locks and the scheduler on a real SQLite file."""

from __future__ import annotations

import threading
import time

import pytest

import alkstore
from alkstore import SCHEDULER_LOCK, ScheduleOpts
from alkstore_sqlite import SQLiteStore


def test_a_held_lock_excludes_other_owners_until_released(
    store: SQLiteStore, peer: SQLiteStore
) -> None:
    lock = store.try_lock("report", "a", 5)
    assert lock is not None
    assert peer.try_lock("report", "b", 5) is None
    assert lock.release()
    assert not lock.release()
    assert peer.try_lock("report", "b", 5) is not None


def test_an_expired_lock_can_be_taken_and_the_old_handle_has_lost_it(
    store: SQLiteStore, peer: SQLiteStore
) -> None:
    old = store.try_lock("report", "a", 0.05)
    assert old is not None
    time.sleep(0.1)
    new = peer.try_lock("report", "b", 5)
    assert new is not None
    assert not old.renew()
    assert not old.release()
    assert new.renew(5)


def test_reacquiring_by_the_same_owner_does_not_refresh_the_ttl(store: SQLiteStore) -> None:
    first = store.try_lock("report", "a", 0.15)
    assert first is not None
    time.sleep(0.1)
    again = store.try_lock("report", "a", 10)
    assert again is not None
    time.sleep(0.1)  # past the first TTL: the re-acquire did not extend it
    assert store.try_lock("report", "b", 1) is not None


def test_renew_extends_a_held_lock(store: SQLiteStore, peer: SQLiteStore) -> None:
    lock = store.try_lock("report", "a", 0.1)
    assert lock is not None
    assert lock.renew(1)
    time.sleep(0.15)
    assert peer.try_lock("report", "b", 1) is None


def test_concurrent_try_lock_has_exactly_one_winner(store: SQLiteStore) -> None:
    results: list[object] = []
    barrier = threading.Barrier(8)

    def contend(owner: str) -> None:
        barrier.wait()
        results.append(store.try_lock("hot", owner, 5))

    threads = [threading.Thread(target=contend, args=(f"o{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(result is not None for result in results) == 1


def test_lock_context_manager_releases(store: SQLiteStore) -> None:
    lock = store.try_lock("report", "a", 5)
    assert lock is not None
    with lock:
        pass
    assert store.try_lock("report", "b", 5) is not None


def test_schedule_upserts_and_unschedules(store: SQLiteStore) -> None:
    created = store.schedule("tick", "@every 1h", "jobs", {"v": 1})
    assert created.next_fire_at == pytest.approx(time.time() + 3600, abs=5)
    again = store.schedule("tick", "@every 1h", "jobs", {"v": 2}, ScheduleOpts(priority=3))
    assert again.next_fire_at == created.next_fire_at  # same spec: same boundaries
    assert again.payload == {"v": 2}
    assert store.unschedule("tick")
    assert not store.unschedule("tick")


def test_schedule_refuses_a_reserved_target_queue(store: SQLiteStore) -> None:
    with pytest.raises(alkstore.ReservedName):
        store.schedule("s", "@every 1s", "__alkstore_outbox:x", {})
    with pytest.raises(alkstore.InvalidSpec):
        store.schedule("s", "0 * * * *", "jobs", {})


class Runner:
    """``run_schedules`` in a thread, with what it raised."""

    def __init__(self, store: alkstore.Store, owner: str) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(store, owner))
        self.thread.start()

    def _run(self, store: alkstore.Store, owner: str) -> None:
        try:
            store.run_schedules(self.stop, owner=owner)
        except BaseException as exc:
            self.errors.append(exc)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()


def test_the_runner_fires_each_elapsed_boundary_once(path: str) -> None:
    store = alkstore.open(path, scheduler_lease_s=0.6)
    try:
        store.schedule("tick", "@every 1s", "jobs", {"tick": True})
        runner = Runner(store, "leader")
        time.sleep(2.3)
        runner.finish()
        assert runner.errors == []
        jobs = store.queue("jobs").claim_batch("w", 100)
        assert len(jobs) == 2
        assert all(job.payload == {"tick": True} for job in jobs)
    finally:
        store.close()


def test_only_one_runner_leads(path: str) -> None:
    stores = [alkstore.open(path, scheduler_lease_s=0.6) for _ in range(3)]
    try:
        stores[0].schedule("tick", "@every 1s", "jobs", 1)
        runners = [Runner(s, f"r{n}") for n, s in enumerate(stores)]
        time.sleep(2.3)
        for runner in runners:
            runner.finish()
        assert [runner.errors for runner in runners] == [[], [], []]
        assert len(stores[0].queue("jobs").claim_batch("w", 100)) == 2
    finally:
        for store in stores:
            store.close()


def test_catch_up_fires_at_most_64_missed_boundaries_then_skips_forward(path: str) -> None:
    store = alkstore.open(path, scheduler_lease_s=0.6)
    try:
        store.schedule("tick", "@every 1s", "jobs", 1)
        with store.transaction() as tx:  # as if the runner had been down for 100 s
            tx.execute(
                "UPDATE __alkstore_schedules SET next_fire_at = next_fire_at - 100.5 "
                "WHERE name = 'tick'"
            )
        runner = Runner(store, "leader")
        time.sleep(0.4)
        runner.finish()
        assert len(store.queue("jobs").claim_batch("w", 1000)) == 64
        next_fire = store.schedule("tick", "@every 1s", "jobs", 1).next_fire_at
        assert time.time() < next_fire <= time.time() + 1
    finally:
        store.close()


def test_a_leader_that_loses_its_lock_raises_leadership_lost(path: str) -> None:
    store = alkstore.open(path, scheduler_lease_s=0.3)
    try:
        runner = Runner(store, "leader")
        time.sleep(0.1)
        with store.transaction() as tx:  # another process stole leadership
            tx.execute(
                "UPDATE __alkstore_locks SET owner = 'usurper', expires_at = ? WHERE name = ?",
                (time.time() + 60, SCHEDULER_LOCK),
            )
        runner.thread.join(3)
        assert not runner.thread.is_alive()
        runner.finish()
        assert len(runner.errors) == 1
        assert isinstance(runner.errors[0], alkstore.LeadershipLost)
    finally:
        store.close()
