"""The dashboard's live overview on each engine: reads shared by every viewer and
pushed to them as server-sent events when the store wakes.

A slow read (every queue's counts at a million jobs) is shared: pages render
from the latest and the background reader takes another on each wake. These
tests make every read "slow" (``budget_s=0``) and the period long, so a new
read can only have come from a wake; the server test runs the app under
uvicorn and enqueues from another process.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

import alkstore
from alkstore.web import alkstore_web_app
from alkstore.web._backlog import Backlog
from alkstore.web._overview import Overview, OverviewRead
from alkstore.web._source import Source

httpx: Any = importlib.import_module("httpx2" if sys.version_info >= (3, 11) else "httpx")

WAIT_S = 20.0
LONG_PERIOD_S = 3600.0


def ready(read: OverviewRead, queue: str) -> int:
    return next(stats.ready for stats in read.queues if stats.name == queue)


def shared_overview(store: alkstore.Store | alkstore.AsyncStore) -> Overview:
    """An overview whose every read is shared and only a wake brings the next."""
    return Overview(Source(store), Backlog(), budget_s=0.0, period_s=LONG_PERIOD_S, min_gap_s=0.05)


def test_a_slow_read_is_shared_and_the_next_comes_on_a_wake(dsn: str) -> None:
    async def scenario() -> None:
        with alkstore.open(dsn) as store:
            store.queue("mail").enqueue(1)
            overview = shared_overview(store)
            first = await overview.current()
            assert ready(first, "mail") == 1
            again = await overview.current()
            assert again.number == first.number, "a shared read is served, not repeated"
            await asyncio.sleep(0.2)  # the background reader now watches "mail"
            await asyncio.to_thread(store.queue("mail").enqueue, 2)
            woken = await overview.next_after(first.number, WAIT_S)
            assert woken is not None, "no read followed the enqueue's wake"
            assert ready(woken, "mail") == 2
            assert (await overview.current()).number >= woken.number

    asyncio.run(scenario())


def test_an_async_store_shares_its_reads_alike(dsn: str) -> None:
    async def scenario() -> None:
        async with alkstore.open_async(dsn) as store:
            await store.queue("mail").enqueue(1)
            overview = shared_overview(store)
            first = await overview.current()
            await asyncio.sleep(0.2)
            await store.queue("mail").enqueue(2)
            woken = await overview.next_after(first.number, WAIT_S)
            assert woken is not None
            assert ready(woken, "mail") == 2

    asyncio.run(scenario())


def test_cheap_reads_are_taken_per_page_and_never_older_than_it(dsn: str) -> None:
    async def scenario() -> None:
        with alkstore.open(dsn) as store:
            overview = Overview(Source(store), Backlog(), budget_s=3600.0)
            numbers = []
            for expected in range(1, 4):
                store.queue("mail").enqueue(expected)
                read = await overview.current()
                assert ready(read, "mail") == expected
                numbers.append(read.number)
            assert numbers == sorted(set(numbers))

    asyncio.run(scenario())


def test_a_failing_background_read_is_kept_as_the_failure_and_retried(dsn: str) -> None:
    async def scenario() -> None:
        store = alkstore.open(dsn)
        store.queue("mail").enqueue(1)
        overview = Overview(Source(store), Backlog(), budget_s=0.0, period_s=0.2, min_gap_s=0.05)
        first = await overview.current()
        store.close()
        deadline = time.monotonic() + WAIT_S
        while overview.failure is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert overview.failure is not None
        assert "closed" in overview.failure.lower()
        assert await overview.next_after(first.number, 0.5) is None, "no read came of it"
        with pytest.raises(alkstore.Closed):
            await overview.current()  # a page's own read: a 503 page
        assert "Overview of" in repr(overview)

    asyncio.run(scenario())


# Server-sent events through a real server


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def served(dsn: str) -> Iterator[str]:
    """``alkstore_web_app`` under uvicorn in a thread; its base URL."""
    with alkstore.open(dsn) as store:
        port = free_port()
        config = uvicorn.Config(
            alkstore_web_app(store), host="127.0.0.1", port=port, log_level="warning",
            timeout_graceful_shutdown=1,
        )  # fmt: skip
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + WAIT_S
        while not server.started:
            assert thread.is_alive(), "uvicorn stopped"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            thread.join(WAIT_S)


def events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event name, data) of each server-sent event, comments skipped."""
    name, data = "message", list[str]()
    for line in lines:
        if line == "":
            if data:
                yield name, "\n".join(data)
            name, data = "message", list[str]()
        elif line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data.append(line[len("data: ") :])


def mail_ready(html: str) -> int | None:
    found = re.search(r'<tr data-queue="mail">.*?<td class="n ready">(\d+)', html, re.S)
    return None if found is None else int(found[1])


def test_live_viewers_are_sent_the_tables_after_another_process_enqueues(
    dsn: str, served: str
) -> None:
    with alkstore.open(dsn) as store:
        store.queue("mail").enqueue(1)
    seen = []
    with (
        httpx.Client(timeout=WAIT_S) as http,
        http.stream("GET", f"{served}/events") as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        for number, (name, html) in enumerate(events(response.iter_lines())):
            assert name == "overview"
            assert "<html" not in html
            seen.append(mail_ready(html))
            if number == 0:
                enqueue = [sys.executable, "-m", "alkstore._cli", "--dsn", dsn]
                done = subprocess.run(
                    [*enqueue, "enqueue", "mail", "2"], capture_output=True, timeout=60, check=False
                )
                assert done.returncode == 0, done.stderr
            if seen[-1] == 2:
                break
    assert seen[0] == 1
    assert seen[-1] == 2
