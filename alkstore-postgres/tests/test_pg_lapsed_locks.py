"""Lock rows nobody releases: once lapsed for a while, swept, a window at a time,
so a schema whose lock names never repeat stays bounded."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
from psycopg import sql

from alkstore_postgres import PostgresStore
from alkstore_postgres._lock import SWEEP_EVERY, SWEEP_GRACE_S, SWEEP_WINDOW

OpenStore = Callable[..., PostgresStore]

LAPSED = 5_000
HELD = 100

ADD_LOCKS = """
INSERT INTO {s}.locks (name_key, name, owner, expires_at)
SELECT sha256(convert_to(name, 'UTF8')), name, owner, expires_at FROM (
    SELECT 'gone-' || n AS name, 'crashed' AS owner,
        extract(epoch FROM now()) - 3600 AS expires_at FROM generate_series(1, %(lapsed)s) AS n
    UNION ALL
    SELECT 'just-lapsed-' || n, 'slow', extract(epoch FROM now()) - %(half_grace)s
    FROM generate_series(1, %(held)s) AS n
) AS rows
"""


def lock_rows(dsn: str, schema: str, owner: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}.locks WHERE owner = %s")
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(query.format(sql.Identifier(schema)), (owner,)).fetchone()
    assert row is not None
    return int(row[0])


def test_locks_lapsed_past_the_grace_are_swept_and_held_ones_kept(
    dsn: str, schema: str, open_store: OpenStore
) -> None:
    store = open_store()
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            sql.SQL(ADD_LOCKS).format(s=sql.Identifier(schema)),
            {"lapsed": LAPSED, "held": HELD, "half_grace": SWEEP_GRACE_S / 2},
        )
    held = [store.try_lock(f"held-{n:03}", "me", 600) for n in range(HELD)]
    assert all(held)
    # Enough attempts for a sweep of every window: the table holds 5,200 keys.
    for n in range(SWEEP_EVERY * (LAPSED // SWEEP_WINDOW + 2)):
        lock = store.try_lock(f"marker-{n:06}", "marker", 0.001)  # a TTL marker, left to lapse
        assert lock is not None
    assert lock_rows(dsn, schema, "crashed") == 0
    assert lock_rows(dsn, schema, "slow") == HELD, "lapsed within the grace: kept"
    assert lock_rows(dsn, schema, "me") == HELD
    assert all(lock is not None and lock.renew(600) for lock in held)
    assert {info.name for info in store.inspect().locks()} == {f"held-{n:03}" for n in range(HELD)}


def test_a_swept_lock_reads_as_lapsed_to_its_old_holder(
    dsn: str, schema: str, open_store: OpenStore
) -> None:
    store = open_store()
    lock = store.try_lock("job-42", "worker-a", 0.05)
    assert lock is not None
    time.sleep(0.1)
    with psycopg.connect(dsn, autocommit=True) as connection:
        delete = sql.SQL("DELETE FROM {}.locks WHERE name = 'job-42'")  # as a sweep would
        connection.execute(delete.format(sql.Identifier(schema)))
    assert not lock.renew(10)
    assert not lock.release()
    assert store.try_lock("job-42", "worker-b", 10) is not None
