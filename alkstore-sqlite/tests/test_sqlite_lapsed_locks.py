"""Lock rows nobody releases: once lapsed for a while, swept, a window at a time,
so a store whose lock names never repeat stays bounded."""

from __future__ import annotations

import contextlib
import sqlite3
import time

from alkstore_sqlite import SQLiteStore
from alkstore_sqlite._lock import SWEEP_EVERY, SWEEP_GRACE_S, SWEEP_WINDOW

LAPSED = 5_000
HELD = 100


def lock_rows(path: str, where: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        query = f"SELECT count(*) FROM __alkstore_locks WHERE {where}"
        (count,) = connection.execute(query).fetchone()
    return int(count)


def test_locks_lapsed_past_the_grace_are_swept_and_held_ones_kept(
    store: SQLiteStore, path: str
) -> None:
    now = time.time()
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.executemany(
            "INSERT INTO __alkstore_locks (name, owner, expires_at) VALUES (?, ?, ?)",
            [(f"gone-{n:05}", "crashed", now - 3600) for n in range(LAPSED)]
            + [(f"just-lapsed-{n:03}", "slow", now - SWEEP_GRACE_S / 2) for n in range(HELD)],
        )
    held = [store.try_lock(f"held-{n:03}", "me", 600) for n in range(HELD)]
    assert all(held)
    # Enough attempts for a sweep of every window: the table holds 5,200 names.
    for n in range(SWEEP_EVERY * (LAPSED // SWEEP_WINDOW + 2)):
        lock = store.try_lock(f"marker-{n:06}", "me", 0.001)  # a TTL marker, left to lapse
        assert lock is not None
    assert lock_rows(path, "owner = 'crashed'") == 0
    assert lock_rows(path, "owner = 'slow'") == HELD, "lapsed within the grace: kept"
    assert lock_rows(path, "name LIKE 'held-%'") == HELD
    assert all(lock is not None and lock.renew(600) for lock in held)
    assert {info.name for info in store.inspect().locks()} == {f"held-{n:03}" for n in range(HELD)}


def test_a_swept_lock_reads_as_lapsed_to_its_old_holder(store: SQLiteStore, path: str) -> None:
    lock = store.try_lock("job-42", "worker-a", 0.05)
    assert lock is not None
    time.sleep(0.1)
    with contextlib.closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("DELETE FROM __alkstore_locks WHERE name = 'job-42'")  # as a sweep
    assert not lock.renew(10)
    assert not lock.release()
    assert store.try_lock("job-42", "worker-b", 10) is not None
