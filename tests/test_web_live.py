"""The dashboard's live overview on each engine, through a real server: the
tables are pushed as server-sent events after another process enqueues.

The app runs under uvicorn in a thread; the enqueue is a CLI process. How the
reads behind it are shared and woken is tested in alkstore-core's own
tests (test_web_overview.py).
"""

from __future__ import annotations

import importlib
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from html import unescape
from typing import Any

import pytest
import uvicorn

import alkstore
from alkstore.web import alkstore_web_app

httpx: Any = importlib.import_module("httpx2" if sys.version_info >= (3, 11) else "httpx")

WAIT_S = 20.0


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


def test_a_live_update_carries_every_name_unchanged(dsn: str, served: str) -> None:
    """Events are split into lines where the event stream format breaks them
    (CR, LF) and nowhere else: U+2028 and its like stay inside a name."""
    names = {"u\u2028x\u2029y\x85z\x0bv\x1cw", "cr\r", "lf\nend"}
    with alkstore.open(dsn) as store:
        for name in names:
            store.queue(name).enqueue(1)
    with (
        httpx.Client(timeout=WAIT_S) as http,
        http.stream("GET", f"{served}/events") as response,
    ):
        received = ""
        for chunk in response.iter_text():  # not iter_lines: it splits at U+2028 too
            received += chunk
            if re.search(r"event: overview\n(data: [^\r\n]*\n)+\n", received):
                break
    found = re.search(r"event: overview\n((?:data: [^\r\n]*\n)+)\n", received)
    assert found, received
    html = "\n".join(line[len("data: ") :] for line in found[1].split("\n")[:-1])
    assert {unescape(value) for value in re.findall(r'data-queue="([^"]*)"', html)} == names
