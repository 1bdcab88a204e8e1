"""Trimming on SQLite, where offsets are rowids shared by every stream.

SQLite gives a new row ``MAX(rowid) + 1``: deleting the table's newest row
would hand its id out again. The trim keeps that one row, emptied, behind
the stream's ``trimmed_through``, and deletes in chunks.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing

from alkstore_sqlite._store import SQLiteStore
from alkstore_sqlite._stream import _TRIM_CHUNK


def rows_of(path: str, stream: str) -> list[tuple[int, str]]:
    with closing(sqlite3.connect(path)) as connection:
        return connection.execute(
            "SELECT id, payload FROM __alkstore_events WHERE stream = ? ORDER BY id", (stream,)
        ).fetchall()


def test_trimming_the_newest_row_reuses_no_id_for_any_stream(store: SQLiteStore, path: str) -> None:
    orders = store.stream("orders")
    offsets = [orders.publish(n) for n in range(3)]
    receiver = store.stream("audit").subscribe("watcher")
    try:
        assert orders.trim(offsets[-1]) == 3
        assert rows_of(path, "orders") == [(offsets[-1], "null")], "the newest row stays, emptied"
        audited = store.stream("audit").publish("a")
        assert audited > offsets[-1]
        event = receiver.recv(timeout=5)
        assert event is not None
        assert event.offset == audited, "the watcher saw the new id"
    finally:
        receiver.close()
    assert orders.publish(3) > audited
    assert orders.trim(offsets[-1]) == 0
    assert rows_of(path, "orders")[0][0] > offsets[-1], "a later trim takes the emptied row"


def test_a_trim_bigger_than_a_chunk_deletes_everything_it_counts(
    store: SQLiteStore, path: str
) -> None:
    count = _TRIM_CHUNK * 2 + 7
    with store.transaction() as tx:
        for n in range(count):
            tx.publish_tx("orders", n)
    store.stream("other").publish("newest")  # so no orders row is the table's newest
    orders = store.stream("orders")
    assert orders.retain(keep_last=5) == count - 5
    assert [payload for _, payload in rows_of(path, "orders")] == [
        str(n) for n in range(count - 5, count)
    ]
