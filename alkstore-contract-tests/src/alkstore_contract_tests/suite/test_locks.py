"""Named locks: exclusion bounded by a TTL."""

from __future__ import annotations

import threading
import time

import alkstore
from alkstore.engine import StoreTarget, TestProvider
from alkstore_contract_tests.suite._support import needs


def test_a_held_lock_excludes_other_owners_until_released(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    lock = store.try_lock("report", "a", 10)
    assert lock is not None
    assert (lock.name, lock.owner) == ("report", "a")
    assert peer.try_lock("report", "b", 10) is None
    assert lock.release()
    assert not lock.release()
    assert peer.try_lock("report", "b", 10) is not None


def test_after_ttl_expiry_anyone_may_acquire_and_the_old_handle_has_lost_it(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    old = store.try_lock("report", "a", 0.2)
    assert old is not None
    time.sleep(0.3)
    new = peer.try_lock("report", "b", 10)
    assert new is not None
    assert not old.renew()
    assert not old.release()
    assert new.renew(10)
    assert store.try_lock("report", "a", 1) is None


def test_the_same_owner_reacquiring_gets_a_handle_without_a_fresh_ttl(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    assert store.try_lock("report", "a", 0.4) is not None
    time.sleep(0.1)
    assert peer.try_lock("report", "a", 30) is not None
    time.sleep(0.45)  # past the first TTL: the re-acquire did not extend it
    assert peer.try_lock("report", "b", 1) is not None


def test_an_expired_lock_nobody_took_can_be_neither_renewed_nor_released(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    lock = store.try_lock("report", "a", 0.1)
    assert lock is not None
    time.sleep(0.2)
    assert not lock.renew(10), "exclusion lapsed: renewing would pretend it never did"
    assert not lock.release()
    assert peer.try_lock("report", "b", 10) is not None


def test_a_free_lock_is_acquired_whatever_its_ttl(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    """A TTL too small to move the clock still acquires a free lock (a handle, not
    None, which says another owner holds it); the lock has lapsed at once."""
    for n, ttl in enumerate((1e-9, 1e-7, 1e-6)):
        lock = store.try_lock(f"tiny {n}", "a", ttl)
        assert lock is not None, f"try_lock with ttl={ttl:g} on a free name"
        time.sleep(0.01)
        assert peer.try_lock(f"tiny {n}", "b", 10) is not None


def test_renew_extends_a_held_lock_from_now(store: alkstore.Store, peer: alkstore.Store) -> None:
    lock = store.try_lock("report", "a", 0.2)
    assert lock is not None
    assert lock.renew(5)
    time.sleep(0.3)
    assert peer.try_lock("report", "b", 1) is None


def test_concurrent_try_lock_has_one_winner_and_losers_get_none(store: alkstore.Store) -> None:
    results: list[object] = []
    barrier = threading.Barrier(8)

    def contend(owner: str) -> None:
        barrier.wait()
        results.append(store.try_lock("hot", owner, 10))

    threads = [threading.Thread(target=contend, args=(f"o{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert sum(result is not None for result in results) == 1


def test_a_lock_used_as_a_context_manager_is_released(
    store: alkstore.Store, peer: alkstore.Store
) -> None:
    lock = store.try_lock("report", "a", 10)
    assert lock is not None
    with lock:
        assert peer.try_lock("report", "b", 10) is None
    assert peer.try_lock("report", "b", 10) is not None


def test_a_lock_expired_behind_its_holders_back_is_lost(
    provider: TestProvider, target: StoreTarget, store: alkstore.Store, peer: alkstore.Store
) -> None:
    needs(provider, "expire_lock")
    lock = store.try_lock("report", "a", 60)
    assert lock is not None
    provider.expire_lock(target, "report")
    assert peer.try_lock("report", "b", 60) is not None
    assert not lock.renew()
