"""Runners refuse what cannot be their store, stream or stop signal up front,
with a TypeError that says what fits, never an AttributeError from deep inside."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import alkstore
from alkstore import Consumer, Worker


@pytest.fixture
def store(tmp_path: Path) -> Iterator[alkstore.Store]:
    with alkstore.open(tmp_path / "app.db") as opened:
        yield opened


def ignore(_: object) -> None:
    """A handler that does nothing."""


@pytest.mark.parametrize("store_given", [None, "app.db", object()])
def test_a_runner_wants_a_store(store_given: object) -> None:
    with pytest.raises(TypeError, match=r"store must be a Store .* or an AsyncStore"):
        Worker(store_given, "jobs", ignore)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"store must be a Store .* or an AsyncStore"):
        Consumer(store_given, "events", "reader", ignore)  # type: ignore[arg-type]


def test_a_consumer_wants_a_stream_or_its_name(store: alkstore.Store) -> None:
    with pytest.raises(TypeError, match="stream must be a name or a stream, not NoneType"):
        Consumer(store, None, "reader", ignore)  # type: ignore[arg-type]


@pytest.mark.parametrize("stop", [None, "stop", True, threading.Lock(), asyncio.Event()])
def test_sync_runs_want_an_event(store: alkstore.Store, stop: object) -> None:
    match = r"stop must be a threading\.Event"
    with pytest.raises(TypeError, match=match):
        Worker(store, "jobs", ignore).run(stop)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=match):
        Consumer(store, "events", "reader", ignore).run(stop)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=match):
        store.run_schedules(stop)  # type: ignore[arg-type]


def test_async_runs_want_an_event(tmp_path: Path) -> None:
    async def body() -> None:
        async with alkstore.open_async(tmp_path / "app.db") as store:
            match = r"stop must be an asyncio\.Event"
            with pytest.raises(TypeError, match=match):
                await Worker(store, "jobs", ignore).run_async("stop")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=match):
                await Consumer(store, "events", "reader", ignore).run_async(1)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=match):
                await store.run_schedules(None)  # type: ignore[arg-type]

    asyncio.run(asyncio.wait_for(body(), 30))
