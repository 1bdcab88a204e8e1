"""A page of a queue's jobs reads along the ids or through the queue's index,
whichever reads fewer rows; both give the same page."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import pytest

import alkstore
from alkstore import QueueOpts
from alkstore_sqlite import _sql
from alkstore_sqlite._inspect import _walk_pays

STATES = ("pending", "processing", "dead", None)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A big queue, a small one among it, and each with claims and dead letters."""
    path = str(tmp_path_factory.mktemp("pages") / "mixed.db")
    with alkstore.open(path) as store:
        with store.transaction() as tx:
            for n in range(6_000):
                tx.enqueue_tx("small" if n % 500 == 0 else "big", None, n)
        for name in ("big", "small"):
            queue = store.queue(name, QueueOpts(max_attempts=1))
            for job in queue.claim_batch("w", 5):
                assert job.fail("boom")
            queue.claim_batch("w", 3)
    return path


def rows(
    path: str, state: str | None, along_ids: bool, queue: str, after: int
) -> list[tuple[Any, ...]]:
    params = {"queue": queue, "limit": 7, "after": after}
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return connection.execute(_sql.list_jobs(state, along_ids, along_ids), params).fetchall()


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("queue", ["big", "small"])
def test_both_ways_of_reading_give_the_same_pages(
    mixed: str, state: str | None, queue: str
) -> None:
    after = 0
    for _ in range(4):
        walked = rows(mixed, state, True, queue, after)
        sorted_ = rows(mixed, state, False, queue, after)
        assert walked == sorted_
        if not walked:
            break
        after = walked[-1][0]


def test_a_big_queue_is_walked_along_ids_and_a_small_one_read_by_its_index(mixed: str) -> None:
    with contextlib.closing(sqlite3.connect(mixed)) as connection:

        def walks(queue: str) -> bool:
            params = {"queue": queue, "limit": 50, "after": 0}
            return _walk_pays(connection, _sql.JOBS_SPAN, _sql.PENDING_PART, params)

        assert walks("big")
        assert not walks("small")
        assert not walks("none such")
        assert not _walk_pays(
            connection, _sql.DEAD_SPAN, _sql.DEAD_PART, {"queue": "big", "limit": 50, "after": 0}
        )


def test_inspect_pages_of_either_queue_hold_the_jobs_in_id_order(mixed: str) -> None:
    with alkstore.open(mixed) as store:
        for queue in ("big", "small"):
            listed = []
            after = None
            while page := store.inspect().jobs(queue, "pending", limit=500, after=after):
                listed += [job.id for job in page]
                after = page[-1].id
            assert listed == sorted(listed)
            assert len(listed) == store.inspect().queues()[0 if queue == "big" else 1].ready
