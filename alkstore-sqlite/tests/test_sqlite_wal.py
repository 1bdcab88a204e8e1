"""The WAL stays bounded under readers that never all pause at once.

SQLite's own checkpoints copy pages after commits but restart the WAL only
when no reader is using it; with a worker claiming or a consumer reading
all the time, that moment never comes and the WAL would grow for as long as
the writes go on (checkpoint starvation). The pool restarts it past 16 MiB.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

import alkstore
from alkstore_sqlite._pool import _WAL_RESTART_BYTES

PAYLOAD = "x" * 16_000
WRITES = 3_000
"""About 48 MB of events: three times the size at which the WAL restarts."""
HOLD_S = 0.03
"""How long each reader keeps its snapshot; the two overlap by half of it."""


def test_the_wal_stays_bounded_while_readers_overlap(path: str) -> None:
    alkstore.open(path).close()
    wal = f"{path}-wal"
    stop = threading.Event()

    def read_all_the_time(start_after_s: float) -> None:
        time.sleep(start_after_s)
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            while not stop.is_set():
                connection.execute("BEGIN")
                connection.execute("SELECT MAX(id) FROM __alkstore_events").fetchall()
                time.sleep(HOLD_S)
                connection.execute("COMMIT")
        finally:
            connection.close()

    readers = [threading.Thread(target=read_all_the_time, args=(n * HOLD_S / 2,)) for n in range(2)]
    for reader in readers:
        reader.start()
    peak = 0
    try:
        time.sleep(HOLD_S)
        with alkstore.open(path) as store:
            stream = store.stream("big")
            for n in range(WRITES):
                stream.publish(PAYLOAD)
                if n % 50 == 0:
                    peak = max(peak, os.path.getsize(wal))
    finally:
        stop.set()
        for reader in readers:
            reader.join(30)
    assert peak > 0
    assert peak < 2 * _WAL_RESTART_BYTES, f"the WAL grew to {peak / 2**20:.0f} MiB"
