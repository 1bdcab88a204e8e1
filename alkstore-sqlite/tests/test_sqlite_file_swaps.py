"""A store whose file is deleted or replaced under it refuses to go on.

The connections it holds keep the old file open: what they would write
then reaches no other process (a new store on the path opens another file)
and is gone with the last of them. So every call raises ``Database`` naming
the path, within a tenth of a second without a listener, at once after the
wake watcher has seen it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

import pytest

import alkstore
from alkstore_sqlite import SQLiteStore
from alkstore_sqlite._file_identity import LOOK_EVERY_S

Swap = tuple[Callable[[str], None], str]
"""The ``file_swap`` fixture (conftest): a way the file goes, and what the error says."""

CALLS: dict[str, Callable[[SQLiteStore], object]] = {
    "enqueue": lambda store: store.queue("emails").enqueue("lost?"),
    "claim": lambda store: store.queue("emails").claim_one("w"),
    "publish": lambda store: store.stream("orders").publish("lost?"),
    "notify": lambda store: store.notify("orders", "lost?"),
    "begin_tx": lambda store: store.begin_tx().enqueue_tx("emails", None, "lost?"),
    "try_lock": lambda store: store.try_lock("nightly", "me", 30),
    "inspect": lambda store: store.inspect().queues(),
}


def test_every_call_is_refused_once_the_file_is_swapped(
    store: SQLiteStore, file_swap: Swap
) -> None:
    swap, says = file_swap
    store.queue("emails").enqueue("before")
    swap(store.path)
    time.sleep(LOOK_EVERY_S * 2)
    for name, call in CALLS.items():
        with pytest.raises(alkstore.Database, match=f"{says}.*reopen the store"):
            call(store)
            pytest.fail(f"{name} went on after the swap")
    store.close()  # closing still works


def test_an_async_store_is_refused_too(path: str, file_swap: Swap) -> None:
    swap, says = file_swap

    async def main() -> None:
        async with await alkstore.open_async(path) as store:
            await store.queue("emails").enqueue("before")
            swap(path)
            await asyncio.sleep(LOOK_EVERY_S * 2)
            with pytest.raises(alkstore.Database, match=says):
                await store.queue("emails").enqueue("lost?")
            with pytest.raises(alkstore.Database, match=says):
                await store.stream("orders").publish("lost?")

    asyncio.run(main())


def test_a_swap_the_watcher_sees_is_refused_at_once(store: SQLiteStore, file_swap: Swap) -> None:
    swap, says = file_swap
    wakes = store.listen("orders")
    swap(store.path)
    assert wakes.recv(5) is None  # the watcher saw it and died
    with pytest.raises(alkstore.Database, match=says):
        store.queue("emails").enqueue("lost?")


def test_a_store_whose_file_stays_goes_on(store: SQLiteStore) -> None:
    queue = store.queue("emails")
    for _ in range(3):
        queue.enqueue("kept")
        time.sleep(LOOK_EVERY_S)
    assert len(queue.claim_batch("w", 10)) == 3


def test_a_path_that_cannot_be_looked_at_is_not_taken_for_a_swap(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(path: str, *args: object, **kwargs: object) -> os.stat_result:
        raise PermissionError(13, "Permission denied", path)

    store.queue("emails").enqueue("before")
    monkeypatch.setattr(os, "stat", refused)
    time.sleep(LOOK_EVERY_S * 2)
    store.queue("emails").enqueue("after")  # the connections still have the file
    monkeypatch.undo()
    assert len(store.queue("emails").claim_batch("w", 10)) == 2
